"""The PostgreSQL backend (docs/storage.md, docs/deploy.md).

For hosted, many-user deployments: several stateless daemon replicas share one database.
Same contract and the same behaviour as the file backend (:mod:`.files`):

* ``cm_events``  — the event log, one row per event keyed by ``(user_id, seq)``. ``line``
  holds the exact JSON bytes the file backend writes for the event (so hash chains,
  exports and archives are byte-identical across backends); ``kind`` and ``h`` are copies
  for queries and for O(k) reads of the tail after a cached prefix.
* ``cm_users``   — per user: ``generation`` (``NULL`` until the log exists; changes on every
  rewrite), ``seq_floor`` (the highest ``seq`` ever assigned, so ``seq`` is never reused,
  not even after erasing the tail) and ``settings`` (jsonb).
* ``cm_cache``   — derivation cache entries ``(user_id, key) → state`` with ``last_used``
  from a sequence (LRU by capacity, never by age).
* ``cm_snapshots`` — the human-readable snapshot of the derived records.
* ``cm_schema_migrations`` — applied schema versions.

Every write is one transaction that first takes the user's transaction-scoped advisory lock
(``pg_advisory_xact_lock`` on a hash of the schema and the user id), so appends, rewrites,
write-backs and settings changes of one user are serialised across threads, processes and
hosts; the lock is released by the commit. A call returns only after its commit, so an
acknowledged event is durable (with PostgreSQL's default ``fsync=on``,
``synchronous_commit=on``). An append is one prepared autocommit statement that inserts only
if the log is still at the tail it was chained onto (and the user's settings are still the
ones the append was decided on: :mod:`.appends`), and the appends of a process that arrive
while one is in flight — of any users — share the next statement (:mod:`.writer`). Erasure deletes
the rows (``DELETE``) of the erased events and every derived row of the user in the same
transaction.

Schema migrations are applied when a :class:`PostgresStorage` is created, in one
transaction under an advisory lock, so replicas starting at once apply each exactly once.
Tables are created in the connection's current schema (the first existing schema of the
``search_path``; e.g. ``?options=-csearch_path%3Dmemory`` in the URL).
"""

from __future__ import annotations

from creative_memory.engine.errors import StorageError

try:
    import psycopg  # noqa: F401  (checked here, used by the modules below)
    import psycopg_pool  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installation
    raise StorageError(
        "the PostgreSQL backend needs psycopg 3 and psycopg-pool: "
        "pip install 'creative-memory[postgres]'"
    ) from exc

from creative_memory.storage.postgres.backend import PostgresStorage
from creative_memory.storage.postgres.schema import (
    MIGRATIONS,
    SCHEMA_VERSION,
    Migration,
    migrate,
    redact_url,
)

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "Migration", "PostgresStorage", "migrate", "redact_url"]
