"""Derivation traces: why a record is what it is (pure; any derivation version).

``explain(events, version, preference_type, pattern, project_id)`` re-folds the log and, for
every event that touched a record of (type, pattern) in that bucket, reports what changed:
strength before → after, confidence, status, reversal step, shadow created or promoted,
decay applied. The trace ends at the current records and, for a version that fits an
estimate (2), the evidence behind each of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from creative_memory.engine.derivation.registry import new_state
from creative_memory.engine.events import (
    DecayPassEvent,
    Event,
    LegacyRecordEvent,
    SignalEvent,
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

    def to_dict(self) -> dict[str, Any]:
        """The explanation as JSON-ready data."""
        out: dict[str, Any] = msgspec.to_builtins(self)
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


def explain(
    events: Iterable[Event],
    version: str,
    preference_type: str,
    pattern: str,
    project_id: str | None = None,
) -> Explanation:
    """The trace of every change to the records of (type, pattern) in a bucket."""
    state = new_state(version)

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
    for ev in events:
        if not _may_touch(ev, preference_type, pattern, project_id):
            state.apply(ev)
            continue
        before = matching()
        state.apply(ev)
        after = matching()
        effects: list[TraceEffect] = []
        for rid, rec in after.items():
            old = before.get(rid)
            if old is not None and old == rec:
                continue
            effects.append(
                TraceEffect(
                    record_id=rid,
                    polarity=rec.polarity,
                    actions=_actions(old, rec, ev),
                    strength_before=None if old is None else old.signal_strength,
                    strength_after=rec.signal_strength,
                    confidence_before=None if old is None else old.confidence,
                    confidence_after=rec.confidence,
                    status_before=None if old is None else old.polarity_status,
                    status_after=rec.polarity_status,
                )
            )
        if not effects and isinstance(ev, DecayPassEvent):
            continue
        steps.append(
            TraceStep(
                seq=ev.seq,
                at=ev.at,
                kind=type(ev).__struct_config__.tag,  # type: ignore[arg-type]
                signal_type=ev.signal_type if isinstance(ev, SignalEvent) else None,
                polarity=ev.polarity if isinstance(ev, SignalEvent) else None,
                effects=effects,
            )
        )
    final = [state.export_record(r) for r in matching().values()]
    for r in final:
        r.last_derived_event_seq = state.last_seq
    evidence_for = getattr(state, "evidence_for", None)
    return Explanation(
        preference_type=preference_type,
        pattern=pattern,
        project_id=project_id,
        derivation_version=version,
        steps=steps,
        records=final,
        evidence=None if evidence_for is None else [evidence_for(r) for r in final],
    )
