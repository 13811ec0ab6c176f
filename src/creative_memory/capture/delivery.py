"""Deliveries from the capture layer to the store (docs/storage.md, "The capture layer").

The capture layer decides under its lock what to deliver — a planned :class:`Delivery` —
and delivers outside it, so concurrent calls append concurrently. Each delivery takes a
turn per ``(user, artifact)`` it is about when it is planned, and reaches the store only
after every delivery about the same artifact planned before it: an event never overtakes
an earlier one of its artifact (or its edit window). An erasure rewrites the held
deliveries still waiting (:meth:`Deliveries.waiting_held`) and waits for those under way.
A held delivery carries what the store said when its event began to be held
(``since``, docs/capture.md, "Held events").
"""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from creative_memory.capture.holding import Held, judged_by
from creative_memory.capture.report import CaptureReport, CaptureResult, Status
from creative_memory.capture.wire import purge_event
from creative_memory.engine.erasure import Erasure

TurnKey = tuple[str, str | None]
WindowKey = tuple[str, str | None, str | None]  # (user, artifact, session)


@dataclass
class EditWindow:
    """A coalescing window of edit-saves: when its latest save was captured (a save
    captured before that does not join: docs/capture.md, "Capture rules"), when it expires
    (30 s after its first save, by default), its order, and what the store said when it
    opened (``held``: every save in it was captured so)."""

    latest_ms: int
    deadline_ms: int
    order: int
    events: list[dict[str, Any]]
    held: Held | None = None

    def purge(self, erasure: Erasure) -> int:
        """Remove what ``erasure`` erases from the saves, and record on ``held`` that they
        were judged by it; how many saves changed."""
        purged = [purge_event(ev, erasure) for ev in self.events]
        changed = sum(n is not e for n, e in zip(purged, self.events, strict=True))
        self.events = [n for n in purged if n is not None]
        self.held = judged_by(self.held, erasure.note_id)
        return changed


@dataclass
class Delivery:
    """One event on its way to the store. ``event`` is ``None`` once an erasure purged it
    away; ``window`` is the edit window it was flushed from (put back on a storage error);
    ``held``: it was pending in the layer (an edit window, a generation), so an erasure
    rewrites it; ``settle``: the layer settles its generations once it is stored;
    ``since``: what the store said when the event began to be held (its sink honours it)."""

    kind: str
    event: dict[str, Any] | None
    user: str
    done: CaptureResult  # what the report says once it is stored
    fail: Status  # the status when the store refuses it
    held: bool
    artifacts: list[str]
    window: tuple[WindowKey, EditWindow] | None = None
    settle: bool = False
    since: Held | None = None
    running: bool = False
    keys: tuple[TurnKey, ...] = ()
    tickets: tuple[int, ...] = field(default=())


Step = Delivery | CaptureResult
Finish = Callable[[Delivery, bool, bool], None]


class Deliveries:
    """The layer's planned and running deliveries, and the turns that order them. Every
    method but :meth:`run` is called with the layer's lock held."""

    def __init__(self, lock: threading.RLock, finish: Finish) -> None:
        self._cond = threading.Condition(lock)
        self._finish = finish  # called under the lock: (delivery, stored, restore)
        self._turns: dict[TurnKey, list[int]] = {}  # key → [issued, served]
        self.inflight: list[Delivery] = []
        self._steps: list[Step] = []

    def plan(self, d: Delivery) -> None:
        """Plan ``d`` after what is planned so far, taking its turns."""
        d.keys = tuple(dict.fromkeys((d.user, a) for a in d.artifacts)) or ((d.user, None),)
        tickets = []
        for key in d.keys:
            turn = self._turns.setdefault(key, [0, 0])
            tickets.append(turn[0])
            turn[0] += 1
        d.tickets = tuple(tickets)
        self.inflight.append(d)
        self._steps.append(d)

    def note(self, result: CaptureResult) -> None:
        """A result to report in plan order (an event that needs no delivery)."""
        self._steps.append(result)

    def take(self) -> list[Step]:
        """The plan so far, to :meth:`run` once the lock is released."""
        steps, self._steps = self._steps, []
        return steps

    def waiting_held(self, user: str) -> list[Delivery]:
        """The user's held deliveries that wait for their turn (an erasure rewrites them)."""
        return [d for d in self.inflight if d.held and not d.running and d.user == user]

    def wait(self, user: str | None) -> None:
        """Wait until no delivery of ``user`` is under way (``None``: none planned at all)."""
        while any(
            (d.running and d.user == user) if user is not None else True for d in self.inflight
        ):
            self._cond.wait()

    def run(
        self,
        steps: list[Step],
        report: CaptureReport,
        handle: Callable[[str, Mapping[str, Any], Held | None], None],
        redact: Callable[[str, Counter[str]], str],
    ) -> None:
        """Deliver ``steps`` in order, each in its turn (without the lock while ``handle``
        appends). A refusal (a ``ValueError``: nothing written) is reported with its
        redacted reason. A storage error stops the plan — every later delivery still
        passes its turn, undelivered, and their edit windows go back — and is raised at
        the end."""
        error: BaseException | None = None
        for step in steps:
            if isinstance(step, CaptureResult):
                if error is None:
                    report.results.append(step)
                continue
            with self._cond:
                while any(
                    self._turns[k][1] != t for k, t in zip(step.keys, step.tickets, strict=True)
                ):
                    self._cond.wait()
                event = step.event if error is None else None
                step.running = event is not None
            stored, reason = False, None
            try:
                if event is not None:
                    try:
                        handle(step.kind, event, step.since)
                        stored = True
                    except ValueError as exc:  # ValidationError and friends
                        reason = redact(str(exc), report.redactions)
            except BaseException as exc:  # a storage error: retried later
                error = exc
            finally:
                self._end_turn(step, stored, restore=error is not None)
            if stored:
                report.results.append(step.done)
            elif reason is not None:
                failed = dataclasses.replace(step.done, status=step.fail, reason=reason)
                report.results.append(failed)
        if error is not None:
            raise error

    def _end_turn(self, d: Delivery, stored: bool, *, restore: bool) -> None:
        with self._cond:
            for key in d.keys:
                turn = self._turns[key]
                turn[1] += 1
                if turn[0] == turn[1]:  # nothing else waits on it: forget the key
                    del self._turns[key]
            self.inflight.remove(d)
            d.running = False
            self._finish(d, stored, restore)
            self._cond.notify_all()


def artifacts_of(kind: str, clean: Mapping[str, Any]) -> list[str]:
    """The artifacts an event is about (both sides of a comparison)."""
    if kind == "pairwise_comparison":
        out = []
        for side in ("chose", "over"):
            s = clean.get(side)
            if isinstance(s, Mapping) and isinstance(s.get("artifact_id"), str):
                out.append(s["artifact_id"])
        return out
    art = clean.get("artifact_id")
    return [art] if isinstance(art, str) else []


def merge_edits(events: list[dict[str, Any]]) -> dict[str, Any]:
    """One edit-save from a window: the last save's artifact state and time; every save's
    diff (a single diff stays as it was), wrapped in ``COALESCED_DIFF_LEVELS`` levels —
    which the wire's diff depth limit leaves room for (``capture/wire.py``)."""
    last = dict(events[-1])
    last["event"] = "artifact_edited_and_saved"
    diffs = [e["diff"] for e in events if e.get("diff") is not None]
    if len(events) > 1 and diffs:
        last["diff"] = {"coalesced_saves": len(events), "diffs": diffs}
    elif diffs:
        last["diff"] = diffs[0]
    return last
