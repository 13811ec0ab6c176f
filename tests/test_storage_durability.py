"""Durability, erasure, concurrency, cache and permission tests of the file backend (issue 7).

(a) erasure is real: after ``forget`` / ``reset_memory`` the erased bytes are nowhere under the
    user directory (log, cache entries, snapshot, anything) and no read returns them; ``seq``
    numbers are never reused.
(b) crash safety: a child process appending events is SIGKILLed at random moments; every
    acknowledged event survives, the log parses, appends keep working, and derived state
    equals a fresh derivation. A torn last line is ignored by readers and repaired.
(c) concurrency: several processes ingest for one user at once; nothing lost or duplicated.
(d) the derivation cache survives restarts, extends a cached prefix in O(k), evicts LRU,
    ignores corrupt entries, and keys on the derivation version.
(e) permissions: directories 0700, files 0600.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from creative_memory import MemoryStore, StorageError
from creative_memory.engine.derivation.registry import DerivedState
from creative_memory.engine.events import (
    CHAIN_GENESIS,
    Event,
    SignalEvent,
    chain_hash,
    decode_event,
)
from creative_memory.engine.timeutil import format_ts
from creative_memory.storage.files.appending import READ_CHUNK
from creative_memory.storage.files.cache import FileDerivationCache, cache_key
from tests.conftest import ManualClock, tag
from tests.test_cache_properties import versions_for_test

USER = "dur_user"
SRC = Path(__file__).resolve().parents[1] / "src"


# -- helpers ---------------------------------------------------------------------------------
def pattern_of(e: Event) -> str:
    """A signal event's pattern (``e`` must be a signal)."""
    assert isinstance(e, SignalEvent), e
    return e.pattern


def user_dir(root: Path, user: str = USER) -> Path:
    return root / user


def files_containing(directory: Path, needle: bytes) -> list[str]:
    """Every file under ``directory`` (recursively, hidden files included) holding ``needle``."""
    return sorted(
        str(p.relative_to(directory))
        for p in directory.rglob("*")
        if p.is_file() and needle in p.read_bytes()
    )


def observe(store: MemoryStore, user: str, projects: tuple[str, ...] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {
        "list": [p.to_dict() for p in store.list_preferences(user)],
        "refinements": [r.to_dict() for r in store.refinement_log(user)],
        "retrieval:-": store.retrieve_for_injection(user).to_dict(),
    }
    for p in projects:
        out["retrieval:" + p] = store.retrieve_for_injection(user, {"project_id": p}).to_dict()
    return out


def observe_from_scratch(
    root: Path, user: str, version: str = "1", projects: tuple[str, ...] = ()
) -> dict[str, Any]:
    """What a store derives from the raw events alone (cache and snapshot deleted)."""
    fresh = Path(tempfile.mkdtemp(prefix="cm-scratch-"))
    try:
        if user_dir(root, user).is_dir():
            shutil.copytree(user_dir(root, user), fresh / user)
            shutil.rmtree(fresh / user / "cache", ignore_errors=True)
            (fresh / user / "snapshot.json").unlink(missing_ok=True)
        return observe(
            MemoryStore(fresh, derivation_version=version, clock=ManualClock()), user, projects
        )
    finally:
        shutil.rmtree(fresh, ignore_errors=True)


def assert_log_sound(root: Path, user: str = USER, *, allow_torn_tail: bool = False) -> list[Any]:
    """The log's bytes parse line by line, ``seq`` strictly increases and the hash chain
    recomputes from genesis. Returns the events. With ``allow_torn_tail`` an incomplete
    final line (a crash mid-append, before any repair) is left out of the check."""
    raw = (user_dir(root, user) / "events.jsonl").read_bytes()
    if allow_torn_tail:
        raw = raw[: raw.rfind(b"\n") + 1]
    assert raw.endswith(b"\n"), "log must end with a complete line"
    lines = raw[:-1].split(b"\n")
    header = json.loads(lines[0])
    assert header["kind"] == "header" and header["v"] == 1
    events = [decode_event(line) for line in lines[1:]]
    prev_h, prev_seq = CHAIN_GENESIS, 0
    for ev in events:
        assert ev.seq > prev_seq, f"seq not increasing at {ev.seq}"
        assert ev.h == chain_hash(prev_h, ev), f"hash chain broken at seq {ev.seq}"
        prev_h, prev_seq = ev.h, ev.seq
    return events


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH")) if p)
    return env


# -- (a) erasure -----------------------------------------------------------------------------
SECRET = "zz_forget_me_zz"


def seed_user(store: MemoryStore, clock: ManualClock, secret_project: str | None) -> None:
    """A user whose memory mentions SECRET in ``secret_project`` (None = global) — in the log,
    in several cache entries (two versions) and in the snapshot."""
    scope = "project" if secret_project else "global"

    def ts() -> str:
        return clock_ts(clock)

    # The secret is the first event of its bucket (erasure must leave only an anchor).
    store.ingest_signal(USER, tag(SECRET, "color", scope=scope, project_id=secret_project, ts=ts()))
    store.ingest_signal(USER, tag("airy", ts=ts()))
    store.ingest_signal(USER, tag("keep_proj", scope="project", project_id="px", ts=ts()))
    store.list_preferences(USER)
    store.flush()  # cache entry + snapshot holding the secret
    store.ingest_signal(
        USER, tag(SECRET, "color", "positive", scope=scope, project_id=secret_project, ts=ts())
    )
    store.ingest_signal(
        USER,
        tag(
            SECRET,
            "color",
            "positive",
            scope=scope,
            project_id=secret_project,
            signal_type="thumbs_up",
            ts=ts(),
        ),
    )
    store.log_refinement(USER, artifact_id="a1", project_id=secret_project, diff={"x": SECRET})
    store.retrieve_for_injection(USER, {"project_id": secret_project})
    store.flush()
    store.ingest_signal(USER, tag("dense", "spacing", "negative", ts=ts()))
    store.list_preferences(USER)
    store.flush()


def clock_ts(clock: ManualClock) -> str:
    """Advance the clock by a day and return it as an event timestamp."""
    clock.advance_days(1)
    return format_ts(clock.ms)


def read_everything(store: MemoryStore, projects: tuple[str, ...]) -> bytes:
    blob = json.dumps(observe(store, USER, projects)).encode()
    blob += b"".join(msgspec.json.encode(e) for e in store.events(USER))
    return blob


@pytest.mark.parametrize("secret_project", [None, "p1"])
def test_forget_erases_pattern_from_every_file_and_read(
    tmp_path: Path, clock: ManualClock, secret_project: str | None
) -> None:
    root = tmp_path / "mem"
    store = MemoryStore(root, derivation_version="1", clock=clock)
    seed_user(store, clock, secret_project)
    with versions_for_test() as versions:  # cache entries of another version hold it too
        MemoryStore(root, derivation_version=versions[1], clock=clock).list_preferences(USER)
    d = user_dir(root)
    holders = files_containing(d, SECRET.encode())
    assert "events.jsonl" in holders and "snapshot.json" in holders
    assert sum(h.startswith("cache/") for h in holders) >= 3, holders
    other = MemoryStore(root, derivation_version="1", clock=clock)
    other.list_preferences(USER)  # another instance holding the secret in memory
    max_seq = max(e.seq for e in store.events(USER))

    removed = store.forget(USER, "color", SECRET, project_id=secret_project)

    assert removed == 4  # three signals and the refinement whose diff names the pattern
    assert files_containing(d, SECRET.encode()) == []
    projects = ("p1", "px")
    for s in (store, other, MemoryStore(root, derivation_version="1", clock=clock)):
        assert SECRET.encode() not in read_everything(s, projects)
    assert files_containing(d, SECRET.encode()) == []  # reads did not write it back
    kept = {(e.pattern) for e in store.events(USER) if isinstance(e, SignalEvent)}
    assert kept == {"airy", "keep_proj", "dense"}
    assert observe(store, USER, projects) == observe_from_scratch(root, USER, "1", projects)
    # seq numbers are never reused, also by a fresh store
    new = store.ingest_signal(USER, tag("after", ts=clock_ts(clock)))
    assert new is not None and store.events(USER)[-1].seq == max_seq + 1
    MemoryStore(root, derivation_version="1", clock=clock).ingest_signal(USER, tag("after2"))
    assert store.events(USER)[-1].seq == max_seq + 2
    assert_log_sound(root)


def test_forget_in_one_bucket_keeps_the_other(tmp_path: Path, clock: ManualClock) -> None:
    store = MemoryStore(tmp_path / "mem", derivation_version="1", clock=clock)
    store.ingest_signal(USER, tag(SECRET, "color", ts=clock_ts(clock)))
    store.ingest_signal(USER, tag(SECRET, "color", scope="project", project_id="p1"))
    assert store.forget(USER, "color", SECRET, project_id="p1") == 1
    remaining = [p.scope for p in store.list_preferences(USER) if p.pattern == SECRET]
    assert remaining == ["global"]
    assert store.forget(USER, "color", SECRET) == 1
    assert files_containing(user_dir(tmp_path / "mem"), SECRET.encode()) == []


SECRETS = {"global": "zz_global_secret_zz", "p1": "zz_p1_secret_zz", "p2": "zz_p2_secret_zz"}


@pytest.mark.parametrize(
    ("scope", "erased"),
    [("all", {"global", "p1", "p2"}), ("global", {"global"}), ("project:p1", {"p1"})],
)
def test_reset_erases_scope_from_every_file_and_read(
    tmp_path: Path, clock: ManualClock, scope: str, erased: set[str]
) -> None:
    root = tmp_path / "mem"
    store = MemoryStore(root, derivation_version="1", clock=clock)
    for _ in range(2):
        for bucket, secret in SECRETS.items():
            project = None if bucket == "global" else bucket
            store.ingest_signal(
                USER,
                tag(
                    secret,
                    scope="project" if project else "global",
                    project_id=project,
                    ts=clock_ts(clock),
                ),
            )
            store.retrieve_for_injection(USER, {"project_id": project})
    store.run_decay(USER, now="2026-01-01T00:00:00Z")  # a decay_pass event in the log too
    store.list_preferences(USER)
    store.flush()  # reads defer write-back: make the snapshot hold every secret
    d = user_dir(root)
    for secret in SECRETS.values():
        assert "snapshot.json" in files_containing(d, secret.encode())
    max_seq = max(e.seq for e in store.events(USER))

    store.reset_memory(USER, scope)

    projects = ("p1", "p2")
    for bucket, secret in SECRETS.items():
        holders = files_containing(d, secret.encode())
        seen = [
            secret.encode() in read_everything(s, projects)
            for s in (store, MemoryStore(root, derivation_version="1", clock=clock))
        ]
        if bucket in erased:
            assert holders == [], (bucket, holders)
            assert seen == [False, False]
        else:
            assert "events.jsonl" in holders
            assert seen == [True, True]
    assert observe(store, USER, projects) == observe_from_scratch(root, USER, "1", projects)
    store.ingest_signal(USER, tag("after_reset", ts=clock_ts(clock)))
    assert store.events(USER)[-1].seq == max_seq + 1
    assert_log_sound(root)


def test_erasure_of_the_tail_never_reuses_seq(tmp_path: Path, clock: ManualClock) -> None:
    root = tmp_path / "mem"
    store = MemoryStore(root, derivation_version="1", clock=clock)
    for pat in ("a", "b", SECRET, SECRET):
        store.ingest_signal(USER, tag(pat, ts=clock_ts(clock)))
    assert [e.seq for e in store.events(USER)] == [1, 2, 3, 4]
    assert store.forget(USER, "layout", SECRET) == 2
    assert [e.seq for e in store.events(USER)] == [1, 2]
    MemoryStore(root, derivation_version="1", clock=clock).ingest_signal(USER, tag("c"))
    # seq_floor in the header must win over the last surviving event (was [1, 2, 3])
    assert [e.seq for e in store.events(USER)] == [1, 2, 5]


def test_reset_all_never_reuses_seq(tmp_path: Path, clock: ManualClock) -> None:
    root = tmp_path / "mem"
    store = MemoryStore(root, derivation_version="1", clock=clock)
    for pat in ("a", "b", SECRET):
        store.ingest_signal(USER, tag(pat, ts=clock_ts(clock)))
    store.reset_memory(USER, "all")
    assert store.events(USER) == []
    assert store.list_preferences(USER) == []
    MemoryStore(root, derivation_version="1", clock=clock).ingest_signal(USER, tag("d"))
    assert [e.seq for e in store.events(USER)] == [4]
    store.reset_memory(USER, "all")
    store.ingest_signal(USER, tag("e"))
    assert [e.seq for e in assert_log_sound(root)] == [5]


CRASH_IN_SNAPSHOT_WRITE = textwrap.dedent(
    """
    import os, sys
    from creative_memory import MemoryStore, Preference
    root, user, secret = sys.argv[1:4]
    store = MemoryStore(root, derivation_version="1")
    sig = {"signal_type": "explicit_tag", "pattern": secret, "preference_type": "color",
           "polarity": "positive", "scope": "global", "timestamp": "2025-02-01T00:00:00Z"}
    store.ingest_signal(user, sig)
    real_replace = os.replace
    def dying_replace(src, dst, *a, **k):
        if str(dst).endswith("snapshot.json"):
            os._exit(9)  # the process dies after writing the temp file, before the rename
        return real_replace(src, dst, *a, **k)
    os.replace = dying_replace
    store.list_preferences(user)
    """
)


def test_forget_also_erases_temp_files_left_by_a_crash(tmp_path: Path) -> None:
    root = tmp_path / "mem"
    proc = subprocess.run(
        [sys.executable, "-c", CRASH_IN_SNAPSHOT_WRITE, str(root), USER, SECRET],
        env=child_env(),
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 9, proc.stderr.decode()
    leftovers = [n for n in files_containing(user_dir(root), SECRET.encode()) if n.endswith(".tmp")]
    assert leftovers, "the crash should have left the snapshot's temp file behind"
    store = MemoryStore(root, derivation_version="1", clock=ManualClock())
    assert store.forget(USER, "color", SECRET) == 1
    assert files_containing(user_dir(root), SECRET.encode()) == []


# -- (b) crashes -----------------------------------------------------------------------------
CRASH_CHILD = textwrap.dedent(
    """
    import random, sys
    from creative_memory import MemoryStore, Preference
    root, user, prefix, seed = sys.argv[1:5]
    rng = random.Random(int(seed))
    store = MemoryStore(root, derivation_version="1")
    patterns = ["airy", "dense", "neon", "serif", "grid"]
    print("ready", flush=True)
    i = 0
    while True:
        n = 1 if rng.random() < 0.7 else rng.randint(2, 5)
        sigs = [{
            "signal_type": rng.choice(["explicit_tag", "thumbs_up", "thumbs_down"]),
            "pattern": rng.choice(patterns),
            "preference_type": rng.choice(["layout", "color"]),
            "polarity": rng.choice(["positive", "negative"]),
            "scope": "global" if rng.random() < 0.7 else "project",
            "project_id": "proj",
            "artifact_id": f"{prefix}-{i + j}",
        } for j in range(n)]
        results = store.ingest_signals(user, sigs)
        # acknowledged only now that the call has returned
        for j, rec in enumerate(results):
            print(f"{prefix}-{i + j} {rec.last_derived_event_seq}", flush=True)
        i += n
        if rng.random() < 0.25:
            store.retrieve_for_injection(user)  # cache + snapshot write-back
    """
)


def run_and_kill(root: Path | str, prefix: str, seed: int, delay: float) -> list[tuple[str, int]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", CRASH_CHILD, str(root), USER, prefix, str(seed)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env(),
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first == b"ready\n", first + (proc.stderr.read() if proc.stderr else b"")
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == -signal.SIGKILL, err.decode()
    acked = []
    for line in out.split(b"\n"):
        if line:  # a line torn by the kill is not an acknowledgement we can rely on
            parts = line.decode().split(" ")
            if len(parts) == 2 and parts[1].isdigit():
                acked.append((parts[0], int(parts[1])))
    return acked


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(5))
def test_sigkill_at_random_moments_loses_no_acknowledged_event(tmp_path: Path, chunk: int) -> None:
    """50 kills in five stores of ten (so the chunks run in parallel); within a store each
    child may find the previous one's torn tail and repairs it."""
    rng = random.Random(20250107 + chunk)
    root = tmp_path / "mem"
    acked: dict[str, int] = {}
    trials = 10
    for trial in range(trials):
        acked.update(run_and_kill(root, f"t{trial}", rng.randrange(10**9), rng.uniform(0, 0.3)))
        events = MemoryStore(root, derivation_version="1").events(USER)
        # 1. every acknowledged event is present, exactly once, with the seq it was given
        by_artifact: dict[str | None, int] = {}
        for ev in events:
            if isinstance(ev, SignalEvent) and ev.pattern != "after_crash":
                assert ev.artifact_id not in by_artifact, f"duplicate {ev.artifact_id}"
                by_artifact[ev.artifact_id] = ev.seq
        missing = {a: s for a, s in acked.items() if by_artifact.get(a) != s}
        assert not missing, f"trial {trial}: acknowledged events lost: {missing}"
        # 2. the log parses (a torn tail, if any, is ignored) and is what readers see
        assert assert_log_sound(root, allow_torn_tail=True) == events
        # 3. derived state of a normally opened store equals a fresh derivation
        opened = observe(MemoryStore(root, derivation_version="1"), USER, ("proj",))
        assert opened == observe_from_scratch(root, USER, "1", ("proj",)), f"trial {trial}"
        snapshot = user_dir(root) / "snapshot.json"
        if snapshot.exists():
            json.loads(snapshot.read_bytes())
        # 4. appending still works (every other trial, so the next child repairs sometimes)
        if trial % 2:
            writer = MemoryStore(root, derivation_version="1")
            assert writer.ingest_signal(USER, tag("after_crash")) is not None
            sound = assert_log_sound(root)
            assert sound[:-1] == events and sound[-1].seq == events[-1].seq + 1
    assert len(acked) > trials  # the kills did land while events were being written


TORN_TAILS = [
    b'{"kind":"signal","v":1,"seq":99,"at":"2025-01-0',
    b"{",
    b"\x00\x00\x00\x00",
    b'{"kind":"signal","v":1,"seq":6,"at":"2025-01-01T00:00:00.000Z","recorded_at":"20',
]


@pytest.mark.parametrize("garbage", TORN_TAILS)
@pytest.mark.parametrize("repair", ["append", "forget"])
def test_torn_last_line_is_ignored_then_repaired(
    tmp_path: Path, clock: ManualClock, garbage: bytes, repair: str
) -> None:
    root = tmp_path / "mem"
    store = MemoryStore(root, derivation_version="1", clock=clock)
    for pat in ("a", "b", "c", "gone", "d"):
        store.ingest_signal(USER, tag(pat, ts=clock_ts(clock)))
    before_events = store.events(USER)
    before = observe(store, USER)
    log = user_dir(root) / "events.jsonl"
    with open(log, "ab") as f:  # a crash in the middle of an append
        f.write(garbage)
    # readers ignore the torn line: the same store, a new store, the event count
    assert store.events(USER) == before_events
    assert store.inspect(USER)["event_count"] == len(before_events)
    assert observe(store, USER) == before
    assert observe(MemoryStore(root, derivation_version="1", clock=clock), USER) == before
    # the next writer repairs it without losing a complete event
    writer = MemoryStore(root, derivation_version="1", clock=clock)
    if repair == "append":
        writer.ingest_signal(USER, tag("e", ts=clock_ts(clock)))
        expected = [*(e.seq for e in before_events), 6]
    else:
        assert writer.forget(USER, "layout", "gone") == 1
        expected = [1, 2, 3, 5]
    events = assert_log_sound(root)
    assert [e.seq for e in events] == expected
    before_by_seq = {e.seq: pattern_of(e) for e in before_events}
    assert all(before_by_seq[e.seq] == pattern_of(e) for e in events if e.seq in before_by_seq)
    assert observe(store, USER) == observe_from_scratch(root, USER)
    store.ingest_signal(USER, tag("f", ts=clock_ts(clock)))
    assert assert_log_sound(root)[-1].seq == (7 if repair == "append" else 6)
    # the counts of both stores (each counted before) follow the repair and the appends
    for s in (store, writer):
        s.ingest_signals(USER, [tag(p, ts=clock_ts(clock)) for p in "ghi"])
        assert s.inspect(USER)["event_count"] == len(assert_log_sound(root))


def test_torn_header_of_a_new_log_is_repaired(tmp_path: Path, clock: ManualClock) -> None:
    root = tmp_path / "mem"
    d = user_dir(root)
    d.mkdir(parents=True, mode=0o700)
    (d / "events.jsonl").write_bytes(b'{"kind":"header","v":1,"gen')
    store = MemoryStore(root, derivation_version="1", clock=clock)
    assert store.events(USER) == []
    assert store.list_preferences(USER) == []
    store.ingest_signal(USER, tag("a"))
    assert [e.seq for e in assert_log_sound(root)] == [1]


@pytest.mark.parametrize(
    "bad",
    [
        b'{"kind":"signal","broken":true}',
        # a value outside an event field's fixed set (the signal types, the polarities,
        # the scopes) does not decode either
        b"signal_type:thumbs_sideways",
        b"polarity:sideways",
        b"scope:galactic",
    ],
)
def test_corrupt_complete_line_is_reported_not_skipped(
    tmp_path: Path, clock: ManualClock, bad: bytes
) -> None:
    root = tmp_path / "mem"
    store = MemoryStore(root, derivation_version="1", clock=clock)
    for pat in ("a", "b", "c"):
        store.ingest_signal(USER, tag(pat))
    log = user_dir(root) / "events.jsonl"
    lines = log.read_bytes().split(b"\n")
    lines[2] = corrupted(lines[2], bad)
    log.write_bytes(b"\n".join(lines))
    # the file's line 3 (the header is line 1), whole-log read or cold derivation
    with pytest.raises(StorageError, match=r"events\.jsonl: line 3 is not a valid event"):
        MemoryStore(root, derivation_version="1", clock=clock).events(USER)
    with pytest.raises(StorageError, match=r"events\.jsonl: line 3 is not a valid event"):
        MemoryStore(root, derivation_version="1", clock=clock).retrieve_for_injection(USER)


def corrupted(line: bytes, bad: bytes) -> bytes:
    """``bad`` itself, or ``line`` with the field ``bad`` names ("field:value") changed."""
    if bad.startswith(b"{"):
        return bad
    field, _, value = bad.decode().partition(":")
    doc = json.loads(line)
    assert field in doc
    doc[field] = value
    return json.dumps(doc).encode()


def test_a_corrupt_line_is_named_by_its_line_in_the_file_wherever_it_is_read(
    tmp_path: Path, clock: ManualClock
) -> None:
    """Past the first chunk a cold derivation reads, and after the cached prefix a warm
    read decodes, the line number counts from the file's first line."""
    root = tmp_path / "mem"
    store = MemoryStore(root, derivation_version="1", clock=clock)
    store.ingest_signals(USER, [tag(f"p{i % 50}", tag_text="x" * 200) for i in range(6000)])
    log = user_dir(root) / "events.jsonl"
    assert log.stat().st_size > 2 * READ_CHUNK  # the bad line lies in a later chunk
    good = log.read_bytes()
    lines = good.split(b"\n")
    lines[5000] = corrupted(lines[5000], b"polarity:sideways")
    log.write_bytes(b"\n".join(lines))
    with pytest.raises(StorageError, match=r"line 5001 is not a valid event"):
        MemoryStore(root, derivation_version="1", clock=clock).retrieve_for_injection(USER)
    # a warm read: the cache holds the 6,000 events, two more are appended after them
    log.write_bytes(good)
    store = MemoryStore(root, derivation_version="1", clock=clock)
    store.retrieve_for_injection(USER)
    store.ingest_signals(USER, [tag("late1"), tag("late2")])
    lines = log.read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) == 6004  # the header, 6,002 events, ""
    lines[-2] = corrupted(lines[-2], b"signal_type:thumbs_sideways")
    log.write_bytes(b"\n".join(lines))
    with pytest.raises(StorageError, match=r"line 6003 is not a valid event"):
        MemoryStore(root, derivation_version="1", clock=clock).retrieve_for_injection(USER)


# -- (c) concurrency -------------------------------------------------------------------------
CONCURRENT_CHILD = textwrap.dedent(
    """
    import os, sys, time
    from creative_memory import MemoryStore, Preference
    root, user, prefix, count, mode, go = sys.argv[1:7]
    count = int(count)
    store = MemoryStore(root, derivation_version="1")
    while not os.path.exists(go):
        time.sleep(0.001)
    def sig(i):
        return {"signal_type": "thumbs_up" if i % 3 else "thumbs_down",
                "pattern": f"{prefix}_{i}", "preference_type": "layout",
                "polarity": "negative" if i % 3 == 0 else "positive",
                "scope": "project" if i % 4 == 0 else "global", "project_id": "shared",
                "artifact_id": f"{prefix}_{i}"}
    i = 0
    while i < count:
        n = min(5, count - i) if "batch" in mode else 1
        for j, rec in enumerate(store.ingest_signals(user, [sig(i + j) for j in range(n)])):
            print(f"{prefix}_{i + j} {rec.last_derived_event_seq}", flush=True)
        i += n
        if "read" in mode and i % 10 == 0:
            store.retrieve_for_injection(user, {"project_id": "shared"})
            store.list_preferences(user)
    """
)


def test_concurrent_processes_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    root = tmp_path / "mem"
    go = tmp_path / "go"
    per_process = 260
    modes = ["single", "batch", "single+read", "batch+read"]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                CONCURRENT_CHILD,
                str(root),
                USER,
                f"w{k}",
                str(per_process),
                mode,
                str(go),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env(),
        )
        for k, mode in enumerate(modes)
    ]
    time.sleep(0.3)  # let every child import and wait at the barrier
    go.touch()
    acks: list[list[tuple[str, int]]] = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err.decode()
        acks.append([(a, int(s)) for a, s in (ln.split() for ln in out.decode().splitlines())])

    events = assert_log_sound(root)  # parses, seq strictly increasing, chain consistent
    total = per_process * len(modes)
    assert len(events) == total >= 1000
    patterns = [e.pattern for e in events if isinstance(e, SignalEvent)]
    expected = {f"w{k}_{i}" for k in range(len(modes)) for i in range(per_process)}
    assert len(patterns) == len(set(patterns)) == total
    assert set(patterns) == expected
    seq_of = {e.pattern: e.seq for e in events if isinstance(e, SignalEvent)}
    interleaved = 0
    for child_acks in acks:
        assert len(child_acks) == per_process
        seqs = [s for _, s in child_acks]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        assert all(seq_of[a] == s for a, s in child_acks)
        interleaved += sum(b - a > 1 for a, b in itertools.pairwise(seqs))
    assert interleaved > 0, "the writers never overlapped; the test proved nothing"
    assert observe(MemoryStore(root, derivation_version="1"), USER, ("shared",)) == (
        observe_from_scratch(root, USER, "1", ("shared",))
    )


# -- (d) the derivation cache ----------------------------------------------------------------
def ingest_n(store: MemoryStore, clock: ManualClock, n: int, prefix: str = "p") -> None:
    for i in range(n):
        store.ingest_signal(
            USER,
            tag(
                f"{prefix}{i % 7}",
                "layout" if i % 2 else "color",
                "negative" if i % 5 == 0 else "positive",
                scope="project" if i % 3 == 0 else "global",
                project_id="proj",
                ts=clock_ts(clock),
            ),
        )


def test_cache_survives_restart_and_extends_a_prefix_in_o_k(
    tmp_path: Path, clock: ManualClock, apply_counter: list[int]
) -> None:
    root = tmp_path / "mem"
    a = MemoryStore(root, derivation_version="1", clock=clock)
    ingest_n(a, clock, 40)
    expected = a.retrieve_for_injection(USER, {"project_id": "proj"}).to_dict()

    apply_counter[0] = 0
    b = MemoryStore(root, derivation_version="1", clock=clock)
    assert b.retrieve_for_injection(USER, {"project_id": "proj"}).to_dict() == expected
    assert apply_counter[0] == 0, "a restarted store must be served from the cache"

    c = MemoryStore(root, derivation_version="1", clock=clock)
    ingest_n(c, clock, 7, prefix="q")
    apply_counter[0] = 0
    d = MemoryStore(root, derivation_version="1", clock=clock)
    got = observe(d, USER, ("proj",))
    assert apply_counter[0] == 7, "a new store extends the cached prefix by the k new events"
    assert got == observe_from_scratch(root, USER, "1", ("proj",))

    apply_counter[0] = 0
    assert observe(a, USER, ("proj",)) == got  # a's in-memory state, extended by k too
    assert apply_counter[0] == 7

    shutil.rmtree(user_dir(root) / "cache")
    (user_dir(root) / "snapshot.json").unlink()
    apply_counter[0] = 0
    e = MemoryStore(root, derivation_version="1", clock=clock)
    assert observe(e, USER, ("proj",)) == got
    assert apply_counter[0] == 47, "cold start derives the whole log on first read"
    assert (user_dir(root) / "snapshot.json").exists()
    assert any((user_dir(root) / "cache").iterdir())


def test_snapshot_is_human_readable_current_records(tmp_path: Path, clock: ManualClock) -> None:
    root = tmp_path / "mem"
    store = MemoryStore(root, derivation_version="1", clock=clock)
    ingest_n(store, clock, 12)
    listed = store.list_preferences(USER)
    snap = json.loads((user_dir(root) / "snapshot.json").read_text())
    assert snap["derivation_version"] == "1"
    assert snap["last_derived_event_seq"] == 12
    key = "id"
    assert sorted(snap["preferences"], key=lambda r: r[key]) == sorted(
        (p.to_dict() for p in listed), key=lambda r: r[key]
    )


def cache_entries(root: Path) -> set[str]:
    d = user_dir(root) / "cache"
    return {p.name.removesuffix(".state.json") for p in d.iterdir() if p.name.endswith(".json")}


def test_lru_eviction_keeps_at_most_capacity_newest_entries(
    tmp_path: Path, clock: ManualClock
) -> None:
    root = tmp_path / "mem"
    store = MemoryStore(root, derivation_version="1", clock=clock, cache_capacity=3)
    written: list[str] = []
    for i in range(8):
        store.ingest_signal(USER, tag(f"p{i % 3}", ts=clock_ts(clock)))
        store.list_preferences(USER)
        store.flush()  # reads defer write-back; this writes the entry now
        written.append(cache_key(store.events(USER)[-1].h, "1"))
        assert len(cache_entries(root)) <= 3
        time.sleep(0.02)  # distinct mtimes (recency) for every entry
    assert cache_entries(root) == set(written[-3:])


def test_lru_evicts_the_least_recently_used(tmp_path: Path) -> None:
    cache = FileDerivationCache(tmp_path / "u", capacity=3)
    for key in ("k1", "k2", "k3"):
        cache.put(key, key.encode())
        time.sleep(0.02)
    assert cache.get("k1") == b"k1"  # k1 is now the most recently used
    time.sleep(0.02)
    cache.put("k4", b"k4")
    assert cache_entries_of(cache) == {"k1", "k3", "k4"}
    time.sleep(0.02)
    cache.put("k5", b"k5")
    assert cache_entries_of(cache) == {"k1", "k4", "k5"}
    # a fresh object over the same directory sees the same entries (state is on disk)
    assert FileDerivationCache(tmp_path / "u", capacity=3).keys() == {"k1", "k4", "k5"}


def cache_entries_of(cache: FileDerivationCache) -> set[str]:
    return {p.name.removesuffix(".state.json") for p in cache.dir.iterdir()}


CORRUPTIONS: dict[str, Callable[[bytes], bytes]] = {
    "truncated": lambda b: b[: len(b) // 2],
    "empty": lambda b: b"",
    "garbage": lambda b: b"\x00not json\xff",
    "wrong_shape": lambda b: b'{"version": "1"}',
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_corrupt_cache_entry_is_ignored(
    tmp_path: Path, clock: ManualClock, apply_counter: list[int], corruption: str
) -> None:
    root = tmp_path / "mem"
    store = MemoryStore(root, derivation_version="1", clock=clock)
    ingest_n(store, clock, 15)
    expected = observe(store, USER, ("proj",))
    (entry,) = (user_dir(root) / "cache").iterdir()
    entry.write_bytes(CORRUPTIONS[corruption](entry.read_bytes()))
    apply_counter[0] = 0
    reopened = MemoryStore(root, derivation_version="1", clock=clock)
    assert observe(reopened, USER, ("proj",)) == expected
    assert apply_counter[0] == 15  # derived from the events instead
    assert DerivedState.load(entry.read_bytes()).last_seq == 15  # and the entry rewritten


def test_other_version_rederives_without_touching_events(
    tmp_path: Path, clock: ManualClock, apply_counter: list[int]
) -> None:
    root = tmp_path / "mem"
    v1 = MemoryStore(root, derivation_version="1", clock=clock)
    ingest_n(v1, clock, 20)
    v1.list_preferences(USER)
    log = user_dir(root) / "events.jsonl"
    log_bytes, log_stat = log.read_bytes(), log.stat()
    with versions_for_test() as versions:
        other = versions[1]
        apply_counter[0] = 0
        s = MemoryStore(root, derivation_version=other, clock=clock)
        got = observe(s, USER, ("proj",))
        assert apply_counter[0] == 20
        assert {p["derivation_version"] for p in got["list"]} == {other}
        assert got == observe_from_scratch(root, USER, other, ("proj",))
        assert {k.split("-")[0] for k in cache_entries(root)} == {"v1", f"v{other}"}
    assert log.read_bytes() == log_bytes
    assert log.stat().st_mtime_ns == log_stat.st_mtime_ns
    apply_counter[0] = 0
    back = MemoryStore(root, derivation_version="1", clock=clock)
    assert {p.derivation_version for p in back.list_preferences(USER)} == {"1"}
    assert apply_counter[0] == 0  # version 1's entry is still cached


# -- (e) permissions -------------------------------------------------------------------------
def test_directories_0700_files_0600_even_with_umask_0(tmp_path: Path, clock: ManualClock) -> None:
    old = os.umask(0)
    try:
        root = tmp_path / "mem"
        store = MemoryStore(root, derivation_version="1", clock=clock)
        ingest_n(store, clock, 10)
        store.list_preferences(USER)
        store.log_refinement(USER, artifact_id="a", diff={"k": "v"})
        store.forget(USER, "layout", "p1")
        store.set_memory_enabled(USER, True)
        store.set_project_disabled(USER, "proj", True)
        store.retrieve_for_injection(USER, {"project_id": "proj"})
        store.reset_memory(USER, "project:proj")
        store.list_preferences(USER)
    finally:
        os.umask(old)
    d = user_dir(root)
    assert (d / "cache").is_dir() and (d / "snapshot.json").is_file()
    assert (d / ".lock").is_file() and (d / "settings.json").is_file()
    for path in (root, d, d / "cache"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    for path in d.rglob("*"):
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))


def test_threads_sharing_a_store_each_get_their_own_records(tmp_path: Path) -> None:
    """Regression: another thread's read must not fold an append before its caller does,
    which made ``ingest_signal`` return ``None`` for stored events."""
    import threading

    from creative_memory import MemoryStore, Preference

    store = MemoryStore(tmp_path / "m", derivation_version="1")
    results: dict[str, Preference | None] = {}
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(60):
                pattern = f"p{t}_{i}"
                rec = store.ingest_signal(
                    "u",
                    {
                        "signal_type": "explicit_tag",
                        "pattern": pattern,
                        "preference_type": "layout",
                        "polarity": "positive",
                        "scope": "global",
                        "timestamp": "2026-01-01T00:00:00Z",
                    },
                )
                results[pattern] = rec
                store.retrieve_for_injection("u")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    assert len(results) == 240
    for pattern, rec in results.items():
        assert rec is not None and rec.pattern == pattern
