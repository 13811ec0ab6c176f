"""PostgreSQL appends: one-statement conditional appends, group commit per user, lost
connections (docs/deploy.md, "Writes").

* Many threads (and a second storage object, as another replica) appending for one user at
  once give a gap-free, correctly chained log holding every event exactly once, each call's
  returned events and positions are the stored ones, and the bytes equal the file
  backend's for the same events in the same order.
* (The group commit's batching: ``tests/test_group_commit.py``; appends of several users in
  one transaction: ``tests/test_postgres_shared_commit.py``.)
* A connection lost around the append statement: retried when nothing was stored, not
  repeated when the statement did commit and only the reply was lost.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import msgspec
import psycopg
import pytest

from creative_memory.engine.events import CHAIN_GENESIS, Event, SignalEvent, chain_hash
from creative_memory.storage import FileStorage
from creative_memory.storage.base import Appended
from creative_memory.storage.postgres import PostgresStorage

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
