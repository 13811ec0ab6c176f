"""Forgetting a pattern erases the refinement-log entries *of that bucket* whose diff names
it as a whole word — not every entry of every project that contains its letters
(docs/storage.md, "Erasure"). The same rule holds for the log and for what a capture layer
in the erasing process still holds."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from creative_memory import CaptureLayer, MemoryStore
from creative_memory.engine.erasure import diff_mentions, forget_filter, names_pattern
from creative_memory.engine.events import (
    ComparisonEvent,
    ComparisonSide,
    Event,
    Feature,
    RefinementEvent,
    SignalEvent,
)
from tests.conftest import ManualClock

if TYPE_CHECKING:
    from tests.backends import Backend

pytest_plugins = ["tests.pg_fixtures", "tests.backends"]

U = "u"
AT = "2026-01-01T00:00:00.000Z"


def test_forgetting_a_pattern_keeps_other_buckets_and_other_words(backend: Backend) -> None:
    """The reviewer's repro: ``red`` in p1 took "reduced padding" (global) and "credits
    footer moved" (p2) with it."""
    store = backend.store()
    store.ingest_signal(U, {"signal_type": "explicit_tag", "preference_type": "color",
                            "pattern": "red", "polarity": "negative", "tag_text": "too noisy",
                            "scope": "project", "project_id": "p1"})  # fmt: skip
    store.log_refinement(U, artifact_id="g1", diff="reduced padding on the hero")
    store.log_refinement(U, artifact_id="g2", diff="red accents removed")  # global: kept
    store.log_refinement(U, artifact_id="q1", project_id="p2", diff="credits footer moved")
    store.log_refinement(U, artifact_id="q2", project_id="p1", diff="removed red")
    store.log_refinement(U, artifact_id="q3", project_id="p1", diff={"color": {"from": "red"}})
    store.log_refinement(U, artifact_id="q4", project_id="p1", diff="bored with it")
    assert store.forget(U, "color", "red", project_id="p1") == 3  # the signal, two diffs
    assert [r.diff for r in store.refinement_log(U)] == [
        "reduced padding on the hero",
        "red accents removed",
        "credits footer moved",
        "bored with it",
    ]
    store.forget(U, "color", "red")  # the global bucket now
    assert "red accents removed" not in [r.diff for r in store.refinement_log(U)]


@pytest.mark.parametrize(
    ("text", "pattern", "named"),
    [
        ("removed red", "red", True),
        ("red", "red", True),
        ("red_button", "red", True),  # "_" is not a letter: red is named
        ("#red;", "red", True),
        ("(red)", "red", True),
        ("reduced", "red", False),
        ("credits", "red", False),
        ("bored", "red", False),
        ("Red", "red", False),  # exact, as patterns are
        ("redred", "red", False),
        ("red2", "red", False),
        ("rouge rot красный red", "red", True),
        ("bg#ff0000", "#ff0000", True),  # a pattern starting with a symbol: no left edge
        ("#ff00001", "#ff0000", False),
        ("airy_spacing everywhere", "airy_spacing", True),
        ("too-tight", "tight", True),
        ("tightly", "tight", False),
        ("café", "caf", False),
        ("naïve red", "naïve", True),
    ],
)
def test_what_names_a_pattern(text: str, pattern: str, named: bool) -> None:
    assert names_pattern(text, pattern) is named
    assert diff_mentions({"k": [text]}, pattern) is named
    assert diff_mentions({text: 1}, pattern) is named  # keys are text too


EVENTS: list[Event] = [
    SignalEvent(seq=1, at=AT, recorded_at=AT, signal_type="explicit_tag",
                preference_type="color", pattern="red", polarity="positive",
                scope="project", project_id="p1"),
    SignalEvent(seq=2, at=AT, recorded_at=AT, signal_type="explicit_tag",
                preference_type="color", pattern="red", polarity="positive", scope="global"),
    SignalEvent(seq=3, at=AT, recorded_at=AT, signal_type="explicit_tag",
                preference_type="tone", pattern="red", polarity="positive",
                scope="project", project_id="p1"),
    RefinementEvent(seq=4, at=AT, recorded_at=AT, project_id="p1", diff="removed red"),
    RefinementEvent(seq=5, at=AT, recorded_at=AT, project_id="p1", diff="reduced"),
    RefinementEvent(seq=6, at=AT, recorded_at=AT, project_id="p2", diff="removed red"),
    RefinementEvent(seq=7, at=AT, recorded_at=AT, project_id=None, diff={"a": ["x red y"]}),
    RefinementEvent(seq=8, at=AT, recorded_at=AT, project_id="", diff="red"),
    ComparisonEvent(seq=9, at=AT, recorded_at=AT, scope="project", project_id="p1",
                    chose=ComparisonSide(features=[Feature("color", "red"),
                                                   Feature("color", "blue")]),
                    over=ComparisonSide(features=[Feature("color", "red")])),
    ComparisonEvent(seq=10, at=AT, recorded_at=AT,
                    chose=ComparisonSide(features=[Feature("color", "red")]),
                    over=ComparisonSide(features=[])),
]  # fmt: skip


@pytest.mark.parametrize(
    ("project", "pattern", "kept"),
    [
        (None, "red", [1, 3, 4, 5, 6, 9]),
        ("p1", "red", [2, 3, 5, 6, 7, 8, 9, 10]),
        ("p2", "red", [1, 2, 3, 4, 5, 7, 8, 9, 10]),
        ("p1", "blue", [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]),
        (None, "removed red", [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]),
    ],
)
def test_the_log_filter_of_a_forget(project: str | None, pattern: str, kept: list[int]) -> None:
    """Signals, legacy records and comparison features of the pattern in the bucket, and
    the bucket's refinements whose diff names it (global: no project, or ``""``)."""
    out = [e for e in (forget_filter(ev, "color", pattern, project) for ev in EVENTS) if e]
    assert [e.seq for e in out] == kept
    comparison = next(e for e in out if e.seq == 9)
    assert isinstance(comparison, ComparisonEvent)
    chose = [f.pattern for f in comparison.chose.features]
    over = [f.pattern for f in comparison.over.features]
    expected: dict[tuple[str | None, str], tuple[list[str], list[str]]] = {
        ("p1", "red"): (["blue"], []),
        ("p1", "blue"): (["red"], ["red"]),
    }
    assert (chose, over) == expected.get((project, pattern), (["red", "blue"], ["red"]))


def test_a_pending_edit_of_another_bucket_keeps_its_diff(tmp_path: Any) -> None:
    clock = ManualClock("2026-03-01T10:00:00Z")
    store = MemoryStore(tmp_path / "mem", clock=clock)
    layer = CaptureLayer(store)

    def edit(art: str, project: str | None, diff: str) -> dict[str, Any]:
        return {"event": "artifact_edited_and_saved", "user_id": U, "artifact_id": art,
                "session_id": "s", "project_id": project, "timestamp": "2026-03-01T10:00:00Z",
                "diff": diff, "artifact_meta": {"signals": []}}  # fmt: skip

    layer.submit_many(
        [edit("a1", "p1", "removed red"), edit("a2", "p2", "removed red"),
         edit("a3", "p1", "reduced padding")],
        clock.ms,
    )  # fmt: skip
    store.forget(U, "color", "red", project_id="p1")
    layer.close()
    assert [(r.project_id, r.diff) for r in store.refinement_log(U)] == [
        ("p2", "removed red"),
        ("p1", "reduced padding"),
    ]
