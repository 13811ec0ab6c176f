"""Running the daemon (docs/daemon.md, "Operations"): first start, the listening socket,
uvicorn in the foreground (``serve``) or in a thread (tests, embedding), and the one-time
login link that ``creative-memory ui`` prints."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from starlette.types import ASGIApp

from creative_memory.app.service import StorageError
from creative_memory.app.store import MemoryStore
from creative_memory.engine.errors import Conflict
from creative_memory.http.app import create_app
from creative_memory.http.auth import DaemonFiles
from creative_memory.http.config import DEFAULT_HOST, DaemonConfig, url_host
from creative_memory.http.corked import corked_protocol
from creative_memory.http.jsonlog import configure_logging, log_event
from creative_memory.storage.files.fsutil import make_private_dir


def bind_socket(host: str, port: int) -> socket.socket:
    """A bound, listening TCP socket; ``port`` 0 picks a free port. It listens before the
    daemon announces its URL (``server.json``, the ready line), so a client that connects
    while the server is still starting up waits in the backlog instead of being refused."""
    bare = host.strip("[]")
    family = socket.AF_INET6 if ":" in bare else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((bare, port))
        sock.listen(socket.SOMAXCONN)
    except OSError as exc:
        sock.close()
        raise StorageError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.set_inheritable(True)
    return sock


def ensure_first_start(config: DaemonConfig) -> str | None:
    """Create the data dir and, in single-user mode, the user's token; returns the token
    file's path when this call created the token, else ``None``."""
    make_private_dir(config.root)
    files = DaemonFiles(config.root)
    if config.multi_user:
        if not files.read_tokens():
            log_event(
                logging.WARNING,
                "no_tokens",
                detail="multi-user mode and no tokens yet: "
                "create one per user with 'creative-memory token --user NAME'",
            )
        return None
    existed = files.token_for(config.user, create=False) is not None
    files.token_for(config.user, create=True)
    return None if existed else str(files.tokens_path)


def run_daemon(config: DaemonConfig, *, ready: Callable[[str], None] | None = None) -> None:
    """Serve until SIGINT/SIGTERM; a graceful shutdown delivers pending captured events."""
    configure_logging(config.log_level)
    files = DaemonFiles(config.root)
    shared = config.database is not None  # replicas of one database may share a data dir
    if not shared:
        refuse_a_second_daemon(files)
    created = ensure_first_start(config)
    if created:
        log_event(logging.INFO, "token_created", path=created, user=config.user)
    sock = bind_socket(config.host, config.port)
    port = int(sock.getsockname()[1])
    config = replace(config, port=port)
    url = f"http://{url_host(config.host)}:{port}/"
    info = {
        "pid": os.getpid(),
        "host": config.host,
        "port": port,
        "url": url,
        "multi_user": config.multi_user,
        "user": None if config.multi_user else config.user,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    try:
        with files.locked():  # two starting at once: one of them is refused
            if not shared:
                refuse_a_second_daemon(files)
            files.write_server_info(info)
        app = create_app(config)
    except BaseException:
        sock.close()
        files.remove_server_info(os.getpid())
        raise
    log_event(logging.INFO, "listening", url=url)
    if ready is not None:
        ready(url)
    server = _uvicorn_server(app)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        files.remove_server_info(os.getpid())


def refuse_a_second_daemon(files: DaemonFiles) -> None:
    """Raise ``Conflict`` when ``server.json`` names a daemon that is still serving this
    data dir (its process alive and its port accepting); a stale one is left to be
    replaced (docs/daemon.md, "Operations")."""
    info = files.read_server_info()
    if info is None or not _serving(info):
        return
    raise Conflict(
        "data_dir",
        f"a daemon is already serving {files.root}: {info.get('url')} (pid {info.get('pid')}); "
        "stop it first, or give this one another --data-dir",
    )


def _serving(info: dict[str, Any]) -> bool:
    pid, port = info.get("pid"), info.get("port")
    if not isinstance(pid, int) or not isinstance(port, int) or not _alive(pid):
        return False
    host = url_host(str(info.get("host") or DEFAULT_HOST)).strip("[]")
    try:  # a pid can be reused: the daemon is there only if its port still accepts
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def _uvicorn_server(app: ASGIApp) -> Any:
    import uvicorn

    return uvicorn.Server(
        uvicorn.Config(
            app,
            http=corked_protocol(),  # one send per response (http/corked.py)
            proxy_headers=False,  # loopback: no proxy in front, no forwarded headers
            log_config=None,
            access_log=False,
            lifespan="on",
            server_header=False,
            timeout_graceful_shutdown=10,
            timeout_keep_alive=5,
        )
    )


class ThreadedDaemon:
    """The daemon served by uvicorn in a background thread (a context manager; leaving it
    shuts down gracefully). ``port`` 0 picks a free port; :attr:`url` tells which."""

    def __init__(self, config: DaemonConfig, *, store: MemoryStore | None = None) -> None:
        ensure_first_start(config)
        self._sock = bind_socket(config.host, config.port)
        self.config = replace(config, port=int(self._sock.getsockname()[1]))
        self.app = create_app(self.config, store=store)
        self.daemon = self.app.daemon
        self._server = _uvicorn_server(self.app)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    @property
    def url(self) -> str:
        """The daemon's base URL (no trailing slash)."""
        return f"http://{url_host(self.config.host)}:{self.config.port}"

    def start(self, timeout: float = 10.0) -> ThreadedDaemon:
        """Start serving; returns once uvicorn is up."""
        if self._thread.is_alive() or self._server.started:
            return self
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise StorageError("the daemon did not start")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 15.0) -> None:
        """Shut down gracefully and wait for the thread."""
        self._server.should_exit = True
        self._thread.join(timeout)
        self._sock.close()

    def __enter__(self) -> ThreadedDaemon:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def login_url(root: str | os.PathLike[str], user: str) -> str:
    """A one-time login link to the running daemon of ``root`` (for ``creative-memory ui``)."""
    files = DaemonFiles(root)
    info = files.read_server_info()
    if not info or not isinstance(info.get("port"), int):
        raise StorageError(
            f"no daemon is running for {root}; start one with 'creative-memory serve'"
        )
    pid = info.get("pid")
    if isinstance(pid, int) and not _alive(pid):
        raise StorageError(
            f"the daemon for {root} (pid {pid}) is not running; start 'creative-memory serve'"
        )
    if info.get("multi_user") is False and info.get("user") not in (None, user):
        user = str(info["user"])
    nonce = files.create_login(user)
    host = url_host(str(info.get("host") or DEFAULT_HOST))
    return f"http://{host}:{info['port']}/login?once={nonce}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
