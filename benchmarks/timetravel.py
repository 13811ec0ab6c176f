"""Cost of a derivation-version preview and of as-of inspection (docs/time-travel.md).

A user with ``--events`` signal events (default 20,000; 60 patterns over 5 types, mixed
signals and polarities, some in a project). Measured, for each call the median and p99 of
``--runs`` calls:

  preview   ``MemoryService.preview(user, other_version)``: the first call (derives the log
            under the other version), then warm calls (its state is kept and extended);
  as of     ``MemoryService.inspect(user, at_seq=N)`` and ``prompt(user, at_seq=N)``: the
            first call at a point (derives that prefix), then warm calls at points already
            derived (a history slider going back and forth);
  reference ``MemoryService.inspect(user)`` now, warm (what the page polls).

Goal (issue: preview and as-of): warm ≤ 50 ms each on a 20k-event user.
Run: ``.venv/bin/python benchmarks/timetravel.py [--events N] [--runs N] [--version V]``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

from creative_memory import MemoryStore
from creative_memory.app.service import MemoryService
from creative_memory.engine.timeutil import format_ts, parse_ts

USER = "bench"
TYPES = ["layout", "color", "typography", "motion", "mood"]
GOAL_MS = 50.0


def build(root: Path, n: int, version: str) -> MemoryStore:
    rng = random.Random(20261203)
    store = MemoryStore(root, derivation_version=version)
    t0 = parse_ts("2025-01-01T00:00:00Z")
    signals = []
    for i in range(n):
        k = rng.randrange(60)
        polarity = "positive" if k % 3 else "negative"
        kind = rng.choice(
            ["explicit_tag", "thumbs_up" if polarity == "positive" else "thumbs_down"]
        )
        project = "landing" if rng.random() < 0.2 else None
        signals.append(
            {
                "signal_type": kind,
                "pattern": f"pattern_{k:02d}",
                "preference_type": TYPES[k % len(TYPES)],
                "polarity": polarity,
                "tag_text": None,
                "scope": "project" if project else "global",
                "project_id": project,
                "artifact_id": f"a{i}",
                "session_id": "s",
                "timestamp": format_ts(t0 + i * 60_000),
            }
        )
    with mock.patch.object(os, "fsync", lambda fd: None):  # building is not measured
        for at in range(0, n, 500):
            store.ingest_signals(USER, signals[at : at + 500], records=False)
    return store


def timed(fn: Callable[[], object], runs: int) -> tuple[float, float]:
    samples = []
    for _ in range(runs):
        t = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t) / 1e6)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(0.99 * len(samples)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--version", default="3", help="the user's version (preview goes to 1)")
    args = ap.parse_args()
    other = "1" if args.version != "1" else "3"
    with tempfile.TemporaryDirectory() as d:
        store = build(Path(d) / "mem", args.events, args.version)
        svc = MemoryService(store)
        seqs = [e.seq for e in store.events(USER)]
        print(f"user with {len(seqs)} events, version {args.version}; preview to {other}")
        rows: list[tuple[str, float, float, bool]] = []

        def row(name: str, fn: Callable[[], object], runs: int, goal: bool = False) -> None:
            p50, p99 = timed(fn, runs)
            rows.append((name, p50, p99, goal))

        row("reference: inspect now, first call", lambda: svc.inspect(USER), 1)
        row("reference: inspect now (warm)", lambda: svc.inspect(USER), args.runs)
        row("preview, first call", lambda: svc.preview(USER, other), 1)
        row("preview, warm", lambda: svc.preview(USER, other), args.runs, True)
        points = [seqs[len(seqs) // 4], seqs[len(seqs) // 2], seqs[3 * len(seqs) // 4]]
        row("as of, first call at a point", lambda: svc.inspect(USER, at_seq=points[0]), 1)
        for p in points[1:]:
            svc.inspect(USER, at_seq=p)
        it = iter(range(10**9))

        def slider() -> None:
            p = points[next(it) % len(points)]
            svc.inspect(USER, at_seq=p)
            svc.prompt(USER, at_seq=p)

        row("as of, warm (inspect + prompt, 3 points)", slider, args.runs, True)
        print(f"{'call':44} {'p50 ms':>9} {'p99 ms':>9}")
        for name, p50, p99, goal in rows:
            verdict = ""
            if goal:
                verdict = ("meets" if p99 <= GOAL_MS else "MISSES") + f" {GOAL_MS:.0f} ms"
            print(f"{name:44} {p50:9.2f} {p99:9.2f}  {verdict}")
        store.close()


if __name__ == "__main__":
    main()
