"""Vocabulary size, durable ingest and cold derivation, per derivation version (not a test).

Plain script: measures and prints tables (docs/performance.md). For every selected
derivation version (default: every registered one; ``--versions 1,2`` to choose), on the
file store in a temporary directory:

  (a) vocabulary: a user with ``--events`` (1,200) events spread over K pattern keys
      (K = patterns x 5 preference types; ``--keys``, default 100,300,600,2000), written
      straight through ``FileStorage.append`` in batches and warmed by one
      ``retrieve_for_injection`` (the "warm-up" column: a cold derivation of that log).
      Then ``--reps`` (20) times: one ``ingest_signal`` of a new event on one of the keys,
      the first ``retrieve_for_injection`` after it and ``build_prompt_block``; medians.
      The ratio K=600 / K=100 of the ingest and first-retrieve medians shows how the cost
      of one new event grows with the vocabulary; the first retrieve's CPU time
      (``process_time``) is printed beside its wall-clock time (steadier on a shared host),
      and beside the ingest the calls it makes (``sys.setprofile``: its work, whatever the
      load). Each ingest follows the previous first retrieve, which takes longer at larger
      K, and code runs slower right after other work: a control times one version-1 ingest
      back to back and right after as long of unrelated Python work as those retrieves.
  (b) durable ingest throughput (fsync on every append): one ``ingest_signal`` per event,
      and ``ingest_signals`` in batches of 100; beside them the raw rate of the same
      filesystem measured in the same run — one JSON line of an event's size (or 100 such
      lines) written to a file opened with ``O_APPEND`` and fsynced after each write,
      alternating with the ingest in rounds of 100 appends so that both rates come from
      the same minutes — and the ratio ingest / raw.
  (c) warm ``retrieve_for_injection`` and ``build_prompt_block`` p50 / p99 for a user with
      60 active patterns.
  (d) cold derivation of a 10,000- and a 100,000-event log: a fresh child process with no
      derivation cache opens the store and times its first ``retrieve_for_injection``;
      peak RSS of that process (``VmHWM``).

  (e) long histories (``--sections e``, not run by default): a user with 20,000 and
      100,000 events over 600 keys, one in ten a comparison — the first retrieve after one
      new event, and ``explain`` of one pattern (at 20,000 events; it fits the bucket
      before and after each of the pattern's events).

Each section ends with the goals of docs/performance.md that it measures and whether they
are met in this run. ``--quick`` uses smaller sizes and fewer repetitions. Helpers (log
building, child processes, machine description) come from ``benchmarks/storage.py``.

Run: ``.venv/bin/python benchmarks/vocabulary.py [--quick] [--versions 1,2] [--keys 100,600]``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))

import creative_memory
import storage as storage_bench  # benchmarks/storage.py
from creative_memory import DERIVATION_VERSION, MemoryStore, build_prompt_block
from creative_memory.engine.events import (
    CHAIN_GENESIS,
    ComparisonEvent,
    ComparisonSide,
    Event,
    Feature,
    SignalEvent,
    build_signal_event,
    encode_event,
    with_chain,
)
from creative_memory.engine.timeutil import format_ts
from creative_memory.storage import FileStorage

TYPES = storage_bench.TYPES
SIGNALS = storage_bench.SIGNALS
T0 = storage_bench.T0
STEP_MS = storage_bench.STEP_MS
BATCH = 100  # batch size of ingest_signals in (b)
ROUND = 100  # (b): appends of one kind between two rounds of the other
USER = "vocab"
BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


# -- machine ---------------------------------------------------------------------------------
def numpy_description() -> str:
    try:
        import numpy as np
    except ImportError:
        return "numpy not installed"
    blas = ""
    with contextlib.suppress(Exception):
        cfg: Any = np.show_config(mode="dicts")
        info = cfg["Build Dependencies"]["blas"]
        blas = f", BLAS {info.get('name', '?')} {info.get('version', '')}".rstrip()
    return f"numpy {np.__version__}{blas}"


def source_description() -> str:
    src = Path(creative_memory.__file__).resolve().parent
    commit = "?"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            ["git", "-C", str(src), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode == 0:
            commit = out.stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(src), "status", "--porcelain", "--", "."],
            capture_output=True,
            text=True,
            check=False,
        )
        if dirty.returncode == 0 and dirty.stdout.strip():
            commit += " (with uncommitted changes under src/)"
    return f"{src} at commit {commit}"


def print_machine(versions: Sequence[str], tmp: Path) -> None:
    print("creative-memory vocabulary benchmark")
    print(
        f"machine: {platform.platform()} | {storage_bench.cpu_model()} | "
        f"{os.cpu_count()} logical CPUs | Python {platform.python_version()} "
        f"({platform.python_implementation()}) | {numpy_description()} | "
        f"temp dir on {storage_bench.fs_type(tmp)}"
    )
    threads = [f"{k}={os.environ[k]}" for k in BLAS_THREAD_VARS if os.environ.get(k)]
    print(
        "BLAS threads: "
        + (", ".join(threads) if threads else "no thread variable set (OpenBLAS: one per core)")
    )
    print(f"source: {source_description()}")
    print(f"derivation versions measured: {', '.join(versions)} (default {DERIVATION_VERSION})")
    print("load average at start: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


# -- formatting ------------------------------------------------------------------------------
def fmt_ms(seconds: float) -> str:
    ms = seconds * 1000
    if ms >= 100:
        return f"{ms:,.0f} ms"
    if ms >= 10:
        return f"{ms:.1f} ms"
    if ms >= 1:
        return f"{ms:.2f} ms"
    return f"{ms * 1000:.0f} µs"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join(
        h.ljust(w) if i == 0 else h.rjust(w)
        for i, (h, w) in enumerate(zip(headers, widths, strict=True))
    )
    print(line)
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )


def percentile(sorted_samples: Sequence[float], q: float) -> float:
    return sorted_samples[min(len(sorted_samples) - 1, int(len(sorted_samples) * q))]


# -- (a) vocabulary --------------------------------------------------------------------------
def vocabulary_keys(k: int) -> list[tuple[str, str]]:
    """``k`` pattern keys: ``k // 5`` patterns in each of the 5 preference types."""
    per_type = max(1, k // len(TYPES))
    return [(t, f"pat_{j:04d}") for j in range(per_type) for t in TYPES]


def vocabulary_events(n: int, keys: Sequence[tuple[str, str]], seed: int) -> list[Event]:
    """``n`` events as the store would write them: unary signals of every kind on one key
    each, and one pairwise comparison in ten (two features a side), all global."""
    rng = random.Random(seed)
    out: list[Event] = []
    for i in range(n):
        t = T0 + i * STEP_MS
        ts = format_ts(t)
        if i % 10 == 9:
            a, b = rng.sample(list(keys), 2), rng.sample(list(keys), 2)
            out.append(
                ComparisonEvent(
                    at=ts,
                    recorded_at=ts,
                    chose=ComparisonSide(features=[Feature(*f) for f in a]),
                    over=ComparisonSide(features=[Feature(*f) for f in b]),
                )
            )
            continue
        ptype, pattern = rng.choice(keys)
        signal_type, polarity = rng.choice(SIGNALS)
        out.append(
            build_signal_event(
                {
                    "signal_type": signal_type,
                    "pattern": pattern,
                    "preference_type": ptype,
                    "polarity": polarity,
                    "tag_text": "love this" if signal_type == "explicit_tag" else None,
                    "scope": "global",
                    "artifact_id": f"art_{i}",
                    "session_id": f"sess_{i // 50}",
                    "timestamp": ts,
                },
                t,
                ts,
            )
        )
    return out


def write_log(root: Path, user: str, events: Sequence[Event], batch: int = 1000) -> None:
    storage = FileStorage(root)
    for i in range(0, len(events), batch):
        storage.append(user, events[i : i + batch])


@dataclass
class VocabRow:
    version: str
    keys: int
    seen_keys: int
    records: int
    injected: int
    warmup: float
    ingest: float
    retrieve: float
    block: float
    total: float
    retrieve_cpu: float  # CPU time (process_time) of the first retrieve: steadier under load
    ingest_calls: int  # Python and C calls one ingest_signal makes: its work, whatever the load


def count_calls(fn: Callable[[], object]) -> int:
    """How many Python and C functions ``fn()`` calls (``sys.setprofile``): the work it
    does, the same on a loaded or a quiet host."""
    n = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal n
        if event in ("call", "c_call"):
            n += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return n


def spin(seconds: float) -> None:
    """Busy pure-Python work for ``seconds`` (none of the store's code)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def append_after_work(tmp: Path, pauses: Sequence[float], reps: int) -> list[float]:
    """The control of (a)'s ingest column: median seconds of one version-1 ``ingest_signal``
    (durable, 50 patterns) right after ``pause`` seconds of unrelated Python work, for each
    pause (0: back to back). The same calls every time; only what ran before differs."""
    root = tmp / "append-after-work"
    store = MemoryStore(root, derivation_version="1")
    sigs = storage_bench.ten_signals("thr", 50)
    for sig in sigs:
        store.ingest_signal(USER, sig)
    medians = []
    for pause in pauses:
        samples = []
        for i in range(reps):
            spin(pause)
            t = time.perf_counter()
            store.ingest_signal(USER, sigs[i % len(sigs)])
            samples.append(time.perf_counter() - t)
        medians.append(statistics.median(samples))
    store.close()
    shutil.rmtree(root, ignore_errors=True)
    return medians


def measure_vocabulary(
    tmp: Path, version: str, k: int, n_events: int, reps: int, seed: int
) -> VocabRow:
    root = tmp / f"vocab-v{version}-k{k}"
    keys = vocabulary_keys(k)
    events = vocabulary_events(n_events, keys, seed)
    write_log(root, USER, events)
    store = MemoryStore(root, derivation_version=version)
    t = time.perf_counter()
    store.retrieve_for_injection(USER)  # warm-up: derives the log (no cache yet)
    warmup = time.perf_counter() - t
    rng = random.Random(seed + 1)

    def new_signal(i: int) -> dict[str, Any]:
        ptype, pattern = rng.choice(keys)
        signal_type, polarity = rng.choice(SIGNALS)
        return {
            "signal_type": signal_type,
            "pattern": pattern,
            "preference_type": ptype,
            "polarity": polarity,
            "scope": "global",
            "artifact_id": f"new_{i}",
            "timestamp": format_ts(T0 + (n_events + i) * STEP_MS),
        }

    ingest, retrieve, block, total, retrieve_cpu = [], [], [], [], []
    for i in range(reps):
        signal = new_signal(i)
        t0 = time.perf_counter()
        store.ingest_signal(USER, signal)
        t1 = time.perf_counter()
        c1 = time.process_time()
        result = store.retrieve_for_injection(USER)
        c2 = time.process_time()
        t2 = time.perf_counter()
        build_prompt_block(result)
        t3 = time.perf_counter()
        ingest.append(t1 - t0)
        retrieve.append(t2 - t1)
        block.append(t3 - t2)
        total.append(t3 - t0)
        retrieve_cpu.append(c2 - c1)
    seen: set[tuple[str, str]] = set()
    for e in store.events(USER):
        if isinstance(e, SignalEvent):
            seen.add((e.preference_type, e.pattern))
        elif isinstance(e, ComparisonEvent):
            seen.update((f.preference_type, f.pattern) for f in e.chose.features + e.over.features)
    records = len(store.list_preferences(USER))
    injected = len(result.positives) + len(result.negatives) + len(result.project_overrides)
    calls = []  # a few more ingests (each after a read, as above), their calls counted
    for i in range(reps, reps + 5):
        signal = new_signal(i)
        calls.append(count_calls(functools.partial(store.ingest_signal, USER, signal)))
        store.retrieve_for_injection(USER)
    shutil.rmtree(root, ignore_errors=True)
    med = statistics.median
    return VocabRow(
        version,
        k,
        len(seen),
        records,
        injected,
        warmup,
        med(ingest),
        med(retrieve),
        med(block),
        med(total),
        med(retrieve_cpu),
        int(med(calls)),
    )


def section_a(tmp: Path, versions: Sequence[str], keys: Sequence[int], n: int, reps: int) -> None:
    print()
    print(
        f"(a) vocabulary: a {n:,}-event user (global; 1 in 10 events a comparison) over K "
        f"pattern keys, warmed; then one ingest_signal + the first retrieve_for_injection + "
        f"build_prompt_block, median of {reps}"
    )
    for v in versions:  # a throwaway pass, so the first configuration measured runs warm
        measure_vocabulary(tmp, v, min(keys), min(n, 300), 3, seed=6)
    rows: list[VocabRow] = []
    for v in versions:
        for k in keys:
            rows.append(measure_vocabulary(tmp, v, k, n, reps, seed=7))
    table(
        [
            "version",
            "K keys",
            "keys seen",
            "records",
            "injected",
            "warm-up",
            "ingest",
            "(calls)",
            "1st retrieve",
            "(CPU)",
            "prompt block",
            "ingest+retrieve+block",
        ],
        [
            [
                r.version,
                f"{r.keys:,}",
                f"{r.seen_keys:,}",
                f"{r.records:,}",
                f"{r.injected}",
                fmt_ms(r.warmup),
                fmt_ms(r.ingest),
                f"{r.ingest_calls:,}",
                fmt_ms(r.retrieve),
                fmt_ms(r.retrieve_cpu),
                fmt_ms(r.block),
                fmt_ms(r.total),
            ]
            for r in rows
        ],
    )
    for v in versions:
        by_k = {r.keys: r for r in rows if r.version == v}
        if 100 in by_k and 600 in by_k:
            lo, hi = by_k[100], by_k[600]
            print(
                f"    version {v}: ratio K=600 / K=100: ingest {hi.ingest / lo.ingest:.2f}, "
                f"first retrieve {hi.retrieve / lo.retrieve:.2f}, "
                f"ingest+retrieve+block {hi.total / lo.total:.2f}"
            )
        else:
            print(f"    version {v}: ratio K=600 / K=100 needs both in --keys")
    goals_a(tmp, rows, reps)


#: The goals of docs/performance.md ("Scaling with the vocabulary"), for the default version.
FIRST_READ_GOAL_S = 0.010  # first retrieve after one new event at K = 2,000
FIRST_READ_RATIO_GOAL = 2.0  # its K=600 / K=100 ratio
INGEST_RATIO_GOAL = 1.5  # the K=600 / K=100 ratio of the ingest before it
WARM_P99_GOAL_S = 0.000150  # warm retrieve + block, 60 active patterns
COLD_V1_GOAL_S = 0.35  # cold derivation of 100,000 events under version 1
ONE_BY_ONE_GOAL = 2_500  # events/s, one ingest_signal per event, fsync on
ONE_BY_ONE_RAW_GOAL = 0.5  # ... and that rate over the raw fsync-append rate
BATCHED_GOAL = 40_000  # events/s, ingest_signals in batches of 100


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def goals_a(tmp: Path, rows: Sequence[VocabRow], reps: int) -> None:
    by_k = {r.keys: r for r in rows if r.version == DERIVATION_VERSION}
    if 2000 in by_k:
        r = by_k[2000]
        print(
            f"    goal: version {DERIVATION_VERSION}'s first retrieve at K=2,000 <= "
            f"{fmt_ms(FIRST_READ_GOAL_S)}: {fmt_ms(r.retrieve)} (CPU {fmt_ms(r.retrieve_cpu)}), "
            f"{verdict(r.retrieve <= FIRST_READ_GOAL_S)}"
        )
    if 100 in by_k and 600 in by_k:
        lo, hi = by_k[100], by_k[600]
        wall = hi.retrieve / lo.retrieve
        cpu = hi.retrieve_cpu / lo.retrieve_cpu
        print(
            f"    goal: its ratio K=600 / K=100 <= {FIRST_READ_RATIO_GOAL:.0f}: {wall:.2f} "
            f"(CPU {cpu:.2f}), {verdict(wall <= FIRST_READ_RATIO_GOAL)}"
        )
        ratio = hi.ingest / lo.ingest
        print(
            f"    goal: version {DERIVATION_VERSION}'s ingest ratio K=600 / K=100 <= "
            f"{INGEST_RATIO_GOAL}: {ratio:.2f} (calls {hi.ingest_calls / lo.ingest_calls:.2f}), "
            f"{verdict(ratio <= INGEST_RATIO_GOAL)}"
        )
        # each ingest above follows a first retrieve, longer at K=600: the same append after
        # that long of other work, to tell the append's cost from what ran before it
        pauses = [0.0, lo.retrieve, hi.retrieve]
        back, after_lo, after_hi = append_after_work(tmp, pauses, max(reps, 20))
        print(
            f"    control: a version-1 ingest back to back {fmt_ms(back)}; after "
            f"{fmt_ms(lo.retrieve)} / {fmt_ms(hi.retrieve)} of unrelated Python work (the "
            f"first retrieves at K=100 / 600) {fmt_ms(after_lo)} / {fmt_ms(after_hi)}, "
            f"ratio {after_hi / after_lo:.2f}"
        )


# -- (b) durable ingest throughput -----------------------------------------------------------
def sample_line() -> bytes:
    """One event line as the log stores it (chain hash included)."""
    ts = format_ts(T0)
    ev = build_signal_event(
        {
            "signal_type": "thumbs_up",
            "pattern": "pat_000",
            "preference_type": "layout",
            "polarity": "positive",
            "scope": "global",
            "artifact_id": "thr_0",
        },
        T0,
        ts,
    )
    chained = with_chain(CHAIN_GENESIS, msgspec.structs.replace(ev, seq=123_456))
    return encode_event(chained) + b"\n"


class RawAppender:
    """The raw reference: ``line`` (or ``lines_per_write`` copies of it) written to a new
    file opened with ``O_APPEND``, an fsync after each write; :meth:`run` adds the time of
    ``writes`` such writes to :attr:`seconds` (the file is removed by :meth:`close`)."""

    def __init__(self, path: Path, line: bytes, lines_per_write: int = 1) -> None:
        self.path, self.data, self.per_write = path, line * lines_per_write, lines_per_write
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.seconds, self.lines = 0.0, 0

    def run(self, writes: int) -> None:
        fd, data = self.fd, self.data
        t = time.perf_counter()
        for _ in range(writes):
            os.write(fd, data)
            os.fsync(fd)
        self.seconds += time.perf_counter() - t
        self.lines += writes * self.per_write

    def rate(self) -> float:
        return self.lines / self.seconds

    def close(self) -> None:
        os.close(self.fd)
        self.path.unlink()


def interleaved(
    raw: RawAppender, writes_per_round: int, ours: Callable[[int], None], rounds: int
) -> float:
    """Seconds that ``rounds`` calls of ``ours(round)`` took, each after ``writes_per_round``
    raw writes: the two rates come from the same minutes, so a disk whose fsync latency
    drifts (a shared host's does, by half within a run) moves both alike."""
    spent = 0.0
    for i in range(rounds):
        raw.run(writes_per_round)
        t = time.perf_counter()
        ours(i)
        spent += time.perf_counter() - t
    return spent


def ingest_rows(
    tmp: Path, v: str, line: bytes, n_single: int, n_batched: int
) -> tuple[list[list[str]], list[str]]:
    """Section (b)'s two rows for version ``v`` (one-by-one and batched ingest, each with
    the raw reference interleaved) and its goal lines."""
    root = tmp / f"ingest-v{v}"
    store = MemoryStore(root, derivation_version=v)
    sigs = storage_bench.ten_signals("thr", 50)
    store.ingest_signal("one_by_one", sigs[0])  # the store's first append and read

    def one_by_one(round_: int) -> None:
        for i in range(round_ * ROUND, (round_ + 1) * ROUND):
            store.ingest_signal("one_by_one", sigs[i % len(sigs)])

    raw1 = RawAppender(tmp / "raw1.jsonl", line)
    singles = max(1, n_single // ROUND)
    try:
        single = singles * ROUND / interleaved(raw1, ROUND, one_by_one, singles)
        raw_single = raw1.rate()
    finally:
        raw1.close()
    batch = sigs * (BATCH // len(sigs))
    per_round = max(1, ROUND // 10)  # batches a round

    def batched_round(_: int) -> None:
        for _ in range(per_round):
            store.ingest_signals("batched", batch)

    raw_b = RawAppender(tmp / "rawb.jsonl", line, BATCH)
    rounds = max(1, n_batched // BATCH // per_round)
    try:
        spent = interleaved(raw_b, per_round, batched_round, rounds)
        batched = rounds * per_round * len(batch) / spent
        raw_batched = raw_b.rate()
    finally:
        raw_b.close()
    shutil.rmtree(root, ignore_errors=True)
    ratio = single / raw_single
    rows = [
        [v, f"{singles * ROUND:,} x 1", f"{single:,.0f}", f"{raw_single:,.0f}", f"{ratio:.2f}"],
        [v, f"{rounds * per_round:,} x {BATCH}", f"{batched:,.0f}", f"{raw_batched:,.0f}",
         f"{batched / raw_batched:.2f}"],
    ]  # fmt: skip
    goals = [
        f"    goal: version {v} one-by-one >= {ONE_BY_ONE_GOAL:,} events/s and >= "
        f"{ONE_BY_ONE_RAW_GOAL} x raw: {single:,.0f}/s, {ratio:.2f} x raw, "
        f"{verdict(single >= ONE_BY_ONE_GOAL and ratio >= ONE_BY_ONE_RAW_GOAL)}",
        f"    goal: version {v} batched >= {BATCHED_GOAL:,} events/s: {batched:,.0f}/s, "
        f"{verdict(batched >= BATCHED_GOAL)}",
    ]
    return rows, goals


def section_b(tmp: Path, versions: Sequence[str], n_single: int, n_batched: int) -> None:
    print()
    line = sample_line()
    print(
        f"(b) durable ingest (fsync per append), 50 patterns; raw reference: a {len(line)}-byte "
        "JSON line (an event's size) appended with O_APPEND + fsync per write, same "
        f"filesystem, interleaved with the ingest in rounds of {ROUND} appends"
    )
    rows: list[list[str]] = []
    goals: list[str] = []
    for v in versions:
        more_rows, more_goals = ingest_rows(tmp, v, line, n_single, n_batched)
        rows += more_rows
        goals += more_goals
    table(["version", "appends x events", "ingest events/s", "raw lines/s", "ingest / raw"], rows)
    print("\n".join(goals))


# -- (c) warm retrieval ----------------------------------------------------------------------
def section_c(tmp: Path, versions: Sequence[str], iterations: int) -> None:
    print()
    print(
        f"(c) warm retrieve_for_injection + build_prompt_block, 60 active patterns, "
        f"{iterations:,} calls"
    )
    rows = []
    p99: dict[str, float] = {}
    for v in versions:
        root = tmp / f"warm-v{v}"
        store = MemoryStore(root, derivation_version=v)
        storage_bench.build_active60(store, "active60")
        result = store.retrieve_for_injection("active60")
        injected = len(result.positives) + len(result.negatives)
        ret, blk, both = [], [], []
        for _ in range(iterations):
            t0 = time.perf_counter()
            result = store.retrieve_for_injection("active60")
            t1 = time.perf_counter()
            build_prompt_block(result)
            t2 = time.perf_counter()
            ret.append(t1 - t0)
            blk.append(t2 - t1)
            both.append(t2 - t0)
        cols = [v, f"{injected}"]
        for samples in (ret, blk, both):
            samples.sort()
            cols += [fmt_ms(percentile(samples, 0.5)), fmt_ms(percentile(samples, 0.99))]
        rows.append(cols)
        p99[v] = percentile(both, 0.99)
        shutil.rmtree(root, ignore_errors=True)
    table(
        [
            "version",
            "injected",
            "retrieve p50",
            "p99",
            "block p50",
            "p99",
            "together p50",
            "p99",
        ],
        rows,
    )
    for v, value in p99.items():
        print(
            f"    goal: version {v} together p99 <= {fmt_ms(WARM_P99_GOAL_S)}: {fmt_ms(value)}, "
            f"{verdict(value <= WARM_P99_GOAL_S)} (a tail on a shared machine moves between runs)"
        )


# -- (d) cold derivation and peak RSS --------------------------------------------------------
def section_d(tmp: Path, versions: Sequence[str], sizes: Sequence[int], runs: int) -> None:
    print()
    print(
        f"(d) cold derivation: a fresh process, no derivation cache, times its first "
        f"retrieve_for_injection (median of {runs}); peak RSS (VmHWM) of that process"
    )
    root = tmp / "cold"
    rows = []
    cold_v1: dict[int, float] = {}
    for n in sizes:
        user = f"cold{n}"
        t = time.perf_counter()
        storage_bench.build_log(root, user, n, seed=1)
        mb = (root / user / "events.jsonl").stat().st_size / 1e6
        print(f"    built a {n:,}-event log ({mb:.1f} MB) in {time.perf_counter() - t:.1f} s")
        for v in versions:
            results = []
            for _ in range(runs):
                storage_bench.drop_derived(root, user)
                results.append(storage_bench.run_child("cold", str(root), user, v))
            if v == "1":
                cold_v1[n] = statistics.median(r["seconds"] for r in results)
            rows.append(
                [
                    v,
                    f"{n:,}",
                    f"{statistics.median(r['seconds'] for r in results):.2f} s",
                    f"{min(r['seconds'] for r in results):.2f} s",
                    fmt_ms(results[-1]["second_call_s"]),
                    f"{max(r['maxrss_kb'] for r in results) / 1024:.0f} MB",
                ]
            )
    base = storage_bench.run_child("baseline", str(root), f"cold{sizes[0]}", versions[0])
    table(["version", "events", "cold median", "best", "then warm call", "peak RSS"], rows)
    print(
        f"    a process that only imports the package and opens a store: "
        f"{base['maxrss_kb'] / 1024:.0f} MB"
    )
    if 100_000 in cold_v1:
        value = cold_v1[100_000]
        print(
            f"    goal: version 1 cold derivation of 100,000 events <= {COLD_V1_GOAL_S:.2f} s: "
            f"{value:.2f} s, {verdict(value <= COLD_V1_GOAL_S)}"
        )


# -- (e) long histories ----------------------------------------------------------------------
def section_e(
    tmp: Path, versions: Sequence[str], sizes: Sequence[int], reps: int, explain_max: int
) -> None:
    """A user whose history is long as well as wide: (a)'s recipe over 600 keys with
    ``sizes`` events (one in ten a comparison of two features a side, so the fit's
    statistics grow with the history until every pair of keys has met). The first retrieve
    after one new event (median of ``reps``), and ``explain`` of one pattern up to
    ``explain_max`` events (it replays the log and fits the bucket before and after each
    of the pattern's events)."""
    print()
    print(
        f"(e) long histories: 600 pattern keys, {' / '.join(f'{n:,}' for n in sizes)} events "
        f"(1 in 10 a comparison); the first retrieve after one new event (median of {reps}) "
        f"and explain of one pattern (up to {explain_max:,} events)"
    )
    keys = vocabulary_keys(600)
    rows = []
    for n in sizes:
        events = vocabulary_events(n, keys, seed=11)
        for v in versions:
            root = tmp / f"long-v{v}-{n}"
            write_log(root, USER, events)
            store = MemoryStore(root, derivation_version=v)
            store.retrieve_for_injection(USER)
            samples = []
            for i in range(reps):
                ptype, pattern = keys[i % len(keys)]
                store.ingest_signal(
                    USER,
                    {
                        "signal_type": "thumbs_up",
                        "pattern": pattern,
                        "preference_type": ptype,
                        "polarity": "positive",
                        "scope": "global",
                        "artifact_id": f"long_{i}",
                        "timestamp": format_ts(T0 + (n + i) * STEP_MS),
                    },
                )
                t = time.perf_counter()
                store.retrieve_for_injection(USER)
                samples.append(time.perf_counter() - t)
            explained = "-"
            if n <= explain_max:
                ptype, pattern = keys[5]
                t = time.perf_counter()
                store.explain(USER, ptype, pattern)
                explained = f"{time.perf_counter() - t:.2f} s"
            store.close()
            shutil.rmtree(root, ignore_errors=True)
            rows.append([v, f"{n:,}", fmt_ms(statistics.median(samples)), explained])
    table(["version", "events", "1st retrieve after one event", "explain one pattern"], rows)


# -- main ------------------------------------------------------------------------------------
def int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--versions", help="comma-separated derivation versions (default: all)")
    parser.add_argument("--keys", type=int_list, help="(a) vocabulary sizes K, comma-separated")
    parser.add_argument("--events", type=int, default=1200, help="(a) events of the user")
    parser.add_argument("--reps", type=int, help="(a) new events per K (default 20)")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repetitions")
    parser.add_argument(
        "--sections", default="abcd", help="which sections to run (default abcd; e: long histories)"
    )
    opts = parser.parse_args()
    registered = storage_bench.load_versions()
    versions = opts.versions.split(",") if opts.versions else registered
    unknown = [v for v in versions if v not in registered]
    if unknown:
        parser.error(f"unknown derivation version(s) {', '.join(unknown)}; known: {registered}")
    keys = opts.keys or ([100, 600] if opts.quick else [100, 300, 600, 2000])
    reps = opts.reps or (5 if opts.quick else 20)
    n_single, n_batched = (300, 3000) if opts.quick else (2000, 20_000)
    iterations = 300 if opts.quick else 3000
    sizes = [2000, 20_000] if opts.quick else [10_000, 100_000]
    cold_runs = 1 if opts.quick else 3
    long_sizes = [5_000, 20_000] if opts.quick else [20_000, 100_000]
    explain_max = 20_000  # explain at 100,000 events takes tens of seconds (performance.md)

    tmp = Path(tempfile.mkdtemp(prefix="cm-bench-vocab-"))
    sections: dict[str, Callable[[], None]] = {
        "a": lambda: section_a(tmp, versions, keys, opts.events, reps),
        "b": lambda: section_b(tmp, versions, n_single, n_batched),
        "c": lambda: section_c(tmp, versions, iterations),
        "d": lambda: section_d(tmp, versions, sizes, cold_runs),
        "e": lambda: section_e(tmp, versions, long_sizes, 5, explain_max),
    }
    try:
        print_machine(versions, tmp)
        if opts.quick:
            print("--quick: smaller sizes and fewer repetitions")
        started = time.perf_counter()
        for name in opts.sections:
            t = time.perf_counter()
            sections[name]()
            load = " ".join(f"{x:.2f}" for x in os.getloadavg())
            print(
                f"    [section ({name}) took {time.perf_counter() - t:.0f} s; load average {load}]"
            )
            sys.stdout.flush()
        print()
        print(
            "load average at end: "
            + " ".join(f"{x:.2f}" for x in os.getloadavg())
            + f" | total {time.perf_counter() - started:.0f} s"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
