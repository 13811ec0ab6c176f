"""The daemon announces its URL only when a client can connect to it (docs/daemon.md)."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from creative_memory.http import run as run_module
from creative_memory.http.auth import DaemonFiles
from creative_memory.http.config import DaemonConfig


def test_a_client_connecting_right_after_the_announcement_is_not_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server takes a while to start (a slow store, a database migration): a client
    that reads ``server.json`` at once must wait for it, not get "connection refused"."""
    real = run_module._uvicorn_server

    def slow_server(app: Any) -> Any:
        server = real(app)
        original = server.run

        def run(sockets: Any = None) -> None:
            time.sleep(1.0)  # the start-up between the announcement and serving
            original(sockets=sockets)

        server.run = run
        return server

    monkeypatch.setattr(run_module, "_uvicorn_server", slow_server)
    monkeypatch.setattr(signal, "signal", lambda *a: None)  # uvicorn runs in a thread here
    root = tmp_path / "mem"
    config = DaemonConfig(root=root, port=0, user="default", tick_seconds=3600)
    thread = threading.Thread(target=run_module.run_daemon, args=(config,), daemon=True)
    thread.start()
    files = DaemonFiles(root)
    deadline = time.monotonic() + 20
    while (info := files.read_server_info()) is None:
        assert time.monotonic() < deadline, "the daemon never announced itself"
        time.sleep(0.01)
    # at once: the socket already accepts (the request waits until the server serves)
    with socket.create_connection(("127.0.0.1", int(info["port"])), timeout=5):
        pass
    r = httpx.get(f"{str(info['url']).rstrip('/')}/healthz", timeout=10)
    assert r.status_code == 200
    os.kill(os.getpid(), 0)  # still alive; the thread is a daemon thread and ends with us


def test_a_config_root_given_as_a_string_is_a_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/daemon.md, "Embedding in Python": ``DaemonConfig(root="…")`` works as a Path does
    (a relative one taken from the current directory)."""
    from creative_memory.http import ThreadedDaemon

    # the annotation says Path; a str from an untyped caller is converted
    assert DaemonConfig(root=str(tmp_path)).root == tmp_path  # type: ignore[arg-type]
    assert DaemonConfig(root=tmp_path).root == tmp_path
    monkeypatch.chdir(tmp_path)
    with ThreadedDaemon(DaemonConfig(root="lib", port=0)) as d:  # type: ignore[arg-type]
        assert httpx.get(f"{d.url}/healthz").json()["status"] == "ok"
    assert (tmp_path / "lib" / ".daemon" / "tokens.json").is_file()
