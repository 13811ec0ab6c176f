"""The embedded file backend (design.md §6, docs/storage.md).

Layout under the root, per user::

    <root>/<user_id>/            0700
        events.jsonl             0600  header line, then one JSON event per line
        settings.json            0600  UserSettings
        .lock                    0600  inter-process lock (flock)

Appends are written with one ``write`` to an ``O_APPEND`` descriptor and fsynced before
returning. A torn final line (crash mid-append) is ignored by readers and truncated by the
next writer, under the lock. Whole-file writes go through temp file + fsync + rename +
directory fsync.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import msgspec

from ..errors import StorageError
from ..events import Event, decode_event, encode_event
from .base import LogSnapshot, UserSettings

LOG_NAME = "events.jsonl"
SETTINGS_NAME = "settings.json"
LOCK_NAME = ".lock"
LOG_FORMAT_VERSION = 1


class LogHeader(msgspec.Struct, kw_only=True, tag_field="kind", tag="header"):
    """First line of every log. ``generation`` changes on every rewrite; ``seq_floor`` is the
    highest ``seq`` ever assigned when the log was last rewritten (so ``seq`` is never reused)."""

    v: int = LOG_FORMAT_VERSION
    generation: str
    seq_floor: int = 0


_header_decoder = msgspec.json.Decoder(LogHeader)
_settings_decoder = msgspec.json.Decoder(UserSettings)
_encoder = msgspec.json.Encoder()

_thread_locks: dict[str, threading.Lock] = {}
_thread_locks_guard = threading.Lock()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: temp file, fsync, rename, directory fsync."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


class FileStorage:
    """Per-user JSON-lines event logs under ``root``."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    # -- paths and locking ---------------------------------------------------------------
    def user_dir(self, user_id: str) -> Path:
        return self.root / user_id

    def _ensure_user_dir(self, user_id: str) -> Path:
        d = self.user_dir(user_id)
        if not d.is_dir():
            created_root = not self.root.exists()
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            if created_root:
                os.chmod(self.root, 0o700)
            d.mkdir(mode=0o700, exist_ok=True)
            os.chmod(d, 0o700)
            _fsync_dir(self.root)
        return d

    @contextlib.contextmanager
    def locked(self, user_id: str) -> Iterator[Path]:
        """Hold the user's lock (threads of this process and other processes)."""
        d = self._ensure_user_dir(user_id)
        key = str(d.resolve())
        with _thread_locks_guard:
            tlock = _thread_locks.setdefault(key, threading.Lock())
        with tlock:
            fd = os.open(d / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield d
            finally:
                os.close(fd)

    # -- queries ---------------------------------------------------------------------------
    def user_exists(self, user_id: str) -> bool:
        d = self.user_dir(user_id)
        return (d / LOG_NAME).exists() or (d / SETTINGS_NAME).exists()

    def read_events(
        self, user_id: str, *, generation: str | None = None, start: int = 0
    ) -> LogSnapshot:
        path = self.user_dir(user_id) / LOG_NAME
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return LogSnapshot(events=[], generation="", end=0)
        header_end = data.find(b"\n")
        if header_end < 0:  # header itself torn: an empty log
            return LogSnapshot(events=[], generation="", end=0)
        header = self._decode_header(data[:header_end], path)
        if generation != header.generation or start <= header_end:
            start = header_end + 1
        last_nl = data.rfind(b"\n")
        events: list[Event] = []
        if last_nl >= start:
            lineno_base = data.count(b"\n", 0, start) + 1
            for i, line in enumerate(data[start:last_nl].split(b"\n")):
                try:
                    events.append(decode_event(line))
                except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                    raise StorageError(
                        f"{path}: line {lineno_base + i} is not a valid event ({exc}); "
                        "the log is corrupt — restore it from a backup or export"
                    ) from exc
        return LogSnapshot(events=events, generation=header.generation, end=max(start, last_nl + 1))

    @staticmethod
    def _decode_header(line: bytes, path: Path) -> LogHeader:
        try:
            return _header_decoder.decode(line)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise StorageError(f"{path}: bad log header ({exc})") from exc

    # -- writes ------------------------------------------------------------------------------
    def append(self, user_id: str, events: Sequence[Event]) -> list[Event]:
        if not events:
            return []
        with self.locked(user_id) as d:
            path = d / LOG_NAME
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                last_seq = self._prepare_tail(fd, path)
                out: list[Event] = []
                chunks: list[bytes] = []
                for ev in events:
                    last_seq += 1
                    stamped = msgspec.structs.replace(ev, seq=last_seq)
                    out.append(stamped)
                    chunks.append(encode_event(stamped))
                    chunks.append(b"\n")
                payload = memoryview(b"".join(chunks))
                while payload:
                    n = os.write(fd, payload)
                    payload = payload[n:]
                os.fsync(fd)
            finally:
                os.close(fd)
            return out

    def _prepare_tail(self, fd: int, path: Path) -> int:
        """Under the lock: write a header into a new log, repair a torn tail, and return the
        highest ``seq`` assigned so far."""
        size = os.fstat(fd).st_size
        if size == 0:
            header = LogHeader(generation=secrets.token_hex(8))
            os.write(fd, _encoder.encode(header) + b"\n")
            os.fsync(fd)
            _fsync_dir(path.parent)
            return 0
        # Read backwards until the last complete line is found.
        chunk = 4096
        pos = size
        tail = b""
        while True:
            read_from = max(0, pos - chunk)
            tail = os.pread(fd, pos - read_from, read_from) + tail
            pos = read_from
            if tail.count(b"\n") >= 2 or pos == 0:
                break
            chunk *= 2
        if not tail.endswith(b"\n"):
            # Torn final line: drop the incomplete bytes (never a complete event).
            keep = pos + tail.rfind(b"\n") + 1
            if keep <= 0:
                os.ftruncate(fd, 0)
                os.fsync(fd)
                return self._prepare_tail(fd, path)
            os.ftruncate(fd, keep)
            os.fsync(fd)
            tail = tail[: keep - pos]
        lines = tail[:-1].split(b"\n")
        last = lines[-1]
        if pos == 0 and len(lines) == 1:  # only the header
            return self._decode_header(last, path).seq_floor
        try:
            return decode_event(last).seq
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise StorageError(
                f"{path}: last line is not a valid event; refusing to append"
            ) from exc

    def rewrite(self, user_id: str, keep: Callable[[Event], Event | None]) -> int:
        with self.locked(user_id) as d:
            path = d / LOG_NAME
            if not path.exists():
                return 0
            snap = self.read_events(user_id)
            with open(path, "rb") as f:
                first = f.readline()
            old_header = self._decode_header(first.rstrip(b"\n"), path)
            max_seq = max([old_header.seq_floor] + [e.seq for e in snap.events])
            changed = 0
            lines: list[bytes] = []
            for ev in snap.events:
                new = keep(ev)
                if new is not ev:
                    changed += 1
                if new is not None:
                    lines.append(encode_event(new))
            if not changed:
                return 0
            header = LogHeader(generation=secrets.token_hex(8), seq_floor=max_seq)
            body = b"\n".join([_encoder.encode(header), *lines]) + b"\n"
            atomic_write(path, body)
            return changed

    def read_settings(self, user_id: str) -> UserSettings | None:
        path = self.user_dir(user_id) / SETTINGS_NAME
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            return _settings_decoder.decode(data)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise StorageError(f"{path}: unreadable settings ({exc})") from exc

    def write_settings(self, user_id: str, settings: UserSettings) -> None:
        """Atomically replace the settings. Callers doing read-modify-write hold
        :meth:`locked` around both steps."""
        d = self._ensure_user_dir(user_id)
        atomic_write(d / SETTINGS_NAME, _encoder.encode(settings) + b"\n")
