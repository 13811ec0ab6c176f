"""Pins every retrieval stage of engine.md §7, its diagnostics (fields, key order, trace text),
the worked examples D–G of §11, and the prompt block of §8."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import msgspec
import pytest

from creative_memory import MemoryStore, Preference, RetrievalResult, build_prompt_block
from creative_memory.engine.constants import SignalType
from creative_memory.engine.timeutil import MS_PER_DAY, format_ts, parse_ts
from tests.conftest import tag

U = "alice"
T0 = "2024-01-01T00:00:00.000Z"
ET, RAE, MR, RA, TU, TD, _SR, AB = get_args(SignalType)  # in the weights' order
DOT = " \u00b7 "
DASH = "\u2014"


def at(days: float) -> str:
    return format_ts(parse_ts(T0) + round(days * MS_PER_DAY))


def sigs(
    pattern: str,
    ptype: str = "layout",
    polarity: str = "positive",
    n: int = 4,
    *,
    types: list[str] | None = None,
    project: str | None = None,
    ts: str = T0,
) -> list[dict[str, Any]]:
    """``n`` signals (explicit_tag unless ``types`` gives the signal-type sequence)."""
    seq = types if types is not None else [ET] * n
    scope = "project" if project else "global"
    return [
        tag(pattern, ptype, polarity, ts=ts, signal_type=st, scope=scope, project_id=project)
        for st in seq
    ]


def add(store: MemoryStore, *groups: list[dict[str, Any]]) -> None:
    batch = [s for g in groups for s in g]
    store.ingest_signals(U, batch)


def retrieve(store: MemoryStore, ctx: dict[str, Any] | None = None) -> RetrievalResult:
    return store.retrieve_for_injection(U, ctx)


def pats(rs: list[Preference]) -> list[str]:
    return [r.pattern for r in rs]


def dtypes(r: RetrievalResult) -> list[str]:
    return [d["type"] for d in r.diagnostics]


def diag(r: RetrievalResult, kind: str) -> dict[str, Any]:
    (d,) = [d for d in r.diagnostics if d["type"] == kind]
    return d


KEYS = {
    "project_override_suppression": [
        "type", "suppressed_pattern", "suppressed_polarity", "suppressed_strength",
        "override_polarity", "override_strength", "project_id", "trace",
    ],
    "hard_cap_applied": ["type", "total_eligible", "cap", "dropped", "trace"],
    "diversity_backfill": ["type", "backfilled_count", "backfilled_patterns", "trace"],
    "diversity_ceiling_applied": [
        "type", "negative_count_before", "negative_count_after", "max_negative_slots",
        "ratio", "trimmed_patterns", "trace",
    ],
    "category_backfill": ["type", "backfilled_count", "backfilled_types", "trace"],
    "category_ceiling_applied": [
        "type", "categories_trimmed", "total_trimmed", "trimmed_patterns",
        "max_per_category", "trace",
    ],
    "token_budget_exceeded": ["type", "pattern", "estimated_tokens_at_cut", "budget", "trace"],
}  # fmt: skip


def check_key_order(r: RetrievalResult) -> None:
    for d in r.diagnostics:
        assert list(d) == KEYS[d["type"]], d["type"]


def tokens(r: RetrievalResult) -> int:
    from math import ceil

    from creative_memory.engine.timeutil import u16len

    return 20 + sum(ceil(u16len(p.pattern) / 4) + 5 for p in r.positives + r.negatives)


# ---------------------------------------------------------------------------------------
# Stage 1 — gate


def test_gate_no_data_validates_nothing_and_creates_nothing(store: MemoryStore) -> None:
    r = store.retrieve_for_injection("nobody", {"project_id": "a/b", "preference_types": []})
    assert (r.positives, r.negatives, r.project_overrides, r.diagnostics) == ([], [], [], [])
    assert not (Path(store.root) / "nobody").exists()
    with pytest.raises(ValueError, match="user_id"):
        store.retrieve_for_injection("no body")


# ---------------------------------------------------------------------------------------
# Stage 2 — project merge and suppression


def _example_d(store: MemoryStore) -> None:
    add(
        store,
        sigs("serif", "typography", types=[RAE]),
        sigs("serif", "typography", "negative", 3, project="proj_a"),
        sigs("dense_grid", "layout", "positive", 3, project="proj_a"),
        sigs("airy_spacing", "layout_density", n=5),
        sigs("neon", "color", "negative", 4),
    )


def test_example_d(store: MemoryStore) -> None:
    _example_d(store)
    r = retrieve(store, {"project_id": "proj_a"})
    assert r.diagnostics == [
        {
            "type": "project_override_suppression",
            "suppressed_pattern": "serif",
            "suppressed_polarity": "positive",
            "suppressed_strength": 0.125,
            "override_polarity": "negative",
            "override_strength": 0.44999999999999996,
            "project_id": "proj_a",
            "trace": "proj_a override typography/serif active "
            + DASH
            + " global typography/serif (positive, 0.13) suppressed for this generation",
        }
    ]
    check_key_order(r)
    assert pats(r.positives) == ["airy_spacing", "dense_grid"]
    assert pats(r.negatives) == ["neon", "serif"]
    assert pats(r.project_overrides) == ["serif", "dense_grid"]
    assert build_prompt_block(r, "proj_a") == (
        "[MEMORY CONTEXT]\n"
        "Prefer (high):    airy_spacing\n"
        "Prefer (medium):  dense_grid\n"
        "Avoid (medium):   neon \u00b7 serif\n"
        "Project override: serif, dense_grid active (proj_a)"
    )
    # without a project: the global serif (0.125) is not injectable, no diagnostics
    r0 = retrieve(store)
    assert r0.diagnostics == [] and r0.project_overrides == []
    assert pats(r0.positives) == ["airy_spacing"] and pats(r0.negatives) == ["neon"]
    assert build_prompt_block(r0) == (
        "[MEMORY CONTEXT]\nPrefer (high):    airy_spacing\nAvoid (medium):   neon"
    )


def test_suppression_q16_every_global_pairs_and_ineligible_override(store: MemoryStore) -> None:
    # global pair on s/x: positive (under_review, 0) + negative shadow (0.15)
    add(store, sigs("x", "s", "positive", 4))
    for d in (1, 2, 3, 4):
        store.ingest_signal(U, tag("x", "s", "negative", ts=at(d)))
    # global archived record on s/y (0.6, medium) and a kept global k/z
    add(store, sigs("y", "s", "positive", 4, ts=at(0)), sigs("z", "k", "positive", 5, ts=at(100)))
    # day 180: y archived; the x pair and z decay (shadow 0.15 -> 0.105, half-up of the
    # exact binary value gives "0.10")
    assert store.run_decay(U, at(180)).to_dict() == {"decayed": 2, "archived": 1}
    # project: s/x pair (positive first, under_review; negative shadow) and s/y (weak)
    add(store, sigs("x", "s", "positive", 4, project="pj", ts=at(200)))
    for d in (201, 202, 203, 204):
        store.ingest_signal(
            U, tag("x", "s", "negative", ts=at(d), scope="project", project_id="pj")
        )
    add(store, sigs("y", "s", "negative", types=[TD], project="pj", ts=at(205)))
    r = retrieve(store, {"project_id": "pj"})
    check_key_order(r)
    tr = (
        "pj override s/{p} active " + DASH + " global s/{p} ({pol}, {s}) suppressed for "
        "this generation"
    )
    assert r.diagnostics == [
        {
            "type": "project_override_suppression",
            "suppressed_pattern": "x",
            "suppressed_polarity": "positive",
            "suppressed_strength": 0,
            "override_polarity": "positive",  # the first project record, whatever its polarity
            "override_strength": 0,
            "project_id": "pj",
            "trace": tr.format(p="x", pol="positive", s="0.00"),
        },
        {
            "type": "project_override_suppression",
            "suppressed_pattern": "x",
            "suppressed_polarity": "negative",
            "suppressed_strength": 0.15 * 0.70,
            "override_polarity": "positive",
            "override_strength": 0,
            "project_id": "pj",
            "trace": tr.format(p="x", pol="negative", s="0.10"),
        },
        {
            "type": "project_override_suppression",
            "suppressed_pattern": "y",
            "suppressed_polarity": "positive",
            "suppressed_strength": 0.6,
            "override_polarity": "negative",
            "override_strength": 0.05,
            "project_id": "pj",
            "trace": tr.format(p="y", pol="positive", s="0.60"),
        },
    ]
    assert pats(r.positives) == ["z"] and r.negatives == [] and r.project_overrides == []


def test_suppression_removes_eligible_global_even_if_override_ineligible(
    store: MemoryStore,
) -> None:
    add(store, sigs("g", "t", "positive", 5), sigs("g", "t", "positive", 1, project="pj"))
    r = retrieve(store, {"project_id": "pj"})
    assert dtypes(r) == ["project_override_suppression"]
    assert (r.positives, r.negatives, r.project_overrides) == ([], [], [])
    assert pats(retrieve(store, {"project_id": "other"}).positives) == ["g"]


def test_merge_order_globals_first_then_project(store: MemoryStore) -> None:
    add(
        store,
        sigs("p1", "a", n=4, project="pj"),
        sigs("p2", "b", n=4, project="pj"),
        sigs("g1", "c", n=4),
        sigs("g2", "d", n=4),
    )
    r = retrieve(store, {"project_id": "pj"})
    assert pats(r.positives) == ["g1", "g2", "p1", "p2"]  # equal strength: merge order
    assert pats(r.project_overrides) == ["p1", "p2"]


def test_unknown_and_empty_project_use_globals_only(store: MemoryStore) -> None:
    add(store, sigs("g", "t", n=4), sigs("g", "t", "negative", 4, project="pa"))
    r = retrieve(store, {"project_id": "nope"})
    assert pats(r.positives) == ["g"] and r.diagnostics == [] and r.project_overrides == []
    store.reset_memory(U, "project:pa")  # leaves an empty bucket
    r = retrieve(store, {"project_id": "pa"})
    assert pats(r.positives) == ["g"] and r.diagnostics == [] and r.project_overrides == []
    # a falsy project id behaves like no project for the merge
    r = retrieve(store, {"project_id": None})
    assert pats(r.positives) == ["g"]


# ---------------------------------------------------------------------------------------
# Stage 3 — lifecycle filter


def test_lifecycle_filter(store: MemoryStore) -> None:
    add(
        store,
        sigs("at040", "a", types=[ET, ET, MR], ts=at(150)),  # 0.4 exactly, medium
        sigs("m0375", "b", types=[ET, ET, RA], ts=at(150)),  # 0.375 medium, below threshold
        sigs("decayed", "c", n=4, ts=at(100)),  # 0.6 -> decays to 0.42 labelled low
        sigs("arch", "d", n=4, ts=at(0)),  # archived at 180 days, 0.6 medium
        sigs("high_mid", "e", n=5, ts=at(150)),  # 0.75 high
        sigs("review", "f", n=7, ts=at(150)),  # 1.0
    )
    assert store.run_decay(U, at(190)).to_dict() == {"decayed": 1, "archived": 1}
    # high_mid: two contradictions -> 0.6000000000000001 labelled high
    for d in (151, 152):
        store.ingest_signal(U, tag("high_mid", "e", "negative", ts=at(d)))
    # review: under_review with a medium label and strength >= 0.40 (see §4.3/Q4)
    for d in (151, 152, 153):
        store.ingest_signal(U, tag("review", "f", "negative", ts=at(d)))
    store.ingest_signal(U, tag("review", "f", "negative", ts=at(154), signal_type=AB))
    for d in (155, 156, 157, 158):  # contest the shadow into under_review too
        store.ingest_signal(U, tag("review", "f", "positive", ts=at(d)))
    rv = store.ingest_signal(U, tag("review", "f", "positive", ts=at(159)))
    assert rv is not None
    assert (rv.polarity_status, rv.confidence) == ("under_review", "medium")
    assert rv.signal_strength >= 0.4
    by = {r.pattern: r for r in store.list_preferences(U) if r.polarity == "positive"}
    assert (by["at040"].signal_strength, by["at040"].confidence) == (0.4, "medium")
    assert (by["m0375"].signal_strength, by["m0375"].confidence) == (0.375, "medium")
    assert (by["decayed"].signal_strength, by["decayed"].confidence) == (0.42, "low")
    assert (by["arch"].polarity_status, by["arch"].confidence) == ("archived", "medium")
    assert (by["high_mid"].signal_strength, by["high_mid"].confidence) == (
        0.6000000000000001,
        "high",
    )
    r = retrieve(store)
    assert pats(r.positives) == ["high_mid", "at040"]
    assert r.negatives == [] and r.diagnostics == []
    assert build_prompt_block(r) == (
        "[MEMORY CONTEXT]\nPrefer (high):    high_mid\nPrefer (medium):  at040"
    )


def _typed(store: MemoryStore) -> None:
    add(
        store,
        sigs("l", "layout", n=4),
        sigs("ld", "layout_density", n=4),
        sigs("c", "color", "negative", 4),
        sigs("t", "typography", n=4),
        sigs("pl", "layout", n=4, project="pj"),
        sigs("pc", "color", n=4, project="pj"),
    )


@pytest.mark.parametrize(
    ("types", "pos", "neg", "over"),
    [
        (None, ["l", "ld", "t", "pl", "pc"], ["c"], ["pl", "pc"]),
        ([], [], [], []),
        ([""], ["l", "ld", "t", "pl", "pc"], ["c"], ["pl", "pc"]),
        (["lay"], ["l", "ld", "pl"], [], ["pl"]),
        (["layout_"], ["ld"], [], []),
        (["col", "typo"], ["t", "pc"], ["c"], ["pc"]),
        (["Layout"], [], [], []),
        (["layout_density_x"], [], [], []),
    ],
)
def test_preference_type_prefix_filter(
    store: MemoryStore,
    types: list[str] | None,
    pos: list[str],
    neg: list[str],
    over: list[str],
) -> None:
    _typed(store)
    r = retrieve(store, {"project_id": "pj", "preference_types": types})
    assert pats(r.positives) == pos
    assert pats(r.negatives) == neg
    assert pats(r.project_overrides) == over


# ---------------------------------------------------------------------------------------
# Stages 4–5 — priority and rank (observed through the token budget)

LONG = 380  # u16len 380 -> cost ceil(380/4)+5 = 100; two such records need 220 > 200


@pytest.mark.parametrize(
    ("pos_types", "pos_strength", "first"),
    [
        ([ET, ET, ET, RA], 0.5249999999999999, "neg"),  # 0.525 < 0.45*1.2 = 0.54
        ([ET, ET, ET, ET], 0.6, "pos"),  # 0.6 > 0.54
    ],
)
def test_negative_priority_multiplier(
    store: MemoryStore, pos_types: list[str], pos_strength: float, first: str
) -> None:
    p, n = "p" * LONG, "n" * LONG
    add(store, sigs(p, "a", types=pos_types), sigs(n, "b", "negative", 3))
    r = retrieve(store)
    (d,) = r.diagnostics
    dropped = p if first == "neg" else n
    assert d == {
        "type": "token_budget_exceeded",
        "pattern": dropped,
        "estimated_tokens_at_cut": 120,
        "budget": 200,
        "trace": f"Token budget: {dropped} dropped at 120/200 est. tokens",
    }
    if first == "neg":
        assert (pats(r.positives), pats(r.negatives)) == ([], [n])
    else:
        assert (pats(r.positives), pats(r.negatives)) == ([p], [])
        assert r.positives[0].signal_strength == pos_strength


# ---------------------------------------------------------------------------------------
# Stage 6 — hard cap


def test_hard_cap(store: MemoryStore) -> None:
    groups = [sigs("weak", "tw", n=3)]  # 0.45, ingested first
    groups += [sigs(f"p{i}", f"t{i}", n=4) for i in range(20)]
    add(store, *groups)
    r = retrieve(store)
    assert r.diagnostics == [
        {
            "type": "hard_cap_applied",
            "total_eligible": 21,
            "cap": 20,
            "dropped": 1,
            "trace": "Hard cap: 21 eligible, capped to 20",
        }
    ]
    assert pats(r.positives) == [f"p{i}" for i in range(20)]


def test_no_hard_cap_at_exactly_20(store: MemoryStore) -> None:
    add(store, *[sigs(f"p{i}", f"t{i}", n=4) for i in range(20)])
    r = retrieve(store)
    assert r.diagnostics == [] and len(r.positives) == 20


# ---------------------------------------------------------------------------------------
# Stages 7–8 — polarity ceiling (iterative solver) and backfill


def _neg_pos(store: MemoryStore, n_neg: int, n_pos: int) -> None:
    add(
        store,
        *[sigs(f"n{i}", f"tn{i}", "negative", 4) for i in range(n_neg)],
        *[sigs(f"p{i}", f"tp{i}", "positive", 4) for i in range(n_pos)],
    )


@pytest.mark.parametrize(
    ("n_neg", "n_pos", "after"),
    [
        (1, 0, None),  # N < MIN_NEG_FLOOR: empty loop, nothing trimmed
        (2, 0, None),  # keep ends at 2 = N: nothing trimmed
        (5, 0, 2),  # no n >= 2 satisfies n <= 0: keep ends at 2
        (4, 1, 2),  # keep ends at 2 although 2 > floor(1.0 * 1)
        (3, 2, 2),
        (3, 3, None),
        (6, 4, 4),
        (10, 9, 9),
    ],
)
def test_polarity_solver_without_overflow(
    store: MemoryStore, n_neg: int, n_pos: int, after: int | None
) -> None:
    _neg_pos(store, n_neg, n_pos)
    r = retrieve(store)
    assert len(r.positives) == n_pos
    if after is None:
        assert r.diagnostics == []
        assert len(r.negatives) == n_neg
        return
    assert r.diagnostics == [
        {
            "type": "diversity_ceiling_applied",
            "negative_count_before": n_neg,
            "negative_count_after": after,
            "max_negative_slots": after,
            "ratio": 0.5,
            "trimmed_patterns": [f"n{i}" for i in range(after, n_neg)],
            "trace": f"Diversity ceiling: {n_neg} negatives capped to {after} "
            f"(50% of {after + n_pos} slots)",
        }
    ]
    assert pats(r.negatives) == [f"n{i}" for i in range(after)]


def test_solver_trims_weakest_by_priority(store: MemoryStore) -> None:
    add(
        store,
        sigs("n0", "a", "negative", 3),  # 0.45
        sigs("n1", "b", "negative", 4),  # 0.6
        sigs("n2", "c", "negative", 5),  # 0.75
        sigs("n3", "d", "negative", 6),  # 0.9
        sigs("n4", "e", "negative", types=[ET, ET, MR, MR]),  # 0.5
    )
    r = retrieve(store)
    d = diag(r, "diversity_ceiling_applied")
    assert d["trimmed_patterns"] == ["n1", "n4", "n0"]
    assert d["trace"] == "Diversity ceiling: 5 negatives capped to 2 (50% of 2 slots)"
    assert pats(r.negatives) == ["n3", "n2"]


def test_solver_counts_overflow_positives_and_backfills(store: MemoryStore) -> None:
    add(
        store,
        sigs("s0", "ts0", n=5),
        sigs("s1", "ts1", n=5),
        *[sigs(f"n{i}", f"tn{i}", "negative", 4) for i in range(18)],  # prio 0.72
        sigs("w0", "tw0", n=4),  # prio 0.6: overflow
        sigs("w1", "tw1", n=4),
    )
    r = retrieve(store)
    check_key_order(r)
    assert r.diagnostics == [
        {
            "type": "hard_cap_applied",
            "total_eligible": 22,
            "cap": 20,
            "dropped": 2,
            "trace": "Hard cap: 22 eligible, capped to 20",
        },
        {
            "type": "diversity_backfill",
            "backfilled_count": 2,
            "backfilled_patterns": ["w0", "w1"],
            "trace": "Diversity backfill: 2 positive(s) promoted from overflow",
        },
        {
            "type": "diversity_ceiling_applied",
            "negative_count_before": 18,
            "negative_count_after": 4,
            "max_negative_slots": 4,
            "ratio": 0.5,
            "trimmed_patterns": [f"n{i}" for i in range(4, 18)],
            "trace": "Diversity ceiling: 18 negatives capped to 4 (50% of 8 slots)",
        },
    ]
    assert pats(r.positives) == ["s0", "s1", "w0", "w1"]
    assert pats(r.negatives) == ["n0", "n1", "n2", "n3"]


def test_polarity_backfill_limited_by_trimmed_count(store: MemoryStore) -> None:
    add(
        store,
        *[sigs(f"n{i}", f"tn{i}", "negative", 5) for i in range(11)],  # prio 0.9
        *[sigs(f"p{i}", f"tp{i}", n=5) for i in range(9)],  # 0.75
        *[sigs(f"w{i}", f"tw{i}", n=4) for i in range(5)],  # 0.6 -> overflow
    )
    r = retrieve(store)
    assert dtypes(r) == ["hard_cap_applied", "diversity_backfill", "diversity_ceiling_applied"]
    bf = diag(r, "diversity_backfill")
    assert (bf["backfilled_count"], bf["backfilled_patterns"]) == (1, ["w0"])
    ce = diag(r, "diversity_ceiling_applied")
    assert ce["trace"] == "Diversity ceiling: 11 negatives capped to 10 (50% of 20 slots)"
    assert ce["trimmed_patterns"] == ["n10"]
    assert len(r.negatives) == 10 and pats(r.positives) == [f"p{i}" for i in range(9)] + ["w0"]


def test_example_e(store: MemoryStore) -> None:
    add(
        store,
        *[sigs(f"bn_{i}", f"tn_{i}", "negative", 4) for i in range(25)],
        *[sigs(f"bp_{i}", f"tp_{i}", "positive", 4) for i in range(8)],
    )
    r = retrieve(store)
    check_key_order(r)
    assert r.diagnostics == [
        {
            "type": "hard_cap_applied",
            "total_eligible": 33,
            "cap": 20,
            "dropped": 13,
            "trace": "Hard cap: 33 eligible, capped to 20",
        },
        {
            "type": "diversity_backfill",
            "backfilled_count": 8,
            "backfilled_patterns": [f"bp_{i}" for i in range(8)],
            "trace": "Diversity backfill: 8 positive(s) promoted from overflow",
        },
        {
            "type": "diversity_ceiling_applied",
            "negative_count_before": 20,
            "negative_count_after": 8,
            "max_negative_slots": 8,
            "ratio": 0.5,
            "trimmed_patterns": [f"bn_{i}" for i in range(8, 20)],
            "trace": "Diversity ceiling: 20 negatives capped to 8 (50% of 16 slots)",
        },
    ]
    assert pats(r.positives) == [f"bp_{i}" for i in range(8)]
    assert pats(r.negatives) == [f"bn_{i}" for i in range(8)]


def test_trimmed_negatives_never_reenter_overflow(store: MemoryStore) -> None:
    """Stage-7 trims are gone for good: category backfill (which ignores polarity and does
    not revisit stage 7) can only admit records that were in overflow."""
    add(
        store,
        *[sigs(f"t{i}", f"tt{i}", "negative", 5) for i in range(12)],  # prio 0.9
        *[sigs(f"a{i}", "a", "positive", 5) for i in range(5)],  # 0.75
        *[sigs(f"b{i}", f"tb{i}", "positive", 5) for i in range(3)],
        sigs("x", "tx", "negative", 4),  # prio 0.72: the only overflow record
    )
    r = retrieve(store)
    check_key_order(r)
    assert r.diagnostics == [
        {
            "type": "hard_cap_applied",
            "total_eligible": 21,
            "cap": 20,
            "dropped": 1,
            "trace": "Hard cap: 21 eligible, capped to 20",
        },
        {
            "type": "diversity_ceiling_applied",
            "negative_count_before": 12,
            "negative_count_after": 8,
            "max_negative_slots": 8,
            "ratio": 0.5,
            "trimmed_patterns": ["t8", "t9", "t10", "t11"],
            "trace": "Diversity ceiling: 12 negatives capped to 8 (50% of 16 slots)",
        },
        {
            "type": "category_backfill",
            "backfilled_count": 1,
            "backfilled_types": ["tx"],
            "trace": "Category backfill: 1 pattern(s) from under-represented types",
        },
        {
            "type": "category_ceiling_applied",
            "categories_trimmed": [{"category": "a", "before": 5, "after": 3}],
            "total_trimmed": 2,
            "trimmed_patterns": ["a3", "a4"],
            "max_per_category": 3,
            "trace": "Category ceiling: 2 pattern(s) trimmed from a (max 3/type)",
        },
    ]
    # 9 negatives vs 6 positives: stage 7 is not revisited after category backfill
    assert pats(r.negatives) == [f"t{i}" for i in range(8)] + ["x"]
    assert pats(r.positives) == ["a0", "a1", "a2", "b0", "b1", "b2"]


# ---------------------------------------------------------------------------------------
# Stages 9–10 — category ceiling and backfill


def test_example_f(store: MemoryStore) -> None:
    add(
        store,
        *[sigs(f"lay_{i}", "layout", n=5) for i in range(22)],
        *[sigs(f"mot_{i}", "motion", n=4) for i in range(3)],
    )
    r = retrieve(store)
    check_key_order(r)
    assert r.diagnostics == [
        {
            "type": "hard_cap_applied",
            "total_eligible": 25,
            "cap": 20,
            "dropped": 5,
            "trace": "Hard cap: 25 eligible, capped to 20",
        },
        {
            "type": "category_backfill",
            "backfilled_count": 3,
            "backfilled_types": ["motion"],
            "trace": "Category backfill: 3 pattern(s) from under-represented types",
        },
        {
            "type": "category_ceiling_applied",
            "categories_trimmed": [{"category": "layout", "before": 20, "after": 3}],
            "total_trimmed": 17,
            "trimmed_patterns": [f"lay_{i}" for i in range(3, 20)],
            "max_per_category": 3,
            "trace": "Category ceiling: 17 pattern(s) trimmed from layout (max 3/type)",
        },
    ]
    assert pats(r.positives) == ["lay_0", "lay_1", "lay_2", "mot_0", "mot_1", "mot_2"]


def test_category_ceiling_needs_two_types_over_kept_and_overflow(store: MemoryStore) -> None:
    add(store, *[sigs(f"lay_{i}", "layout", n=5) for i in range(22)])
    r = retrieve(store)
    assert dtypes(r) == ["hard_cap_applied"]  # one type only: no ceiling
    assert len(r.positives) == 20


def test_single_type_without_overflow_is_not_capped(store: MemoryStore) -> None:
    add(store, *[sigs(f"lay_{i}", "layout", n=4) for i in range(5)])
    r = retrieve(store)
    assert r.diagnostics == [] and len(r.positives) == 5


def test_two_types_none_over_three(store: MemoryStore) -> None:
    add(store, *[sigs(f"a{i}", "a") for i in range(3)], *[sigs(f"b{i}", "b") for i in range(3)])
    r = retrieve(store)
    assert r.diagnostics == [] and len(r.positives) == 6


def test_category_backfill_capacity_limited(store: MemoryStore) -> None:
    add(
        store,
        *[sigs(f"lay_{i}", "layout", n=5) for i in range(22)],
        *[sigs(f"mot_{i}", "motion", n=4) for i in range(5)],
    )
    r = retrieve(store)
    bf = diag(r, "category_backfill")
    assert (bf["backfilled_count"], bf["backfilled_types"]) == (3, ["motion"])
    assert diag(r, "category_ceiling_applied")["total_trimmed"] == 17
    assert pats(r.positives) == ["lay_0", "lay_1", "lay_2", "mot_0", "mot_1", "mot_2"]


def test_category_backfill_limited_by_slot_budget(store: MemoryStore) -> None:
    add(
        store,
        *[sigs(f"a{i}", "a", n=5) for i in range(4)],
        *[sigs(f"o{i}", f"to{i}", n=5) for i in range(16)],
        *[sigs(f"c{i}", f"tc{i}", n=4) for i in range(3)],  # overflow, new types
    )
    r = retrieve(store)
    assert dtypes(r) == ["hard_cap_applied", "category_backfill", "category_ceiling_applied"]
    assert diag(r, "category_backfill") == {
        "type": "category_backfill",
        "backfilled_count": 1,
        "backfilled_types": ["tc0"],
        "trace": "Category backfill: 1 pattern(s) from under-represented types",
    }
    ce = diag(r, "category_ceiling_applied")
    assert ce["trimmed_patterns"] == ["a3"]
    assert ce["trace"] == "Category ceiling: 1 pattern(s) trimmed from a (max 3/type)"
    assert len(r.positives) == 20 and "c0" in pats(r.positives) and "c1" not in pats(r.positives)


def test_category_ceiling_without_overflow_or_capacity(store: MemoryStore) -> None:
    # no overflow: ceiling only
    add(store, *[sigs(f"a{i}", "a", n=5) for i in range(4)], sigs("b", "b", n=4))
    r = retrieve(store)
    assert dtypes(r) == ["category_ceiling_applied"]
    assert pats(r.positives) == ["a0", "a1", "a2", "b"]


def test_category_backfill_skips_types_at_capacity(store: MemoryStore) -> None:
    add(
        store,
        *[sigs(f"a{i}", "a", n=5) for i in range(4)],
        *[sigs(f"o{i}", f"to{i}", n=5) for i in range(16)],
        *[sigs(f"w{i}", "a", n=4) for i in range(3)],  # overflow of the capped type only
    )
    r = retrieve(store)
    assert dtypes(r) == ["hard_cap_applied", "category_ceiling_applied"]
    assert len(r.positives) == 19


def test_category_order_is_first_seen_not_js_integer_keys(store: MemoryStore) -> None:
    """§0.4: categories iterate in first-seen order ("10" before "2"), not JS key order."""
    add(
        store,
        *[sigs(f"ten{i}", "10", n=5) for i in range(4)],
        *[sigs(f"two{i}", "2", n=4) for i in range(4)],
    )
    r = retrieve(store)
    assert diag(r, "category_ceiling_applied") == {
        "type": "category_ceiling_applied",
        "categories_trimmed": [
            {"category": "10", "before": 4, "after": 3},
            {"category": "2", "before": 4, "after": 3},
        ],
        "total_trimmed": 2,
        "trimmed_patterns": ["ten3", "two3"],
        "max_per_category": 3,
        "trace": "Category ceiling: 2 pattern(s) trimmed from 10, 2 (max 3/type)",
    }


# ---------------------------------------------------------------------------------------
# Stage 11 — token budget


def test_example_g(store: MemoryStore) -> None:
    ys = ["y" * 40 + str(i) for i in range(12)]
    add(store, *[sigs(p, f"t{i}", n=4) for i, p in enumerate(ys)], sigs("short", "ts", n=4))
    r = retrieve(store)
    check_key_order(r)
    assert r.diagnostics == [
        {
            "type": "token_budget_exceeded",
            "pattern": p,
            "estimated_tokens_at_cut": 196,
            "budget": 200,
            "trace": f"Token budget: {p} dropped at 196/200 est. tokens",
        }
        for p in (ys[11], "short")
    ]
    assert pats(r.positives) == ys[:11]
    assert tokens(r) == 196


def test_token_budget_continues_after_drop(store: MemoryStore) -> None:
    a, b = "a" * LONG, "b" * LONG
    add(store, sigs(a, "ta", n=5), sigs(b, "tb", n=5), sigs("c", "tc", n=4))
    r = retrieve(store)
    assert [d["pattern"] for d in r.diagnostics] == [b]
    assert diag(r, "token_budget_exceeded")["estimated_tokens_at_cut"] == 120
    assert pats(r.positives) == [a, "c"]


def test_token_cost_counts_utf16_units(store: MemoryStore) -> None:
    emoji = "\U0001f600" * 340  # u16len 680 -> cost 175 (as code points it would be 90)
    add(store, sigs(emoji, "te", n=5), sigs("ab", "tab", n=4))
    r = retrieve(store)
    assert pats(r.positives) == [emoji]
    d = diag(r, "token_budget_exceeded")
    assert (d["pattern"], d["estimated_tokens_at_cut"]) == ("ab", 195)
    assert d["trace"] == "Token budget: ab dropped at 195/200 est. tokens"


def test_token_budget_boundary_is_inclusive(store: MemoryStore) -> None:
    e = "é" * 700  # u16len 700 -> cost 180 -> exactly 200
    add(store, sigs(e, "te", n=5), sigs("x", "tx", n=4))
    r = retrieve(store)
    assert pats(r.positives) == [e]
    assert diag(r, "token_budget_exceeded")["estimated_tokens_at_cut"] == 200


# ---------------------------------------------------------------------------------------
# Result — final sort, project overrides (Q25, Q26), emission order


def test_final_resort_by_raw_strength(store: MemoryStore) -> None:
    """Q25: 0.425*1.2 == 0.42500000000000004*1.2, so rank keeps list order (A, B);
    the final lists are re-sorted by raw strength (B, A)."""
    add(
        store,
        sigs("A", "ta", "negative", types=[ET, ET, RAE]),
        sigs("B", "tb", "negative", types=[ET, RAE, ET]),
    )
    a, b = sorted(store.list_preferences(U), key=lambda r: r.pattern)
    assert (a.signal_strength, b.signal_strength) == (0.425, 0.42500000000000004)
    assert a.signal_strength * 1.2 == b.signal_strength * 1.2
    r = retrieve(store)
    assert pats(r.negatives) == ["B", "A"]


def test_project_overrides_ignore_confidence_and_caps(store: MemoryStore) -> None:
    add(
        store,
        *[sigs(f"p{i}", f"t{i}", n=4, project="pj", ts=at(100)) for i in range(22)],
        sigs("lowlabel", "tl", n=4, project="pj", ts=at(0)),  # decays to 0.42 labelled low
        sigs("weak", "tw", n=2, project="pj", ts=at(100)),  # 0.3
        sigs("arch", "tarch", n=4, project="pj", ts=at(-100)),  # archived
    )
    assert store.run_decay(U, at(90)).to_dict() == {"decayed": 1, "archived": 1}
    # an under_review project record with strength >= 0.40 (forced low label)
    add(store, sigs("rev", "trev", n=7, project="pj", ts=at(100)))
    for i, st in enumerate([ET, ET, ET, AB]):
        store.ingest_signal(
            U,
            tag(
                "rev",
                "trev",
                "negative",
                ts=at(101 + i),
                signal_type=st,
                scope="project",
                project_id="pj",
            ),
        )
    recs = {
        r.pattern: r for r in store.list_preferences(U, scope="project:pj", polarity="positive")
    }
    assert recs["rev"].polarity_status == "under_review" and recs["rev"].signal_strength >= 0.4
    assert (recs["lowlabel"].signal_strength, recs["lowlabel"].confidence) == (0.42, "low")
    r = retrieve(store, {"project_id": "pj"})
    assert pats(r.project_overrides) == [f"p{i}" for i in range(22)] + ["lowlabel"]
    assert len(r.positives) == 20
    assert "lowlabel" not in pats(r.positives)
    assert dtypes(r) == ["hard_cap_applied"]
    block = build_prompt_block(r, "pj")
    assert block.endswith(
        "\nProject override: "
        + ", ".join([f"p{i}" for i in range(22)] + ["lowlabel"])
        + " active (pj)"
    )


def test_emission_order_of_all_diagnostics(store: MemoryStore) -> None:
    x = "x" * 400  # cost 105
    add(
        store,
        sigs("sup", "s", n=5),
        sigs("sup", "s", types=[TU], project="pj"),
        *[sigs(f"t{i}", f"tt{i}", "negative", 5) for i in range(12)],  # prio 0.9
        *[sigs(f"a{i}", "a", n=5) for i in range(5)],  # 0.75
        *[sigs(f"b{i}", f"tb{i}", n=5) for i in range(3)],
        sigs(x, "tx", "negative", 4),  # prio 0.72 -> overflow
        sigs("w0", "tw0", n=4),  # 0.6 -> overflow
        sigs("w1", "tw1", n=4),
    )
    r = retrieve(store, {"project_id": "pj"})
    check_key_order(r)
    assert dtypes(r) == [
        "project_override_suppression",
        "hard_cap_applied",
        "diversity_backfill",
        "diversity_ceiling_applied",
        "category_backfill",
        "category_ceiling_applied",
        "token_budget_exceeded",
    ]
    assert r.diagnostics[0]["trace"] == (
        "pj override s/sup active " + DASH + " global s/sup (positive, 0.75) suppressed for "
        "this generation"
    )
    assert r.diagnostics[1]["trace"] == "Hard cap: 23 eligible, capped to 20"
    assert r.diagnostics[2]["backfilled_patterns"] == ["w0", "w1"]
    assert r.diagnostics[3]["trace"] == (
        "Diversity ceiling: 12 negatives capped to 10 (50% of 20 slots)"
    )
    assert r.diagnostics[3]["trimmed_patterns"] == ["t10", "t11"]
    assert r.diagnostics[4]["backfilled_types"] == ["tx"]
    assert r.diagnostics[5]["trimmed_patterns"] == ["a3", "a4"]
    assert r.diagnostics[6] == {
        "type": "token_budget_exceeded",
        "pattern": x,
        "estimated_tokens_at_cut": 116,
        "budget": 200,
        "trace": f"Token budget: {x} dropped at 116/200 est. tokens",
    }
    assert pats(r.negatives) == [f"t{i}" for i in range(10)]
    assert pats(r.positives) == ["a0", "a1", "a2", "b0", "b1", "b2", "w0", "w1"]
    assert r.project_overrides == []


# ---------------------------------------------------------------------------------------
# §8 prompt block


def test_prompt_all_four_lines(store: MemoryStore) -> None:
    add(
        store,
        sigs("hp1", "a", n=5),
        sigs("hp2", "b", n=6),
        sigs("mp", "c", n=4),
        sigs("hn", "d", "negative", 5),
        sigs("mn", "e", "negative", 3),
    )
    block = build_prompt_block(retrieve(store))
    assert block == (
        "[MEMORY CONTEXT]\n"
        "Prefer (high):    hp2 \u00b7 hp1\n"
        "Prefer (medium):  mp\n"
        "Avoid (high):     hn\n"
        "Avoid (medium):   mn"
    )
    assert not block.endswith("\n")
    for line in block.split("\n")[1:]:
        assert line[17] == " " and line[18] != " "  # patterns start at column 19


def _pref(store: MemoryStore, **changes: Any) -> Preference:
    add(store, sigs("base", "t", n=4))
    (r,) = store.list_preferences(U)
    return msgspec.structs.replace(r, **changes)


def test_prompt_skips_low_and_handles_empty(store: MemoryStore) -> None:
    low = _pref(store, confidence="low", pattern="lowp")
    med = msgspec.structs.replace(low, confidence="medium", pattern="medp")
    assert build_prompt_block(RetrievalResult()) == ""
    assert build_prompt_block(RetrievalResult(positives=[low])) == "[MEMORY CONTEXT]"
    assert build_prompt_block(RetrievalResult(negatives=[low], positives=[med])) == (
        "[MEMORY CONTEXT]\nPrefer (medium):  medp"
    )
    # overrides alone never produce a block
    assert build_prompt_block(RetrievalResult(project_overrides=[med]), "pj") == ""


def test_prompt_override_line_uses_argument(store: MemoryStore) -> None:
    med = _pref(store, pattern="medp")
    o1 = msgspec.structs.replace(med, pattern="o1", confidence="low")
    o2 = msgspec.structs.replace(med, pattern="o2")
    r = RetrievalResult(positives=[med], project_overrides=[o1, o2])
    base = "[MEMORY CONTEXT]\nPrefer (medium):  medp"
    assert build_prompt_block(r) == base
    assert build_prompt_block(r, None) == base
    assert build_prompt_block(r, "") == base
    assert build_prompt_block(r, "other") == base + "\nProject override: o1, o2 active (other)"
    assert build_prompt_block(RetrievalResult(positives=[med]), "pj") == base
