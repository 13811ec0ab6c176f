"""A reset of one bucket erases every raw event that belongs to it — signals, comparisons,
legacy records and the project's refinement-log entries (its edit diffs) — and reports the
real count (docs/architecture.md, "Erasure")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from creative_memory import MemoryStore, adapter
from creative_memory.app.service import MemoryService
from creative_memory.engine.events import ProjectAnchorEvent, RefinementEvent
from tests.conftest import ManualClock

U = "alice"


def event(project: str | None, **over: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "user_id": U,
        "artifact_id": "a1",
        "session_id": "s1",
        "project_id": project,
        "timestamp": "2026-03-01T10:00:00Z",
        "artifact_meta": {"signals": [{"preference_type": "color", "pattern": "neon_palette"}]},
    }
    ev.update(over)
    return ev


def test_a_project_reset_erases_its_refinements_and_counts_them(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "mem", clock=ManualClock("2026-03-01T12:00:00Z"))
    adapter.on_thumbs_rated(store, event("landing", rating="down"))
    adapter.on_artifact_edited_and_saved(store, event("landing", diff={"to": "calm ink"}))
    adapter.on_thumbs_rated(store, event(None, rating="down"))
    adapter.on_artifact_edited_and_saved(store, event(None, diff={"to": "global edit"}))
    assert len(store.events(U)) == 6  # 2 project signals, 1 project refinement, 3 global

    result = MemoryService(store).reset(U, "project:landing", confirm=True)

    assert result.events_removed == 3
    left = store.events(U)
    assert result.events_remaining == len(left) == 4  # the anchor and the 3 global events
    assert next(e for e in left if isinstance(e, ProjectAnchorEvent)).project_id == "landing"
    refinements = [e for e in left if isinstance(e, RefinementEvent)]
    assert [r.project_id for r in refinements] == [None]
    assert "calm ink" not in str([r.diff for r in refinements])
    assert [r.project_id for r in store.refinement_log(U)] == [None]


def test_a_global_reset_keeps_the_projects(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "mem", clock=ManualClock("2026-03-01T12:00:00Z"))
    adapter.on_artifact_edited_and_saved(store, event("landing", diff={"to": "calm ink"}))
    adapter.on_artifact_edited_and_saved(store, event(None, diff={"to": "global edit"}))
    result = MemoryService(store).reset(U, "global", confirm=True)
    assert result.events_removed == 2  # the global signal and the global refinement
    assert [r.project_id for r in store.refinement_log(U)] == ["landing"]
    assert {r.scope for r in store.list_preferences(U)} == {"project:landing"}


def test_no_copy_of_memory_is_written_inside_the_store(tmp_path: Path) -> None:
    """An export (library, service, CLI) into the file store's directory is refused: the
    copy would outlive every later erasure, and a byte search of the store after a reset
    would still find what was erased (docs/storage.md, "Erasure")."""
    import pytest

    from creative_memory import ValidationError
    from tests.test_cli import Cli, one_line_error

    root = tmp_path / "mem"
    store = MemoryStore(root, clock=ManualClock())
    adapter.on_explicit_tag_applied(store, event(None, tag_text="not this"))
    service = MemoryService(store)
    # (over the log itself, an export would have replaced it with the archive)
    inside = [root / "x.json", root / U / "backup.json", root / U / "events.jsonl"]
    (root / "link").symlink_to(root / U)
    for path in [*inside, root / "link" / "x.json", tmp_path / "mem" / ".." / "mem" / "y.json"]:
        for export in (store.export_memory, service.export_to):
            with pytest.raises(ValidationError) as refused:
                export(U, path)
            assert refused.value.field == "path" and "outlive every later erasure" in str(
                refused.value
            )
    wrong: tuple[Path | str, ...] = (tmp_path, tmp_path / "missing" / "x.json", "")
    for bad in wrong:  # a ValidationError each, not IsADirectoryError
        for export in (store.export_memory, service.export_to):
            with pytest.raises(ValidationError):
                export(U, bad)
    store.export_memory(U, tmp_path / "outside.json")
    assert service.export_to(U, tmp_path / "outside2.json").events == 1
    cli = Cli(tmp_path)  # its memory is `root`: tmp_path / "mem"
    cli.overrides["MEMORY_STORAGE_ROOT"] = str(root)
    one_line_error(cli("export", str(root / U / "b.json")), 2, "inside the memory's own")
    assert sorted(p.name for p in (root / U).iterdir()) == [".lock", "events.jsonl"]
    assert service.reset(U, confirm=True).events_removed == 1
    assert not [p for p in root.rglob("*") if p.is_file() and b"neon_palette" in p.read_bytes()]
