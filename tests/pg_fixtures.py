"""PostgreSQL for the test suite (a pytest plugin: ``pytest_plugins = ["tests.pg_fixtures"]``).

``pg_server`` (session) is the URL of a server the tests may create schemas in:

1. ``CREATIVE_MEMORY_TEST_DATABASE_URL`` when set (``.ci/run`` sets it) — used as is;
2. else, when PostgreSQL server binaries are found (``initdb`` on ``PATH`` or under
   ``/usr/lib/postgresql/<version>/bin``), a private throwaway cluster: ``initdb`` into a
   temp dir (as the ``postgres`` OS user when the tests run as root — ``initdb`` refuses
   root), ``pg_ctl start`` on a free loopback port with the unix socket in the temp dir,
   password (SCRAM) auth; stopped and deleted at session end. Under pytest-xdist every
   worker starts its own;
3. else the tests that need PostgreSQL are skipped with the reason — or, when ``CI`` is set,
   they FAIL: a CI without PostgreSQL must not pass by skipping half the suite.

``pg_url`` (function) is an isolated database state per test: a fresh schema, selected via
``?options=-csearch_path%3D<schema>`` in the URL, dropped afterwards (and every connection
the test left open is terminated; they are tagged with ``application_name``).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

ENV_URL = "CREATIVE_MEMORY_TEST_DATABASE_URL"


def with_params(url: str, **params: str) -> str:
    """``url`` with extra query parameters (values percent-encoded)."""
    extra = "&".join(f"{k}={quote(v, safe='')}" for k, v in params.items())
    return f"{url}{'&' if '?' in url else '?'}{extra}"


def schema_url(url: str, schema: str) -> str:
    """A URL whose connections use ``schema`` (tagged with it as their application_name)."""
    return with_params(url, options=f"-csearch_path={schema}", application_name=schema)


def find_bindir() -> Path | None:
    """The directory of ``initdb`` and ``pg_ctl`` (newest installed version), if any."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl", path=str(Path(found).parent)):
        return Path(found).parent

    def version(p: Path) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", p.parent.parent.name)) or (0,)

    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=version)
    return candidates[-1].parent if candidates else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PrivateCluster:
    """A throwaway PostgreSQL cluster in a temp dir, reachable on 127.0.0.1 only."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.as_user: list[str] = []
        owner: pwd.struct_passwd | None = None
        if os.geteuid() == 0:  # initdb and postgres refuse to run as root
            try:
                owner = pwd.getpwnam("postgres")
            except KeyError as exc:
                raise RuntimeError(
                    "running as root and there is no 'postgres' OS user to run initdb as"
                ) from exc
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.dir = Path(tempfile.mkdtemp(prefix="cm-pg-"))
        if owner is not None:
            os.chown(self.dir, owner.pw_uid, owner.pw_gid)
        self.data = self.dir / "data"
        self.password = secrets.token_hex(16)
        pwfile = self.dir / "pwfile"
        pwfile.write_text(self.password + "\n")
        if owner is not None:
            os.chown(pwfile, owner.pw_uid, owner.pw_gid)
        self.user = "cm_test"
        self.port = 0
        self._run(
            str(bindir / "initdb"),
            "-D",
            str(self.data),
            "-U",
            self.user,
            f"--pwfile={pwfile}",
            "--auth=scram-sha-256",
            "--encoding=UTF8",
            "--no-locale",
            "--no-sync",
        )
        pwfile.unlink()

    def _run(self, *cmd: str) -> None:
        proc = subprocess.run(
            [*self.as_user, *cmd], capture_output=True, text=True, timeout=120, check=False
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:2])} failed: {proc.stderr or proc.stdout}")

    def start(self) -> str:
        last: Exception | None = None
        for _ in range(5):  # another process may grab the free port first
            self.port = _free_port()
            opts = (
                f"-c listen_addresses=127.0.0.1 -p {self.port} "
                f"-c unix_socket_directories={self.dir} -c max_connections=200 "
                "-c shared_buffers=64MB"
            )
            try:
                self._run(
                    str(self.bindir / "pg_ctl"),
                    "-D",
                    str(self.data),
                    "-l",
                    str(self.dir / "server.log"),
                    "-w",
                    "-t",
                    "60",
                    "-o",
                    opts,
                    "start",
                )
                return self.url
            except RuntimeError as exc:
                last = exc
        raise RuntimeError(f"could not start PostgreSQL: {last}; see {self.dir}/server.log")

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}:{self.password}@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    url = os.environ.get(ENV_URL)
    if url:
        yield url
        return
    bindir = find_bindir()
    reason = ""
    cluster: PrivateCluster | None = None
    if bindir is None:
        reason = (
            f"no PostgreSQL: set {ENV_URL} or install the server binaries "
            "(Debian: apt-get install postgresql)"
        )
    else:
        try:
            cluster = PrivateCluster(bindir)
            atexit.register(cluster.stop)
            cluster.start()
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            reason = f"could not start a private PostgreSQL cluster from {bindir}: {exc}"
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but PostgreSQL is unavailable — {reason}", pytrace=False)
        pytest.skip(reason)
    assert cluster is not None
    try:
        yield cluster.url
    finally:
        cluster.stop()


def new_schema_name() -> str:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    return f"cmt_{worker}_{secrets.token_hex(6)}"


@contextlib.contextmanager
def fresh_schema(server_url: str) -> Iterator[str]:
    """A new empty schema on ``server_url``; yields a URL using it; drops it afterwards."""
    import psycopg

    schema = new_schema_name()
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield schema_url(server_url, schema)
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s AND pid <> pg_backend_pid()",
                (schema,),
            )
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    with fresh_schema(pg_server) as url:
        yield url
