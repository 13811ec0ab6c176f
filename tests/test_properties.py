"""Property tests (hypothesis): random signal sequences against the invariants that
docs/engine.md's "Retrieval" guarantees, plus determinism of the derivation
(docs/architecture.md, "Determinism")."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, get_args

from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from creative_memory import MIN_NEG_FLOOR, MemoryStore, RetrievalResult, build_prompt_block
from creative_memory.engine.constants import SignalType
from creative_memory.engine.timeutil import MS_PER_DAY, format_ts, parse_ts, u16len
from tests.conftest import ManualClock

U = "prop"
T0 = parse_ts("2024-01-01T00:00:00.000Z")

TYPES = ["layout", "layout_density", "color", "motion", "10", "2", "typography", "mood"]
PATTERNS = [f"p{i}" for i in range(24)] + [
    "y" * 40,
    "\U0001f600" * 30,  # u16len 60
    "é" * 30,
    "long_" * 12,
    *[f"{'w' * 100}{i}" for i in range(8)],  # cost 31 each
]
SIGNAL_TYPES = ["explicit_tag"] * 4 + list(get_args(SignalType))  # tags weighted 5 in 12
PROJECTS = [None, None, None, "pa", "pb"]


@st.composite
def steps_strategy(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    """A random history. Each pattern has a usual polarity (drawn per example, so some
    histories are negative-heavy) that is occasionally contradicted."""
    share = draw(st.sampled_from([0.0, 0.3, 0.5, 0.7, 0.9]))
    negative = {p for i, p in enumerate(PATTERNS) if (i * 7 % 10) / 10 < share}
    signal_step = st.tuples(
        st.just("sig"),
        st.sampled_from(PATTERNS),
        st.sampled_from(TYPES),
        st.integers(min_value=0, max_value=9),  # 9 = contradict the usual polarity
        st.sampled_from(SIGNAL_TYPES),
        st.sampled_from(PROJECTS),
        st.integers(min_value=1, max_value=7),  # repeats
        st.integers(min_value=0, max_value=2),  # days to advance
    )
    decay_step = st.tuples(st.just("decay"), st.integers(min_value=0, max_value=40))
    # "spread" adds strong signals to many patterns at once, so that histories often have
    # more than 20 eligible records (hard cap, backfills) and crowded types.
    spread_step = st.tuples(
        st.just("spread"),
        st.integers(min_value=0, max_value=len(PATTERNS) - 1),  # first pattern
        st.integers(min_value=5, max_value=30),  # how many patterns
        st.booleans(),  # True: cycle through the types; False: one type for all
        st.sampled_from(PROJECTS),
        st.integers(min_value=3, max_value=5),  # explicit tags each
    )
    kinds = st.sampled_from(["sig"] * 12 + ["decay", "spread"])
    n = draw(st.integers(min_value=1, max_value=60))
    raw: list[tuple[Any, ...]] = []
    for _ in range(n):
        kind = draw(kinds)
        if kind == "sig":
            raw.append(draw(signal_step))
        elif kind == "decay":
            raw.append(draw(decay_step))
        else:
            _, first, count, cycle, project, repeats = draw(spread_step)
            for j in range(count):
                i = (first + j) % len(PATTERNS)
                ptype = TYPES[i % len(TYPES)] if cycle else TYPES[first % len(TYPES)]
                raw.append(("sig", PATTERNS[i], ptype, 0, "explicit_tag", project, repeats, 0))
    steps: list[tuple[Any, ...]] = []
    for step in raw:
        if step[0] == "sig":
            _, pattern, ptype, flip, signal_type, project, repeats, days = step
            usual = "negative" if pattern in negative else "positive"
            other = "positive" if usual == "negative" else "negative"
            polarity = other if flip == 9 else usual
            step = ("sig", pattern, ptype, polarity, signal_type, project, repeats, days)
        steps.append(step)
    return steps


CONTEXTS: list[dict[str, Any] | None] = [
    None,
    {"project_id": "pa"},
    {"project_id": "pb", "preference_types": ["layout"]},
    {"project_id": "nope", "preference_types": ["co", "mo", "1"]},
    {"preference_types": []},
    {"project_id": "pa", "preference_types": [""]},
]


def replay(root: Path, steps: list[tuple[Any, ...]]) -> MemoryStore:
    """Apply ``steps`` to a fresh store at ``root``; timestamps strictly increase.

    Signals between two decay passes are appended in one ``ingest_signals`` call (folded in
    order, exactly like one call per signal, but with one fsync)."""
    store = MemoryStore(root, derivation_version="1", clock=ManualClock())
    now = T0
    batch: list[dict[str, Any]] = []
    for step in steps:
        if step[0] == "decay":
            if batch:
                store.ingest_signals(U, batch)
                batch = []
            now += step[1] * MS_PER_DAY + 1
            store.run_decay(U, format_ts(now))
            continue
        _, pattern, ptype, polarity, signal_type, project, repeats, days = step
        now += days * MS_PER_DAY
        for _ in range(repeats):
            now += 1000
            batch.append(
                {
                    "signal_type": signal_type,
                    "pattern": pattern,
                    "preference_type": ptype,
                    "polarity": polarity,
                    "scope": "project" if project else "global",
                    "project_id": project,
                    "timestamp": format_ts(now),
                }
            )
    if batch:
        store.ingest_signals(U, batch)
    return store


def serialise(r: RetrievalResult, project_id: str | None) -> bytes:
    doc = {"retrieval": r.to_dict(), "prompt": build_prompt_block(r, project_id)}
    return json.dumps(doc, ensure_ascii=False).encode("utf-8")


def est_tokens(r: RetrievalResult) -> int:
    return 20 + sum(math.ceil(u16len(p.pattern) / 4) + 5 for p in r.positives + r.negatives)


def check_invariants(store: MemoryStore, ctx: dict[str, Any] | None) -> RetrievalResult:
    r = store.retrieve_for_injection(U, ctx)
    injected = r.positives + r.negatives
    kinds = {d["type"] for d in r.diagnostics}
    for k in sorted(kinds):
        event(k)

    # Hard cap (stage 6); both backfills are bounded by what was removed before them.
    assert len(injected) <= 20

    # Polarity ceiling. Stage 7 picks keep = the largest n in N..2 with
    # n <= floor(1.0 * (P + min(O, N - n))), else 2, and stage 8 backfills exactly
    # min(O, N - max_neg) positives, so right after stage 8:
    #     negatives <= max(MIN_NEG_FLOOR, positives)                          (*)
    # The ceiling diagnostic exposes that state: after = max_neg and the slot count is
    # len(kept) after trimming and backfill, i.e. max_neg + positives.
    if "diversity_ceiling_applied" in kinds:
        d = next(d for d in r.diagnostics if d["type"] == "diversity_ceiling_applied")
        neg_after = d["negative_count_after"]
        slots = int(d["trace"].rsplit("of ", 1)[1].split(" ")[0])
        assert neg_after <= max(MIN_NEG_FLOOR, slots - neg_after)
        assert d["negative_count_before"] > neg_after >= MIN_NEG_FLOOR
    # Stages 9-11 can break (*): the category ceiling trims positives, category backfill
    # ignores polarity (may admit negatives), the token budget drops either polarity. So (*)
    # holds for the final result exactly when neither a category_ceiling_applied nor a
    # token_budget_exceeded diagnostic was emitted (stages 9-11 then change nothing).
    if not kinds & {"category_ceiling_applied", "token_budget_exceeded"}:
        assert len(r.negatives) <= max(MIN_NEG_FLOOR, len(r.positives))

    # Category ceiling. Stage 9 activates when the types of kept ∪ overflow number >= 2 and
    # some kept type has > 3; it trims every such type to 3, and stage 10 admits at most
    # 3 - count per type already kept and at most 3 of a type new to kept. The final records
    # are a subset of stage-9 kept ∪ overflow, so if they span >= 2 types, stage 9 saw >= 2
    # types: either nothing exceeded 3 or everything was brought to <= 3.
    per_type = Counter(p.preference_type for p in injected)
    if len(per_type) >= 2 or "category_ceiling_applied" in kinds:
        assert max(per_type.values(), default=0) <= 3

    # Token budget (stage 11).
    assert est_tokens(r) <= 200

    # Lifecycle gate (stage 3) and project overrides (Q26).
    for p in injected:
        assert p.signal_strength >= 0.40 and p.polarity_status == "stable"
        assert p.confidence in ("medium", "high")
    for p in r.project_overrides:
        assert p.signal_strength >= 0.40 and p.polarity_status == "stable"
        assert ctx is not None and p.scope == "project:" + ctx["project_id"]
    for lst in (r.positives, r.negatives):
        s = [p.signal_strength for p in lst]
        assert s == sorted(s, reverse=True)
    return r


@settings(
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(steps=steps_strategy())
def test_retrieval_invariants_and_determinism(steps: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = replay(Path(tmp) / "a", steps)
        for p in store.list_preferences(U):
            assert 0.0 <= p.signal_strength <= 1.0
            assert p.confidence in ("low", "medium", "high")
        first = {}
        for i, ctx in enumerate(CONTEXTS):
            r = check_invariants(store, ctx)
            pid = ctx.get("project_id") if ctx else None
            first[i] = serialise(r, pid)
        # same events, another store: identical result and prompt (ids included)
        twin = replay(Path(tmp) / "b", steps)
        # and a fresh instance on the same root (nothing in-process reused)
        reopened = MemoryStore(Path(tmp) / "a", derivation_version="1", clock=ManualClock())
        for i, ctx in enumerate(CONTEXTS):
            pid = ctx.get("project_id") if ctx else None
            assert serialise(twin.retrieve_for_injection(U, ctx), pid) == first[i]
            assert serialise(reopened.retrieve_for_injection(U, ctx), pid) == first[i]


CHILD = r"""
import json, shutil, sys, tempfile
from pathlib import Path
from creative_memory import MemoryStore, build_prompt_block
root, user, ctx = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
pid = ctx.get("project_id") if ctx else None

def dump(r):
    doc = {"retrieval": r.to_dict(), "prompt": build_prompt_block(r, pid)}
    return json.dumps(doc, ensure_ascii=False).encode("utf-8")

# (1) a new store on the same root
same = dump(MemoryStore(root, derivation_version="1").retrieve_for_injection(user, ctx))
# (2) a new root holding only the raw events (and settings): nothing derived to reuse
with tempfile.TemporaryDirectory() as tmp:
    (Path(tmp) / user).mkdir()
    for name in ("events.jsonl", "settings.json"):
        if (root / user / name).exists():
            shutil.copy(root / user / name, Path(tmp) / user / name)
    raw = dump(MemoryStore(tmp, derivation_version="1").retrieve_for_injection(user, ctx))
sys.stdout.buffer.write(same + b"\n" + raw)
"""


# A fixed, busy history (hard cap, both ceilings, backfills, token drops, suppression).
BUSY: list[tuple[Any, ...]] = [
    (
        "sig",
        PATTERNS[i % len(PATTERNS)],
        TYPES[i % 3 if i % 4 else i % len(TYPES)],
        "negative" if i % 5 < 3 else "positive",
        SIGNAL_TYPES[i % len(SIGNAL_TYPES)] if i % 7 == 0 else "explicit_tag",
        PROJECTS[i % len(PROJECTS)] if i % 3 == 0 else None,
        3 + i % 4,
        i % 2,
    )
    for i in range(90)
] + [("decay", 30), ("sig", "p0", "layout", "positive", "explicit_tag", "pa", 4, 0)]


@settings(deadline=None, max_examples=5, suppress_health_check=[HealthCheck.too_slow])
@example(steps=BUSY, ctx_index=0)
@example(steps=BUSY, ctx_index=1)
@given(steps=steps_strategy(), ctx_index=st.integers(min_value=0, max_value=len(CONTEXTS) - 1))
def test_fresh_process_derivation_is_byte_identical(
    steps: list[tuple[Any, ...]], ctx_index: int
) -> None:
    ctx = CONTEXTS[ctx_index]
    pid = ctx.get("project_id") if ctx else None
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "a"
        store = replay(root, steps)
        here = serialise(store.retrieve_for_injection(U, ctx), pid)
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(root), U, json.dumps(ctx)],
            capture_output=True,
            check=True,
            timeout=60,
        )
        assert out.stdout == here + b"\n" + here
