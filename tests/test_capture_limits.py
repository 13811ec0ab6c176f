"""What the capture layer holds is judged when it is captured (docs/capture.md, "Limits"):
an edit-save before it joins a coalescing window, a generation before it may be inferred
abandoned. One that delivery would refuse is ``rejected`` at once, naming the field — never
``accepted`` and then ``failed``, and never taking the valid saves of its window with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from creative_memory import MemoryStore
from creative_memory.capture.layer import CaptureLayer
from creative_memory.capture.wire import MAX_WIRE_DIFF_DEPTH
from creative_memory.engine.events import MAX_DIFF_DEPTH
from creative_memory.http import DaemonFiles
from tests.conftest import ManualClock
from tests.test_capture import T0, U, at, ev, refinements, signals
from tests.test_server_api import Api, InProcess

EDIT = "artifact_edited_and_saved"


@pytest.fixture
def mem(tmp_path: Path) -> MemoryStore:
    return MemoryStore(tmp_path / "mem", derivation_version="1", clock=lambda: T0)


def deep(n: int) -> Any:
    """A JSON value nested ``n`` levels deep (``[1]`` is 1)."""
    d: Any = 1
    for _ in range(n):
        d = [d]
    return d


BAD_SAVES: dict[str, dict[str, Any]] = {
    "artifact_id": {"artifact_id": 5},
    "session_id": {"session_id": 7},
    "user_id": {"user_id": "bob smith"},
    "diff": {"diff": deep(250)},
}


@pytest.mark.parametrize("field", list(BAD_SAVES))
def test_a_bad_save_is_rejected_up_front_and_the_window_s_valid_saves_are_delivered(
    mem: MemoryStore, field: str
) -> None:
    cap = CaptureLayer(mem)
    first = cap.submit(ev(EDIT, diff={"a": "b"}), at(0))
    bad = cap.submit(ev(EDIT, **BAD_SAVES[field]), at(5))
    assert [r.status for r in first.results] == ["accepted"]
    assert [r.status for r in bad.results] == ["rejected"]
    assert field in (bad.results[0].reason or "")
    done = cap.close()
    assert [(r.status, r.reason) for r in done.results] == [
        ("flushed", "1 save(s) coalesced into one signal")
    ]
    assert signals(mem) == [("manual_refinement", "p_a1")]
    assert [r.diff for r in refinements(mem)] == [{"a": "b"}]


def test_a_diff_that_is_not_json_is_rejected_up_front(mem: MemoryStore) -> None:
    cap = CaptureLayer(mem)
    cap.submit(ev(EDIT, diff={"a": "b"}), at(0))
    bad = cap.submit(ev(EDIT, diff={"k": object()}), at(1))
    assert [r.status for r in bad.results] == ["rejected"]
    assert "diff" in (bad.results[0].reason or "")
    assert cap.close().flushed == 1
    assert [r.diff for r in refinements(mem)] == [{"a": "b"}]


def test_saves_at_the_wire_s_depth_limit_merge_into_a_window_the_store_takes(
    mem: MemoryStore,
) -> None:
    assert MAX_WIRE_DIFF_DEPTH == MAX_DIFF_DEPTH - 2  # room for {"coalesced_saves", "diffs": […]}
    cap = CaptureLayer(mem)
    r = cap.submit_many(
        [ev(EDIT, diff=deep(MAX_WIRE_DIFF_DEPTH)), ev(EDIT, diff=deep(MAX_WIRE_DIFF_DEPTH))],
        at(0),
    )
    assert [x.status for x in r.results] == ["accepted", "coalesced"]
    one_deeper = cap.submit(ev(EDIT, diff=deep(MAX_WIRE_DIFF_DEPTH + 1)), at(1))
    assert [x.status for x in one_deeper.results] == ["rejected"]
    assert f"deeper than {MAX_WIRE_DIFF_DEPTH} levels" in (one_deeper.results[0].reason or "")
    done = cap.close()
    assert [x.status for x in done.results] == ["flushed"]
    (ref,) = refinements(mem)
    assert ref.diff["coalesced_saves"] == 2


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"user_id": "bob smith"}, "user_id"),
        ({"session_id": 7}, "session_id"),
        ({"project_id": 5}, "project_id"),
        ({"artifact_meta": {"signals": [{"preference_type": "c", "pattern": "a\nb"}]}}, "pattern"),
    ],
)
def test_a_generation_that_could_not_be_abandoned_is_rejected_when_it_starts(
    mem: MemoryStore, over: dict[str, Any], field: str
) -> None:
    cap = CaptureLayer(mem)
    r = cap.submit(ev("generation_started", **over), at(0))
    assert [x.status for x in r.results] == ["rejected"]
    assert field in (r.results[0].reason or "")
    assert cap.pending_generations(U, "s1") == []
    later = cap.submit(ev("generation_started", "a2"), at(1))
    assert [x.status for x in later.results] == ["accepted"]  # nothing inferred, nothing failed
    assert signals(mem) == []


def test_the_daemon_answers_rejected_naming_the_field_for_a_save_it_cannot_hold(
    tmp_path: Path, clock: ManualClock
) -> None:
    root = tmp_path / "mem"
    clock.set("2026-03-01T10:00:00Z")
    store = MemoryStore(root, derivation_version="1", clock=clock)
    d = InProcess(root, store)
    try:
        api = Api(d, DaemonFiles(root).token_for("default"))
        base = {**ev(EDIT), "user_id": "default", "timestamp": "2026-03-01T10:00:00Z"}
        batch = [
            {**base, "diff": {"ok": 1}},
            {**base, "artifact_id": 5},
            {**base, "session_id": 7},
        ]  # (a body nested deeper than 64 levels is refused whole: no deep diff here)
        body = api.post("/api/v1/events", json=batch).json()
        statuses = [(x["status"], x["reason"]) for x in body["results"]]
        assert [s for s, _ in statuses] == ["accepted", "rejected", "rejected"]
        for (_, reason), name in zip(statuses[1:], ("artifact_id", "session_id"), strict=True):
            assert name in reason
        assert (body["accepted"], body["rejected"], body["failed"]) == (1, 2, 0)
    finally:
        d.close()  # delivers the pending window
    store.close()
    assert [e.diff for e in store.events("default") if hasattr(e, "diff")] == [{"ok": 1}]
