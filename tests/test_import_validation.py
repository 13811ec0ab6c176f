"""An archive is validated whole before anything is written — its settings too — and a
reset works on a memory whose settings no longer load (docs/api.md, "MemoryStore.import_memory"
and "MemoryStore.reset_memory").

Every rule an import applies is one live ingestion applies too (the engine's validators),
so an export of any memory the store wrote imports back.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import pytest

from creative_memory import MemoryStore, ValidationError, adapter
from creative_memory.app.service import MemoryService
from creative_memory.engine.errors import StorageError
from creative_memory.engine.events import (
    CHAIN_GENESIS,
    ComparisonEvent,
    ComparisonSide,
    DecayPassEvent,
    Event,
    Feature,
    ProjectAnchorEvent,
    SignalEvent,
    rechain,
    sequenced,
)
from creative_memory.engine.portability.archive import encode_archive
from creative_memory.engine.settings import UserSettings, VersionChange
from tests.conftest import tag

if TYPE_CHECKING:
    from tests.backends import Backend

pytest_plugins = ["tests.pg_fixtures", "tests.backends"]

U = "alice"
AT = "2026-03-05T09:00:00.000Z"


def signal(**over: Any) -> SignalEvent:
    ev = SignalEvent(
        at=AT, recorded_at=AT, signal_type="explicit_tag", preference_type="color",
        pattern="red", polarity="positive", scope="global",
    )  # fmt: skip
    return msgspec.structs.replace(ev, **over)


def comparison(**over: Any) -> ComparisonEvent:
    ev = ComparisonEvent(
        at=AT, recorded_at=AT,
        chose=ComparisonSide(artifact_id="x", features=[Feature("color", "red")]),
        over=ComparisonSide(artifact_id="y", features=[]),
    )  # fmt: skip
    return msgspec.structs.replace(ev, **over)


def archive(events: list[Event], settings: UserSettings | None = None) -> bytes:
    """A well-formed archive (checksum and chain right) of ``events`` as they are."""
    return encode_archive(U, settings or UserSettings(), sequenced(events, 0, CHAIN_GENESIS))


def refused(store: MemoryStore, data: bytes, field: str, mode: str = "merge") -> str:
    """Importing ``data`` raises a ValidationError naming ``field`` and writes nothing."""
    before = (store.events(U), store._storage.read_settings(U), store._storage.user_files(U))
    with pytest.raises(ValidationError) as e:
        MemoryService(store).import_archive(U, data, mode)
    assert e.value.field == field, str(e.value)
    assert (store.events(U), store._storage.read_settings(U), store._storage.user_files(U)) == (
        before
    )
    return str(e.value)


# -- settings --------------------------------------------------------------------------------
BAD_SETTINGS: dict[str, tuple[UserSettings, str]] = {
    "unknown derivation version": (
        UserSettings(derivation_version="6"),
        "settings.derivation_version",
    ),
    "paused until no date": (
        UserSettings(paused=True, paused_until="not-a-date"),
        "settings.paused_until",
    ),
    "paused until, not normalised": (
        UserSettings(paused=True, paused_until="2030-01-01T00:00:00+05:00"),
        "settings.paused_until",
    ),
    "unsafe disabled project": (
        UserSettings(disabled_projects=["ok", "../../etc"]),
        "settings.disabled_projects[1]",
    ),
    "disabled project with a newline": (
        UserSettings(disabled_projects=["a b\n"]),
        "settings.disabled_projects[0]",
    ),
    "disabled project twice": (
        UserSettings(disabled_projects=["p", "p"]),
        "settings.disabled_projects[1]",
    ),
    "history: no date": (
        UserSettings(derivation_history=[VersionChange(at="zzz", version="2", previous="1")]),
        "settings.derivation_history[0].at",
    ),
    "history: unknown version": (
        UserSettings(derivation_history=[VersionChange(at=AT, version="42", previous="1")]),
        "settings.derivation_history[0].version",
    ),
    "history: unknown previous version": (
        UserSettings(derivation_history=[VersionChange(at=AT, version="2", previous="x")]),
        "settings.derivation_history[0].previous",
    ),
}


@pytest.mark.parametrize("mode", ["merge", "replace"])
@pytest.mark.parametrize("case", list(BAD_SETTINGS))
def test_an_archive_with_bad_settings_imports_nothing(
    backend: Backend, case: str, mode: str
) -> None:
    settings, field = BAD_SETTINGS[case]
    data = archive([signal()], settings)
    empty = backend.store()
    refused(empty, data, field, mode)  # into a new user (the settings would be written)
    assert not empty._storage.user_exists(U)
    store = backend.store()
    store.ingest_signal(U, tag("calm"))
    refused(store, data, field, mode)


@pytest.mark.parametrize(
    ("where", "field"),
    [
        (("settings",), "settings.evil"),
        (("settings", "derivation_history", 0), "settings.derivation_history[0].note"),
    ],
)
def test_an_unknown_setting_is_refused_not_dropped(
    store: MemoryStore, where: tuple[str | int, ...], field: str
) -> None:
    change = VersionChange(at=AT, version="2", previous="1")
    good = archive([signal()], UserSettings(derivation_version="2", derivation_history=[change]))
    doc = json.loads(good)
    target = doc
    for key in where:
        target = target[key]
    target[field.rsplit(".", 1)[1]] = 1  # the checksum covers the settings this version knows
    assert "not known" not in refused(store, json.dumps(doc).encode(), field)


def test_the_settings_a_store_writes_import_back(backend: Backend) -> None:
    store = backend.store()
    service = MemoryService(store)
    store.ingest_signal(U, tag("calm"))
    store.pause(U, "2030-01-01T00:00:00+05:00")
    store.set_project_disabled(U, "p1", True)
    store.set_project_disabled(U, "p2", True)
    service.set_derivation_version(U, "2")
    data, _ = service.export_archive(U)
    for user, mode in (("copy", "merge"), ("other", "replace")):
        assert service.import_archive(user, data, mode).events_added == 1
        assert store.get_settings(user) == store.get_settings(U)


# -- events ----------------------------------------------------------------------------------
def test_an_event_of_an_unknown_format_version_is_refused(store: MemoryStore) -> None:
    refused(store, archive([signal(), signal(v=99)]), "events[1].v")


@pytest.mark.parametrize("seq", [2**53, 2**63, 2**70])
def test_a_seq_the_store_cannot_hold_is_refused_on_every_backend(
    backend: Backend, seq: int
) -> None:
    store = backend.store()
    data = encode_archive(U, UserSettings(), rechain([signal(seq=1), signal(seq=seq)]))
    refused(store, data, "events[1].seq")
    # the largest one imports (on PostgreSQL too: within its bigint)
    ok = encode_archive(U, UserSettings(), rechain([signal(seq=1), signal(seq=2**53 - 1)]))
    assert MemoryService(store).import_archive(U, ok).events_added == 2


@pytest.mark.parametrize(
    ("event", "field"),
    [
        (signal(at="2026-03-05T10:00:00+05:00"), "events[0].at"),
        (signal(at="2026-03-05T09:00:00Z"), "events[0].at"),
        (signal(recorded_at="2026-03-05"), "events[0].recorded_at"),
        (signal(project_id="p1"), "events[0].project_id"),  # global, with a project
        (signal(scope="project"), "events[0].project_id"),  # project, without one
        (signal(scope="project", project_id="../x"), "events[0].project_id"),
        (signal(tag_text=""), "events[0].tag_text"),
        (comparison(project_id="zzz"), "events[0].project_id"),
        (comparison(scope="project"), "events[0].project_id"),
        (comparison(scope="project", project_id="../x"), "events[0].project_id"),
        (
            comparison(chose=ComparisonSide(features=[Feature("", "")])),
            "events[0].chose.features[0].preference_type",
        ),
        (
            comparison(over=ComparisonSide(features=[Feature("color", "")])),
            "events[0].over.features[0].pattern",
        ),
        (ProjectAnchorEvent(at=AT, recorded_at=AT, project_id="../x"), "events[0].project_id"),
        (DecayPassEvent(at="2026-03-05T09:00Z", recorded_at=AT), "events[0].at"),
    ],
)
def test_an_event_ingestion_would_not_store_is_refused(
    store: MemoryStore, event: Event, field: str
) -> None:
    refused(store, archive([event]), field)


def test_what_ingestion_stores_imports_back(backend: Backend) -> None:
    """Every kind of event, as the live paths store them — comparisons with a side that
    lists no features, refinements of any project text (the prototype logged those while
    memory was off) — survives export and import."""
    store = backend.store()
    store.ingest_signal(U, tag("calm", scope="project", project_id="p1", tag_text="love it"))
    adapter.on_pairwise_comparison(store, {
        "event": "pairwise_comparison", "user_id": U, "timestamp": "2026-03-05T10:00:00+05:00",
        "chose": {"artifact_id": "a", "artifact_meta": {"signals": []}},
        "over": {"artifact_id": "b", "artifact_meta": {"signals": []}},
        "dimensions": [""],
    })  # fmt: skip
    store.set_memory_enabled(U, False)
    adapter.on_artifact_edited_and_saved(store, {
        "event": "artifact_edited_and_saved", "user_id": U, "timestamp": AT,
        "artifact_id": "a", "project_id": "a/b", "diff": {"d": 1},
        "artifact_meta": {"signals": []},
    })  # fmt: skip
    store.reset_memory(U, "project:p1")  # leaves an anchor
    store.run_decay(U, "2027-06-01T00:00:00Z")
    data, _ = MemoryService(store).export_archive(U)
    kinds = {e.__struct_config__.tag for e in store.events(U)}
    assert kinds >= {"comparison", "refinement", "project_anchor"}
    service = MemoryService(backend.store())
    assert service.import_archive("copy", data).events_added == len(store.events(U))
    assert store.events("copy") == store.events(U)


def test_a_library_comparison_is_checked_like_an_imported_one(store: MemoryStore) -> None:
    for event, field in [
        (comparison(project_id="p1"), "project_id"),
        (comparison(at="2026-03-05T09:00:00Z"), "at"),
        (
            comparison(chose=ComparisonSide(features=[Feature("color", "")])),
            "chose.features[0].pattern",
        ),
    ]:
        with pytest.raises(ValidationError) as e:
            store.append_comparison(U, event)
        assert e.value.field == field
    assert store.events(U) == []
    assert store.append_comparison(U, comparison(scope="project", project_id="p1"))


# -- a reset on settings that no longer load -------------------------------------------------
def spoil_settings(backend: Backend, store: MemoryStore, how: str) -> None:
    """Settings as an older release's import or a hand edit could have left them."""
    if how == "unknown version":
        store._storage.write_settings(U, UserSettings(derivation_version="6"))
    elif backend.kind == "files":
        (Path(backend.root) / U / "settings.json").write_text('{"paused": "yes"}')
    else:
        import psycopg

        with psycopg.connect(backend.root, autocommit=True) as conn:
            conn.execute(
                'UPDATE cm_users SET settings = \'{"paused": "yes"}\'::jsonb WHERE user_id = %s',
                (U,),
            )


@pytest.mark.parametrize("how", ["unknown version", "unreadable"])
def test_a_full_reset_works_on_settings_that_no_longer_load(backend: Backend, how: str) -> None:
    store = backend.store()
    store.ingest_signals(U, [tag("calm"), tag("airy")])
    spoil_settings(backend, store, how)
    with pytest.raises((ValidationError, StorageError)):  # every read fails
        store.inspect(U)
    result = MemoryService(store).reset(U, confirm=True)
    assert (result.events_removed, result.events_remaining) == (2, 0)
    assert store.get_settings(U) == UserSettings()
    assert store.inspect(U)["event_count"] == 0
    assert backend.store().get_settings(U) == UserSettings()


@pytest.mark.parametrize(
    "erase",
    [
        lambda s: s.reset_memory(U, "global"),
        lambda s: s.reset_memory(U, "project:p1"),
        lambda s: s.forget(U, "layout", "calm"),
    ],
    ids=["reset global", "reset project", "forget"],
)
def test_a_partial_erasure_on_an_unknown_version_erases_nothing(
    backend: Backend, erase: Callable[[MemoryStore], object]
) -> None:
    store = backend.store()
    store.ingest_signals(U, [tag("calm"), tag("calm", scope="project", project_id="p1")])
    spoil_settings(backend, store, "unknown version")
    before = store.events(U)
    with pytest.raises(ValidationError) as e:
        erase(store)
    assert e.value.field == "derivation_version"
    assert store.events(U) == before


def test_an_unknown_top_level_key_is_refused_not_dropped(store: MemoryStore) -> None:
    """Neither the checksum nor the hash chain covers a key the archive format does not
    have: importing would drop it unread. The archive is refused, naming it."""
    doc = json.loads(archive([signal()]))
    doc["refinements"] = [{"diff": {"a": 1}}]
    message = refused(store, json.dumps(doc).encode(), "refinements")
    assert "unknown key" in message and "nothing is imported" in message
