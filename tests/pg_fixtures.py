"""PostgreSQL for the test suite (a pytest plugin: ``pytest_plugins = ["tests.pg_fixtures"]``).

``pg_server`` (session) is the URL of a server the tests may create schemas in:

1. ``CREATIVE_MEMORY_TEST_DATABASE_URL`` when set (``.ci/run`` sets it) — used as is;
2. else, when PostgreSQL server binaries are found (``initdb`` on ``PATH`` or under
   ``/usr/lib/postgresql/<version>/bin``), a private throwaway cluster: ``initdb`` into a
   temp dir (as the ``postgres`` OS user when the tests run as root — ``initdb`` refuses
   root), ``pg_ctl start`` on a free loopback port with the unix socket in the temp dir,
   password (SCRAM) auth; stopped and deleted at session end. Under pytest-xdist the
   workers share one cluster (reference-counted under a file lock; the last one stops it);
3. else the tests that need PostgreSQL are skipped with the reason — or, when ``CI`` is set,
   they FAIL: a CI without PostgreSQL must not pass by skipping half the suite.

``pg_url`` (function) is an isolated database state per test: a fresh schema, selected via
``?options=-csearch_path%3D<schema>`` in the URL, dropped afterwards (and every connection
the test left open is terminated; they are tagged with ``application_name``).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "postgres: needs PostgreSQL (added automatically; -m 'not postgres')"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that needs PostgreSQL, so ``-m "not postgres"`` leaves them out."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "pg_server" in getattr(item, "fixturenames", ()) or params.get("backend") == (
            "postgres"
        ):
            item.add_marker("postgres")


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
        PrivateCluster.stop_at(self.bindir, self.dir)

    @staticmethod
    def stop_at(bindir: Path, cluster_dir: Path) -> None:
        """Stop the cluster living in ``cluster_dir`` and delete it."""
        as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        cmd = [*as_user, str(bindir / "pg_ctl"), "-D", str(cluster_dir / "data"), "-m", "fast"]
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run([*cmd, "stop"], capture_output=True, timeout=60, check=False)
        shutil.rmtree(cluster_dir, ignore_errors=True)


class SharedCluster:
    """One private cluster for every pytest-xdist worker of a run, reference-counted in a
    state file beside the workers' temp dirs (under a file lock): the first worker to need
    it starts it, the last one to finish stops it."""

    def __init__(self, shared_dir: Path, bindir: Path) -> None:
        self.bindir = bindir
        self.lock_path = shared_dir / "cm-pg.lock"
        self.state_path = shared_dir / "cm-pg.json"
        self.cluster: PrivateCluster | None = None
        self.released = False

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, object]]:
        with open(self.lock_path, "a+b") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                state = json.loads(self.state_path.read_text()) if self.state_path.exists() else {}
            except ValueError:
                state = {}
            yield state
            if state:
                self.state_path.write_text(json.dumps(state))
            else:
                self.state_path.unlink(missing_ok=True)

    def acquire(self) -> str:
        with self._locked() as state:
            if state and _reachable(str(state["url"])):
                state["users"] = int(str(state["users"])) + 1
            else:
                cluster = PrivateCluster(self.bindir)
                try:
                    url = cluster.start()
                except BaseException:
                    cluster.stop()
                    raise
                state.clear()
                state.update(url=url, dir=str(cluster.dir), data=str(cluster.data), users=1)
            atexit.register(self.release)  # a worker that dies still lets go
            return str(state["url"])

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        with self._locked() as state:
            if not state:
                return
            state["users"] = int(str(state["users"])) - 1
            if int(str(state["users"])) <= 0:
                PrivateCluster.stop_at(self.bindir, Path(str(state["dir"])))
                state.clear()


def _reachable(url: str) -> bool:
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=5):
            return True
    except psycopg.Error:
        return False


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = os.environ.get(ENV_URL)
    if url:
        yield url
        return
    bindir = find_bindir()
    reason = ""
    shared: SharedCluster | None = None
    server = ""
    if bindir is None:
        reason = (
            f"no PostgreSQL: set {ENV_URL} or install the server binaries "
            "(Debian: apt-get install postgresql)"
        )
    else:
        base = tmp_path_factory.getbasetemp()
        # under pytest-xdist every worker's basetemp is a child of the run's basetemp
        shared_dir = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
        shared = SharedCluster(shared_dir, bindir)
        try:
            server = shared.acquire()
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            reason = f"could not start a private PostgreSQL cluster from {bindir}: {exc}"
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but PostgreSQL is unavailable — {reason}", pytrace=False)
        pytest.skip(reason)
    assert shared is not None
    try:
        yield server
    finally:
        shared.release()


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
