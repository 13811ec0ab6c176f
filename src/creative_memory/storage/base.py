"""The storage contract every backend implements (docs/storage.md).

A backend stores, per user: the append-only event log (the truth), the user's settings,
and derived artefacts — the content-addressed derivation cache and a human-readable
snapshot. Derived artefacts are disposable; a log rewrite (erasure) deletes them in the
same critical section.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol

import msgspec

from creative_memory.engine.erasure_notes import ErasureNote
from creative_memory.engine.events import Event
from creative_memory.engine.logcheck import Examined, RawLog
from creative_memory.engine.settings import UserSettings


class LogSnapshot(msgspec.Struct, kw_only=True):
    """Events read from a user's log starting at some position.

    ``generation`` changes whenever the log is rewritten (erasure); ``end`` is an opaque
    position to continue reading from while ``generation`` is unchanged. ``resumed`` tells
    whether the read continued from the requested position (else it is the whole log).
    ``base`` is the chain hash ``h`` of the event just before ``events`` (``None`` when the
    snapshot starts at the beginning of the log).
    """

    events: list[Event]
    generation: str
    end: int
    resumed: bool = False
    base: str | None = None


class Appended(msgspec.Struct, kw_only=True):
    """What an append stored, and where: the log's ``generation`` and the read positions
    just before (``start``) and just after (``end``) the new events. A reader whose last
    read ended at ``start`` in the same generation can fold ``events`` without reading
    them back (``end`` is then where its next read continues)."""

    events: list[Event]
    generation: str
    start: int
    end: int
    #: False for an append of a deferred-sync block (durable only when the block ends):
    #: not to be folded into a state that readers may see before then
    durable: bool = True


@dataclass(frozen=True, slots=True)
class SettingsSeen:
    """A user's settings as a backend saw them (docs/storage.md, "Settings an append
    depends on"). ``fresh``: read just now (else remembered from an earlier read or
    write of this process). ``token``: ``None``, or the backend's mark of what it saw —
    an append conditioned on it (``if_settings``) happens only if the user's settings
    are still these, else it writes nothing and raises :class:`SettingsChanged`."""

    settings: UserSettings | None
    fresh: bool = True
    token: Hashable | None = None


@dataclass(frozen=True, slots=True)
class ImportPlan:
    """What an import writes (docs/storage.md, "Imports"), decided on the user's log and
    settings as they are under the user's lock. ``replace``: the log becomes exactly
    ``events`` (keeping their ``seq``; derived artefacts are purged); else ``events`` are
    appended after the log's tail (numbered and chained there). ``settings``, unless
    ``None``, replace the user's settings in the same critical section."""

    events: Sequence[Event]
    replace: bool = False
    settings: UserSettings | None = None


#: Decides an import from the user's events and stored settings (``None``: none stored).
ImportDecision = Callable[[list[Event], UserSettings | None], ImportPlan]
#: What a repair writes instead of a log read undecoded (``None``: nothing).
RepairDecision = Callable[[RawLog], Examined | None]


class SettingsChanged(Exception):
    """An append conditioned on a :class:`SettingsSeen` found other settings and wrote
    nothing; ``now`` is what the backend read instead (fresh, and a condition in turn)."""

    def __init__(self, user_id: str, now: SettingsSeen) -> None:
        super().__init__(f"the settings of user {user_id} changed")
        self.now = now


class LogRewritten(Exception):
    """An append conditioned on the log's generation (``if_generation``) found it
    rewritten since, and wrote nothing; ``generation`` is the one it found (docs/storage.md,
    "Erasure notes")."""

    def __init__(self, user_id: str, generation: str) -> None:
        super().__init__(f"the log of user {user_id} was rewritten")
        self.generation = generation


class EventLogStorage(Protocol):
    """Append-only per-user event log, settings, and derived artefacts."""

    def describe(self) -> str:
        """Where the data lives (a path or a redacted URL), for messages."""
        ...

    def user_exists(self, user_id: str) -> bool:
        """Whether anything (a log or settings) is stored for the user."""
        ...

    def user_files(self, user_id: str) -> list[str]:
        """Names of everything stored for the user (for erasure checks and diagnostics)."""
        ...

    # -- the log ---------------------------------------------------------------------------
    def read_events(
        self,
        user_id: str,
        *,
        generation: str | None = None,
        start: int = 0,
        sink: Callable[[list[Event]], None] | None = None,
    ) -> LogSnapshot:
        """Events from ``start`` when ``generation`` still matches, else the whole log.

        With ``sink`` the events are handed to it in order, a bounded chunk at a time, and
        the snapshot's ``events`` is empty: memory stays bounded however long the log."""
        ...

    def event_count(self, user_id: str) -> int:
        """How many events the user's log holds, without decoding them."""
        ...

    def read_after_cached(self, user_id: str, is_cached: Callable[[str], bool]) -> LogSnapshot:
        """The events after the newest event whose chain hash satisfies ``is_cached``
        (``base`` = that hash), or the whole log when there is none. Costs O(k) decoding for
        k events after the cached one."""
        ...

    def append(self, user_id: str, events: Sequence[Event]) -> list[Event]:
        """Durably append ``events`` (assigning ``seq`` and ``h``) as one all-or-nothing
        write; returns them as stored. An acknowledged event is durable."""
        ...

    def append_positioned(
        self,
        user_id: str,
        events: Sequence[Event],
        *,
        if_settings: SettingsSeen | None = None,
        if_generation: str | None = None,
    ) -> Appended:
        """:meth:`append`, also telling where the events landed (see :class:`Appended`).
        With ``if_settings`` carrying a token of this backend's, only if the user's
        settings are still the ones it names (else :class:`SettingsChanged`). With
        ``if_generation``, only if the log is still that generation (``""``: there is no
        log yet, or one this append creates) — else :class:`LogRewritten`, nothing
        written."""
        ...

    def rewrite(
        self,
        user_id: str,
        keep: Callable[[Event], Event | None],
        *,
        note: ErasureNote | None = None,
        everything: bool = False,
    ) -> int:
        """Atomically rewrite the log through ``keep`` (``None`` drops an event) and, in the
        same critical section, delete every derived artefact of the user. Returns the
        number of events dropped or changed. ``seq`` numbers are never reused. Without
        ``note`` nothing is written when nothing changes; with it (an erasure) the log of
        an existing user is always rewritten — a new generation, ``note`` kept with it
        (:meth:`rewrite_history`) — and derived artefacts always deleted, so a retried
        erasure leaves nothing behind. ``everything`` (a full reset: ``keep`` drops every
        event) goes on when stored events no longer decode: what must be erased need not
        be read."""
        ...

    def replace_all(self, user_id: str, events: Sequence[Event]) -> None:
        """Atomically replace the whole log with ``events`` and delete every derived
        artefact of the user (a rewrite that erases nothing: its note says so). The events
        keep their ``seq`` unless one of those numbers was handed out here before (an
        erased event's included); then they are numbered on after the highest
        (:func:`~creative_memory.engine.events.numbered_above`)."""
        ...

    def rewrite_history(self, user_id: str) -> tuple[str, list[ErasureNote]]:
        """The log's generation (``""`` when there is no log) and the notes of its latest
        rewrites, oldest first (docs/storage.md, "Erasure notes")."""
        ...

    def import_events(self, user_id: str, decide: ImportDecision) -> ImportPlan:
        """Under the user's lock (one critical section with respect to every other writer
        of the user, in any process): read the log and the settings, ``decide`` what to
        write, and write it — the events as one all-or-nothing write, then the settings.
        A replace is :meth:`replace_all`'s (a new generation, its note saying nothing was
        erased); an append keeps the generation and the notes. Returns the plan written.
        Nothing is written when ``decide`` raises."""
        ...

    def user_ids(self) -> list[str]:
        """Every user with a log or settings here, sorted (for a check of them all)."""
        ...

    def read_raw(self, user_id: str) -> RawLog | None:
        """The user's log with its events undecoded, for a check (docs/storage.md, "Check
        and repair"); ``None`` when there is no log."""
        ...

    def repair(self, user_id: str, decide: RepairDecision) -> None:
        """Under the user's lock: read the log undecoded, ``decide`` what replaces it and
        write that as a rewrite does — its events chained anew, its floor, a note saying
        nothing was erased, a new generation, every derived artefact deleted. Nothing is
        written when there is no log, or when ``decide`` returns ``None`` or raises."""
        ...

    def generation(self, user_id: str) -> str:
        """Identifier of the log's current content lineage; changes on every rewrite."""
        ...

    # -- settings ----------------------------------------------------------------------------
    def read_settings(self, user_id: str) -> UserSettings | None:
        """The user's stored settings, or ``None`` when there are none."""
        ...

    def recent_settings(self, user_id: str, *, fresh: bool = False) -> SettingsSeen:
        """The user's settings for a decision an append depends on: as this process last
        saw them when the backend can check them at the append (a token), else — and with
        ``fresh`` — read now."""
        ...

    def write_settings(self, user_id: str, settings: UserSettings) -> None:
        """Atomically replace the user's settings."""
        ...

    def update_settings(
        self, user_id: str, change: Callable[[UserSettings], UserSettings]
    ) -> UserSettings:
        """Atomic read-modify-write of the settings (defaults when none are stored)."""
        ...

    # -- derived artefacts ---------------------------------------------------------------------
    def cache_keys(self, user_id: str) -> set[str]:
        """The keys of the user's derivation-cache entries."""
        ...

    def cache_get(self, user_id: str, key: str) -> bytes | None:
        """A cache entry (and mark it recently used), or ``None``."""
        ...

    def write_back(
        self, user_id: str, generation: str, key: str, state: bytes, snapshot: bytes
    ) -> bool:
        """Store a derived state under ``key`` and the snapshot — only if the log's
        generation is still ``generation`` (so erased content is never written back).
        Evicts least recently used entries beyond the capacity. Returns whether written."""
        ...
