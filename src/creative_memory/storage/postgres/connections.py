"""The PostgreSQL backend's connections: the pool, pings, transactions under a user's
advisory lock (design: the package docstring and docs/deploy.md)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any, LiteralString

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool, PoolTimeout

from creative_memory.engine.errors import StorageError
from creative_memory.storage.postgres.schema import message, migrate, redact_url, scrub

#: A pooled connection idle for longer than this is pinged before a read (always before a
#: locked transaction); when the ping fails, every idle connection is checked and the call
#: retried.
_CHECK_IDLE_S = 1.0
#: Connections tried for one call when they turn out dead.
ACQUIRE_TRIES = 3
#: Connections per process at most: more than the daemon's threads that use storage (the
#: 32 of its request pool, ``THREADS`` in http/state.py, and the background derivation
#: worker), so a request never waits for a connection (docs/deploy.md, "The hosted setup").
DEFAULT_POOL_SIZE = 40

# The per-user lock key: schema-qualified, so tenants in other schemas never contend.
_LOCK_USER: LiteralString = (
    "SELECT pg_advisory_xact_lock(hashtextextended("
    "'creative-memory:user:' || coalesce(current_schema(), '') || '/' || %s, 0))"
)

Conn = psycopg.Connection[tuple[Any, ...]]


class _ConnectErrors(logging.Handler):
    """The last connection error of each pool, from the warning psycopg_pool logs when it
    cannot connect — so a pool timeout can say why (the server refused, the password…)
    instead of only "couldn't get a connection". Being a handler of ``psycopg.pool``, it
    also keeps those warnings out of a CLI's stderr (no last-resort printing); a host that
    configures logging still receives them."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self._last: dict[str, tuple[float, str]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args
        if record.msg == "error connecting in %r: %s" and isinstance(args, tuple):
            self._last[str(args[0])] = (time.monotonic(), str(args[1]))

    def recent(self, pool: str, within: float) -> str | None:
        """The pool's last connection error, if it came in the last ``within`` seconds."""
        at, text = self._last.get(pool, (0.0, ""))
        return text if text and time.monotonic() - at <= within else None


_CONNECT_ERRORS = _ConnectErrors()
logging.getLogger("psycopg.pool").addHandler(_CONNECT_ERRORS)


class Connections:
    """A migrated database and a pool of autocommit connections to it."""

    def __init__(self, url: str, *, min_size: int, max_size: int, connect_timeout: float) -> None:
        self.described = redact_url(url)
        self._url = url
        self._last_used: weakref.WeakKeyDictionary[Conn, float] = weakref.WeakKeyDictionary()
        self._used_lock = threading.Lock()
        # The direct connection and the pool connect with the same parameters: the URL's
        # connect_timeout when it names one (libpq judges it), else ``connect_timeout``.
        try:
            given = conninfo_to_dict(url)
        except psycopg.Error as exc:
            raise self.error(exc) from exc
        timeout = given.get("connect_timeout")
        if timeout is None:
            timeout = str(max(1, int(connect_timeout)))
            url = make_conninfo(url, connect_timeout=timeout)
        # Migrate over a direct connection first: a wrong URL or password fails here at
        # once with the server's message (the pool would only time out).
        try:
            with psycopg.connect(url) as conn:
                migrate(conn)
        except psycopg.Error as exc:
            raise self.error(exc) from exc
        #: how long a call waits for a connection: the connect timeout libpq just took (its
        #: 0, no limit, is the pool's old 30 s)
        try:
            self.wait = float(timeout) or 30.0
        except ValueError:
            self.wait = 30.0
        self._pool: ConnectionPool[Conn] = ConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            open=True,
            # reads and appends are single statements; other writes use tx(). The append's
            # statements are prepared on first use (prepare=True), the others by psycopg
            # after a few uses: a one-off on a new connection costs no extra round trip.
            kwargs={"autocommit": True},
            timeout=self.wait,
            num_workers=2,
            name=f"creative-memory-{id(self):x}",
        )

    def close(self) -> None:
        """Close the pool (idempotent)."""
        self._pool.close()

    def error(self, exc: BaseException) -> StorageError:
        """``exc`` as a :class:`StorageError` naming the (redacted) database, with no
        password in it (libpq's messages may quote the URL). A pool timeout says why the
        pool could not connect, when it tried and failed."""
        text = message(exc)
        if isinstance(exc, PoolTimeout):
            cause = _CONNECT_ERRORS.recent(self._pool.name, 2 * self.wait)
            text = f"no connection within {self.wait:g} s" + (f": {cause}" if cause else "")
        return StorageError(f"{self.described}: {scrub(text, self._url)}")

    def _acquire(self, *, ping: bool) -> Conn:
        """A pooled connection known to work: pinged first when ``ping`` (locked writes) or
        when it sat idle for over a second (reads), replaced when the ping fails. So a
        database restart or failover costs a reconnect, while steady read traffic pays no
        extra round trip; a connection that dies in the second after its last use can
        still fail one read (a :class:`StorageError`; reads are safe to repeat)."""
        for attempt in range(ACQUIRE_TRIES):
            conn = self._pool.getconn()
            with self._used_lock:
                last = self._last_used.get(conn)
            if not ping and last is not None and time.monotonic() - last <= _CHECK_IDLE_S:
                return conn
            try:
                ConnectionPool.check_connection(conn)
                return conn
            except psycopg.OperationalError:
                self._pool.putconn(conn)  # broken: the pool discards it
                if attempt == ACQUIRE_TRIES - 1:
                    raise
                self._pool.check()  # the others are likely dead too: replace them all
        raise AssertionError("unreachable")  # pragma: no cover

    def _release(self, conn: Conn) -> None:
        with self._used_lock:
            self._last_used[conn] = time.monotonic()
        self._pool.putconn(conn)  # rolls back / discards a connection left unclean
        if conn.closed:  # it died under us (a restart?): check the idle ones now
            with contextlib.suppress(psycopg.Error):
                self._pool.check()

    @contextlib.contextmanager
    def conn(self, *, ping: bool = False) -> Iterator[Conn]:
        """A pooled connection in autocommit mode (each statement its own transaction).
        Database errors become :class:`StorageError`; errors raised by callbacks pass
        through unchanged."""
        try:
            conn = self._acquire(ping=ping)
            try:
                yield conn
            finally:
                self._release(conn)
        except psycopg.Error as exc:  # includes psycopg_pool.PoolTimeout
            raise self.error(exc) from exc

    @contextlib.contextmanager
    def unchecked(self) -> Iterator[Conn]:
        """A pooled connection, not pinged, whose database errors pass through as they are
        (the caller decides what a lost connection means); a pool timeout is a
        :class:`StorageError`."""
        try:
            conn = self._pool.getconn()
        except psycopg.Error as exc:  # psycopg_pool.PoolTimeout
            raise self.error(exc) from exc
        try:
            yield conn
        finally:
            self._release(conn)

    @contextlib.contextmanager
    def tx(self, user_id: str | None = None) -> Iterator[Conn]:
        """One transaction, committed before the caller continues (rolled back on error),
        holding ``user_id``'s advisory lock when given.

        Pipeline mode: statements are sent without waiting for each reply until a result is
        needed, so ``BEGIN``, the lock and the first query cost one round trip, and the
        writes plus ``COMMIT`` another. The server still runs them one after the other — a
        statement's snapshot is taken only once the lock before it is granted — and leaving
        the block waits for the ``COMMIT`` to be acknowledged."""
        with self.conn(ping=True) as conn, conn.pipeline(), conn.transaction():
            if user_id is not None:
                conn.execute(_LOCK_USER, (user_id,))
            yield conn
