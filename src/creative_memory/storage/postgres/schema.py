"""The PostgreSQL schema: versioned migrations, applied once under an advisory lock, and
the helpers that report on a database (docs/deploy.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, LiteralString

import psycopg

from creative_memory.engine.errors import StorageError
from creative_memory.storage.dburl import redact_url as redact_url
from creative_memory.storage.dburl import scrub as scrub


@dataclass(frozen=True)
class Migration:
    """One versioned schema change: its number, what it does, its SQL."""

    version: int
    description: str
    sql: LiteralString


#: Versioned schema migrations, applied in order on start. Never edit an applied one: add
#: the next version instead.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "event log, users (generation, seq floor, settings), derivation cache, snapshots",
        """
        CREATE TABLE cm_users (
            user_id     text PRIMARY KEY,
            generation  text,
            seq_floor   bigint NOT NULL DEFAULT 0,
            settings    jsonb
        );
        COMMENT ON COLUMN cm_users.generation IS
            'content lineage of the log: NULL until it exists, new on every rewrite';
        COMMENT ON COLUMN cm_users.seq_floor IS
            'highest seq ever assigned to the user (never reused, even after erasure)';
        CREATE TABLE cm_events (
            user_id  text   NOT NULL REFERENCES cm_users (user_id),
            seq      bigint NOT NULL,
            kind     text   NOT NULL,
            h        text   NOT NULL,
            line     bytea  NOT NULL,
            PRIMARY KEY (user_id, seq)
        );
        COMMENT ON COLUMN cm_events.line IS
            'the event as canonical JSON bytes, identical to a line of events.jsonl';
        CREATE TABLE cm_cache (
            user_id    text   NOT NULL,
            key        text   NOT NULL,
            state      bytea  NOT NULL,
            last_used  bigint NOT NULL,
            PRIMARY KEY (user_id, key)
        );
        CREATE INDEX cm_cache_lru ON cm_cache (user_id, last_used);
        CREATE SEQUENCE cm_cache_clock;
        CREATE TABLE cm_snapshots (
            user_id   text  PRIMARY KEY,
            snapshot  bytea NOT NULL
        );
        """,
    ),
    Migration(
        2,
        "erasure notes: the latest rewrites of a log, nothing of what they erased",
        """
        ALTER TABLE cm_users ADD COLUMN erasures jsonb NOT NULL DEFAULT '[]'::jsonb;
        COMMENT ON COLUMN cm_users.erasures IS
            'notes of the latest rewrites (generation replaced, whether it erased, a random '
            'id), so an event captured before one is checked when it arrives after it';
        """,
    ),
)

SCHEMA_VERSION = MIGRATIONS[-1].version

_LOCK_MIGRATIONS: LiteralString = (
    "SELECT pg_advisory_xact_lock(hashtextextended("
    "'creative-memory:migrate:' || coalesce(current_schema(), ''), 0))"
)


def migrate(conn: psycopg.Connection[Any]) -> int:
    """Apply pending :data:`MIGRATIONS` on ``conn`` (committed); returns how many ran.

    Idempotent and safe when several processes start at once: the check and the
    migrations run in one transaction under an advisory lock. A database migrated by a
    newer creative-memory is refused rather than misread."""
    applied = _applied_versions(conn)
    conn.commit()
    if applied and max(applied) >= SCHEMA_VERSION:
        _check_not_newer(applied)
        return 0
    with conn.transaction():
        conn.execute(_LOCK_MIGRATIONS)
        row = conn.execute("SELECT current_schema()").fetchone()
        if row is None or row[0] is None:
            raise StorageError(
                "no schema to create the tables in: the search_path names no existing schema"
            )
        conn.execute(
            "CREATE TABLE IF NOT EXISTS cm_schema_migrations ("
            "version int PRIMARY KEY, description text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        applied = _applied_versions(conn)
        _check_not_newer(applied)
        ran = 0
        for m in MIGRATIONS:
            if m.version in applied:
                continue
            conn.execute(m.sql)
            conn.execute(
                "INSERT INTO cm_schema_migrations (version, description) VALUES (%s, %s)",
                (m.version, m.description),
            )
            ran += 1
    return ran


def _applied_versions(conn: psycopg.Connection[Any]) -> set[int]:
    row = conn.execute("SELECT to_regclass('cm_schema_migrations') IS NOT NULL").fetchone()
    if row is None or not row[0]:
        return set()
    return {int(v) for (v,) in conn.execute("SELECT version FROM cm_schema_migrations")}


def _check_not_newer(applied: set[int]) -> None:
    if applied and max(applied) > SCHEMA_VERSION:
        raise StorageError(
            f"the database schema is at version {max(applied)}, newer than this "
            f"creative-memory supports ({SCHEMA_VERSION}): upgrade creative-memory"
        )


def message(exc: BaseException) -> str:
    """The first line of an exception's message (its type when it has none)."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
