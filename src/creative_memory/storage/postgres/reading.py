"""The PostgreSQL backend's reads of a log: whole or from a position (into a sink a chunk
at a time), and the events after the newest cached one (the package docstring has the
design)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from creative_memory.engine.events import Event
from creative_memory.storage.base import LogSnapshot
from creative_memory.storage.postgres.connections import Connections

#: Events per call of a read_events sink (fetched, decoded and handed on together).
SINK_CHUNK = 4096

#: The log from a position (the whole log when ``gen`` is not the current generation),
#: with the current generation on every row (one row of NULLs for a user without events).
_READ: Final = (
    "SELECT u.generation, u.generation = %(gen)s, e.seq, e.line "
    "FROM cm_users u LEFT JOIN cm_events e ON e.user_id = u.user_id "
    "AND e.seq > (CASE WHEN u.generation = %(gen)s THEN %(start)s ELSE 0 END) "
    "WHERE u.user_id = %(user)s ORDER BY e.seq"
)

#: Decodes one stored row (``user_id``, ``seq``, ``line``) into its event.
Decode = Callable[[str, int, bytes], Event]


def read_events(
    db: Connections,
    decode: Decode,
    user_id: str,
    *,
    generation: str | None = None,
    start: int = 0,
    sink: Callable[[list[Event]], None] | None = None,
) -> LogSnapshot:
    """``end`` is the ``seq`` of the last event read (the position to continue from):
    within one generation events are only ever appended with higher ``seq``. One
    statement, so the generation and the events come from one consistent snapshot. With
    a ``sink``, the rows are fetched, decoded and handed on ``SINK_CHUNK`` at a time
    (a server-side cursor): memory bounded by a chunk, not by the log."""
    if sink is not None:
        return _read_into(db, decode, user_id, generation, start, sink)
    with db.conn() as conn:
        rows = conn.execute(
            _READ,
            {"user": user_id, "gen": generation, "start": start},
            binary=True,
        ).fetchall()
    if not rows or rows[0][0] is None:
        return LogSnapshot(events=[], generation="", end=0)
    current: str = rows[0][0]
    resumed = bool(rows[0][1])
    events = [decode(user_id, seq, line) for _, _, seq, line in rows if seq is not None]
    end = events[-1].seq if events else (start if resumed else 0)
    return LogSnapshot(events=events, generation=current, end=end, resumed=resumed)


def _read_into(
    db: Connections,
    decode: Decode,
    user_id: str,
    generation: str | None,
    start: int,
    sink: Callable[[list[Event]], None],
) -> LogSnapshot:
    """:func:`read_events` with a ``sink``: the same statement through a server-side
    cursor in one transaction (one snapshot), ``SINK_CHUNK`` rows at a time."""
    current: str | None = None
    resumed = False
    end = None
    with db.conn() as conn, conn.transaction():
        cursor = conn.cursor(name="cm_read_events", binary=True)
        cursor.execute(
            _READ,
            {"user": user_id, "gen": generation, "start": start},
        )
        while rows := cursor.fetchmany(SINK_CHUNK):
            if current is None:
                current, resumed = rows[0][0], bool(rows[0][1])
                if current is None:
                    break
            chunk = [decode(user_id, seq, line) for _, _, seq, line in rows if seq is not None]
            if chunk:
                end = chunk[-1].seq
                sink(chunk)
        cursor.close()
    if current is None:
        return LogSnapshot(events=[], generation="", end=0)
    if end is None:
        end = start if resumed else 0
    return LogSnapshot(events=[], generation=current, end=end, resumed=resumed)


def read_after_cached(
    db: Connections, decode: Decode, user_id: str, is_cached: Callable[[str], bool]
) -> LogSnapshot:
    """Walk the log backwards (``h`` and ``line`` in growing batches, one repeatable-read
    snapshot) until an event whose chain hash is cached; decode only the events after
    it: O(k) rows for k events after the cached one."""
    with db.tx() as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        row = conn.execute(
            "SELECT generation FROM cm_users WHERE user_id = %s", (user_id,)
        ).fetchone()
        if row is None or row[0] is None:
            return LogSnapshot(events=[], generation="", end=0)
        current: str = row[0]
        tail: list[tuple[int, bytes]] = []  # newest first
        base: str | None = None
        end = 0
        before: int | None = None
        batch = 64
        while base is None:
            if before is None:
                cur = conn.execute(
                    "SELECT seq, h, line FROM cm_events WHERE user_id = %s "
                    "ORDER BY seq DESC LIMIT %s",
                    (user_id, batch),
                    binary=True,
                )
            else:
                cur = conn.execute(
                    "SELECT seq, h, line FROM cm_events WHERE user_id = %s AND seq < %s "
                    "ORDER BY seq DESC LIMIT %s",
                    (user_id, before, batch),
                    binary=True,
                )
            rows = cur.fetchall()
            if not end and rows:
                end = rows[0][0]
            for seq, h, line in rows:
                if is_cached(h):
                    base = h
                    break
                tail.append((seq, line))
            if len(rows) < batch:
                break
            before = rows[-1][0]
            batch = min(batch * 4, 16384)
    events = [decode(user_id, seq, line) for seq, line in reversed(tail)]
    return LogSnapshot(events=events, generation=current, end=end, base=base)
