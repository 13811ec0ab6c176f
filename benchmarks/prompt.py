"""Prompt-composition benchmark: retrieve + the three prompt builders for a 60-pattern user.

A plain script, not a test:

    .venv/bin/python benchmarks/prompt.py [--iterations N] [--warmup N]

Builds a scratch user with 60 patterns (global and project-scoped, both polarities, every
tier), warms the store, then times, per iteration, ``retrieve_for_injection`` (project
context) followed by ``build_generation_block``, ``build_critique_block`` and
``insert_memory_block`` into a 16-block host prompt. Prints p50/p99 per step and in total;
the target is p99 <= 5 ms warm for the total.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from creative_memory import MemoryStore
from creative_memory.engine.prompt import (
    build_critique_block,
    build_generation_block,
    insert_memory_block,
)

USER = "bench-user"
PROJECT = "acme"
TYPES = ["layout", "color", "typography", "effects", "imagery", "motion"]
WORDS = ["bold", "serif", "grid", "muted", "airy", "neon", "soft", "dense", "warm", "flat"]
HOST = [
    "## Identity\n.",
    "## Operating rules\n.",
    "## User profile\n.",
    "## Personal memory\n.",
    "## Custom instructions (user-level)\n.",
    "## Custom instructions (project-level)\n.",
    "## Project context\n.",
    "## Attachments\n.",
    "## Design system tokens\n.",
    "## Brand contract\n.",
    "## Craft: layout\n.",
    "## Craft: typography\n.",
    "## Craft: color\n.",
    "## Skill: landing-page\n.",
    "## Tools\n.",
    "## Output format\n.",
]


def signal(i: int) -> dict[str, Any]:
    project = i % 5 == 0
    return {
        "signal_type": "explicit_tag",
        "pattern": f"{WORDS[i % 10]} {WORDS[(i * 7) % 10]} pattern {i}",
        "preference_type": TYPES[i % len(TYPES)],
        "polarity": "negative" if i % 3 == 0 else "positive",
        "tag_text": None,
        "scope": "project" if project else "global",
        "project_id": PROJECT if project else None,
        "artifact_id": f"art{i}",
        "session_id": "bench",
        "timestamp": "2025-01-01T00:00:00.000Z",
    }


def build_user(store: MemoryStore) -> None:
    signals = []
    for i in range(60):
        signals += [signal(i)] * (3 + i % 4)  # 3..6 tags: medium and high tiers
    store.ingest_signals(USER, signals)


def pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=200)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        store = MemoryStore(Path(tmp) / "mem", derivation_version="1")
        build_user(store)
        n_records = len(store.list_preferences(USER))
        ctx = {"project_id": PROJECT}
        # Cold: a freshly opened store derives the user from the event log on first read.
        t0 = time.perf_counter_ns()
        cold_store = MemoryStore(Path(tmp) / "mem", derivation_version="1")
        cold = cold_store.retrieve_for_injection(USER, ctx)
        insert_memory_block(HOST, build_generation_block(cold, PROJECT))
        build_critique_block(cold, PROJECT)
        cold_ms = (time.perf_counter_ns() - t0) / 1e6
        steps: dict[str, list[float]] = {
            "retrieve": [],
            "generation": [],
            "critique": [],
            "insert": [],
            "total": [],
        }
        clock = time.perf_counter_ns
        for it in range(args.warmup + args.iterations):
            t0 = clock()
            r = store.retrieve_for_injection(USER, ctx)
            t1 = clock()
            gen = build_generation_block(r, PROJECT)
            t2 = clock()
            build_critique_block(r, PROJECT)
            t3 = clock()
            insert_memory_block(HOST, gen)
            t4 = clock()
            if it >= args.warmup:
                for name, ns in (
                    ("retrieve", t1 - t0),
                    ("generation", t2 - t1),
                    ("critique", t3 - t2),
                    ("insert", t4 - t3),
                    ("total", t4 - t0),
                ):
                    steps[name].append(ns / 1e6)

    print(
        f"prompt benchmark: {n_records} derived records, "
        f"{len(r.positives) + len(r.negatives)} injected, "
        f"{args.iterations} iterations after {args.warmup} warm-up"
    )
    print(f"{'step':<12}{'p50 ms':>10}{'p99 ms':>10}{'mean ms':>10}")
    for name, samples in steps.items():
        print(
            f"{name:<12}{pct(samples, 0.50):>10.4f}{pct(samples, 0.99):>10.4f}"
            f"{statistics.fmean(samples):>10.4f}"
        )
    print(f"cold first call (fresh store, derive + builders): {cold_ms:.3f} ms")
    p99 = pct(steps["total"], 0.99)
    verdict = "OK" if p99 <= 5.0 else "OVER TARGET"
    print(f"total p99 {p99:.3f} ms (target <= 5 ms warm): {verdict}")


if __name__ == "__main__":
    main()
