"""What changes between two derivations of one log (docs/engine.md, "Preview").

Pure comparisons: the records of two derivations (another version, or the same log at two
points in time), the retrievals they give, and the prompt blocks built from them. Nothing
here derives or reads anything; the caller hands in both sides.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final, Literal

import msgspec

from creative_memory.engine.constants import INJECTION_THRESHOLD
from creative_memory.engine.models import Preference, RetrievalResult

#: The record fields a preview compares (provenance and ids are not "what memory says").
COMPARED: Final = (
    "polarity",
    "signal_strength",
    "confidence",
    "polarity_status",
    "accept_count",
    "reject_count",
)

#: scope, type, pattern, polarity, "record" | "shadow", and which one of those (an archived
#: record and its successor can share all the rest)
Key = tuple[str, str, str, str, str, int]


class RecordChange(msgspec.Struct, kw_only=True):
    """One record that differs: added, removed, or changed in the ``fields`` named."""

    scope: str
    preference_type: str
    pattern: str
    shadow: bool
    change: Literal["added", "removed", "changed"]
    fields: list[str]
    before: Preference | None
    after: Preference | None


class InjectionChange(msgspec.Struct, kw_only=True):
    """A record that enters or leaves what a generation gets, and why."""

    preference_type: str
    pattern: str
    polarity: str
    change: Literal["in", "out"]
    reasons: list[str]


class PromptChange(msgspec.Struct, kw_only=True):
    """How the records, the retrieval and the generation block change between two sides."""

    records: list[RecordChange]
    unchanged: int
    injection: list[InjectionChange]
    block_before: str
    block_after: str
    block_changed: bool


def _keyed(records: Iterable[Preference]) -> dict[Key, Preference]:
    seen: dict[tuple[str, str, str, str, str], int] = {}
    out: dict[Key, Preference] = {}
    for r in records:
        kind = "shadow" if r.shadow_of else "record"
        base = (r.scope, r.preference_type, r.pattern, r.polarity, kind)
        n = seen[base] = seen.get(base, -1) + 1
        out[(*base, n)] = r
    return out


def diff_records(
    before: Iterable[Preference], after: Iterable[Preference]
) -> tuple[list[RecordChange], int]:
    """The records that differ between two derivations (in the order of ``before``, then
    the ones only ``after`` has), and how many are the same. A pattern whose only record
    turns from one polarity to the other is one change of ``polarity``."""
    old, new = _keyed(before), _keyed(after)
    changes: list[RecordChange] = []
    same = 0
    for key in [*old, *(k for k in new if k not in old)]:
        a, b = old.get(key), new.get(key)
        if a is not None and b is not None:
            fields = [f for f in COMPARED if getattr(a, f) != getattr(b, f)]
            if not fields:
                same += 1
                continue
            change: Literal["added", "removed", "changed"] = "changed"
        else:
            fields = []
            change = "added" if a is None else "removed"
        scope, ptype, pattern, _, kind, _ = key
        changes.append(
            RecordChange(
                scope=scope,
                preference_type=ptype,
                pattern=pattern,
                shadow=kind == "shadow",
                change=change,
                fields=fields,
                before=a,
                after=b,
            )
        )
    return _flips(changes), same


def _flips(changes: list[RecordChange]) -> list[RecordChange]:
    """Merge a lone removed record and a lone added one of the same pattern (and kind) into
    one change of polarity."""
    by: dict[tuple[str, str, str, bool], list[RecordChange]] = {}
    for c in changes:
        by.setdefault((c.scope, c.preference_type, c.pattern, c.shadow), []).append(c)
    out: list[RecordChange] = []
    merged: set[int] = set()
    for c in changes:
        if id(c) in merged:
            continue
        group = by[(c.scope, c.preference_type, c.pattern, c.shadow)]
        kinds = sorted(g.change for g in group)
        if len(group) == 2 and kinds == ["added", "removed"]:
            gone = next(g for g in group if g.change == "removed")
            new = next(g for g in group if g.change == "added")
            assert gone.before is not None and new.after is not None
            fields = [f for f in COMPARED if getattr(gone.before, f) != getattr(new.after, f)]
            merged.update(id(g) for g in group)
            flip = msgspec.structs.replace(gone, change="changed", fields=fields, after=new.after)
            out.append(flip)
            continue
        out.append(c)
    return out


def injected(result: RetrievalResult) -> list[Preference]:
    """Every record a retrieval hands to the prompt, in block order."""
    return [*result.project_overrides, *result.positives, *result.negatives]


def _mentions(diag: dict[str, Any], pattern: str) -> bool:
    return pattern in (diag.get("pattern"), diag.get("suppressed_pattern")) or (
        isinstance(diag.get("trace"), str) and pattern in diag["trace"]
    )


def _why_not(
    ptype: str, pattern: str, records: Sequence[Preference], result: RetrievalResult
) -> list[str]:
    """Why (``ptype``, ``pattern``) is not injected on one side."""
    traces = [
        str(d.get("trace") or d.get("type")) for d in result.diagnostics if _mentions(d, pattern)
    ]
    if traces:
        return traces
    mine = [r for r in records if r.preference_type == ptype and r.pattern == pattern]
    if not mine:
        return ["no record"]
    best = max(mine, key=lambda r: r.signal_strength)
    if best.signal_strength < INJECTION_THRESHOLD:
        return [
            f"strength {best.signal_strength:.2f} below the injection threshold "
            f"{INJECTION_THRESHOLD:.2f}"
        ]
    return [f"not selected ({best.polarity_status}, {best.confidence} confidence)"]


def diff_injection(
    before: RetrievalResult,
    after: RetrievalResult,
    before_records: Sequence[Preference],
    after_records: Sequence[Preference],
) -> list[InjectionChange]:
    """The records that enter or leave the injected set, each with the reasons the other
    side gives (its diagnostics, the threshold, or that it has no such record)."""

    def ids(result: RetrievalResult) -> dict[tuple[str, str, str], Preference]:
        return {(r.preference_type, r.pattern, r.polarity): r for r in injected(result)}

    old, new = ids(before), ids(after)
    out: list[InjectionChange] = []
    for key, rec in new.items():
        if key not in old:
            why = _why_not(rec.preference_type, rec.pattern, before_records, before)
            out.append(_change(rec, "in", [f"before: {w}" for w in why]))
    for key, rec in old.items():
        if key not in new:
            why = _why_not(rec.preference_type, rec.pattern, after_records, after)
            out.append(_change(rec, "out", [f"after: {w}" for w in why]))
    return out


def _change(rec: Preference, change: Literal["in", "out"], reasons: list[str]) -> InjectionChange:
    return InjectionChange(
        preference_type=rec.preference_type,
        pattern=rec.pattern,
        polarity=rec.polarity,
        change=change,
        reasons=reasons,
    )


def compare(
    before_records: Sequence[Preference],
    after_records: Sequence[Preference],
    before: RetrievalResult,
    after: RetrievalResult,
    block_before: str,
    block_after: str,
) -> PromptChange:
    """Everything a preview reports, from both sides' records, retrievals and blocks."""
    records, same = diff_records(before_records, after_records)
    return PromptChange(
        records=records,
        unchanged=same,
        injection=diff_injection(before, after, before_records, after_records),
        block_before=block_before,
        block_after=block_after,
        block_changed=block_before != block_after,
    )
