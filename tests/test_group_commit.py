"""Group commit and lock-free reads under concurrency (docs/storage.md, "Group commit";
docs/architecture.md, "Concurrency").

* Threads appending at once to one user's file log share fsyncs: fewer fsyncs than
  appends, one valid chained log holding every event, each caller handed its own events
  and their place in the log.
* A failed write or fsync fails every call of its group, and the log stays valid.
* Derived state after concurrent appends and reads equals what a fresh store derives from
  the same log (every version), and a thread reads its own appends.
* Warm reads use the published read-only copy without the user's lock; its reads give the
  same bytes as the live state's.
"""

from __future__ import annotations

import errno
import itertools
import os
import random
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from creative_memory import MemoryStore
from creative_memory.app.derived import frozen_copy
from creative_memory.engine.derivation.registry import known_versions
from creative_memory.engine.events import Event, SignalEvent, decode_event_lines
from creative_memory.engine.retrieval import retrieve_state
from creative_memory.engine.scope import select_records
from creative_memory.storage import FileStorage
from creative_memory.storage.base import Appended
from tests.conftest import ManualClock, held_elsewhere, tag
from tests.test_storage_durability import assert_log_sound

U = "gc_user"
THREADS = 16


def sig(rng: random.Random, artifact: str) -> dict[str, Any]:
    scope = "global" if rng.random() < 0.6 else "project"
    return tag(
        rng.choice(["airy", "dense", "neon", "serif", "grid", "mono"]),
        rng.choice(["layout", "color"]),
        rng.choice(["positive", "negative"]),
        signal_type=rng.choice(["explicit_tag", "thumbs_up", "thumbs_down"]),
        scope=scope,
        project_id=rng.choice(["p1", "p2"]) if scope == "project" else None,
    ) | {"artifact_id": artifact}


def run_threads(n: int, work: Callable[[int], None]) -> None:
    errors: list[BaseException] = []
    start = threading.Barrier(n)

    def run(t: int) -> None:
        try:
            start.wait()
            work(t)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors


def recording(storage: FileStorage) -> list[tuple[int, Appended]]:
    """Wrap the backend's append so every call's answer is kept (with its thread)."""
    seen: list[tuple[int, Appended]] = []
    real = storage.append_positioned

    def append_positioned(user_id: str, events: Any, **kw: Any) -> Appended:
        out = real(user_id, events, **kw)
        seen.append((threading.get_ident(), out))
        return out

    storage.append_positioned = append_positioned  # type: ignore[method-assign]
    return seen


def test_concurrent_appends_share_fsyncs_and_chain_one_log(
    tmp_path: Path, log_fsyncs: list[int]
) -> None:
    root = tmp_path / "mem"
    store = MemoryStore(root, derivation_version="1")
    store.ingest_signal(U, tag("seed"))  # the log exists: every later fsync is an append's
    log_fsyncs[0] = 0
    assert isinstance(store._storage, FileStorage)
    answers = recording(store._storage)
    per_thread = 12

    def work(t: int) -> None:
        rng = random.Random(t)
        for i in range(per_thread):
            store.ingest_signals(U, [sig(rng, f"t{t}-{i}")], records=False)

    run_threads(THREADS, work)
    appends = THREADS * per_thread
    assert len(answers) == appends
    assert 0 < log_fsyncs[0] < appends  # groups formed
    events = assert_log_sound(root, U)  # one valid chain
    assert [e.seq for e in events] == list(range(1, appends + 2))
    artifacts = sorted(str(e.artifact_id) for e in events[1:] if isinstance(e, SignalEvent))
    assert artifacts == sorted(f"t{t}-{i}" for t in range(THREADS) for i in range(per_thread))
    # each caller got its own events, as stored, at the byte range they occupy
    data = (root / U / "events.jsonl").read_bytes()
    by_seq = {e.seq: e for e in events}
    spans = []
    for _, a in answers:
        assert len(a.events) == 1 and a.events[0] == by_seq[a.events[0].seq]
        assert decode_event_lines(data[a.start : a.end - 1]) == a.events
        spans.append((a.start, a.end))
    spans.sort()
    assert all(prev[1] == nxt[0] for prev, nxt in itertools.pairwise(spans))
    # within one thread, later calls got later seqs
    for ident in {i for i, _ in answers}:
        seqs = [a.events[0].seq for i, a in answers if i == ident]
        assert seqs == sorted(seqs)


def test_without_group_commit_every_append_fsyncs(tmp_path: Path, log_fsyncs: list[int]) -> None:
    root = tmp_path / "mem"
    store = MemoryStore(root, derivation_version="1")
    store.ingest_signal(U, tag("seed"))
    assert isinstance(store._storage, FileStorage)
    store._storage.group_commit = False
    log_fsyncs[0] = 0

    def work(t: int) -> None:
        for i in range(5):
            store.ingest_signal(U, tag(f"p{t}{i}"))

    run_threads(8, work)
    assert log_fsyncs[0] == 40
    assert len(assert_log_sound(root, U)) == 41


def test_a_failed_fsync_fails_every_call_of_its_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "mem"
    storage = FileStorage(root)
    store = MemoryStore(root, derivation_version="1")
    store._storage = storage
    store._states.storage = storage
    store.ingest_signal(U, tag("seed"))
    real = os.fsync
    in_first, release, calls = threading.Event(), threading.Event(), [0]

    def fsync(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith("events.jsonl"):
            calls[0] += 1
            if calls[0] == 1:  # the first group waits on "the disk" while others queue
                in_first.set()
                assert release.wait(10)
            elif calls[0] == 2:
                raise OSError(errno.EIO, "simulated I/O error")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    outcomes: dict[str, BaseException | None] = {}

    def append(name: str) -> None:
        try:
            store.ingest_signals(U, [tag(name) | {"artifact_id": name}], records=False)
            outcomes[name] = None
        except BaseException as exc:
            outcomes[name] = exc

    first = threading.Thread(target=append, args=("first",))
    first.start()
    assert in_first.wait(10)
    group = [threading.Thread(target=append, args=(f"g{i}",)) for i in range(6)]
    for th in group:
        th.start()
    deadline = time.monotonic() + 10
    while storage._groups.pending(U) < 6:  # all six queued behind the first write
        assert time.monotonic() < deadline
        time.sleep(0.001)
    release.set()
    for th in [first, *group]:
        th.join()
    assert outcomes.pop("first") is None
    assert len(outcomes) == 6
    assert all(isinstance(e, OSError) and e.errno == errno.EIO for e in outcomes.values())
    # the log stays valid, and appending goes on after whatever the failed group left
    events = assert_log_sound(root, U)
    assert "first" in {e.artifact_id for e in events if isinstance(e, SignalEvent)}
    store.ingest_signal(U, tag("after") | {"artifact_id": "after"})
    again = assert_log_sound(root, U)
    assert again[:-1] == events and again[-1].seq == events[-1].seq + 1


def copy_log(root: Path, to: Path) -> Path:
    shutil.copytree(root / U, to / U, ignore=shutil.ignore_patterns("cache", "snapshot.json"))
    return to


def everything(store: MemoryStore) -> dict[str, Any]:
    out: dict[str, Any] = {
        "list": [p.to_dict() for p in store.list_preferences(U)],
        "refinements": [r.to_dict() for r in store.refinement_log(U)],
        "inspect": store.inspect(U),
    }
    for p in (None, "p1", "p2"):
        ctx = None if p is None else {"project_id": p}
        out[f"retrieval:{p}"] = store.retrieve_for_injection(U, ctx).to_dict()
    return out


@pytest.mark.parametrize("version", known_versions())
def test_concurrent_appends_and_reads_derive_what_a_fresh_store_derives(
    tmp_path: Path, version: str
) -> None:
    root = tmp_path / "mem"
    store = MemoryStore(root, derivation_version=version, clock=ManualClock())
    store.ingest_signal(U, tag("seed"))
    writers, per_writer = 8, 12
    done = threading.Event()

    def work(t: int) -> None:
        rng = random.Random(f"{version}-{t}")
        if t >= writers:  # readers, until the writers are done
            while not done.is_set():
                store.retrieve_for_injection(U, {"project_id": rng.choice(["p1", "p2"])})
                store.list_preferences(U)
                store.inspect(U)
            return
        for i in range(per_writer):
            n = 1 if rng.random() < 0.7 else 3
            store.ingest_signals(U, [sig(rng, f"t{t}-{i}-{j}") for j in range(n)], records=False)
            if rng.random() < 0.3:  # read your writes: the new events are in what you read
                assert store.inspect(U)["event_count"] >= 1 + i

    def with_done(t: int) -> None:
        try:
            work(t)
        finally:
            if t < writers:
                finished.append(t)
                if len(finished) == writers:
                    done.set()

    finished: list[int] = []
    run_threads(writers + 3, with_done)
    fresh = MemoryStore(copy_log(root, tmp_path / "fresh"), derivation_version=version)
    assert everything(store) == everything(fresh)
    assert store._memo[U].state.dump() == fresh._memo[U].state.dump()


@pytest.mark.parametrize("version", ["1", "3"])
def test_a_thread_reads_its_own_appends(tmp_path: Path, version: str) -> None:
    store = MemoryStore(tmp_path / "mem", derivation_version=version)
    store.ingest_signal(U, tag("seed"))

    def work(t: int) -> None:
        for i in range(8):
            pattern = f"own_{t}_{i}"
            store.ingest_signals(U, [tag(pattern)], records=False)
            assert pattern in {p.pattern for p in store.list_preferences(U)}
            store.retrieve_for_injection(U)  # keeps a published copy around between appends

    run_threads(8, work)


def mixed_events(store: MemoryStore) -> None:
    rng = random.Random(7)
    for i in range(300):
        store.ingest_signals(U, [sig(rng, f"a{i}")], records=False)
        if i % 50 == 0:
            store.log_refinement(U, artifact_id=f"a{i}", project_id="p1", diff={"n": i})


@pytest.mark.parametrize("version", known_versions())
def test_the_published_copy_reads_like_the_state(tmp_path: Path, version: str) -> None:
    store = MemoryStore(tmp_path / "mem", derivation_version=version)
    mixed_events(store)
    state, _ = store._refresh(U)
    view = frozen_copy(state)
    assert view is not state
    for project in (None, "p1", "p2", "none"):
        for types in (None, ["layout"]):
            assert (
                retrieve_state(view, project, types, ["p2"]).to_dict()
                == retrieve_state(state, project, types, ["p2"]).to_dict()
            )
    for scope in ("all", "global", "project:p1"):
        for polarity in ("all", "negative"):
            a = select_records(view, scope, polarity, 0.1, "all")
            assert a == select_records(state, scope, polarity, 0.1, "all")
    exported = [view.export_record(r) for r in view.all_records()]
    assert exported == [state.export_record(r) for r in state.all_records()]
    assert view.refinements == state.refinements
    # folding more into the state leaves the copy as it was
    before = [r.to_dict() for r in view.all_records()]
    store.ingest_signals(U, [tag("later")], records=False)
    store._refresh(U)
    assert [r.to_dict() for r in view.all_records()] == before


def test_warm_reads_take_no_lock_until_the_log_moves(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "mem", derivation_version="3")
    mixed_events(store)
    expected = store.retrieve_for_injection(U).to_dict()
    store.retrieve_for_injection(U)
    store.retrieve_for_injection(U)  # the second read in a row without news publishes
    with held_elsewhere(store._locked(U)):
        out: list[Any] = []
        reader = threading.Thread(target=lambda: out.append(store.retrieve_for_injection(U)))
        reader.start()
        reader.join(10)
        assert out and out[0].to_dict() == expected  # served while the lock is held
        store.ingest_signals(U, [tag("newer")], records=False)  # the log moves on
        late: list[Any] = []
        reader = threading.Thread(target=lambda: late.append(store.list_preferences(U)))
        reader.start()
        reader.join(0.3)
        assert reader.is_alive() and not late  # the copy is stale: the read waits to derive
    reader.join(10)
    assert "newer" in {p.pattern for p in late[0]}


def test_appends_without_records_do_not_wait_for_a_deriving_read(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "mem", derivation_version="1")
    mixed_events(store)
    store.list_preferences(U)
    with held_elsewhere(store._locked(U)):
        writer = threading.Thread(
            target=lambda: store.ingest_signals(U, [tag("while_held")], records=False)
        )
        writer.start()
        writer.join(10)
        assert not writer.is_alive()  # durable and returned; the next read folds it
    assert "while_held" in {p.pattern for p in store.list_preferences(U)}
    events: list[Event] = store.events(U)
    assert events[-1].seq == len(events)


def test_a_read_waiting_for_the_lock_is_served_by_the_read_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MemoryStore(tmp_path / "mem", derivation_version="3")
    mixed_events(store)
    store.list_preferences(U)
    store.list_preferences(U)  # published
    states = store._states_of(U)
    refreshes: list[str] = []
    real = type(states).refresh

    def counting(self: Any, user_id: str, *args: Any, **kw: Any) -> Any:
        refreshes.append(threading.current_thread().name)
        return real(self, user_id, *args, **kw)

    monkeypatch.setattr(type(states), "refresh", counting)
    go, held = threading.Event(), threading.Event()

    def holder() -> None:  # holds the lock while the reader queues, then derives for both
        with store._locked(U):
            held.set()
            assert go.wait(10)
            store._refresh(U)

    hold = threading.Thread(target=holder, name="holder")
    hold.start()
    assert held.wait(10)
    store.ingest_signals(U, [tag("first_new")], records=False)  # not folded: the lock is busy
    looked = threading.Event()
    read_events = store._storage.read_events

    def watched(*args: Any, **kw: Any) -> Any:
        out = read_events(*args, **kw)
        if threading.current_thread().name == "r":
            looked.set()
        return out

    monkeypatch.setattr(store._storage, "read_events", watched)
    out: list[list[Any]] = []
    reader = threading.Thread(target=lambda: out.append(store.list_preferences(U)), name="r")
    reader.start()
    assert looked.wait(10)  # the reader has looked at the log; the lock is still held
    store.ingest_signals(U, [tag("second_new")], records=False)
    go.set()
    hold.join(10)
    reader.join(10)
    assert refreshes == ["holder"]  # the reader used the holder's state, derived after it looked
    got = [p.to_dict() for p in out[0]]
    assert {"first_new", "second_new"} <= {p["pattern"] for p in got}
    assert got == [p.to_dict() for p in store.list_preferences(U)]


def test_only_a_contended_or_repeated_read_publishes_a_copy(tmp_path: Path) -> None:
    """The first uncontended read after a change pays no copy (its cost grows with the
    records); a read that waited for the lock, or the second in a row without news, does."""
    store = MemoryStore(tmp_path / "mem", derivation_version="1")
    mixed_events(store)
    states = store._states_of(U)
    store.retrieve_for_injection(U)
    store.ingest_signal(U, tag("first"))  # a change (folded by the append itself)
    store.retrieve_for_injection(U)  # the first read after it, uncontended: no copy
    assert U not in states.published
    store.retrieve_for_injection(U)  # the second in a row: published
    assert U in states.published
    store.ingest_signal(U, tag("newer"))  # a change (folded by the append itself)
    store.retrieve_for_injection(U)
    assert U not in states.published
    with held_elsewhere(store._locked(U)):  # a reader that has to wait for the lock
        reader = threading.Thread(target=lambda: store.retrieve_for_injection(U))
        reader.start()
        reader.join(0.2)
        assert reader.is_alive()
    reader.join(10)
    assert U in states.published
