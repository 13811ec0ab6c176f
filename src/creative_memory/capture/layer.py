"""Capture policy (docs/capture.md): the host-side component between a host tool and the
store.

A host reports what happened in its UI as wire-format events (docs/capture.md, "Wire
format": the handler's name without ``on_`` in ``"event"``, plus two capture-only kinds,
``generation_started`` and ``tab_activated``). :class:`CaptureLayer` decides what becomes
feedback, redacts it and calls the adapter handlers:

========================  ===============================================================
event                     capture rule (defaults; each configurable in CaptureConfig)
========================  ===============================================================
generation_accepted       only an explicit "Use this" (``trigger`` absent or ``explicit``);
                          tab promotion / idle preview are rejected
artifact_edited_and_saved coalesced per ``(user, artifact_id, session_id)``: the first save
                          opens a 30 s window, later saves in it are merged, one signal is
                          delivered when the window expires (or on ``close()``); a save
                          captured before the window's latest one opens its own
explicit_tag_applied      explicit tags only (``trigger`` ``chat_nlp`` is rejected); the tag
                          must be in ``TAG_POLARITY`` (the adapter checks)
thumbs_rated              repeated clicks with the same rating on one artifact within
                          ``thumbs_debounce_s`` after the previous click count once
generation_abandoned      explicit discard (or a host-detected new generation); never on
                          inactivity
(inferred abandonment)    ``generation_started`` while a previous generation of the same
                          session is still unsettled abandons it: only the active tab
                          (``abandon_mode="active_tab"``) or every pending one
                          (``"any_pending"``)
revert_after_edit         history-panel revert only (undo / VCS revert are rejected)
pairwise_comparison       delivered as is
========================  ===============================================================

A generation is *settled* (no longer a candidate for inferred abandonment) once it is
accepted, edited and saved, explicitly abandoned, or part of a pairwise comparison.

Time is passed in explicitly (``now``: epoch ms, ISO string or aware ``datetime``), so every
rule is testable without sleeping. Pending coalesced edits are flushed when their window
expires (checked on every call; call :meth:`CaptureLayer.tick` periodically) and on
:meth:`CaptureLayer.close` — nothing is silently lost. A flushed event whose delivery fails
with a storage error stays pending and is retried on the next call.

Before any rule, an event must meet the wire format's limits (``capture/wire.py``,
docs/capture.md, "Limits"). A store that accepts erasure listeners (``MemoryStore``) gets
the layer registered as one: its forgets and resets first purge what they erase from the
pending edit-saves and generations (:meth:`CaptureLayer.purge`). Given the store's
:class:`~.holding.Holding`, the layer has what it holds judged as of capture: on the
settings then, and dropped after an erasure elsewhere (docs/capture.md, "Held events").

Every call returns a :class:`CaptureReport` counting accepted / coalesced / rejected events
with reasons (the shape of the daemon's ``POST /api/v1/events`` answer). Reasons are redacted
too: an error message can echo user text.

The layer's lock guards only its own bookkeeping (windows, sessions, thumbs); events are
delivered to the store outside it, so concurrent calls append concurrently (and share
fsyncs: docs/storage.md, "Group commit"). Deliveries about one user's artifact keep the
order in which the bookkeeping decided them (a turn per ``(user, artifact)``), and an
erasure also rewrites the deliveries still waiting and waits for those under way.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from creative_memory.capture import adapter
from creative_memory.capture.adapter import Handler, SignalSink
from creative_memory.capture.checks import Rejected as _Rejected
from creative_memory.capture.checks import check_event
from creative_memory.capture.checks import check_trigger as _check_trigger
from creative_memory.capture.checks import short as _short
from creative_memory.capture.config import AbandonMode, CaptureConfig
from creative_memory.capture.delivery import (
    Deliveries,
    Delivery,
    EditWindow,
    WindowKey,
    artifacts_of,
    merge_edits,
)
from creative_memory.capture.holding import Held, Holding, RecentErasures, judged_by
from creative_memory.capture.redaction import RedactionPolicy
from creative_memory.capture.report import CaptureReport, CaptureResult, Status, describe
from creative_memory.capture.wire import check_wire_event, purge_event
from creative_memory.engine.erasure import Erasure
from creative_memory.engine.errors import ValidationError
from creative_memory.engine.timeutil import instant_to_ms

Instant = int | str | datetime

CAPTURE_ONLY_KINDS = ("generation_started", "tab_activated")
#: The kinds whose events the layer holds (an edit window, an unsettled generation).
HELD_KINDS = ("artifact_edited_and_saved", "generation_started")


@dataclass
class _Generation:
    event: dict[str, Any]  # redacted generation_started payload (fields of an abandon event)
    held: Held | None = None  # what the store said when it started


@dataclass
class _Session:
    pending: dict[str, _Generation] = field(default_factory=dict)  # artifact_id → generation
    active: str | None = None


class CaptureLayer:
    """The capture policy in front of a store (any :class:`~.adapter.SignalSink`)."""

    def __init__(
        self,
        store: SignalSink,
        config: CaptureConfig | None = None,
        *,
        redaction: RedactionPolicy | None = None,
        handlers: Mapping[str, Handler] | None = None,
    ) -> None:
        self.store = store
        self.config = config or CaptureConfig()
        self.redaction = redaction or RedactionPolicy()
        self._handlers: Mapping[str, Handler] = handlers or adapter.HANDLERS
        self._edits: dict[tuple[str, str | None, str | None], EditWindow] = {}
        self._thumbs: dict[tuple[str, str | None], tuple[int, str]] = {}
        self._sessions: dict[tuple[str, str | None], _Session] = {}
        self._order = 0
        self._closed = False
        self._lock = threading.RLock()
        self._out = Deliveries(self._lock, self._delivered)
        self._holding: Holding | None = None  # given by the store when it registers us
        self._recent = RecentErasures()  # what purge() took, for events held from now on
        register = getattr(store, "add_erasure_listener", None)
        if register is not None:  # erasure reaches what is pending here (docs/capture.md)
            register(self)

    # -- public --------------------------------------------------------------------------
    def submit(self, event: Mapping[str, Any], now: Instant) -> CaptureReport:
        """Apply the capture rules to one wire-format event at time ``now``."""
        return self.submit_many([event], now)

    def submit_many(self, events: Iterable[Mapping[str, Any]], now: Instant) -> CaptureReport:
        """Apply the capture rules to each event in order, all at time ``now``."""
        now_ms = _to_ms(now)
        report = CaptureReport()
        with self._lock:
            if self._closed:
                raise RuntimeError("capture layer is closed")
        batch = list(events)
        holds = self._holds(batch)
        self._step(lambda: self._flush_expired(now_ms), report)
        for i, ev in enumerate(batch):
            self._step(functools.partial(self._one, ev, i, now_ms, report, holds), report)
        return report

    def use_holding(self, holding: Holding) -> None:
        """Judge the events this layer holds as of their capture through ``holding`` (a
        ``MemoryStore`` calls it when the layer registers; docs/capture.md, "Held events")."""
        self._holding = holding

    def _holds(self, events: list[Mapping[str, Any]]) -> dict[str, Held]:
        """What the store says now of each user of ``events`` whose event may be held,
        asked before the lock (a storage error raises here, before anything is decided)."""
        holds: dict[str, Held] = {}
        if self._holding is None:
            return holds
        for ev in events:
            if not isinstance(ev, Mapping) or ev.get("event") not in HELD_KINDS:
                continue
            user = ev.get("user_id")
            if isinstance(user, str) and user not in holds:
                with contextlib.suppress(ValidationError):  # rejected later, with a reason
                    holds[user] = self._recent.stamp(self._holding.hold(user))
        return holds

    def tick(self, now: Instant) -> CaptureReport:
        """Deliver every coalescing window that has expired at ``now``."""
        now_ms = _to_ms(now)
        report = CaptureReport()
        self._step(lambda: self._flush_expired(now_ms), report)
        return report

    def close(self) -> CaptureReport:
        """Shutdown: deliver every pending coalesced event now, whatever its window, and
        wait for the deliveries of other calls still under way."""
        report = CaptureReport()

        def flush_all() -> None:
            for key in self._windows_in_order(None):
                self._flush(key)
            self._closed = True

        self._step(flush_all, report)
        with self._lock:
            self._out.wait(None)
        unregister = getattr(self.store, "remove_erasure_listener", None)
        if unregister is not None:
            unregister(self)
        return report

    def _step(self, decide: Callable[[], None], report: CaptureReport) -> None:
        """``decide`` under the lock (bookkeeping: it plans deliveries), then deliver what
        it planned outside the lock — also when it raised (what it planned holds turns)."""
        error: BaseException | None = None
        with self._lock:
            try:
                decide()
            except BaseException as exc:
                error = exc
            plan = self._out.take()
        self._out.run(plan, report, self._handle, self.redaction.redact_text)
        if error is not None:
            raise error

    def purge(self, erasure: Erasure) -> int:
        """Remove what ``erasure`` erases from the user's pending edit-saves and generations
        and from the deliveries that took them and still wait for their turn, record on
        each that it was judged by ``erasure`` (:func:`~.holding.judged_by`), then wait
        for the user's deliveries under way (the store calls it before it rewrites the log,
        so none of them can land after the rewrite); how many pending items changed."""
        changed, user, note = 0, erasure.user_id, erasure.note_id
        with self._lock:
            self._recent.note(user, note)
            windows = [w for k, w in self._edits.items() if k[0] == user]
            for d in self._out.waiting_held(user):
                d.since = judged_by(d.since, note)
                if d.window is not None:
                    windows.append(d.window[1])
                new = None if d.event is None else purge_event(d.event, erasure)
                changed += new is not d.event
                d.event = new
            changed += sum(window.purge(erasure) for window in windows)
            for key, window in list(self._edits.items()):
                if not window.events:
                    del self._edits[key]
            for (who, _), session in self._sessions.items():
                for art, gen in list(session.pending.items()) if who == user else ():
                    new = purge_event(gen.event, erasure)
                    changed += new is not gen.event
                    if new is None:
                        del session.pending[art]
                    else:
                        session.pending[art] = _Generation(new, judged_by(gen.held, note))
            if erasure.everything:
                for k in [k for k in self._thumbs if k[0] == user]:
                    del self._thumbs[k]
            self._out.wait(user)
        return changed

    def __enter__(self) -> CaptureLayer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def pending_edits(self) -> int:
        """How many coalescing windows are open."""
        with self._lock:
            return len(self._edits)

    def pending_generations(self, user_id: str, session_id: str | None) -> list[str]:
        """Artifact ids of the session's unsettled generations, oldest first."""
        with self._lock:
            s = self._sessions.get((user_id, session_id))
            return list(s.pending) if s else []

    # -- dispatch ------------------------------------------------------------------------
    def _one(
        self,
        raw: Mapping[str, Any],
        index: int,
        now_ms: int,
        report: CaptureReport,
        holds: Mapping[str, Held],
    ) -> None:
        kind = raw.get("event") if isinstance(raw, Mapping) else None
        name = kind if isinstance(kind, str) else "?"
        artifact = _str_or_none(raw.get("artifact_id")) if isinstance(raw, Mapping) else None
        user = raw.get("user_id") if isinstance(raw, Mapping) else None
        held = holds.get(user) if isinstance(user, str) else None
        try:
            if not isinstance(raw, Mapping):
                raise _Rejected("event must be an object")
            try:
                check_wire_event(raw, self.store.now_ms())
            except ValidationError as exc:
                raise _Rejected(str(exc)) from exc
            if kind == "generation_started":
                self._generation_started(raw, index, now_ms, report, held)
            elif kind == "tab_activated":
                self._tab_activated(raw)
                self._out.note(CaptureResult(name, "accepted", None, artifact, index))
            elif isinstance(kind, str) and kind in self._handlers:
                done = CaptureResult(name, "accepted", None, artifact, index)
                result = self._handler_event(kind, raw, now_ms, report, done, held)
                if result is not None:
                    self._out.note(CaptureResult(name, result[0], result[1], artifact, index))
            else:
                known = ", ".join([*self._handlers, *CAPTURE_ONLY_KINDS])
                raise _Rejected(f"unknown event {_short(kind)}; known: {known}")
        except _Rejected as exc:
            reason = self.redaction.redact_text(exc.reason, report.redactions)
            self._out.note(CaptureResult(name, "rejected", reason, artifact, index))

    def _handler_event(
        self,
        kind: str,
        raw: Mapping[str, Any],
        now_ms: int,
        report: CaptureReport,
        done: CaptureResult,
        held: Held | None,
    ) -> tuple[Status, str | None] | None:
        """Apply the rule of ``kind``: a result now, or ``None`` when the event is planned
        for delivery (its result comes with the delivery)."""
        cfg = self.config
        trigger = raw.get("trigger")
        if kind == "generation_accepted":
            _check_trigger(trigger, "explicit", cfg.accept_triggers, kind)
        elif kind == "artifact_edited_and_saved":
            _check_trigger(trigger, "manual_edit", cfg.edit_triggers, kind)
            return self._edit(raw, now_ms, report, held)
        elif kind == "explicit_tag_applied":
            _check_trigger(trigger, "explicit", cfg.tag_triggers, kind)
        elif kind == "generation_abandoned":
            if trigger == "inactivity_timeout":
                raise _Rejected("abandonment is never inferred from an inactivity timeout")
            _check_trigger(trigger, "explicit_discard", cfg.abandon_triggers, kind)
        elif kind == "revert_after_edit":
            _check_trigger(trigger, "history_panel", cfg.revert_triggers, kind)
        elif kind == "thumbs_rated":
            # only a click that will be stored opens (or is held by) a debounce
            check_event(self._handlers[kind], raw, now_ms)
            debounced = self._debounce_thumbs(raw, now_ms)
            if debounced is not None:
                return "coalesced", debounced
        clean = self.redaction.redact_event(raw, report.redactions)
        # keep the log in causal order: pending edits of the same artifacts go first
        arts = artifacts_of(kind, clean)
        for art in arts:
            self._flush_artifact(art)
        self._deliver(kind, clean, arts, done, "rejected", held=False, settle=True)
        return None

    def _deliver(
        self,
        kind: str,
        clean: dict[str, Any],
        artifacts: list[str],
        done: CaptureResult,
        fail: Status,
        *,
        held: bool,
        settle: bool = False,
        window: tuple[WindowKey, EditWindow] | None = None,
        since: Held | None = None,
    ) -> None:
        user = clean.get("user_id")
        user_key = user if isinstance(user, str) else repr(user)
        self._out.plan(
            Delivery(kind, clean, user_key, done, fail, held, artifacts, window, settle, since)
        )

    def _handle(self, kind: str, event: Mapping[str, Any], since: Held | None) -> None:
        """Deliver ``event``; a held one through the store's sink for when it was captured."""
        sink = self.store if since is None or self._holding is None else self._holding.sink(since)
        self._handlers[kind](sink, event, records=False)  # nothing reads the records

    def _delivered(self, d: Delivery, stored: bool, restore: bool) -> None:
        """After a delivery (under the lock): settle what a stored event settles; put the
        edit window of an edit-save that a storage error kept out of the log back."""
        if stored and d.settle and d.event is not None:
            self._settle(d.kind, d.event)
        if not stored and d.kind == "thumbs_rated":  # a click not stored debounces nothing
            self._thumbs.pop((d.user, d.artifacts[0] if d.artifacts else None), None)
        if restore and not stored and d.window is not None and d.window[1].events:
            key, window = d.window
            pending = self._edits.get(key)
            if pending is None:
                self._edits[key] = window
            else:  # a save opened a new window meanwhile: the older saves go first
                pending.events[:0] = window.events

    # -- rules ---------------------------------------------------------------------------
    def _edit(
        self, raw: Mapping[str, Any], now_ms: int, report: CaptureReport, held: Held | None
    ) -> tuple[Status, str | None]:
        # judged on its own before it joins a window: one bad save never fails the others
        check_event(self._handlers["artifact_edited_and_saved"], raw, now_ms)
        clean = self.redaction.redact_event(raw, report.redactions)
        user = clean["user_id"]
        key = (user, _str_or_none(clean.get("artifact_id")), _str_or_none(clean.get("session_id")))
        window = self._edits.get(key)
        self._settle("artifact_edited_and_saved", clean)
        joins = window is not None and (
            window.held == held if window.held is None else window.held.admits(held)
        )
        # only a save captured in [latest save, deadline) joins: an older one (a file
        # replayed out of order, a clock set back) is never merged as if within the window
        if window is not None and window.latest_ms <= now_ms < window.deadline_ms and joins:
            window.events.append(clean)
            window.latest_ms = now_ms
            n = len(window.events)
            return "coalesced", f"merged into the pending edit-save ({n} saves in this window)"
        if window is not None:  # expired but not yet flushed (no call since), or captured
            self._flush(key)  # before an erasure or a settings change: delivered first
        self._order += 1
        deadline = now_ms + round(self.config.coalesce_window_s * 1000)
        self._edits[key] = EditWindow(now_ms, deadline, self._order, [clean], held)
        return "accepted", None

    def _debounce_thumbs(self, raw: Mapping[str, Any], now_ms: int) -> str | None:
        user = raw.get("user_id")
        rating = raw.get("rating")
        if not isinstance(user, str) or rating not in ("up", "down"):
            return None  # let the adapter reject it with its message
        key = (user, _str_or_none(raw.get("artifact_id")))
        prev = self._thumbs.get(key)
        window_ms = round(self.config.thumbs_debounce_s * 1000)
        # an earlier click than the latest one (out of order) is never "within" its window
        if prev is not None and prev[1] == rating and 0 <= now_ms - prev[0] < window_ms:
            self._thumbs[key] = (now_ms, rating)  # a burst of clicks counts once
            return f"repeated thumbs-{rating} click within {self.config.thumbs_debounce_s:g} s"
        if prev is None or now_ms >= prev[0]:  # the latest click stays the one to repeat
            self._thumbs[key] = (now_ms, str(rating))
        return None

    def _generation_started(
        self,
        raw: Mapping[str, Any],
        index: int,
        now_ms: int,
        report: CaptureReport,
        held: Held | None,
    ) -> None:
        user = raw.get("user_id")
        art = raw.get("artifact_id")
        if not isinstance(user, str) or not user:
            raise _Rejected("generation_started: user_id must be a non-empty string")
        if not isinstance(art, str) or not art:
            raise _Rejected("generation_started: artifact_id must be a non-empty string")
        active = raw.get("active", True)
        if not isinstance(active, bool):
            raise _Rejected("generation_started: active must be true or false")
        # judged now as the abandonment it may become, so it is never accepted, then failed
        check_event(self._handlers["generation_abandoned"], raw, now_ms)
        clean = self.redaction.redact_event(raw, report.redactions)
        session = self._sessions.setdefault(
            (user, _str_or_none(clean.get("session_id"))), _Session()
        )
        if self.config.abandon_mode == "active_tab":
            victims = [session.active] if session.active in session.pending else []
        else:
            victims = list(session.pending)
        for victim in victims:
            if victim is None or victim == art:
                continue
            gen = session.pending.pop(victim)
            ev = dict(gen.event)
            ev["event"] = "generation_abandoned"
            ev["timestamp"] = clean["timestamp"]  # abandoned when the new generation started
            self._flush_artifact(victim)
            done = CaptureResult(
                "generation_abandoned",
                "inferred",
                f"new generation {art} started while {victim} was unaccepted",
                victim,
            )
            # inferred now (on the settings of now), about a generation shown since gen.held
            since = gen.held
            if held is not None and gen.held is not None:
                since = replace(held, generation=gen.held.generation, applied=gen.held.applied)
            self._deliver(
                "generation_abandoned", ev, [victim], done, "failed", held=True, since=since
            )
        gen_event = {k: v for k, v in clean.items() if k != "event"}
        session.pending.pop(art, None)
        session.pending[art] = _Generation(gen_event, held)
        if active:
            session.active = art
        self._out.note(CaptureResult("generation_started", "accepted", None, art, index))

    def _tab_activated(self, raw: Mapping[str, Any]) -> None:
        user = raw.get("user_id")
        art = raw.get("artifact_id")
        if not isinstance(user, str) or not user:
            raise _Rejected("tab_activated: user_id must be a non-empty string")
        if not isinstance(art, str) or not art:
            raise _Rejected("tab_activated: artifact_id must be a non-empty string")
        session = self._sessions.setdefault((user, _str_or_none(raw.get("session_id"))), _Session())
        session.active = art

    def _settle(self, kind: str, clean: Mapping[str, Any]) -> None:
        if kind not in (
            "generation_accepted",
            "artifact_edited_and_saved",
            "generation_abandoned",
            "pairwise_comparison",
        ):
            return
        user = clean.get("user_id")
        if not isinstance(user, str):
            return
        arts = artifacts_of(kind, clean)
        settled: list[tuple[str, str | None]] = []
        for key, session in self._sessions.items():
            if key[0] != user:
                continue
            for art in arts:
                session.pending.pop(art, None)
            if not session.pending:
                settled.append(key)
        # A session with nothing pending has nothing to abandon: forget it, so a long-running
        # daemon does not accumulate every session it ever saw.
        for key in settled:
            del self._sessions[key]

    # -- flushing ------------------------------------------------------------------------
    def _windows_in_order(self, now_ms: int | None) -> list[tuple[str, str | None, str | None]]:
        due = [
            (w.deadline_ms, w.order, key)
            for key, w in self._edits.items()
            if now_ms is None or now_ms >= w.deadline_ms
        ]
        due.sort(key=lambda t: (t[0], t[1]))
        return [key for _, _, key in due]

    def _flush_expired(self, now_ms: int) -> None:
        for key in self._windows_in_order(now_ms):
            self._flush(key)
        window_ms = round(self.config.thumbs_debounce_s * 1000)
        stale = [k for k, (t, _) in self._thumbs.items() if now_ms - t >= window_ms]
        for k in stale:
            del self._thumbs[k]

    def _flush_artifact(self, artifact_id: str | None) -> None:
        if artifact_id is None:
            return
        for key in self._windows_in_order(None):
            if key[1] == artifact_id:
                self._flush(key)

    def _flush(self, key: tuple[str, str | None, str | None]) -> None:
        """Take the window out and plan its merged edit-save (a storage error puts the
        window back for a retry; a refusal drops it, reported ``failed``)."""
        window = self._edits.pop(key)
        n = len(window.events)
        done = CaptureResult(
            "artifact_edited_and_saved", "flushed", f"{n} save(s) coalesced into one signal", key[1]
        )
        merged = merge_edits(window.events)
        arts = [] if key[1] is None else [key[1]]
        kind = "artifact_edited_and_saved"
        self._deliver(
            kind, merged, arts, done, "failed", held=True, window=(key, window), since=window.held
        )


# -- helpers -----------------------------------------------------------------------------
def _to_ms(now: Instant) -> int:
    if isinstance(now, bool):
        raise ValidationError("now", "now must be epoch milliseconds, an ISO string or a datetime")
    if isinstance(now, int):
        return now
    return instant_to_ms(now, "now")


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


__all__ = [
    "AbandonMode",
    "CaptureConfig",
    "CaptureLayer",
    "CaptureReport",
    "CaptureResult",
    "describe",
]
