"""Derivation traces: why a record is what it is (pure; any derivation version).

``explain(events, version, preference_type, pattern, project_id)`` re-folds the log and, for
every event that touched a record of (type, pattern) in that bucket, reports what changed:
strength before → after, confidence, status, reversal step, shadow created or promoted,
decay applied. The trace ends at the current records and, for a version that fits an
estimate (2 and later), the evidence behind each of them.

Under a version that fits a bucket's records jointly, an event about *another* pattern of
the bucket moves this pattern's estimate too. Those moves are steps of kind ``joint_fit``:
one for each run of such events between two of the pattern's own events (and after the
last one) that changed a record, naming the events of the run (``seq_from`` … ``seq``,
``events``; a run of one event is attributed to that event exactly, with what it was
about). So every step starts where the previous one ended (docs/time-travel.md,
"Explain every step"). ``why_listed`` says, for a record of strength 0.00, why it is listed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from creative_memory.engine.derivation.registry import new_state
from creative_memory.engine.events import (
    ComparisonEvent,
    DecayPassEvent,
    Event,
    LegacyRecordEvent,
    SignalEvent,
    bucket_of,
    mentions,
)
from creative_memory.engine.models import Preference


class TraceEffect(msgspec.Struct, kw_only=True):
    """What one event did to one record."""

    record_id: str
    polarity: str
    actions: list[str]
    strength_before: float | None
    strength_after: float
    confidence_before: str | None
    confidence_after: str
    status_before: str | None
    status_after: str


class TraceStep(msgspec.Struct, kw_only=True):
    """One event of an explanation and its effects."""

    seq: int
    at: str
    kind: str
    signal_type: str | None = None
    polarity: str | None = None
    effects: list[TraceEffect]
    #: a ``joint_fit`` step: the first seq of the run of events about other patterns that
    #: moved the record (``seq`` is the last), how many events of the bucket the run holds,
    #: and — for a run of one event — the features that event was about
    seq_from: int | None = None
    events: int | None = None
    about: list[str] | None = None


class Explanation(msgspec.Struct, kw_only=True):
    """The derivation trace of one (type, pattern) in one bucket."""

    preference_type: str
    pattern: str
    project_id: str | None
    derivation_version: str
    steps: list[TraceStep]
    records: list[Preference]
    #: per record of ``records`` (same order), what the version's estimate rests on — the
    #: evidence kinds, their weights and exact contributions, the estimate and its
    #: uncertainty (version 2); ``None`` for a version that folds records directly (1)
    evidence: list[dict[str, Any]] | None = None
    #: per record of ``records`` (same order): for a record of strength 0.00, why it is
    #: listed at all; ``None`` for a record with strength
    why_listed: list[str | None] = msgspec.field(default_factory=list)
    #: for a trace that ends at a point in the past, that point (``at_seq``, ``recorded_at``,
    #: ``derivation_version``, ``events``: set by the application service); ``None`` for now
    as_of: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The explanation as JSON-ready data (``as_of`` only for a point in the past)."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        if out["as_of"] is None:
            del out["as_of"]
        return out


def _may_touch(ev: Event, ptype: str, pattern: str, bucket: str | None) -> bool:
    return isinstance(ev, DecayPassEvent) or mentions(ev, ptype, pattern, bucket)


def _actions(before: Preference | None, after: Preference, ev: Event) -> list[str]:
    if before is None:
        if isinstance(ev, LegacyRecordEvent):
            return ["imported from prototype"]
        return ["shadow created"] if after.shadow_of else ["created"]
    acts: list[str] = []
    if before.polarity_status == "archived" and after.polarity_status != "archived":
        acts.append("reactivated")
    if after.reversal_signals > before.reversal_signals:
        acts.append(f"reversal step {after.reversal_signals}")
        if after.reversal_signals == 1:
            acts.append("noise guard: no change")
    if before.shadow_of and not after.shadow_of:
        acts.append("shadow promoted")
    if after.polarity_status != before.polarity_status and after.polarity_status != "stable":
        acts.append(after.polarity_status.replace("_", " "))
    if isinstance(ev, DecayPassEvent) and after.decay_at != before.decay_at:
        acts.append("decayed x0.70, one confidence rung down")
    elif after.signal_strength > before.signal_strength:
        acts.append("accumulated")
    elif after.signal_strength < before.signal_strength and not isinstance(ev, DecayPassEvent):
        acts.append("weakened")
    return acts or ["unchanged"]


def _effect(old: Preference | None, rec: Preference, actions: list[str]) -> TraceEffect:
    return TraceEffect(
        record_id=rec.id,
        polarity=rec.polarity,
        actions=actions,
        strength_before=None if old is None else old.signal_strength,
        strength_after=rec.signal_strength,
        confidence_before=None if old is None else old.confidence,
        confidence_after=rec.confidence,
        status_before=None if old is None else old.polarity_status,
        status_after=rec.polarity_status,
    )


def _pairs(
    before: dict[str, Preference], after: dict[str, Preference]
) -> list[tuple[Preference | None, Preference, bool]]:
    """Each record after a step with its record before (and whether its polarity flipped:
    a record id names a polarity, so a flip is one record gone and one new)."""
    gone = [r for rid, r in before.items() if rid not in after]
    out: list[tuple[Preference | None, Preference, bool]] = []
    for rid, rec in after.items():
        old = before.get(rid)
        if old is None and gone:
            out.append((gone.pop(0), rec, True))
        else:
            out.append((old, rec, False))
    return out


def _visible(rec: Preference) -> tuple[str, float, str, str]:
    """What a trace reports of a record (a joint-fit move is a change of one of these)."""
    return rec.polarity, rec.signal_strength, rec.confidence, rec.polarity_status


def _about(ev: Event) -> list[str]:
    if isinstance(ev, SignalEvent):
        return [f"{ev.preference_type}/{ev.pattern}"]
    if isinstance(ev, ComparisonEvent):
        return [
            f"{side} {f.preference_type}/{f.pattern}"
            for side, s in (("chose", ev.chose), ("over", ev.over))
            for f in s.features
        ]
    if isinstance(ev, LegacyRecordEvent):
        return [f"{ev.record.get('preference_type')}/{ev.record.get('pattern')}"]
    return []


def _kind(ev: Event) -> str:
    return type(ev).__struct_config__.tag  # type: ignore[return-value]


def _joint_step(
    last: dict[str, Preference], now: dict[str, Preference], run: list[Event]
) -> TraceStep | None:
    """The step of a run of events about other patterns, if it moved a record."""
    effects = []
    for old, rec, flipped in _pairs(last, now):
        if not flipped and old is not None and _visible(old) == _visible(rec):
            continue
        action = "moved by the joint fit"
        if flipped:
            action = "polarity flipped by the joint fit"
        elif old is None:
            action = "appeared in the joint fit"
        effects.append(_effect(old, rec, [action]))
    if not effects or not run:
        return None
    first, end = run[0], run[-1]
    one = len(run) == 1
    return TraceStep(
        seq=end.seq,
        at=end.at,
        kind="joint_fit",
        signal_type=end.signal_type if one and isinstance(end, SignalEvent) else None,
        polarity=end.polarity if one and isinstance(end, SignalEvent) else None,
        effects=effects,
        seq_from=first.seq,
        events=len(run),
        about=_about(end) if one else None,
    )


def _why_listed(rec: Preference, evidence: dict[str, Any] | None) -> str | None:
    """Why a record of strength 0.00 is listed (``None`` for a record with strength)."""
    if rec.signal_strength > 0.0:
        return None
    n = rec.source_event_count
    told = f"{n} event{'s' if n != 1 else ''} of evidence name it"
    if rec.polarity_status == "archived":
        return f"strength 0.00: archived (not injected); kept because {told}"
    if rec.shadow_of:
        return f"strength 0.00: a shadow of {rec.shadow_of} waiting for the reversal to confirm"
    if evidence is not None and "lower_bound" in evidence:
        return (
            f"strength 0.00: {told}, but the estimate {evidence['estimate']:+.3f} is not yet "
            f"certain enough (lower bound {evidence['lower_bound']:+.3f} is not above 0); it "
            "is kept, not injected, and further evidence adds to it"
        )
    return f"strength 0.00: {told}; kept, not injected, until evidence strengthens it"


def explain(
    events: Iterable[Event],
    version: str,
    preference_type: str,
    pattern: str,
    project_id: str | None = None,
) -> Explanation:
    """The trace of every change to the records of (type, pattern) in a bucket."""
    state = new_state(version)
    evidence_for = getattr(state, "evidence_for", None)
    joint = evidence_for is not None  # a version that fits the bucket's records jointly

    def matching() -> dict[str, Preference]:
        recs = (
            state.global_records
            if project_id is None
            else (state.project_records(project_id) or [])
        )
        return {
            r.id: r.copy()
            for r in recs
            if r.preference_type == preference_type and r.pattern == pattern
        }

    steps: list[TraceStep] = []
    last: dict[str, Preference] = {}  # the records as the last step left them
    run: list[Event] = []  # events of the bucket about other patterns since the last step
    for ev in events:
        if not _may_touch(ev, preference_type, pattern, project_id):
            state.apply(ev)
            if joint and last and bucket_of(ev) == (True, project_id):
                run.append(ev)
            continue
        before = matching()
        if run:
            moved = _joint_step(last, before, run)
            if moved is not None:
                steps.append(moved)
            run = []
        state.apply(ev)
        after = matching()
        effects = [
            _effect(old, rec, (["polarity flipped"] if flipped else []) + _actions(old, rec, ev))
            for old, rec, flipped in _pairs(before, after)
            if flipped or old is None or old != rec
        ]
        if effects or not isinstance(ev, DecayPassEvent):
            steps.append(
                TraceStep(
                    seq=ev.seq,
                    at=ev.at,
                    kind=_kind(ev),
                    signal_type=ev.signal_type if isinstance(ev, SignalEvent) else None,
                    polarity=ev.polarity if isinstance(ev, SignalEvent) else None,
                    effects=effects,
                )
            )
        last = after
    now = matching()
    if run:
        moved = _joint_step(last, now, run)
        if moved is not None:
            steps.append(moved)
    final = [state.export_record(r) for r in now.values()]
    for r in final:
        r.last_derived_event_seq = state.last_seq
    evidence = None if evidence_for is None else [evidence_for(r) for r in final]
    return Explanation(
        preference_type=preference_type,
        pattern=pattern,
        project_id=project_id,
        derivation_version=version,
        steps=steps,
        records=final,
        evidence=evidence,
        why_listed=[
            _why_listed(r, None if evidence is None else evidence[i]) for i, r in enumerate(final)
        ],
    )
