"""The pure comparison behind a derivation preview (engine/preview.py, docs/engine.md)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from creative_memory.engine.derivation.registry import derive
from creative_memory.engine.events import CHAIN_GENESIS, build_signal_event, sequenced
from creative_memory.engine.models import Preference, RetrievalResult
from creative_memory.engine.preview import _keyed, compare, diff_records, injected
from creative_memory.engine.prompt import build_generation_block
from creative_memory.engine.retrieval import retrieve
from creative_memory.engine.timeutil import parse_ts
from tests.test_time_travel import T0, signal


def history() -> list[Any]:
    sigs = [
        *[signal("neon_palette", "negative", artifact=f"n{i}") for i in range(3)],
        *[signal("airy_spacing", "positive", "layout", artifact=f"a{i}") for i in range(2)],
        signal("serif_body", "positive", "typography", signal_type="thumbs_up"),
    ]
    now = parse_ts(T0)
    events = [build_signal_event(s, now, T0) for s in sigs]
    return sequenced(events, 1, CHAIN_GENESIS)


def side(version: str) -> tuple[list[Preference], RetrievalResult, str]:
    state = derive(history(), version)
    state.materialize()
    records = [state.export_record(r) for r in state.all_records()]
    projects = {pid: b.records for pid, b in state.projects.items()}
    res = retrieve(state.global_records, projects, None, None, ignore_global_for=[])
    ex = state.export_record
    result = RetrievalResult(
        positives=[ex(r) for r in res.positives],
        negatives=[ex(r) for r in res.negatives],
        project_overrides=[ex(r) for r in res.project_overrides],
        diagnostics=res.diagnostics,
    )
    return records, result, build_generation_block(result)


@pytest.mark.parametrize("version", ["1", "2", "3"])
def test_a_version_against_itself_changes_nothing(version: str) -> None:
    records, result, block = side(version)
    change = compare(records, records, result, result, block, block)
    assert change.records == [] and change.injection == []
    assert change.unchanged == len(records) > 0
    assert not change.block_changed


def test_version_1_against_3_accounts_for_every_record() -> None:
    r1, res1, b1 = side("1")
    r3, res3, b3 = side("3")
    change = compare(r1, r3, res1, res3, b1, b3)
    keys = _keyed(r1).keys() | _keyed(r3).keys()
    flips = sum(
        c.before is not None and c.after is not None and c.before.polarity != c.after.polarity
        for c in change.records
    )
    assert len(change.records) + change.unchanged + flips == len(keys)
    for c in change.records:
        assert (c.before is None) == (c.change == "added")
        assert (c.after is None) == (c.change == "removed")
        if c.change == "changed":
            assert c.fields and all(getattr(c.before, f) != getattr(c.after, f) for f in c.fields)
    ins = {(i.pattern, i.change) for i in change.injection}
    old = {r.pattern for r in injected(res1)}
    new = {r.pattern for r in injected(res3)}
    assert {p for p, c in ins if c == "in"} == new - old
    assert {p for p, c in ins if c == "out"} == old - new
    assert all(i.reasons for i in change.injection)
    assert change.block_changed == (b1 != b3)
    msgspec.json.encode(change)  # JSON-ready as it is


def test_added_removed_and_changed_records() -> None:
    records, _, _ = side("1")
    first, *rest = records
    weaker = msgspec.structs.replace(rest[0], signal_strength=rest[0].signal_strength / 2)
    changes, same = diff_records(records, [weaker, *rest[1:]])
    kinds = {(c.pattern, c.change, tuple(c.fields)) for c in changes}
    assert (first.pattern, "removed", ()) in kinds
    assert (rest[0].pattern, "changed", ("signal_strength",)) in kinds
    assert same == len(rest) - 1
    changes, _ = diff_records([], records)
    assert [c.change for c in changes] == ["added"] * len(records)


def test_a_reason_names_the_threshold_when_a_record_is_too_weak() -> None:
    records, result, block = side("1")
    weak = [msgspec.structs.replace(r, signal_strength=0.1) for r in records]
    change = compare(records, weak, result, RetrievalResult(), block, "")
    outs = [i for i in change.injection if i.change == "out"]
    assert outs and all("below the injection threshold" in i.reasons[0] for i in outs)


def test_a_polarity_flip_is_one_change() -> None:
    records, _, _ = side("1")
    rec = records[0]
    flipped = msgspec.structs.replace(
        rec, polarity="negative" if rec.polarity == "positive" else "positive"
    )
    changes, same = diff_records(records, [flipped, *records[1:]])
    assert len(changes) == 1 and changes[0].change == "changed"
    assert "polarity" in changes[0].fields and same == len(records) - 1
