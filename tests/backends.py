"""Run a test against both storage backends (a pytest plugin).

Test modules opt in with ``pytest_plugins = ["tests.pg_fixtures", "tests.backends"]`` and
take the ``backend`` fixture (or ``backend_root``, the bare root: a directory path or a
PostgreSQL URL with a fresh schema). ``backend.store(...)`` opens a :class:`MemoryStore`
that is closed after the test; ``backend.storage()`` the raw storage contract object;
``backend.places_containing(needle)`` lists everywhere the backend keeps the bytes (files
under the root, or ``table.column`` of every text/bytea/json column in the schema).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from creative_memory import MemoryStore
from creative_memory.storage import FileStorage
from creative_memory.storage.base import EventLogStorage
from tests.conftest import ManualClock

#: Parameter ids are the backend names: ``-k "not postgres"`` runs the file backend only.
BACKENDS = ["files", "postgres"]


@dataclass
class Backend:
    kind: str  # "files" | "postgres"
    root: str  # a directory path, or a PostgreSQL URL
    _closers: list[Callable[[], None]] = field(default_factory=list)

    def store(self, **kw: Any) -> MemoryStore:
        """A store on this backend (derivation version "1" and a manual clock by default)."""
        kw.setdefault("derivation_version", "1")
        kw.setdefault("clock", ManualClock())
        s = MemoryStore(self.root, **kw)
        self._closers.append(s.close)
        return s

    def storage(self, *, cache_capacity: int = 1000) -> EventLogStorage:
        if self.kind == "files":
            return FileStorage(self.root, cache_capacity=cache_capacity)
        from creative_memory.storage.postgres import PostgresStorage

        pg = PostgresStorage(self.root, cache_capacity=cache_capacity)
        self._closers.append(pg.close)
        return pg

    def places_containing(self, needle: bytes) -> list[str]:
        """Every file (files) or ``table.column`` with a row (postgres) holding ``needle``."""
        if self.kind == "files":
            root = Path(self.root)
            return sorted(
                str(p.relative_to(root))
                for p in root.rglob("*")
                if p.is_file() and needle in p.read_bytes()
            )
        return pg_places_containing(self.root, needle)

    def dump(self) -> dict[str, bytes]:
        """Everything stored, for "nothing changed" comparisons (cache recency excluded)."""
        if self.kind == "files":
            root = Path(self.root)
            return {
                str(p.relative_to(root)): p.read_bytes()
                for p in sorted(root.rglob("*"))
                if p.is_file() and p.name != ".lock" and "cache" not in p.parts
            } | {
                str(p.relative_to(root)): b"<cache entry>"
                for p in sorted(root.rglob("cache/*"))
                if p.is_file()
            }
        return pg_dump_rows(self.root)

    def close(self) -> None:
        while self._closers:
            self._closers.pop()()


def pg_text_columns(conn: Any) -> list[tuple[str, str, str]]:
    """(table, column, data type) of every text-like or binary column in the schema."""
    rows: list[tuple[str, str, str]] = conn.execute(
        "SELECT c.table_name, c.column_name, c.data_type FROM information_schema.columns c "
        "JOIN information_schema.tables t ON t.table_schema = c.table_schema "
        "AND t.table_name = c.table_name AND t.table_type = 'BASE TABLE' "
        "WHERE c.table_schema = current_schema() AND c.data_type IN "
        "('text', 'bytea', 'jsonb', 'json', 'character varying', 'character') "
        "ORDER BY 1, 2"
    ).fetchall()
    return rows


def pg_places_containing(url: str, needle: bytes) -> list[str]:
    import psycopg
    from psycopg import sql

    found = []
    with psycopg.connect(url, autocommit=True) as conn:
        for table, column, dtype in pg_text_columns(conn):
            col = sql.Identifier(column)
            expr = col if dtype == "bytea" else sql.SQL("convert_to({}::text, 'UTF8')").format(col)
            query = sql.SQL("SELECT count(*) FROM {} WHERE position(%s::bytea IN {}) > 0").format(
                sql.Identifier(table), expr
            )
            row = conn.execute(query, (needle,)).fetchone()
            if row and row[0]:
                found.append(f"{table}.{column}")
    return found


def pg_dump_rows(url: str) -> dict[str, bytes]:
    import psycopg
    from psycopg import sql

    out: dict[str, bytes] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [
            t
            for (t,) in conn.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY 1"
            ).fetchall()
        ]
        for t in tables:
            q = sql.SQL("SELECT * FROM {} ORDER BY 1, 2").format(sql.Identifier(t))
            cur = conn.execute(q)
            names = [d.name for d in cur.description or []]
            for i, row in enumerate(cur.fetchall()):
                rec = {n: v for n, v in zip(names, row, strict=True) if n not in ("last_used",)}
                out[f"{t}[{i}]"] = repr(rec).encode()
    return out


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "files":
        b = Backend("files", str(tmp_path / "mem"))
    else:
        b = Backend("postgres", request.getfixturevalue("pg_url"))
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def backend_root(backend: Backend) -> str:
    return backend.root
