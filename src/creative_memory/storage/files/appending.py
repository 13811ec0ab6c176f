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

from creative_memory.engine.errors import StorageError
from creative_memory.engine.events import CHAIN_GENESIS, Event, decode_event
from creative_memory.storage.files.fsutil import fsync_dir

LOG_FORMAT_VERSION = 1


class LogHeader(msgspec.Struct, kw_only=True, tag_field="kind", tag="header"):
    """First line of every log. ``generation`` changes on every rewrite; ``seq_floor`` is the
    highest ``seq`` ever assigned when the log was last rewritten (so ``seq`` is never reused)."""

    v: int = LOG_FORMAT_VERSION
    generation: str
    seq_floor: int = 0


_header_decoder = msgspec.json.Decoder(LogHeader)
#: The JSON encoder of the log's header (and the backend's other small documents).
encoder = msgspec.json.Encoder()


def decode_header(line: bytes, path: Path) -> LogHeader:
    """The header of the log at ``path`` from its first line (a ``StorageError`` if bad)."""
    try:
        return _header_decoder.decode(line)
    except msgspec.DecodeError as exc:
        raise StorageError(f"{path}: bad log header ({exc})") from exc


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
    first = os.pread(fd, 4096, 0)
    header_line = first[: first.find(b"\n")] if b"\n" in first else first
    header = decode_header(header_line, path)
    return max(ev.seq, header.seq_floor), ev.h, header.generation


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


def decode_lines(data: bytes, path: Path, first_lineno: int) -> list[Event]:
    """The events of the log lines ``data`` (the first is line ``first_lineno`` of the file
    at ``path``), one at a time: a bad line is a ``StorageError`` naming it."""
    events: list[Event] = []
    if not data:
        return events
    for i, line in enumerate(data.split(b"\n")):
        try:
            events.append(decode_event(line))
        except msgspec.DecodeError as exc:
            raise StorageError(
                f"{path}: line {first_lineno + i} is not a valid event ({exc}); "
                "the log is corrupt — restore it from a backup or an export"
            ) from exc
    return events


def read_whole_log(path: Path) -> tuple[LogHeader | None, list[Event], bytes]:
    """The log at ``path`` read whole (by a writer holding its lock): its header (``None``:
    no log, or not even a complete header), its events, and its bytes up to the end of the
    last complete line (a torn final line left out)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None, [], b""
    header_end = data.find(b"\n") + 1
    if header_end == 0:  # empty, or the header itself torn: no events
        return None, [], b""
    header = decode_header(data[: header_end - 1], path)
    last_nl = data.rfind(b"\n")
    return header, decode_lines(data[header_end:last_nl], path, 2), data[: last_nl + 1]
