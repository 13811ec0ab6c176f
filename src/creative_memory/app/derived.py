"""Derived state per user, kept current with the event log (docs/storage.md).

Reads derive lazily. Within a process the last derived state of each user is kept and
extended with newly appended events (O(k) for k new events), folded from memory when the
append continues the state; a rewritten log (erasure) derives afresh. Write-back of the
state to the derivation cache and the snapshot is deferred (:data:`WRITE_BACK_EVENTS`).

Warm reads take no lock: a read that finds the state up to date publishes a read-only copy
of its records (:func:`frozen_copy`), and later reads use it for as long as the log holds
nothing after it (docs/storage.md, "Appends and reads of the derived state").
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

import msgspec

from creative_memory.engine.derivation.registry import DerivedState, check_version, new_state
from creative_memory.engine.events import Event
from creative_memory.engine.models import Preference, Refinement
from creative_memory.storage import LogSnapshot
from creative_memory.storage.base import Appended, EventLogStorage, SettingsSeen
from creative_memory.storage.files.cache import cache_key


@dataclass
class _Memo:
    state: DerivedState
    generation: str
    end: int
    head: str  # chain hash of the last folded event ("" before any)
    written: str  # head last written back to the cache and snapshot
    unwritten: int = 0  # events folded since that write-back
    ready: int = -1  # `end` when the state was last materialised (== end: nothing since)
    quiet: int = 0  # refreshes in a row that found nothing new (see DerivedStates.refresh)


@dataclass(frozen=True)
class _Published:
    """A read-only copy of a user's state and the log position it reflects."""

    generation: str
    end: int
    state: DerivedState


T = TypeVar("T")


def _covers(pub: _Published, seen: LogSnapshot) -> bool:
    """Whether ``seen`` — a read of the log from where ``pub`` ends — finds nothing after it."""
    return seen.resumed and not seen.events and seen.end == pub.end


def frozen_copy(state: DerivedState) -> DerivedState:
    """A copy of a materialised ``state``'s records and refinement log that no fold will
    touch: what lock-free readers read. Its buckets hold copies of the records in the same
    order (indexed the same way), so every read — retrieval, record selection, export —
    gives the same bytes as on ``state``; it holds none of the version's fit inputs and is
    never folded into."""
    view = new_state(state.version)
    for rec in state.global_bucket.records:
        view.global_bucket.add(rec.copy())
    for project_id, bucket in state.projects.items():
        target = view.bucket_for(project_id)
        for rec in bucket.records:
            target.add(rec.copy())
    view.refinements = list(state.refinements)
    view.last_seq, view.event_count = state.last_seq, state.event_count
    return view


#: A read writes the derived state back (cache entry + snapshot) once it is this many events
#: past the last write-back; the first read of a store always writes (docs/storage.md).
WRITE_BACK_EVENTS = 256


class DerivedStates:
    """The derived state of every user a store has read, and the locks that guard it."""

    def __init__(self, storage: EventLogStorage, version: str) -> None:
        self.storage = storage
        self.version = version
        self.memo: dict[str, _Memo] = {}
        self.memo_lock = threading.RLock()  # guards the dicts below (held briefly)
        self.user_locks: dict[str, threading.RLock] = {}
        self.published: dict[str, _Published] = {}  # read without a lock
        self.siblings: dict[str, DerivedStates] = {}  # other versions (see :meth:`of`)
        # per thread: the appends of its open deferred block (see :meth:`deferred_appends`)
        self.blocks = threading.local()

    def flush(self) -> None:
        """Write every pending derived state back (cache entry and snapshot)."""
        with self.memo_lock:
            users = list(self.memo)
        for user_id in users:
            with self.locked(user_id):
                memo = self.memo.get(user_id)
                if memo is not None and memo.head and memo.head != memo.written:
                    memo.state.materialize()
                    self.write_back(user_id, memo)

    def of(self, version: str) -> DerivedStates:
        """The states of ``version`` over the same log (this object for its own version;
        others are made on first use, share this one's locks and are kept). An unknown
        version (a stored setting no release of this one knows) is a ``ValidationError``
        here, before anything is read or written for it."""
        if version == self.version:
            return self
        other = self.siblings.get(version)
        if other is None:
            other = self.siblings[version] = self.sibling(check_version(version))
        return other

    def every(self) -> list[DerivedStates]:
        """These states and every other version's made so far."""
        return [self, *self.siblings.values()]

    def sibling(self, version: str) -> DerivedStates:
        """States of another derivation version over the same log, sharing this one's locks
        (one critical section per user, whatever the version)."""
        other = DerivedStates(self.storage, version)
        other.memo_lock, other.user_locks = self.memo_lock, self.user_locks
        other.blocks = self.blocks
        return other

    def forget_user(self, user_id: str) -> None:
        """Drop the user's state (after a rewrite of the log): the next read derives afresh."""
        with self.memo_lock:
            self.published.pop(user_id, None)
            self.memo.pop(user_id, None)

    def read(self, user_id: str, fn: Callable[[DerivedState], T], *, write_back: bool = True) -> T:
        """``fn`` of the user's up-to-date state. ``fn`` must only read the state.

        First, without a lock, one ``read_events`` from where the published read-only copy
        (else the state) ends — the file backend answers it with a ``stat`` while the log
        is unchanged. Nothing new after the copy: ``fn`` reads the copy, lock-free. Else,
        under the user's lock: if another read meanwhile brought the state (materialised)
        to or past where the log ended when this read looked, that state serves this read
        too (it holds every event acknowledged before the read began); otherwise
        :meth:`refresh`, folding the events this read fetched when the state still ends
        where it looked from."""
        pub = self.published.get(user_id)
        memo = self.memo.get(user_id)
        seen: LogSnapshot | None = None
        generation, start = None, -1
        if pub is not None:
            generation, start = pub.generation, pub.end
        elif memo is not None:  # read without the lock: a pair that held at some moment
            generation, start = memo.generation, memo.end
        if generation is not None:
            seen = self.storage.read_events(user_id, generation=generation, start=start)
            if pub is not None and _covers(pub, seen):
                return fn(pub.state)
        lock = self.user_lock(user_id)
        # a read that had to wait for the lock publishes what it finds current, so the
        # readers after it need no lock; an uncontended one publishes only on the second
        # read in a row without news: the first read after a change must not pay for a
        # copy whose cost grows with the records (docs/storage.md)
        contended = not lock.acquire(blocking=False)
        if contended:
            lock.acquire()
        try:
            memo = self.memo.get(user_id)
            if seen is not None and seen.resumed and memo is not None:
                if (
                    seen.end > start
                    and memo.generation == seen.generation
                    and memo.ready == memo.end >= seen.end
                    and not (write_back and self.write_back_due(memo))
                ):
                    return fn(memo.state)  # everything the log held when this read looked
                if memo.generation == seen.generation and memo.end == start:
                    state, _ = self.refresh(
                        user_id, write_back=write_back, fetched=seen, publish=contended
                    )
                    return fn(state)
            state, _ = self.refresh(user_id, write_back=write_back, publish=contended)
            return fn(state)
        finally:
            lock.release()

    def published_current(self, user_id: str) -> bool:
        """Whether the user's published read-only copy reflects the whole log, so a read
        would be served from it without a lock (one ``read_events`` from its end: a
        ``stat`` on the file backend)."""
        pub = self.published.get(user_id)
        if pub is None:
            return False
        seen = self.storage.read_events(user_id, generation=pub.generation, start=pub.end)
        return _covers(pub, seen)

    def cold_start(
        self, user_id: str, want_seqs: Sequence[int]
    ) -> tuple[_Memo, LogSnapshot, dict[int, Preference | Refinement | None]]:
        """A memo for the newest cached prefix of the log, the events after it still to
        fold, and (when nothing usable is cached) what the events in ``want_seqs`` touched:
        a derivation from scratch streams the log into the state, a chunk at a time."""
        keys = self.storage.cache_keys(user_id)
        v = self.version
        if keys:
            snap = self.storage.read_after_cached(user_id, lambda h: cache_key(h, v) in keys)
            if snap.base is not None:
                data = self.storage.cache_get(user_id, cache_key(snap.base, v))
                if data is not None:
                    with contextlib.suppress(ValueError, msgspec.DecodeError):
                        state = DerivedState.load(data)
                        if state.version == v:
                            # written="" so the first read refreshes the snapshot (it may
                            # show another version)
                            memo = _Memo(state, snap.generation, snap.end, snap.base, "")
                            return memo, snap, {}
            elif snap.events or not snap.generation:
                # no cached prefix: the read already holds the whole log; fold it from there
                return _Memo(new_state(v), snap.generation, snap.end, "", ""), snap, {}
        # nothing usable cached (or the entry vanished or is unreadable): from scratch
        memo = _Memo(new_state(v), "", 0, "", "")
        touched: dict[int, Preference | Refinement | None] = {}
        later: list[tuple[int, Preference]] = []
        # without records to report: one bulk fold of every chunk (DerivedState.folding)
        bulk = contextlib.nullcontext(None) if want_seqs else memo.state.folding()
        with bulk as fold_chunk:

            def fold(events: list[Event]) -> None:
                touched.update(self.fold(memo, events, want_seqs, later, fold_chunk))

            snap = self.storage.read_events(user_id, sink=fold)
        self.report(memo, later, touched)
        memo.generation, memo.end = snap.generation, snap.end
        return memo, snap, touched

    def refresh(
        self,
        user_id: str,
        want_seqs: Sequence[int] = (),
        *,
        write_back: bool = False,
        fetched: LogSnapshot | None = None,
        publish: bool = True,
    ) -> tuple[DerivedState, dict[int, Preference | Refinement | None]]:
        """Bring the user's derived state up to date with the log (O(k) for k new events).

        Returns the state and, for each seq in ``want_seqs`` folded during this refresh, a
        copy of what that event touched, taken right after it was folded. With
        ``write_back`` the state is written to the derivation cache and the snapshot.
        ``fetched`` is a read of the log from where the state ends (the caller checked),
        folded instead of reading again. A refresh that finds nothing new publishes the
        state for lock-free readers (:meth:`publish`) when ``publish`` is true, or when the
        refresh before it found nothing new either (the state is being read, not changed).
        """
        with self.user_lock(user_id):
            memo = self.memo.get(user_id)
            snap: LogSnapshot | None = None
            if memo is not None:
                snap = fetched or self.storage.read_events(
                    user_id, generation=memo.generation, start=memo.end
                )
                if not snap.resumed:
                    memo = None
            touched: dict[int, Preference | Refinement | None] = {}
            folded = memo is None or snap is None or bool(snap.events)
            if folded:
                self.published.pop(user_id, None)
            if memo is None or snap is None:
                memo, snap, touched = self.cold_start(user_id, want_seqs)
                with self.memo_lock:
                    self.memo[user_id] = memo
            try:
                touched.update(self.fold(memo, snap.events, want_seqs))
            except BaseException:  # a half-folded state must not be reused
                self.forget_user(user_id)
                raise
            memo.end = snap.end
            state = memo.state
            state.materialize()
            memo.ready = memo.end
            if write_back and self.write_back_due(memo):
                self.write_back(user_id, memo)
            memo.quiet = 0 if folded else memo.quiet + 1
            if not folded and (publish or memo.quiet >= 2):
                self.publish(user_id, memo)
            return state, touched

    @staticmethod
    def write_back_due(memo: _Memo) -> bool:
        """Whether a read should write the memo's state back: the first read of a store,
        then every :data:`WRITE_BACK_EVENTS` events."""
        return bool(
            memo.head
            and memo.head != memo.written
            and (not memo.written or memo.unwritten >= WRITE_BACK_EVENTS)
        )

    def publish(self, user_id: str, memo: _Memo) -> None:
        """Publish a read-only copy of the memo's (materialised) state for lock-free reads,
        unless one for this position is out already (caller holds the user's lock)."""
        pub = self.published.get(user_id)
        if pub is None or pub.generation != memo.generation or pub.end != memo.end:
            self.published[user_id] = _Published(memo.generation, memo.end, frozen_copy(memo.state))

    @staticmethod
    def fold(
        memo: _Memo,
        events: Sequence[Event],
        want_seqs: Sequence[int],
        later: list[tuple[int, Preference]] | None = None,
        bulk: Callable[[Sequence[Event]], None] | None = None,
    ) -> dict[int, Preference | Refinement | None]:
        """Fold ``events`` into the memo's state; for each seq in ``want_seqs``, a copy of
        what that event touched (see :meth:`refresh`). A version that reports records
        after the whole batch (``records_per_event`` False) reports them at the end of this
        call — or, when the caller passes ``later``, leaves them there for the caller to
        report once every chunk of the batch is folded (:meth:`report`). ``bulk`` folds
        the events instead of the state's ``fold`` when nothing is to be reported (a chunk
        of :meth:`~creative_memory.engine.derivation.base.DerivedState.folding`)."""
        touched: dict[int, Preference | Refinement | None] = {}
        wanted = set(want_seqs)
        state = memo.state
        pending: list[tuple[int, Preference]] = [] if later is None else later
        if not wanted and events:  # nothing to report: the state's bulk fold
            (state.fold if bulk is None else bulk)(events)
            memo.head = events[-1].h
            memo.unwritten += len(events)
            return touched
        for ev in events:
            rec = state.apply(ev)
            memo.head = ev.h
            memo.unwritten += 1
            if ev.seq in wanted:
                if isinstance(rec, Preference) and not state.records_per_event:
                    pending.append((ev.seq, rec))
                else:
                    touched[ev.seq] = state.report(rec) if isinstance(rec, Preference) else rec
        if later is None:
            DerivedStates.report(memo, pending, touched)
        return touched

    @staticmethod
    def report(
        memo: _Memo,
        later: list[tuple[int, Preference]],
        touched: dict[int, Preference | Refinement | None],
    ) -> None:
        """Report the records a batch left for the end (versions that report after a batch)."""
        for seq, rec in later:
            touched[seq] = memo.state.report(rec)

    def write_back(self, user_id: str, memo: _Memo) -> None:
        """Persist the memo's state in the cache and the human-readable snapshot (the
        backend skips it if the log was rewritten meanwhile)."""
        state = memo.state
        snapshot = {
            "about": "Derived preference records (a cache; the truth is the event log). "
            "Generated by creative-memory; edits here are ignored.",
            "user_id": user_id,
            "derivation_version": state.version,
            "last_derived_event_seq": state.last_seq,
            "preferences": [state.export_record(r).to_dict() for r in state.all_records()],
        }
        self.storage.write_back(
            user_id,
            memo.generation,
            cache_key(memo.head, state.version),
            state.dump(),
            msgspec.json.format(msgspec.json.encode(snapshot)) + b"\n",
        )
        memo.written = memo.head
        memo.unwritten = 0

    def user_lock(self, user_id: str) -> threading.RLock:
        """The lock that serialises one user's derivation in this process (refreshes,
        folds, appends that return records, write-back; every version shares it)."""
        lock = self.user_locks.get(user_id)
        if lock is None:
            with self.memo_lock:
                lock = self.user_locks.setdefault(user_id, threading.RLock())
        return lock

    @contextlib.contextmanager
    def locked(self, user_id: str) -> Iterator[None]:
        """This store's critical section for one user (the user's lock). An append that
        returns records holds it from the write until its own events are folded, so no
        other thread can fold them first and the caller gets the records its events
        touched; an append without records holds no lock while it writes."""
        with self.user_lock(user_id):
            yield

    def append(
        self,
        user_id: str,
        events: Sequence[Event],
        *,
        records: bool = True,
        if_settings: SettingsSeen | None = None,
        if_generation: str | None = None,
    ) -> list[Preference | Refinement | None]:
        """Durably append ``events`` (only if the user's settings are still
        ``if_settings``, when it has a token: else
        :class:`~creative_memory.storage.base.SettingsChanged`; only if the log is still
        ``if_generation``, when given: else
        :class:`~creative_memory.storage.base.LogRewritten`); with ``records``, return
        what each one touched.

        The appended events are folded from memory when this store's state for the user
        ends right where the append began (no read-back); otherwise, without ``records``,
        nothing is derived now: the next read does it (docs/performance.md, "Scaling with
        the vocabulary"). Without ``records`` no lock is held across the write, so
        concurrent appends share one fsync (docs/storage.md, "Group commit"), and the fold
        from memory happens only if the user's lock is free at once."""
        if not records:
            appended = self.storage.append_positioned(
                user_id, events, if_settings=if_settings, if_generation=if_generation
            )
            if appended.durable:
                self.continue_if_free(user_id, appended)
            else:  # a deferred sync: folded once synced (see deferred_appends), if at all
                pending: list[tuple[DerivedStates, str, Appended]] | None = getattr(
                    self.blocks, "pending", None
                )
                if pending is not None:
                    pending.append((self, user_id, appended))
            return [None] * len(appended.events)
        with self.user_lock(user_id):
            appended = self.storage.append_positioned(
                user_id, events, if_settings=if_settings, if_generation=if_generation
            )
            if not appended.durable:  # pragma: no cover - no caller does this
                raise RuntimeError("an append that returns records cannot be deferred")
            seqs = [e.seq for e in appended.events]
            touched = self.continue_with(user_id, appended, seqs)
            if touched is None:
                _, touched = self.refresh(user_id, seqs)
            return [touched.get(s) for s in seqs]

    @contextlib.contextmanager
    def deferred_appends(self) -> Iterator[None]:
        """The storage's ``deferred_sync()`` block, for this thread's appends without
        records (docs/storage.md, "One fsync for a batch"); once it has ended durable, each
        of them is folded from memory as an append outside a block is
        (:meth:`continue_if_free`), in the order they were made. Nothing is folded when the
        block fails. A storage without such blocks gives a plain block (its appends are
        durable, and folded, at once)."""
        block = getattr(self.storage, "deferred_sync", None)
        if block is None:
            yield
            return
        if getattr(self.blocks, "pending", None) is not None:
            raise RuntimeError("deferred_sync blocks do not nest")
        pending: list[tuple[DerivedStates, str, Appended]] = []
        self.blocks.pending = pending
        try:
            with block():
                yield
        finally:
            self.blocks.pending = None
        for states, user_id, appended in pending:
            states.continue_if_free(user_id, appended)

    def continue_if_free(self, user_id: str, appended: Appended) -> None:
        """:meth:`continue_with` a durable ``appended`` if the user's lock is free at once
        (busy: a read is deriving, and the next read folds it)."""
        lock = self.user_lock(user_id)
        if lock.acquire(blocking=False):
            try:
                self.continue_with(user_id, appended, ())
            finally:
                lock.release()

    def continue_with(
        self, user_id: str, appended: Appended, want_seqs: Sequence[int]
    ) -> dict[int, Preference | Refinement | None] | None:
        """Fold ``appended`` from memory when the user's state ends exactly where it began
        (in log order, so the state is what a read of the log would make); ``None`` when
        it does not (caller holds the user's lock)."""
        memo = self.memo.get(user_id)
        if memo is None or memo.generation != appended.generation or memo.end != appended.start:
            return None
        self.published.pop(user_id, None)
        try:
            touched = self.fold(memo, appended.events, want_seqs)
        except BaseException:  # a half-folded state must not be reused
            self.forget_user(user_id)
            raise
        memo.end = appended.end
        memo.quiet = 0
        return touched
