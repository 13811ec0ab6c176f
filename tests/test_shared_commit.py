"""Group commit: the shared leader/follower queue, and PostgreSQL's appends of several users
in one transaction (docs/storage.md, "Group commit"; docs/deploy.md).

* The queue (any backend): calls that arrive under a key while a write of that key is in
  flight are written together by the next leader, in arrival order; another key's calls
  are not queued behind them; a write that raises fails every call it carried, a call the
  write fails alone fails alone.
* PostgreSQL: appends of several users queued behind a write go in one statement, each
  user's events chained onto its own tail; a user whose tail another replica moved, whose
  settings changed, or whose lock is held elsewhere is written (or refused) on its own
  while the others are acknowledged; two replicas batching the same users never fail; a
  reply lost around the statement neither loses nor repeats an append.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
import pytest

from creative_memory.engine.errors import StorageError
from creative_memory.engine.events import Event, SignalEvent
from creative_memory.storage import SettingsChanged, UserSettings
from creative_memory.storage.base import Appended
from creative_memory.storage.groupcommit import GroupCommit
from creative_memory.storage.postgres import PostgresStorage
from creative_memory.storage.postgres.appends import LOCK_EXPR, SQL_APPEND_USERS, Seen
from creative_memory.storage.postgres.writer import AppendWriter, Written
from tests.test_postgres_appends import assert_gap_free_chain, ev

pytest_plugins = ["tests.pg_fixtures"]

#: Appends per writer in the two-replica test (when the statement still waited for each
#: lock, taking them in random order instead of in user-id order deadlocked at 300, not
#: at 30).
CALLS = 300


def wait_until(cond: Any, what: str) -> None:
    deadline = time.monotonic() + 10
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.001)


# -- the queue -------------------------------------------------------------------------------


class _Fake:
    """A commit that blocks until released and records what each write carried."""

    def __init__(self) -> None:
        self.writes: list[list[str]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail_next: BaseException | None = None
        self.refuse: set[str] = set()  # calls failed alone

    def commit(self, key: str, calls: Sequence[list[str]]) -> list[Appended | BaseException]:
        self.writes.append([n for c in calls for n in c])
        self.entered.set()
        self.release.wait(10)
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc
        return [
            ValueError(f"refused {c[0]}")
            if c[0] in self.refuse
            else Appended(events=[], generation=key, start=0, end=len(c))
            for c in calls
        ]


def test_calls_queued_behind_a_write_are_written_together_in_arrival_order() -> None:
    fake = _Fake()
    group: GroupCommit[str, list[str]] = GroupCommit(fake.commit)
    threads = [threading.Thread(target=group.append, args=("u", ["a"]))]
    threads[0].start()
    assert fake.entered.wait(10)  # "a" is being written; the next ones wait behind it
    for k, name in enumerate("bcd"):
        threads.append(threading.Thread(target=group.append, args=("u", [name] * (k + 1))))
        threads[-1].start()
        wait_until(lambda k=k: group.pending("u") == k + 1, "the calls did not queue")
    threads.append(threading.Thread(target=group.append, args=("v", ["x"])))
    threads[-1].start()  # another key is not queued behind "u": its write starts at once
    wait_until(lambda: ["x"] in fake.writes, "another key's call waited for this one's")
    fake.release.set()
    for t in threads:
        t.join(10)
    assert [w for w in fake.writes if w != ["x"]] == [["a"], ["b", "c", "c", "d", "d", "d"]]
    assert not group._queues  # nothing left behind


def test_a_failed_write_fails_its_calls_and_a_call_failed_alone_fails_alone() -> None:
    fake = _Fake()
    group: GroupCommit[str, list[str]] = GroupCommit(fake.commit)
    outcome: dict[str, str] = {}

    def call(name: str) -> None:
        try:
            group.append("u", [name])
            outcome[name] = "ok"
        except (StorageError, ValueError) as exc:
            outcome[name] = str(exc)

    fake.refuse = {"c"}
    first = threading.Thread(target=call, args=("a",))
    first.start()
    assert fake.entered.wait(10)
    rest = [threading.Thread(target=call, args=(n,)) for n in "bc"]
    for k, t in enumerate(rest):
        t.start()
        wait_until(lambda k=k: group.pending("u") == k + 1, "the calls did not queue")
    fake.release.set()  # "a" alone, then b + c together: c is refused, b is not
    for t in [first, *rest]:
        t.join(10)
    assert outcome == {"a": "ok", "b": "ok", "c": "refused c"}
    fake.fail_next = StorageError("database down")  # a failing write fails its callers
    call("d")
    call("e")
    assert outcome["d"] == "database down" and outcome["e"] == "ok"
    assert fake.writes == [["a"], ["b", "c"], ["d"], ["e"]]


# -- PostgreSQL: several users in one transaction ------------------------------------------


@pytest.fixture
def pg(pg_url: str) -> Iterator[PostgresStorage]:
    st = PostgresStorage(pg_url)
    try:
        yield st
    finally:
        st.close()


def patterns(events: Sequence[Event]) -> list[str]:
    """Each event's pattern; every event must be a signal."""
    assert all(isinstance(e, SignalEvent) for e in events), events
    return [e.pattern for e in events if isinstance(e, SignalEvent)]


class Held:
    """Holds the writer's next single-user write until released, while counting the
    transactions of several users (and how many users each carried)."""

    def __init__(self, writer: AppendWriter) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.together: list[int] = []
        write, together = writer._write, writer._write_together

        def held_write(user_id: str, events: list[Event], seen: Seen | None) -> Written:
            self.entered.set()
            self.release.wait(10)
            return write(user_id, events, seen)

        def counted(jobs: Any) -> Any:
            self.together.append(len(jobs))
            return together(jobs)

        writer._write = held_write  # type: ignore[method-assign]
        writer._write_together = counted  # type: ignore[method-assign]


def queue_behind_a_held_write(
    st: PostgresStorage, calls: list[tuple[str, list[SignalEvent], Any]]
) -> tuple[Held, dict[str, Appended | BaseException]]:
    """Start a write for a user without a known tail (held), queue ``calls`` behind it,
    release it; every call's outcome by its user."""
    held = Held(st._writer)
    out: dict[str, Appended | BaseException] = {}

    def run(user: str, events: list[SignalEvent], seen: Any) -> None:
        try:
            out[user] = st.append_positioned(user, events, if_settings=seen)
        except BaseException as exc:
            out[user] = exc

    first = threading.Thread(target=run, args=("newcomer", [ev("n")], None))
    first.start()
    assert held.entered.wait(10)
    threads = [threading.Thread(target=run, args=c) for c in calls]
    for t in threads:
        t.start()
    wait_until(lambda: st._writer._group.pending(None) == len(calls), "the calls did not queue")
    held.entered.clear()
    held.release.set()
    for t in [first, *threads]:
        t.join(10)
    return held, out


def test_appends_of_several_users_share_one_transaction(pg: PostgresStorage) -> None:
    users = [f"u{i}" for i in range(6)]
    for u in users:  # their tails are known now
        pg.append_positioned(u, [ev(f"{u}-0")])
    calls = [(u, [ev(f"{u}-1"), ev(f"{u}-2")], None) for u in users]
    held, out = queue_behind_a_held_write(pg, calls)
    assert held.together == [6]  # one transaction for the six of them
    for u in users:
        got = out[u]
        assert isinstance(got, Appended)
        assert [e.seq for e in got.events] == [2, 3] and (got.start, got.end) == (1, 3)
        stored = pg.read_events(u).events
        assert_gap_free_chain(stored)
        assert got.events == stored[1:]
        assert [e.pattern for e in stored if isinstance(e, SignalEvent)] == [
            f"{u}-0",
            f"{u}-1",
            f"{u}-2",
        ]


def test_a_user_moved_by_another_writer_is_rechained_alone(
    pg: PostgresStorage, pg_url: str
) -> None:
    users = ["a", "b", "c"]
    for u in users:
        pg.append_positioned(u, [ev(f"{u}-0")])
    with PostgresStorage(pg_url) as replica:
        replica.append_positioned("b", [ev("b-replica")])  # b's tail moved elsewhere
    held, out = queue_behind_a_held_write(pg, [(u, [ev(f"{u}-1")], None) for u in users])
    assert held.together == [3]
    for u in users:
        stored = pg.read_events(u).events
        assert_gap_free_chain(stored)
        assert isinstance(out[u], Appended)
        assert patterns(stored[-1:]) == [f"{u}-1"]
    assert patterns(pg.read_events("b").events) == ["b-0", "b-replica", "b-1"]


def test_a_user_whose_settings_changed_is_refused_alone(pg: PostgresStorage, pg_url: str) -> None:
    users = ["a", "b", "c"]
    seen = {}
    for u in users:
        pg.write_settings(u, UserSettings())
        seen[u] = pg.recent_settings(u)
        pg.append_positioned(u, [ev(f"{u}-0")], if_settings=seen[u])
    with PostgresStorage(pg_url) as replica:
        replica.write_settings("b", UserSettings(paused=True))
    _, out = queue_behind_a_held_write(pg, [(u, [ev(f"{u}-1")], seen[u]) for u in users])
    refused = out["b"]
    assert isinstance(refused, SettingsChanged)
    assert refused.now.settings == UserSettings(paused=True)
    assert [len(pg.read_events(u).events) for u in users] == [2, 1, 2]
    for u in users:
        assert_gap_free_chain(pg.read_events(u).events)


def test_two_replicas_batching_the_same_users_neither_deadlock_nor_lose_events(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under writers of the same eight users on both replicas, no multi-user statement
    fails (it takes only free locks, so it cannot deadlock; an error would be retried user
    by user, so errors are recorded here), and every log holds every event once, chained."""
    failed: list[BaseException] = []
    real = psycopg.Connection.execute

    def execute(conn: Any, query: Any, *args: Any, **kw: Any) -> Any:
        try:
            return real(conn, query, *args, **kw)
        except psycopg.Error as exc:
            if query is SQL_APPEND_USERS:
                failed.append(exc)
            raise

    monkeypatch.setattr(psycopg.Connection, "execute", execute)
    users = [f"u{i}" for i in "73150642"]  # arrival order unlike id order
    replicas = [PostgresStorage(pg_url), PostgresStorage(pg_url)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(2 * len(users))
    together = [0, 0]
    for r, st in enumerate(replicas):
        write = st._writer._write_together

        def counted(jobs: Any, write: Any = write, r: int = r) -> Any:
            together[r] += 1
            return write(jobs)

        st._writer._write_together = counted  # type: ignore[method-assign]

    def work(st: PostgresStorage, user: str, tag: str) -> None:
        try:
            barrier.wait()
            for c in range(CALLS):
                st.append_positioned(user, [ev(f"{tag}-{c}")])
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=work, args=(st, u, f"{r}{u}"))
        for u in users
        for r, st in enumerate(replicas)
    ]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        assert not failed, failed
        assert min(together) > 0  # both replicas did write several users at once
        for u in users:
            stored = replicas[0].read_events(u).events
            assert_gap_free_chain(stored)
            names = sorted(e.pattern for e in stored if isinstance(e, SignalEvent))
            assert names == sorted(f"{r}{u}-{c}" for r in range(2) for c in range(CALLS))
    finally:
        for st in replicas:
            st.close()


def test_a_user_locked_elsewhere_holds_up_no_other(pg: PostgresStorage, pg_url: str) -> None:
    """The statement does not wait for a lock: "b", whose lock another transaction holds
    (an erasure on another replica, say), is handed back to its caller, which waits alone;
    "a" and "c" are acknowledged meanwhile."""
    for u in "abc":
        pg.append_positioned(u, [ev(f"{u}-0")])
    held = Held(pg._writer)
    out: dict[str, Appended] = {}

    def run(user: str) -> None:
        out[user] = pg.append_positioned(user, [ev(f"{user}-1")])

    with psycopg.connect(pg_url) as locker:  # a transaction holding b's lock
        locker.execute("SELECT " + LOCK_EXPR, {"u": "b"})
        first = threading.Thread(target=run, args=("newcomer",))
        first.start()
        assert held.entered.wait(10)
        threads = {u: threading.Thread(target=run, args=(u,)) for u in "abc"}
        for t in threads.values():
            t.start()
        wait_until(lambda: pg._writer._group.pending(None) == 3, "the calls did not queue")
        held.release.set()
        for u in "ac":
            threads[u].join(10)
            assert u in out, f"{u} waited for b's lock"
        assert held.together == [3]
        assert "b" not in out  # still waiting for its lock
        locker.rollback()  # the lock is released
    threads["b"].join(10)
    first.join(10)
    for u in "abc":
        stored = pg.read_events(u).events
        assert_gap_free_chain(stored)
        assert [e.seq for e in out[u].events] == [2] and stored[-1] == out[u].events[0]


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_lost_reply_to_the_statement_is_neither_lost_nor_repeated(
    pg: PostgresStorage, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """The connection dies around the several-user statement: before it was sent, each
    user is handed back and written alone; after it committed, each user's stored chain
    hash shows it was, and nothing is sent again."""
    for u in "abc":
        pg.append_positioned(u, [ev(f"{u}-0")])
    lost: list[str] = []

    class Losing:
        def __init__(self, conn: Any) -> None:
            self._conn = conn

        def execute(self, query: Any, *args: Any, **kw: Any) -> Any:
            if query is SQL_APPEND_USERS and not lost:
                lost.append(when)
                if when == "after":
                    self._conn.execute(query, *args, **kw)
                raise psycopg.OperationalError("server closed the connection unexpectedly")
            return self._conn.execute(query, *args, **kw)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._conn, name)

    real = type(pg._db).unchecked

    def unchecked(self: Any) -> Iterator[Any]:
        with real(self) as conn:
            yield Losing(conn)

    monkeypatch.setattr(type(pg._db), "unchecked", contextlib.contextmanager(unchecked))
    held, out = queue_behind_a_held_write(pg, [(u, [ev(f"{u}-1")], None) for u in "abc"])
    assert lost == [when] and held.together == [3]
    for u in "abc":
        stored = pg.read_events(u).events
        assert_gap_free_chain(stored)
        assert patterns(stored) == [f"{u}-0", f"{u}-1"]
        got = out[u]
        assert isinstance(got, Appended) and got.events == stored[1:]
