"""Forgotten means forgotten everywhere (docs/architecture.md, "Erasure"): a forget or a reset
through any surface — library, CLI, HTTP — purges what the capture layer still holds (pending
edit-saves, generations that may later be inferred abandoned), so nothing erased comes back
into the log, the derived records, the cache, the database or a log line."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import MethodType
from typing import Any
from urllib.parse import unquote

import pytest

from creative_memory import CaptureLayer, MemoryStore
from creative_memory.app.service import MemoryService
from creative_memory.http.auth import DaemonFiles
from creative_memory.http.jsonlog import JsonFormatter
from tests.conftest import ManualClock

pytest_plugins = ["tests.pg_fixtures"]

USER = "default"
GONE = "neon_palette"
NOW = "2026-03-01T10:00:00Z"


def wire(kind: str, art: str, *patterns: str, **over: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "event": kind,
        "user_id": USER,
        "artifact_id": art,
        "session_id": "s1",
        "project_id": None,
        "timestamp": NOW,
        "artifact_meta": {
            "signals": [{"preference_type": "color", "pattern": p} for p in patterns]
        },
    }
    ev.update(over)
    return ev


#: A thumbs-down (delivered now), a pending edit-save naming the pattern and another one
#: (its diff names it too), and a pending generation that a later start would abandon.
SEQUENCE = [
    wire("thumbs_rated", "a1", GONE, rating="down"),
    wire(
        "artifact_edited_and_saved",
        "a1",
        GONE,
        "calm_palette",
        diff={"note": f"swapped {GONE} for calm"},
    ),
    wire("generation_started", "a2", GONE),
]
#: What comes after the forget: the edit window has expired, and a new generation starts.
LATER = wire("generation_started", "a3", "calm_palette", timestamp="2026-03-01T10:01:00Z")


def files_mentioning(root: Path, needle: str) -> list[str]:
    out = []
    for path in root.rglob("*"):
        if path.is_file() and needle.encode() in path.read_bytes():
            out.append(str(path.relative_to(root)))
    return out


def patterns_of(store: MemoryStore) -> set[str]:
    return {r.pattern for r in store.list_preferences(USER)}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW)


def test_library_forget_purges_the_pending_capture(tmp_path: Path, clock: ManualClock) -> None:
    root = tmp_path / "mem"
    store = MemoryStore(root, clock=clock)
    layer = CaptureLayer(store)
    report = layer.submit_many(SEQUENCE, clock.ms)
    assert report.accepted == 3
    assert MemoryService(store).forget(USER, "color", GONE).events_removed == 1
    clock.ms += 60_000
    later = layer.submit(LATER, clock.ms)
    assert later.flushed == 1  # the edit-save, without the forgotten pattern
    assert later.inferred == 0  # the pending generation named only the forgotten pattern
    layer.close()
    assert patterns_of(store) == {"calm_palette"}
    store.close()
    assert files_mentioning(root, GONE) == []


def test_library_forget_in_another_bucket_keeps_the_pending_signal(
    tmp_path: Path, clock: ManualClock
) -> None:
    store = MemoryStore(tmp_path / "mem", clock=clock)
    layer = CaptureLayer(store)
    layer.submit(wire("artifact_edited_and_saved", "a1", GONE), clock.ms)
    store.forget(USER, "color", GONE, project_id="landing")  # not the global bucket
    layer.close()
    assert patterns_of(store) == {GONE}


@pytest.mark.parametrize("scope", ["all", "global"])
def test_library_reset_purges_the_pending_capture(
    tmp_path: Path, clock: ManualClock, scope: str
) -> None:
    root = tmp_path / "mem"
    store = MemoryStore(root, clock=clock)
    layer = CaptureLayer(store)
    layer.submit_many(SEQUENCE, clock.ms)
    MemoryService(store).reset(USER, scope, confirm=True)
    clock.ms += 60_000
    later = layer.submit(LATER, clock.ms)
    assert (later.flushed, later.inferred) == (0, 0)
    layer.close()
    assert patterns_of(store) == set()
    store.close()
    assert files_mentioning(root, GONE) == []


def test_a_closed_layer_is_no_longer_purged(tmp_path: Path, clock: ManualClock) -> None:
    store = MemoryStore(tmp_path / "mem", clock=clock)
    layer = CaptureLayer(store)
    layer.close()
    purge = store._door.purge
    assert isinstance(purge, MethodType) and purge.__self__ is store._door  # the door is there
    assert list(store._door._listeners) == []


# -- HTTP ----------------------------------------------------------------------------------
class LogLines:
    """Every line the daemon's loggers write, formatted as the daemon writes them."""

    def __init__(self) -> None:
        self.stream = io.StringIO()
        self.handler = logging.StreamHandler(self.stream)
        self.handler.setFormatter(JsonFormatter())

    def __enter__(self) -> LogLines:
        log = logging.getLogger("creative_memory")
        log.addHandler(self.handler)
        self.level = log.level
        log.setLevel(logging.DEBUG)
        return self

    def __exit__(self, *exc: object) -> None:
        log = logging.getLogger("creative_memory")
        log.removeHandler(self.handler)
        log.setLevel(self.level)

    def text(self) -> str:
        return self.stream.getvalue()


@pytest.fixture
def logs() -> Iterator[LogLines]:
    with LogLines() as lines:
        yield lines


def daemon_api(root: Path, store: MemoryStore) -> Any:
    from tests.test_server_api import Api, InProcess

    d = InProcess(root, store)
    token = DaemonFiles(root).token_for(USER)
    return d, Api(d, token)


def test_http_forget_purges_the_daemons_capture_and_logs_no_pattern(
    tmp_path: Path, clock: ManualClock, logs: LogLines
) -> None:
    root = tmp_path / "mem"
    store = MemoryStore(root, clock=clock)
    d, api = daemon_api(root, store)
    try:
        assert api.post("/api/v1/events", json=SEQUENCE).json()["accepted"] == 3
        r = api.delete(f"/api/v1/preferences/color/{GONE}")
        assert r.status_code == 200 and r.json()["events_removed"] == 1
        clock.ms += 60_000
        d.daemon.tick()  # the ticker delivers the expired edit window
        body = api.post("/api/v1/events", json=LATER).json()
        assert body["inferred"] == 0
        memory = api.get("/api/v1/memory").json()
        assert GONE not in json.dumps(memory)
    finally:
        d.close()
    store.close()
    assert patterns_of(store) == {"calm_palette"}
    assert files_mentioning(root, GONE) == []
    assert GONE not in logs.text()
    assert "/api/v1/preferences/{rest:segments}" in logs.text()  # the route template is logged


def test_http_reset_purges_the_daemons_capture(tmp_path: Path, clock: ManualClock) -> None:
    root = tmp_path / "mem"
    store = MemoryStore(root, clock=clock)
    d, api = daemon_api(root, store)
    try:
        api.post("/api/v1/events", json=SEQUENCE)
        r = api.post("/api/v1/reset", json={"confirm": True, "scope": "all"})
        assert r.status_code == 200
        clock.ms += 60_000
        body = api.post("/api/v1/events", json=LATER).json()
        assert (body["flushed"], body["inferred"]) == (0, 0)
    finally:
        d.close()  # shutdown delivers what is still pending: nothing of the erased
    store.close()
    assert patterns_of(store) == set()
    assert files_mentioning(root, GONE) == []


def test_error_log_lines_carry_the_route_template_not_the_path(
    tmp_path: Path, clock: ManualClock, logs: LogLines, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "mem"
    store = MemoryStore(root, clock=clock)
    d, api = daemon_api(root, store)

    def boom(*args: object, **kw: object) -> None:
        raise RuntimeError("storage on fire")

    monkeypatch.setattr(d.daemon.service, "explain", boom)
    try:
        r = api.get(f"/api/v1/explain/color/{GONE}")
        assert r.status_code == 500
    finally:
        d.close()
    assert GONE not in logs.text()
    assert "/api/v1/explain/{rest:segments}" in logs.text()


# -- CLI -------------------------------------------------------------------------------------
def test_cli_forget_leaves_no_trace(tmp_path: Path) -> None:
    from tests.test_cli import Cli, jsonl

    cli = Cli(tmp_path)
    events = [dict(e, user_id="alice") for e in [*SEQUENCE, LATER]]
    cli.ok("ingest", "-", input=jsonl(events[:3]))
    cli.ok("forget", "color", GONE)
    cli.ok("ingest", "-", input=jsonl(events[3:]))
    root = Path(cli.store().root)
    assert GONE not in cli.ok("inspect").out
    assert files_mentioning(root, GONE) == []


# -- PostgreSQL -------------------------------------------------------------------------------
def test_postgres_forget_leaves_no_trace_in_a_dump(pg_url: str, clock: ManualClock) -> None:
    store = MemoryStore(pg_url, clock=clock)
    layer = CaptureLayer(store)
    marker = "pgneon_" + os.urandom(4).hex()
    seq = [json.loads(json.dumps(e).replace(GONE, marker)) for e in SEQUENCE]
    layer.submit_many(seq, clock.ms)
    store.list_preferences(USER)
    store.flush()
    MemoryService(store).forget(USER, "color", marker)
    clock.ms += 60_000
    layer.submit(LATER, clock.ms)
    layer.close()
    store.list_preferences(USER)
    store.close()
    # this test's own schema only: other workers create and drop theirs meanwhile, which
    # makes a dump of the whole database fail
    schema = unquote(pg_url).split("search_path=", 1)[1].split("&", 1)[0]
    dump = subprocess.run(
        ["pg_dump", f"--dbname={pg_url}", f"--schema={schema}"], capture_output=True
    )
    assert dump.returncode == 0, dump.stderr.decode(errors="replace")
    assert b"CREATE TABLE" in dump.stdout  # the dump holds the store's tables
    assert b"calm_palette".hex().encode() in dump.stdout  # bytea columns dump as hex
    assert marker.encode() not in dump.stdout
    assert marker.encode().hex().encode() not in dump.stdout
