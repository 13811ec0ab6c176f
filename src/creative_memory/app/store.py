"""``MemoryStore``: the library entry point joining storage (host side) and the pure engine.

Reads derive lazily from the event log. Within a process the store keeps the last derived
state per user and extends it with newly appended events (O(k) for k new events); a
rewritten log (erasure) or another derivation version derives afresh.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from creative_memory.engine.constants import DERIVATION_VERSION
from creative_memory.engine.derivation import (
    v2,  # noqa: F401  (registers derivation version "2")
    v3,  # noqa: F401  (registers derivation version "3")
)
from creative_memory.engine.derivation.v1 import DerivedState, check_version, new_state
from creative_memory.engine.errors import ValidationError
from creative_memory.engine.events import (
    ComparisonEvent,
    DecayPassEvent,
    Event,
    LegacyRecordEvent,
    ProjectAnchorEvent,
    RefinementEvent,
    SignalEvent,
    build_signal_event,
    validate_project_id,
    validate_stored_event,
    validate_user_id,
)
from creative_memory.engine.explain import Explanation, explain
from creative_memory.engine.models import DecayResult, Preference, Refinement, RetrievalResult
from creative_memory.engine.portability.archive import (
    decode_archive,
    encode_archive,
    event_identity,
)
from creative_memory.engine.portability.prototype import parse_prototype
from creative_memory.engine.retrieval import parse_context, retrieve
from creative_memory.engine.timeutil import format_ts, instant_to_ms
from creative_memory.storage import FileStorage, LogSnapshot, UserSettings
from creative_memory.storage.base import EventLogStorage
from creative_memory.storage.files.cache import DEFAULT_CACHE_CAPACITY, cache_key
from creative_memory.storage.files.fsutil import atomic_write

Clock = Callable[[], int]


def wall_clock_ms() -> int:
    """Current time in epoch milliseconds (floored)."""
    return time.time_ns() // 1_000_000


@dataclass
class _Memo:
    state: DerivedState
    generation: str
    end: int
    head: str  # chain hash of the last folded event ("" before any)
    written: str  # head last written back to the cache and snapshot
    unwritten: int = 0  # events folded since that write-back


#: A read writes the derived state back (cache entry + snapshot) once it is this many events
#: past the last write-back; the first read of a store always writes (docs/storage.md).
WRITE_BACK_EVENTS = 256


class MemoryStore:
    """Preference memory for every user under one storage root.

    ``clock`` (epoch-ms callable) is where "now" comes from when a call does not pass a time
    explicitly; it defaults to the wall clock. ``cache_capacity`` bounds the derivation cache
    per user (entries, LRU).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        derivation_version: str | None = None,
        clock: Clock | None = None,
        cache_capacity: int = DEFAULT_CACHE_CAPACITY,
    ) -> None:
        self.derivation_version = check_version(
            DERIVATION_VERSION if derivation_version is None else derivation_version
        )
        if not isinstance(cache_capacity, int) or cache_capacity < 0:
            raise ValidationError("cache_capacity", "cache_capacity must be an integer >= 0")
        self._storage: EventLogStorage
        if isinstance(root, str) and root.startswith(("postgresql://", "postgres://")):
            from creative_memory.storage.postgres import PostgresStorage

            self._storage = PostgresStorage(root, cache_capacity=cache_capacity)
        else:
            self._storage = FileStorage(root, cache_capacity=cache_capacity)
        self._clock: Clock = clock or wall_clock_ms
        self._memo: dict[str, _Memo] = {}
        self._memo_lock = threading.RLock()
        self._user_locks: dict[str, threading.RLock] = {}

    def flush(self) -> None:
        """Write every pending derived state back (cache entry and snapshot). Reads defer
        write-back (docs/storage.md); this makes the on-disk cache current now."""
        with self._memo_lock:
            users = list(self._memo)
        for user_id in users:
            with self._locked(user_id):
                memo = self._memo.get(user_id)
                if memo is not None and memo.head and memo.head != memo.written:
                    memo.state.materialize()
                    self._write_back(user_id, memo)

    def close(self) -> None:
        """Write pending derived state back (:meth:`flush`) and release backend resources
        (a database connection pool)."""
        try:
            self.flush()
        finally:
            close = getattr(self._storage, "close", None)
            if close is not None:
                close()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def root(self) -> str:
        return self._storage.describe()

    # -- internals -------------------------------------------------------------------------
    def now_ms(self) -> int:
        """The store's notion of "now" (epoch ms) — the injected clock."""
        return self._clock()

    def _settings(self, user_id: str) -> UserSettings:
        return self._storage.read_settings(user_id) or UserSettings()

    def _is_paused(self, settings: UserSettings) -> bool:
        if not settings.paused:
            return False
        if settings.paused_until is None:
            return True
        return self.now_ms() < instant_to_ms(settings.paused_until, "paused_until")

    def _learning(self, settings: UserSettings) -> bool:
        return settings.memory_enabled and not self._is_paused(settings)

    def _cold_start(
        self, user_id: str, want_seqs: Sequence[int]
    ) -> tuple[_Memo, LogSnapshot, dict[int, Preference | Refinement | None]]:
        """A memo for the newest cached prefix of the log, the events after it still to
        fold, and (when nothing usable is cached) what the events in ``want_seqs`` touched:
        a derivation from scratch streams the log into the state, a chunk at a time."""
        keys = self._storage.cache_keys(user_id)
        v = self.derivation_version
        if keys:
            snap = self._storage.read_after_cached(user_id, lambda h: cache_key(h, v) in keys)
            if snap.base is not None:
                data = self._storage.cache_get(user_id, cache_key(snap.base, v))
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

        def fold(events: list[Event]) -> None:
            touched.update(self._fold(memo, events, want_seqs, later))

        snap = self._storage.read_events(user_id, sink=fold)
        self._report(memo, later, touched)
        memo.generation, memo.end = snap.generation, snap.end
        return memo, snap, touched

    def _refresh(
        self, user_id: str, want_seqs: Sequence[int] = (), *, write_back: bool = False
    ) -> tuple[DerivedState, dict[int, Preference | Refinement | None]]:
        """Bring the user's derived state up to date with the log (O(k) for k new events).

        Returns the state and, for each seq in ``want_seqs`` folded during this refresh, a
        copy of what that event touched, taken right after it was folded. With
        ``write_back`` the state is written to the derivation cache and the snapshot.
        """
        with self._memo_lock:
            memo = self._memo.get(user_id)
            snap: LogSnapshot | None = None
            if memo is not None:
                snap = self._storage.read_events(
                    user_id, generation=memo.generation, start=memo.end
                )
                if not snap.resumed:
                    memo = None
            touched: dict[int, Preference | Refinement | None] = {}
            if memo is None or snap is None:
                memo, snap, touched = self._cold_start(user_id, want_seqs)
                self._memo[user_id] = memo
            try:
                touched.update(self._fold(memo, snap.events, want_seqs))
            except BaseException:  # a half-folded state must not be reused
                self._memo.pop(user_id, None)
                raise
            memo.end = snap.end
            state = memo.state
            state.materialize()
            if (
                write_back
                and memo.head
                and memo.head != memo.written
                and (not memo.written or memo.unwritten >= WRITE_BACK_EVENTS)
            ):
                self._write_back(user_id, memo)
            return state, touched

    @staticmethod
    def _fold(
        memo: _Memo,
        events: Sequence[Event],
        want_seqs: Sequence[int],
        later: list[tuple[int, Preference]] | None = None,
    ) -> dict[int, Preference | Refinement | None]:
        """Fold ``events`` into the memo's state; for each seq in ``want_seqs``, a copy of
        what that event touched (see :meth:`_refresh`). A version that reports records
        after the whole batch (``records_per_event`` False) reports them at the end of this
        call — or, when the caller passes ``later``, leaves them there for the caller to
        report once every chunk of the batch is folded (:meth:`_report`)."""
        touched: dict[int, Preference | Refinement | None] = {}
        wanted = set(want_seqs)
        state = memo.state
        pending: list[tuple[int, Preference]] = [] if later is None else later
        if not wanted and events:  # nothing to report: the state's bulk fold
            state.fold(events)
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
            MemoryStore._report(memo, pending, touched)
        return touched

    @staticmethod
    def _report(
        memo: _Memo,
        later: list[tuple[int, Preference]],
        touched: dict[int, Preference | Refinement | None],
    ) -> None:
        for seq, rec in later:
            touched[seq] = memo.state.report(rec)

    def _write_back(self, user_id: str, memo: _Memo) -> None:
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
        self._storage.write_back(
            user_id,
            memo.generation,
            cache_key(memo.head, state.version),
            state.dump(),
            msgspec.json.format(msgspec.json.encode(snapshot)) + b"\n",
        )
        memo.written = memo.head
        memo.unwritten = 0

    def _user_lock(self, user_id: str) -> threading.RLock:
        with self._memo_lock:
            lock = self._user_locks.get(user_id)
            if lock is None:
                lock = self._user_locks[user_id] = threading.RLock()
            return lock

    @contextlib.contextmanager
    def _locked(self, user_id: str) -> Iterator[None]:
        """This store's critical section for one user: the user's lock, then the memo lock
        (always in this order). An append holds the user's lock from the write until its own
        events are folded, so no other thread can fold them first and the caller always gets
        the records its events touched."""
        with self._user_lock(user_id), self._memo_lock:
            yield

    def _append(
        self, user_id: str, events: Sequence[Event], *, records: bool = True
    ) -> list[Preference | Refinement | None]:
        """Durably append ``events``; with ``records``, return what each one touched.

        The appended events are folded from memory when this store's state for the user
        ends right where the append began (no read-back); otherwise, without ``records``,
        nothing is derived now: the next read does it (docs/performance.md, "Scaling with
        the vocabulary")."""
        with self._user_lock(user_id):
            appended = self._storage.append_positioned(user_id, events)
            seqs = [e.seq for e in appended.events]
            with self._memo_lock:
                memo = self._memo.get(user_id)
                if (
                    memo is not None
                    and memo.generation == appended.generation
                    and memo.end == appended.start
                ):
                    try:
                        touched = self._fold(memo, appended.events, seqs if records else ())
                    except BaseException:  # a half-folded state must not be reused
                        self._memo.pop(user_id, None)
                        raise
                    memo.end = appended.end
                elif records:
                    _, touched = self._refresh(user_id, seqs)
                else:
                    return [None] * len(seqs)
            return [touched.get(s) for s in seqs]

    def _recorded_at(self) -> str:
        return format_ts(self.now_ms())

    # -- engine calls ----------------------------------------------------------------------
    def ingest_signal(self, user_id: str, signal: Mapping[str, Any]) -> Preference | None:
        """Store one classified signal and return the record it created or updated."""
        return self.ingest_signals(user_id, [signal])[0]

    def ingest_signals(
        self,
        user_id: str,
        signals: Sequence[Mapping[str, Any]],
        *,
        refinement: Mapping[str, Any] | None = None,
        records: bool = True,
    ) -> list[Preference | None]:
        """Validate every signal, then append them all at once (all or nothing).

        ``refinement`` (``artifact_id``, ``project_id``, ``diff``) is logged in the same
        append, also when memory is disabled (docs/architecture.md). With
        ``records=False`` nothing is derived now and every entry is ``None``: for hosts that
        do not need the records back (the next read derives).
        """
        validate_user_id(user_id)
        settings = self._settings(user_id)
        now = self.now_ms()
        recorded_at = format_ts(now)
        events: list[Event] = []
        learning = self._learning(settings)
        if learning:
            events = [build_signal_event(s, now, recorded_at) for s in signals]
        if refinement is not None and not self._is_paused(settings):
            events.append(self._refinement_event(refinement, recorded_at))
        if not events:
            return [None] * len(signals)
        results = self._append(user_id, events, records=records)
        if not learning:
            return [None] * len(signals)
        return [r if isinstance(r, Preference) else None for r in results[: len(signals)]]

    def _refinement_event(self, r: Mapping[str, Any], recorded_at: str) -> RefinementEvent:
        artifact_id = r.get("artifact_id")
        project_id = r.get("project_id")
        for name, value in (("artifact_id", artifact_id), ("project_id", project_id)):
            if value is not None and not isinstance(value, str):
                raise ValidationError(name, f"{name} must be a string or null")
        diff = r.get("diff")
        if diff is None:
            diff = {}
        try:
            msgspec.json.encode(diff)
        except (TypeError, msgspec.EncodeError) as exc:
            raise ValidationError("diff", f"diff must be JSON-serialisable ({exc})") from exc
        return RefinementEvent(
            at=recorded_at,
            recorded_at=recorded_at,
            artifact_id=artifact_id,
            project_id=project_id,
            diff=diff,
        )

    def append_comparison(self, user_id: str, event: ComparisonEvent) -> bool:
        """Store a pairwise comparison unless learning is off; returns whether it was stored."""
        validate_user_id(user_id)
        if not self._learning(self._settings(user_id)):
            return False
        self._append(user_id, [event], records=False)
        return True

    def retrieve_for_injection(
        self, user_id: str, context: Mapping[str, Any] | None = None
    ) -> RetrievalResult:
        validate_user_id(user_id)
        if not self._storage.user_exists(user_id):
            return RetrievalResult()
        settings = self._settings(user_id)
        if not settings.memory_enabled:
            return RetrievalResult()
        project_id, types = parse_context(context)
        with self._locked(user_id):
            state, _ = self._refresh(user_id, write_back=True)
            projects = {pid: b.records for pid, b in state.projects.items()}
            result = retrieve(
                state.global_records,
                projects,
                project_id,
                types,
                ignore_global_for=settings.disabled_projects,
            )
            ex = state.export_record
            return RetrievalResult(
                positives=[ex(r) for r in result.positives],
                negatives=[ex(r) for r in result.negatives],
                project_overrides=[ex(r) for r in result.project_overrides],
                diagnostics=result.diagnostics,
            )

    def run_decay(self, user_id: str, now: str | datetime | None = None) -> DecayResult:
        """One decay pass at ``now`` (default: the clock). Stored only if it changes a record."""
        validate_user_id(user_id)
        now_ms = self.now_ms() if now is None else instant_to_ms(now, "now")
        if not self._storage.user_exists(user_id):
            return DecayResult()
        with self._locked(user_id):
            state, _ = self._refresh(user_id)
            result = state.decay_preview(now_ms)
        if result.decayed or result.archived:
            at = format_ts(now_ms)
            self._append(
                user_id, [DecayPassEvent(at=at, recorded_at=self._recorded_at())], records=False
            )
        return result

    def list_preferences(
        self,
        user_id: str,
        *,
        scope: str = "all",
        polarity: str = "all",
        min_strength: float = 0.0,
        status: str = "all",
    ) -> list[Preference]:
        validate_user_id(user_id)
        project = _scope_project(scope)
        _check_option("polarity", polarity, _POLARITY_OPTIONS)
        _check_option("status", status, _STATUS_OPTIONS)
        if not self._storage.user_exists(user_id):
            return []
        with self._locked(user_id):
            state, _ = self._refresh(user_id, write_back=True)
            if project is not None:
                source = state.project_records(project) or []
            elif scope == "global":
                source = state.global_records
            else:
                source = state.all_records()
            out = [
                r
                for r in source
                if (polarity == "all" or r.polarity == polarity)
                and r.signal_strength >= min_strength
                and (status == "all" or r.polarity_status == status)
            ]
            out.sort(key=lambda r: r.signal_strength, reverse=True)
            return [state.export_record(r) for r in out]

    def set_memory_enabled(self, user_id: str, enabled: bool) -> None:
        validate_user_id(user_id)
        if not isinstance(enabled, bool):
            raise ValidationError("enabled", "enabled must be true or false")
        self._update_settings(user_id, lambda s: msgspec.structs.replace(s, memory_enabled=enabled))

    def _update_settings(
        self, user_id: str, change: Callable[[UserSettings], UserSettings]
    ) -> None:
        self._storage.update_settings(user_id, change)

    def reset_memory(self, user_id: str, scope: str = "all") -> None:
        """Erase raw events in ``scope`` for real; a full reset also re-enables memory."""
        validate_user_id(user_id)
        project = _scope_project(scope)
        if scope == "all":
            self._rewrite(user_id, lambda ev: None)
            self._storage.write_settings(user_id, UserSettings())
        elif scope == "global":
            self._erase(user_id, lambda ev: None if _in_bucket(ev, None) else ev)
        elif project is not None:
            self._erase(user_id, lambda ev: None if _in_bucket(ev, project) else ev)
            with self._locked(user_id):
                state, _ = self._refresh(user_id)
                missing = state.project_records(project) is None
            if missing:
                now = self._recorded_at()
                self._append(
                    user_id,
                    [ProjectAnchorEvent(at=now, recorded_at=now, project_id=project)],
                    records=False,
                )
        if not self._storage.user_exists(user_id):
            self._storage.write_settings(user_id, self._settings(user_id))

    def log_refinement(
        self,
        user_id: str,
        *,
        artifact_id: str | None = None,
        project_id: str | None = None,
        diff: Any = None,
    ) -> Refinement:
        """Append to the refinement log (wall-clock timestamp; ignores the master switch).

        While learning is paused nothing is stored and the returned entry is not persisted.
        """
        validate_user_id(user_id)
        recorded_at = self._recorded_at()
        ev = self._refinement_event(
            {"artifact_id": artifact_id, "project_id": project_id, "diff": diff}, recorded_at
        )
        if self._is_paused(self._settings(user_id)):
            return Refinement(
                id="ref_unsaved",
                artifact_id=ev.artifact_id,
                project_id=ev.project_id,
                timestamp=ev.at,
                diff=ev.diff,
            )
        (entry,) = self._append(user_id, [ev])
        assert isinstance(entry, Refinement)
        return entry

    def refinement_log(self, user_id: str) -> list[Refinement]:
        validate_user_id(user_id)
        if not self._storage.user_exists(user_id):
            return []
        with self._locked(user_id):
            state, _ = self._refresh(user_id)
            return list(state.refinements)

    # -- controls ----------------------------------------------------------------------------
    def forget(
        self,
        user_id: str,
        preference_type: str,
        pattern: str,
        *,
        project_id: str | None = None,
    ) -> int:
        """Erase every raw event about (``preference_type``, ``pattern``) in the bucket."""
        _validate_feature(user_id, preference_type, pattern, project_id)
        if not self._storage.user_exists(user_id):
            return 0
        return self._erase(
            user_id, lambda ev: _forget_filter(ev, preference_type, pattern, project_id)
        )

    def _erase(self, user_id: str, keep: Callable[[Event], Event | None]) -> int:
        """Rewrite the log through ``keep``; the first event of each project bucket is
        replaced by a content-free anchor instead of vanishing, so bucket order survives.
        Returns how many events were removed or changed (anchors do not count)."""
        seen: set[str] = set()

        def keep_anchored(ev: Event) -> Event | None:
            has, bucket = _bucket_of(ev)
            first = False
            if isinstance(ev, ProjectAnchorEvent):
                has, bucket = True, ev.project_id
            if has and bucket is not None and bucket not in seen:
                seen.add(bucket)
                first = True
            new = keep(ev)
            if new is None and first and not isinstance(ev, ProjectAnchorEvent):
                return ProjectAnchorEvent(
                    seq=ev.seq, at=ev.at, recorded_at=ev.recorded_at, project_id=bucket or ""
                )
            return new

        return self._rewrite(user_id, keep_anchored)

    def _rewrite(self, user_id: str, keep: Callable[[Event], Event | None]) -> int:
        """Rewrite the log, then — under the same lock — delete every derived artefact
        (cache entries, snapshot) that may hold erased content, and re-derive."""

        with self._locked(user_id):
            changed = self._storage.rewrite(user_id, keep)
            if changed:
                self._memo.pop(user_id, None)
                self._refresh(user_id, write_back=True)
            return changed

    def import_prototype(self, user_id: str, path: str | os.PathLike[str]) -> int:
        """Import a prototype-era ``preferences.json`` as ``legacy_record`` events (plus its
        refinement log and master switch). Idempotent: records already imported are skipped.
        Everything is validated first; a malformed file imports nothing. Returns the number
        of records imported."""
        validate_user_id(user_id)
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise ValidationError("path", f"cannot read {path}: {exc.strerror}") from exc
        parsed = parse_prototype(data, self._recorded_at())
        existing = self.events(user_id)
        have_records = {
            (e.bucket, msgspec.json.encode(e.record))
            for e in existing
            if isinstance(e, LegacyRecordEvent)
        }
        have_refs = {e.ref_id for e in existing if isinstance(e, RefinementEvent) and e.ref_id}
        new_records = [
            e
            for e in parsed.records
            if (e.bucket, msgspec.json.encode(e.record)) not in have_records
        ]
        new_refs = [e for e in parsed.refinements if e.ref_id not in have_refs]
        if new_records or new_refs:
            self._append(user_id, [*new_records, *new_refs], records=False)
        settings = self._settings(user_id)
        if settings.memory_enabled != parsed.memory_enabled or not self._storage.user_exists(
            user_id
        ):
            self._update_settings(
                user_id,
                lambda s: msgspec.structs.replace(s, memory_enabled=parsed.memory_enabled),
            )
        return len(new_records)

    def pause(self, user_id: str, until: str | datetime | None = None) -> None:
        """Pause learning until ``until`` (which must be in the future) or until resumed."""
        validate_user_id(user_id)
        until_s = None
        if until is not None:
            until_ms = instant_to_ms(until, "until")
            if until_ms <= self.now_ms():
                raise ValidationError("until", f"until {format_ts(until_ms)} is in the past")
            until_s = format_ts(until_ms)
        self._update_settings(
            user_id, lambda s: msgspec.structs.replace(s, paused=True, paused_until=until_s)
        )

    def resume(self, user_id: str) -> None:
        validate_user_id(user_id)
        self._update_settings(
            user_id, lambda s: msgspec.structs.replace(s, paused=False, paused_until=None)
        )

    def set_project_disabled(self, user_id: str, project_id: str, disabled: bool) -> None:
        validate_user_id(user_id)
        validate_project_id(project_id)
        if not isinstance(disabled, bool):
            raise ValidationError("disabled", "disabled must be true or false")

        def change(s: UserSettings) -> UserSettings:
            projects = [p for p in s.disabled_projects if p != project_id]
            if disabled:
                projects.append(project_id)
            return msgspec.structs.replace(s, disabled_projects=projects)

        self._update_settings(user_id, change)

    def set_diagnostics_feed(self, user_id: str, enabled: bool) -> None:
        """Switch the one-line diagnostics summary for chat (off by default)."""
        validate_user_id(user_id)
        if not isinstance(enabled, bool):
            raise ValidationError("enabled", "enabled must be true or false")
        self._update_settings(
            user_id, lambda s: msgspec.structs.replace(s, diagnostics_feed=enabled)
        )

    def get_settings(self, user_id: str) -> UserSettings:
        validate_user_id(user_id)
        return self._settings(user_id)

    def is_paused(self, user_id: str) -> bool:
        validate_user_id(user_id)
        return self._is_paused(self._settings(user_id))

    def events(self, user_id: str) -> list[Event]:
        """Every raw event of the user, in ``seq`` order."""
        validate_user_id(user_id)
        return self._storage.read_events(user_id).events

    def inspect(self, user_id: str, project_id: str | None = None) -> dict[str, Any]:
        """Everything about the user's memory, JSON-ready: ``settings``, ``preferences``
        (every derived record with provenance), ``retrieval`` (result and diagnostics for
        ``project_id``). Schema: docs/inspect.schema.json."""
        validate_user_id(user_id)
        if project_id is not None:
            validate_project_id(project_id)
        settings = self._settings(user_id)
        context = None if project_id is None else {"project_id": project_id}
        retrieval = self.retrieve_for_injection(user_id, context)
        return {
            "user_id": user_id,
            "derivation_version": self.derivation_version,
            "settings": {
                **msgspec.to_builtins(settings),
                "paused_now": self._is_paused(settings),
            },
            "preferences": [r.to_dict() for r in self._all_records(user_id)],
            "event_count": len(self.events(user_id)),
            "project_id": project_id,
            "retrieval": retrieval.to_dict(),
        }

    def _all_records(self, user_id: str) -> list[Preference]:
        if not self._storage.user_exists(user_id):
            return []
        with self._locked(user_id):
            state, _ = self._refresh(user_id, write_back=True)
            return [state.export_record(r) for r in state.all_records()]

    def explain(
        self,
        user_id: str,
        preference_type: str,
        pattern: str,
        *,
        project_id: str | None = None,
    ) -> Explanation:
        """The derivation trace of (``preference_type``, ``pattern``) in the global list or
        ``project_id``'s: every contributing raw event and what it did, ending at the
        current records."""
        _validate_feature(user_id, preference_type, pattern, project_id)
        return explain(
            self.events(user_id), self.derivation_version, preference_type, pattern, project_id
        )

    def export_memory(self, user_id: str, path: str | os.PathLike[str]) -> None:
        """Write a versioned, checksummed archive of the user's raw events and settings."""
        validate_user_id(user_id)
        data = encode_archive(user_id, self._settings(user_id), self.events(user_id))
        target = Path(path)
        if not target.parent.is_dir():
            raise ValidationError("path", f"directory {target.parent} does not exist")
        atomic_write(target, data)

    def import_memory(
        self, user_id: str, path: str | os.PathLike[str], *, mode: str = "merge"
    ) -> int:
        """Import an archive. ``merge`` appends the events not already present (by content)
        and keeps local settings; ``replace`` makes the user's log and settings exactly the
        archive's. Everything is validated before anything is written. Returns events added."""
        validate_user_id(user_id)
        if mode not in ("merge", "replace"):
            raise ValidationError("mode", f'mode must be "merge" or "replace", got {mode!r}')
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise ValidationError("path", f"cannot read {path}: {exc.strerror}") from exc
        return self._import_bytes(user_id, data, mode)

    def _import_bytes(self, user_id: str, data: bytes, mode: str) -> int:
        """:meth:`import_memory` of an archive already in memory (the app layer's service
        receives uploads as bytes)."""
        validate_user_id(user_id)
        if mode not in ("merge", "replace"):
            raise ValidationError("mode", f'mode must be "merge" or "replace", got {mode!r}')
        archive = decode_archive(data)
        for i, ev in enumerate(archive.events):
            validate_stored_event(ev, f"events[{i}]")
        local = self.events(user_id)
        if mode == "replace" or not local:
            had_settings = self._storage.read_settings(user_id) is not None
            self._replace_log(user_id, archive.events)
            if mode == "replace" or not had_settings:
                self._storage.write_settings(user_id, archive.settings)
            return len(archive.events)
        have = Counter(event_identity(e) for e in local)
        fresh: list[Event] = []
        for e in archive.events:  # a multiset difference: duplicates count
            ident = event_identity(e)
            if have[ident] > 0:
                have[ident] -= 1
            else:
                fresh.append(e)
        if fresh:
            self._append(
                user_id, [msgspec.structs.replace(e, seq=0, h="") for e in fresh], records=False
            )
        return len(fresh)

    def _replace_log(self, user_id: str, events: Sequence[Event]) -> None:
        with self._locked(user_id):
            self._storage.replace_all(user_id, events)
            self._memo.pop(user_id, None)


def _validate_feature(
    user_id: str, preference_type: object, pattern: object, project_id: object
) -> None:
    """Checks shared by the calls that name one pattern (forget, explain)."""
    validate_user_id(user_id)
    for name, value in (("preference_type", preference_type), ("pattern", pattern)):
        if not isinstance(value, str) or not value:
            raise ValidationError(name, f"{name} must be a non-empty string")
    if project_id is not None:
        validate_project_id(project_id)


_POLARITY_OPTIONS = ("all", "positive", "negative")
_STATUS_OPTIONS = ("all", "stable", "under_review", "archived")


def _scope_project(scope: object) -> str | None:
    """``"project:<x>"`` → validated ``x``; ``"all"`` / ``"global"`` → ``None``.

    Anything else is an error (docs/architecture.md, "Option values"): a scope that is
    not understood must never list everything or erase nothing silently.
    """
    if not isinstance(scope, str):
        raise ValidationError("scope", "scope must be a string")
    if scope in ("all", "global"):
        return None
    if scope.startswith("project:") and scope.count(":") == 1:
        return validate_project_id(scope.removeprefix("project:"))
    raise ValidationError(
        "scope", f"unknown scope {scope!r}: expected 'all', 'global' or 'project:<id>'"
    )


def _check_option(field: str, value: object, allowed: tuple[str, ...]) -> None:
    if not isinstance(value, str) or value not in allowed:
        raise ValidationError(
            field, f"unknown {field} {value!r}: expected one of {', '.join(allowed)}"
        )


def _bucket_of(ev: Event) -> tuple[bool, str | None]:
    """Whether ``ev`` belongs to a record bucket, and which (``None`` = global)."""
    if isinstance(ev, SignalEvent):
        return True, ev.project_id if ev.scope == "project" else None
    if isinstance(ev, LegacyRecordEvent):
        return True, ev.bucket
    if isinstance(ev, ComparisonEvent):
        return True, ev.project_id if ev.scope == "project" else None
    return False, None


def _in_bucket(ev: Event, bucket: str | None) -> bool:
    has, b = _bucket_of(ev)
    return has and b == bucket


def _forget_filter(
    ev: Event, preference_type: str, pattern: str, project_id: str | None
) -> Event | None:
    if isinstance(ev, SignalEvent):
        if (
            _in_bucket(ev, project_id)
            and ev.preference_type == preference_type
            and ev.pattern == pattern
        ):
            return None
        return ev
    if isinstance(ev, LegacyRecordEvent):
        r = ev.record
        if (
            ev.bucket == project_id
            and r.get("preference_type") == preference_type
            and r.get("pattern") == pattern
        ):
            return None
        return ev
    if isinstance(ev, ComparisonEvent):
        if not _in_bucket(ev, project_id):
            return ev

        def strip(side: Any) -> Any:
            feats = [
                f
                for f in side.features
                if not (f.preference_type == preference_type and f.pattern == pattern)
            ]
            return (
                side
                if len(feats) == len(side.features)
                else msgspec.structs.replace(side, features=feats)
            )

        chose, over = strip(ev.chose), strip(ev.over)
        if chose is ev.chose and over is ev.over:
            return ev
        if not chose.features and not over.features:
            return None
        return msgspec.structs.replace(ev, chose=chose, over=over)
    if isinstance(ev, RefinementEvent):
        # Free-text diffs can name the pattern; erasure must be real, so drop such entries.
        return None if pattern.encode() in msgspec.json.encode(ev.diff) else ev
    return ev
