"""The engine's fast paths give exactly what the plain ones give (docs/performance.md,
"Engine speedups"): version 1's inlined bulk fold, version 3's single-column conjugate
gradients, its records rebuilt only where their inputs changed (with the bucket indexes
patched there), and its fits reusing the coordinates of the last one."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from creative_memory.engine.derivation.base import Bucket, new_record
from creative_memory.engine.derivation.registry import new_state
from creative_memory.engine.derivation.v3 import DENSE_MAX, ModelV3
from creative_memory.engine.events import (
    ComparisonEvent,
    ComparisonSide,
    DecayPassEvent,
    Event,
    Feature,
    LegacyRecordEvent,
    RefinementEvent,
    build_signal_event,
)
from creative_memory.engine.models import Preference, RetrievalResult
from creative_memory.engine.retrieval import retrieve, retrieve_state
from creative_memory.engine.timeutil import MS_PER_DAY, format_ts
from tests.test_golden_versions import machine_fingerprint

T0 = 1_767_225_600_000
TYPES = ("layout", "color", "typography", "motion", "mood")
KINDS = ("thumbs_up", "thumbs_down", "explicit_tag", "repeated_acceptance", "revert_after_edit")


def history(n: int, n_patterns: int, seed: int, *, extras: bool = True) -> list[Event]:
    """Mixed events over ``n_patterns`` patterns per type: streaks of one key (reversal
    ladders, shadows, promotions), project buckets, comparisons, and — with ``extras`` —
    decay passes, refinements and legacy records; ``seq`` 1…n."""
    rng = random.Random(seed)
    out: list[Event] = []
    key = (TYPES[0], "p0")
    polarity = "positive"
    for i in range(n):
        t = T0 + i * 3_600_000
        ts = format_ts(t)
        roll = rng.random()
        if extras and roll < 0.01:
            out.append(DecayPassEvent(at=format_ts(t + 40 * MS_PER_DAY), recorded_at=ts))
            continue
        if extras and roll < 0.015:
            out.append(RefinementEvent(at=ts, recorded_at=ts, artifact_id=f"a{i}", diff={"i": i}))
            continue
        if extras and roll < 0.02:
            record = {
                "id": f"pref_legacy{i}",
                "preference_type": rng.choice(TYPES),
                "pattern": f"p{rng.randrange(n_patterns)}",
                "polarity": rng.choice(("positive", "negative")),
                "signal_strength": rng.random(),
                "confidence": "medium",
                "sources": ["explicit_tag"],
                "last_seen": ts,
                "decay_at": format_ts(t + 14 * MS_PER_DAY),
                "scope": "global",
                "polarity_status": "stable",
            }
            out.append(LegacyRecordEvent(at=ts, recorded_at=ts, bucket=None, record=record))
            continue
        if roll < 0.1:
            sides = [
                ComparisonSide(
                    features=[
                        Feature(t_, f"p{rng.randrange(n_patterns)}") for t_ in rng.sample(TYPES, 2)
                    ]
                )
                for _ in range(2)
            ]
            out.append(ComparisonEvent(at=ts, recorded_at=ts, chose=sides[0], over=sides[1]))
            continue
        if rng.random() < 0.6:  # stay on the key: long streaks, some of them reversals
            if rng.random() < 0.3:
                polarity = "negative" if polarity == "positive" else "positive"
        else:
            key = (rng.choice(TYPES), f"p{rng.randrange(n_patterns)}")
            polarity = rng.choice(("positive", "negative"))
        kind = rng.choice(KINDS)
        project = rng.random() < 0.2
        signal = {
            "signal_type": kind,
            "preference_type": key[0],
            "pattern": key[1],
            "polarity": polarity,
            "tag_text": rng.choice(("love this", "not this", None)),
            "scope": "project" if project else "global",
            "project_id": f"proj{rng.randrange(3)}" if project else None,
            "artifact_id": f"a{i // 2}",
            "session_id": "s",
            "timestamp": ts,
        }
        out.append(build_signal_event(signal, t, ts))
    return [msgspec.structs.replace(ev, seq=i) for i, ev in enumerate(out, 1)]


def one_by_one(version: str, events: list[Event], state: Any = None) -> Any:
    """``events`` applied one at a time (to a new state of ``version``, or to ``state``)."""
    state = new_state(version) if state is None else state
    for ev in events:
        state.apply(ev)
    return state


def fold_in_chunks(
    version: str, events: list[Event], rng: random.Random, most: int, materialize: bool = False
) -> Any:
    """``events`` folded in chunks of 1 … ``most`` - 1 events, as the store streams a log
    (materialised after each chunk with ``materialize``)."""
    state = new_state(version)
    at = 0
    while at < len(events):
        step = rng.randrange(1, most)
        state.fold(events[at : at + step])
        if materialize:
            state.materialize()
        at += step
    return state


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_version_1_bulk_fold_is_the_event_by_event_fold(seed: int) -> None:
    events = history(3_000, 12, seed)
    expected = one_by_one("1", events).dump()
    whole = new_state("1")
    whole.fold(events)
    assert whole.dump() == expected
    assert fold_in_chunks("1", events, random.Random(seed), 400).dump() == expected


def test_version_1_bulk_fold_keeps_the_order_check() -> None:
    events = history(50, 3, 4, extras=False)
    state = new_state("1")
    state.fold(events)
    with pytest.raises(ValueError, match="out of order"):
        state.fold([events[10]])
    # the records touched before the error carry real decay dates, not raw event times
    mixed = new_state("1")
    with pytest.raises(ValueError, match="out of order"):
        mixed.fold([*events[:30], events[5]])
    reference = new_state("1")
    for ev in events[:30]:
        reference.apply(ev)
    assert [r.decay_at for r in mixed.all_records()] == [
        r.decay_at for r in reference.all_records()
    ]


def big_model() -> Any:
    """A version-3 state whose global bucket is solved by conjugate gradients."""
    state = new_state("3")
    state.fold(history(1_500, 110, 5, extras=False))
    model = state.models[None]  # type: ignore[attr-defined]
    assert isinstance(model, ModelV3)
    op = model.solve().operator  # type: ignore[attr-defined]
    assert op.n > DENSE_MAX
    return op


def test_single_column_conjugate_gradients_are_the_masked_ones_bit_for_bit() -> None:
    op = big_model()
    rng = np.random.default_rng(7)
    for tolerance in (1e-12, 1e-9, 1e-3):
        for start in (None, "random"):
            b = rng.standard_normal((op.n, 1))
            b[rng.integers(0, op.n, 5)] = 0.0
            x0 = None if start is None else rng.standard_normal((op.n, 1))
            fast = op._conjugate_gradients_1(b, x0, tolerance)
            masked = op._conjugate_gradients_masked(b, x0, tolerance)
            assert fast.shape == masked.shape == (op.n, 1)
            assert fast.tobytes() == masked.tobytes()


def test_single_column_conjugate_gradients_stop_like_the_masked_ones_on_no_descent() -> None:
    op = big_model()
    op.prior = op.prior.copy()
    op.prior[:] = -1e6  # M is not positive definite: pᵀ M p ≤ 0 at once
    b = np.ones((op.n, 1))
    fast = op._conjugate_gradients_1(b, None, 1e-12)
    masked = op._conjugate_gradients_masked(b, None, 1e-12)
    assert fast.tobytes() == masked.tobytes()


def rec(key: tuple[str, str, str], rid: str) -> Preference:
    return new_record(
        id=rid,
        preference_type=key[0],
        pattern=key[1],
        polarity=key[2],
        strength=0.5,
        sources=[],
        last_seen="",
        decay_at="",
        scope="global",
        derivation_version="3",
        source_event_count=1,
        last_derived_event_seq=1,
    )


def indexes(bucket: Bucket) -> tuple[dict[Any, int], dict[str, int]]:
    return (
        {k: id(r) for k, r in bucket.first.items()},
        {k: id(r) for k, r in bucket.by_id.items()},
    )


@pytest.mark.parametrize("seed", range(40))
def test_bucket_patch_builds_the_indexes_replace_builds(seed: int) -> None:
    rng = random.Random(seed)
    ids = [f"id{i}" for i in range(12)]  # few ids and keys: collisions happen
    keys = [("t", f"p{i}", pol) for i in range(6) for pol in ("positive", "negative")]

    def fresh() -> Preference:
        return rec(rng.choice(keys), rng.choice(ids))

    old = [fresh() for _ in range(rng.randrange(0, 8))]
    new = list(old)
    replaced: list[Preference] = []
    made: list[Preference] = []
    for i in range(len(new)):
        if rng.random() < 0.3:
            replaced.append(new[i])
            new[i] = fresh()
            made.append(new[i])
    for _ in range(rng.randrange(0, 3)):
        at = rng.randrange(0, len(new) + 1)
        new.insert(at, fresh())
        made.append(new[at])
    patched, rebuilt = Bucket(), Bucket()
    patched.replace(old)
    patched.patch(new, replaced, made)
    rebuilt.replace(new)
    assert patched.records == new
    assert indexes(patched) == indexes(rebuilt)


@pytest.mark.parametrize(
    ("version", "extras"), [("3", False), ("4", False), ("5", False), ("3", True)]
)
def test_incremental_records_and_indexes_are_a_cold_derivation(version: str, extras: bool) -> None:
    events = history(1_400, 110, 6, extras=extras)
    rng = random.Random(6)
    base, later = events[:1_200], events[1_200:]
    state = new_state(version)
    state.fold(base)
    state.materialize()
    for i, ev in enumerate(later):
        state.apply(ev)
        if rng.random() < 0.3 or i == len(later) - 1:
            state.materialize()
            cold = new_state(version)
            cold.fold(events[: 1_200 + i + 1])
            assert state.dump() == cold.dump()
            for bucket, cold_bucket in zip(state.buckets(), cold.buckets(), strict=True):
                rebuilt = Bucket()
                rebuilt.replace(bucket.records)
                assert indexes(bucket) == indexes(rebuilt)
                assert [r.to_dict() for r in bucket.records] == [
                    r.to_dict() for r in cold_bucket.records
                ]


def plain_retrieval(state: Any, project_id: str | None, types: list[str] | None) -> Any:
    projects = {pid: b.records for pid, b in state.projects.items()}
    result = retrieve(state.global_records, projects, project_id, types)
    ex = state.export_record
    return RetrievalResult(
        positives=[ex(r) for r in result.positives],
        negatives=[ex(r) for r in result.negatives],
        project_overrides=[ex(r) for r in result.project_overrides],
        diagnostics=result.diagnostics,
    )


@pytest.mark.parametrize("version", ["1", "3"])
def test_memoised_retrieval_is_the_plain_one_and_every_caller_gets_its_own(version: str) -> None:
    events = history(900, 8, 8)
    state = new_state(version)
    contexts: list[tuple[str | None, list[str] | None]] = [
        (None, None),
        ("proj1", None),
        ("proj0", ["layout", "col"]),
    ]
    for at in (600, 750, 900):
        state.fold(events[state.event_count : at])
        for project_id, types in contexts:
            expected = plain_retrieval(state, project_id, types).to_dict()
            first = retrieve_state(state, project_id, types, ())
            assert first.to_dict() == expected
            # a caller that changes what it got changes nothing for the next one
            for r in first.positives + first.negatives + first.project_overrides:
                r.sources.append("changed")
                r.signal_strength = -1.0
            for d in first.diagnostics:
                d["changed"] = True
                for v in d.values():
                    if isinstance(v, list):
                        v.append("changed")
            first.positives.clear()
            assert retrieve_state(state, project_id, types, ()).to_dict() == expected
    assert any(retrieve_state(state, p, t, ()).diagnostics for p, t in contexts)


def test_the_services_prompt_renders_the_shared_retrieval_without_changing_it(
    tmp_path: Path,
) -> None:
    """The service's prompt (and the worker) read the memoised retrieval itself; the public
    retrieval is a copy of it, equal, and changing the copy changes nothing shared."""
    from creative_memory import MemoryStore, build_generation_block
    from creative_memory.app.service import MemoryService
    from tests.conftest import tag

    store = MemoryStore(tmp_path, derivation_version="1")
    days = [f"2025-01-0{i + 1}T00:00:00.000Z" for i in range(5)]
    patterns = ("airy", "grid", "mono", "wide", "flat")  # over the category ceiling
    store.ingest_signals("u", [tag(p, ts=d) for p in patterns for d in days])
    store.ingest_signals("u", [tag("neon", "color", "negative", ts=d) for d in days])
    shared, nested = store._retrieved("u", None)
    assert shared.diagnostics
    assert store._retrieved("u", None)[0] is shared  # memoised: no copy
    public = store.retrieve_for_injection("u")
    assert public is not shared and public.to_dict() == shared.to_dict()
    before = msgspec.json.encode(shared.to_dict())
    block = MemoryService(store).prompt("u").block
    assert block == build_generation_block(public, None) and "neon" in block
    public.diagnostics[0]["changed"] = True
    public.positives.clear()
    assert msgspec.json.encode(shared.to_dict()) == before
    assert nested and nested == [i for i, d in enumerate(shared.diagnostics) if any(
        isinstance(v, (list, dict)) for v in d.values())]  # fmt: skip
    store.close()


SPARSE_FIXTURE = Path(__file__).parent / "fixtures" / "sparse_fit.json.gz"


def sparse_records(version: str, n: int, patterns: int, seed: int, extras: bool) -> list[Any]:
    """Records of a history big enough for the conjugate-gradient path, its last 40 events
    read one at a time (as a store reads after each append)."""
    events = history(n, patterns, seed, extras=extras)
    state = new_state(version)
    state.fold(events[: n - 40])
    state.materialize()
    for ev in events[n - 40 :]:
        state.apply(ev)
        state.materialize()
    return [
        [
            r.scope,
            r.preference_type,
            r.pattern,
            r.polarity,
            repr(r.signal_strength),
            r.confidence,
            r.polarity_status,
        ]
        for r in state.all_records()
    ]


def test_the_sparse_path_gives_the_records_it_gave_before_the_speedups() -> None:
    """The golden histories are small enough for the dense solve (tests/test_golden_versions.py);
    these were written by the engine before docs/performance.md's "Engine speedups", and
    pin versions 3 and 4 on the conjugate-gradient path: exactly on the kind of machine that
    wrote them, up to 1e-9 relative in the strengths elsewhere (the golden files' rule)."""
    doc = json.loads(gzip.decompress(SPARSE_FIXTURE.read_bytes()))
    exact = doc["machine"] == machine_fingerprint()
    assert len(doc["cases"]) == 4
    for case in doc["cases"]:
        got = sparse_records(
            case["version"], case["events"], case["patterns"], case["seed"], case["extras"]
        )
        want = case["records"]
        assert len(got) == len(want) > 500
        if exact:
            assert got == want, case["version"]
            continue
        for g, w in zip(got, want, strict=True):
            assert g[:4] == w[:4] and g[5:] == w[5:]
            assert float(g[4]) == pytest.approx(float(w[4]), rel=1e-9, abs=1e-12)
