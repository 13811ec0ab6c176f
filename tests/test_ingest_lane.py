"""The ingest lane and the file store's deferred sync (docs/daemon.md, "The ingest lane";
docs/storage.md, "One fsync for a batch").

* Inside ``deferred_sync()`` appends are written at once and fsynced once per log when
  the block ends; readers of the store (and the derived state) see them only then.
* A failed fsync at the end fails the block with a ``StorageError``; the log stays sound.
* The lane answers every call once its batch is durable, each with its own result or
  error, in arrival order; a batch whose fsync fails fails every call in it.
* The daemon ingests through the lane on the file store, and concurrent writers share
  fsyncs there; every acknowledged event is in the log.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from creative_memory import MemoryStore
from creative_memory.app.derived import DerivedStates
from creative_memory.app.lane import (
    LOOP_BATCH_EVENTS,
    LOOP_TURNS,
    MULTI_USER_LANES,
    IngestLane,
    IngestLanes,
)
from creative_memory.engine.errors import StorageError
from creative_memory.http import DaemonConfig, ThreadedDaemon
from creative_memory.storage import FileStorage
from creative_memory.storage.files import backend as files_backend
from creative_memory.storage.files import deferred
from tests.conftest import held_elsewhere, tag
from tests.test_storage_durability import assert_log_sound

U = "lane_user"


def signals(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [tag(f"p{start + i}") | {"artifact_id": f"a{start + i}"} for i in range(n)]


# -- deferred sync in the file store ------------------------------------------------------------
def test_deferred_appends_are_read_only_once_synced(tmp_path: Path, log_fsyncs: list[int]) -> None:
    store = MemoryStore(tmp_path)
    storage = store._storage
    assert isinstance(storage, FileStorage)
    store.ingest_signals(U, signals(2))
    before = [r.pattern for r in store.list_preferences(U)]
    synced = log_fsyncs[0]
    with storage.deferred_sync():
        for i in range(5):
            store.ingest_signals(U, signals(1, 10 + i), records=False)
        assert log_fsyncs[0] == synced  # written, not yet fsynced
        assert storage.event_count(U) == 2  # readers stop before the unsynced bytes
        assert [r.pattern for r in store.list_preferences(U)] == before
        other = FileStorage(tmp_path)  # the bytes are in the file (another process sees them)
        assert other.event_count(U) == 7
    assert log_fsyncs[0] == synced + 1  # one fsync for the block
    assert storage.event_count(U) == 7
    assert sorted(r.pattern for r in store.list_preferences(U)) == sorted(
        [*before, *(f"p{10 + i}" for i in range(5))]
    )
    events = assert_log_sound(tmp_path, U)
    assert [e.seq for e in events] == list(range(1, 8))
    store.close()


def test_a_deferred_append_is_not_durable_and_not_folded(tmp_path: Path) -> None:
    storage = FileStorage(tmp_path)
    store = MemoryStore(tmp_path)
    store.ingest_signals(U, signals(1))
    store.list_preferences(U)  # a state that ends where the next append begins
    with store._storage.deferred_sync():  # type: ignore[attr-defined]
        assert store._storage.append_positioned(U, []).durable  # nothing written, nothing deferred
        store.ingest_signals(U, signals(1, 1), records=False)
        memo = store._memo[U]
        assert memo.end < os.path.getsize(tmp_path / U / "events.jsonl")  # not folded
    assert len(store.list_preferences(U)) == 2
    assert storage.event_count(U) == 2
    store.close()


@pytest.mark.parametrize("version", ["1", "3"])
def test_a_block_s_appends_are_folded_from_memory_once_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str
) -> None:
    store = MemoryStore(tmp_path, derivation_version=version)
    log = tmp_path / U / "events.jsonl"
    store.ingest_signals(U, signals(2))
    store.list_preferences(U)  # a state that ends where the block's appends begin
    with store._states.deferred_appends():
        for i in range(3):
            store.ingest_signals(U, signals(1, 10 + i), records=False)
        assert store._memo[U].end < os.path.getsize(log)  # not before the fsync
    assert store._memo[U].end == os.path.getsize(log)  # folded once durable

    def no_decoding(*args: object) -> None:
        raise AssertionError("read back what was folded from memory")

    monkeypatch.setattr(files_backend, "decode_chunk", no_decoding)
    folded = [r.to_dict() for r in store.list_preferences(U)]
    monkeypatch.undo()
    assert folded == [r.to_dict() for r in MemoryStore(tmp_path, derivation_version=version)
                      .list_preferences(U)]  # fmt: skip
    assert len(folded) == 5
    store.close()


def test_a_block_that_fails_folds_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = MemoryStore(tmp_path)
    store.ingest_signals(U, signals(1))
    end = store._memo[U].end

    def broken(path: Path, flags: int = os.O_RDONLY) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(deferred, "fsync_path", broken)
    with pytest.raises(StorageError, match="fsync"), store._states.deferred_appends():
        store.ingest_signals(U, signals(2, 1), records=False)
    monkeypatch.undo()
    assert store._memo[U].end == end  # not folded: the next read reads the file
    assert [r.pattern for r in store.list_preferences(U)] == ["p0", "p1", "p2"]
    nested = pytest.raises(RuntimeError, match="do not nest")
    with store._states.deferred_appends(), nested, store._states.deferred_appends():
        pass
    store.close()


def test_blocks_do_not_nest_and_an_empty_block_syncs_nothing(
    tmp_path: Path, log_fsyncs: list[int]
) -> None:
    storage = FileStorage(tmp_path)
    nested = pytest.raises(RuntimeError, match="do not nest")
    with storage.deferred_sync(), nested, storage.deferred_sync():
        pass
    assert log_fsyncs[0] == 0


def test_a_failed_fsync_at_the_end_fails_the_block_and_the_log_stays_sound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MemoryStore(tmp_path)
    storage = store._storage
    assert isinstance(storage, FileStorage)
    store.ingest_signals(U, signals(1))

    def broken(path: Path, flags: int = os.O_RDONLY) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(deferred, "fsync_path", broken)
    with pytest.raises(StorageError, match="fsync"), storage.deferred_sync():
        store.ingest_signals(U, signals(2, 1), records=False)
    monkeypatch.undo()
    # the tail is read again: the next append continues the chain after what is in the file
    store.ingest_signals(U, signals(1, 3))
    assert [e.seq for e in assert_log_sound(tmp_path, U)] == [1, 2, 3, 4]
    store.close()


def test_a_reset_inside_the_block_leaves_nothing_to_sync(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path)
    with store._storage.deferred_sync():  # type: ignore[attr-defined]
        store.ingest_signals(U, signals(2), records=False)
        store.reset_memory(U, "all")
    assert store.list_preferences(U) == []
    store.close()


def test_a_synchronous_append_meanwhile_keeps_later_deferred_bytes_hidden(
    tmp_path: Path,
) -> None:
    """Another thread's group commit syncs the whole file; a deferred write after it is
    hidden again until the block ends."""
    store = MemoryStore(tmp_path)
    storage = store._storage
    assert isinstance(storage, FileStorage)
    with storage.deferred_sync():
        store.ingest_signals(U, signals(1), records=False)
        t = threading.Thread(target=store.ingest_signals, args=(U, signals(1, 1)))
        t.start()
        t.join()
        assert storage.event_count(U) == 2  # its fsync made both durable
        store.ingest_signals(U, signals(1, 2), records=False)
        assert storage.event_count(U) == 2
    assert storage.event_count(U) == 3
    store.close()


# -- the lane -----------------------------------------------------------------------------------
def test_the_lane_answers_each_call_in_order_and_batches_them(
    tmp_path: Path, log_fsyncs: list[int]
) -> None:
    store = MemoryStore(tmp_path)
    store.ingest_signals(U, signals(1, 99))  # the log exists (creating it fsyncs too)
    synced = log_fsyncs[0]
    lane = IngestLane(store)
    order: list[int] = []

    def call(i: int) -> int:
        if i == 7:
            raise ValueError("call 7 is bad")
        order.append(i)
        store.ingest_signals(U, signals(1, i), records=False)
        return i

    async def main() -> list[Any]:
        return await asyncio.gather(
            *(lane.run(functools.partial(call, i)) for i in range(40)), return_exceptions=True
        )

    results = asyncio.run(main())
    assert lane.close(5)
    assert results[:7] == list(range(7)) and results[8:] == list(range(8, 40))
    assert isinstance(results[7], ValueError)  # its own error, to it alone
    assert order == [i for i in range(40) if i != 7]  # arrival order
    assert lane.calls == 40 and lane.batches < 40  # calls queued behind an fsync share it
    assert log_fsyncs[0] - synced == lane.batches
    assert len(assert_log_sound(tmp_path, U)) == 40
    store.close()


def test_a_batch_whose_fsync_fails_fails_every_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MemoryStore(tmp_path)
    lane = IngestLane(store)

    def broken(path: Path, flags: int = os.O_RDONLY) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(deferred, "fsync_path", broken)

    busy = threading.Event()
    release = threading.Event()

    def hold() -> int:  # keeps the lane busy until the next two calls queue behind it
        busy.set()
        release.wait(10)
        return 0

    async def main() -> list[Any]:
        def call() -> int:
            return len(store.ingest_signals(U, signals(1), records=False))

        first = asyncio.ensure_future(lane.run(hold))
        while not busy.is_set():
            await asyncio.sleep(0.001)
        batch = asyncio.gather(lane.run(call), lane.run(lambda: 1), return_exceptions=True)
        await asyncio.sleep(0.01)
        release.set()
        assert await first == 0  # its batch wrote nothing: nothing to sync, nothing failed
        return list(await batch)

    results = asyncio.run(main())
    assert lane.batches == 2  # the two calls ran as one batch
    assert all(isinstance(r, StorageError) for r in results)  # the one that wrote nothing too
    lane.close(5)
    store.close()


def test_a_closed_lane_runs_what_was_queued_and_refuses_more(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path)
    lane = IngestLane(store)

    async def main() -> int:
        first = asyncio.ensure_future(lane.run(lambda: 1))
        await asyncio.sleep(0)
        assert await first == 1
        return 0

    asyncio.run(main())
    assert lane.close(5)

    async def after() -> None:
        await lane.run(lambda: 2)

    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(after())
    store.close()


def test_a_store_without_deferred_sync_runs_calls_one_by_one() -> None:
    class NoDeferral:
        _storage = object()  # no deferred_sync: the states' block is a plain one
        _states = DerivedStates(_storage, "3")  # type: ignore[arg-type]

    lane = IngestLane(NoDeferral())  # type: ignore[arg-type]

    def same(i: int) -> int:
        return i

    async def main() -> list[int]:
        return list(await asyncio.gather(*(lane.run(functools.partial(same, i)) for i in range(5))))

    assert asyncio.run(main()) == [0, 1, 2, 3, 4]
    assert lane.close(5)


def ingest(store: MemoryStore, user: str, start: int = 0) -> Any:
    return lambda: store.ingest_signals(user, signals(1, start), records=False)


def test_a_user_held_up_in_one_lane_does_not_hold_up_a_user_of_another(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path)
    assert isinstance(store._storage, FileStorage)
    lanes = IngestLanes(store, MULTI_USER_LANES)
    users = [f"u{i}" for i in range(40)]
    slow = users[0]
    other = next(u for u in users if lanes.of(u) is not lanes.of(slow))
    same = next(u for u in users[1:] if lanes.of(u) is lanes.of(slow))

    async def main(release: threading.Event) -> list[str]:
        done: list[str] = []

        async def call(user: str, fn: Any) -> None:
            await lanes.run(user, fn)
            done.append(user)

        held = asyncio.ensure_future(call(slow, ingest(store, slow)))
        behind = asyncio.ensure_future(call(same, ingest(store, same)))
        await asyncio.wait_for(call(other, ingest(store, other)), 5)  # not behind the held call
        assert done == [other] and not behind.done()
        release.set()
        await asyncio.gather(held, behind)
        return done

    with held_elsewhere(store._storage.locked(slow)) as release:  # a rewrite of their log
        assert asyncio.run(main(release)) == [other, slow, same]  # a lane keeps arrival order
    assert lanes.close(5)
    assert sum(lane.calls for lane in lanes.lanes) == 3
    assert lanes.of(other).on_loop == 1 and lanes.of(other)._thread is None  # on the loop
    assert lanes.of(slow).on_loop == 0 and lanes.of(slow)._thread is not None  # it waited
    for user in (slow, same, other):
        assert len(assert_log_sound(tmp_path, user)) == 1
    store.close()


def test_calls_of_a_few_loop_turns_run_on_the_loop_as_one_batch(
    tmp_path: Path, log_fsyncs: list[int]
) -> None:
    store = MemoryStore(tmp_path)
    store.ingest_signals(U, signals(1, 99))
    synced = log_fsyncs[0]
    lanes = IngestLanes(store)
    lane = lanes.of(U)
    threads = threading.active_count()

    def call(i: int) -> int:
        if i == 3:
            raise ValueError("call 3 is bad")
        store.ingest_signals(U, signals(1, i), records=False)
        assert store._storage.event_count(U) == 1  # not yet durable
        return i

    async def main() -> list[Any]:
        first = [asyncio.ensure_future(lanes.run(U, functools.partial(call, i))) for i in range(5)]
        for _ in range(LOOP_TURNS - 1):  # calls made a turn or two later join the batch
            await asyncio.sleep(0)
        rest = [lanes.run(U, functools.partial(call, i)) for i in range(5, 10)]
        return await asyncio.gather(*first, *rest, return_exceptions=True)

    results = asyncio.run(main())
    assert results[:3] == [0, 1, 2] and results[4:] == list(range(4, 10))
    assert isinstance(results[3], ValueError)
    assert (lane.batches, lane.on_loop, lane.calls) == (1, 1, 10)
    assert lane._thread is None and threading.active_count() == threads
    assert log_fsyncs[0] - synced == 1
    assert [e.artifact_id for e in assert_log_sound(tmp_path, U)][1:] == [
        f"a{i}" for i in range(10) if i != 3
    ]
    assert store._memo[U].end == os.path.getsize(tmp_path / U / "events.jsonl")  # folded
    assert lanes.close(5)
    store.close()


def test_a_held_lock_sends_the_batch_to_the_thread_and_later_calls_follow_it(
    tmp_path: Path,
) -> None:
    store = MemoryStore(tmp_path)
    assert isinstance(store._storage, FileStorage)
    lane = IngestLanes(store).of(U)

    async def main(release: threading.Event) -> None:
        first = asyncio.ensure_future(lane.run(ingest(store, U, 0), user=U))
        await asyncio.sleep(0.05)  # the batch went to the thread, which waits for the lock
        assert not first.done() and lane._thread is not None
        release.set()  # free now, but the thread still has the first call: order
        second = asyncio.ensure_future(lane.run(ingest(store, U, 1), user=U))
        await asyncio.gather(first, second)
        assert await lane.run(ingest(store, U, 2), user=U) == [None]  # the thread is idle

    with held_elsewhere(store._storage.locked(U)) as release:
        asyncio.run(main(release))
    assert lane.calls == 3 and lane.on_loop >= 1
    assert [e.artifact_id for e in assert_log_sound(tmp_path, U)] == ["a0", "a1", "a2"]
    assert lane.close(5)
    store.close()


def test_a_loop_batch_may_wait_for_another_thread_s_append_of_its_user(tmp_path: Path) -> None:
    """A call of a loop batch may wait for another thread that is appending to the same
    user — the capture ticker delivering an artifact holds that artifact's turn while it
    appends, and an ingest of the same artifact waits for the turn. So the batch must not
    keep the user's lock while its calls run: the other thread would wait for the lock,
    the batch for the turn, and the event loop would stop for good."""
    store = MemoryStore(tmp_path)
    store.ingest_signals(U, signals(1, 99))  # the user's lock file exists
    lane = IngestLanes(store).of(U)
    turn = threading.Lock()  # the artifact's turn, taken by the other thread first
    holding, started = threading.Event(), threading.Event()

    def ticker() -> None:
        with turn:
            holding.set()
            assert started.wait(10)  # the loop batch runs, and waits for the turn
            store.ingest_signals(U, signals(1, 50), records=False)  # takes the user's lock

    def call() -> str:
        started.set()
        if not turn.acquire(timeout=10):
            raise AssertionError("the other thread could not append: it waits for the batch")
        turn.release()
        store.ingest_signals(U, signals(1, 51), records=False)
        return "delivered"

    other = threading.Thread(target=ticker)
    other.start()
    assert holding.wait(10)
    try:
        assert asyncio.run(asyncio.wait_for(lane.run(call, user=U), 30)) == "delivered"
    finally:
        other.join(30)
    assert not other.is_alive()
    assert lane.on_loop == 1 and lane._thread is None  # it ran on the loop, and waited there
    assert [e.artifact_id for e in assert_log_sound(tmp_path, U)] == ["a99", "a50", "a51"]
    assert lane.close(5)
    store.close()


def test_a_batch_of_many_events_runs_in_the_thread(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path)
    lane = IngestLanes(store).of(U)

    async def main() -> None:
        await lane.run(ingest(store, U), user=U, events=LOOP_BATCH_EVENTS)  # on the loop
        assert lane.on_loop == 1 and lane._thread is None
        await asyncio.gather(  # together over the bound: the thread
            lane.run(ingest(store, U, 1), user=U, events=LOOP_BATCH_EVENTS),
            lane.run(ingest(store, U, 2), user=U),
        )
        assert lane.on_loop == 1 and lane.batches == 2 and lane._thread is not None

    asyncio.run(main())
    assert len(assert_log_sound(tmp_path, U)) == 3
    assert lane.close(5)
    store.close()


def test_a_loop_batch_whose_fsync_fails_fails_every_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MemoryStore(tmp_path)
    store.ingest_signals(U, signals(1, 99))
    lane = IngestLanes(store).of(U)

    def broken(path: Path, flags: int = os.O_RDONLY) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(deferred, "fsync_path", broken)

    async def main() -> list[Any]:
        calls = [lane.run(ingest(store, U, i), user=U) for i in range(3)]
        return await asyncio.gather(*calls, lane.run(lambda: 1, user=U), return_exceptions=True)

    results = asyncio.run(main())
    assert lane.on_loop == 1
    assert all(isinstance(r, StorageError) for r in results)  # the one that wrote nothing too
    monkeypatch.undo()
    store.ingest_signals(U, signals(1, 50))  # the tail is read again
    assert [e.seq for e in assert_log_sound(tmp_path, U)] == list(
        range(1, len(assert_log_sound(tmp_path, U)) + 1)
    )
    assert lane.close(5)
    store.close()


# -- the daemon ---------------------------------------------------------------------------------
def test_the_daemon_ingests_through_the_lane_and_writers_share_fsyncs(
    tmp_path: Path, log_fsyncs: list[int]
) -> None:
    clients, each = 8, 10
    with ThreadedDaemon(DaemonConfig(root=tmp_path, port=0, user=U)) as d:
        token = d.daemon.files.token_for(U)
        assert d.daemon.lanes is not None
        lane = d.daemon.lanes.of(U)
        acknowledged: list[str] = []
        failures: list[str] = []
        lock = threading.Lock()

        def writer(c: int) -> None:
            headers = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=d.url, headers=headers, timeout=20) as h:
                for k in range(each):
                    art = f"w{c}-{k}"
                    event = {
                        "event": "explicit_tag_applied", "user_id": U, "artifact_id": art,
                        "session_id": "s", "tag_text": "love this",
                        "timestamp": "2026-01-01T00:00:00Z",
                        "artifact_meta": {"signals": [{"preference_type": "layout",
                                                       "pattern": f"p{c}"}]},
                    }  # fmt: skip
                    try:
                        r = h.post("/api/v1/events", json=event)
                    except httpx.HTTPError as exc:  # a stall: said here, not in a warning
                        with lock:
                            failures.append(f"{art}: {exc!r}")
                        return
                    with lock:
                        if r.status_code == 200 and r.json()["accepted"] == 1:
                            acknowledged.append(art)
                        else:
                            failures.append(r.text)

        threads = [threading.Thread(target=writer, args=(c,)) for c in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failures == []
        assert lane.calls == clients * each
        assert lane.batches < lane.calls
        assert lane.on_loop > 0  # nothing held the lock: batches ran on the event loop
    stored = {e.artifact_id for e in assert_log_sound(tmp_path, U)}
    assert set(acknowledged) == stored and len(stored) == clients * each
    assert log_fsyncs[0] < clients * each


def test_a_lane_closed_by_a_shutdown_meanwhile_answers_503(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from creative_memory.http import DaemonFiles
    from tests.test_server_api import InProcess

    with InProcess(tmp_path, None, user=U) as d:
        token = DaemonFiles(tmp_path).token_for(U)
        client = d.client(token)
        assert d.daemon.lanes is not None
        lane = d.daemon.lanes.of(U)

        async def shut(fn: Any, **how: Any) -> Any:  # the shutdown lands between check and lane
            d.daemon.closed = True
            raise RuntimeError("the ingest lane is closed")

        monkeypatch.setattr(lane, "run", shut)
        r = client.post("/api/v1/events", json={"event": "tab_activated", "user_id": U})
        assert r.status_code == 503, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        d.daemon.closed = False


def test_the_lock_probe_creates_nothing_and_sees_holders_in_other_processes(
    tmp_path: Path,
) -> None:
    import subprocess
    import sys

    storage = FileStorage(tmp_path)
    assert storage.lock_is_free("nobody") and not (tmp_path / "nobody").exists()
    storage.ensure_user_dir(U)
    assert storage.lock_is_free(U)
    holder = subprocess.Popen(  # another process holds the user's lock until stdin closes
        [sys.executable, "-c",
         "import sys; from creative_memory.storage import FileStorage\n"
         f"with FileStorage(sys.argv[1]).locked({U!r}):\n"
         "    print('held', flush=True); sys.stdin.read()", str(tmp_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert not storage.lock_is_free(U)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(10)
    assert storage.lock_is_free(U)
    with storage.locked(U):  # a thread of this process
        assert not storage.lock_is_free(U)
        assert not FileStorage(tmp_path).lock_is_free(U)  # the same directory, another object


def test_a_lock_probe_that_fails_keeps_no_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A probe whose lock file cannot be opened (out of descriptors, a permission) raises —
    the lane then sends the batch to its thread — and leaves the user's lock free: the
    appends after it do not wait forever."""
    from creative_memory.storage.files import locks

    storage = FileStorage(tmp_path)
    storage.ensure_user_dir(U)
    real_open = os.open

    def no_descriptors(path: Any, *args: Any, **kwargs: Any) -> int:
        if str(path).endswith(locks.LOCK_NAME):
            raise OSError(24, "Too many open files")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", no_descriptors)
    with pytest.raises(OSError):
        storage.lock_is_free(U)
    monkeypatch.undo()
    assert storage.lock_is_free(U)
    done = threading.Event()

    def append() -> None:
        with storage.locked(U):
            done.set()

    worker = threading.Thread(target=append, daemon=True)
    worker.start()
    assert done.wait(10), "the probe kept the user's lock"


class Interrupted(BaseException):
    """An interruption that is not an ``Exception`` (as KeyboardInterrupt is)."""


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # it ends
@pytest.mark.parametrize("where", ["loop", "thread"])
def test_an_interruption_answers_every_call_of_its_batch(tmp_path: Path, where: str) -> None:
    store = MemoryStore(tmp_path)
    lane = IngestLanes(store).of(U)
    user = U if where == "loop" else None  # a call without its user runs in the thread

    def interrupt() -> int:
        raise Interrupted

    async def main() -> list[Any]:
        asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: None)
        calls = [lane.run(ingest(store, U, 0), user=user), lane.run(interrupt, user=user),
                 lane.run(ingest(store, U, 1), user=user)]  # fmt: skip
        return await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 10)

    def interrupted(r: object) -> bool:
        return isinstance(r, RuntimeError) and "interrupted" in str(r)

    before = set(threading.enumerate())
    results = asyncio.run(main())
    assert interrupted(results[1])
    if where == "loop":  # one batch: nothing of it is acknowledged
        assert all(interrupted(r) for r in results)
    else:  # one batch or several: each call answered (the thread that died is replaced)
        assert all(r == [None] or interrupted(r) for r in results)
        assert asyncio.run(asyncio.wait_for(lane.run(lambda: 7), 10)) == 7
    assert lane.close(5)
    for thread in set(threading.enumerate()) - before:  # the one the interruption ended
        if thread.name == "creative-memory-lane":  # ends here, its warning filtered above
            thread.join(5)
    store.close()


def test_loop_batches_and_the_ticker_deliver_the_same_artifacts_without_a_stall(
    tmp_path: Path,
) -> None:
    """Edit-saves of a few shared artifacts, whose windows the ticker (a pool thread)
    flushes while the loop runs ingest batches that deliver to the same artifacts: the
    capture layer's per-artifact turns make one wait for the other, never both."""
    from creative_memory.capture.layer import CaptureConfig

    config = DaemonConfig(
        root=tmp_path, port=0, user=U, tick_seconds=0.005,
        capture=CaptureConfig(coalesce_window_s=0.01),
    )  # fmt: skip
    clients, each = 8, 25
    failures: list[str] = []
    tagged: list[str] = []
    lock = threading.Lock()
    with ThreadedDaemon(config) as d:
        token = d.daemon.files.token_for(U)
        lane = d.daemon.lanes.of(U) if d.daemon.lanes is not None else None
        assert lane is not None

        def writer(c: int) -> None:
            headers = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=d.url, headers=headers, timeout=20) as h:
                for k in range(each):
                    art = f"shared{k % 3}"
                    meta = {"signals": [{"preference_type": "layout", "pattern": f"p{k % 5}"}]}
                    edit = {
                        "event": "artifact_edited_and_saved", "user_id": U, "artifact_id": art,
                        "session_id": "s", "timestamp": "2026-01-01T00:00:00Z",
                        "artifact_meta": meta, "diff": {"n": k},
                    }  # fmt: skip
                    tag = {**edit, "event": "explicit_tag_applied", "artifact_id": f"t{c}-{k}",
                           "tag_text": "love this"}  # fmt: skip
                    tag.pop("diff")
                    try:
                        r = h.post("/api/v1/events", json=[edit, tag])
                    except httpx.HTTPError as exc:  # a stall: said here, not in a warning
                        with lock:
                            failures.append(f"t{c}-{k}: {exc!r}")
                        return
                    with lock:
                        if r.status_code != 200 or r.json()["rejected"]:
                            failures.append(r.text)
                        else:
                            tagged.append(f"t{c}-{k}")

        threads = [threading.Thread(target=writer, args=(c,)) for c in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads), "a request stalled"
        assert failures == []
        assert lane.on_loop > 0
    events = assert_log_sound(tmp_path, U)
    stored_tags = {e.artifact_id for e in events if e.artifact_id and e.artifact_id.startswith("t")}
    assert stored_tags == set(tagged) and len(tagged) == clients * each
    edits = [e for e in events if e.artifact_id and e.artifact_id.startswith("shared")]
    assert edits  # the windows were flushed, by the ticker or at shutdown


def test_a_lock_check_that_fails_sends_the_batch_to_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MemoryStore(tmp_path)
    assert isinstance(store._storage, FileStorage)
    lane = IngestLanes(store).of(U)

    def unreadable(user: str) -> bool:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(lane, "_free", unreadable)

    async def main() -> list[Any]:
        calls = [lane.run(ingest(store, U, i), user=U) for i in range(3)]
        return await asyncio.wait_for(asyncio.gather(*calls), 10)

    assert asyncio.run(main()) == [[None]] * 3  # answered by the thread
    assert lane.on_loop == 0 and lane._thread is not None
    assert len(assert_log_sound(tmp_path, U)) == 3
    assert lane.close(5)
    store.close()
