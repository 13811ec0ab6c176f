"""Storage and derivation-cache benchmark (issue 7; not a test). Prints figures and the machine.

  (a) cold derivation of an N-event log (default 100,000): a fresh process opens a
      ``MemoryStore`` with NO derivation cache and no snapshot and times its first
      ``retrieve_for_injection`` (read + decode + fold + cache/snapshot write-back).
      Target <= 2 s for the default version.
  (b) "ingest 10 events then retrieve" on a warm N-event user vs a warm 1,000-event user;
      ratio big/small, target <= 2. Both users draw on the same 60-pattern vocabulary, so
      they have a similar number of derived records and the ratio isolates the length of
      the history (write-back and retrieval are O(records) by design). Three settings: the
      same in-process store (warm memo), a fresh ``MemoryStore`` in this process whose disk
      cache is warm, and a fresh process whose disk cache is warm (timed inside the child,
      interpreter start-up excluded).
  (c) warm ``retrieve_for_injection`` p50/p99 for a user with 60 active patterns.
      Target p99 <= 2 ms.
  (d) durable ingest throughput (fsync on every append): a single-threaded ``ingest_signal``
      loop, and batched ``ingest_signals``.
  (e) peak RSS (``VmHWM``, else ``ru_maxrss``) of the process that cold-derived the N-event
      user, next to the RSS of a process that only imported the package and opened a store.
  (f) concurrent durable appends to ONE user: 16 threads, one event per append, fsync on,
      with group commit (the default) and without it (``FileStorage.group_commit = False``:
      one write and one fsync per call, in turn), next to the raw rate of one thread doing
      ``write`` + ``fsync`` of one line on the same file system, measured in the same run;
      with the fsyncs per append each mode needed (docs/storage.md, "Group commit").

The big log is written straight through ``FileStorage.append`` in batches of 1,000 events
(one fsync per batch) so that building it does not take 100,000 fsyncs; the events are the
same as ``ingest_signal`` would store.

Run: ``.venv/bin/python benchmarks/storage.py [--events N] [--quick] [--concurrent-only]``
(``--concurrent-only``: just (f)). Uses a temporary directory, removed afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from creative_memory import DERIVATION_VERSION, MemoryStore
from creative_memory.engine.derivation.registry import known_versions
from creative_memory.engine.events import DecayPassEvent, Event, build_signal_event
from creative_memory.engine.timeutil import format_ts, parse_ts
from creative_memory.storage import FileStorage

BIG, SMALL, ACTIVE = "big", "small", "active60"
TYPES = ["layout", "color", "typography", "motion", "mood"]
SIGNALS = [
    ("explicit_tag", "positive"),
    ("thumbs_up", "positive"),
    ("repeated_acceptance", "positive"),
    ("manual_refinement", "positive"),
    ("thumbs_down", "negative"),
    ("single_rejection", "negative"),
    ("abandoned_generation", "negative"),
    ("explicit_tag", "negative"),
]
PROJECTS = [None, None, None, "proj_a", "proj_b", "proj_c"]
T0 = parse_ts("2025-01-01T00:00:00.000Z")
STEP_MS = 60_000  # one event a minute
ROOT_ENV = "CM_BENCH_SRC"


def load_versions() -> list[str]:
    with contextlib.suppress(ImportError):
        importlib.import_module("creative_memory.engine.derivation.v2")
    return list(known_versions())


# -- building logs ---------------------------------------------------------------------------
def synthetic_events(n: int, seed: int, n_patterns: int = 60) -> Iterator[Event]:
    """``n`` events as ``ingest_signal`` would store them: signals over ``n_patterns``
    patterns in the global bucket and three projects, plus a decay pass every 5,000."""
    rng = random.Random(seed)
    patterns = [(f"pat_{i:03d}", TYPES[i % len(TYPES)]) for i in range(n_patterns)]
    for i in range(n):
        t = T0 + i * STEP_MS
        ts = format_ts(t)
        if i and i % 5000 == 0:
            yield DecayPassEvent(at=ts, recorded_at=ts)
            continue
        pattern, ptype = rng.choice(patterns)
        signal_type, polarity = rng.choice(SIGNALS)
        project = rng.choice(PROJECTS)
        yield build_signal_event(
            {
                "signal_type": signal_type,
                "pattern": pattern,
                "preference_type": ptype,
                "polarity": polarity,
                "tag_text": "love this" if signal_type == "explicit_tag" else None,
                "scope": "project" if project else "global",
                "project_id": project,
                "artifact_id": f"art_{i}",
                "session_id": f"sess_{i // 50}",
                "timestamp": ts,
            },
            t,
            ts,
        )


def build_log(root: Path, user: str, n: int, seed: int) -> None:
    storage = FileStorage(root)
    batch: list[Event] = []
    for ev in synthetic_events(n, seed):
        batch.append(ev)
        if len(batch) == 1000:
            storage.append(user, batch)
            batch = []
    if batch:
        storage.append(user, batch)


def build_active60(store: MemoryStore, user: str) -> None:
    """60 patterns, each with three explicit tags (strength 0.45, above the threshold)."""
    signals = []
    for i in range(60):
        for k in range(3):
            signals.append(
                {
                    "signal_type": "explicit_tag",
                    "pattern": f"active_{i:02d}",
                    "preference_type": TYPES[i % len(TYPES)],
                    "polarity": "negative" if i % 3 == 0 else "positive",
                    "scope": "global",
                    "timestamp": format_ts(T0 + (i * 3 + k) * STEP_MS),
                }
            )
    store.ingest_signals(user, signals)


def drop_derived(root: Path, user: str) -> None:
    shutil.rmtree(root / user / "cache", ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        (root / user / "snapshot.json").unlink()


def ten_signals(tag: str, n: int = 10) -> list[dict[str, Any]]:
    return [
        {
            "signal_type": "thumbs_up",
            "pattern": f"pat_{i:03d}",
            "preference_type": TYPES[i % len(TYPES)],
            "polarity": "positive",
            "scope": "global",
            "artifact_id": f"{tag}_{i}",
        }
        for i in range(n)
    ]


def ingest10_then_retrieve(store: MemoryStore, user: str, tag: str) -> float:
    t = time.perf_counter()
    for sig in ten_signals(tag):
        store.ingest_signal(user, sig)
    store.retrieve_for_injection(user)
    return time.perf_counter() - t


# -- child processes (fresh interpreter, nothing in memory) ----------------------------------
def child_main(args: list[str]) -> None:
    mode, root, user, version = args[:4]
    load_versions()  # version modules register themselves on import
    t0 = time.perf_counter()
    store = MemoryStore(root, derivation_version=version)
    out: dict[str, Any] = {}
    if mode == "cold":
        store.retrieve_for_injection(user)
        out["seconds"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        store.retrieve_for_injection(user)
        out["second_call_s"] = time.perf_counter() - t1
    elif mode == "ingest10":
        out["seconds"] = ingest10_then_retrieve(store, user, args[4])
    elif mode == "baseline":
        out["seconds"] = 0.0
    out["maxrss_kb"] = peak_rss_kb()
    print(json.dumps(out))


def peak_rss_kb() -> int:
    """Peak resident set of this process in KiB. ``VmHWM`` belongs to the current address
    space only; ``ru_maxrss`` of an exec'd child may carry the forking parent's high-water
    mark on Linux, so it is only the fallback."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def run_child(*args: str) -> dict[str, Any]:
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", *args],
        capture_output=True,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.decode())
    result: dict[str, Any] = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    return result


# -- reporting -------------------------------------------------------------------------------
def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def fs_type(path: Path) -> str:
    best, kind = "", "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) > 2 and str(path).startswith(parts[1]) and len(parts[1]) > len(best):
                best, kind = parts[1], parts[2]
    return kind


def verdict(ok: bool) -> str:
    return "OK" if ok else "MISSES TARGET"


def median_of(fn: Callable[[], float], reps: int) -> float:
    return statistics.median(fn() for _ in range(reps))


def ms(s: float) -> str:
    return f"{s * 1000:.1f} ms"


RAW_LINE = b'{"kind":"signal","v":1,"seq":1,"pattern":"' + b"x" * 300 + b'"}\n'


def raw_fsync_rate(
    path: Path, writes: int, line: bytes = RAW_LINE, lines_per_write: int = 1
) -> float:
    """Lines per second that one thread appends to ``path`` (``O_APPEND``): ``writes``
    writes of ``lines_per_write`` copies of ``line``, an fsync after each write."""
    data = line * lines_per_write
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        t = time.perf_counter()
        for _ in range(writes):
            os.write(fd, data)
            os.fsync(fd)
        return writes * lines_per_write / (time.perf_counter() - t)
    finally:
        os.close(fd)


def concurrent_appends(
    root: Path, user: str, threads: int, per_thread: int, *, group: bool, records: bool
) -> tuple[float, float]:
    """(events per second, fsyncs per append) of ``threads`` threads each appending
    ``per_thread`` single events to one user's log."""
    store = MemoryStore(root, derivation_version="1")
    assert isinstance(store._storage, FileStorage)
    store._storage.group_commit = group
    sigs = ten_signals(f"c{user}", 50)
    store.ingest_signals(user, sigs[:1])  # the log and its header exist
    fsyncs = [0]
    real = os.fsync

    def counting(fd: int) -> None:
        fsyncs[0] += 1
        real(fd)

    start = threading.Barrier(threads + 1)

    def work(k: int) -> None:
        start.wait()
        for i in range(per_thread):
            store.ingest_signals(user, [sigs[(k + i) % len(sigs)]], records=records)

    pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for th in pool:
        th.start()
    os.fsync = counting  # type: ignore[assignment]
    try:
        start.wait()
        t = time.perf_counter()
        for th in pool:
            th.join()
        elapsed = time.perf_counter() - t
    finally:
        os.fsync = real
    n = threads * per_thread
    assert len(store.events(user)) == n + 1
    return n / elapsed, fsyncs[0] / n


def concurrent_section(tmp: Path, quick: bool) -> None:
    """(f): concurrent appends to one user, with and without group commit."""
    threads, per_thread = 16, 40 if quick else 150
    root = tmp / "concurrent"
    print(
        "(f) raw = one thread's write + fsync of one line on the same file system, right "
        "before and after each line (the mean; it moves on a shared disk)"
    )
    for label, group, records in (
        ("group commit (default), records=False (the capture path)", True, False),
        ("no group commit, records=False", False, False),
        ("group commit, records=True (ingest_signal: the user's lock is held)", True, True),
    ):
        raw_path = tmp / f"raw{int(group)}{int(records)}.jsonl"
        before = raw_fsync_rate(raw_path, 150 if quick else 300)
        rate, per = concurrent_appends(
            root, f"c{int(group)}{int(records)}", threads, per_thread, group=group, records=records
        )
        raw = (before + raw_fsync_rate(raw_path, 150 if quick else 300)) / 2
        print(
            f"(f) {threads} threads x {per_thread} single-event appends to one user, {label}: "
            f"{rate:,.0f} events/s, {per:.2f} fsyncs per append; raw {raw:,.0f} appends/s "
            f"-> {rate / raw:.2f} x raw"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=100_000, help="size of the big log")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, smaller log")
    parser.add_argument("--concurrent-only", action="store_true", help="only (f)")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        child_main(opts.child)
        return
    if opts.concurrent_only:
        tmp = Path(tempfile.mkdtemp(prefix="cm-bench-storage-"))
        try:
            print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            concurrent_section(tmp, opts.quick)
            print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    n_big = opts.events if not opts.quick or opts.events != 100_000 else 20_000
    reps = 3 if opts.quick else 7
    retrievals = 300 if opts.quick else 3000
    n_single, n_batched = (100, 2000) if opts.quick else (500, 20_000)
    versions = load_versions()
    default = DERIVATION_VERSION

    tmp = Path(tempfile.mkdtemp(prefix="cm-bench-storage-"))
    try:
        root = tmp / "root"
        print("creative-memory storage benchmark")
        print(
            f"machine: {platform.platform()} | {cpu_model()} | {os.cpu_count()} logical CPUs | "
            f"Python {platform.python_version()} ({platform.python_implementation()}) | "
            f"temp dir on {fs_type(tmp)}"
        )
        print(f"derivation versions: {', '.join(versions)} (default {default})")
        print("load average at start: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
        t = time.perf_counter()
        build_log(root, BIG, n_big, seed=1)
        build_log(root, SMALL, 1000, seed=2)
        log_mb = (root / BIG / "events.jsonl").stat().st_size / 1e6
        print(
            f"built a {n_big:,}-event log ({log_mb:.1f} MB) and a 1,000-event log "
            f"in {time.perf_counter() - t:.1f} s"
        )
        print()

        # (a) cold derivation, and (e) peak RSS of that process
        rss: dict[str, int] = {}
        for v in versions:
            runs = []
            for _ in range(1 if opts.quick else 3):
                drop_derived(root, BIG)
                runs.append(run_child("cold", str(root), BIG, v))
            best = min(r["seconds"] for r in runs)
            med = statistics.median(r["seconds"] for r in runs)
            rss[v] = max(r["maxrss_kb"] for r in runs)
            target = f"target <= 2 s: {verdict(med <= 2.0)}" if v == default else "no target"
            print(
                f"(a) cold derivation, {n_big:,} events, version {v}: median {med:.2f} s, "
                f"best {best:.2f} s over {len(runs)} fresh processes ({target}); "
                f"then a warm call {ms(runs[-1]['second_call_s'])}"
            )
        # leave the default version's cache warm for what follows
        drop_derived(root, BIG)
        MemoryStore(root, derivation_version=default).retrieve_for_injection(BIG)
        MemoryStore(root, derivation_version=default).retrieve_for_injection(SMALL)

        # (b) ingest 10 then retrieve: big vs small
        print()
        stores = {u: MemoryStore(root, derivation_version=default) for u in (BIG, SMALL)}
        for u, s in stores.items():
            s.retrieve_for_injection(u)
        counter = iter(range(10**9))

        def warm_store(u: str) -> float:
            return ingest10_then_retrieve(stores[u], u, f"w{next(counter)}")

        inproc = {u: median_of(lambda u=u: warm_store(u), reps) for u in (BIG, SMALL)}

        def fresh_store(u: str) -> float:
            MemoryStore(root, derivation_version=default).retrieve_for_injection(u)  # warm disk
            return ingest10_then_retrieve(
                MemoryStore(root, derivation_version=default), u, f"f{next(counter)}"
            )

        fresh = {u: median_of(lambda u=u: fresh_store(u), reps) for u in (BIG, SMALL)}

        def fresh_process(u: str) -> float:
            MemoryStore(root, derivation_version=default).retrieve_for_injection(u)  # warm disk
            r = run_child("ingest10", str(root), u, default, f"p{next(counter)}")
            return float(r["seconds"])

        proc = {u: median_of(lambda u=u: fresh_process(u), reps) for u in (BIG, SMALL)}
        records = {u: len(stores[u].list_preferences(u)) for u in (BIG, SMALL)}
        print(
            f"(b) both users draw on the same 60 patterns x 4 buckets: {records[BIG]:,} vs "
            f"{records[SMALL]:,} derived records, so the ratio isolates the history length"
        )
        for label, res in (
            ("same in-process store (warm memo)", inproc),
            ("fresh MemoryStore, warm disk cache", fresh),
            ("fresh process, warm disk cache", proc),
        ):
            ratio = res[BIG] / res[SMALL]
            print(
                f"(b) ingest 10 + retrieve, {label}: {n_big:,}-event user {ms(res[BIG])}, "
                f"1,000-event user {ms(res[SMALL])}, ratio {ratio:.2f} "
                f"(target <= 2: {verdict(ratio <= 2.0)}) [median of {reps}]"
            )

        # (c) warm retrieval at 60 active patterns
        print()
        store = MemoryStore(root, derivation_version=default)
        build_active60(store, ACTIVE)
        result = store.retrieve_for_injection(ACTIVE)
        active = len(store.list_preferences(ACTIVE, min_strength=0.4))
        samples, cpu = [], []
        for _ in range(retrievals):
            t, c = time.perf_counter(), time.thread_time()
            store.retrieve_for_injection(ACTIVE)
            cpu.append(time.thread_time() - c)
            samples.append(time.perf_counter() - t)
        samples.sort()
        cpu.sort()
        p99_at = min(len(samples) - 1, int(len(samples) * 0.99))
        p50, p99 = samples[len(samples) // 2], samples[p99_at]
        print(
            f"(c) warm retrieve_for_injection, {active} active patterns "
            f"({len(result.positives)}+{len(result.negatives)} injected): wall p50 {ms(p50)}, "
            f"p99 {ms(p99)}, max {ms(samples[-1])} over {retrievals} calls "
            f"(target p99 <= 2 ms: {verdict(p99 <= 0.002)}); thread CPU time p50 "
            f"{ms(cpu[len(cpu) // 2])}, p99 {ms(cpu[p99_at])} (wall minus CPU = time spent "
            "waiting for a core or the disk)"
        )

        # (d) durable ingest throughput
        print()
        store = MemoryStore(root, derivation_version=default)
        sigs = ten_signals("thr", 50)
        t = time.perf_counter()
        for i in range(n_single):
            store.ingest_signal("throughput1", sigs[i % len(sigs)])
        single = n_single / (time.perf_counter() - t)
        batch_size = 100
        t = time.perf_counter()
        for _ in range(n_batched // batch_size):
            store.ingest_signals("throughput2", sigs * (batch_size // len(sigs)))
        batched = (n_batched // batch_size * batch_size) / (time.perf_counter() - t)
        print(
            f"(d) durable ingest (fsync per append): {single:,.0f} events/s one "
            f"ingest_signal call per event ({n_single} events); {batched:,.0f} events/s "
            f"with ingest_signals in batches of {batch_size} ({n_batched:,} events)"
        )

        # (e) peak RSS
        print()
        base = run_child("baseline", str(root), SMALL, default)["maxrss_kb"]
        for v in versions:
            print(
                f"(e) peak RSS of a process that cold-derived the {n_big:,}-event user "
                f"(version {v}): {rss[v] / 1024:.0f} MB (a process that only imports "
                f"and opens a store: {base / 1024:.0f} MB)"
            )
        print()
        concurrent_section(tmp, opts.quick)
        print()
        print("load average at end: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
