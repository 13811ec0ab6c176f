"""SIGKILL of the daemon under 16 concurrent writers (docs/storage.md, "Group commit").

``creative-memory serve`` (file store) receives single events from 16 client threads at
once — appends that share fsyncs — and is SIGKILLed at a random moment, 20 times in all
(four stores of five kills, so the chunks run in parallel), restarting on the same data
each time. After every kill: every acknowledged event (a 200 answer that accepted it) is
in the log exactly once, the log parses with one hash chain (a torn tail, if any, is
ignored and repaired by the next daemon) and is what a store reads; after every other
kill the derived state of a store opened normally equals a fresh derivation of the log.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from creative_memory import MemoryStore
from creative_memory.engine.events import SignalEvent
from creative_memory.http import DaemonFiles
from tests.test_storage_durability import (
    assert_log_sound,
    child_env,
    observe,
    observe_from_scratch,
)

USER = "default"
WRITERS = 16
KILLS_PER_CHUNK = 5


def start_daemon(root: Path, home: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``serve --data-dir root --port 0``; (process, base URL) once it listens."""
    env = {k: v for k, v in child_env().items() if k not in ("OD_DATA_DIR", "MEMORY_STORAGE_ROOT")}
    env.update(HOME=str(home), CREATIVE_MEMORY_USER=USER)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "creative_memory.cli.daemon",
            "serve",
            "--data-dir",
            str(root),
            "--port",
            "0",
            "--log-level",
            "warning",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log.open("ab"),
        env=env,
    )
    files = DaemonFiles(root)
    deadline = time.monotonic() + 30
    while True:  # server.json names this process once it listens
        info = files.read_server_info()
        if info is not None and info.get("pid") == proc.pid:
            return proc, str(info["url"]).rstrip("/")
        if proc.poll() is not None:
            raise AssertionError(log.read_text())
        assert time.monotonic() < deadline, "daemon did not start"
        time.sleep(0.02)


def tag_event(artifact: str, pattern: str) -> dict[str, Any]:
    return {
        "event": "explicit_tag_applied",
        "user_id": USER,
        "artifact_id": artifact,
        "session_id": "s",
        "project_id": "proj" if pattern.endswith("3") else None,
        "timestamp": "2026-03-01T10:00:00Z",
        "tag_text": "love this" if len(artifact) % 2 else "not this",
        "artifact_meta": {"signals": [{"preference_type": "layout", "pattern": pattern}]},
    }


def write_and_kill(root: Path, home: Path, trial: str, rng: random.Random) -> set[str]:
    """Start the daemon, let 16 threads post single events, SIGKILL it after a random
    delay; the artifacts of the events it acknowledged."""
    log = home / "daemon.log"
    proc, url = start_daemon(root, home, log)
    token = DaemonFiles(root).token_for(USER)
    acked: set[str] = set()
    lock = threading.Lock()
    warm = threading.Event()  # every writer has had an answer: all 16 are under way
    answered: set[int] = set()

    def writer(k: int) -> None:
        with httpx.Client(timeout=10, headers={"Authorization": f"Bearer {token}"}) as client:
            i = 0
            while True:
                artifact = f"{trial}-w{k}-{i}"
                try:
                    r = client.post(
                        f"{url}/api/v1/events", json=tag_event(artifact, f"p{(k + i) % 5}")
                    )
                except httpx.TransportError:
                    return  # the daemon is gone: this one was never acknowledged
                assert r.status_code == 200, r.text
                assert r.json()["accepted"] == 1, r.text
                with lock:
                    acked.add(artifact)
                    answered.add(k)
                    if len(answered) == WRITERS:
                        warm.set()
                i += 1

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(WRITERS)]
    try:
        for th in threads:
            th.start()
        assert warm.wait(30), log.read_text()
        time.sleep(rng.uniform(0, 0.3))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for th in threads:
            th.join(30)
    assert proc.returncode == -signal.SIGKILL, log.read_text()
    return acked


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(4))
def test_sigkilled_daemon_under_concurrent_writers_loses_no_acknowledged_event(
    tmp_path: Path, chunk: int
) -> None:
    rng = random.Random(20261203 + chunk)
    root = tmp_path / "data"
    acked: set[str] = set()
    for kill in range(KILLS_PER_CHUNK):
        acked |= write_and_kill(root, tmp_path, f"c{chunk}k{kill}", rng)
        events = assert_log_sound(root, USER, allow_torn_tail=True)
        stored = [e.artifact_id for e in events if isinstance(e, SignalEvent)]
        assert len(stored) == len(set(stored)), "an event was stored twice"
        missing = acked - set(stored)
        assert not missing, f"kill {kill}: acknowledged events lost: {sorted(missing)[:5]}"
        assert MemoryStore(root).events(USER) == events  # what readers see
        if kill % 2:  # the derived state of a normal open equals a fresh derivation
            opened = observe(MemoryStore(root, derivation_version="1"), USER, ("proj",))
            assert opened == observe_from_scratch(root, USER, "1", ("proj",))
    assert len(acked) >= WRITERS * KILLS_PER_CHUNK  # each kill landed amid 16 writers
