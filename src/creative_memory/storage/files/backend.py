"""The embedded file backend (docs/storage.md).

Layout under the root, per user::

    <root>/<user_id>/            0700
        events.jsonl             0600  header line, then one JSON event per line
        settings.json            0600  UserSettings
        snapshot.json            0600  human-readable derived records (written back on read)
        cache/                   0700  derivation cache entries (see cache.py)
        .lock                    0600  inter-process lock (flock)

Appends are written with one ``write`` to an ``O_APPEND`` descriptor and fsynced before
returning; the appends of one user that queue while a write is in flight share the next
write and its fsync (group commit: ``storage/groupcommit.py``). A torn final line (crash
mid-append) is ignored by readers and truncated by the next writer, under the lock.
Whole-file writes go through temp file + fsync + rename + directory fsync.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec

from creative_memory.engine.erasure_notes import ErasureNote, remember
from creative_memory.engine.errors import StorageError
from creative_memory.engine.events import (
    CHAIN_GENESIS,
    Event,
    encode_event,
    numbered_above,
    rechain,
    sequenced,
)
from creative_memory.engine.ids import MAX_ID_LENGTH, is_safe_id
from creative_memory.engine.logcheck import RawLog
from creative_memory.engine.settings import UserSettings
from creative_memory.storage.base import (
    Appended,
    ImportDecision,
    ImportPlan,
    LogRewritten,
    LogSnapshot,
    RepairDecision,
    SettingsSeen,
)
from creative_memory.storage.files.appending import (
    LOG_FORMAT_VERSION as LOG_FORMAT_VERSION,
)
from creative_memory.storage.files.appending import (
    READ_CHUNK,
    LogHeader,
    count_newlines,
    encoder,
    prepare_tail,
)
from creative_memory.storage.files.cache import (
    DEFAULT_CACHE_CAPACITY,
    FileDerivationCache,
    purge_derived,
)
from creative_memory.storage.files.deferred import Deferring
from creative_memory.storage.files.fsutil import NOT_WRITABLE
from creative_memory.storage.files.fsutil import atomic_write as atomic_write
from creative_memory.storage.files.fsutil import fsync_dir as fsync_dir
from creative_memory.storage.files.fsutil import make_private_dir as make_private_dir
from creative_memory.storage.files.locks import UserLocks
from creative_memory.storage.files.reading import (
    decode_chunk,
    open_with_header,
    raw_log,
    read_back_to_cached,
    read_whole_log,
    unreadable_log,
)
from creative_memory.storage.files.settings import SettingsReader
from creative_memory.storage.files.userdirs import UserDirs
from creative_memory.storage.groupcommit import GroupCommit

LOG_NAME = "events.jsonl"
SETTINGS_NAME = "settings.json"
SNAPSHOT_NAME = "snapshot.json"


class FileStorage:
    """Per-user JSON-lines event logs under ``root``."""

    def __init__(
        self, root: str | os.PathLike[str], *, cache_capacity: int = DEFAULT_CACHE_CAPACITY
    ) -> None:
        self.root = Path(root)
        self.cache_capacity = cache_capacity
        self._caches: dict[str, FileDerivationCache] = {}
        self._dirs = UserDirs(self.root)
        self._locks = UserLocks(self.user_dir)
        self._log_paths: dict[str, Path] = {}
        self._settings_paths: dict[str, Path] = {}
        self._settings = SettingsReader()
        # per user: the log's (inode, size, mtime) when this object last read or wrote it
        # to its end, and its generation — a read from that end finds nothing new while the
        # file is unchanged (an append changes size and mtime, a rewrite the inode)
        self._seen: dict[str, tuple[tuple[int, int, int], str]] = {}
        self._counts: dict[str, tuple[str, int, int]] = {}  # user -> (generation, size, events)
        # per user: the log's (inode, size, mtime) after this object's last append, the tail
        # state at that point (last seq, last chain hash, generation) — reused while the
        # file is unchanged, so an append does not read the log back (docs/storage.md)
        self._tails: dict[str, tuple[tuple[int, int, int], int, str, str]] = {}
        #: group commit (docs/storage.md): concurrent appends of one user share a write and
        #: an fsync; False appends one call at a time (the benchmark's reference)
        self.group_commit = True
        self._groups = GroupCommit(self._commit)
        # per user: (inode, size before the write) while a group commit is in flight
        self._inflight: dict[str, tuple[int, int]] = {}
        # per thread: the logs a deferred_sync block wrote, fsynced when it ends
        self._deferring = Deferring(self.locked, self._log_path, self._synced)

    def describe(self) -> str:
        """The storage root, for messages."""
        return str(self.root)

    def _cache(self, user_id: str) -> FileDerivationCache:
        c = self._caches.get(user_id)
        if c is None:
            c = self._caches[user_id] = FileDerivationCache(
                self.user_dir(user_id), self.cache_capacity
            )
        return c

    # -- derived artefacts ---------------------------------------------------------------
    def cache_keys(self, user_id: str) -> set[str]:
        """The keys of the user's derivation-cache entries."""
        return set(self._cache(user_id).keys())

    def cache_get(self, user_id: str, key: str) -> bytes | None:
        """A cache entry (marked recently used), or ``None``."""
        return self._cache(user_id).get(key)

    def write_back(
        self, user_id: str, generation: str, key: str, state: bytes, snapshot: bytes
    ) -> bool:
        """Store a derived state and the snapshot while the generation is unchanged. A
        store this process cannot write (a read-only mount, another account's files) is
        read without them: they are a cache (docs/storage.md, "A store you cannot write")."""
        try:
            with self.locked(user_id):
                if self.generation(user_id) != generation:
                    return False
                self._cache(user_id).put(key, state)
                atomic_write(self.user_dir(user_id) / SNAPSHOT_NAME, snapshot)
                return True
        except OSError as exc:
            if exc.errno in NOT_WRITABLE:
                return False
            raise

    def _purge_derived(self, user_id: str) -> None:
        """Delete the user's derived files (:func:`purge_derived`; the caller holds the lock)."""
        purge_derived(self._cache(user_id), self.user_dir(user_id), SNAPSHOT_NAME)

    # -- paths and locking ---------------------------------------------------------------
    def user_dir(self, user_id: str) -> Path:
        """The user's directory under the root (not created; :class:`UserDirs`)."""
        return self._dirs.of(user_id)

    def _log_path(self, user_id: str) -> Path:
        path = self._log_paths.get(user_id)
        if path is None:
            path = self._log_paths[user_id] = self.user_dir(user_id) / LOG_NAME
        return path

    def _settings_path(self, user_id: str) -> Path:
        path = self._settings_paths.get(user_id)
        if path is None:
            path = self._settings_paths[user_id] = self.user_dir(user_id) / SETTINGS_NAME
        return path

    def ensure_user_dir(self, user_id: str) -> Path:
        """The user's directory, created private (0700) if missing."""
        d = self.user_dir(user_id)
        make_private_dir(d)
        return d

    def locked(self, user_id: str) -> contextlib.AbstractContextManager[None]:
        """Hold the user's lock (threads of this process and other processes)."""
        return self._locks.locked(user_id)

    def lock_is_free(self, user_id: str) -> bool:
        """Whether nobody holds the user's lock at this moment (a hint: it is not taken)."""
        return self._locks.is_free(user_id)

    # -- queries ---------------------------------------------------------------------------
    def user_exists(self, user_id: str) -> bool:
        """Whether the user has a log or settings file."""
        return os.path.exists(self._log_path(user_id)) or os.path.exists(
            self._settings_path(user_id)
        )

    def user_files(self, user_id: str) -> list[str]:
        """Every file under the user's directory, relative, sorted."""
        d = self.user_dir(user_id)
        if not d.is_dir():
            return []
        return sorted(str(p.relative_to(d)) for p in d.rglob("*"))

    def event_count(self, user_id: str) -> int:
        """How many events the log holds: its complete lines after the header (a torn final
        line is not an event), counted without decoding them — and, while the log is the
        same generation and only grows (appends; a rewrite starts a new generation), only
        the bytes added since the last count."""
        path = self._log_path(user_id)
        opened = open_with_header(path)
        if opened is None:
            return 0
        f, _, header = opened
        with f:
            size = self._durable_size(user_id, f.fileno())
            known = self._counts.get(user_id)
            if known is not None and known[0] == header.generation and known[1] <= size:
                f.seek(known[1])
                n = known[2] + count_newlines(f, size)
            else:
                n = count_newlines(f, size)
            f.seek(size - 1)
            clean = f.read(1) == b"\n"
        # a count that ends in a torn line is not continued (a repair truncates the tail)
        if clean:
            self._counts[user_id] = (header.generation, size, n)
        else:
            self._counts.pop(user_id, None)
        return n

    def read_events(
        self,
        user_id: str,
        *,
        generation: str | None = None,
        start: int = 0,
        sink: Callable[[list[Event]], None] | None = None,
    ) -> LogSnapshot:
        """Events from ``start`` while ``generation`` matches, else the whole log."""
        path = self._log_path(user_id)
        seen = self._seen.get(user_id)
        if seen is not None and generation == seen[1] and start == seen[0][1]:
            # the log is as this object last saw it ending at `start`: nothing new to read
            with contextlib.suppress(OSError):
                st = os.stat(path)
                if (st.st_ino, st.st_size, st.st_mtime_ns) == seen[0]:
                    return LogSnapshot(events=[], generation=seen[1], end=start, resumed=True)
        opened = open_with_header(path)
        if opened is None:
            return LogSnapshot(events=[], generation="", end=0)
        f, first, header = opened
        events: list[Event] = []
        with f:
            resumed = generation == header.generation and start >= len(first)
            if not resumed:
                start = len(first)
            f.seek(start)
            end = start
            carry = b""
            left = self._durable_size(user_id, f.fileno()) - start
            while left > 0:  # bounded chunks; a torn final line stays in `carry`, ignored
                block = f.read(min(READ_CHUNK, left))
                if not block:
                    break
                left -= len(block)
                data = carry + block if carry else block
                nl = data.rfind(b"\n")
                if nl < 0:
                    carry = data
                    continue
                chunk = decode_chunk(memoryview(data)[:nl], path, f.fileno(), end)
                carry = data[nl + 1 :]
                end += nl + 1
                if sink is None:
                    events.extend(chunk)
                else:
                    sink(chunk)
            st = os.fstat(f.fileno())
            if st.st_size == end:  # read to the end, no torn tail: remember the file as seen
                self._seen[user_id] = ((st.st_ino, st.st_size, st.st_mtime_ns), header.generation)
        return LogSnapshot(events=events, generation=header.generation, end=end, resumed=resumed)

    def read_after_cached(self, user_id: str, is_cached: Callable[[str], bool]) -> LogSnapshot:
        """Read the log backwards from its end until an event whose chain hash is cached,
        then decode only the events after it: O(k) reading and decoding."""
        path = self._log_path(user_id)
        opened = open_with_header(path)
        if opened is None:
            return LogSnapshot(events=[], generation="", end=0)
        f, first, header = opened
        with f:
            header_end = len(first)
            fd = f.fileno()
            size = max(header_end, self._durable_size(user_id, fd))
            base, cut, end, body = read_back_to_cached(fd, path, header_end, size, is_cached)
            events = decode_chunk(body, path, fd, cut) if body else []
        return LogSnapshot(
            events=events,
            generation=header.generation,
            end=end,
            base=base,
        )

    # -- writes ------------------------------------------------------------------------------
    def append(self, user_id: str, events: Sequence[Event]) -> list[Event]:
        """Durably append ``events``; returns them as stored."""
        return self.append_positioned(user_id, events).events

    def append_positioned(
        self,
        user_id: str,
        events: Sequence[Event],
        *,
        if_settings: SettingsSeen | None = None,
        if_generation: str | None = None,
    ) -> Appended:
        """Append with one write and an fsync, shared with the appends of other threads
        of this process that queue meanwhile (group commit); byte offsets as positions.

        The calls queued for one user while a write is in flight form the next group: its
        first caller (the leader) takes the lock, numbers and chains every queued batch in
        queue order, writes them all with one ``write``, fsyncs once and hands each caller
        its own :class:`Appended`. Nobody returns before the fsync; if the write or the
        fsync fails, every call of the group fails (docs/storage.md, "Group commit").
        Settings are read fresh here (:meth:`recent_settings`): no token to check. An
        append on ``if_generation`` is written alone (checked under the lock)."""
        if if_settings is not None and if_settings.token is not None:
            raise ValueError("if_settings: a token of another storage")
        if not events:
            return Appended(events=[], generation=self.generation(user_id), start=0, end=0)
        scope = self._deferring.scope()
        if scope is not None:  # inside deferred_sync(): written now, fsynced at its end
            scope[user_id] = None
            return self._commit(user_id, [events], sync=False, if_generation=if_generation)[0]
        if not self.group_commit or if_generation is not None:
            return self._commit(user_id, [events], if_generation=if_generation)[0]
        return self._groups.append(user_id, events)

    def deferred_sync(self) -> contextlib.AbstractContextManager[None]:
        """Appends of this thread inside the block are written at once and made durable
        together when it ends, one fsync per log (docs/storage.md, "One fsync for a batch");
        readers of this object see them only then. If that fsync fails, the block raises a
        ``StorageError``: nothing of it may be acknowledged."""
        return self._deferring.block()

    def _synced(self, user_id: str, ok: bool) -> None:
        """The end of a deferred block's fsync of the log (under its lock): every byte of
        the file is durable (``ok``), or unknown on disk: read the tail again next time."""
        self._inflight.pop(user_id, None)
        if not ok:
            self._forget_position(user_id)

    def _commit(
        self,
        user_id: str,
        batches: Sequence[Sequence[Event]],
        *,
        sync: bool = True,
        if_generation: str | None = None,
    ) -> list[Appended]:
        """Under the lock: number and chain ``batches`` in order after the log's tail, write
        them with one ``write`` on an ``O_APPEND`` descriptor and fsync once (``sync``; else
        the end of the deferred_sync block fsyncs, and readers stop before them until then)
        — if the log is still ``if_generation`` (else :class:`LogRewritten`)."""
        with self.locked(user_id):
            path = self._log_path(user_id)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                st = os.fstat(fd)
                tail = self._tails.pop(user_id, None)
                if tail is not None and tail[0] == (st.st_ino, st.st_size, st.st_mtime_ns):
                    _, last_seq, prev_h, generation = tail
                    start = st.st_size
                else:  # first append of this object, or another writer changed the log
                    created = st.st_size == 0
                    last_seq, prev_h, generation = prepare_tail(fd, path)
                    st = os.fstat(fd)
                    start = st.st_size
                    if created and if_generation == "":
                        if_generation = generation  # no log then, a new one now: not rewritten
                if if_generation is not None and generation != if_generation:
                    raise LogRewritten(user_id, generation)
                outs: list[list[Event]] = []
                pieces: list[bytes] = []
                for events in batches:  # seqs and the chain continue in queue order
                    out = sequenced(events, last_seq, prev_h)
                    last_seq, prev_h = out[-1].seq, out[-1].h
                    outs.append(out)
                    pieces.append(b"".join([encode_event(ev) + b"\n" for ev in out]))
                data = b"".join(pieces)
                # readers of this object stop at `start` until the new bytes are durable (or
                # earlier, where a deferred write of this file is not yet synced)
                mark = self._inflight.get(user_id)
                if mark is None or mark[0] != st.st_ino or mark[1] > start:
                    self._inflight[user_id] = (st.st_ino, start)
                try:
                    payload = memoryview(data)
                    while payload:  # on failure the tail state stays dropped: re-read next time
                        n = os.write(fd, payload)
                        payload = payload[n:]
                    if sync:
                        os.fsync(fd)  # every byte of the file is durable from here
                finally:
                    if sync:
                        self._inflight.pop(user_id, None)
                end = start + len(data)
                after = os.fstat(fd)
                if after.st_size == end:
                    stamp = (after.st_ino, end, after.st_mtime_ns)
                    self._seen[user_id] = (stamp, generation)
                    self._tails[user_id] = (stamp, last_seq, prev_h, generation)
            finally:
                os.close(fd)
        appended: list[Appended] = []
        for out, piece in zip(outs, pieces, strict=True):
            end = start + len(piece)
            appended.append(
                Appended(events=out, generation=generation, start=start, end=end, durable=sync)
            )
            start = end
        return appended

    def _durable_size(self, user_id: str, fd: int) -> int:
        """The log's size as a reader of this object may read it: without the bytes of a
        group commit of this object still in flight (written, not yet fsynced)."""
        st = os.fstat(fd)
        inflight = self._inflight.get(user_id)
        if inflight is not None and inflight[0] == st.st_ino and inflight[1] < st.st_size:
            return inflight[1]
        return st.st_size

    def generation(self, user_id: str) -> str:
        """The log's current generation ("" when there is no log)."""
        return self.rewrite_history(user_id)[0]

    def _whole_log(self, user_id: str) -> tuple[LogHeader | None, list[Event], bytes]:
        """Under the lock, for a whole-file write: the log's header (``None``: no log yet),
        its events, and its bytes up to the end of the last complete line (a torn tail
        left out). The tail state and the read position are forgotten (re-read next time)."""
        self._forget_position(user_id)
        return read_whole_log(self._log_path(user_id))

    def _forget_position(self, user_id: str) -> None:
        """Forget the tail state and read position kept for the user's log."""
        self._tails.pop(user_id, None)
        self._seen.pop(user_id, None)

    def _write_log(
        self, user_id: str, events: Sequence[Event], floor: int, notes: list[ErasureNote]
    ) -> None:
        """Replace the log (a new generation; ``notes`` in its header) and delete every
        derived artefact — before the new log is in place as well as after, so a crash
        in between leaves nothing derived from the old content (docs/storage.md,
        "Erasure"). Caller holds the lock."""
        self._purge_derived(user_id)
        lines = [encode_event(ev) for ev in rechain(events)]
        header = LogHeader(
            generation=secrets.token_hex(8), seq_floor=floor, erasures=notes or msgspec.UNSET
        )
        atomic_write(self._log_path(user_id), b"\n".join([encoder.encode(header), *lines]) + b"\n")
        self._purge_derived(user_id)

    def rewrite(
        self,
        user_id: str,
        keep: Callable[[Event], Event | None],
        *,
        note: ErasureNote | None = None,
        everything: bool = False,
    ) -> int:
        """Rewrite the log through ``keep`` (temp file and rename) and purge derived data;
        with a ``note`` (an erasure) also when nothing changes."""
        with self.locked(user_id):
            try:
                old, events, _ = self._whole_log(user_id)
            except StorageError:  # a line no longer decodes: a full erasure goes on
                if not everything:
                    raise
                floor, notes, lines = unreadable_log(self._log_path(user_id), note)
                self._write_log(user_id, [], floor, notes)
                return lines
            if old is None:
                return 0
            max_seq = max([old.seq_floor, *(e.seq for e in events)])
            changed = 0
            survivors: list[Event] = []
            for ev in events:
                new = keep(ev)
                if new is not ev:
                    changed += 1
                if new is not None:
                    survivors.append(new)
            if not changed and note is None:
                return 0
            notes = old.notes()
            if note is not None:
                notes = remember(notes, note, old.generation)
            self._write_log(user_id, survivors, max_seq, notes)
            return changed

    def replace_all(self, user_id: str, events: Sequence[Event]) -> None:
        """Atomically replace the whole log with ``events`` (the chain recomputed; their
        ``seq`` kept unless a number was used here before: :func:`numbered_above`)."""
        with self.locked(user_id):
            self._replace(user_id, events, *self._whole_log(user_id)[:2])

    def _replace(
        self, user_id: str, events: Sequence[Event], old: LogHeader | None, had: list[Event]
    ) -> None:
        """:meth:`replace_all` of a log whose header and events are ``old`` and ``had``
        (caller holds the lock): a rewrite that erases nothing, noted all the same."""
        used = max([old.seq_floor if old else 0, *(e.seq for e in had)])
        events = numbered_above(events, used)
        notes = [] if old is None else remember(old.notes(), ErasureNote(), old.generation)
        self._write_log(user_id, events, max([used, *(e.seq for e in events)]), notes)

    def import_events(self, user_id: str, decide: ImportDecision) -> ImportPlan:
        """Under the lock: read the log and settings, ``decide``, write (docs/storage.md,
        "Imports"). An append is written as a new file (the log's bytes, then the new
        events; temp file, fsync, rename), keeping the generation and the notes: all or
        nothing. A replace is :meth:`replace_all`'s (a new generation, noted)."""
        with self.locked(user_id):
            old, events, kept = self._whole_log(user_id)
            plan = decide(events, self.read_settings(user_id))
            if plan.replace:
                self._replace(user_id, plan.events, old, events)
            elif plan.events:
                last_seq = max([old.seq_floor if old else 0, *(e.seq for e in events)])
                prev = events[-1].h if events else CHAIN_GENESIS
                if old is None:
                    kept = encoder.encode(LogHeader(generation=secrets.token_hex(8))) + b"\n"
                added = b"".join(
                    [encode_event(e) + b"\n" for e in sequenced(plan.events, last_seq, prev)]
                )
                atomic_write(self._log_path(user_id), kept + added)
                self._inflight.pop(user_id, None)  # the whole new file is durable
            if plan.settings is not None:
                atomic_write(self._settings_path(user_id), encoder.encode(plan.settings) + b"\n")
            return plan

    def user_ids(self) -> list[str]:
        """The directories under the root named by a safe id, holding a log or settings."""
        if not self.root.is_dir():
            return []
        names = (
            p.name
            for p in self.root.iterdir()
            if is_safe_id(p.name) and len(p.name) <= MAX_ID_LENGTH and p.is_dir()
        )
        return sorted(n for n in names if self.user_exists(n))

    def read_raw(self, user_id: str) -> RawLog | None:
        """The log with its lines undecoded (:func:`raw_log`)."""
        return raw_log(self._log_path(user_id))

    def repair(self, user_id: str, decide: RepairDecision) -> None:
        """Under the lock: the log read undecoded, replaced by what ``decide`` keeps."""
        with self.locked(user_id):
            self._forget_position(user_id)
            raw = raw_log(self._log_path(user_id))
            plan = None if raw is None else decide(raw)
            if raw is not None and plan is not None:
                notes = remember(raw.notes or [], ErasureNote(), raw.generation)
                self._write_log(user_id, plan.events, plan.floor, notes)

    def rewrite_history(self, user_id: str) -> tuple[str, list[ErasureNote]]:
        """The log's generation and the erasure notes its header keeps."""
        opened = open_with_header(self._log_path(user_id))
        if opened is None:
            return "", []
        f, _, header = opened
        f.close()
        return header.generation, header.notes()

    def read_settings(self, user_id: str) -> UserSettings | None:
        """The user's settings (re-read only when the file changed), or ``None``."""
        return self._settings.read(self._settings_path(user_id))

    def recent_settings(self, user_id: str, *, fresh: bool = False) -> SettingsSeen:
        """Always read now (a stat when unchanged): no token."""
        return SettingsSeen(self.read_settings(user_id))

    def write_settings(self, user_id: str, settings: UserSettings) -> None:
        """Atomically replace the settings."""
        with self.locked(user_id):
            atomic_write(self._settings_path(user_id), encoder.encode(settings) + b"\n")

    def update_settings(
        self, user_id: str, change: Callable[[UserSettings], UserSettings]
    ) -> UserSettings:
        """Atomic read-modify-write of the settings under the lock."""
        with self.locked(user_id):
            new = change(self.read_settings(user_id) or UserSettings())
            atomic_write(self._settings_path(user_id), encoder.encode(new) + b"\n")
            return new
