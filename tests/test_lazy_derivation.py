"""Lazy on read (docs/performance.md, docs/storage.md): appends derive nothing beyond what
the call returns, appended events are folded from memory, write-back is deferred, and the
derived state does not depend on when derivation happened."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from creative_memory import MemoryStore, adapter
from creative_memory.app.derived import WRITE_BACK_EVENTS
from creative_memory.capture.layer import CaptureLayer
from creative_memory.engine.derivation.registry import DerivedState, known_versions
from creative_memory.storage import FileStorage
from tests.conftest import FIXTURES, ManualClock, tag

U = "lazy_user"
TYPES = ("layout", "color", "typography")
PATTERNS = ("airy", "dense", "neon", "calm")


class CountingStorage(FileStorage):
    """A file backend that counts reads of the log."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.reads = 0

    def read_events(self, *args: Any, **kwargs: Any) -> Any:
        self.reads += 1
        return super().read_events(*args, **kwargs)

    def read_after_cached(self, *args: Any, **kwargs: Any) -> Any:
        self.reads += 1
        return super().read_after_cached(*args, **kwargs)


def counting_store(root: Path, version: str, clock: ManualClock) -> tuple[MemoryStore, Any]:
    store = MemoryStore(root, derivation_version=version, clock=clock)
    storage = CountingStorage(root)
    store._storage = store._states.storage = storage
    return store, storage


def cache_files(root: Path, user: str = U) -> set[str]:
    d = root / user / "cache"
    return {p.name for p in d.iterdir()} if d.exists() else set()


def observe(store: MemoryStore, user: str = U) -> Any:
    prefs = [p.to_dict() for p in store.list_preferences(user)]
    r = store.retrieve_for_injection(user, {"project_id": "p1"})
    return {
        "prefs": prefs,
        "retrieval": [
            [x.to_dict() for x in r.positives],
            [x.to_dict() for x in r.negatives],
            [x.to_dict() for x in r.project_overrides],
            r.diagnostics,
        ],
    }


@pytest.mark.parametrize("version", known_versions())
def test_appended_events_are_folded_without_reading_them_back(tmp_path: Path, version: str) -> None:
    clock = ManualClock()
    store, storage = counting_store(tmp_path / "mem", version, clock)
    store.ingest_signal(U, tag("airy"))
    store.list_preferences(U)  # the store now holds the state up to the log's end
    reads = storage.reads
    for i in range(5):
        rec = store.ingest_signal(U, tag(PATTERNS[i % 4], TYPES[i % 3]))
        assert rec is not None
    store.list_preferences(U)
    # one read per call that must check the log for other writers' events (the list), but
    # no read-back of what the ingest calls themselves wrote
    assert storage.reads - reads == 1


@pytest.mark.parametrize("version", known_versions())
def test_another_writer_is_seen(tmp_path: Path, version: str) -> None:
    clock = ManualClock()
    root = tmp_path / "mem"
    a = MemoryStore(root, derivation_version=version, clock=clock)
    b = MemoryStore(root, derivation_version=version, clock=clock)
    a.ingest_signal(U, tag("airy"))
    a.list_preferences(U)
    b.ingest_signal(U, tag("neon", "color", "negative"))  # a does not know about it
    a.ingest_signal(U, tag("dense"))  # not contiguous with a's state: read from the log
    patterns = {p.pattern for p in a.list_preferences(U)}
    assert patterns == {"airy", "neon", "dense"}
    fresh = MemoryStore(root, derivation_version=version, clock=clock)
    assert observe(a) == observe(fresh)


@pytest.mark.parametrize("version", known_versions())
def test_capture_and_records_false_derive_nothing(
    tmp_path: Path, version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock("2026-03-01T10:00:00Z")  # the events below are dated then
    store = MemoryStore(tmp_path / "mem", derivation_version=version, clock=clock)
    store.ingest_signal(U, tag("seed"))
    store.list_preferences(U)
    materialized: list[int] = []
    real = type(store._memo[U].state).materialize

    def counting(self: DerivedState) -> None:
        materialized.append(1)
        real(self)

    monkeypatch.setattr(type(store._memo[U].state), "materialize", counting)
    cap = CaptureLayer(store)
    event = {
        "user_id": U,
        "artifact_id": "a1",
        "session_id": "s1",
        "project_id": None,
        "timestamp": "2026-03-01T10:00:00Z",
        "rating": "down",
        "artifact_meta": {"signals": [{"preference_type": "color", "pattern": "neon"}]},
    }
    assert cap.submit(dict(event, event="thumbs_rated"), clock.ms).accepted == 1
    out = adapter.on_thumbs_rated(store, dict(event, artifact_id="a2"), records=False)
    assert out == [None]
    assert store.ingest_signals(U, [tag("airy")], records=False) == [None]
    assert materialized == []  # no derivation on the write path
    recs = {p.pattern: p for p in store.list_preferences(U)}
    assert materialized  # the read derives
    assert {"seed", "neon", "airy"} <= set(recs)


def test_write_back_is_deferred_and_flushed(tmp_path: Path) -> None:
    clock = ManualClock()
    root = tmp_path / "mem"
    store = MemoryStore(root, derivation_version="1", clock=clock)
    store.ingest_signal(U, tag("airy"))
    store.list_preferences(U)  # the first read of a store writes back
    first = cache_files(root)
    assert len(first) == 1 and (root / U / "snapshot.json").exists()
    for i in range(3):
        store.ingest_signal(U, tag(f"p{i}"))
        store.list_preferences(U)
    assert cache_files(root) == first  # deferred
    snap = json.loads((root / U / "snapshot.json").read_bytes())
    assert {p["pattern"] for p in snap["preferences"]} == {"airy"}
    store.flush()
    assert len(cache_files(root)) == 2
    snap = json.loads((root / U / "snapshot.json").read_bytes())
    assert {p["pattern"] for p in snap["preferences"]} == {"airy", "p0", "p1", "p2"}
    # enough events past the last write-back: a read writes again
    store.ingest_signals(U, [tag(f"q{i % 7}") for i in range(WRITE_BACK_EVENTS)])
    store.list_preferences(U)
    assert len(cache_files(root)) == 3
    store.ingest_signal(U, tag("late"))
    store.close()
    assert len(cache_files(root)) == 4


@pytest.mark.parametrize("version", known_versions())
def test_a_cold_reader_after_a_crash_without_flush_gets_the_same_state(
    tmp_path: Path, version: str
) -> None:
    clock = ManualClock()
    root = tmp_path / "mem"
    store = MemoryStore(root, derivation_version=version, clock=clock)
    for i in range(12):
        store.ingest_signal(
            U, tag(PATTERNS[i % 4], TYPES[i % 3], "negative" if i % 5 else "positive")
        )
        store.list_preferences(U)
    # no flush, no close: the cache entry on disk is older than the log
    cold = MemoryStore(root, derivation_version=version, clock=clock)
    assert observe(cold) == observe(store)


# -- lazy and eager derivation give the same bytes -------------------------------------------
_signal = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(
            [
                "explicit_tag",
                "thumbs_up",
                "thumbs_down",
                "abandoned_generation",
                "repeated_acceptance",
                "revert_after_edit",
            ]
        ),
        "pattern": st.sampled_from(PATTERNS),
        "type": st.sampled_from(TYPES),
        "project": st.sampled_from([None, "p1"]),
        "artifact": st.integers(0, 6),
    }
)


def _history_signal(step: dict[str, Any], day: int) -> dict[str, Any]:
    polarity = "negative" if step["kind"] in ("thumbs_down", "abandoned_generation") else "positive"
    return {
        "signal_type": step["kind"],
        "pattern": step["pattern"],
        "preference_type": step["type"],
        "polarity": polarity,
        "tag_text": None,
        "scope": "project" if step["project"] else "global",
        "project_id": step["project"],
        "artifact_id": f"a{step['artifact']}",
        "session_id": "s",
        "timestamp": f"2026-01-{1 + day % 28:02d}T00:00:00.000Z",
    }


@pytest.mark.parametrize("version", known_versions())
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=st.lists(_signal, min_size=1, max_size=30), reads=st.sets(st.integers(0, 29)))
def test_lazy_and_eager_derivation_are_byte_identical(
    tmp_path_factory: pytest.TempPathFactory,
    version: str,
    steps: list[dict[str, Any]],
    reads: set[int],
) -> None:
    base = tmp_path_factory.mktemp("lazy")
    clock = ManualClock()
    eager = MemoryStore(base / "eager", derivation_version=version, clock=clock)
    lazy = MemoryStore(base / "lazy", derivation_version=version, clock=clock)
    for i, step in enumerate(steps):
        signal = _history_signal(step, i)
        eager.ingest_signal(U, signal)  # records back: derives now
        eager.list_preferences(U)
        lazy.ingest_signals(U, [signal], records=False)  # derives nothing
        if i in reads:
            lazy.retrieve_for_injection(U)
    assert observe(lazy) == observe(eager)
    assert lazy._memo[U].state.dump() == eager._memo[U].state.dump()
    cold = MemoryStore(base / "lazy", derivation_version=version, clock=clock)
    assert observe(cold) == observe(eager)


@pytest.mark.parametrize(
    "path", sorted((FIXTURES / "conformance").glob("*.json.gz"))[:68:4], ids=lambda p: p.name
)
def test_conformance_traces_lazy_equals_eager(tmp_path: Path, path: Path) -> None:
    """Every signal of a trace appended without records, then one read: the same records
    as the recorded trace's eager replay (which reads after each op)."""
    scenario = json.loads(gzip.decompress(path.read_bytes()))
    clock = ManualClock()
    eager = MemoryStore(tmp_path / "eager", derivation_version="1", clock=clock)
    lazy = MemoryStore(tmp_path / "lazy", derivation_version="1", clock=clock)
    users: set[str] = set()
    for op in scenario["ops"]:
        if "clock" in op:
            clock.set(op["clock"])
        if op["op"] != "ingest" or (op.get("expected") or {}).get("error"):
            continue
        try:
            eager.ingest_signal(op["user"], op["signal"])
        except ValueError:
            continue
        lazy.ingest_signals(op["user"], [op["signal"]], records=False)
        users.add(op["user"])
    for user in sorted(users):
        assert lazy.list_preferences(user) == eager.list_preferences(user)
