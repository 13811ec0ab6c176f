"""Two daemon replicas on one PostgreSQL database never serve a stale state (docs/deploy.md,
"The hosted setup").

Daemon A derives in the background and writes cache entries after every batch; daemon B
derives lazily. Events for one user go mostly to A, sometimes to B; after every write the
other replica's view (``GET /api/v1/memory``, sent with the ETag of its previous view) is
read at once and must be the writer's view: the new event counted, every record derived up
to it — never B's own earlier in-process state, never a cache entry of an older log, never
a 304 for content that changed. Midway B is restarted (a cold replica whose state comes
from ``cm_cache``), and a forget on A must be visible on B at once. The final state equals
a fresh derivation of the stored log.
"""

from __future__ import annotations

import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from creative_memory import MemoryStore
from creative_memory.storage import FileStorage
from tests.conftest import ManualClock
from tests.test_pg_concurrency import start_daemon
from tests.test_storage_durability import child_env

pytest_plugins = ["tests.pg_fixtures"]

USER = "alice"


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:  # pragma: no cover
        proc.kill()
        proc.wait()


def event(i: int) -> dict[str, Any]:
    return {
        "event": "explicit_tag_applied",
        "user_id": USER,
        "artifact_id": f"a{i}",
        "session_id": f"s{i // 5}",
        "project_id": "shared" if i % 4 == 0 else None,
        "timestamp": f"2026-03-01T10:{i:02d}:00Z",
        "tag_text": "not this" if i % 3 == 2 else "love this",
        "artifact_meta": {"signals": [{"preference_type": "layout", "pattern": f"p{i % 4}"}]},
    }


def view(doc: dict[str, Any]) -> dict[str, Any]:
    """What a replica serves about the user's memory (not which replica or mode it is)."""
    return {k: doc[k] for k in ("preferences", "event_count", "retrieval", "settings")}


@pytest.mark.slow
def test_a_replica_never_serves_a_stale_state(pg_url: str, tmp_path: Path) -> None:
    from creative_memory.http import DaemonFiles

    data_dir = tmp_path / "daemon"
    auth = {"Authorization": f"Bearer {DaemonFiles(data_dir).token_for(USER)}"}
    env = {k: v for k, v in child_env().items() if k not in ("OD_DATA_DIR", "MEMORY_STORAGE_ROOT")}
    env["HOME"] = str(tmp_path)
    logs = {name: tmp_path / f"daemon-{name}.log" for name in "AB"}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    bases: dict[str, str] = {}
    procs["A"], bases["A"] = start_daemon(
        data_dir, pg_url, env, logs["A"], "--derivation", "background"
    )
    procs["B"], bases["B"] = start_daemon(data_dir, pg_url, env, logs["B"])
    etags: dict[str, str] = {}
    client = httpx.Client(timeout=60, headers=auth)

    def read(name: str) -> dict[str, Any]:
        headers = {"If-None-Match": etags[name]} if name in etags else {}
        r = client.get(f"{bases[name]}/api/v1/memory", headers=headers)
        assert r.status_code == 200, f"{name}: {r.status_code} {r.text}"  # never a stale 304
        etags[name] = r.headers["ETag"]
        doc: dict[str, Any] = r.json()
        return doc

    try:
        count = 0
        for i in range(30):
            writer, other = ("B", "A") if i % 5 == 4 else ("A", "B")
            r = client.post(f"{bases[writer]}/api/v1/events", json=event(i))
            assert r.status_code == 200 and r.json()["accepted"] == 1, r.text
            count += 1
            if i == 20:  # erasure on A: B must not show the erased records, nor old states
                r = client.delete(f"{bases['A']}/api/v1/preferences/layout/p1")
                assert r.status_code == 200, r.text
                count = len([k for k in range(i + 1) if k % 4 != 1])
            if i == 12:  # a cold replica: its state comes from the shared cache
                stop(procs["B"])
                etags.pop("B", None)
                procs["B"], bases["B"] = start_daemon(data_dir, pg_url, env, logs["B"])
            mine = read(writer)
            assert mine["event_count"] == count, f"{writer} after event {i}"
            theirs = read(other)
            assert view(theirs) == view(mine), f"{other} served a stale state after event {i}"
            derived_to = {p["last_derived_event_seq"] for p in theirs["preferences"]}
            assert i + 1 in derived_to, f"{other}: event {i} (seq {i + 1}) not derived"
            if i == 20:
                assert "p1" not in {p["pattern"] for p in theirs["preferences"]}
        time.sleep(0.5)  # A's background worker writes its last state back
    finally:
        client.close()
        for proc in procs.values():
            stop(proc)
    for name, proc in procs.items():  # uvicorn re-raises SIGTERM
        assert proc.returncode in (0, -signal.SIGTERM), logs[name].read_text()

    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SELECT count(*) FROM cm_cache WHERE user_id = %s", (USER,)).fetchone()
    assert row is not None and row[0] > 0, "no cache entry was written: the test proved nothing"
    with MemoryStore(pg_url) as store:
        events = store.events(USER)
        assert len(events) == count
        served = [p.to_dict() for p in store.list_preferences(USER)]
        with tempfile.TemporaryDirectory(prefix="cm-scratch-") as d:
            FileStorage(d).replace_all(USER, events)
            scratch = MemoryStore(d, clock=ManualClock())
            assert [p.to_dict() for p in scratch.list_preferences(USER)] == served
