"""Reading a file log (docs/storage.md, "The event log"): its header, the whole log for a
writer that replaces it, its events line by line when a corrupt line must be named, and its
lines undecoded for a check or a repair."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import msgspec

from creative_memory.engine.erasure_notes import ErasureNote, remember
from creative_memory.engine.errors import LogDamaged, StorageError
from creative_memory.engine.events import Event, decode_event, decode_event_lines
from creative_memory.engine.logcheck import (
    REPAIR_HINT,
    RawLine,
    RawLog,
    highest_handed_out,
    undecodable,
)
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
            raise LogDamaged(
                f"{path}: line {first_lineno + i} is not a valid event ({exc}); {REPAIR_HINT}"
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
_FLOOR = re.compile(rb'"seq_floor"\s*:\s*([0-9]+)')


def unreadable_log(path: Path, note: ErasureNote | None) -> tuple[int, list[ErasureNote], int]:
    """What a full erasure (``note``) needs of the log at ``path`` when its lines no longer
    all decode, read without decoding them (docs/storage.md, "Erasure"): the highest
    ``seq`` it has handed out (:func:`highest_handed_out`: no number is used again), the
    notes the new log keeps (its header's, if readable, and ``note``), and how many event
    lines it holds."""
    raw = raw_log(path) or RawLog(generation="", floor=0, notes=None)
    lines = sum(1 for line in raw.lines if line.data.strip())
    kept = remember(raw.notes or [], note or ErasureNote(), raw.generation)
    return highest_handed_out(raw), kept, lines


def _highest_seq(data: bytes, pattern: re.Pattern[bytes] = _SEQ) -> int | None:
    """The highest ``"seq"`` (``pattern``'s number) ``data`` still shows without being
    decoded (``None``: none)."""
    return max(map(int, pattern.findall(data)), default=None)


def raw_log(path: Path) -> RawLog | None:
    """The log at ``path`` with its events undecoded (docs/storage.md, "Check and repair"):
    ``None`` when there is no log or not even a complete header; a torn final line is left
    out, as every reader leaves it. A header that does not decode is a problem of the
    answer, its floor then the highest ``"seq"`` it still shows."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    head_end = data.find(b"\n")
    if head_end < 0:
        return None
    head = data[:head_end]
    try:
        header = decode_header(head, path)
    except LogDamaged as exc:
        raw = RawLog(generation="", floor=_highest_seq(head, _FLOOR) or 0, notes=None)
        raw.header_problem = undecodable(exc)
    else:
        raw = RawLog(generation=header.generation, floor=header.seq_floor, notes=header.notes())
    last_nl = data.rfind(b"\n")
    if last_nl > head_end:  # complete lines after the header
        body = data[head_end + 1 : last_nl]
        raw.lines = [
            RawLine(where=f"line {i}", seq=_highest_seq(line), data=line)
            for i, line in enumerate(body.split(b"\n"), 2)
        ]
    return raw


# The chain hash of an event line. Events are encoded with ``h`` before any free-text field,
# and quotes inside JSON strings are escaped, so the first match is the event's own ``h``.
_H_RE = re.compile(rb'"h":"([0-9a-f]{32})"')


def read_back_to_cached(
    fd: int, path: Path, header_end: int, size: int, is_cached: Callable[[str], bool]
) -> tuple[str | None, int, int, bytes]:
    """The log open as ``fd`` read backwards from ``size`` (its header ``header_end``
    bytes long) until a line whose chain hash is cached: that hash (``None``: none is), the
    offset after its line, the end of the last complete line, and the bytes between."""
    chunk = 1 << 16
    buf_start = max(header_end, size - chunk)
    buf = os.pread(fd, size - buf_start, buf_start)
    end = buf_start + buf.rfind(b"\n") + 1 if b"\n" in buf else header_end
    while end == header_end and buf_start > header_end:  # a huge torn tail
        new_start = max(header_end, buf_start - chunk)
        buf = os.pread(fd, buf_start - new_start, new_start) + buf
        buf_start = new_start
        nl = buf.rfind(b"\n")
        end = buf_start + nl + 1 if nl >= 0 else header_end
    base: str | None = None
    cut = header_end
    line_end = end - 1  # absolute offset of the newline ending the current line
    while line_end >= header_end:
        while True:
            prev = buf.rfind(b"\n", 0, line_end - buf_start)
            if prev >= 0 or buf_start <= header_end:
                break
            chunk *= 2
            new_start = max(header_end, buf_start - chunk)
            buf = os.pread(fd, buf_start - new_start, new_start) + buf
            buf_start = new_start
        line_start = buf_start + prev + 1 if prev >= 0 else header_end
        m = _H_RE.search(buf, line_start - buf_start, line_end - buf_start)
        if m is not None and is_cached(m.group(1).decode()):
            base, cut = m.group(1).decode(), line_end + 1
            break
        line_end = line_start - 1
    if cut < buf_start:  # pragma: no cover - the walk always reads back to `cut`
        raise StorageError(f"{path}: internal error reading the log")
    body = buf[cut - buf_start : end - 1 - buf_start] if end - 1 > cut else b""
    return base, cut, end, body
