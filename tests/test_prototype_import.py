"""Prototype import reproduces the prototype's own retrieval results (issue: cache/import)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from creative_memory import MemoryStore, ValidationError, build_prompt_block
from tests.conftest import FIXTURES, ManualClock

PROTO = FIXTURES / "prototype"


def comparable(rec: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out = {k: v for k, v in rec.items() if k != "id"}
    if rec.get("shadow_of"):
        o = by_id[rec["shadow_of"]]
        out["shadow_of"] = [o["preference_type"], o["pattern"], o["polarity"]]
    for k in ("derivation_version", "source_event_count", "last_derived_event_seq"):
        out.pop(k, None)
    return out


def user_dir_bytes(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.mark.parametrize("user", ["designer_fresh", "designer"])
def test_import_reproduces_expected_retrieval(user: str, tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "mem", derivation_version="1", clock=ManualClock())
    src = json.loads((PROTO / user / "preferences.json").read_text())
    n = store.import_prototype(user, PROTO / user / "preferences.json")
    assert n == len(src["global_preferences"]) + sum(
        len(v) for v in src["project_overrides"].values()
    )
    expected = json.loads((PROTO / user / "expected-retrieval.json").read_text())
    all_src = src["global_preferences"] + [r for v in src["project_overrides"].values() for r in v]
    by_id = {r["id"]: r for r in all_src}
    for ctx_json, exp in expected.items():
        ctx = json.loads(ctx_json)
        got = store.retrieve_for_injection(user, ctx)
        parts = {
            "positives": "positives",
            "negatives": "negatives",
            "project_overrides": "projectOverrides",
        }
        for part, theirs in parts.items():
            assert [comparable(r.to_dict(), by_id) for r in getattr(got, part)] == [
                comparable(r, by_id) for r in exp["retrieval"][theirs]
            ], (ctx_json, part)
        assert got.diagnostics == exp["retrieval"]["diagnostics"], ctx_json
        assert build_prompt_block(got, ctx.get("project_id")) == exp["prompt_block"]
    # Imported ids are kept, so shadow links survive.
    listed = {r.id for r in store.list_preferences(user)}
    assert listed == set(by_id)
    # A second import changes nothing at all.
    before = user_dir_bytes(tmp_path / "mem" / user)
    assert store.import_prototype(user, PROTO / user / "preferences.json") == 0
    assert user_dir_bytes(tmp_path / "mem" / user) == before


def test_paused_user_stays_off(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "mem", derivation_version="1", clock=ManualClock())
    assert store.import_prototype("paused_user", PROTO / "paused_user" / "preferences.json") >= 1
    assert store.get_settings("paused_user").memory_enabled is False
    assert store.retrieve_for_injection("paused_user").positives == []
    assert store.list_preferences("paused_user")  # records are there, just not injected
    assert store.import_prototype("paused_user", PROTO / "paused_user" / "preferences.json") == 0


def test_later_signals_accumulate_on_imported_records(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "mem", derivation_version="1", clock=ManualClock())
    store.import_prototype("d", PROTO / "designer_fresh" / "preferences.json")
    before = {(r.preference_type, r.pattern, r.polarity): r for r in store.list_preferences("d")}
    key = next(
        k for k, r in before.items() if r.polarity_status == "stable" and r.scope == "global"
    )
    rec = store.ingest_signal(
        "d",
        {
            "signal_type": "explicit_tag",
            "pattern": key[1],
            "preference_type": key[0],
            "polarity": key[2],
            "scope": "global",
            "timestamp": "2026-02-01T00:00:00Z",
        },
    )
    assert rec is not None and rec.id == before[key].id
    assert rec.signal_strength == min(1.0, before[key].signal_strength + 0.15)
    assert (
        rec.accept_count + rec.reject_count
        == before[key].accept_count + before[key].reject_count + 1
    )


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.update(schema_version="2.0"), "schema_version"),
        (lambda d: d.update(memory_enabled="yes"), "memory_enabled"),
        (lambda d: d["global_preferences"][0].update(polarity="sideways"), "polarity"),
        (lambda d: d["global_preferences"][0].pop("pattern"), "pattern"),
        (lambda d: d["global_preferences"][0].update(signal_strength=1.5), "signal_strength"),
        (lambda d: d["project_overrides"].update({"../evil": []}), "project_overrides"),
        (lambda d: d["global_preferences"][-1].update(scope="project:x"), "scope"),
    ],
)
def test_malformed_file_imports_nothing(tmp_path: Path, mutate: Any, field: str) -> None:
    doc = json.loads((PROTO / "designer_fresh" / "preferences.json").read_text())
    mutate(doc)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    store = MemoryStore(tmp_path / "mem", derivation_version="1", clock=ManualClock())
    with pytest.raises(ValidationError) as info:
        store.import_prototype("u", bad)
    assert field in str(info.value)
    assert not (tmp_path / "mem" / "u").exists()


def test_not_json_imports_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    shutil.copy(PROTO / "designer_fresh" / "preferences.json", bad)
    bad.write_bytes(bad.read_bytes()[:-40])
    store = MemoryStore(tmp_path / "mem", derivation_version="1", clock=ManualClock())
    with pytest.raises(ValidationError):
        store.import_prototype("u", bad)
    assert not (tmp_path / "mem" / "u").exists()
