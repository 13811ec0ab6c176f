"""``inspect`` reports how the derived state is kept up to date: lazily on read, or by the
daemon's background worker with its queue and last derivation (docs/daemon.md,
"Background derivation")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from creative_memory import MemoryStore
from creative_memory.app.service import MemoryService
from creative_memory.app.worker import DerivationWorker
from tests.conftest import ManualClock
from tests.test_time_travel import signal

SCHEMA = Path(__file__).resolve().parents[1] / "docs" / "inspect.schema.json"


def validate(doc: object) -> None:
    jsonschema_rs = pytest.importorskip("jsonschema_rs")
    jsonschema_rs.validator_for(json.loads(SCHEMA.read_text())).validate(doc)


def test_without_a_worker_reads_derive_lazily(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "m")
    store.ingest_signal("u", signal("teal", "positive"))
    doc = MemoryService(store).inspect("u")
    assert doc["derivation"] == {
        "user_id": "u",
        "mode": "lazy",
        "queued": False,
        "pending": 0,
        "derivations": 0,
        "last_derived_at": None,
        "last_duration_ms": None,
        "last_error": None,
    }
    validate(json.loads(json.dumps(doc)))


def test_with_a_worker_inspect_shows_its_queue_and_last_derivation(tmp_path: Path) -> None:
    clock = ManualClock("2026-03-01T10:00:00Z")
    store = MemoryStore(tmp_path / "m", clock=clock)
    worker = DerivationWorker(store, start=False)  # not started: the batch stays queued
    service = MemoryService(store, worker)
    try:
        store.ingest_signals("u", [signal("teal", "positive")], records=False)
        assert worker.notify("u")
        queued = service.inspect("u")["derivation"]
        assert queued["mode"] == "background"
        assert queued["queued"] is True and queued["pending"] == 1
        assert queued["derivations"] == 0
    finally:
        worker.close(5, drain=False)
    started = DerivationWorker(store)
    service = MemoryService(store, started)
    try:
        store.ingest_signals("u", [signal("grey", "negative", artifact="b")], records=False)
        started.notify("u")
        assert started.wait_idle(30)
        done = service.inspect("u")
        assert done["derivation"]["queued"] is False and done["derivation"]["pending"] == 0
        assert done["derivation"]["derivations"] == 1
        assert done["derivation"]["last_derived_at"] == "2026-03-01T10:00:00.000Z"
        validate(json.loads(json.dumps(done)))
        # a point in the past has no derivation status: it is derived from the log prefix
        assert "derivation" not in service.inspect("u", at_seq=1)
    finally:
        started.close(5)


@pytest.mark.parametrize("mode", ["lazy", "background"])
def test_the_daemon_serves_the_same_status_in_its_memory_view(tmp_path: Path, mode: str) -> None:
    from creative_memory.http import daemon_of
    from tests.test_worker import _event, _serve

    app, client, token = _serve(tmp_path / mode, mode)
    auth = {"Authorization": f"Bearer {token}"}
    try:
        r = client.post("/api/v1/events", json=[_event(1, "calm")], headers=auth)
        assert r.status_code == 200 and r.json()["accepted"] == 1
        worker = daemon_of(app).worker
        if worker is not None:
            assert worker.wait_idle(30)
        status = client.get("/api/v1/memory", headers=auth).json()["derivation"]
        assert status["mode"] == mode
        assert status["derivations"] == (1 if mode == "background" else 0)
    finally:
        client.__exit__(None, None, None)
