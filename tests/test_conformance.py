"""Replay every conformance trace recorded from the TypeScript prototype (version "1")."""

from __future__ import annotations

import filecmp
import math
from pathlib import Path
from typing import Any

import pytest

from creative_memory import MemoryStore, Preference, adapter, build_prompt_block
from tests.conftest import FIXTURES, SHARED, ManualClock, load_scenario

SCENARIOS = sorted((FIXTURES / "conformance").glob("*.json.gz"))


def test_all_68_scenarios_present() -> None:
    assert len(SCENARIOS) == 68


@pytest.mark.skipif(not SHARED.exists(), reason="no ../shared checkout beside the repo")
def test_vendored_fixtures_match_shared() -> None:
    for sub in ("conformance", "prototype", "composer"):
        cmp = filecmp.dircmp(FIXTURES / sub, SHARED / sub)
        assert not cmp.diff_files and not cmp.left_only and not cmp.right_only, sub


def summary(store: MemoryStore, user: str, rec: Preference) -> dict[str, Any]:
    shadow_key = None
    if rec.shadow_of:
        by_id = {r.id: r for r in store.list_preferences(user)}
        orig = by_id[rec.shadow_of]
        shadow_key = [orig.preference_type, orig.pattern, orig.polarity]
    return {
        "preference_type": rec.preference_type,
        "pattern": rec.pattern,
        "polarity": rec.polarity,
        "signal_strength": rec.signal_strength,
        "confidence": rec.confidence,
        "polarity_status": rec.polarity_status,
        "scope": rec.scope,
        "sources": rec.sources,
        "accept_count": rec.accept_count,
        "reject_count": rec.reject_count,
        "explicit_tags": rec.explicit_tags,
        "reversal_signals": rec.reversal_signals,
        "is_shadow": rec.shadow_of is not None,
        "shadow_of_key": shadow_key,
    }


def assert_same(actual: Any, expected: Any, where: str) -> None:
    if isinstance(expected, float) or (isinstance(actual, float) and isinstance(expected, int)):
        assert isinstance(actual, (int, float)) and not isinstance(actual, bool), where
        assert math.isclose(actual, expected, rel_tol=0, abs_tol=1e-9), (
            f"{where}: {actual!r} != {expected!r}"
        )
    elif isinstance(expected, dict):
        assert isinstance(actual, dict), f"{where}: {actual!r} is not a dict"
        assert list(actual) == list(expected), f"{where}: keys {list(actual)} != {list(expected)}"
        for k in expected:
            assert_same(actual[k], expected[k], f"{where}.{k}")
    elif isinstance(expected, list):
        assert isinstance(actual, list), f"{where}: {actual!r} is not a list"
        assert len(actual) == len(expected), f"{where}: {len(actual)} != {len(expected)} items"
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_same(a, e, f"{where}[{i}]")
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"


def run_op(store: MemoryStore, op: dict[str, Any]) -> Any:
    kind = op["op"]
    if kind == "ingest":
        rec = store.ingest_signal(op["user"], op["signal"])
        return {"record": None if rec is None else summary(store, op["user"], rec)}
    if kind == "adapter":
        getattr(adapter, op["handler"])(store, op["event"])
        return {"ok": True}
    if kind == "decay":
        return store.run_decay(op["user"], now=op["now"]).to_dict()
    if kind == "retrieve":
        r = store.retrieve_for_injection(op["user"], op["context"])
        return {
            "positives": [summary(store, op["user"], x) for x in r.positives],
            "negatives": [summary(store, op["user"], x) for x in r.negatives],
            "project_overrides": [summary(store, op["user"], x) for x in r.project_overrides],
            "diagnostics": r.diagnostics,
        }
    if kind == "prompt":
        r = store.retrieve_for_injection(op["user"], op["context"])
        return {"prompt": build_prompt_block(r, op["project_id"])}
    if kind == "list":
        recs = store.list_preferences(op["user"], **op["options"])
        return {"records": [summary(store, op["user"], x) for x in recs]}
    if kind == "set_enabled":
        store.set_memory_enabled(op["user"], op["enabled"])
        return None
    if kind == "reset":
        if "scope" in op:
            store.reset_memory(op["user"], op["scope"])
        else:
            store.reset_memory(op["user"])
        return None
    if kind == "log_refinement":
        entry = store.log_refinement(
            op["user"], artifact_id=op["artifact_id"], project_id=op["project_id"], diff=op["diff"]
        )
        return {
            "artifact_id": entry.artifact_id,
            "project_id": entry.project_id,
            "diff": entry.diff,
        }
    raise AssertionError(f"unknown op {kind}")


def replay(store: MemoryStore, clock: ManualClock, scenario: dict[str, Any], tag: str = "") -> None:
    """Run every op of a recorded scenario on ``store`` and compare with the prototype."""
    for i, op in enumerate(scenario["ops"]):
        if "clock" in op:
            clock.set(op["clock"])
        expected = op.get("expected")
        where = f"{scenario['name']} op#{i} {op['op']}{tag}"
        if isinstance(expected, dict) and expected.get("error"):
            with pytest.raises(ValueError):
                run_op(store, op)
            continue
        actual = run_op(store, op)
        if expected is None or op["op"] in ("set_enabled", "reset"):
            continue
        assert_same(actual, expected, where)


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name.removesuffix(".json.gz"))
def test_conformance(path: Path, tmp_path: Path) -> None:
    clock = ManualClock()
    store = MemoryStore(tmp_path / "mem", derivation_version="1", clock=clock)
    replay(store, clock, load_scenario(path))
