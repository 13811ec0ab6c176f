"""How appends reach PostgreSQL (the statements: :mod:`.appends`; docs/deploy.md, "Group
commit, across users").

A process has one group commit for every user: the appends that arrive while a write is in
flight wait, and the next leader writes all of them. Calls of one user on the same
settings condition are merged in arrival order; the appends of several users whose tails
this process knows go in **one statement** (:data:`SQL_APPEND_USERS`: one transaction, one
round trip), which takes each user's advisory lock only if it is free at once — it never
waits, so it cannot deadlock and one user's lock held elsewhere (a rewrite, another
replica's append) holds up no other user — and applies each locked user's conditional
append. A user whose append did not happen (its lock was taken, another writer moved its
tail, or its settings changed) leaves the others committed; its calls, and those of users
whose tail is not known, are then written on their own by the single-user path (which
waits for the lock; re-chained and retried, or the locked transaction), and whatever fails
there fails only that user's calls.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from typing import Any, LiteralString

import psycopg

from creative_memory.engine.errors import StorageError
from creative_memory.engine.events import CHAIN_GENESIS, Event, encode_event, sequenced
from creative_memory.storage.base import Appended, LogRewritten, SettingsChanged, SettingsSeen
from creative_memory.storage.groupcommit import GroupCommit
from creative_memory.storage.postgres.appends import (
    SQL_APPEND_MANY,
    SQL_APPEND_ONE,
    SQL_APPEND_USERS,
    SQL_STORED_H,
    SQL_TAIL,
    Seen,
    Tail,
)
from creative_memory.storage.postgres.connections import ACQUIRE_TRIES, Connections

#: Conditional appends tried before the locked transaction (each loss: another writer of
#: the same user committed in between).
_OPTIMISTIC_TRIES = 4
#: Users whose log tail this process remembers (a hint only; forgotten all at once beyond).
TAILS_KEPT = 100_000

#: One call: the user, the settings it is conditioned on (or ``None``), its events.
Pending = tuple[str, Seen | None, Sequence[Event]]
#: What a write returns: the events as stored, the generation, the seq before them.
Written = tuple[list[Event], str, int]
#: Calls of one user on one condition: their key, their indexes, all their events.
_Job = tuple[tuple[str, Seen | None], list[int], list[Event]]


class _Alone(Exception):
    """The outcome of a call the group's write did not carry: its caller writes it."""


def kind(ev: Event) -> str:
    """The event's type tag (the ``kind`` column)."""
    return str(ev.__struct_config__.tag)


def columns(events: Sequence[Event]) -> tuple[list[int], list[str], list[str], list[bytes]]:
    """The ``seq``, ``kind``, ``h`` and ``line`` columns of stored ``events``."""
    return (
        [e.seq for e in events],
        [kind(e) for e in events],
        [e.h for e in events],
        [encode_event(e) for e in events],
    )


def insert_events(
    conn: psycopg.Connection[tuple[Any, ...]], user_id: str, events: Sequence[Event]
) -> None:
    """Insert stored ``events`` (inside the caller's transaction, which holds the lock)."""
    if not events:
        return
    conn.execute(
        "INSERT INTO cm_events (user_id, seq, kind, h, line) "
        "SELECT %s, s, k, hh, l "
        "FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::bytea[]) AS t(s, k, hh, l)",
        (user_id, *columns(events)),
    )


def _statement(
    user_id: str, tail: Tail, out: list[Event], seen: Seen | None
) -> tuple[LiteralString, dict[str, Any]]:
    """The conditional append of ``out`` onto ``tail`` (and ``seen``)."""
    last = out[-1]
    params: dict[str, Any] = {"u": user_id, "g": tail.generation, "f": tail.floor}
    params.update(end=last.seq, chk=seen is not None, st=None if seen is None else seen.text)
    if len(out) == 1:
        params.update(s=last.seq, k=kind(last), h=last.h, l=encode_event(last))
        return SQL_APPEND_ONE, params
    params.update(zip(("s", "k", "h", "l"), columns(out), strict=True))
    return SQL_APPEND_MANY, params


class AppendWriter:
    """The process's appends to one database (see the module docstring)."""

    def __init__(
        self, db: Connections, remember_settings: Callable[[str, str | None], SettingsSeen]
    ) -> None:
        self._db = db
        self._remember_settings = remember_settings  # the settings column's text, just read
        self._tails: dict[str, Tail] = {}  # user -> the log's tail as last written here
        self._group: GroupCommit[None, Pending] = GroupCommit(self._commit)

    def append(
        self,
        user_id: str,
        events: Sequence[Event],
        seen: Seen | None,
        if_generation: str | None = None,
    ) -> Appended:
        """Append ``events`` (non-empty) durably, if the settings are still ``seen`` (and
        the log is still ``if_generation``: then as the locked transaction, on its own)."""
        if if_generation is not None:
            out, generation, start = self._append_locked(user_id, events, seen, if_generation)
            return Appended(events=out, generation=generation, start=start, end=out[-1].seq)
        try:
            return self._group.append(None, (user_id, seen, events))
        except _Alone:  # not in the group's statement: written here, waiting for the lock
            out, generation, start = self._write(user_id, list(events), seen)
            return Appended(events=out, generation=generation, start=start, end=out[-1].seq)

    def forget(self, user_id: str) -> None:
        """Forget the user's tail (its log was rewritten)."""
        self._tails.pop(user_id, None)

    def _commit(self, _: None, calls: Sequence[Pending]) -> list[Appended | BaseException]:
        """One user's calls: written here. Several users' calls: the users whose tails are
        known in one statement; the calls that are not in it (or did not happen in it) are
        handed back to their callers (:class:`_Alone`), which write them each on its own,
        so that none of them holds up the acknowledgement of the others."""
        by_key: dict[tuple[str, Seen | None], list[int]] = {}
        for i, (user_id, seen, _events) in enumerate(calls):
            by_key.setdefault((user_id, seen), []).append(i)
        jobs: list[_Job] = [
            (key, ix, [e for i in ix for e in calls[i][2]]) for key, ix in by_key.items()
        ]
        outcomes: list[Appended | BaseException | None] = [None] * len(calls)
        if len(jobs) == 1:
            (user_id, seen), ix, events = jobs[0]
            self._split(self._write(user_id, events, seen), ix, calls, outcomes)
            return [o for o in outcomes if o is not None]
        together: list[_Job] = []
        users: set[str] = set()
        for job in jobs:
            user_id = job[0][0]
            if user_id in self._tails and user_id not in users:
                users.add(user_id)
                together.append(job)
        if len(together) > 1:
            for job, written in zip(together, self._write_together(together), strict=True):
                if isinstance(written, BaseException):
                    for i in job[1]:
                        outcomes[i] = written
                elif written is not None:
                    self._split(written, job[1], calls, outcomes)
        return [_Alone() if o is None else o for o in outcomes]

    @staticmethod
    def _split(
        written: Written,
        ix: list[int],
        calls: Sequence[Pending],
        outcomes: list[Appended | BaseException | None],
    ) -> None:
        """Hand each call of a job its own events and positions."""
        out, generation, start = written
        at = 0
        for i in ix:
            part = out[at : at + len(calls[i][2])]
            at += len(part)
            end = part[-1].seq
            outcomes[i] = Appended(events=part, generation=generation, start=start, end=end)
            start = end

    def _write_together(self, jobs: list[_Job]) -> list[Written | BaseException | None]:
        """The jobs' conditional appends in one statement (:data:`SQL_APPEND_USERS`): each
        job's :data:`Written`, ``None`` when its user's append matched nothing (or the
        statement failed: nothing of it was stored), or the error that fails it."""
        plans: list[tuple[str, Tail, list[Event], Seen | None]] = []
        for (user_id, seen), _ix, events in jobs:
            tail = self._tails[user_id]
            plans.append((user_id, tail, sequenced(events, tail.floor, tail.last_h), seen))
        params: dict[str, Any] = {
            "u": [p[0] for p in plans],
            "g": [p[1].generation for p in plans],
            "f": [p[1].floor for p in plans],
            "e": [p[2][-1].seq for p in plans],
            "chk": [p[3] is not None for p in plans],
            "st": [None if p[3] is None else p[3].text for p in plans],
            "ru": [p[0] for p in plans for _ in p[2]],
        }
        event_columns = columns([e for p in plans for e in p[2]])
        params.update(zip(("rs", "rk", "rh", "rl"), event_columns, strict=True))
        landed: list[bool | BaseException]
        try:
            with self._db.unchecked() as conn:
                rows = conn.execute(SQL_APPEND_USERS, params, prepare=True).fetchall()
            stored = {r[0] for r in rows}
            landed = [p[0] in stored for p in plans]
        except psycopg.OperationalError as exc:  # the reply was lost: did it commit?
            landed = [self._committed(u, t, out, exc) for u, t, out, _ in plans]
        except psycopg.Error:  # rolled back: each job is written on its own
            landed = [False] * len(plans)
        results: list[Written | BaseException | None] = []
        for (user_id, tail, out, _), ok in zip(plans, landed, strict=True):
            if isinstance(ok, BaseException):
                results.append(ok)
            elif ok:
                self._remember(user_id, Tail(tail.generation, out[-1].seq, out[-1].seq, out[-1].h))
                results.append((out, tail.generation, tail.last_seq))
            else:
                self._tails.pop(user_id, None)
                results.append(None)
        return results

    def _committed(
        self, user_id: str, tail: Tail, out: list[Event], lost: psycopg.Error
    ) -> bool | StorageError:
        """After a lost reply: whether ``out`` was stored onto ``tail`` (its last ``h`` at
        its last seq, same generation), or the error when that cannot be known."""
        try:
            with self._db.conn(ping=True) as check:
                row = check.execute(SQL_STORED_H, {"u": user_id, "s": out[-1].seq}).fetchone()
        except StorageError as exc:
            return exc
        if row is not None and row[0] == tail.generation:  # rows are only added
            return bool(row[1] == out[-1].h)
        return StorageError(
            f"{self._db.error(lost)} (the append was not acknowledged and the log was "
            "rewritten since: read it before retrying)"
        )

    def _write(self, user_id: str, events: list[Event], seen: Seen | None) -> Written:
        """Commit ``events`` after the log's tail: one conditional statement onto the tail
        this process saw last (or just read), re-chained and retried when another writer
        moved it; the locked transaction for a log that does not exist yet, or after
        repeated losses to other writers. With ``seen``, only if the settings are still
        those (else :class:`SettingsChanged`, nothing written)."""
        tail = self._tails.get(user_id)
        for _ in range(_OPTIMISTIC_TRIES):
            if tail is None:
                tail, now = self._read_tail(user_id)
                seen = self._check_seen(user_id, seen, now)
                if tail is None:
                    break
            out = sequenced(events, tail.floor, tail.last_h)
            if self._append_if_at(user_id, tail, out, seen):
                self._remember(user_id, Tail(tail.generation, out[-1].seq, out[-1].seq, out[-1].h))
                return out, tail.generation, tail.last_seq
            tail = None
        return self._append_locked(user_id, events, seen)

    def _remember(self, user_id: str, tail: Tail) -> None:
        if len(self._tails) >= TAILS_KEPT:
            self._tails.clear()
        self._tails[user_id] = tail

    def _read_tail(self, user_id: str) -> tuple[Tail | None, str | None]:
        """The log's tail as now committed (no lock: the conditional append checks it;
        ``None`` when the log does not exist yet) and the settings column's text."""
        with self._db.conn() as conn:
            row = conn.execute(SQL_TAIL, {"u": user_id}, prepare=True).fetchone()
        if row is None:
            return None, None
        if row[0] is None:
            return None, row[4]
        last_seq = int(row[3]) if row[3] is not None else 0
        return Tail(row[0], int(row[1]), last_seq, row[2] or CHAIN_GENESIS), row[4]

    def _check_seen(self, user_id: str, seen: Seen | None, text: str | None) -> Seen | None:
        """The condition to append on, now that the settings column reads ``text``: ``seen``
        again (or the same settings under their stored text); raises
        :class:`SettingsChanged` when they are other settings."""
        if seen is None or text == seen.text:
            return seen
        now = self._remember_settings(user_id, text)
        if now.settings != seen.settings:
            raise SettingsChanged(user_id, now)
        assert isinstance(now.token, Seen)
        return now.token

    def _append_if_at(self, user_id: str, tail: Tail, out: list[Event], seen: Seen | None) -> bool:
        """Insert ``out`` in one autocommit statement if the log is still at ``tail`` (and
        the settings ``seen``); whether it was. No ping first: when the connection turns
        out dead, whether the statement committed is read back (the ``h`` at the last new
        seq, same generation) and the append is retried on a fresh connection only if it
        did not."""
        sql, params = _statement(user_id, tail, out, seen)
        for attempt in range(ACQUIRE_TRIES):
            with self._db.unchecked() as conn:
                try:
                    return conn.execute(sql, params, prepare=True).rowcount > 0
                except psycopg.OperationalError as exc:
                    lost = exc
                except psycopg.Error as exc:
                    raise self._db.error(exc) from exc
            committed = self._committed(user_id, tail, out, lost)
            if isinstance(committed, StorageError):
                raise committed from lost
            if committed:
                return True  # it did commit; only the reply was lost
            if attempt == ACQUIRE_TRIES - 1:
                raise StorageError(f"{self._db.error(lost)} (nothing was stored)") from lost
        raise AssertionError("unreachable")  # pragma: no cover

    def _append_locked(
        self,
        user_id: str,
        events: Sequence[Event],
        seen: Seen | None,
        if_generation: str | None = None,
    ) -> Written:
        """The append as one locked transaction reading the tail (and the settings) itself:
        for the first events of a log, the fallback under contention, and an append on
        ``if_generation`` (:class:`LogRewritten` when the log is another one)."""
        with self._db.tx(user_id) as conn:
            row = conn.execute(SQL_TAIL, {"u": user_id}).fetchone()
            self._check_seen(user_id, seen, None if row is None else row[4])
            current = "" if row is None or row[0] is None else str(row[0])
            if if_generation is not None and current != if_generation:
                raise LogRewritten(user_id, current)
            if row is None:
                generation = secrets.token_hex(8)
                conn.execute(
                    "INSERT INTO cm_users (user_id, generation) VALUES (%s, %s)",
                    (user_id, generation),
                )
                last_seq, prev_h, start = 0, CHAIN_GENESIS, 0
            else:
                generation = row[0]
                if generation is None:  # settings only so far: the log begins now
                    generation = secrets.token_hex(8)
                    conn.execute(
                        "UPDATE cm_users SET generation = %s WHERE user_id = %s",
                        (generation, user_id),
                    )
                last_seq, prev_h = int(row[1]), row[2] or CHAIN_GENESIS
                start = int(row[3]) if row[3] is not None else 0
            out = sequenced(events, last_seq, prev_h)
            insert_events(conn, user_id, out)
            conn.execute(
                "UPDATE cm_users SET seq_floor = %s WHERE user_id = %s", (out[-1].seq, user_id)
            )
        # committed: durable
        self._remember(user_id, Tail(generation, out[-1].seq, out[-1].seq, out[-1].h))
        return out, generation, start
