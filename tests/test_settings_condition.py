"""Appends decided on the user's settings land only while those settings hold
(docs/storage.md, "Settings an append depends on").

PostgreSQL remembers the settings it last read or wrote and checks them inside the append
statement itself, so an ingest costs one round trip; another replica's pause, switch-off,
resume or version switch must still be obeyed by the next append of this one. The file
store reads the settings each time (a ``stat``) and takes no condition.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from creative_memory import MemoryStore
from creative_memory.app.service import MemoryService
from creative_memory.engine.events import (
    ComparisonEvent,
    ComparisonSide,
    Feature,
    SignalEvent,
    build_signal_event,
)
from creative_memory.storage import FileStorage, SettingsChanged, SettingsSeen, UserSettings
from creative_memory.storage.postgres import PostgresStorage

pytest_plugins = ["tests.pg_fixtures"]

U = "alice"


def tag(pattern: str, polarity: str = "positive") -> dict[str, Any]:
    return {
        "signal_type": "explicit_tag",
        "pattern": pattern,
        "preference_type": "color",
        "polarity": polarity,
        "scope": "global",
        "artifact_id": f"art-{pattern}",
    }


def raw_event() -> SignalEvent:
    return build_signal_event(tag("raw"), 1_767_225_600_000, "2026-01-01T00:00:00.000Z")


def comparison() -> ComparisonEvent:
    at = "2026-01-01T00:00:00.000Z"
    side = [ComparisonSide(features=[Feature("color", p)]) for p in ("warm", "neon")]
    return ComparisonEvent(at=at, recorded_at=at, chose=side[0], over=side[1])


def patterns(store: MemoryStore) -> list[str]:
    return [e.pattern for e in store.events(U) if isinstance(e, SignalEvent)]


@pytest.fixture
def replicas(pg_url: str) -> Iterator[tuple[MemoryStore, MemoryStore]]:
    """Two stores on one database, as two daemon replicas."""
    a, b = MemoryStore(pg_url, derivation_version="1"), MemoryStore(pg_url, derivation_version="1")
    try:
        yield a, b
    finally:
        a.close()
        b.close()


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Every statement sent, by its first words."""
    seen: Counter[str] = Counter()
    real = psycopg.Connection.execute

    def execute(self: Any, query: Any, *args: Any, **kw: Any) -> Any:
        seen[" ".join(str(query).split()[:2])] += 1
        return real(self, query, *args, **kw)

    monkeypatch.setattr(psycopg.Connection, "execute", execute)
    return seen


def test_an_ingest_after_the_first_is_one_statement(
    replicas: tuple[MemoryStore, MemoryStore], statements: Counter[str]
) -> None:
    a, _ = replicas
    a.ingest_signal(U, tag("first"))
    a.ingest_signal(U, tag("warm"))
    statements.clear()
    for i in range(5):
        a.ingest_signals(U, [tag(f"p{i}")], records=False)
    assert sum(statements.values()) == 5, statements  # the append alone: settings go with it
    assert patterns(a) == ["first", "warm", "p0", "p1", "p2", "p3", "p4"]


def test_a_pause_on_another_replica_stops_the_next_append(
    replicas: tuple[MemoryStore, MemoryStore],
) -> None:
    a, b = replicas
    assert a.ingest_signal(U, tag("before")) is not None  # a remembers: not paused
    b.pause(U)
    assert a.ingest_signal(U, tag("during")) is None
    assert a.append_comparison(U, comparison()) is False
    assert a.log_refinement(U, artifact_id="x").id == "ref_unsaved"
    b.resume(U)
    assert a.ingest_signal(U, tag("after")) is not None  # a remembered "paused": read again
    assert a.append_comparison(U, comparison()) is True
    assert patterns(b) == ["before", "after"]
    assert [r.artifact_id for r in a.refinement_log(U)] == []
    assert sum(isinstance(e, ComparisonEvent) for e in b.events(U)) == 1


def test_memory_switched_off_elsewhere_keeps_only_the_refinement(
    replicas: tuple[MemoryStore, MemoryStore],
) -> None:
    a, b = replicas
    a.ingest_signal(U, tag("on"))
    b.set_memory_enabled(U, False)
    out = a.ingest_signals(
        U, [tag("off")], refinement={"artifact_id": "art-off", "diff": {"color": "red"}}
    )
    assert out == [None]
    assert patterns(b) == ["on"]
    assert [r.artifact_id for r in b.refinement_log(U)] == ["art-off"]
    b.set_memory_enabled(U, True)
    assert a.ingest_signal(U, tag("on-again")) is not None
    assert patterns(b) == ["on", "on-again"]


def test_settings_written_before_the_log_exists_are_checked(
    replicas: tuple[MemoryStore, MemoryStore],
) -> None:
    a, b = replicas
    assert a.get_settings(U).paused is False  # a remembers "no settings"
    b.pause(U)  # settings, and still no log
    assert a.ingest_signal(U, tag("x")) is None
    assert patterns(b) == []


def test_a_version_switch_elsewhere_is_followed(
    replicas: tuple[MemoryStore, MemoryStore],
) -> None:
    a, b = replicas
    a.ingest_signal(U, tag("one"))
    MemoryService(b).set_derivation_version(U, "3")
    rec = a.ingest_signal(U, tag("two"))
    assert rec is not None
    assert a._version_of(U) == "3"
    assert patterns(a) == ["one", "two"]


def test_the_condition_is_checked_in_the_statement(pg_url: str) -> None:
    st = PostgresStorage(pg_url)
    other = PostgresStorage(pg_url)
    try:
        other.write_settings(U, UserSettings(paused=False))
        seen = st.recent_settings(U)  # read now ...
        assert seen.fresh and seen.token is not None and seen.settings == UserSettings()
        again = st.recent_settings(U)  # ... then remembered: no round trip
        assert not again.fresh and again.token == seen.token
        ev = raw_event()
        st.append_positioned(U, [ev], if_settings=seen)  # unchanged: appended
        other.write_settings(U, UserSettings(paused=True))
        with pytest.raises(SettingsChanged) as moved:
            st.append_positioned(U, [ev], if_settings=seen)
        assert moved.value.now.fresh and moved.value.now.settings == UserSettings(paused=True)
        assert st.event_count(U) == 1  # nothing written
        st.append_positioned(U, [ev], if_settings=moved.value.now)  # on what it read: fine
        assert st.event_count(U) == 2
        other.write_settings(U, UserSettings(paused=True))  # the same settings written again
        st.append_positioned(U, [ev], if_settings=moved.value.now)
        assert st.event_count(U) == 3
    finally:
        st.close()
        other.close()


def test_the_file_store_reads_settings_now_and_takes_no_token(tmp_path: Path) -> None:
    st = FileStorage(tmp_path)
    seen = st.recent_settings(U)
    assert seen == SettingsSeen(None) and seen.fresh and seen.token is None
    ev = raw_event()
    st.append_positioned(U, [ev], if_settings=seen)
    with pytest.raises(ValueError, match="if_settings"):
        st.append_positioned(U, [ev], if_settings=SettingsSeen(None, token="x"))
    assert st.event_count(U) == 1
