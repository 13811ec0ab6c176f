"""Retrieval: the eleven-stage pipeline (docs/engine.md, "Retrieval"). Pure: records and context in,
a :class:`RetrievalResult` with diagnostics out.

The store applies stage 1 (the gate: no data or memory disabled) before calling
:func:`retrieve`; everything after the gate lives here.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from creative_memory.engine.constants import (
    CHARS_PER_TOKEN,
    HEADER_TOKEN_OVERHEAD,
    INJECTION_THRESHOLD,
    LINE_TOKEN_OVERHEAD,
    MAX_INJECTION_COUNT,
    MAX_PER_CATEGORY,
    MIN_NEG_FLOOR,
    NEGATIVE_BUDGET_RATIO,
    NEGATIVE_PRIORITY_MULTIPLIER,
    TOKEN_BUDGET,
)
from creative_memory.engine.errors import ValidationError
from creative_memory.engine.events import validate_project_id
from creative_memory.engine.models import Preference, RetrievalResult
from creative_memory.engine.timeutil import fixed2, u16len

if TYPE_CHECKING:
    from creative_memory.engine.derivation.base import DerivedState

Diagnostic = dict[str, Any]


def parse_context(context: Mapping[str, Any] | None) -> tuple[str | None, list[str] | None]:
    """Validate a retrieval context; returns ``(project_id, preference_types)``."""
    if context is None:
        return None, None
    if not isinstance(context, Mapping):
        raise ValidationError("context", "context must be a mapping or None")
    project_id = context.get("project_id")
    if project_id is not None:
        validate_project_id(project_id)
    types = context.get("preference_types")
    if types is not None:
        if isinstance(types, str) or not isinstance(types, Sequence):
            raise ValidationError("preference_types", "preference_types must be a list of strings")
        for t in types:
            if not isinstance(t, str):
                raise ValidationError(
                    "preference_types", "preference_types must be a list of strings"
                )
        types = list(types)
    return project_id, types


def _type_ok(rec: Preference, types: list[str] | None) -> bool:
    return types is None or any(rec.preference_type.startswith(t) for t in types)


def _sort_desc(records: list[Preference], prio: Mapping[str, float]) -> list[Preference]:
    return sorted(records, key=lambda r: prio[r.id], reverse=True)


def token_cost(pattern: str) -> int:
    """Estimated tokens of one retrieved pattern: ``ceil(u16len / 4) + 5``."""
    return math.ceil(u16len(pattern) / CHARS_PER_TOKEN) + LINE_TOKEN_OVERHEAD


def retrieve(
    global_records: Sequence[Preference],
    projects: Mapping[str, Sequence[Preference]],
    project_id: str | None,
    preference_types: list[str] | None,
    *,
    ignore_global_for: Collection[str] = (),
) -> RetrievalResult:
    """Stages 2–11 (docs/engine.md, "Retrieval") over already-gated, already-validated inputs.

    ``ignore_global_for``: projects whose retrieval ignores global records (a user control,
    docs/architecture.md); for such a project only its own records are considered.
    """
    diagnostics: list[Diagnostic] = []

    # Stage 2 — project merge.
    proj: Sequence[Preference] = ()
    if project_id and project_id in projects:
        proj = projects[project_id]
    if project_id and project_id in ignore_global_for:
        diagnostics.append(
            {
                "type": "project_global_memory_disabled",
                "project_id": project_id,
                "ignored_global_count": len(global_records),
                "trace": f"{project_id} ignores global memory — "
                f"{len(global_records)} global record(s) not considered",
            }
        )
        kept: list[Preference] = list(proj)
    elif proj:
        keys = {p.preference_type + "\0" + p.pattern for p in proj}
        for g in global_records:
            if g.preference_type + "\0" + g.pattern in keys:
                o = next(
                    (
                        p
                        for p in proj
                        if p.preference_type == g.preference_type and p.pattern == g.pattern
                    ),
                    None,
                )
                kind = f"{g.preference_type}/{g.pattern}"
                diagnostics.append(
                    {
                        "type": "project_override_suppression",
                        "suppressed_pattern": g.pattern,
                        "suppressed_polarity": g.polarity,
                        "suppressed_strength": g.signal_strength,
                        "override_polarity": o.polarity if o else "unknown",
                        "override_strength": o.signal_strength if o else 0,
                        "project_id": project_id,
                        "trace": f"{project_id} override {kind} active — global {kind} "
                        f"({g.polarity}, {fixed2(g.signal_strength)}) "
                        "suppressed for this generation",
                    }
                )
        kept = [g for g in global_records if g.preference_type + "\0" + g.pattern not in keys]
        kept += proj
    else:
        kept = list(global_records)

    # Stage 3 — lifecycle filter.
    kept = [
        r
        for r in kept
        if r.signal_strength >= INJECTION_THRESHOLD
        and r.polarity_status == "stable"
        and r.confidence in ("medium", "high")
        and _type_ok(r, preference_types)
    ]

    # Stage 4 — priority (side table, keyed by id; quirk Q22).
    prio: dict[str, float] = {}
    for r in kept:
        prio[r.id] = r.signal_strength * (
            NEGATIVE_PRIORITY_MULTIPLIER if r.polarity == "negative" else 1.0
        )

    # Stage 5 — rank.
    kept = _sort_desc(kept, prio)

    # Stage 6 — hard cap.
    overflow: list[Preference] = []
    if len(kept) > MAX_INJECTION_COUNT:
        n = len(kept)
        diagnostics.append(
            {
                "type": "hard_cap_applied",
                "total_eligible": n,
                "cap": MAX_INJECTION_COUNT,
                "dropped": n - MAX_INJECTION_COUNT,
                "trace": f"Hard cap: {n} eligible, capped to {MAX_INJECTION_COUNT}",
            }
        )
        overflow = kept[MAX_INJECTION_COUNT:]
        kept = kept[:MAX_INJECTION_COUNT]

    # Stage 7 — polarity ceiling (iterative solver) and stage 8 — polarity backfill.
    negs = [r for r in kept if r.polarity == "negative"]
    pos = [r for r in kept if r.polarity == "positive"]
    pos_over = [r for r in overflow if r.polarity == "positive"]
    if negs:
        big_n = len(negs)
        keep = big_n
        ratio_factor = NEGATIVE_BUDGET_RATIO / (1 - NEGATIVE_BUDGET_RATIO)
        for n in range(big_n, MIN_NEG_FLOOR - 1, -1):
            final_pos = len(pos) + min(len(pos_over), big_n - n)
            keep = n
            if n <= math.floor(ratio_factor * final_pos):
                break
        max_neg = max(MIN_NEG_FLOOR, keep)
        if big_n > max_neg:
            trimmed = _sort_desc(negs, prio)[max_neg:]
            trimmed_ids = {r.id for r in trimmed}
            kept = [r for r in kept if r.id not in trimmed_ids]
            if trimmed and pos_over:
                bf = pos_over[: len(trimmed)]
                bf_ids = {r.id for r in bf}
                kept += bf
                overflow = [r for r in overflow if r.id not in bf_ids]
                kept = _sort_desc(kept, prio)
                diagnostics.append(
                    {
                        "type": "diversity_backfill",
                        "backfilled_count": len(bf),
                        "backfilled_patterns": [r.pattern for r in bf],
                        "trace": f"Diversity backfill: {len(bf)} positive(s) "
                        "promoted from overflow",
                    }
                )
            diagnostics.append(
                {
                    "type": "diversity_ceiling_applied",
                    "negative_count_before": big_n,
                    "negative_count_after": max_neg,
                    "max_negative_slots": max_neg,
                    "ratio": NEGATIVE_BUDGET_RATIO,
                    "trimmed_patterns": [r.pattern for r in trimmed],
                    "trace": f"Diversity ceiling: {big_n} negatives capped to {max_neg} "
                    f"(50% of {len(kept)} slots)",
                }
            )

    # Stage 9 — category ceiling and stage 10 — category backfill.
    counts: dict[str, int] = {}
    for r in kept:
        counts[r.preference_type] = counts.get(r.preference_type, 0) + 1
    distinct = set(counts) | {r.preference_type for r in overflow}
    over = [(t, c) for t, c in counts.items() if c > MAX_PER_CATEGORY] if len(distinct) >= 2 else []
    if over:
        cat_trimmed: list[Preference] = []
        for t, _ in over:
            cat_trimmed += _sort_desc([r for r in kept if r.preference_type == t], prio)[
                MAX_PER_CATEGORY:
            ]
        cat_ids = {r.id for r in cat_trimmed}
        kept = [r for r in kept if r.id not in cat_ids]
        cap: dict[str, int] = {}
        for r in kept:
            cap[r.preference_type] = cap.get(r.preference_type, 0) + 1
        cap = {t: max(0, MAX_PER_CATEGORY - c) for t, c in cap.items()}
        for r in overflow:
            cap.setdefault(r.preference_type, MAX_PER_CATEGORY)
        if overflow and sum(cap.values()) > 0:
            cb: list[Preference] = []
            for r in overflow:
                if len(cb) >= len(cat_trimmed):
                    break
                c = cap.get(r.preference_type, 0)
                if c <= 0:
                    continue
                cb.append(r)
                cap[r.preference_type] = c - 1
            if cb:
                kept = _sort_desc(kept + cb, prio)
                types_seen: list[str] = []
                for r in cb:
                    if r.preference_type not in types_seen:
                        types_seen.append(r.preference_type)
                diagnostics.append(
                    {
                        "type": "category_backfill",
                        "backfilled_count": len(cb),
                        "backfilled_types": types_seen,
                        "trace": f"Category backfill: {len(cb)} pattern(s) from "
                        "under-represented types",
                    }
                )
        diagnostics.append(
            {
                "type": "category_ceiling_applied",
                "categories_trimmed": [
                    {"category": t, "before": c, "after": MAX_PER_CATEGORY} for t, c in over
                ],
                "total_trimmed": len(cat_trimmed),
                "trimmed_patterns": [r.pattern for r in cat_trimmed],
                "max_per_category": MAX_PER_CATEGORY,
                "trace": f"Category ceiling: {len(cat_trimmed)} pattern(s) trimmed from "
                f"{', '.join(t for t, _ in over)} (max {MAX_PER_CATEGORY}/type)",
            }
        )

    # Stage 11 — token budget.
    used = HEADER_TOKEN_OVERHEAD
    budgeted: list[Preference] = []
    for r in kept:
        cost = token_cost(r.pattern)
        if used + cost > TOKEN_BUDGET:
            diagnostics.append(
                {
                    "type": "token_budget_exceeded",
                    "pattern": r.pattern,
                    "estimated_tokens_at_cut": used,
                    "budget": TOKEN_BUDGET,
                    "trace": f"Token budget: {r.pattern} dropped at "
                    f"{used}/{TOKEN_BUDGET} est. tokens",
                }
            )
            continue
        used += cost
        budgeted.append(r)

    def by_strength(rs: list[Preference]) -> list[Preference]:
        return sorted(rs, key=lambda r: r.signal_strength, reverse=True)

    overrides = [
        r
        for r in proj
        if r.signal_strength >= INJECTION_THRESHOLD
        and r.polarity_status == "stable"
        and _type_ok(r, preference_types)
    ]
    return RetrievalResult(
        positives=by_strength([r for r in budgeted if r.polarity == "positive"]),
        negatives=by_strength([r for r in budgeted if r.polarity == "negative"]),
        project_overrides=overrides,
        diagnostics=diagnostics,
    )


def retrieve_state(
    state: DerivedState,
    project_id: str | None,
    preference_types: list[str] | None,
    ignore_global_for: Collection[str],
) -> RetrievalResult:
    """:func:`retrieve` over a derived state, with its records exported (what a generation
    gets from that state). Computed once per context while the state folds no event
    (:meth:`~creative_memory.engine.derivation.base.DerivedState.memoised`); every call
    gets its own copies."""
    return copy_result(*retrieve_shared(state, project_id, preference_types, ignore_global_for))


#: A memoised retrieval and the positions of its nested diagnostics (see retrieve_shared).
Retrieved = tuple[RetrievalResult, list[int]]


def retrieve_shared(
    state: DerivedState,
    project_id: str | None,
    preference_types: list[str] | None,
    ignore_global_for: Collection[str],
) -> Retrieved:
    """:func:`retrieve_state`'s memoised result itself, and the positions of its nested
    diagnostics (for :func:`copy_result`): shared by every caller, so only to be read — a
    caller that renders it (a prompt block) saves the copy."""
    types = None if preference_types is None else list(preference_types)
    ignored = frozenset(ignore_global_for)
    key = ("retrieve", project_id, None if types is None else tuple(types), ignored)

    def compute() -> Retrieved:
        projects = {pid: b.records for pid, b in state.projects.items()}
        result = retrieve(
            state.global_records, projects, project_id, types, ignore_global_for=ignored
        )
        ex = state.export_record
        exported = RetrievalResult(
            positives=[ex(r) for r in result.positives],
            negatives=[ex(r) for r in result.negatives],
            project_overrides=[ex(r) for r in result.project_overrides],
            diagnostics=result.diagnostics,
        )
        return exported, nested_diagnostics(exported)

    return state.memoised(key, compute)


def nested_diagnostics(result: RetrievalResult) -> list[int]:
    """The positions of ``result``'s diagnostics that hold a list or dict (the others are
    flat: a shallow copy of one is a copy all the way down)."""
    atoms = _ATOMS
    return [
        i for i, d in enumerate(result.diagnostics) if not all(type(v) in atoms for v in d.values())
    ]


def copy_result(result: RetrievalResult, nested: list[int] | None = None) -> RetrievalResult:
    """An independent copy of ``result``: its records copied, its diagnostics (JSON-like
    dicts and lists) copied all the way down — those at the positions ``nested`` (default:
    found here) deeply, the flat ones by a shallow copy."""
    if nested is None:
        nested = nested_diagnostics(result)
    diagnostics = [d.copy() for d in result.diagnostics]
    for i in nested:
        diagnostics[i] = _copy_json(result.diagnostics[i])
    return RetrievalResult(
        positives=[r.copy() for r in result.positives],
        negatives=[r.copy() for r in result.negatives],
        project_overrides=[r.copy() for r in result.project_overrides],
        diagnostics=diagnostics,
    )


#: Values a diagnostic holds that are never changed in place (no need to copy them).
_ATOMS = frozenset({str, int, float, bool, type(None)})


def _copy_json(value: Any) -> Any:
    atoms = _ATOMS
    if type(value) is dict:
        return {k: v if type(v) in atoms else _copy_json(v) for k, v in value.items()}
    if type(value) is list:
        return [v if type(v) in atoms else _copy_json(v) for v in value]
    return copy.deepcopy(value)
