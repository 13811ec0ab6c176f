"""Appends to the PostgreSQL event log: the SQL of the one-statement append and the
per-user group commit (design: the package docstring and docs/deploy.md).

An append is normally **one statement in autocommit mode** — its own transaction, one
round trip, prepared once per connection — that takes the user's advisory lock, moves
``cm_users.seq_floor`` from the tail the writer chained its events onto (only if the log is
still at that tail: same ``generation`` and ``seq_floor``) and inserts the rows; zero rows
inserted means another writer (a thread or a replica) got there first, and the append is
re-chained onto the new tail and retried. ``(generation, seq_floor)`` names the log's whole
content: within a generation rows are only ever added, and every append raises the floor.

An append conditioned on the user's settings (``%(chk)s``) also matches nothing when the
settings are no longer ``%(st)s`` (compared as ``jsonb``: by value, not by text), so the
settings a caller decided on and its append are one statement too (docs/storage.md,
"Settings an append depends on").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import LiteralString

from creative_memory.engine.events import Event
from creative_memory.engine.settings import UserSettings
from creative_memory.storage.base import Appended
from creative_memory.storage.groupcommit import GroupCommit as SharedGroupCommit

#: The user's transaction-scoped advisory lock, as an expression (``%(u)s`` = user id).
LOCK_EXPR: LiteralString = (
    "pg_advisory_xact_lock(hashtextextended("
    "'creative-memory:user:' || coalesce(current_schema(), '') || '/' || %(u)s::text, 0))"
)

#: Where the log ends, and the settings, read without a lock (a guess that the conditional
#: append checks).
SQL_TAIL: LiteralString = (
    "SELECT u.generation, u.seq_floor, last.h, last.seq, u.settings::text FROM cm_users u "
    "LEFT JOIN LATERAL (SELECT e.h, e.seq FROM cm_events e "
    "WHERE e.user_id = u.user_id ORDER BY e.seq DESC LIMIT 1) last ON true "
    "WHERE u.user_id = %(u)s::text"
)

# The lock CTE is pseudo-constant, so it runs (and waits) before cm_users is scanned; a row
# updated by a transaction that committed meanwhile is re-checked on its newest version
# (READ COMMITTED), so a changed generation or floor matches nothing and nothing is inserted.
_GUARD: LiteralString = (
    "WITH lk AS (SELECT " + LOCK_EXPR + "), "
    "up AS (UPDATE cm_users SET seq_floor = %(end)s::bigint "
    "WHERE user_id = %(u)s::text AND generation = %(g)s::text "
    "AND seq_floor = %(f)s::bigint AND EXISTS (SELECT FROM lk) "
    "AND (NOT %(chk)s::boolean OR settings IS NOT DISTINCT FROM %(st)s::jsonb) RETURNING 1) "
    "INSERT INTO cm_events (user_id, seq, kind, h, line) "
)

#: One event, if the log is still at ``(g, f)``.
SQL_APPEND_ONE: LiteralString = (
    _GUARD + "SELECT %(u)s::text, %(s)s::bigint, %(k)s::text, %(h)s::text, %(l)s::bytea "
    "WHERE EXISTS (SELECT FROM up)"
)

#: Several events (parallel arrays), if the log is still at ``(g, f)``.
SQL_APPEND_MANY: LiteralString = (
    _GUARD + "SELECT %(u)s::text, s, k, hh, l "
    "FROM unnest(%(s)s::bigint[], %(k)s::text[], %(h)s::text[], %(l)s::bytea[]) "
    "AS t(s, k, hh, l) WHERE EXISTS (SELECT FROM up)"
)

#: After a lost connection: the generation and the ``h`` stored at one ``seq``.
SQL_STORED_H: LiteralString = (
    "SELECT u.generation, (SELECT e.h FROM cm_events e "
    "WHERE e.user_id = u.user_id AND e.seq = %(s)s::bigint) "
    "FROM cm_users u WHERE u.user_id = %(u)s::text"
)


@dataclass(frozen=True, slots=True)
class Tail:
    """Where a user's log ends: ``generation``, ``floor`` (``seq_floor``, the highest seq
    ever assigned), and the ``seq``/``h`` of its last event (0 / the genesis when none)."""

    generation: str
    floor: int
    last_seq: int
    last_h: str


@dataclass(frozen=True, slots=True)
class Seen:
    """The token of a :class:`~creative_memory.storage.base.SettingsSeen`: the settings
    column's text as read or written (``None``: no settings) and what it decodes to."""

    text: str | None
    settings: UserSettings | None = field(compare=False, hash=False)


#: A group's key: the user, and the settings its appends are conditioned on (if any).
Key = tuple[str, Seen | None]

#: What a batch commit returns: the events as stored, the generation, the seq before them.
Written = tuple[list[Event], str, int]


class GroupCommit(SharedGroupCommit[Key]):
    """The shared group commit (:mod:`creative_memory.storage.groupcommit`) over
    ``write``, which commits one user's events — every call's of a batch, in arrival order
    — in **one** transaction; each call gets its own events and seq positions back. Calls
    conditioned on different settings go in different groups."""

    def __init__(self, write: Callable[[str, list[Event], Seen | None], Written]) -> None:
        def commit(key: Key, batches: Sequence[Sequence[Event]]) -> list[Appended]:
            user_id, seen = key
            out, generation, start = write(user_id, [e for b in batches for e in b], seen)
            results, i = [], 0
            for b in batches:
                part = out[i : i + len(b)]
                i += len(b)
                results.append(
                    Appended(events=part, generation=generation, start=start, end=part[-1].seq)
                )
                start = part[-1].seq
            return results

        super().__init__(commit)
