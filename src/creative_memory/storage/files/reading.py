"""Reading a file log (docs/storage.md, "The event log"): its header, the whole log for a
writer that replaces it, and its events line by line when a corrupt line must be named."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import msgspec

from creative_memory.engine.errors import StorageError
from creative_memory.engine.events import Event, decode_event
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
