"""Golden tests for the generation and critique blocks, token honesty, and the diagnostics feed.

Every retrieval is built through a real MemoryStore. Explicit tags weigh 0.15 each after
normalisation: 3 tags -> 0.45 (medium), 5 tags -> 0.75 (high), 1 tag -> 0.15 (low).
"""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from creative_memory import TOKEN_BUDGET, MemoryStore, RetrievalResult, build_prompt_block
from creative_memory.app.feed import diagnostics_feed_line
from creative_memory.engine.prompt import (
    CRITIQUE_OVERHEAD_TOKENS,
    GENERATION_OVERHEAD_TOKENS,
    build_critique_block,
    build_generation_block,
    estimate_tokens,
    summarize_diagnostics,
)
from creative_memory.engine.retrieval import token_cost
from creative_memory.engine.timeutil import u16len
from tests.conftest import tag

U = "designer"

GEN_HEAD = "## Creative memory (preferences from generation feedback)"
GEN_PARA = (
    "The following stylistic preferences have been derived from this user's past "
    "acceptances, edits, tags, and rejections in generation runs. Treat them as "
    "preferences and context, NOT hard rules: when they collide with the active design "
    "system tokens, the brand wins; when they collide with the active skill's workflow, "
    "the skill wins. Project-level preferences take precedence over global ones whenever "
    "both address the same pattern."
)
CRIT_HEAD = "## Creative memory (critique criteria from generation feedback)"
CRIT_PARA = (
    "The following stylistic preferences have been derived from this user's past "
    "acceptances, edits, tags, and rejections in generation runs. Use them to critique "
    "the work as preferences and context, NOT hard rules: when they collide with the "
    "active design system tokens, the brand wins; when they collide with the active "
    "skill's workflow, the skill wins. Project constraints take precedence over the "
    "user's global preferences whenever both address the same pattern. Check the work "
    "against the Avoid items first; the Prefer items are supporting context."
)
GEN = GEN_HEAD + "\n\n" + GEN_PARA + "\n\n"
CRIT = CRIT_HEAD + "\n\n" + CRIT_PARA + "\n\n"

GEN_LABELS = [
    "Prefer (high): ",
    "Prefer (medium): ",
    "Avoid (high): ",
    "Avoid (medium): ",
    "This project prefers (high): ",
    "This project prefers (medium): ",
    "This project avoids (high): ",
    "This project avoids (medium): ",
]
CRIT_LABELS = [
    "Avoid (high): ",
    "Avoid (medium): ",
    "This project says avoid (high): ",
    "This project says avoid (medium): ",
    "This project says prefer (high): ",
    "This project says prefer (medium): ",
    "Prefer (high, supporting context): ",
    "Prefer (medium, supporting context): ",
]


def teach(
    store: MemoryStore,
    pattern: str,
    ptype: str,
    polarity: str = "positive",
    n: int = 3,
    project: str | None = None,
) -> None:
    scope = "project" if project else "global"
    sig = tag(pattern, ptype, polarity, scope=scope, project_id=project)
    store.ingest_signals(U, [sig] * n)


def the_example(store: MemoryStore) -> None:
    """Both tiers of both polarities, plus a project that overrides one global pattern."""
    teach(store, "generous whitespace", "layout", n=5)
    teach(store, "muted earth palette", "color", n=3)
    teach(store, "drop shadows", "effects", "negative", n=5)
    teach(store, "dense card grids", "layout", "negative", n=3)
    teach(store, "serif display headings", "typography", n=3)
    teach(store, "serif display headings", "typography", "negative", n=5, project="acme")
    teach(store, "left-aligned navigation", "layout", n=3, project="acme")


def both(r: RetrievalResult, project_id: str | None = None) -> tuple[str, str]:
    return build_generation_block(r, project_id), build_critique_block(r, project_id)


# -- golden blocks ----------------------------------------------------------------------------


def test_empty_retrievals_give_empty_blocks(store: MemoryStore) -> None:
    # No data at all.
    assert both(store.retrieve_for_injection(U)) == ("", "")
    assert both(store.retrieve_for_injection(U, {"project_id": "acme"}), "acme") == ("", "")
    # Data, but nothing injectable (a single tag is low confidence, below the threshold).
    teach(store, "generous whitespace", "layout", n=1)
    r = store.retrieve_for_injection(U)
    assert r.positives == [] and r.negatives == []
    assert both(r) == ("", "")
    # A preference_types filter that matches nothing.
    teach(store, "generous whitespace", "layout", n=4)
    assert both(store.retrieve_for_injection(U, {"preference_types": ["color"]})) == ("", "")


def test_positives_only(store: MemoryStore) -> None:
    teach(store, "generous whitespace", "layout", n=5)
    teach(store, "muted earth palette", "color", n=3)
    teach(store, "rounded corners", "shape", n=4)
    gen, crit = both(store.retrieve_for_injection(U))
    assert gen == (
        GEN + "Prefer (high): generous whitespace\n"
        "Prefer (medium): rounded corners · muted earth palette"
    )
    assert crit == (
        CRIT + "Prefer (high, supporting context): generous whitespace\n"
        "Prefer (medium, supporting context): rounded corners · muted earth palette"
    )


def test_negatives_only(store: MemoryStore) -> None:
    teach(store, "neon gradients", "color", "negative", n=6)
    teach(store, "dense card grids", "layout", "negative", n=3)
    gen, crit = both(store.retrieve_for_injection(U))
    assert gen == GEN + "Avoid (high): neon gradients\nAvoid (medium): dense card grids"
    assert crit == CRIT + "Avoid (high): neon gradients\nAvoid (medium): dense card grids"
    # A third negative with no positive to balance it: the polarity ceiling keeps two.
    teach(store, "drop shadows", "effects", "negative", n=5)
    r = store.retrieve_for_injection(U)
    assert build_generation_block(r) == GEN + "Avoid (high): neon gradients · drop shadows"
    assert build_critique_block(r) == CRIT + "Avoid (high): neon gradients · drop shadows"
    assert summarize_diagnostics(r) == "memory adjusted: 1 avoidance trimmed for balance"


def test_both_tiers_both_polarities(store: MemoryStore) -> None:
    teach(store, "generous whitespace", "layout", n=5)
    teach(store, "muted earth palette", "color", n=3)
    teach(store, "drop shadows", "effects", "negative", n=5)
    teach(store, "dense card grids", "layout", "negative", n=3)
    gen, crit = both(store.retrieve_for_injection(U))
    assert gen == (
        "## Creative memory (preferences from generation feedback)\n"
        "\n"
        "The following stylistic preferences have been derived from this user's past "
        "acceptances, edits, tags, and rejections in generation runs. Treat them as "
        "preferences and context, NOT hard rules: when they collide with the active design "
        "system tokens, the brand wins; when they collide with the active skill's workflow, "
        "the skill wins. Project-level preferences take precedence over global ones whenever "
        "both address the same pattern.\n"
        "\n"
        "Prefer (high): generous whitespace\n"
        "Prefer (medium): muted earth palette\n"
        "Avoid (high): drop shadows\n"
        "Avoid (medium): dense card grids"
    )
    assert crit == (
        "## Creative memory (critique criteria from generation feedback)\n"
        "\n"
        "The following stylistic preferences have been derived from this user's past "
        "acceptances, edits, tags, and rejections in generation runs. Use them to critique "
        "the work as preferences and context, NOT hard rules: when they collide with the "
        "active design system tokens, the brand wins; when they collide with the active "
        "skill's workflow, the skill wins. Project constraints take precedence over the "
        "user's global preferences whenever both address the same pattern. Check the work "
        "against the Avoid items first; the Prefer items are supporting context.\n"
        "\n"
        "Avoid (high): drop shadows\n"
        "Avoid (medium): dense card grids\n"
        "Prefer (high, supporting context): generous whitespace\n"
        "Prefer (medium, supporting context): muted earth palette"
    )


PROJECT_GEN = (
    GEN + "Prefer (high): generous whitespace\n"
    "Prefer (medium): muted earth palette\n"
    "Avoid (high): drop shadows\n"
    "Avoid (medium): dense card grids\n"
    "This project prefers (medium): left-aligned navigation\n"
    "This project avoids (high): serif display headings"
)
PROJECT_CRIT = (
    CRIT + "Avoid (high): drop shadows\n"
    "Avoid (medium): dense card grids\n"
    "This project says avoid (high): serif display headings\n"
    "This project says prefer (medium): left-aligned navigation\n"
    "Prefer (high, supporting context): generous whitespace\n"
    "Prefer (medium, supporting context): muted earth palette"
)


def test_project_overrides_present(store: MemoryStore) -> None:
    the_example(store)
    r = store.retrieve_for_injection(U, {"project_id": "acme"})
    assert [d["type"] for d in r.diagnostics] == ["project_override_suppression"]
    assert [p.pattern for p in r.project_overrides] == [
        "serif display headings",
        "left-aligned navigation",
    ]
    assert both(r, "acme") == (PROJECT_GEN, PROJECT_CRIT)
    # The project's records are known by their scope, with or without the project_id argument.
    assert both(r) == (PROJECT_GEN, PROJECT_CRIT)
    # Records of another project are not this generation's: left out.
    assert both(r, "other") == (
        GEN + "Prefer (high): generous whitespace\n"
        "Prefer (medium): muted earth palette\n"
        "Avoid (high): drop shadows\n"
        "Avoid (medium): dense card grids",
        CRIT + "Avoid (high): drop shadows\n"
        "Avoid (medium): dense card grids\n"
        "Prefer (high, supporting context): generous whitespace\n"
        "Prefer (medium, supporting context): muted earth palette",
    )
    # Without the project context the global "serif display headings" is back, as global.
    g = store.retrieve_for_injection(U)
    assert build_generation_block(g) == (
        GEN + "Prefer (high): generous whitespace\n"
        "Prefer (medium): muted earth palette · serif display headings\n"
        "Avoid (high): drop shadows\n"
        "Avoid (medium): dense card grids"
    )


def test_project_only_records(store: MemoryStore) -> None:
    teach(store, "left-aligned navigation", "layout", n=5, project="acme")
    teach(store, "stock photography", "imagery", "negative", n=3, project="acme")
    r = store.retrieve_for_injection(U, {"project_id": "acme"})
    assert both(r, "acme") == (
        GEN + "This project prefers (high): left-aligned navigation\n"
        "This project avoids (medium): stock photography",
        CRIT + "This project says avoid (medium): stock photography\n"
        "This project says prefer (high): left-aligned navigation",
    )


def test_disabled_memory(store: MemoryStore) -> None:
    the_example(store)
    store.set_memory_enabled(U, False)
    for ctx, pid in ((None, None), ({"project_id": "acme"}, "acme")):
        r = store.retrieve_for_injection(U, ctx)
        assert both(r, pid) == ("", "")
        assert summarize_diagnostics(r) == ""
    store.set_memory_enabled(U, True)
    assert both(store.retrieve_for_injection(U, {"project_id": "acme"}), "acme") == (
        PROJECT_GEN,
        PROJECT_CRIT,
    )


def test_project_ignoring_global_memory(store: MemoryStore) -> None:
    the_example(store)
    store.set_project_disabled(U, "acme", True)
    r = store.retrieve_for_injection(U, {"project_id": "acme"})
    assert both(r, "acme") == (
        GEN + "This project prefers (medium): left-aligned navigation\n"
        "This project avoids (high): serif display headings",
        CRIT + "This project says avoid (high): serif display headings\n"
        "This project says prefer (medium): left-aligned navigation",
    )
    assert summarize_diagnostics(r) == (
        "memory adjusted: global memory off for this project (5 global preferences not used)"
    )


def test_low_confidence_entries_are_skipped(store: MemoryStore) -> None:
    teach(store, "generous whitespace", "layout", n=5)
    r = store.retrieve_for_injection(U)
    low = r.positives[0].copy()
    low.pattern, low.confidence = "barely seen", "low"
    mixed = RetrievalResult(positives=[*r.positives, low])
    assert build_generation_block(mixed) == GEN + "Prefer (high): generous whitespace"
    # Only low entries: nothing injectable, so no heading either (the legacy block would
    # still print its bare header line).
    only_low = RetrievalResult(positives=[low])
    assert both(only_low) == ("", "")
    assert build_prompt_block(only_low) == "[MEMORY CONTEXT]"


def test_legacy_block_is_unchanged(store: MemoryStore) -> None:
    the_example(store)
    r = store.retrieve_for_injection(U, {"project_id": "acme"})
    assert build_prompt_block(r, "acme") == (
        "[MEMORY CONTEXT]\n"
        "Prefer (high):    generous whitespace\n"
        "Prefer (medium):  muted earth palette · left-aligned navigation\n"
        "Avoid (high):     drop shadows · serif display headings\n"
        "Avoid (medium):   dense card grids\n"
        "Project override: serif display headings, left-aligned navigation active (acme)"
    )
    assert build_prompt_block(RetrievalResult()) == ""


def test_builders_do_not_mutate_the_retrieval(store: MemoryStore) -> None:
    the_example(store)
    r = store.retrieve_for_injection(U, {"project_id": "acme"})
    before = r.to_dict()
    both(r, "acme")
    summarize_diagnostics(r)
    assert r.to_dict() == before


# -- token honesty ----------------------------------------------------------------------------


def test_overhead_constants_are_computed_from_the_fixed_wording() -> None:
    def est(s: str) -> int:
        return math.ceil(u16len(s) / 4)

    gen_fixed = GEN + "".join(label + "\n" for label in GEN_LABELS)
    crit_fixed = CRIT + "".join(label + "\n" for label in CRIT_LABELS)
    assert GENERATION_OVERHEAD_TOKENS == est(gen_fixed) == 170
    assert CRITIQUE_OVERHEAD_TOKENS == est(crit_fixed) == 215
    assert estimate_tokens("abcde") == 2
    assert estimate_tokens("😀") == 1  # two UTF-16 code units


def assert_honest(r: RetrievalResult, project_id: str | None) -> None:
    shown = [*r.positives, *r.negatives]
    retrieval_estimate = 20 + sum(token_cost(p.pattern) for p in shown)
    assert retrieval_estimate <= TOKEN_BUDGET
    gen, crit = both(r, project_id)
    for block, overhead in ((gen, GENERATION_OVERHEAD_TOKENS), (crit, CRITIQUE_OVERHEAD_TOKENS)):
        assert estimate_tokens(block) <= retrieval_estimate + overhead <= TOKEN_BUDGET + overhead


def test_token_honesty_over_the_golden_retrievals(store: MemoryStore) -> None:
    the_example(store)
    for ctx, pid in ((None, None), ({"project_id": "acme"}, "acme")):
        assert_honest(store.retrieve_for_injection(U, ctx), pid)


_WORDS = ["bold", "serif", "grid", "muted", "airy", "neon", "café", "über", "😀", "zigzag"]


@pytest.mark.parametrize("seed", range(8))
def test_token_honesty_stress(make_store: Any, seed: int) -> None:
    """60-pattern users with long and non-ASCII patterns push retrieval to its budget."""
    store: MemoryStore = make_store()
    rng = random.Random(seed)
    signals = []
    for i in range(60):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(1, 14))]
        pattern = f"{' '.join(words)} {i}"
        polarity = rng.choice(["positive", "negative"])
        ptype = rng.choice(["layout", "color", "typography", "effects", "imagery"])
        project = "acme" if i % 4 == 0 else None
        scope = "project" if project else "global"
        sig = tag(pattern, ptype, polarity, scope=scope, project_id=project)
        signals += [sig] * rng.choice([3, 4, 5, 6])
    store.ingest_signals(U, signals)
    for ctx, pid in ((None, None), ({"project_id": "acme"}, "acme")):
        r = store.retrieve_for_injection(U, ctx)
        assert r.positives or r.negatives
        assert_honest(r, pid)


# -- diagnostics feed -------------------------------------------------------------------------


def test_summary_of_the_issue_example(store: MemoryStore) -> None:
    # 2 global positives, 3 global negatives, and a project negative overriding a global
    # positive: 4 negatives against 2 positives -> the ceiling keeps 2, trims 2.
    teach(store, "generous whitespace", "layout", n=5)
    teach(store, "muted earth palette", "color", n=4)
    teach(store, "serif display headings", "typography", n=3)
    teach(store, "drop shadows", "effects", "negative", n=5)
    teach(store, "neon gradients", "accent", "negative", n=4)
    teach(store, "stock photography", "imagery", "negative", n=3)
    teach(store, "serif display headings", "typography", "negative", n=3, project="acme")
    r = store.retrieve_for_injection(U, {"project_id": "acme"})
    assert [d["type"] for d in r.diagnostics] == [
        "project_override_suppression",
        "diversity_ceiling_applied",
    ]
    assert summarize_diagnostics(r) == (
        "memory adjusted: 2 avoidances trimmed for balance, "
        "1 global preference overridden by this project"
    )


def test_summary_is_empty_when_nothing_notable(store: MemoryStore) -> None:
    assert summarize_diagnostics(store.retrieve_for_injection(U)) == ""
    teach(store, "generous whitespace", "layout", n=5)
    r = store.retrieve_for_injection(U)
    assert r.diagnostics == [] and summarize_diagnostics(r) == ""
    # Diagnostics with zero counts or of unknown types are not notable either.
    quiet = RetrievalResult(
        diagnostics=[
            {"type": "hard_cap_applied", "dropped": 0, "trace": "x"},
            {
                "type": "project_global_memory_disabled",
                "project_id": "p",
                "ignored_global_count": 0,
            },
            {"type": "something_new", "trace": "y"},
            {"trace": "no type"},
        ]
    )
    assert summarize_diagnostics(quiet) == ""


def test_summary_of_every_diagnostic_type() -> None:
    diags: list[dict[str, Any]] = [
        {"type": "project_override_suppression", "suppressed_pattern": "a"},
        {"type": "project_override_suppression", "suppressed_pattern": "b"},
        {"type": "hard_cap_applied", "total_eligible": 23, "cap": 20, "dropped": 3},
        {"type": "diversity_backfill", "backfilled_count": 1, "backfilled_patterns": ["c"]},
        {
            "type": "diversity_ceiling_applied",
            "negative_count_before": 6,
            "negative_count_after": 5,
            "trimmed_patterns": ["d"],
        },
        {"type": "category_backfill", "backfilled_count": 2, "backfilled_types": ["x"]},
        {"type": "category_ceiling_applied", "total_trimmed": 4, "trimmed_patterns": ["e"] * 4},
        {"type": "token_budget_exceeded", "pattern": "f"},
        {"type": "token_budget_exceeded", "pattern": "g"},
        {"type": "project_global_memory_disabled", "project_id": "p", "ignored_global_count": 1},
    ]
    assert summarize_diagnostics(RetrievalResult(diagnostics=diags)) == (
        "memory adjusted: 3 lower-ranked preferences left out (limit reached), "
        "1 avoidance trimmed for balance, "
        "1 preference brought in for balance, "
        "4 preferences trimmed so no single category dominates, "
        "2 preferences brought in from other categories, "
        "2 preferences left out to fit the token budget, "
        "2 global preferences overridden by this project, "
        "global memory off for this project (1 global preference not used)"
    )


def test_summary_over_a_real_capped_retrieval(store: MemoryStore) -> None:
    types = ["layout", "color", "typography", "effects", "imagery", "motion", "icons"]
    signals = []
    for i in range(24):
        sig = tag(f"pattern number {i}", types[i % len(types)], "positive")
        signals += [sig] * (3 + i % 4)
    store.ingest_signals(U, signals)
    r = store.retrieve_for_injection(U)
    kinds = {d["type"] for d in r.diagnostics}
    assert "hard_cap_applied" in kinds
    line = summarize_diagnostics(r)
    assert line.startswith("memory adjusted: 4 lower-ranked preferences left out (limit reached)")
    assert "\n" not in line


def test_feed_line_follows_the_user_setting(store: MemoryStore) -> None:
    the_example(store)
    r = store.retrieve_for_injection(U, {"project_id": "acme"})
    assert store.get_settings(U).diagnostics_feed is False
    assert diagnostics_feed_line(store, U, r) == ""  # off by default
    store.set_diagnostics_feed(U, True)
    assert diagnostics_feed_line(store, U, r) == (
        "memory adjusted: 1 global preference overridden by this project"
    )
    assert diagnostics_feed_line(store, U, store.retrieve_for_injection(U)) == ""
    store.set_diagnostics_feed(U, False)
    assert diagnostics_feed_line(store, U, r) == ""
    # A user the store has never seen: the setting is off.
    assert diagnostics_feed_line(store, "newcomer", r) == ""
