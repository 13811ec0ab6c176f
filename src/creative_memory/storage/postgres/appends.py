"""Appends to the PostgreSQL event log: the SQL of the one-statement append (how it is
sent, alone or with other users' in one transaction: :mod:`.writer`; design: the package
docstring and docs/deploy.md).

An append is **one statement** — prepared once per connection — that takes the user's
advisory lock, moves ``cm_users.seq_floor`` from the tail the writer chained its events
onto (only if the log is still at that tail: same ``generation`` and ``seq_floor``) and
inserts the rows; zero rows inserted means another writer (a thread or a replica) got
there first, and the append is re-chained onto the new tail and retried.
``(generation, seq_floor)`` names the log's whole content: within a generation rows are
only ever added, and every append raises the floor.

An append conditioned on the user's settings (``%(chk)s``) also matches nothing when the
settings are no longer ``%(st)s`` (compared as ``jsonb``: by value, not by text), so the
settings a caller decided on and its append are one statement too (docs/storage.md,
"Settings an append depends on").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import LiteralString

from creative_memory.engine.settings import UserSettings

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

#: Several users' appends in one statement (parallel arrays: per user ``u``, ``g``, ``f``,
#: ``e`` (the new floor), ``chk``, ``st``; per event ``ru``, ``rs``, ``rk``, ``rh``, ``rl``):
#: each user's lock only if it is free at once (``pg_try_advisory_xact_lock``: the statement
#: never waits, so one user's lock held elsewhere holds up no other user, and no two such
#: statements can deadlock), then each locked user's conditional append as in the one-user
#: statement; returns the users whose events were inserted.
SQL_APPEND_USERS: LiteralString = (
    "WITH v AS (SELECT * FROM unnest(%(u)s::text[], %(g)s::text[], %(f)s::bigint[], "
    "%(e)s::bigint[], %(chk)s::boolean[], %(st)s::text[]) AS v(u, g, f, e, chk, st)), "
    "lk AS (SELECT v.u FROM v WHERE pg_try_advisory_xact_lock(hashtextextended("
    "'creative-memory:user:' || coalesce(current_schema(), '') || '/' || v.u, 0))), "
    "up AS (UPDATE cm_users c SET seq_floor = v.e FROM v "
    "WHERE c.user_id = v.u AND v.u IN (SELECT u FROM lk) "
    "AND c.generation = v.g AND c.seq_floor = v.f "
    "AND (NOT v.chk OR c.settings IS NOT DISTINCT FROM v.st::jsonb) RETURNING c.user_id), "
    "ins AS (INSERT INTO cm_events (user_id, seq, kind, h, line) "
    "SELECT r.u, r.s, r.k, r.h, r.l FROM unnest(%(ru)s::text[], %(rs)s::bigint[], "
    "%(rk)s::text[], %(rh)s::text[], %(rl)s::bytea[]) AS r(u, s, k, h, l) "
    "WHERE r.u IN (SELECT user_id FROM up) RETURNING 1) "
    "SELECT user_id FROM up"
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
