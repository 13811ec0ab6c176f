"""PostgreSQL under concurrency: several processes on one database (issue 5 acceptance).

* Two daemons (``creative-memory serve --database URL``, sharing a token file, as replicas
  behind a load balancer would) receive ``POST /api/v1/events`` for the same 16 users at
  once from concurrent clients, 2,000 events in total: every event accepted is stored
  exactly once, ``seq`` strictly increasing per user, hash chains consistent.
* Two writer processes (each with several threads, as a daemon serving requests would be)
  ingest for the same 16 users at once, 2,000 events in total: nothing lost, nothing
  duplicated, ``seq`` strictly increasing per user, hash chains consistent, every
  acknowledged ``seq`` is the stored one, and the derived state equals a fresh derivation.
* Processes starting at once on a fresh schema apply each migration exactly once.
* A writer SIGKILLed at random moments loses no acknowledged event.
* Erasure racing appends from another process never reuses a ``seq`` nor loses an event.
"""

from __future__ import annotations

import itertools
import json
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import psycopg
import pytest

from creative_memory import MemoryStore, StorageError
from creative_memory.engine.events import CHAIN_GENESIS, Event, SignalEvent, chain_hash
from creative_memory.storage import FileStorage
from creative_memory.storage.postgres import MIGRATIONS, SCHEMA_VERSION, PostgresStorage, migrate
from tests.conftest import ManualClock
from tests.test_storage_durability import child_env, run_and_kill

pytest_plugins = ["tests.pg_fixtures"]

WRITER = textwrap.dedent(
    """
    import os, random, sys, threading, time
    from creative_memory import MemoryStore
    url, prefix, users, per_thread, threads, go = sys.argv[1:7]
    users, per_thread, threads = int(users), int(per_thread), int(threads)
    store = MemoryStore(url, derivation_version="1")
    out_lock = threading.Lock()
    lines = []
    while not os.path.exists(go):
        time.sleep(0.001)

    errors = []

    def work(t):
        try:
            run(t)
        except BaseException as exc:
            errors.append(repr(exc))

    def run(t):
        rng = random.Random(f"{prefix}-{t}")
        i = 0
        while i < per_thread:
            user = f"user{rng.randrange(users):02d}"
            n = min(per_thread - i, 1 if rng.random() < 0.6 else rng.randint(2, 4))
            sigs = [{
                "signal_type": rng.choice(["explicit_tag", "thumbs_up", "thumbs_down"]),
                "pattern": rng.choice(["airy", "dense", "neon", "serif", "grid"]),
                "preference_type": rng.choice(["layout", "color"]),
                "polarity": rng.choice(["positive", "negative"]),
                "scope": "global" if rng.random() < 0.7 else "project",
                "project_id": "shared",
                "artifact_id": f"{prefix}-{t}-{i + j}",
            } for j in range(n)]
            recs = store.ingest_signals(user, sigs)
            with out_lock:
                for s, rec in zip(sigs, recs):
                    # acknowledged: the call returned. (A record can be None when another
                    # thread of this store folded the event first; then the seq is unknown.)
                    seq = -1 if rec is None else rec.last_derived_event_seq
                    lines.append(f"{user} {s['artifact_id']} {seq}")
            i += n
            if rng.random() < 0.1:
                store.retrieve_for_injection(user, {"project_id": "shared"})

    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    store.close()
    if errors:
        sys.exit("writer thread failed: " + "; ".join(errors))
    print("\\n".join(lines), flush=True)
    """
)


def start_daemon(
    data_dir: Path, url: str, env: dict[str, str], log: Path, *extra: str
) -> tuple[subprocess.Popen[bytes], str]:
    """``serve --multi-user --database url [extra...]`` on a free loopback port; (process,
    base URL). Its stderr is appended to ``log``."""
    from creative_memory.http import DaemonFiles

    files = DaemonFiles(data_dir)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "creative_memory.cli.daemon",
            "serve",
            "--data-dir",
            str(data_dir),
            "--port",
            "0",
            "--multi-user",
            "--database",
            url,
            "--log-level",
            "warning",
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=log.open("ab"),
        env=env,
    )
    deadline = time.monotonic() + 30
    while True:  # the daemons share the data dir: wait for *this* one's server.json
        info = files.read_server_info()
        if info is not None and info.get("pid") == proc.pid:
            return proc, str(info["url"]).rstrip("/")
        if proc.poll() is not None:
            raise AssertionError(log.read_text())
        assert time.monotonic() < deadline, "daemon did not start"
        time.sleep(0.05)


@pytest.mark.slow
def test_two_daemons_ingest_for_the_same_users(pg_url: str, tmp_path: Path) -> None:
    import concurrent.futures

    import httpx

    from creative_memory.http import DaemonFiles

    users = [f"user{i:02d}" for i in range(16)]
    per_user = 125  # 2,000 events in total
    data_dir = tmp_path / "daemon"
    files = DaemonFiles(data_dir)
    tokens = {u: files.token_for(u) for u in users}
    env = {k: v for k, v in child_env().items() if k not in ("OD_DATA_DIR", "MEMORY_STORAGE_ROOT")}
    env["HOME"] = str(tmp_path)
    logs = [tmp_path / f"daemon{k}.log" for k in range(2)]
    daemons = [start_daemon(data_dir, pg_url, env, log) for log in logs]
    try:
        # Every user's events are split over both daemons and sent by several clients at
        # once, in small batches: the load balancer's view.
        jobs: list[tuple[str, str, list[dict[str, Any]]]] = []
        for u in users:
            events = [
                {
                    "event": "explicit_tag_applied",
                    "user_id": u,
                    "artifact_id": f"{u}-a{i}",
                    "session_id": f"{u}-s{i // 10}",
                    "project_id": "shared" if i % 4 == 0 else None,
                    "timestamp": "2026-03-01T10:00:00Z",
                    "tag_text": "love this" if i % 3 else "not this",
                    "artifact_meta": {
                        "signals": [{"preference_type": "layout", "pattern": f"p{i % 9}"}]
                    },
                }
                for i in range(per_user)
            ]
            k = 0
            while k < len(events):
                n = 1 + (k % 3)
                jobs.append((u, daemons[(k // 3) % 2][1], events[k : k + n]))
                k += n
        random.Random(5).shuffle(jobs)

        clients = {base: httpx.Client(timeout=60) for _, base in daemons}

        def send(job: tuple[str, str, list[dict[str, Any]]]) -> int:
            user, base, batch = job
            r = clients[base].post(
                f"{base}/api/v1/events",
                json=batch if len(batch) > 1 else batch[0],
                headers={"Authorization": f"Bearer {tokens[user]}"},
            )
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["rejected"] == 0 and body["coalesced"] == 0, json.dumps(body)
            return int(body["accepted"])

        try:
            with concurrent.futures.ThreadPoolExecutor(max_workers=12) as pool:
                accepted = sum(pool.map(send, jobs))
        except httpx.TransportError as exc:  # say why a daemon stopped answering
            states = [f"daemon {k}: exit {proc.poll()}" for k, (proc, _) in enumerate(daemons)]
            logs_text = "\n".join(f"--- {log.name}\n{log.read_text()[-4000:]}" for log in logs)
            raise AssertionError(f"{exc}; {'; '.join(states)}\n{logs_text}") from exc
        for c in clients.values():
            c.close()
        assert accepted == len(users) * per_user == 2000
    finally:
        for proc, _ in daemons:
            proc.send_signal(signal.SIGTERM)
        for proc, _ in daemons:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:  # pragma: no cover
                proc.kill()
    for (proc, _), log in zip(daemons, logs, strict=True):  # uvicorn re-raises SIGTERM
        assert proc.returncode in (0, -signal.SIGTERM), log.read_text()

    with MemoryStore(pg_url, derivation_version="1") as store:
        for u in users:
            stored = store.events(u)
            assert_chain(stored)  # seq strictly increasing, chain consistent
            assert [e.seq for e in stored] == list(range(1, per_user + 1)), u
            artifacts = [e.artifact_id for e in stored if isinstance(e, SignalEvent)]
            assert Counter(artifacts) == Counter(f"{u}-a{i}" for i in range(per_user)), u
        assert observe(store, users[0]) == observe_from_scratch(store, users[0])


def assert_chain(events: list[Event]) -> None:
    prev_h, prev_seq = CHAIN_GENESIS, 0
    for ev in events:
        assert ev.seq > prev_seq, f"seq not increasing at {ev.seq}"
        assert ev.h == chain_hash(prev_h, ev), f"hash chain broken at seq {ev.seq}"
        prev_h, prev_seq = ev.h, ev.seq


def observe(store: MemoryStore, user: str) -> dict[str, Any]:
    return {
        "list": [p.to_dict() for p in store.list_preferences(user)],
        "retrieval": store.retrieve_for_injection(user, {"project_id": "shared"}).to_dict(),
    }


def observe_from_scratch(store: MemoryStore, user: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cm-scratch-") as d:
        fs = FileStorage(d)
        fs.replace_all(user, store.events(user))
        return observe(MemoryStore(d, derivation_version="1", clock=ManualClock()), user)


@pytest.mark.slow
def test_two_processes_ingest_for_the_same_users(pg_url: str, tmp_path: Path) -> None:
    users, threads, per_thread, processes = 16, 4, 250, 2
    total = processes * threads * per_thread
    assert total >= 2000
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                WRITER,
                pg_url,
                f"w{k}",
                str(users),
                str(per_thread),
                str(threads),
                str(go),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env(),
        )
        for k in range(processes)
    ]
    time.sleep(1.0)  # both import, connect and migrate, then wait at the barrier
    go.touch()
    acks: dict[str, dict[str, int]] = defaultdict(dict)  # user -> artifact -> seq
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err.decode()
        for line in out.decode().splitlines():
            user, artifact, seq = line.split()
            assert artifact not in acks[user]
            acks[user][artifact] = int(seq)
    assert sum(len(a) for a in acks.values()) == total

    with MemoryStore(pg_url, derivation_version="1") as store:
        stored_total = 0
        interleaved_users = 0
        for user in sorted(acks):
            events = store.events(user)
            assert_chain(events)  # seq strictly increasing, chain consistent
            assert [e.seq for e in events] == list(range(1, len(events) + 1))
            by_artifact = {e.artifact_id: e.seq for e in events if isinstance(e, SignalEvent)}
            assert len(by_artifact) == len(events), f"{user}: duplicated events"
            assert by_artifact.keys() == acks[user].keys(), f"{user}: lost events"
            wrong = {a: s for a, s in acks[user].items() if s != -1 and by_artifact[a] != s}
            assert not wrong, f"{user}: acknowledged seq differs from the stored one"
            stored_total += len(events)
            writers = [str(e.artifact_id)[:2] for e in events if isinstance(e, SignalEvent)]
            interleaved_users += sum(a != b for a, b in itertools.pairwise(writers)) > 1
        assert stored_total == total
        assert len(acks) == users
        assert interleaved_users >= users // 2, "the processes never overlapped"
        for user in sorted(acks)[:4]:
            assert observe(store, user) == observe_from_scratch(store, user)
    with psycopg.connect(pg_url) as conn:
        row = conn.execute(
            "SELECT count(*), count(DISTINCT (user_id, seq)), count(DISTINCT h) FROM cm_events"
        ).fetchone()
    assert row == (total, total, total)


STARTER = textwrap.dedent(
    """
    import os, sys, time
    from creative_memory.storage.postgres import PostgresStorage
    url, go = sys.argv[1:3]
    while not os.path.exists(go):
        time.sleep(0.001)
    s = PostgresStorage(url)
    s.append("u", [])
    s.close()
    print("ok")
    """
)


def test_processes_starting_at_once_migrate_once(pg_url: str, tmp_path: Path) -> None:
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", STARTER, pg_url, str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env(),
        )
        for _ in range(6)
    ]
    time.sleep(0.5)
    go.touch()
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and out == b"ok\n", err.decode()
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("SELECT version FROM cm_schema_migrations ORDER BY 1").fetchall()
        assert [v for (v,) in rows] == [m.version for m in MIGRATIONS]
        assert migrate(conn) == 0  # idempotent


def test_a_newer_schema_is_refused(pg_url: str) -> None:
    PostgresStorage(pg_url).close()
    with psycopg.connect(pg_url) as conn:
        conn.execute(
            "INSERT INTO cm_schema_migrations (version, description) VALUES (%s, 'future')",
            (SCHEMA_VERSION + 1,),
        )
    with pytest.raises(StorageError, match="newer"):
        PostgresStorage(pg_url)


def test_a_missing_schema_is_reported(pg_server: str) -> None:
    from tests.pg_fixtures import schema_url

    with pytest.raises(StorageError, match="no schema"):
        PostgresStorage(schema_url(pg_server, "cm_no_such_schema"))


@pytest.mark.slow
def test_sigkilled_writer_loses_no_acknowledged_event(pg_url: str) -> None:
    rng = random.Random(20251202)
    acked: dict[str, int] = {}
    user = "dur_user"  # the user run_and_kill's child writes for
    for trial in range(8):
        acked.update(run_and_kill(pg_url, f"t{trial}", rng.randrange(10**9), rng.uniform(0, 0.5)))
        with MemoryStore(pg_url, derivation_version="1") as store:
            events = store.events(user)
            assert_chain(events)
            by_artifact = {e.artifact_id: e.seq for e in events if isinstance(e, SignalEvent)}
            assert len(by_artifact) == len(events)
            missing = {a: s for a, s in acked.items() if by_artifact.get(a) != s}
            assert not missing, f"trial {trial}: acknowledged events lost: {missing}"
            assert observe(store, user) == observe_from_scratch(store, user)
    assert len(acked) > 8


ERASER = textwrap.dedent(
    """
    import sys
    from creative_memory import MemoryStore
    url, rounds = sys.argv[1], int(sys.argv[2])
    store = MemoryStore(url, derivation_version="1")
    n = 0
    for _ in range(rounds):
        n += store.forget("race", "layout", "doomed")
    print(n)
    """
)


def test_erasure_racing_appends_from_another_process(pg_url: str) -> None:
    eraser = subprocess.Popen(
        [sys.executable, "-c", ERASER, pg_url, "150"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env(),
    )
    with MemoryStore(pg_url, derivation_version="1") as store:
        for i in range(300):
            pattern = "doomed" if i % 2 else "kept"
            sig = {
                "signal_type": "thumbs_up",
                "pattern": pattern,
                "preference_type": "layout",
                "polarity": "positive",
                "scope": "global",
                "artifact_id": f"a{i}",
            }
            store.ingest_signal("race", sig)  # may be erased at once: no record asserted
        out, err = eraser.communicate(timeout=300)
        assert eraser.returncode == 0, err.decode()
        assert int(out) > 0, "the eraser never erased anything while appends ran"
        store.forget("race", "layout", "doomed")
        events = store.events("race")
        assert_chain(events)  # seq strictly increasing, chain re-linked after each erasure
        kept = [e.artifact_id for e in events if isinstance(e, SignalEvent)]
        assert kept == [f"a{i}" for i in range(0, 300, 2)]  # every kept event, in order
        store.ingest_signal("race", _sig("after"))
        assert store.events("race")[-1].seq == 301  # 300 used, none reused
        assert observe(store, "race") == observe_from_scratch(store, "race")


def kill_connections(url: str) -> None:
    """Terminate every server connection of this test's URL (a restart or failover)."""
    with psycopg.connect(url, autocommit=True) as admin:
        app = admin.execute("SHOW application_name").fetchone()
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = %s AND pid <> pg_backend_pid()",
            (app[0] if app else "",),
        )


@pytest.mark.slow
def test_terminated_connections_are_replaced(pg_url: str) -> None:
    """Writes ping their connection first and replace a dead one; reads do so after a
    second of idleness (so steady traffic pays no extra round trip) and can fail once on
    a connection that died within that second."""
    from creative_memory.engine.events import SignalEvent as Sig

    def ev(p: str) -> Sig:
        at = "2025-01-01T00:00:00.000Z"
        return Sig(
            at=at,
            recorded_at=at,
            signal_type="explicit_tag",
            preference_type="layout",
            pattern=p,
            polarity="positive",
            scope="global",
        )

    with PostgresStorage(pg_url) as st:
        st.append("u", [ev("a")])
        kill_connections(pg_url)
        assert [e.seq for e in st.append("u", [ev("b")])] == [2]  # at once: a write
        kill_connections(pg_url)
        time.sleep(1.2)
        assert len(st.read_events("u").events) == 2  # an idle connection is pinged
        kill_connections(pg_url)
        failures = 0
        for _ in range(3):  # a read right away: at most one failure, then a new connection
            try:
                assert len(st.read_events("u").events) == 2
                break
            except StorageError:
                failures += 1
        assert failures <= 1
    with MemoryStore(pg_url, derivation_version="1") as store:
        store.ingest_signal("u", _sig("c"))
        kill_connections(pg_url)
        time.sleep(1.2)
        store.ingest_signal("u", _sig("d"))
        assert [e.seq for e in store.events("u")] == [1, 2, 3, 4]


def _sig(pattern: str) -> dict[str, Any]:
    return {
        "signal_type": "explicit_tag",
        "pattern": pattern,
        "preference_type": "layout",
        "polarity": "positive",
        "scope": "global",
    }
