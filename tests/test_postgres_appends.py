"""PostgreSQL appends: one-statement conditional appends, group commit per user, lost
connections (docs/deploy.md, "Writes").

* Many threads (and a second storage object, as another replica) appending for one user at
  once give a gap-free, correctly chained log holding every event exactly once, each call's
  returned events and positions are the stored ones, and the bytes equal the file
  backend's for the same events in the same order.
* The group commit batches appends that wait behind an in-flight one into one write, in
  arrival order, and a failed write fails every append of its batch (and only those).
* A connection lost around the append statement: retried when nothing was stored, not
  repeated when the statement did commit and only the reply was lost.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import msgspec
import psycopg
import pytest

from creative_memory import StorageError
from creative_memory.engine.events import CHAIN_GENESIS, Event, SignalEvent, chain_hash
from creative_memory.storage import FileStorage
from creative_memory.storage.base import Appended
from creative_memory.storage.postgres import PostgresStorage
from creative_memory.storage.postgres.appends import GroupCommit, Seen, Written

pytest_plugins = ["tests.pg_fixtures"]

AT = "2025-01-01T00:00:00.000Z"


def ev(pattern: str) -> SignalEvent:
    return SignalEvent(
        at=AT,
        recorded_at=AT,
        signal_type="explicit_tag",
        preference_type="layout",
        pattern=pattern,
        polarity="positive",
        scope="global",
    )


def assert_gap_free_chain(events: list[Event]) -> None:
    prev = CHAIN_GENESIS
    for i, e in enumerate(events, 1):
        assert e.seq == i, f"gap or duplicate at position {i}: seq {e.seq}"
        assert e.h == chain_hash(prev, e), f"chain broken at seq {e.seq}"
        prev = e.h


@pytest.mark.slow
def test_concurrent_appends_for_one_user_give_a_gap_free_chained_log(
    pg_url: str, tmp_path: Any
) -> None:
    threads, calls = 12, 25
    stores = [PostgresStorage(pg_url), PostgresStorage(pg_url)]  # this process + a "replica"
    results: list[tuple[list[str], Appended]] = []
    errors: list[BaseException] = []
    out_lock = threading.Lock()
    barrier = threading.Barrier(threads)

    def work(t: int) -> None:
        st = stores[t % 2]
        barrier.wait()
        try:
            for c in range(calls):
                names = [f"t{t}-c{c}-{j}" for j in range(1 + (t + c) % 3)]
                a = st.append_positioned("one", [ev(n) for n in names])
                with out_lock:
                    results.append((names, a))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    try:
        assert not errors, errors
        stored = stores[0].read_events("one").events
        assert_gap_free_chain(stored)
        names_stored = [e.pattern for e in stored if isinstance(e, SignalEvent)]
        expected = sorted(n for names, _ in results for n in names)
        assert sorted(names_stored) == expected  # every event, exactly once
        by_seq = {e.seq: e for e in stored}
        for names, a in results:
            # one call's events are contiguous, in order, and exactly as stored
            assert [e.pattern for e in a.events if isinstance(e, SignalEvent)] == names
            assert a.events == [by_seq[e.seq] for e in a.events]
            assert a.start == a.events[0].seq - 1 and a.end == a.events[-1].seq
        # the same events in the same order give the file backend's bytes
        fs = FileStorage(str(tmp_path))
        for e in stored:
            fs.append("one", [msgspec.structs.replace(e, seq=0, h="")])
        assert fs.read_events("one").events == stored
        with psycopg.connect(pg_url) as conn:
            row = conn.execute("SELECT seq_floor FROM cm_users WHERE user_id = 'one'").fetchone()
        assert row == (len(stored),)
    finally:
        for st in stores:
            st.close()


class _FakeLog:
    """A write function for GroupCommit that blocks its first call until released."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.release = threading.Event()
        self.entered = threading.Event()
        self.fail_next = False
        self.seq: dict[str, int] = {}
        self.seen: list[Seen | None] = []

    def write(self, user_id: str, events: list[Event], seen: Seen | None) -> Written:
        self.calls.append([e.pattern for e in events if isinstance(e, SignalEvent)])
        self.seen.append(seen)
        self.entered.set()
        self.release.wait(10)
        if self.fail_next:
            self.fail_next = False
            raise StorageError("database down")
        start = self.seq.get(user_id, 0)
        out = [msgspec.structs.replace(e, seq=start + i) for i, e in enumerate(events, 1)]
        self.seq[user_id] = start + len(events)
        return out, "g", start


def _queued(group: GroupCommit, user: str, n: int, seen: Seen | None = None) -> None:
    deadline = time.monotonic() + 10
    while len(group._queues.get((user, seen), [])) < n:  # the waiters have queued up
        assert time.monotonic() < deadline
        time.sleep(0.001)


def test_group_commit_batches_waiting_appends_in_arrival_order() -> None:
    log = _FakeLog()
    group = GroupCommit(log.write)
    got: dict[str, Appended] = {}

    def call(name: str, n: int = 1) -> None:
        got[name] = group.append(("u", None), [ev(f"{name}{j}") for j in range(n)])

    leader = threading.Thread(target=call, args=("a",))
    leader.start()
    assert log.entered.wait(10)  # "a" is being written; the next ones wait behind it
    followers = []
    for k, name in enumerate("bcd"):
        t = threading.Thread(target=call, args=(name, k + 1))
        t.start()
        followers.append(t)
        _queued(group, "u", k + 1)
    other = threading.Thread(
        target=lambda: got.__setitem__("x", group.append(("v", None), [ev("x")]))
    )
    other.start()  # another user is not queued behind "u": its write starts at once
    deadline = time.monotonic() + 10
    while ["x"] not in log.calls:
        assert time.monotonic() < deadline, "another user's append waited for this one's"
        time.sleep(0.001)
    log.release.set()
    for t in [leader, *followers, other]:
        t.join(10)
    calls_u = [c for c in log.calls if c != ["x"]]
    assert calls_u == [["a0"], ["b0", "c0", "c1", "d0", "d1", "d2"]]  # one write for b, c, d
    assert [e.seq for e in got["a"].events] == [1]
    assert (got["b"].start, got["b"].end) == (1, 2)
    assert (got["c"].start, got["c"].end, [e.seq for e in got["c"].events]) == (2, 4, [3, 4])
    assert (got["d"].start, got["d"].end) == (4, 7)
    assert not group._queues  # nothing left behind


def test_group_commit_groups_only_appends_conditioned_on_the_same_settings() -> None:
    log = _FakeLog()
    group = GroupCommit(log.write)
    on, paused = Seen('{"paused": false}', None), Seen('{"paused": true}', None)

    def call(name: str, seen: Seen | None) -> threading.Thread:
        t = threading.Thread(target=group.append, args=(("u", seen), [ev(name)]))
        t.start()
        return t

    threads = [call("a", on)]
    assert log.entered.wait(10)  # "a" is being written
    threads.append(call("b", on))
    _queued(group, "u", 1, on)  # "b" waits behind "a" (same settings) ...
    threads.append(call("c", paused))  # ... "c" (other settings) is not queued behind them
    deadline = time.monotonic() + 10
    while ["c"] not in log.calls:
        assert time.monotonic() < deadline, "an append on other settings joined the group"
        time.sleep(0.001)
    log.release.set()
    for t in threads:
        t.join(10)
    assert log.calls == [["a"], ["c"], ["b"]]
    assert log.seen == [on, paused, on]
    assert not group._queues


def test_group_commit_fails_exactly_the_batch_whose_write_failed() -> None:
    log = _FakeLog()
    group = GroupCommit(log.write)
    outcome: dict[str, str] = {}

    def call(name: str) -> None:
        try:
            group.append(("u", None), [ev(name)])
            outcome[name] = "ok"
        except StorageError as exc:
            outcome[name] = str(exc)

    first = threading.Thread(target=call, args=("a",))
    first.start()
    assert log.entered.wait(10)
    rest = [threading.Thread(target=call, args=(n,)) for n in "bc"]
    for k, t in enumerate(rest):
        t.start()
        _queued(group, "u", k + 1)
    log.release.set()  # "a" succeeds; then b + c are written together ...
    first.join(10)
    for t in rest:
        t.join(10)
    assert outcome == {"a": "ok", "b": "ok", "c": "ok"}
    log.fail_next = True  # ... and a failing write fails its callers, the next one works
    call("d")
    call("e")
    assert outcome["d"] == "database down" and outcome["e"] == "ok"
    assert log.calls == [["a"], ["b", "c"], ["d"], ["e"]]


class _Losing:
    """A connection whose next ``execute`` loses the reply: before sending (``before``)
    or after the server committed (``after``)."""

    def __init__(self, conn: Any, when: str) -> None:
        self._conn, self._when = conn, when

    def execute(self, *args: Any, **kw: Any) -> Any:
        if self._when == "before":
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        self._conn.execute(*args, **kw)
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_lost_reply_is_neither_lost_nor_repeated(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    with PostgresStorage(pg_url) as st:
        st.append("u", [ev("first")])  # the log exists; its tail is known here
        real = type(st._db).unchecked
        lose = [True]

        def unchecked(self: Any) -> Iterator[Any]:
            with real(self) as conn:
                if lose[0]:
                    lose[0] = False
                    yield _Losing(conn, when)
                else:
                    yield conn

        monkeypatch.setattr(type(st._db), "unchecked", contextlib.contextmanager(unchecked))
        stored = st.append("u", [ev("second")])
        assert not lose[0], "the losing connection was not used"
        events = st.read_events("u").events
        assert [e.pattern for e in events if isinstance(e, SignalEvent)] == ["first", "second"]
        assert stored == events[1:]
        assert_gap_free_chain(events)


def test_an_append_waits_for_a_rewrite_in_progress_and_chains_onto_its_result(
    pg_url: str,
) -> None:
    """The append statement takes the user's lock itself; a rewrite that commits while it
    waits changed the generation, so the append (chained onto the tail this process saw)
    inserts nothing and is re-chained onto the rewritten log."""
    from creative_memory.storage.postgres.appends import LOCK_EXPR

    with PostgresStorage(pg_url) as st:
        st.append("u", [ev("a"), ev("b"), ev("doomed")])  # the tail (seq 3) is known here
        with psycopg.connect(pg_url) as rewriter:  # a rewrite by another replica, by hand
            rewriter.execute("SELECT " + LOCK_EXPR, {"u": "u"})
            rewriter.execute("DELETE FROM cm_events WHERE user_id = 'u' AND seq = 3")
            done: list[list[Event]] = []
            t = threading.Thread(target=lambda: done.append(st.append("u", [ev("c")])))
            t.start()
            t.join(0.5)  # (the user's row is not locked yet: only the advisory lock holds)
            assert t.is_alive() and not done, "the append did not wait for the user's lock"
            rewriter.execute("UPDATE cm_users SET generation = 'rewritten' WHERE user_id = 'u'")
            rewriter.commit()
        t.join(10)
        assert done, "the append never finished"
        events = st.read_events("u").events
        assert [e.pattern for e in events if isinstance(e, SignalEvent)] == ["a", "b", "c"]
        assert [e.seq for e in events] == [1, 2, 4]  # seq 3 is never reused
        assert done[0] == events[2:]
        assert events[2].h == chain_hash(events[1].h, events[2])  # chained onto "b"
        assert st.generation("u") == "rewritten"
