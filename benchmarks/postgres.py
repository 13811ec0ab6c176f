"""PostgreSQL beside the file backend (issue 5; not a test). Prints figures and the machine.

  (a) durable ingest with 16 concurrent users: every user has its own writer issuing one
      ``ingest_signal`` at a time (each call returns only once the event is durable: fsync
      for files, COMMIT for PostgreSQL). Two layouts: one process with 16 threads sharing a
      ``MemoryStore`` (one daemon), and 4 processes x 4 users (replicas). events/s over all.
      With ``--baseline DIR`` (a checkout of an earlier revision, e.g. made with
      ``git worktree add /tmp/pg_before REV``) the PostgreSQL ingest of that code is measured
      in the same run, alternating with this code's, in child processes that import
      ``creative_memory`` from ``DIR/src``; ``--rounds N`` repeats both N times (median).
  (b) ``retrieve_for_injection`` p50/p99 for a user with 60 active patterns: warm (the same
      store, the in-process state is current) and "stateless replica" (a new
      ``MemoryStore`` per call: the derived state comes from the derivation cache in the
      backend, as on a replica that has not served this user yet).

PostgreSQL: ``--database URL`` (or ``CREATIVE_MEMORY_DATABASE_URL``); the benchmark works in
a schema of its own, dropped afterwards. Without a URL it starts a private throwaway cluster
(as the test suite does; needs the server binaries). The file backend uses a temp dir.

Run: ``.venv/bin/python benchmarks/postgres.py [--database URL] [--events-per-user N]
[--baseline DIR] [--rounds N] [--ingest-only]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.pg_fixtures import PrivateCluster, find_bindir, fresh_schema  # noqa: E402

from creative_memory import MemoryStore  # noqa: E402

TYPES = ["layout", "color", "typography", "motion", "mood"]
USERS = 16


def signal(user: str, i: int) -> dict[str, Any]:
    return {
        "signal_type": ("explicit_tag", "thumbs_up", "thumbs_down")[i % 3],
        "pattern": f"pat_{i % 40:02d}",
        "preference_type": TYPES[i % len(TYPES)],
        "polarity": "negative" if i % 3 == 2 else "positive",
        "scope": "global" if i % 4 else "project",
        "project_id": "proj",
        "artifact_id": f"{user}-{i}",
    }


def warm_up(store: MemoryStore, users: list[str]) -> None:
    """Connect, migrate, create the users and open as many connections as there are
    writers (all at once, as in steady traffic) outside the timing."""
    for u in users:
        store.ingest_signal(u, signal(u, -2))
    threads = [threading.Thread(target=store.ingest_signal, args=(u, signal(u, -1))) for u in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def run_writers(root: str, users: list[str], per_user: int) -> float:
    """One thread per user, one durable ``ingest_signal`` at a time; returns seconds."""
    store = MemoryStore(root, derivation_version="1")
    warm_up(store, users)
    barrier = threading.Barrier(len(users) + 1)
    errors: list[BaseException] = []

    def work(user: str) -> None:
        barrier.wait()
        try:
            for i in range(per_user):
                store.ingest_signal(user, signal(user, i))
        except BaseException as exc:  # pragma: no cover - reported
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(u,)) for u in users]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    store.close()
    if errors:
        raise errors[0]
    return elapsed


def child_main(argv: list[str]) -> None:
    root, per_user, go = argv[0], int(argv[1]), argv[2]
    users = argv[3:]
    store = MemoryStore(root, derivation_version="1")
    warm_up(store, users)
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.0005)
    t0 = time.time()

    def work(user: str) -> None:
        for i in range(per_user):
            store.ingest_signal(user, signal(user, i))

    threads = [threading.Thread(target=work, args=(u,)) for u in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"start": t0, "end": time.time()}), flush=True)
    store.close()


def run_processes(
    root: str, users: list[str], per_user: int, processes: int, src: Path = REPO / "src"
) -> float:
    """``processes`` child processes, each with one writer thread per user of its share,
    importing ``creative_memory`` from ``src``; seconds from the first start to the last
    end."""
    go = Path(tempfile.mkdtemp(prefix="cm-bench-go-")) / "go"
    groups = [users[k::processes] for k in range(processes)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), str(REPO)]))
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--child", root, str(per_user), str(go), *g],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        for g in groups
    ]
    for p in procs:
        assert p.stdout is not None
        line = p.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(p.stderr.read() if p.stderr else line)
    go.touch()
    spans = []
    for p in procs:
        out, err = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise RuntimeError(err)
        spans.append(json.loads(out.strip().splitlines()[-1]))
    return float(max(s["end"] for s in spans) - min(s["start"] for s in spans))


def build_active60(store: MemoryStore, user: str) -> None:
    sigs = [
        {
            "signal_type": "explicit_tag",
            "pattern": f"active_{i:02d}",
            "preference_type": TYPES[i % len(TYPES)],
            "polarity": "negative" if i % 3 == 0 else "positive",
            "scope": "global",
            "timestamp": "2025-01-01T00:00:00Z",
        }
        for i in range(60)
        for _ in range(3)
    ]
    store.ingest_signals(user, sigs)


def percentiles(samples: list[float]) -> tuple[float, float]:
    qs = statistics.quantiles(samples, n=100, method="inclusive")
    return statistics.median(samples) * 1e3, qs[98] * 1e3


def retrieval(root: str, n: int) -> dict[str, tuple[float, float]]:
    user = "active60"
    store = MemoryStore(root, derivation_version="1")
    build_active60(store, user)
    store.retrieve_for_injection(user)  # derive and write back
    out: dict[str, tuple[float, float]] = {}
    warm = []
    for _ in range(n):
        t = time.perf_counter()
        store.retrieve_for_injection(user)
        warm.append(time.perf_counter() - t)
    out["warm"] = percentiles(warm)
    store.close()
    fresh = []
    for _ in range(max(50, n // 10)):
        s = MemoryStore(root, derivation_version="1")
        s.get_settings(user)  # connection set-up is not part of the read
        t = time.perf_counter()
        s.retrieve_for_injection(user)  # no in-process state: served from the cache
        fresh.append(time.perf_counter() - t)
        s.close()
    out["replica"] = percentiles(fresh)
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child_main(sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--database", default=os.environ.get("CREATIVE_MEMORY_DATABASE_URL"))
    ap.add_argument("--events-per-user", type=int, default=150)
    ap.add_argument("--retrievals", type=int, default=2000)
    ap.add_argument("--baseline", type=Path, help="a checkout of an earlier revision")
    ap.add_argument("--rounds", type=int, default=1, help="PostgreSQL ingest repetitions")
    ap.add_argument("--ingest-only", action="store_true", help="skip (b)")
    args = ap.parse_args()
    if args.baseline is not None and not (args.baseline / "src" / "creative_memory").is_dir():
        sys.exit(f"--baseline {args.baseline}: no src/creative_memory there")

    cluster: PrivateCluster | None = None
    server = args.database
    if not server:
        bindir = find_bindir()
        if bindir is None:
            sys.exit("no PostgreSQL: pass --database URL or install the server binaries")
        cluster = PrivateCluster(bindir)
        server = cluster.start()
    users = [f"user{i:02d}" for i in range(USERS)]
    per_user = args.events_per_user
    columns = ["files", "postgres"] + (["postgres (baseline)"] if args.baseline else [])
    rows: list[list[str]] = []
    try:
        version = pg_version(server)
        ingested: dict[str, list[dict[str, float]]] = {c: [] for c in columns}
        ingested["files"].append(ingest("files", server, users, per_user, None))
        for _ in range(max(1, args.rounds)):  # alternating, so load drifts hit both alike
            ingested["postgres"].append(ingest("postgres", server, users, per_user, None))
            if args.baseline is not None:
                src = args.baseline / "src"
                ingested["postgres (baseline)"].append(
                    ingest("postgres", server, users, per_user, src)
                )
        for layout in layouts(users, 1):
            cells = [statistics.median(r[layout] for r in ingested[c]) for c in columns]
            rows.append(
                [f"(a) durable ingest, 16 users, {layout}"] + [f"{v:,.0f} events/s" for v in cells]
            )
        if not args.ingest_only:
            retrieved = {}
            for kind in ("files", "postgres"):
                with backend_root(kind, server) as root:
                    retrieved[kind] = retrieval(root, args.retrievals)
            for mode, label in (
                ("warm", "(b) retrieve p50 / p99, warm store"),
                ("replica", "(b) retrieve p50 / p99, no in-process state (stateless replica)"),
            ):
                f, p = retrieved["files"][mode], retrieved["postgres"][mode]
                rows.append(
                    [label, f"{f[0]:.2f} / {f[1]:.2f} ms", f"{p[0]:.2f} / {p[1]:.2f} ms"]
                    + ["-"] * (len(columns) - 2)
                )
    finally:
        if cluster is not None:
            cluster.stop()
    print(
        f"machine: {platform.platform()} | {os.cpu_count()} logical CPUs | "
        f"Python {platform.python_version()}"
    )
    print(f"postgres: {version}{' (private cluster, default settings)' if cluster else ''}")
    if args.baseline is not None:
        print(f"baseline: {args.baseline} ({git_rev(args.baseline)}); this code: {git_rev(REPO)}")
    print(
        f"{per_user} events per user, {args.retrievals} warm retrievals, "
        f"PostgreSQL ingest: median of {max(1, args.rounds)} round(s)"
    )
    width = max(len(r[0]) for r in rows)
    print(f"{'measurement':<{width}}" + "".join(f"  {c:>22}" for c in columns))
    for label, *texts in rows:
        print(f"{label:<{width}}" + "".join(f"  {t:>22}" for t in texts))


def git_rev(path: Path) -> str:
    """The short commit of a checkout (``+`` when it has uncommitted changes)."""
    try:
        rev = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(path), "status", "--porcelain", "--", "src", "benchmarks"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return rev + ("+" if dirty else "")


def layouts(
    users: list[str], per_user: int, src: Path | None = None
) -> dict[str, Callable[[str], float]]:
    """The ingest layouts; with ``src`` both run in child processes importing from it."""
    if src is None:
        return {
            "1 process x 16 threads": lambda root: run_writers(root, users, per_user),
            "4 processes x 4 threads": lambda root: run_processes(root, users, per_user, 4),
        }
    return {
        "1 process x 16 threads": lambda root: run_processes(root, users, per_user, 1, src),
        "4 processes x 4 threads": lambda root: run_processes(root, users, per_user, 4, src),
    }


def ingest(kind: str, server: str, users: list[str], per_user: int, src: Path | None) -> Any:
    """events/s per layout for one backend (``src``: the code to import, in children)."""
    out: dict[str, float] = {}
    for layout, fn in layouts(users, per_user, src).items():
        with backend_root(kind, server) as root:
            out[layout] = len(users) * per_user / fn(root)
    return out


class backend_root:
    """A fresh root: a temp dir, or a fresh schema on the server."""

    def __init__(self, kind: str, server: str) -> None:
        self.kind, self.server = kind, server

    def __enter__(self) -> str:
        if self.kind == "files":
            self._tmp = tempfile.TemporaryDirectory(prefix="cm-bench-")
            return self._tmp.name
        self._schema = fresh_schema(self.server)
        return self._schema.__enter__()

    def __exit__(self, *exc: object) -> None:
        if self.kind == "files":
            self._tmp.cleanup()
        else:
            self._schema.__exit__(None, None, None)


def pg_version(url: str) -> str:
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute("SHOW server_version").fetchone()
        sync = conn.execute("SHOW synchronous_commit").fetchone()
        fsync = conn.execute("SHOW fsync").fetchone()
    return (
        f"PostgreSQL {row[0] if row else '?'}, synchronous_commit="
        f"{sync[0] if sync else '?'}, fsync={fsync[0] if fsync else '?'}"
    )


if __name__ == "__main__":
    main()
