"""The background derivation worker (docs/daemon.md, "Background derivation"): derived state
is byte-identical with it on or off, whenever it runs or fails to; notifications coalesce
per user; erasure drops what it queued; it reports its queue and last derivation; it stops
cleanly; and the daemon's ``--derivation`` flag, environment variable and ``/healthz``."""

from __future__ import annotations

import gzip
import json
import threading
import warnings
from pathlib import Path
from typing import Any

import msgspec
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from creative_memory import MemoryStore
from creative_memory.app.worker import DerivationWorker, lazy_status
from creative_memory.cli.daemon import cli
from creative_memory.engine.derivation.registry import known_versions
from creative_memory.engine.errors import ValidationError
from creative_memory.http import DaemonConfig, create_app, daemon_of, ensure_first_start
from creative_memory.http.config import DERIVATION_ENV, resolve_derivation
from tests.conftest import FIXTURES, ManualClock, tag
from tests.test_lazy_derivation import PATTERNS, TYPES, _signal
from tests.test_lazy_derivation import _history_signal as _as_signal

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

U = "worker_user"


def observe(store: MemoryStore, user: str = U) -> Any:
    """Everything a reader sees, in bytes-comparable form."""
    prefs = [p.to_dict() for p in store.list_preferences(user)]
    out = []
    for project in (None, "p1"):
        r = store.retrieve_for_injection(user, None if project is None else {"project_id": project})
        out.append(
            [
                [x.to_dict() for x in r.positives],
                [x.to_dict() for x in r.negatives],
                [x.to_dict() for x in r.project_overrides],
                r.diagnostics,
            ]
        )
    return {"prefs": prefs, "retrieval": out}


# -- byte identity ---------------------------------------------------------------------------
@pytest.mark.parametrize("version", known_versions())
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batches=st.lists(st.lists(_signal, min_size=1, max_size=8), min_size=1, max_size=8),
    waits=st.sets(st.integers(0, 7)),
    reads=st.sets(st.integers(0, 7)),
)
def test_derived_state_is_byte_identical_with_the_worker_on_or_off(
    tmp_path_factory: pytest.TempPathFactory,
    version: str,
    batches: list[list[dict[str, Any]]],
    waits: set[int],
    reads: set[int],
) -> None:
    """Random batches; after some the test waits for the worker, after others a read races
    it (or finds it behind): the same records, retrievals and state bytes as no worker."""
    base = tmp_path_factory.mktemp("worker")
    clock = ManualClock()
    off = MemoryStore(base / "off", derivation_version=version, clock=clock)
    on = MemoryStore(base / "on", derivation_version=version, clock=clock)
    worker = DerivationWorker(on, coalesce_ms=0)
    try:
        day = 0
        for i, batch in enumerate(batches):
            signals = []
            for step in batch:
                signals.append(_as_signal(step, day))
                day += 1
            off.ingest_signals(U, signals, records=False)
            on.ingest_signals(U, signals, records=False)
            worker.notify(U)
            if i in waits:
                assert worker.wait_idle(30)
            if i in reads:
                on.retrieve_for_injection(U, {"project_id": "p1"})
        assert worker.wait_idle(30)
        assert observe(on) == observe(off)
        assert on._memo[U].state.dump() == off._memo[U].state.dump()
    finally:
        assert worker.close(10)
    cold = MemoryStore(base / "on", derivation_version=version, clock=clock)  # its write-backs
    assert observe(cold) == observe(off)


@pytest.mark.parametrize(
    "path", sorted((FIXTURES / "conformance").glob("*.json.gz"))[1:68:4], ids=lambda p: p.name
)
def test_conformance_traces_with_the_worker_equal_without(tmp_path: Path, path: Path) -> None:
    """A recorded trace's signals, the worker notified after each: the records are those of
    the same appends without a worker (version 1, which the traces were recorded with)."""
    scenario = json.loads(gzip.decompress(path.read_bytes()))
    clock = ManualClock()
    off = MemoryStore(tmp_path / "off", derivation_version="1", clock=clock)
    on = MemoryStore(tmp_path / "on", derivation_version="1", clock=clock)
    users: set[str] = set()
    with_worker = DerivationWorker(on, coalesce_ms=0)
    try:
        for op in scenario["ops"]:
            if "clock" in op:
                clock.set(op["clock"])
            if op["op"] != "ingest" or (op.get("expected") or {}).get("error"):
                continue
            try:
                off.ingest_signals(op["user"], [op["signal"]], records=False)
            except ValueError:
                continue
            on.ingest_signals(op["user"], [op["signal"]], records=False)
            with_worker.notify(op["user"])
            users.add(op["user"])
        assert with_worker.wait_idle(30)
    finally:
        with_worker.close(10)
    for user in sorted(users):
        assert on.list_preferences(user) == off.list_preferences(user)
        assert on._memo[user].state.dump() == off._memo[user].state.dump()


def test_a_read_finds_the_state_ready(tmp_path: Path) -> None:
    """After the worker ran, a read folds nothing: the memo already ends at the log's end."""
    store = MemoryStore(tmp_path, derivation_version="3", clock=ManualClock())
    worker = DerivationWorker(store, coalesce_ms=0)
    try:
        store.ingest_signals(U, [tag(p) for p in PATTERNS], records=False)
        assert U not in store._memo
        worker.notify(U)
        assert worker.wait_idle(30)
        memo = store._memo[U]
        end, state = memo.end, memo.state
        store.retrieve_for_injection(U)
        assert store._memo[U] is memo and memo.end == end and memo.state is state
    finally:
        worker.close()


# -- coalescing, status, erasure, shutdown -----------------------------------------------------
def test_a_burst_is_derived_once_and_reported(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path, clock=ManualClock("2026-03-01T10:00:00.000Z"))
    worker = DerivationWorker(store, coalesce_ms=0, start=False)
    assert worker.status_of(U).derivations == 0 and worker.status_of(U).mode == "background"
    for i in range(5):
        store.ingest_signals(U, [tag(f"p{i}")], records=False)
        assert worker.notify(U)
    worker.notify("other_user")  # never wrote anything: nothing to derive
    s = worker.status()
    assert (s.queue_depth, s.derivations, s.running) == (2, 0, False)
    mine = worker.status_of(U)
    assert (mine.queued, mine.pending, mine.last_derived_at) == (True, 5, None)
    worker._thread.start()
    assert worker.wait_idle(30)
    mine = worker.status_of(U)
    assert (mine.queued, mine.pending, mine.derivations) == (False, 0, 1)
    assert mine.last_derived_at == "2026-03-01T10:00:00.000Z"
    assert mine.last_duration_ms is not None and mine.last_duration_ms >= 0
    assert mine.last_error is None
    s = worker.status()
    assert (s.queue_depth, s.derivations, s.failures, s.running) == (0, 2, 0, True)
    assert s.last_derived_at == "2026-03-01T10:00:00.000Z"
    assert [u.user_id for u in worker.users()] == ["other_user", U]
    assert worker.close(10)
    assert not worker.notify(U) and not worker.status().running


def test_a_user_is_derived_after_a_pause_or_after_the_longest_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MemoryStore(tmp_path, clock=ManualClock())
    worker = DerivationWorker(store, coalesce_ms=20, max_wait_ms=100, start=False)
    now = [1000.0]
    monkeypatch.setattr("creative_memory.app.worker.time.monotonic", lambda: now[0])

    def at(t_ms: float, *users: str) -> None:
        now[0] = 1000.0 + t_ms / 1000
        for user in users:
            worker.notify(user)

    def due() -> tuple[str, float]:
        with worker._cond:
            user, when = worker._due()
        return user, round((when - 1000.0) * 1000, 6)

    at(0, "a")
    at(10, "a")  # the burst goes on: its pause moves
    assert due() == ("a", 30.0)
    at(12, "b")
    assert due() == ("a", 30.0)  # b pauses until 32
    at(25, "a")
    assert due() == ("b", 32.0)
    for t in range(30, 200, 10):  # a steady stream: a never pauses for 20 ms
        at(t, "a")
    assert due() == ("b", 32.0)
    with worker._cond:
        del worker._queue["b"]
    assert due() == ("a", 100.0)  # derived 100 ms after its first notification anyway
    assert worker.status_of("a").pending == 20  # one derivation for all of them
    assert worker.close(10)


def test_a_read_while_the_worker_derives_waits_for_it_and_gets_the_same(tmp_path: Path) -> None:
    """The worker holds the user's lock while it derives; a read in the meantime waits,
    then finds the state current (and equal to a store without a worker)."""
    clock = ManualClock()
    store = MemoryStore(tmp_path / "on", clock=clock)
    plain = MemoryStore(tmp_path / "off", clock=clock)
    signals = [tag(p, t) for p in PATTERNS for t in TYPES]
    store.ingest_signals(U, signals, records=False)
    plain.ingest_signals(U, signals, records=False)
    worker = DerivationWorker(store, coalesce_ms=0)
    try:
        with store._locked(U):  # the worker blocks here, mid-derivation
            worker.notify(U)
            got: list[Any] = []
            reader = threading.Thread(target=lambda: got.append(observe(store)))
            reader.start()
            reader.join(0.2)
            assert reader.is_alive()
        reader.join(30)
        assert got == [observe(plain)]
    finally:
        worker.close()


def test_forget_and_reset_drop_what_the_worker_queued(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path, clock=ManualClock())
    worker = DerivationWorker(store, start=False)
    store.ingest_signals(U, [tag("neon", "color"), tag("airy")], records=False)
    worker.notify(U)
    worker.notify("someone_else")
    assert store.forget(U, "color", "neon") == 1
    assert worker.status().queue_depth == 1  # the other user's stays
    assert not worker.status_of(U).queued and worker.status_of(U).pending == 0
    worker.notify(U)
    store.reset_memory(U, "project:p1")
    assert not worker.status_of(U).queued
    worker.notify(U)
    store.reset_memory(U)
    assert worker.status().queue_depth == 1
    assert b"neon" not in msgspec.json.encode([worker.status(), worker.users()])
    worker.close(drain=False)
    assert worker.status().queue_depth == 0
    store.forget(U, "layout", "airy")  # a closed worker is no longer a listener
    assert worker.status_of(U).pending == 0


def test_close_drains_the_queue(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path, clock=ManualClock())
    store.ingest_signals(U, [tag("airy")], records=False)
    worker = DerivationWorker(store, coalesce_ms=10_000)  # a burst that never settles
    worker.notify(U)
    assert worker.close(10)  # closing derives what is queued at once
    assert worker.status_of(U).derivations == 1 and U in store._memo


def test_a_failed_derivation_is_reported_and_the_read_still_answers(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path, clock=ManualClock())
    plain = MemoryStore(tmp_path / "plain", clock=ManualClock())
    for s in (store, plain):
        s.ingest_signals(U, [tag("airy"), tag("dense", polarity="negative")], records=False)
    errors: list[tuple[str, BaseException]] = []
    worker = DerivationWorker(store, coalesce_ms=0, on_error=lambda u, e: errors.append((u, e)))
    real = store._refresh

    def broken(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is worker._thread:
            raise OSError("disk on fire")
        return real(*args, **kwargs)

    store._refresh = broken  # type: ignore[method-assign]
    try:
        worker.notify(U)
        assert worker.wait_idle(30)
    finally:
        worker.close()
    assert [u for u, _ in errors] == [U]
    assert worker.status().failures == 1
    assert worker.status_of(U).last_error == "OSError: disk on fire"
    assert observe(store) == observe(plain)


def test_lazy_status() -> None:
    s = lazy_status(U)
    assert (s.mode, s.queued, s.derivations, s.last_derived_at) == ("lazy", False, 0, None)


# -- the daemon --------------------------------------------------------------------------------
def test_resolve_derivation() -> None:
    assert resolve_derivation(None, {}) == "lazy"
    assert resolve_derivation(None, {DERIVATION_ENV: "background"}) == "background"
    assert resolve_derivation(None, {DERIVATION_ENV: " Background "}) == "background"
    assert resolve_derivation("lazy", {DERIVATION_ENV: "background"}) == "lazy"
    with pytest.raises(ValidationError) as exc:
        resolve_derivation(None, {DERIVATION_ENV: "eager"})
    assert exc.value.field == DERIVATION_ENV
    with pytest.raises(ValidationError) as exc:
        resolve_derivation("eager", {})
    assert exc.value.field == "derivation"
    with pytest.raises(ValidationError) as exc:
        create_app(DaemonConfig(root=Path("/nonexistent"), derivation="eager"))
    assert exc.value.field == "derivation"


def test_serve_refuses_a_bad_mode(tmp_path: Path) -> None:
    runner = CliRunner()
    r = runner.invoke(cli, ["serve", "--data-dir", str(tmp_path), "--derivation", "eager"])
    assert r.exit_code == 2 and "--derivation" in r.output
    r = runner.invoke(cli, ["serve", "--data-dir", str(tmp_path)], env={DERIVATION_ENV: "soon"})
    assert r.exit_code == 2 and DERIVATION_ENV in r.output


def _event(i: int, pattern: str) -> dict[str, Any]:
    return {
        "event": "explicit_tag_applied",
        "user_id": "default",
        "artifact_id": f"a{i}",
        "session_id": "s1",
        "project_id": None,
        "timestamp": "2026-03-01T10:00:00Z",
        "tag_text": "too noisy" if i % 2 else "love this",
        "artifact_meta": {"signals": [{"preference_type": "color", "pattern": pattern}]},
    }


def _serve(root: Path, mode: str) -> tuple[Any, TestClient, str]:
    config = DaemonConfig(root=root, port=7744, derivation=mode)
    ensure_first_start(config)
    clock = ManualClock("2026-03-01T10:00:00.000Z")
    app = create_app(config, store=MemoryStore(root, clock=clock))
    token = daemon_of(app).files.token_for("default")
    client = TestClient(app, base_url="http://127.0.0.1:7744")
    client.__enter__()
    return app, client, str(token)


def test_the_daemon_in_background_mode(tmp_path: Path) -> None:
    """Same answers as a lazy daemon; /healthz shows the mode, the queue and (with
    credentials) the caller's record; shutdown stops the worker and keeps every event."""
    answers = {}
    for mode in ("lazy", "background"):
        app, client, token = _serve(tmp_path / mode, mode)
        auth = {"Authorization": f"Bearer {token}"}
        d = daemon_of(app)
        try:
            for i in range(0, 12, 3):
                body = [_event(j, PATTERNS[j % 4]) for j in range(i, i + 3)]
                r = client.post("/api/v1/events", json=body, headers=auth)
                assert r.status_code == 200 and r.json()["accepted"] == 3
            health = client.get("/healthz").json()["derivation"]
            assert health["mode"] == mode and health.get("user") is None
            if d.worker is not None:
                assert d.worker.wait_idle(30)
                health = client.get("/healthz", headers=auth).json()["derivation"]
                assert health["running"] and health["queue_depth"] == 0
                assert health["derivations"] >= 1 and health["last_duration_ms"] is not None
                assert health["user"]["user_id"] == "default"
                assert health["user"]["last_derived_at"] == "2026-03-01T10:00:00.000Z"
                bad = client.get("/healthz", headers={"Authorization": "Bearer nope"})
                assert bad.status_code == 200 and bad.json()["derivation"].get("user") is None
            else:
                assert health == {"mode": "lazy", "running": False, "queue_depth": 0,
                                  "derivations": 0, "failures": 0, "last_derived_at": None,
                                  "last_duration_ms": None, "user": None}  # fmt: skip
            answers[mode] = [
                client.get("/api/v1/prompt?format=json", headers=auth).json(),
                client.get("/api/v1/memory", headers=auth).json()["preferences"],
            ]
        finally:
            client.__exit__(None, None, None)
        if d.worker is not None:
            assert not d.worker.status().running
        store = MemoryStore(tmp_path / mode)
        assert len(store.events("default")) == 12
    assert answers["lazy"] == answers["background"]


@pytest.mark.slow
def test_serve_in_background_mode_under_load_keeps_every_event(tmp_path: Path) -> None:
    """``serve --derivation background`` as a real process under benchmarks/load.py (a small
    run): no error, and after SIGTERM every acknowledged event is in the log."""
    import os
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "load.py"
    env = {k: v for k, v in os.environ.items() if k not in ("OD_DATA_DIR", "MEMORY_STORAGE_ROOT")}
    env["HOME"] = str(tmp_path)
    proc = subprocess.run(
        [sys.executable, str(script), "--clients", "4", "--ingest", "15", "--retrieve", "10",
         "--derivation", "background", "--json", "--data-dir", str(tmp_path / "data")],
        capture_output=True, text=True, timeout=180, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["derivation"] == "background" and out["errors"] == 0
    assert out["missing_events"] == 0
    assert out["acknowledged_events"] == out["stored_signal_events"] == 4 * 15 + 2 * 7
    log = (tmp_path / "data" / "daemon-vdefault.log").read_text()  # warnings and errors
    assert '"derivation_worker_stopped"' not in log  # a warning only when it did not stop
    assert '"derivation_failed"' not in log and '"unhandled_error"' not in log
