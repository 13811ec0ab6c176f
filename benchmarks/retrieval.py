"""Latency of ``retrieve_for_injection`` for one user (not a test).

The user has 60 active patterns over 5 preference types, built from ``--events`` signal
events (default 10,000: a mix of signal types and polarities, strictly increasing
timestamps). Measured:

  (a) full re-derivation on every call: a NEW ``MemoryStore`` on the same root for each
      call, so nothing in-process is reused; its on-disk derivation cache (if this version
      of the engine has one) is disabled and emptied, so every call folds the whole log.
  (a2) cold store, disk cache allowed (only when the engine has a derivation cache): a new
      ``MemoryStore`` per call that may start from the cached derived state.
  (b) warm: the same store for every call.
  (c) incremental: the same store; each call ingests one event (fsync included), then
      retrieves — the derivation work of one event and, for version 2, one fit.

Each measurement runs for derivation versions 1 and 2 (``--derivation-version V`` to pick).

Run: ``.venv/bin/python benchmarks/retrieval.py [--events N] [--runs N] [--warm-runs N]``.
Target: (a) p99 < 50 ms.
"""

from __future__ import annotations

import argparse
import inspect
import math
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from creative_memory import MemoryStore, build_prompt_block
from creative_memory.engine.timeutil import format_ts, parse_ts

USER = "bench"
TYPES = ["layout", "color", "typography", "motion", "mood"]
POSITIVE_SIGNALS = [
    "explicit_tag",
    "revert_after_edit",
    "manual_refinement",
    "repeated_acceptance",
    "thumbs_up",
]
NEGATIVE_SIGNALS = ["explicit_tag", "thumbs_down", "single_rejection", "abandoned_generation"]
TARGET_P99_MS = 50.0


def build(root: Path, n_events: int, n_patterns: int, seed: int, **store_kw: Any) -> None:
    """Write ``n_events`` signal events for ``n_patterns`` patterns (fixed polarity each)."""
    rng = random.Random(seed)
    store = MemoryStore(root, derivation_version="1", **store_kw)
    patterns = [
        (f"pattern_{i:02d}_{TYPES[i % len(TYPES)]}", TYPES[i % len(TYPES)],
         "negative" if i % 5 in (1, 3) else "positive")
        for i in range(n_patterns)
    ]  # fmt: skip
    t = parse_ts("2025-01-01T00:00:00.000Z")
    batch: list[dict[str, Any]] = []
    for i in range(n_events):
        pattern, ptype, polarity = patterns[i % n_patterns]
        kinds = POSITIVE_SIGNALS if polarity == "positive" else NEGATIVE_SIGNALS
        t += 30_000 + rng.randrange(30_000)  # 30-60 s apart: ~5 days in total
        batch.append(
            {
                "signal_type": rng.choice(kinds),
                "pattern": pattern,
                "preference_type": ptype,
                "polarity": polarity,
                "scope": "global",
                "project_id": None,
                "timestamp": format_ts(t),
            }
        )
        if len(batch) == 500:
            store.ingest_signals(USER, batch)
            batch = []
    if batch:
        store.ingest_signals(USER, batch)


def measure(call: Callable[[], Any], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        call()
        out.append((time.perf_counter() - t0) * 1000.0)
    return out


def pct(samples: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(samples)
    k = max(0, min(len(s) - 1, math.ceil(p / 100.0 * len(s)) - 1))
    return s[k]


def report(name: str, samples: list[float]) -> tuple[float, float]:
    p50, p99 = pct(samples, 50), pct(samples, 99)
    print(
        f"  {name:<44} n={len(samples):<5} p50={p50:8.2f} ms  p99={p99:8.2f} ms  "
        f"mean={statistics.fmean(samples):8.2f} ms  max={max(samples):8.2f} ms"
    )
    return p50, p99


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=10_000, help="signal events (default 10000)")
    ap.add_argument("--patterns", type=int, default=60, help="active patterns (default 60)")
    ap.add_argument("--runs", type=int, default=200, help="measured cold calls (default 200)")
    ap.add_argument("--warm-runs", type=int, default=2000, help="measured warm calls")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--root", type=Path, help="storage root to use (default: a temp dir)")
    ap.add_argument(
        "--derivation-version",
        action="append",
        help="measure this derivation version (repeatable; default: 1 and 2)",
    )
    args = ap.parse_args(argv)
    args.derivation_version = args.derivation_version or ["1", "2"]
    if args.events < args.patterns * 3:
        ap.error("--events must be at least 3 x --patterns so that every pattern is active")

    print("machine:")
    print(f"  platform: {platform.platform()}")
    print(f"  machine:  {platform.machine()} {platform.processor() or ''}".rstrip())
    print(f"  python:   {platform.python_implementation()} {sys.version.split()[0]}")
    print(f"  cpus:     {os.cpu_count()}")

    has_cache = "cache_capacity" in inspect.signature(MemoryStore).parameters
    no_cache: dict[str, Any] = {"cache_capacity": 0} if has_cache else {}
    tmp = None
    if args.root is None:
        tmp = tempfile.mkdtemp(prefix="cm-bench-")
        root = Path(tmp) / "mem"
    else:
        root = args.root
    try:
        t0 = time.perf_counter()
        build(root, args.events, args.patterns, args.seed, **no_cache)
        build_s = time.perf_counter() - t0
        log = root / USER / "events.jsonl"
        print(
            f"data: {args.events} events, {args.patterns} patterns over {len(TYPES)} types; "
            f"log {log.stat().st_size / 1024:.0f} KiB; built in {build_s:.1f} s"
        )

        verdicts = []
        for version in args.derivation_version:
            print(f"-- derivation version {version}")
            check = MemoryStore(root, derivation_version=version, **no_cache)
            prefs = check.list_preferences(USER)
            active = [
                p for p in prefs
                if p.polarity_status == "stable" and p.signal_strength >= 0.40
                and p.confidence in ("medium", "high")
            ]  # fmt: skip
            r = check.retrieve_for_injection(USER)
            print(
                f"state: {len(prefs)} records, {len(active)} active; retrieval injects "
                f"{len(r.positives)}+ / {len(r.negatives)}- with {len(r.diagnostics)} diagnostics; "
                f"prompt {len(build_prompt_block(r))} chars"
            )

            def wipe_cache() -> None:
                shutil.rmtree(root / USER / "cache", ignore_errors=True)

            print("retrieve_for_injection latency:")
            wipe_cache()

            def cold(version: str = version) -> None:
                store = MemoryStore(root, derivation_version=version, **no_cache)
                store.retrieve_for_injection(USER)

            cold()  # warm the OS page cache only
            samples = measure(cold, args.runs)
            _, p99_cold = report("(a) full re-derivation (new store per call)", samples)

            if has_cache:
                MemoryStore(root, derivation_version=version).retrieve_for_injection(USER)  # fill

                def cold_cached(version: str = version) -> None:
                    MemoryStore(root, derivation_version=version).retrieve_for_injection(USER)

                report(
                    "(a2) new store per call, disk cache allowed", measure(cold_cached, args.runs)
                )

            warm_store = MemoryStore(root, derivation_version=version, **no_cache)
            warm_store.retrieve_for_injection(USER)
            report(
                "(b) warm (same store)",
                measure(lambda s=warm_store: s.retrieve_for_injection(USER), args.warm_runs),
            )
            counter = iter(range(10**9))

            def incremental(s: MemoryStore = warm_store, counter: Any = counter) -> None:
                s.ingest_signal(
                    USER,
                    {
                        "signal_type": "thumbs_up",
                        "pattern": "pattern_00_layout",
                        "preference_type": "layout",
                        "polarity": "positive",
                        "scope": "global",
                        "project_id": None,
                        "timestamp": format_ts(
                            parse_ts("2025-02-01T00:00:00.000Z") + next(counter)
                        ),
                    },
                )
                s.retrieve_for_injection(USER)

            report(
                "(c) one new event (durable), then retrieve",
                measure(incremental, min(args.runs, 100)),
            )
            verdict = "meets" if p99_cold < TARGET_P99_MS else "MISSES"
            verdicts.append(verdict == "meets")
            print(
                f"target (version {version}): (a) p99 < {TARGET_P99_MS:.0f} ms -> {verdict} "
                f"({p99_cold:.2f} ms)"
            )
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
