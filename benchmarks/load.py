"""Load test for the local daemon: ``python benchmarks/load.py``.

Starts ``creative-memory serve`` on a loopback port with a scratch data dir (once per
derivation version asked for, ``--versions 3,1``), then drives it with concurrent clients
(default 16, one keep-alive connection each, spread over ``--processes`` client processes so
that the client is not the bottleneck; each speaks HTTP/1.1 over a raw socket with the
request bytes built once):

1. **ingest** — every client POSTs single wire-format events (explicit tags on distinct
   artifacts, spread over a pool of patterns, some in projects); fsync per event;
2. **retrieve** — every client GETs the generation block for a project;
3. **mixed** — half the clients ingest while the other half retrieve.

Between 1 and 2 it times the first read of each project's block on its own: the derivation
of what phase 1 appended (lazy, unless ``--derivation background`` did it already).

It prints requests/s with p50/p99 (ms) per phase, the CPU seconds the client processes and
the daemon used in the phase (so a client-bound run shows), the raw fsync-append rate of the
data dir's filesystem measured just before each daemon starts (the reference: one thread,
an event-sized line, an fsync per write), counts errors (any non-2xx, a
transport error, or an event the capture layer did not accept) and, after a graceful
shutdown (SIGTERM), reopens the store and checks that every acknowledged event is in the
user's event log. Exit status 0 only with zero errors and nothing missing.

Traffic goes to 127.0.0.1 only; every loop is bounded by a request count and a deadline.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import signal
import socket
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
from storage import raw_fsync_rate  # noqa: E402  (benchmarks/storage.py)

RAW_WRITES = 2000  # fsync-appends of the raw reference (about half a second)

PATTERNS = [f"pattern_{i:02d}" for i in range(24)]
TYPES = ["color", "layout", "typography", "imagery"]
PROJECTS = [None, None, "landing", "festival"]
TAGS = ["love this", "too noisy", "keep this style", "too crowded"]
USER = "bench"  # the served user; every event names it (the daemon fills in no user_id)
CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- the client --------------------------------------------------------------------------------
class Conn:
    """One keep-alive HTTP/1.1 connection over a raw socket (Content-Length bodies only)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock = self._connect()
        self.buf = b""

    def _connect(self) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=60)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def roundtrip(self, request: bytes) -> tuple[int, bytes]:
        for attempt in (1, 2):
            try:
                return self._roundtrip(request)
            except (ConnectionError, EOFError):
                # the server closed an idle keep-alive connection; reconnect once
                self.sock.close()
                self.sock, self.buf = self._connect(), b""
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _roundtrip(self, request: bytes) -> tuple[int, bytes]:
        self.sock.sendall(request)
        buf = self.buf
        while (end := buf.find(b"\r\n\r\n")) < 0:
            buf += self._recv()
        head = buf[:end].lower()
        status = int(head[9:12])
        at = head.find(b"\r\ncontent-length:")
        length = int(head[at + 17 : head.find(b"\r\n", at + 2)]) if at >= 0 else 0
        body_end = end + 4 + length
        while len(buf) < body_end:
            buf += self._recv()
        self.buf = buf[body_end:]
        return status, buf[end + 4 : body_end]

    def _recv(self) -> bytes:
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("connection closed")
        return data

    def close(self) -> None:
        self.sock.close()


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


def http_request(port: int, token: str, method: str, path: str, body: bytes = b"") -> bytes:
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
    )
    if method == "POST":
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return (head + "\r\n").encode() + body


@dataclass
class Job:
    """One client connection's work: ``kind`` ingest or retrieve, ``count`` requests."""

    kind: str
    client: int
    start: int
    count: int


@dataclass
class Outcome:
    latencies_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    acknowledged: list[str] = field(default_factory=list)  # artifact ids accepted
    requests: dict[str, int] = field(default_factory=dict)
    kinds: dict[str, list[float]] = field(default_factory=dict)
    cpu_s: float = 0.0


def run_job(port: int, token: str, job: Job, deadline: float, out: Outcome, lock: Any) -> None:
    if job.kind == "ingest":
        evs = [event(job.client, i) for i in range(job.start, job.start + job.count)]
        reqs = [
            (
                http_request(port, token, "POST", "/api/v1/events", json.dumps(ev).encode()),
                ev["artifact_id"],
            )
            for ev in evs
        ]
    else:
        reqs = []
        for i in range(job.count):
            project = PROJECTS[(job.client + i) % len(PROJECTS)]
            path = "/api/v1/prompt" + (f"?project_id={project}" if project else "")
            reqs.append((http_request(port, token, "GET", path), None))
    lat: list[float] = []
    errs: list[str] = []
    acks: list[str] = []
    conn = Conn(port)
    try:
        for req, artifact in reqs:
            if time.monotonic() > deadline:
                break
            t0 = time.perf_counter()
            try:
                status, body = conn.roundtrip(req)
            except Exception as exc:
                errs.append(f"{job.kind} transport error: {exc!r}")
                continue
            lat.append((time.perf_counter() - t0) * 1000)
            if status != 200:
                errs.append(f"{job.kind} HTTP {status}: {body[:200]!r}")
            elif artifact is not None:
                if b'"accepted":1,' not in body:
                    errs.append(f"{job.kind} not accepted: {body[:300]!r}")
                else:
                    acks.append(artifact)
    finally:
        conn.close()
        with lock:
            out.kinds.setdefault(job.kind, []).extend(lat)
            out.requests[job.kind] = out.requests.get(job.kind, 0) + len(lat)
            out.errors.extend(errs)
            out.acknowledged.extend(acks)


def client_process(
    port: int, token: str, jobs: list[Job], max_s: float, go: Any, results: Any
) -> None:
    """A client process: one thread per job, started together when ``go`` is set."""
    out = Outcome()
    lock = threading.Lock()
    go.wait()
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    deadline = time.monotonic() + max_s
    threads = [
        threading.Thread(target=run_job, args=(port, token, j, deadline, out, lock)) for j in jobs
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    out.cpu_s = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    results.put(out)


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def run_phase(
    port: int, token: str, jobs: list[Job], processes: int, max_s: float, server_pid: int
) -> tuple[Outcome, float, float]:
    """Run ``jobs`` over ``processes`` client processes; (merged outcome, wall s, server
    CPU s) of the phase."""
    ctx = mp.get_context("fork")
    go, results = ctx.Event(), ctx.Queue()
    shares = [jobs[i::processes] for i in range(processes) if jobs[i::processes]]
    procs = [
        ctx.Process(target=client_process, args=(port, token, s, max_s, go, results))
        for s in shares
    ]
    for p in procs:
        p.start()
    time.sleep(0.3)  # let them fork and build their requests' bytes
    server0 = proc_cpu_s(server_pid)
    t0 = time.perf_counter()
    go.set()
    merged = Outcome()
    for _ in procs:
        out: Outcome = results.get(timeout=max_s + 60)
        for kind, lat in out.kinds.items():
            merged.kinds.setdefault(kind, []).extend(lat)
        for kind, n in out.requests.items():
            merged.requests[kind] = merged.requests.get(kind, 0) + n
        merged.errors += out.errors
        merged.acknowledged += out.acknowledged
        merged.cpu_s += out.cpu_s
    secs = time.perf_counter() - t0
    server_cpu = proc_cpu_s(server_pid) - server0
    for p in procs:
        p.join()
    return merged, secs, server_cpu


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


# -- the daemon -------------------------------------------------------------------------------
def start_daemon(
    data_dir: Path, version: str | None, args: argparse.Namespace, log_path: Path
) -> tuple[subprocess.Popen[bytes], int]:
    env = {**os.environ, "CREATIVE_MEMORY_USER": USER}
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "creative_memory.cli.daemon", "serve"]
    if version:
        cmd += ["--derivation-version", version]
    cmd += ["--data-dir", str(data_dir), "--port", "0", "--alarm-ms", str(args.alarm_ms)]
    cmd += ["--log-level", "warning"]
    if args.derivation != "lazy":  # the default (and a daemon older than the flag)
        cmd += ["--derivation", args.derivation]
    log = log_path.open("wb")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, env=env)
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
            status, _ = Conn(port).roundtrip(
                f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
            )
            if status == 200:
                return proc, port
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("the daemon does not answer /healthz")
        time.sleep(0.05)


def phase_result(out: Outcome, kind: str, secs: float, server_cpu: float) -> dict[str, Any]:
    lat = out.kinds.get(kind, [])
    return {
        "requests": len(lat),
        "seconds": round(secs, 3),
        "requests_per_s": round(len(lat) / secs, 1),
        "p50_ms": round(pct(lat, 50), 2),
        "p99_ms": round(pct(lat, 99), 2),
        "client_cpu_s": round(out.cpu_s, 3),
        "server_cpu_s": round(server_cpu, 3),
    }


def run_version(version: str | None, args: argparse.Namespace, base: Path) -> dict[str, Any]:
    data_dir = base / f"data-v{version or 'default'}"
    log_path = base / f"daemon-v{version or 'default'}.log"
    token = DaemonFiles(data_dir).token_for(USER)
    assert token is not None
    # the reference, on the same filesystem in the same minute: one thread appending an
    # event-sized line with an fsync after each (what one fsync per request would allow)
    raw = raw_fsync_rate(base / "raw-fsync.jsonl", RAW_WRITES)
    (base / "raw-fsync.jsonl").unlink()
    proc, port = start_daemon(data_dir, version, args, log_path)
    results: dict[str, Any] = {
        "version": version or "default",
        "port": port,
        "raw_fsync_lines_per_s": round(raw, 1),
    }
    acknowledged: list[str] = []
    errors: list[str] = []
    n, k = args.clients, args.processes
    try:
        jobs = [Job("ingest", c, 0, args.ingest) for c in range(n)]
        out, secs, scpu = run_phase(port, token, jobs, k, args.max_seconds, proc.pid)
        results["ingest"] = phase_result(out, "ingest", secs, scpu)
        acknowledged += out.acknowledged
        errors += out.errors

        # the first read after the ingest phase derives what it appended (lazily, unless
        # --derivation background did already): timed on its own, then one per project
        conn = Conn(port)
        firsts = []
        for project in dict.fromkeys(PROJECTS):
            path = "/api/v1/prompt" + (f"?project_id={project}" if project else "")
            t0 = time.perf_counter()
            status, body = conn.roundtrip(http_request(port, token, "GET", path))
            firsts.append(round((time.perf_counter() - t0) * 1000, 2))
            if status != 200:
                errors.append(f"first read HTTP {status}: {body[:200]!r}")
        conn.close()
        results["first_reads_ms"] = firsts

        jobs = [Job("retrieve", c, 0, args.retrieve) for c in range(n)]
        out, secs, scpu = run_phase(port, token, jobs, k, args.max_seconds, proc.pid)
        results["retrieve"] = phase_result(out, "retrieve", secs, scpu)
        errors += out.errors

        half = max(1, n // 2)
        jobs = [Job("ingest", c, args.ingest, args.ingest // 2) for c in range(half)]
        jobs += [Job("retrieve", c, 0, args.retrieve // 2) for c in range(half, n)]
        # interleave so every client process carries both kinds
        jobs = [j for pair in zip(jobs[:half], jobs[half:], strict=False) for j in pair]
        out, secs, scpu = run_phase(port, token, jobs, k, args.max_seconds, proc.pid)
        ing, ret = out.kinds.get("ingest", []), out.kinds.get("retrieve", [])
        results["mixed"] = {
            "ingest_requests_per_s": round(len(ing) / secs, 1),
            "retrieve_requests": len(ret),
            "retrieve_p50_ms": round(pct(ret, 50), 2),
            "retrieve_p99_ms": round(pct(ret, 99), 2),
            "client_cpu_s": round(out.cpu_s, 3),
            "server_cpu_s": round(scpu, 3),
            "seconds": round(secs, 3),
        }
        acknowledged += out.acknowledged
        errors += out.errors
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            errors.append("the daemon did not shut down within 60 s")

    # every acknowledged event is in the log after a graceful shutdown
    store = MemoryStore(data_dir, derivation_version=version)
    stored = [e.artifact_id for e in store.events(USER) if isinstance(e, SignalEvent)]
    missing = sorted(set(acknowledged) - set(stored))
    slow = 0
    if log_path.exists():
        slow = log_path.read_text(errors="replace").count('"slow_retrieval"')
    results.update(
        {
            "acknowledged_events": len(acknowledged),
            "stored_signal_events": len(stored),
            "missing_events": len(missing),
            "errors": len(errors),
            "error_samples": errors[:10],
            "missing_samples": missing[:10],
            "slow_retrieval_warnings": slow,
            "records": len(store.list_preferences(USER)),
        }
    )
    return results


def print_version(r: dict[str, Any], args: argparse.Namespace) -> None:
    ncpu = os.cpu_count() or 1

    def cpu(p: dict[str, Any]) -> str:
        share = p["client_cpu_s"] / (p["seconds"] * ncpu) * 100
        return (
            f"  CPU client {p['client_cpu_s']:.2f} s ({share:.0f}% of {ncpu} CPUs), "
            f"daemon {p['server_cpu_s']:.2f} s"
        )

    i, q, m = r["ingest"], r["retrieve"], r["mixed"]
    print(
        f"derivation version {r['version']}, --derivation {args.derivation}: {args.clients} "
        f"clients in {args.processes} processes, 127.0.0.1"
    )
    firsts = ", ".join(f"{ms:.2f}" for ms in r["first_reads_ms"])
    for name, p in (("ingest", i), ("retrieve", q)):
        print(
            f"  {name:9} {p['requests']:6d} requests in {p['seconds']:6.2f} s  "
            f"{p['requests_per_s']:8.1f} req/s  p50 {p['p50_ms']:6.2f} ms  "
            f"p99 {p['p99_ms']:6.2f} ms" + cpu(p)
        )
        if name == "ingest":
            raw = r["raw_fsync_lines_per_s"]
            print(
                f"  raw fsync-append rate on this filesystem just before: {raw:,.0f} lines/s "
                f"(ingest / raw {p['requests_per_s'] / raw:.2f}: a batch shares one fsync)"
            )
            print(f"  first reads after it (global, then each project): {firsts} ms")
    print(
        f"  mixed     ingest {m['ingest_requests_per_s']:.1f} req/s while retrieving: "
        f"p50 {m['retrieve_p50_ms']:.2f} ms  p99 {m['retrieve_p99_ms']:.2f} ms" + cpu(m)
    )
    print(
        f"  acknowledged {r['acknowledged_events']}, stored {r['stored_signal_events']}, "
        f"missing {r['missing_events']}; errors {r['errors']}; slow-retrieval warnings "
        f"{r['slow_retrieval_warnings']} (alarm {args.alarm_ms:g} ms); {r['records']} "
        "derived records"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--processes", type=int, default=2, help="client processes")
    ap.add_argument("--ingest", type=int, default=150, help="ingest requests per client")
    ap.add_argument("--retrieve", type=int, default=150, help="retrievals per client")
    ap.add_argument(
        "--versions",
        default="",
        help="comma-separated derivation versions, one daemon each (default: the default one)",
    )
    ap.add_argument("--derivation", choices=["lazy", "background"], default="lazy")
    ap.add_argument("--max-seconds", type=float, default=120, help="deadline per phase")
    ap.add_argument("--alarm-ms", type=float, default=50.0)
    ap.add_argument("--data-dir", type=Path, help="keep the data here (default: a temp dir)")
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    args = ap.parse_args()

    tmp = None
    if args.data_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="creative-memory-load-")
        base = Path(tmp.name)
    else:
        base = args.data_dir
        base.mkdir(parents=True, exist_ok=True)
    versions = [v.strip() for v in args.versions.split(",") if v.strip()] or [None]
    runs = [run_version(v, args, base) for v in versions]
    if args.json:
        # the first run's figures at the top level too (one version: the whole answer)
        doc = {**runs[0], "clients": args.clients, "processes": args.processes,
               "derivation": args.derivation, "runs": runs}  # fmt: skip
        print(json.dumps(doc, indent=2))
    else:
        for r in runs:
            print_version(r, args)
    failed = False
    for r in runs:
        for e in r["error_samples"]:
            print("error:", e, file=sys.stderr)
        if r["missing_samples"]:
            print("missing:", r["missing_samples"], file=sys.stderr)
        failed |= bool(r["errors"] or r["missing_events"])
    if tmp is not None:
        tmp.cleanup()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
