"""Derivations of a user's log other than the one memory uses now (docs/time-travel.md):
under another derivation version (a preview) or of a prefix of the log (as of an event).

Read-only: nothing here appends, writes back a cache entry or a snapshot. The past is
re-derived from the log *as it is now*: events that were forgotten stay forgotten.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeVar

import msgspec

from creative_memory.app.results import AsOf, PreviewResult, SettingsView
from creative_memory.engine.derivation.base import DerivedState
from creative_memory.engine.derivation.registry import check_version, derive
from creative_memory.engine.erasure import Erasure
from creative_memory.engine.errors import ValidationError
from creative_memory.engine.events import Event, validate_project_id, validate_user_id
from creative_memory.engine.explain import Explanation, explain
from creative_memory.engine.models import RetrievalResult
from creative_memory.engine.preview import compare
from creative_memory.engine.prompt import build_generation_block
from creative_memory.engine.retrieval import retrieve_state
from creative_memory.engine.settings import version_at
from creative_memory.engine.timeutil import format_ts, try_parse_ts, ts_to_ms

if TYPE_CHECKING:
    from creative_memory.app.store import MemoryStore

#: Prefix states kept per process (each a full derived state).
PREFIX_CAPACITY: Final = 16
#: Users whose decoded log is kept per process for as-of views (least recently used first
#: out; a user's log is read again, incrementally from then on, when next asked for).
LOG_CAPACITY: Final = 8
K = TypeVar("K", bound=tuple[Any, ...])
V = TypeVar("V")

#: ``explain`` answers kept per process (the page's "Why?" asked again of a memory that has
#: not changed is a lookup, not a fit at every event of the pattern).
EXPLAIN_CAPACITY: Final = 32


@dataclass(frozen=True)
class Point:
    """A point in a user's history: right after the event ``at_seq`` (recorded at
    ``recorded_at``), derived under ``version``."""

    at_seq: int
    recorded_at: str
    version: str
    events: int  # how many events of today's log that prefix holds
    # the log the point was found in (its generation and events): what is derived or shown
    # for the point comes from that same read, whatever rewrite lands in between
    generation: str = field(default="", compare=False, repr=False)
    log: Sequence[Event] = field(default=(), compare=False, repr=False)


@dataclass
class _Log:
    generation: str
    end: int
    events: list[Event]
    seqs: list[int]


class History:
    """Prefix states and other-version states of one store's users.

    It keeps the decoded logs of the last :data:`LOG_CAPACITY` users, the last
    :data:`PREFIX_CAPACITY` prefix states and the last :data:`EXPLAIN_CAPACITY` ``explain``
    answers, and is one of the store's erasure listeners: a forget or reset drops every log,
    prefix state and answer it holds for that user, so nothing erased stays in memory here
    (docs/time-travel.md, "Cost")."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self._logs: OrderedDict[str, _Log] = OrderedDict()
        self._prefixes: OrderedDict[tuple[str, str, str, int], DerivedState] = OrderedDict()
        self._explained: OrderedDict[tuple[Any, ...], Explanation] = OrderedDict()
        self._lock = threading.RLock()
        store.add_erasure_listener(self)

    def purge(self, erasure: Erasure) -> int:
        """Drop the user's decoded log, prefix states and explain answers (the store calls
        it on every forget and reset); how many of them were dropped."""
        with self._lock:
            dropped = int(self._logs.pop(erasure.user_id, None) is not None)
            return dropped + self._drop(erasure.user_id)

    def current(self, user_id: str, version: str) -> DerivedState:
        """The user's state now under ``version`` (kept current like the store's own, never
        written back). Call under the store's lock for the user."""
        state, _ = self._store._states_of(user_id, version).refresh(user_id)
        return state

    def point(self, user_id: str, at_seq: int | None, as_of: str | None) -> Point | None:
        """The point ``at_seq`` or ``as_of`` name (``None`` when neither is given)."""
        validate_user_id(user_id)  # before the log is read: the id names a directory
        if at_seq is not None and as_of is not None:
            raise ValidationError("at_seq", "give at_seq or as_of, not both")
        if at_seq is None and as_of is None:
            return None
        log = self._log(user_id)
        when: str | None = None
        if at_seq is not None:
            if isinstance(at_seq, bool) or not isinstance(at_seq, int) or at_seq < 0:
                raise ValidationError("at_seq", "at_seq must be an event number >= 0")
            n = bisect.bisect_right(log.seqs, at_seq)
        else:
            ms = try_parse_ts(as_of.strip()) if isinstance(as_of, str) else None
            if ms is None:
                raise ValidationError("as_of", f"as_of {as_of!r} is not an ISO 8601 date")
            when = format_ts(ms)
            # the longest prefix of the log recorded by then (an imported event keeps its
            # archive's recorded_at, so the log need not be in recorded_at order: the first
            # event recorded later ends the prefix)
            # (as instants: an expanded year, ``+010000-…``, sorts apart as text)
            n = next(
                (i for i, e in enumerate(log.events) if ts_to_ms(e.recorded_at) > ms),
                len(log.events),
            )
        # the point is the last event kept (a number past the end is now: the last event)
        past_end = at_seq is not None and bool(log.seqs) and at_seq > log.seqs[-1]
        at_seq = log.events[n - 1].seq if n else 0
        last = log.events[n - 1] if n else None
        recorded = last.recorded_at if last is not None else ""
        settings = self._store.get_settings(user_id)
        version = version_at(
            settings, self._store.derivation_version, self._moment(log.events, n, when, past_end)
        )
        return Point(at_seq, recorded, version, n, log.generation, log.events)

    @staticmethod
    def _moment(events: list[Event], n: int, when: str | None, past_end: bool) -> str | None:
        """When the version of a point is read (``None``: now): as of a time, that time;
        right after an event, then; past the end of the log, now; before the first event,
        the millisecond before it (docs/time-travel.md, "The version then")."""
        if when is not None:
            return when
        if past_end or not events:
            return None
        if n:
            return events[n - 1].recorded_at
        return format_ts(ts_to_ms(events[0].recorded_at) - 1)

    def events_until(self, user_id: str, point: Point | None) -> list[Event]:
        """The events of today's log up to ``point`` (``None``: all of them), from the log
        kept decoded for the last users asked about (a timeline per card of the page reads
        it once)."""
        if point is None:
            return self._log(user_id).events[:]
        return list(point.log[: point.events])

    def state_at(self, user_id: str, point: Point) -> DerivedState:
        """The derived state right after ``point``'s event (cached per process, while the
        log it was read from is the user's log: nothing derived from a log an erasure has
        replaced is kept)."""

        def make() -> DerivedState:
            state = derive(list(point.log[: point.events]), point.version)
            state.materialize()
            return state

        key = (user_id, point.generation, point.version, point.events)
        return self._cached(self._prefixes, PREFIX_CAPACITY, key, make)

    def explained(
        self,
        user_id: str,
        point: Point | None,
        feature: tuple[str, str, str | None],
    ) -> Explanation:
        """``explain`` of ``feature`` (type, pattern, project) right after ``point`` (``None``:
        now, under the version in force), kept like a prefix state: asked again of the
        same log, version and prefix, it is a lookup. Each answer is a copy of what is kept
        (a caller sets its ``as_of``)."""
        if point is None:
            log = self._log(user_id)
            generation, events = log.generation, log.events[:]
            version, n = self._store._version_of(user_id), len(events)
        else:
            generation, events = point.generation, list(point.log[: point.events])
            version, n = point.version, point.events
        key = (user_id, generation, version, n, *feature)
        result = self._cached(
            self._explained,
            EXPLAIN_CAPACITY,
            key,
            lambda: explain(events, version, *feature),
            # (an empty answer, nothing to explain, is not kept: it is cheap and holds
            # nothing but the name asked about)
            keeps=lambda answer: bool(answer.steps or answer.records),
        )
        return msgspec.structs.replace(result)

    def _cached(
        self,
        kept: OrderedDict[K, V],
        capacity: int,
        key: K,
        make: Callable[[], V],
        keeps: Callable[[V], bool] = lambda _: True,
    ) -> V:
        """``kept[key]``, or ``make()`` — kept (at most ``capacity``, the least recently
        used dropped first) when ``keeps`` takes it and the log it was derived from (the
        key's generation, after its user) is still the user's log: nothing derived from a
        log an erasure has replaced is kept."""
        user_id, generation = key[0], key[1]
        with self._lock:
            value = kept.get(key)
            if value is not None:
                kept.move_to_end(key)
                return value
        value = make()
        current = self._store._storage.generation(user_id)
        with self._lock:
            if keeps(value) and current == generation and self._current(user_id, current):
                kept[key] = value
                while len(kept) > capacity:
                    kept.popitem(last=False)
        return value

    def _current(self, user_id: str, generation: str) -> bool:
        """Whether ``generation`` is the user's log as this history last read it; drops
        everything kept of the user's other generations (a rewrite here or in another
        process: what they hold may be erased). Call under ``_lock``."""
        self._drop(user_id, but=generation)
        log = self._logs.get(user_id)
        if log is not None and log.generation != generation:
            del self._logs[user_id]
            return False
        return log is not None

    def _drop(self, user_id: str, *, but: str | None = None) -> int:
        """Drop the prefix states and explain answers kept of the user (of every log
        generation but ``but``); how many. Call under ``_lock``."""
        dropped = 0
        for kept in (self._prefixes, self._explained):
            for key in [k for k in kept if k[0] == user_id and k[1] != but]:
                del kept[key]
                dropped += 1
        return dropped

    def _log(self, user_id: str) -> _Log:
        """Today's log of the user, read incrementally (a rewrite reads it again)."""
        storage = self._store._storage
        with self._lock:
            log = self._logs.get(user_id)
            if log is not None:
                self._logs.move_to_end(user_id)
                snap = storage.read_events(user_id, generation=log.generation, start=log.end)
                if snap.resumed:
                    log.events.extend(snap.events)
                    log.seqs.extend(e.seq for e in snap.events)
                    log.end = snap.end
                    return log
            snap = storage.read_events(user_id)
            events = list(snap.events)
            log = _Log(snap.generation, snap.end, events, [e.seq for e in events])
            self._drop(user_id, but=log.generation)  # derived from a log since rewritten
            if storage.generation(user_id) != log.generation:
                return log  # rewritten since it was read (an erasure): used once, not kept
            self._logs[user_id] = log
            self._logs.move_to_end(user_id)
            while len(self._logs) > LOG_CAPACITY:
                self._logs.popitem(last=False)
            return log


def as_of(point: Point) -> AsOf:
    """The result type's form of ``point``."""
    return AsOf(
        at_seq=point.at_seq,
        recorded_at=point.recorded_at,
        derivation_version=point.version,
        events=point.events,
        next_seq=point.log[point.events].seq if point.events < len(point.log) else None,
    )


def retrieval_at(
    store: MemoryStore, history: History, user_id: str, project_id: str | None, point: Point
) -> RetrievalResult:
    """What a generation would have got right after ``point`` (today's project switches)."""
    settings = store.get_settings(user_id)
    if not settings.memory_enabled:
        return RetrievalResult()
    state = history.state_at(user_id, point)
    return retrieve_state(state, project_id, None, settings.disabled_projects)


def inspect_at(
    store: MemoryStore, history: History, user_id: str, project_id: str | None, point: Point
) -> dict[str, Any]:
    """``MemoryStore.inspect``'s document as it was right after ``point``, with ``as_of``."""
    if project_id is not None:
        validate_project_id(project_id)
    state = history.state_at(user_id, point)
    settings = store.get_settings(user_id)
    return {
        "user_id": user_id,
        "derivation_version": point.version,
        "settings": msgspec.to_builtins(SettingsView.of(settings, store.is_paused(user_id))),
        "preferences": [state.export_record(r).to_dict() for r in state.all_records()],
        "event_count": point.events,
        "project_id": project_id,
        "retrieval": retrieval_at(store, history, user_id, project_id, point).to_dict(),
        "as_of": msgspec.to_builtins(as_of(point)),
    }


def preview(
    store: MemoryStore, history: History, user_id: str, version: str, project_id: str | None
) -> PreviewResult:
    """Derive the user's log under the version in force and under ``version``, side by side;
    writes nothing."""
    check_version(version)
    if project_id is not None:
        validate_project_id(project_id)
    settings = store.get_settings(user_id)
    current = store._version_of(user_id)
    sides = []
    with store._locked(user_id):
        for v in (current, version):
            state = history.current(user_id, v)
            records = [state.export_record(r) for r in state.all_records()]
            result = retrieve_state(state, project_id, None, settings.disabled_projects)
            sides.append((records, result, build_generation_block(result, project_id)))
    (ra, res_a, ba), (rb, res_b, bb) = sides
    return PreviewResult(
        user_id=user_id,
        project_id=project_id,
        from_version=current,
        to_version=version,
        change=compare(ra, rb, res_a, res_b, ba, bb),
    )
