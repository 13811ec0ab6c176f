"""Several settings changed at once (``MemoryService.change_settings``, ``POST
/api/v1/settings``; app/settings_change.py): every key is judged before anything is
written, each error names the key the caller sent, and the change is one settings write —
so a change that fails writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from creative_memory import MemoryStore, ValidationError
from creative_memory.app.service import MemoryService, SettingsChange
from creative_memory.engine.timeutil import format_ts, parse_ts
from tests.conftest import tag

U = "alice"
NOW = parse_ts("2026-03-01T12:00:00Z")


class SteppingClock:
    """A clock that moves an hour on every reading once ``step`` is set: whatever checks
    "in the future" twice, a moment apart, sees two different answers."""

    def __init__(self) -> None:
        self.ms = NOW
        self.step = False

    def __call__(self) -> int:
        now = self.ms
        if self.step:
            self.ms += 3_600_000
        return now


def state(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_a_pause_end_is_judged_once_so_the_change_lands_whole(tmp_path: Path) -> None:
    """A ``paused_until`` a minute ahead is in the future when the change is judged; the
    change is then written as one — memory off *and* paused — not judged again a moment
    later with memory already switched off (the bug: ``until`` refused after
    ``memory_enabled`` was written)."""
    clock = SteppingClock()
    store = MemoryStore(tmp_path / "mem", clock=clock)
    store.ingest_signal(U, tag("airy", ts="2026-03-01T10:00:00Z"))
    service = MemoryService(store)
    until = format_ts(NOW + 60_000)
    clock.step = True
    try:
        service.change_settings(
            U, SettingsChange(memory_enabled=False, diagnostics_feed=True, paused_until=until)
        )
    except ValidationError as exc:  # all or nothing: refused means nothing changed
        assert exc.field == "paused_until", exc
        assert store.get_settings(U).memory_enabled is True
        pytest.fail(f"a pause end judged in the future was refused: {exc}")
    s = store.get_settings(U)
    assert (s.memory_enabled, s.diagnostics_feed, s.paused, s.paused_until) == (
        False, True, True, until,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"paused_until": "2001-01-01T00:00:00Z"}, "paused_until"),  # in the past
        ({"paused_until": "tomorrow"}, "paused_until"),
        ({"paused_until": 7}, "paused_until"),
        ({"paused": False, "paused_until": "2030-01-01"}, "paused_until"),
        ({"project_ignore_global": {"ok": True, "a b": True}}, "project_ignore_global.a b"),
        ({"project_ignore_global": {"ok": "yes"}}, "project_ignore_global.ok"),
        ({"project_ignore_global": ["ok"]}, "project_ignore_global"),
        ({"paused": "yes"}, "paused"),
        ({"diagnostics_feed": 1}, "diagnostics_feed"),
    ],
)
def test_one_bad_key_writes_nothing(tmp_path: Path, change: dict[str, object], field: str) -> None:
    store = MemoryStore(tmp_path / "mem", clock=lambda: NOW)
    store.ingest_signal(U, tag("airy", ts="2026-03-01T10:00:00Z"))
    before = state(tmp_path / "mem")
    full = {"memory_enabled": False, "diagnostics_feed": True, **change}
    with pytest.raises(ValidationError) as ei:
        MemoryService(store).change_settings(U, SettingsChange(**full))  # type: ignore[arg-type]
    assert ei.value.field == field
    assert state(tmp_path / "mem") == before


def test_a_change_applies_every_key_in_one_write(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "mem", clock=lambda: NOW)
    service = MemoryService(store)
    service.change_settings(U, SettingsChange(project_ignore_global={"a": True, "b": True}))
    until = "2026-04-01T00:00:00.000Z"
    writes: list[object] = []
    update = store._update_settings

    def counted(user_id: str, change: object) -> None:
        writes.append(change)
        update(user_id, change)  # type: ignore[arg-type]

    store._update_settings = counted  # type: ignore[method-assign]
    view = service.change_settings(
        U,
        SettingsChange(
            memory_enabled=False,
            paused_until=until,
            project_ignore_global={"a": False, "c": True},
            diagnostics_feed=True,
        ),
    )
    assert len(writes) == 1
    s = store.get_settings(U)
    assert s.disabled_projects == ["b", "c"]
    assert (s.memory_enabled, s.paused, s.paused_until, s.diagnostics_feed) == (
        False, True, until, True,
    )  # fmt: skip
    assert view.paused_until == until
    # resuming clears the end; an empty change writes nothing at all
    service.change_settings(U, SettingsChange(paused=False))
    assert (store.get_settings(U).paused, store.get_settings(U).paused_until) == (False, None)
    writes.clear()
    service.change_settings(U, SettingsChange())
    service.change_settings(U, SettingsChange(paused_until=None, project_ignore_global={}))
    assert writes == []


def test_an_empty_change_for_a_new_user_creates_nothing(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "mem", clock=lambda: NOW)
    MemoryService(store).change_settings("newbie", SettingsChange())
    assert not (tmp_path / "mem" / "newbie").exists()
