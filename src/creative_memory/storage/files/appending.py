"""Appending to a file log (docs/storage.md): the header line and the tail a writer
continues from (a torn final line repaired). Group commit — the appends of one user that
queue while a write is in flight share the next write and its fsync — is the shared
:mod:`creative_memory.storage.groupcommit`.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import BinaryIO

import msgspec

from creative_memory.engine.erasure_notes import ErasureNote
from creative_memory.engine.errors import LogDamaged, StorageError
from creative_memory.engine.events import CHAIN_GENESIS, decode_event
from creative_memory.engine.logcheck import REPAIR_HINT
from creative_memory.storage.files.fsutil import fsync_dir

LOG_FORMAT_VERSION = 1


class LogHeader(msgspec.Struct, kw_only=True, tag_field="kind", tag="header"):
    """First line of every log. ``generation`` changes on every rewrite; ``seq_floor`` is the
    highest ``seq`` ever assigned when the log was last rewritten (so ``seq`` is never reused);
    ``erasures``: the notes of the latest rewrites (docs/storage.md, "Erasure notes"),
    absent until the first one."""

    v: int = LOG_FORMAT_VERSION
    generation: str
    seq_floor: int = 0
    erasures: list[ErasureNote] | msgspec.UnsetType = msgspec.UNSET

    def notes(self) -> list[ErasureNote]:
        """The erasure notes the header keeps (none when absent)."""
        return [] if self.erasures is msgspec.UNSET else list(self.erasures)


_header_decoder = msgspec.json.Decoder(LogHeader)
#: The JSON encoder of the log's header (and the backend's other small documents).
encoder = msgspec.json.Encoder()


def decode_header(line: bytes, path: Path) -> LogHeader:
    """The header of the log at ``path`` from its first line (a ``StorageError`` if bad)."""
    try:
        return _header_decoder.decode(line)
    except msgspec.DecodeError as exc:
        raise LogDamaged(f"{path}: bad log header ({exc}); {REPAIR_HINT}") from exc


def prepare_tail(fd: int, path: Path) -> tuple[int, str, str]:
    """Under the lock: write a header into a new log and repair a torn tail. Returns the
    highest ``seq`` assigned so far, the chain hash of the last event and the log's
    generation."""
    size = os.fstat(fd).st_size
    if size == 0:
        header = LogHeader(generation=secrets.token_hex(8))
        os.write(fd, encoder.encode(header) + b"\n")
        os.fsync(fd)
        fsync_dir(path.parent)
        return 0, CHAIN_GENESIS, header.generation
    chunk = 4096
    pos = size
    tail = b""
    while True:  # read backwards until the last complete line is isolated
        read_from = max(0, pos - chunk)
        tail = os.pread(fd, pos - read_from, read_from) + tail
        pos = read_from
        if tail.count(b"\n") >= 2 or pos == 0:
            break
        chunk *= 2
    if not tail.endswith(b"\n"):
        # Torn final line (a crash mid-append): drop the incomplete bytes. A complete
        # event always ends with a newline, so nothing acknowledged is lost.
        keep = pos + tail.rfind(b"\n") + 1
        os.ftruncate(fd, keep)
        os.fsync(fd)
        if keep == 0:  # even the header was torn
            return prepare_tail(fd, path)
        tail = tail[: keep - pos]
    lines = tail[:-1].split(b"\n")
    last = lines[-1]
    if pos == 0 and len(lines) == 1:  # only the header
        only = decode_header(last, path)
        return only.seq_floor, CHAIN_GENESIS, only.generation
    try:
        ev = decode_event(last)
    except msgspec.DecodeError as exc:
        raise StorageError(f"{path}: last line is not a valid event; refusing to append") from exc
    # The header's floor covers erased events that were newer than every survivor.
    header = decode_header(read_header_line(fd), path)
    return max(ev.seq, header.seq_floor), ev.h, header.generation


def read_header_line(fd: int) -> bytes:
    """The log's first line (without its newline), however long its erasure notes make it."""
    size = 4096
    while True:
        first = os.pread(fd, size, 0)
        nl = first.find(b"\n")
        if nl >= 0:
            return first[:nl]
        if len(first) < size:
            return first
        size *= 4


READ_CHUNK = 1 << 20  # bytes of the log read (and decoded) at a time


def count_newlines(f: BinaryIO, end: int) -> int:
    """How many newlines ``f`` holds from where it stands up to byte ``end`` (what a stat
    saw: an append landing meanwhile is counted next time, not twice)."""
    n = 0
    left = end - f.tell()
    while left > 0 and (block := f.read(min(READ_CHUNK, left))):
        n += block.count(b"\n")
        left -= len(block)
    return n
