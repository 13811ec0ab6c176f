"""Reading a file log (docs/storage.md, "The event log"): its header, the whole log for a
writer that replaces it, and its events line by line when a corrupt line must be named."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import BinaryIO

import msgspec

from creative_memory.engine.erasure_notes import ErasureNote, remember
from creative_memory.engine.errors import StorageError
from creative_memory.engine.events import Event, decode_event, decode_event_lines
from creative_memory.storage.files.appending import LogHeader, decode_header


def decode_lines(data: bytes, path: Path, first_lineno: int) -> list[Event]:
    """The events of ``data`` (lines of the log at ``path``, the first of them line
    ``first_lineno``); a ``StorageError`` naming the first line that is not an event."""
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


def decode_chunk(data: bytes | memoryview, path: Path, fd: int, offset: int) -> list[Event]:
    """The events of ``data`` — the bytes from ``offset`` on of the log open as ``fd``
    — in one call; on a bad line, the per-line decoder names it by its line number in
    the file (counted then, from the file's start: only a corrupt log pays for it)."""
    try:
        return decode_event_lines(data)
    except msgspec.DecodeError:
        before = os.pread(fd, offset, 0).count(b"\n")
        return decode_lines(bytes(data), path, before + 1)


def open_with_header(path: Path) -> tuple[BinaryIO, bytes, LogHeader] | None:
    """Open the log positioned after its header line; ``None`` when there is no log or not
    even a complete header (no events)."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - the caller closes it
    except FileNotFoundError:
        return None
    first = f.readline()
    if not first.endswith(b"\n"):
        f.close()
        return None
    try:
        return f, first, decode_header(first[:-1], path)
    except StorageError:
        f.close()
        raise


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


_SEQ = re.compile(rb'"seq"\s*:\s*([0-9]+)')


def unreadable_log(path: Path, note: ErasureNote | None) -> tuple[int, list[ErasureNote], int]:
    """What a full erasure (``note``) needs of the log at ``path`` when its lines no longer
    all decode, read without decoding them (docs/storage.md, "Erasure"): the highest
    ``seq`` any line or the header still shows (so no number is used again), the notes the
    new log keeps (its header's, if readable, and ``note``), and how many event lines it
    holds."""
    data = path.read_bytes()
    head, _, rest = data.partition(b"\n")
    try:
        header: LogHeader | None = decode_header(head, path)
    except StorageError:
        header = None
    floor = max([0 if header is None else header.seq_floor, *map(int, _SEQ.findall(data))])
    lines = sum(1 for line in rest.split(b"\n") if line.strip())
    kept, after = ([], "") if header is None else (header.notes(), header.generation)
    return floor, remember(kept, note or ErasureNote(), after), lines
