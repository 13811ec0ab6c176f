"""The evidence timeline of a pattern (engine/timeline.py; docs/daemon.md, the page): the
events of its bucket that are evidence about it, read from the log without deriving — the
same events as the own steps of ``explain``, with the way each one points."""

from __future__ import annotations

from pathlib import Path

import pytest

from creative_memory.app.service import MemoryService
from creative_memory.app.store import MemoryStore
from creative_memory.engine.derivation.registry import known_versions
from creative_memory.engine.errors import NotFound
from creative_memory.engine.events import DecayPassEvent, SignalEvent
from creative_memory.engine.explain import explain
from creative_memory.engine.timeline import timeline
from creative_memory.storage import FileStorage
from tests.test_derivation_v2 import Log

NEON = ("color", "neon_palette")
GRID = ("layout", "grid")


def history() -> Log:
    log = Log()
    log.signal("thumbs_down", "negative", [NEON, GRID], artifact="a1")
    log.signal("repeated_acceptance", "positive", [GRID], artifact="a2")
    log.compare([GRID], [NEON])  # neon on the rejected side
    log.compare([NEON], [GRID])  # ... on the chosen side
    log.compare([NEON, GRID], [NEON])  # on both
    log.compare([NEON, GRID], [], dims=["lay"])  # kept for layout types only: not about neon
    log.signal("explicit_tag", "negative", [NEON], artifact="a3", tag_text="too noisy")
    at = "2026-09-01T00:00:00.000Z"
    log.events.append(DecayPassEvent(seq=len(log.events) + 1, at=at, recorded_at=at))
    log.events.append(  # another bucket
        SignalEvent(
            seq=len(log.events) + 1, at=at, recorded_at=at, signal_type="thumbs_up",
            preference_type=NEON[0], pattern=NEON[1], polarity="positive",
            scope="project", project_id="p1", artifact_id="a4",
        )
    )  # fmt: skip
    return log


def test_the_events_about_the_pattern_and_which_way_each_points() -> None:
    t = timeline(history().events, *NEON)
    assert t.project_id is None
    assert [(e.kind, e.signal_type, e.polarity) for e in t.events] == [
        ("signal", "thumbs_down", "negative"),
        ("comparison", None, "negative"),
        ("comparison", None, "positive"),
        ("comparison", None, None),
        ("signal", "explicit_tag", "negative"),
    ]
    seqs = [e.seq for e in t.events]
    assert seqs == sorted(seqs)
    project = timeline(history().events, *NEON, "p1")
    assert [(e.signal_type, e.polarity) for e in project.events] == [("thumbs_up", "positive")]
    assert timeline(history().events, "color", "never_seen").events == []
    grid = timeline(history().events, *GRID)
    assert [(e.kind, e.polarity) for e in grid.events][-1] == ("comparison", "positive")


@pytest.mark.parametrize("version", known_versions())
def test_they_are_the_events_explain_steps_through(version: str) -> None:
    events = history().events
    own = {"signal", "comparison", "legacy_record"}
    steps = [s.seq for s in explain(events, version, *NEON).steps if s.kind in own]
    assert [e.seq for e in timeline(events, *NEON).events] == steps


def test_the_service_reads_the_log_and_not_the_derivation(tmp_path: Path) -> None:
    FileStorage(tmp_path).append("alice", history().events)
    service = MemoryService(MemoryStore(tmp_path))
    t = service.timeline("alice", *NEON)
    assert len(t.events) == 5
    first = t.events[0].seq
    assert [e.seq for e in service.timeline("alice", *NEON, at_seq=first).events] == [first]
    with pytest.raises(NotFound, match="nothing to show"):
        service.timeline("alice", "color", "neon_palete")
    with pytest.raises(NotFound, match="did you mean color/neon_palette"):
        service.timeline("alice", "colour", "neon_palette")


def test_a_forgotten_pattern_has_no_timeline_left(tmp_path: Path) -> None:
    """The decoded log the timeline reads is dropped when the pattern is forgotten (the
    history is an erasure listener): nothing erased is shown again."""
    FileStorage(tmp_path).append("alice", history().events)
    service = MemoryService(MemoryStore(tmp_path))
    assert len(service.timeline("alice", *NEON).events) == 5  # the log is now kept decoded
    assert service.forget("alice", *NEON).events_removed > 0
    with pytest.raises(NotFound):
        service.timeline("alice", *NEON)
    assert [e.seq for e in service.timeline("alice", *GRID).events]  # the rest stays
