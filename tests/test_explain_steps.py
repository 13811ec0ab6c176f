"""Explain every step (docs/time-travel.md, "Explain every step"): under a version that fits
a bucket jointly, moves caused by events about other patterns are steps of their own, so a
trace has no holes; a record of strength 0.00 says why it is listed."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from creative_memory import MemoryStore
from creative_memory.engine.events import (
    ComparisonEvent,
    ComparisonSide,
    Event,
    Feature,
    SignalEvent,
)
from creative_memory.engine.explain import Explanation, explain
from creative_memory.engine.timeutil import format_ts, parse_ts
from tests.test_time_travel import T0, signal

TYPES = ("color", "layout")
PATTERNS = [f"p{i}" for i in range(6)]
KINDS = ("explicit_tag", "thumbs_up", "thumbs_down", "single_rejection", "repeated_acceptance")
JOINT = ("2", "3", "4", "5")


def history(tmp_path: Path, version: str, seed: int = 7, n: int = 160) -> list[Event]:
    """A mixed history: artifacts listing two or three features (one row of signals each),
    in the global bucket and one project, and a comparison now and then."""
    rng = random.Random(seed)
    store = MemoryStore(tmp_path / f"mem-{version}-{seed}", derivation_version=version)
    t0 = parse_ts(T0)
    for i in range(n):
        ts = format_ts(t0 + i * 60_000)
        project = "landing" if i % 5 == 4 else None
        if i % 9 == 8:
            a, b = rng.sample(PATTERNS, 2)
            store.append_comparison(
                "u",
                ComparisonEvent(
                    at=ts,
                    recorded_at=ts,
                    chose=ComparisonSide(features=[Feature("color", a)]),
                    over=ComparisonSide(features=[Feature("color", b)]),
                ),
            )
            continue
        if i % 6 == 5:  # a clear favourite, so some records have strength
            store.ingest_signal("u", signal("p0", "positive", signal_type="explicit_tag", ts=ts))
            continue
        kind = rng.choice(KINDS)
        polarity = "negative" if kind in ("thumbs_down", "single_rejection") else "positive"
        if kind == "explicit_tag":
            polarity = rng.choice(("positive", "negative"))
        batch = [
            signal(
                pattern,
                polarity,
                ptype,
                signal_type=kind,
                artifact=f"a{i}",
                ts=ts,
                scope="project" if project else "global",
                project_id=project,
            )
            for ptype, pattern in rng.sample([(t, p) for t in TYPES for p in PATTERNS], 3)
        ]
        store.ingest_signals("u", batch)
    return store.events("u")


def effects_in_order(ex: Explanation) -> list[tuple[int, str, float | None, float]]:
    return [
        (s.seq, e.record_id, e.strength_before, e.strength_after)
        for s in ex.steps
        for e in s.effects
    ]


def holes(ex: Explanation) -> list[str]:
    """Where a step does not start from the strength the previous one left (or the
    current record differs from the last step's). Under a joint fit a pattern has one
    record (its id names its polarity, which may flip): one chain; version 1 keeps a
    record per polarity: a chain each."""
    joint = ex.derivation_version != "1"
    found: list[str] = []
    last: dict[str, float] = {}
    for seq, rid, before, after in effects_in_order(ex):
        chain = "feature" if joint else rid
        if chain in last and (before is None or last[chain] != before):
            found.append(f"seq {seq}: {rid} {last[chain]} then {before}")
        last[chain] = after
    for rec in ex.records:
        chain = "feature" if joint else rec.id
        if chain in last and last[chain] != rec.signal_strength:
            found.append(f"end: {rec.id} {last[chain]} then {rec.signal_strength}")
    return found


def prefix_strength(
    events: list[Event], version: str, ex: Explanation, seq: int
) -> dict[str, float]:
    """The records' strengths right after event ``seq``, from the log prefix alone."""
    upto = [e for e in events if e.seq <= seq]
    past = explain(upto, version, ex.preference_type, ex.pattern, ex.project_id)
    return {r.id: r.signal_strength for r in past.records}


@pytest.mark.parametrize("version", JOINT)
def test_a_trace_under_a_joint_fit_has_no_holes(tmp_path: Path, version: str) -> None:
    events = history(tmp_path, version)
    joint_steps = 0
    for ptype in TYPES:
        for pattern in PATTERNS:
            for project in (None, "landing"):
                ex = explain(events, version, ptype, pattern, project)
                assert holes(ex) == [], (ptype, pattern, project)
                joint_steps += sum(s.kind == "joint_fit" for s in ex.steps)
    assert joint_steps > 0  # the history does move records through the joint fit


@pytest.mark.parametrize("version", JOINT)
def test_a_joint_fit_step_is_the_move_between_its_two_points(tmp_path: Path, version: str) -> None:
    """Each joint-fit step reports exactly the change from the log prefix before its run to
    the prefix that ends with it, and names the events of the run."""
    events = history(tmp_path, version)
    by_seq = {e.seq: e for e in events}
    checked = single = 0
    for ptype, pattern, project in itertools.product(TYPES, PATTERNS, (None, "landing")):
        ex = explain(events, version, ptype, pattern, project)
        for step in ex.steps:
            if step.kind != "joint_fit":
                continue
            assert step.seq_from is not None and step.events is not None
            assert step.seq_from <= step.seq and step.events >= 1
            after = prefix_strength(events, version, ex, step.seq)
            before = prefix_strength(events, version, ex, step.seq_from - 1)
            for eff in step.effects:
                assert after[eff.record_id] == eff.strength_after
                if eff.strength_before is not None and eff.record_id in before:
                    assert before[eff.record_id] == eff.strength_before
                assert eff.actions and "joint fit" in eff.actions[0]
            if step.events == 1:
                single += 1
                assert step.seq_from == step.seq
                cause = by_seq[step.seq]
                assert step.about and f"{ptype}/{pattern}" not in " ".join(step.about)
                if isinstance(cause, SignalEvent):
                    assert step.about == [f"{cause.preference_type}/{cause.pattern}"]
            else:
                assert step.about is None
            checked += 1
    assert checked > 0 and single > 0


def test_version_1_never_reports_a_joint_fit(tmp_path: Path) -> None:
    events = history(tmp_path, "1")
    for ptype in TYPES:
        for pattern in PATTERNS:
            ex = explain(events, "1", ptype, pattern)
            assert all(s.kind != "joint_fit" for s in ex.steps)
            assert holes(ex) == []


@pytest.mark.parametrize("version", ("1", *JOINT))
def test_why_a_record_of_strength_zero_is_listed(tmp_path: Path, version: str) -> None:
    events = history(tmp_path, version)
    zero = strong = 0
    for ptype in TYPES:
        for pattern in PATTERNS:
            ex = explain(events, version, ptype, pattern)
            assert len(ex.why_listed) == len(ex.records)
            for rec, why in zip(ex.records, ex.why_listed, strict=True):
                if rec.signal_strength > 0:
                    assert why is None
                    strong += 1
                else:
                    assert why is not None and why.startswith("strength 0.00")
                    if version != "1" and rec.polarity_status != "archived":
                        assert "lower bound" in why
                    zero += 1
    assert strong > 0
    if version != "1":
        assert zero > 0


def test_the_store_and_the_service_explain_with_the_new_steps(tmp_path: Path) -> None:
    """The store's explain is the engine's over the user's log (one rule for every surface)."""
    store = MemoryStore(tmp_path / "m", derivation_version="3")
    events = history(tmp_path, "3")
    store._storage.replace_all("u", events)
    got = store.explain("u", "color", "p0")
    want = explain(store.events("u"), "3", "color", "p0")
    assert got.to_dict() == want.to_dict()
    assert any(s.kind == "joint_fit" for s in got.steps)
