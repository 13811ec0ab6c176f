"""``MemoryStore``: the library entry point joining storage (host side) and the pure engine.

Reads derive lazily from the event log. Within a process the store keeps the last derived
state per user and extends it with newly appended events (O(k) for k new events); a
rewritten log (erasure) or another derivation version derives afresh.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from creative_memory.app import erasing, imports
from creative_memory.app import learning as rules
from creative_memory.app.derived import DerivedStates, _Memo
from creative_memory.app.door import LogDoor
from creative_memory.app.held import StoreHolding
from creative_memory.app.paths import output_file, read_file
from creative_memory.app.results import SettingsView
from creative_memory.capture.redaction import RedactionPolicy
from creative_memory.engine.constants import DERIVATION_VERSION
from creative_memory.engine.derivation.registry import DerivedState, check_version
from creative_memory.engine.erasure import ErasureListener
from creative_memory.engine.errors import ValidationError
from creative_memory.engine.events import (
    ComparisonEvent,
    DecayPassEvent,
    Event,
    build_refinement_event,
    check_comparison,
    validate_project_id,
    validate_user_id,
)
from creative_memory.engine.explain import Explanation, explain
from creative_memory.engine.models import DecayResult, Preference, Refinement, RetrievalResult
from creative_memory.engine.portability.archive import encode_archive
from creative_memory.engine.retrieval import Retrieved, copy_result, parse_context, retrieve_shared
from creative_memory.engine.scope import (
    check_list_options,
    select_records,
    validate_feature,
)
from creative_memory.engine.timeutil import check_normalised_ts, format_ts, instant_to_ms
from creative_memory.storage import FileStorage, UserSettings
from creative_memory.storage.base import EventLogStorage, SettingsSeen
from creative_memory.storage.files.cache import DEFAULT_CACHE_CAPACITY
from creative_memory.storage.files.fsutil import atomic_write

Clock = Callable[[], int]


def wall_clock_ms() -> int:
    """Current time in epoch milliseconds (floored)."""
    return time.time_ns() // 1_000_000


class MemoryStore:
    """Preference memory for every user under one storage root.

    ``clock`` (epoch-ms callable) is where "now" comes from when a call does not pass a time
    explicitly; it defaults to the wall clock. ``cache_capacity`` bounds the derivation cache
    per user (entries, LRU). ``redaction`` is applied to every event appended, whatever its
    path (docs/capture.md, "Redaction"): ``True`` the default policy, a ``RedactionPolicy``
    of your own, or ``False`` to store free text as given (explicitly off).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        derivation_version: str | None = None,
        clock: Clock | None = None,
        cache_capacity: int = DEFAULT_CACHE_CAPACITY,
        redaction: RedactionPolicy | bool = True,
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
        self._door = LogDoor(redaction)
        self._states = DerivedStates(self._storage, self.derivation_version)

    def flush(self) -> None:
        """Write every pending derived state back (cache entry and snapshot). Reads defer
        write-back (docs/storage.md); this makes the on-disk cache current now."""
        for states in self._states.every():
            states.flush()

    def close(self) -> None:
        """Write pending derived state back (:meth:`flush`) and release backend resources
        (a database connection pool)."""
        try:
            self.flush()
        finally:
            getattr(self._storage, "close", lambda: None)()  # a database's connection pool

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def root(self) -> str:
        """Where the memory lives: the file store's directory or the database URL (redacted)."""
        return self._storage.describe()

    # -- internals -------------------------------------------------------------------------
    def now_ms(self) -> int:
        """The store's notion of "now" (epoch ms) — the injected clock."""
        return self._clock()

    def _files_root(self) -> Path | None:
        """The file store's directory (``None`` for a database)."""
        storage = self._storage
        return storage.root if isinstance(storage, FileStorage) else None

    def _settings(self, user_id: str) -> UserSettings:
        return self._storage.read_settings(user_id) or UserSettings()

    def _is_paused(self, settings: UserSettings) -> bool:
        return rules.is_paused(settings, self.now_ms())

    def _learning(self, settings: UserSettings) -> bool:
        return rules.is_learning(settings, self.now_ms())

    def _refresh(
        self,
        user_id: str,
        want_seqs: Sequence[int] = (),
        *,
        write_back: bool = False,
        settings: UserSettings | None = None,
    ) -> tuple[DerivedState, dict[int, Preference | Refinement | None]]:
        states = self._states_of(user_id, settings=settings)
        return states.refresh(user_id, want_seqs, write_back=write_back)

    def _append(
        self,
        user_id: str,
        events: Sequence[Event],
        *,
        records: bool = True,
        settings: UserSettings | None = None,
        if_settings: SettingsSeen | None = None,
        if_generation: str | None = None,
    ) -> list[Preference | Refinement | None]:
        states = self._states_of(user_id, settings=settings)
        admitted = self._door.admit(events)
        return states.append(
            user_id,
            admitted,
            records=records,
            if_settings=if_settings,
            if_generation=if_generation,
        )

    def _states_of(
        self, user_id: str, version: str | None = None, settings: UserSettings | None = None
    ) -> DerivedStates:
        """The derived states of ``version`` (default: the version ``user_id`` uses; a
        caller holding the user's ``settings`` passes them, saving a read)."""
        v = version
        if v is None:
            chosen = (settings or self._settings(user_id)).derivation_version
            v = chosen or self.derivation_version
        return self._states.of(v)

    def _forget_states(self, user_id: str) -> None:
        for states in self._states.every():
            states.forget_user(user_id)

    def _version_of(self, user_id: str) -> str:
        """The derivation version ``user_id``'s memory uses (their setting, else the store's)."""
        return self._states_of(user_id).version

    def add_erasure_listener(self, listener: ErasureListener) -> None:
        """Purge ``listener`` (a capture layer holding pending events) before every forget
        and reset, whichever surface asks (docs/architecture.md, "Erasure"). Held weakly.
        A listener that takes one (``use_holding``: a capture layer) is also given the
        store's holding, to judge what it holds as of capture (docs/capture.md, "Held
        events")."""
        self._door.add_listener(listener)
        use_holding = getattr(listener, "use_holding", None)
        if use_holding is not None:
            use_holding(StoreHolding(self))

    def remove_erasure_listener(self, listener: ErasureListener) -> None:
        """Stop purging ``listener``."""
        self._door.remove_listener(listener)

    def _locked(self, user_id: str) -> contextlib.AbstractContextManager[None]:
        return self._states.locked(user_id)

    @property
    def _memo(self) -> dict[str, _Memo]:
        return self._states.memo

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
        now = self.now_ms()
        decide = rules.signals_decision(signals, refinement, now)
        settings, results = self._append_allowed(user_id, decide, records)
        if results is None or not rules.is_learning(settings, now):
            return [None] * len(signals)
        return [r if isinstance(r, Preference) else None for r in results[: len(signals)]]

    def _append_allowed(
        self,
        user_id: str,
        decide: rules.Decision,
        records: bool = True,
        *,
        if_generation: str | None = None,
    ) -> tuple[UserSettings, list[Preference | Refinement | None] | None]:
        """Append what ``decide`` makes of the user's settings, on the condition that they
        still hold (:func:`~creative_memory.app.learning.append_as_allowed`) — and only in
        ``if_generation`` when given (a held event: docs/capture.md, "Held events")."""

        def append(
            st: UserSettings, events: Sequence[Event], seen: SettingsSeen
        ) -> list[Preference | Refinement | None]:
            return self._append(
                user_id,
                events,
                records=records,
                settings=st,
                if_settings=seen,
                if_generation=if_generation,
            )

        return rules.append_as_allowed(self._storage, user_id, decide, append)

    def append_comparison(self, user_id: str, event: ComparisonEvent) -> bool:
        """Store a pairwise comparison unless learning is off; returns whether it was stored.
        The event is checked as ingestion stores it (times normalised, features and scope:
        :func:`~creative_memory.engine.events.check_comparison`)."""
        validate_user_id(user_id)
        check_normalised_ts(event.at, "at")
        check_normalised_ts(event.recorded_at, "recorded_at")
        check_comparison(event)
        decide = rules.when(rules.is_learning, [event], self.now_ms())
        return self._append_allowed(user_id, decide, records=False)[1] is not None

    def retrieve_for_injection(
        self, user_id: str, context: Mapping[str, Any] | None = None
    ) -> RetrievalResult:
        """The bounded, balanced set of records for one generation, with its diagnostics."""
        return copy_result(*self._retrieved(user_id, context))

    def _retrieved(self, user_id: str, context: Mapping[str, Any] | None) -> Retrieved:
        """:meth:`retrieve_for_injection` as the state memoised it: shared, only to be read."""
        validate_user_id(user_id)
        if not self._storage.user_exists(user_id):
            return RetrievalResult(), []
        settings = self._settings(user_id)
        if not settings.memory_enabled:
            return RetrievalResult(), []
        project_id, types = parse_context(context)
        return self._states_of(user_id, settings=settings).read(
            user_id, lambda s: retrieve_shared(s, project_id, types, settings.disabled_projects)
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
        """The user's derived records in ``scope``, filtered, strongest first."""
        validate_user_id(user_id)
        check_list_options(scope, polarity, min_strength, status)  # before anything is read
        if not self._storage.user_exists(user_id):
            return []
        return self._states_of(user_id).read(
            user_id, lambda s: select_records(s, scope, polarity, min_strength, status)
        )

    def set_memory_enabled(self, user_id: str, enabled: bool) -> None:
        """The soft kill switch: off means nothing is learned or injected; nothing is deleted."""
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
        self._reset(user_id, scope)

    def _reset(self, user_id: str, scope: str) -> int:
        """:meth:`reset_memory`, returning how many events were erased (the service's count)."""
        return erasing.reset(self, user_id, scope)

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
        ev = build_refinement_event(
            {"artifact_id": artifact_id, "project_id": project_id, "diff": diff}, recorded_at
        )
        _, stored = self._append_allowed(user_id, rules.when(rules.unpaused, [ev], self.now_ms()))
        if stored is None:  # paused
            return Refinement(
                id="ref_unsaved",
                artifact_id=ev.artifact_id,
                project_id=ev.project_id,
                timestamp=ev.at,
                diff=ev.diff,
            )
        (entry,) = stored
        assert isinstance(entry, Refinement)
        return entry

    def refinement_log(self, user_id: str) -> list[Refinement]:
        """The user's refinement log, oldest first."""
        validate_user_id(user_id)
        if not self._storage.user_exists(user_id):
            return []
        return self._states_of(user_id).read(
            user_id, lambda s: list(s.refinements), write_back=False
        )

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
        return erasing.forget(self, user_id, preference_type, pattern, project_id)

    def import_prototype(self, user_id: str, path: str | os.PathLike[str]) -> int:
        """Import a prototype-era ``preferences.json`` as ``legacy_record`` events (plus its
        refinement log and master switch). Idempotent: records already imported are skipped.
        Everything is validated first; a malformed file imports nothing. Returns the number
        of records imported."""
        validate_user_id(user_id)
        return imports.import_prototype(self, user_id, read_file("path", Path(path)))

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
        """End a pause: learning starts again."""
        validate_user_id(user_id)
        self._update_settings(
            user_id, lambda s: msgspec.structs.replace(s, paused=False, paused_until=None)
        )

    def set_project_disabled(self, user_id: str, project_id: str, disabled: bool) -> None:
        """Make retrieval for ``project_id`` ignore global records (or use them again)."""
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
        """The user's settings (defaults for a user with none)."""
        validate_user_id(user_id)
        return self._settings(user_id)

    def is_paused(self, user_id: str) -> bool:
        """Whether a pause is in force now (an expired pause is not)."""
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
            "derivation_version": self._version_of(user_id),
            "settings": msgspec.to_builtins(SettingsView.of(settings, self._is_paused(settings))),
            "preferences": [r.to_dict() for r in self._all_records(user_id)],
            "event_count": self._storage.event_count(user_id),
            "project_id": project_id,
            "retrieval": retrieval.to_dict(),
        }

    def _all_records(self, user_id: str) -> list[Preference]:
        if not self._storage.user_exists(user_id):
            return []
        return self._states_of(user_id).read(
            user_id, lambda s: [s.export_record(r) for r in s.all_records()]
        )

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
        validate_feature(user_id, preference_type, pattern, project_id)
        return explain(
            self.events(user_id), self._version_of(user_id), preference_type, pattern, project_id
        )

    def export_memory(self, user_id: str, path: str | os.PathLike[str]) -> None:
        """Write a versioned, checksummed archive of the user's raw events and settings."""
        validate_user_id(user_id)
        target = output_file("path", path, self._files_root())
        data = encode_archive(user_id, self._settings(user_id), self.events(user_id))
        atomic_write(target, data)

    def import_memory(
        self, user_id: str, path: str | os.PathLike[str], *, mode: str = "merge"
    ) -> int:
        """Import an archive. ``merge`` appends the events not already present (by content)
        and keeps local settings; ``replace`` makes the user's log and settings exactly the
        archive's. Everything is validated before anything is written. Returns events added."""
        validate_user_id(user_id)
        data = read_file("path", Path(path))
        return self._import_bytes(user_id, data, mode)

    def _import_bytes(self, user_id: str, data: bytes, mode: str) -> int:
        """:meth:`import_memory` of an archive already in memory (the app layer's service
        receives uploads as bytes)."""
        validate_user_id(user_id)
        return imports.import_archive(self, user_id, data, mode)
