"""Load test for the local daemon (issue 4): ``python benchmarks/load.py``.

Starts ``creative-memory serve`` on a loopback port with a scratch data dir, then drives it
with concurrent clients (default 16, one keep-alive connection each):

1. **ingest** — every client POSTs single wire-format events (explicit tags on distinct
   artifacts, spread over a pool of patterns, some in projects);
2. **retrieve** — every client GETs the generation block for a project;
3. **mixed** — half the clients ingest while the other half retrieve.

It prints ingest requests/s and retrieval p50/p99 (ms) per phase, counts errors (any non-2xx,
transport error, or an event the capture layer did not accept) and, after a graceful
shutdown (SIGTERM), reopens the store and checks that every acknowledged event is present
in the user's event log. Exit status 0 only with zero errors and nothing missing.

Traffic goes to 127.0.0.1 only; every loop is bounded by a request count and a deadline.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from creative_memory import MemoryStore  # noqa: E402
from creative_memory.engine.events import SignalEvent  # noqa: E402
from creative_memory.http import DaemonFiles  # noqa: E402

PATTERNS = [f"pattern_{i:02d}" for i in range(24)]
TYPES = ["color", "layout", "typography", "imagery"]
PROJECTS = [None, None, "landing", "festival"]
TAGS = ["love this", "too noisy", "keep this style", "too crowded"]
USER = "bench"  # the served user; every event names it (the daemon fills in no user_id)


@dataclass
class Stats:
    latencies_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    acknowledged: list[str] = field(default_factory=list)  # artifact ids accepted
    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def merge(self, lat: list[float], errs: list[str], acks: list[str], n: int) -> None:
        with self.lock:
            self.latencies_ms.extend(lat)
            self.errors.extend(errs)
            self.acknowledged.extend(acks)
            self.requests += n


class Client:
    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        for attempt in (1, 2):
            try:
                self.conn.request(method, path, body=body, headers=self.headers)
                resp = self.conn.getresponse()
                return resp.status, resp.read()
            except (ConnectionError, http.client.HTTPException):
                # the server closed an idle keep-alive connection; reconnect once
                self.conn.close()
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.conn.close()


def event(client: int, i: int) -> dict[str, Any]:
    n = client * 100_003 + i
    return {
        "event": "explicit_tag_applied",
        "user_id": USER,
        "artifact_id": f"c{client}-a{i}",
        "session_id": f"c{client}",
        "project_id": PROJECTS[n % len(PROJECTS)],
        "timestamp": "2026-03-01T10:00:00Z",
        "tag_text": TAGS[n % len(TAGS)],
        "artifact_meta": {
            "signals": [
                {"preference_type": TYPES[n % len(TYPES)], "pattern": PATTERNS[n % len(PATTERNS)]}
            ]
        },
    }


def ingest_worker(
    port: int, token: str, client: int, start: int, count: int, deadline: float, stats: Stats
) -> None:
    c = Client(port, token)
    lat: list[float] = []
    errs: list[str] = []
    acks: list[str] = []
    n = 0
    try:
        for i in range(start, start + count):
            if time.monotonic() > deadline:
                break
            ev = event(client, i)
            t0 = time.perf_counter()
            try:
                status, body = c.request("POST", "/api/v1/events", json.dumps(ev).encode())
            except Exception as exc:
                errs.append(f"ingest transport error: {exc!r}")
                continue
            lat.append((time.perf_counter() - t0) * 1000)
            n += 1
            if status != 200:
                errs.append(f"ingest HTTP {status}: {body[:200]!r}")
                continue
            report = json.loads(body)
            if report.get("accepted") != 1:
                errs.append(f"ingest not accepted: {report.get('results')}")
                continue
            acks.append(ev["artifact_id"])
    finally:
        c.close()
        stats.merge(lat, errs, acks, n)


def retrieve_worker(
    port: int, token: str, client: int, count: int, deadline: float, stats: Stats
) -> None:
    c = Client(port, token)
    lat: list[float] = []
    errs: list[str] = []
    n = 0
    try:
        for i in range(count):
            if time.monotonic() > deadline:
                break
            project = PROJECTS[(client + i) % len(PROJECTS)]
            path = "/api/v1/prompt" + (f"?project_id={project}" if project else "")
            t0 = time.perf_counter()
            try:
                status, body = c.request("GET", path)
            except Exception as exc:
                errs.append(f"retrieve transport error: {exc!r}")
                continue
            lat.append((time.perf_counter() - t0) * 1000)
            n += 1
            if status != 200:
                errs.append(f"retrieve HTTP {status}: {body[:200]!r}")
    finally:
        c.close()
        stats.merge(lat, errs, [], n)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def run_phase(threads: list[threading.Thread]) -> float:
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def start_daemon(
    data_dir: Path, alarm_ms: float, log_path: Path
) -> tuple[subprocess.Popen[bytes], int]:
    env = {**os.environ, "CREATIVE_MEMORY_USER": "bench"}
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    log = log_path.open("wb")
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
            "--alarm-ms",
            str(alarm_ms),
            "--log-level",
            "warning",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log,
        env=env,
    )
    files = DaemonFiles(data_dir)
    deadline = time.monotonic() + 30
    while True:
        info = files.read_server_info()
        if info and info.get("pid") == proc.pid:
            port = int(info["port"])
            break
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the daemon did not start; see {log_path}")
        time.sleep(0.05)
    while True:  # wait until it answers
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/healthz")
            if c.getresponse().status == 200:
                c.close()
                return proc, port
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("the daemon does not answer /healthz")
        time.sleep(0.05)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--ingest", type=int, default=150, help="ingest requests per client")
    ap.add_argument("--retrieve", type=int, default=150, help="retrievals per client")
    ap.add_argument("--max-seconds", type=float, default=120, help="deadline per phase")
    ap.add_argument("--alarm-ms", type=float, default=50.0)
    ap.add_argument("--data-dir", type=Path, help="keep the data here (default: a temp dir)")
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    args = ap.parse_args()

    tmp = None
    if args.data_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="creative-memory-load-")
        data_dir = Path(tmp.name) / "data"
    else:
        data_dir = args.data_dir
    log_path = data_dir.parent / "daemon.log"
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    token = DaemonFiles(data_dir).token_for("bench")
    assert token is not None
    proc, port = start_daemon(data_dir, args.alarm_ms, log_path)
    results: dict[str, Any] = {"clients": args.clients, "port": port}
    acknowledged: list[str] = []
    errors: list[str] = []
    try:
        # 1. ingest
        ing = Stats()
        deadline = time.monotonic() + args.max_seconds
        secs = run_phase(
            [
                threading.Thread(
                    target=ingest_worker,
                    args=(port, token, c, 0, args.ingest, deadline, ing),
                )
                for c in range(args.clients)
            ]
        )
        results["ingest"] = {
            "requests": ing.requests,
            "seconds": round(secs, 3),
            "requests_per_s": round(ing.requests / secs, 1),
            "p50_ms": round(pct(ing.latencies_ms, 50), 2),
            "p99_ms": round(pct(ing.latencies_ms, 99), 2),
        }
        acknowledged += ing.acknowledged
        errors += ing.errors

        # 2. retrieve
        ret = Stats()
        deadline = time.monotonic() + args.max_seconds
        secs = run_phase(
            [
                threading.Thread(
                    target=retrieve_worker, args=(port, token, c, args.retrieve, deadline, ret)
                )
                for c in range(args.clients)
            ]
        )
        results["retrieve"] = {
            "requests": ret.requests,
            "seconds": round(secs, 3),
            "requests_per_s": round(ret.requests / secs, 1),
            "p50_ms": round(pct(ret.latencies_ms, 50), 2),
            "p99_ms": round(pct(ret.latencies_ms, 99), 2),
        }
        errors += ret.errors

        # 3. mixed: half ingest, half retrieve
        mi, mr = Stats(), Stats()
        deadline = time.monotonic() + args.max_seconds
        half = max(1, args.clients // 2)
        threads = [
            threading.Thread(
                target=ingest_worker,
                args=(port, token, c, args.ingest, args.ingest // 2, deadline, mi),
            )
            for c in range(half)
        ] + [
            threading.Thread(
                target=retrieve_worker, args=(port, token, c, args.retrieve // 2, deadline, mr)
            )
            for c in range(half, args.clients)
        ]
        secs = run_phase(threads)
        results["mixed"] = {
            "ingest_requests_per_s": round(mi.requests / secs, 1),
            "retrieve_requests": mr.requests,
            "retrieve_p50_ms": round(pct(mr.latencies_ms, 50), 2),
            "retrieve_p99_ms": round(pct(mr.latencies_ms, 99), 2),
        }
        acknowledged += mi.acknowledged
        errors += mi.errors + mr.errors
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            errors.append("the daemon did not shut down within 60 s")

    # every acknowledged event is in the log after a graceful shutdown
    store = MemoryStore(data_dir)
    stored = [e.artifact_id for e in store.events("bench") if isinstance(e, SignalEvent)]
    missing = sorted(set(acknowledged) - set(stored))
    slow = 0
    if log_path.exists():
        for line in log_path.read_text(errors="replace").splitlines():
            if '"slow_retrieval"' in line:
                slow += 1
    results.update(
        {
            "acknowledged_events": len(acknowledged),
            "stored_signal_events": len(stored),
            "missing_events": len(missing),
            "errors": len(errors),
            "slow_retrieval_warnings": slow,
            "records": len(store.list_preferences("bench")),
        }
    )
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        i, r, m = results["ingest"], results["retrieve"], results["mixed"]
        print(f"creative-memory daemon load test: {args.clients} concurrent clients, 127.0.0.1")
        for name, p in (("ingest", i), ("retrieve", r)):
            print(
                f"{name:9} {p['requests']:6d} requests in {p['seconds']:6.2f} s  "
                f"{p['requests_per_s']:8.1f} req/s  p50 {p['p50_ms']:6.2f} ms  "
                f"p99 {p['p99_ms']:6.2f} ms"
            )
        print(
            f"mixed     ingest {m['ingest_requests_per_s']:.1f} req/s while retrieving: "
            f"p50 {m['retrieve_p50_ms']:.2f} ms  p99 {m['retrieve_p99_ms']:.2f} ms"
        )
        print(
            f"acknowledged {results['acknowledged_events']}, stored "
            f"{results['stored_signal_events']}, missing {results['missing_events']}; "
            f"errors {results['errors']}; slow-retrieval warnings {slow} "
            f"(alarm {args.alarm_ms:g} ms); {results['records']} derived records"
        )
    for e in errors[:10]:
        print("error:", e, file=sys.stderr)
    if missing:
        print("missing:", missing[:10], file=sys.stderr)
    if tmp is not None:
        tmp.cleanup()
    return 0 if not errors and not missing else 1


if __name__ == "__main__":
    sys.exit(main())
