"""The daemon's HTTP API (docs/http.md): every endpoint, authentication, cross-user
isolation, body limits, problem documents, Host checks, the login link and graceful shutdown.

The application runs in process (Starlette's TestClient, which also runs the lifespan and so
the capture ticker); one test serves it with uvicorn on a real loopback socket
(``ThreadedDaemon``), one runs ``python -m creative_memory.cli.daemon serve`` as a subprocess
and stops it with SIGTERM, and one runs benchmarks/load.py.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import stat
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from creative_memory import MemoryStore
from creative_memory.cli.daemon import cli, resolve_data_dir
from creative_memory.engine.portability.archive import MAX_ARCHIVE_DEPTH
from creative_memory.http import (
    DaemonConfig,
    DaemonFiles,
    JsonFormatter,
    ThreadedDaemon,
    allowed_host_headers,
    create_app,
    daemon_of,
    ensure_first_start,
    openapi_document,
)
from tests.conftest import ManualClock

with warnings.catch_warnings():  # Starlette 1.x prefers httpx2 for its TestClient
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

PROBLEM = "application/problem+json"
PORT = 7744  # the in-process app is never bound; the Host check and cookie name use it


def wire(kind: str = "thumbs_rated", **over: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "event": kind,
        "user_id": "default",
        "artifact_id": "a1",
        "session_id": "s1",
        "project_id": None,
        "timestamp": "2026-03-01T10:00:00Z",
        "artifact_meta": {"signals": [{"preference_type": "color", "pattern": "neon_palette"}]},
    }
    if kind == "thumbs_rated":
        ev["rating"] = "down"
    if kind == "explicit_tag_applied":
        ev["tag_text"] = "love this"
    ev.update(over)
    return ev


def signals(pattern: str, ptype: str = "color") -> dict[str, Any]:
    return {"signals": [{"preference_type": ptype, "pattern": pattern}]}


class InProcess:
    """The daemon's app in process; :meth:`client` opens clients with their own cookies."""

    def __init__(self, root: Path, store: MemoryStore | None, **over: Any) -> None:
        self.config = DaemonConfig(root=root, port=PORT, tick_seconds=0.05, **over)
        ensure_first_start(self.config)
        self.app = create_app(self.config, store=store)
        self.daemon = daemon_of(self.app)
        self.url = f"http://127.0.0.1:{PORT}"
        self._clients: list[TestClient] = []

    def client(self, token: str | None = None) -> TestClient:
        """A client (the first one runs the app's lifespan until :meth:`close`)."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        c = TestClient(self.app, base_url=self.url, headers=headers, follow_redirects=False)
        if not self._clients:
            c.__enter__()
        self._clients.append(c)
        return c

    def close(self) -> None:
        """End the lifespan (pending captured events are delivered)."""
        if self._clients:
            self._clients[0].__exit__(None, None, None)
            self._clients.clear()

    def __enter__(self) -> InProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Api:
    """A client bound to one daemon and one token."""

    def __init__(self, daemon: InProcess, token: str | None) -> None:
        self.daemon = daemon
        self.http = daemon.client(token)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.http, name)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "mem"


@pytest.fixture
def store(root: Path, clock: ManualClock) -> MemoryStore:
    clock.set("2026-03-01T12:00:00Z")  # the wire refuses events dated over a day ahead
    return MemoryStore(root, derivation_version="1", clock=clock)


def start(root: Path, store: MemoryStore | None = None, **over: Any) -> InProcess:
    return InProcess(root, store, **over)


@pytest.fixture
def daemon(root: Path, store: MemoryStore) -> Iterator[InProcess]:
    d = start(root, store, max_body_bytes=64 * 1024, max_import_bytes=256 * 1024)
    yield d
    d.close()


@pytest.fixture
def token(daemon: InProcess, root: Path) -> str:
    tok = DaemonFiles(root).token_for("default")
    assert tok is not None
    return tok


@pytest.fixture
def api(daemon: InProcess, token: str) -> Api:
    return Api(daemon, token)


@pytest.fixture
def anon(daemon: InProcess) -> Api:
    return Api(daemon, None)


def assert_problem(r: httpx.Response, status: int, field: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith(PROBLEM)
    body: dict[str, Any] = r.json()
    assert {"type", "title", "status", "detail"} <= set(body)
    assert body["status"] == status
    assert body["detail"]
    if field is not None:
        assert body.get("field") == field, body
    return body


# ------------------------------------------------------------------------------------------
# Authentication
# ------------------------------------------------------------------------------------------
ENDPOINTS: list[tuple[str, str, Any]] = [
    ("GET", "/openapi.json", None),
    ("GET", "/api/v1/memory", None),
    ("POST", "/api/v1/events", wire()),
    ("GET", "/api/v1/prompt", None),
    ("POST", "/api/v1/prompt", {"host_prompt": "## Active skill\n"}),
    ("DELETE", "/api/v1/preferences/color/neon_palette", None),
    ("GET", "/api/v1/explain/color/neon_palette", None),
    ("GET", "/api/v1/settings", None),
    ("POST", "/api/v1/settings", {"paused": True}),
    ("POST", "/api/v1/reset", {"confirm": True}),
    ("GET", "/api/v1/check", None),
    ("POST", "/api/v1/repair", {"confirm": True}),
    ("GET", "/api/v1/export", None),
    ("POST", "/api/v1/import", {"format": "creative-memory-archive"}),
    ("POST", "/logout", None),
]


def test_healthz_needs_no_token(anon: Api) -> None:
    r = anon.get("/healthz")
    assert r.status_code == 200
    assert r.json()["status"] == "ok"


@pytest.mark.parametrize(("method", "path", "body"), ENDPOINTS)
def test_every_endpoint_needs_a_token(
    anon: Api, root: Path, store: MemoryStore, method: str, path: str, body: Any
) -> None:
    store.ingest_signal(
        "default",
        {
            "signal_type": "thumbs_down",
            "polarity": "negative",
            "pattern": "neon_palette",
            "preference_type": "color",
            "scope": "global",
        },
    )
    before = store.events("default")
    for headers in (
        {},
        {"Authorization": "Bearer wrong-token"},
        {"Authorization": "Basic dXNlcjpwdw=="},
        {"Authorization": "Bearer"},
    ):
        r = anon.request(method, path, json=body, headers=headers)
        assert_problem(r, 401)
        assert r.headers["www-authenticate"].startswith("Bearer")
    assert store.events("default") == before
    assert store.get_settings("default").paused is False


def test_openapi_document_is_published_and_covers_the_surface(api: Api) -> None:
    r = api.get("/openapi.json")
    assert r.status_code == 200
    doc = r.json()
    assert doc == json.loads(json.dumps(openapi_document()))
    assert doc["openapi"].startswith("3.")
    paths = doc["paths"]
    for p in (
        "/healthz",
        "/openapi.json",
        "/api/v1/memory",
        "/api/v1/events",
        "/api/v1/prompt",
        "/api/v1/preferences/{preference_type}/{pattern}",
        "/api/v1/explain/{preference_type}/{pattern}",
        "/api/v1/settings",
        "/api/v1/reset",
        "/api/v1/check",
        "/api/v1/repair",
        "/api/v1/export",
        "/api/v1/import",
    ):
        assert p in paths
    assert paths["/healthz"]["get"]["security"] == []


def test_token_file_is_private_and_created_at_first_start(tmp_path: Path) -> None:
    root = tmp_path / "fresh"
    with start(root):
        files = DaemonFiles(root)
        assert stat.S_IMODE(files.tokens_path.stat().st_mode) == 0o600
        assert stat.S_IMODE(files.dir.stat().st_mode) == 0o700
        tokens = files.read_tokens()
        assert list(tokens.values()) == ["default"]
        tok = next(iter(tokens))
        assert len(tok) >= 40


def test_threaded_daemon_serves_on_a_real_socket(root: Path, store: MemoryStore) -> None:
    """uvicorn on 127.0.0.1:0: a round trip, a chunked body over the limit, and a graceful
    stop that delivers the pending coalesced edit."""
    config = DaemonConfig(root=root, port=0, tick_seconds=0.05, max_body_bytes=64 * 1024)
    with ThreadedDaemon(config, store=store) as d:
        assert d.config.port != 0 and d.url.startswith("http://127.0.0.1:")
        tok = DaemonFiles(root).token_for("default")
        with httpx.Client(base_url=d.url, headers={"Authorization": f"Bearer {tok}"}) as c:
            r = c.get("/healthz")
            assert r.status_code == 200 and r.headers["x-frame-options"] == "DENY"

            def chunks() -> Iterator[bytes]:
                yield b'{"pad": "'
                for _ in range(100):
                    yield b"x" * 1024
                yield b'"}'

            r = c.post("/api/v1/settings", content=chunks(),
                       headers={"Content-Type": "application/json"})  # fmt: skip
            assert "content-length" not in r.request.headers
            assert_problem(r, 413, "body")
            edit = wire("artifact_edited_and_saved", artifact_meta=signals("airy", "layout"))
            assert c.post("/api/v1/events", json=edit).json()["accepted"] == 1
            assert store.events("default") == []  # pending in its 30 s window
    assert [type(e).__name__ for e in store.events("default")] == ["SignalEvent"]


def test_first_start_writes_the_token(tmp_path: Path) -> None:
    root = tmp_path / "first"
    created = ensure_first_start(DaemonConfig(root=root))
    assert created == str(root / ".daemon" / "tokens.json")
    assert ensure_first_start(DaemonConfig(root=root)) is None  # second start: kept
    assert list(DaemonFiles(root).read_tokens().values()) == ["default"]


def test_rotated_token_applies_to_a_running_daemon(api: Api, root: Path, token: str) -> None:
    assert api.get("/api/v1/settings").status_code == 200
    new = DaemonFiles(root).token_for("default", rotate=True)
    assert new and new != token
    assert_problem(api.get("/api/v1/settings"), 401)
    r = api.get("/api/v1/settings", headers={"Authorization": f"Bearer {new}"})
    assert r.status_code == 200


def test_single_user_mode_accepts_only_its_users_token(api: Api, root: Path) -> None:
    bob = DaemonFiles(root).token_for("bob")
    r = api.get("/api/v1/memory", headers={"Authorization": f"Bearer {bob}"})
    assert_problem(r, 401)


# ------------------------------------------------------------------------------------------
# Multi-user isolation
# ------------------------------------------------------------------------------------------
@pytest.fixture
def multi(root: Path, store: MemoryStore) -> Iterator[tuple[Api, Api]]:
    d = start(root, store, multi_user=True)
    files = DaemonFiles(root)
    alice, bob = Api(d, files.token_for("alice")), Api(d, files.token_for("bob"))
    yield alice, bob
    d.close()


def test_multi_user_requests_act_for_the_tokens_user_only(
    multi: tuple[Api, Api], store: MemoryStore
) -> None:
    alice, bob = multi
    r = alice.post(
        "/api/v1/events",
        json=[wire(user_id="alice"), wire(artifact_id="a2", user_id="alice"), wire()],
    )
    assert r.status_code == 200 and r.json()["accepted"] == 2
    assert "not the acting user" in r.json()["results"][2]["reason"]  # "default" is not alice
    assert len(store.events("alice")) == 2
    # bob sees nothing of alice's
    mem = bob.get("/api/v1/memory").json()
    assert mem["user_id"] == "bob" and mem["preferences"] == []
    assert bob.get("/api/v1/memory", params={"user_id": "alice"}).json()["preferences"] == []
    assert bob.get("/api/v1/prompt", params={"variant": "legacy"}).text == ""
    assert json.loads(bob.get("/api/v1/export").content)["events"] == []
    # bob can neither explain nor forget alice's records
    assert_problem(bob.get("/api/v1/explain/color/neon_palette"), 404, "pattern")
    r = bob.delete("/api/v1/preferences/color/neon_palette")  # nothing of bob's to forget
    assert r.status_code == 200 and r.json()["events_removed"] == 0
    assert len(store.events("alice")) == 2
    # nor write into alice's memory: that event is rejected, the rest goes in
    r = bob.post("/api/v1/events", json=wire(user_id="alice"))
    assert r.status_code == 200 and r.json()["rejected"] == 1
    assert "user_id" in r.json()["results"][0]["reason"]
    r = bob.post("/api/v1/events", json=[wire(user_id="bob"), wire(user_id="alice")])
    assert r.status_code == 200 and (r.json()["accepted"], r.json()["rejected"]) == (1, 1)
    assert [x["where"] for x in r.json()["results"]] == ["events[0]", "events[1]"]
    assert len(store.events("alice")) == 2
    assert len(store.events("bob")) == 1
    # bob's reset and settings touch only bob
    assert bob.post("/api/v1/reset", json={"confirm": True}).status_code == 200
    assert bob.post("/api/v1/settings", json={"memory_enabled": False}).status_code == 200
    assert len(store.events("alice")) == 2
    assert store.get_settings("alice").memory_enabled is True
    # alice's view is intact
    assert [p["pattern"] for p in alice.get("/api/v1/memory").json()["preferences"]] == [
        "neon_palette"
    ]


def test_events_for_another_user_or_without_one_are_rejected(api: Api, store: MemoryStore) -> None:
    ev = wire()
    del ev["user_id"]
    r = api.post("/api/v1/events", json=[wire(user_id="mallory"), ev, wire(user_id=None)])
    assert r.status_code == 200
    body = r.json()
    assert (body["accepted"], body["rejected"]) == (0, 3)
    assert all("user_id" in x["reason"] for x in body["results"])
    assert store.events("mallory") == []
    assert store.events("default") == []


def test_one_unknown_event_kind_rejects_only_that_event(api: Api, store: MemoryStore) -> None:
    batch = [wire("on_thumbs_rated"), wire(), {"event": 7, "user_id": "default"}, [1]]
    r = api.post("/api/v1/events", json=batch)
    assert r.status_code == 200
    body = r.json()
    assert (body["accepted"], body["rejected"]) == (1, 3)
    results = body["results"]
    assert [x["status"] for x in results] == ["rejected", "accepted", "rejected", "rejected"]
    assert "event" in results[0]["reason"] and "event" in results[2]["reason"]
    assert results[3]["reason"] == "not a JSON object"
    assert len(store.events("default")) == 1


def test_importing_another_users_archive_lands_in_my_memory_only(
    multi: tuple[Api, Api], store: MemoryStore
) -> None:
    alice, bob = multi
    alice.post("/api/v1/events", json=wire(user_id="alice"))
    archive = alice.get("/api/v1/export").content
    r = bob.post("/api/v1/import", content=archive, headers={"Content-Type": "application/json"})
    assert r.status_code == 200 and r.json()["events_added"] == 1
    assert r.json()["archive_user_id"] == "alice" and r.json()["user_id"] == "bob"
    assert len(store.events("bob")) == 1
    assert len(store.events("alice")) == 1


# ------------------------------------------------------------------------------------------
# Body limits
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/api/v1/events", "/api/v1/settings", "/api/v1/reset"])
def test_oversized_json_bodies_get_413(api: Api, path: str, store: MemoryStore) -> None:
    big = json.dumps({**wire(), "padding": "x" * (70 * 1024)}).encode()
    r = api.post(path, content=big, headers={"Content-Type": "application/json"})
    assert_problem(r, 413, "body")
    assert store.events("default") == []


def test_oversized_chunked_body_gets_413(api: Api, store: MemoryStore) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'[{"event": "thumbs_rated", "pad": "'
        for _ in range(100):
            yield b"x" * 1024
        yield b'"}]'

    r = api.post("/api/v1/events", content=chunks(), headers={"Content-Type": "application/json"})
    assert "content-length" not in r.request.headers
    assert_problem(r, 413)
    assert store.events("default") == []


def test_oversized_import_gets_413(api: Api) -> None:
    r = api.post(
        "/api/v1/import",
        content=b"{" + b" " * (300 * 1024) + b"}",
        headers={"Content-Type": "application/json"},
    )
    assert_problem(r, 413)


def test_too_many_events_in_one_batch(api: Api) -> None:
    r = api.post("/api/v1/events", json=[{"event": "thumbs_rated"}] * 1001)
    assert_problem(r, 422, "body")


# ------------------------------------------------------------------------------------------
# Bad input → 4xx problem documents naming the field
# ------------------------------------------------------------------------------------------
BAD: list[tuple[str, str, dict[str, Any], int, str | None]] = [
    ("POST", "/api/v1/events", {"content": b"{nope"}, 400, "body"),
    ("POST", "/api/v1/events", {"content": b""}, 400, "body"),
    ("POST", "/api/v1/events", {"content": b"[" * 5000 + b"]" * 5000}, 422, "body"),
    ("POST", "/api/v1/events", {"content": b"[" * 100 + b"]" * 100}, 422, "body"),
    ("POST", "/api/v1/events", {"content": b"\xff\xfe"}, 400, "body"),
    ("POST", "/api/v1/events", {"json": 42}, 422, "body"),
    (
        "POST",
        "/api/v1/events",
        {"content": b"{}", "headers": {"Content-Type": "text/plain"}},
        415,
        "content-type",
    ),
    (
        "POST",
        "/api/v1/events",
        {"content": b"{}", "headers": {"Content-Type": "application/json; charset=latin-1"}},
        415,
        "content-type",
    ),
    # a key named twice in one object: which is meant is a guess (the last would erase)
    (
        "POST",
        "/api/v1/reset",
        {"content": b'{"confirm": false, "confirm": true, "scope": "all"}'},
        422,
        "confirm",
    ),
    (
        "POST",
        "/api/v1/settings",
        {"content": b'{"project_ignore_global": {"p": true, "p": false}}'},
        422,
        "p",
    ),
    ("GET", "/api/v1/memory", {"params": {"project_id": "../etc"}}, 422, "project_id"),
    ("GET", "/api/v1/memory", {"params": {"project_id": "__proto__"}}, 422, "project_id"),
    ("GET", "/api/v1/memory", {"params": [("project_id", "a"), ("project_id", "b")]}, 422, None),
    ("GET", "/api/v1/prompt", {"params": {"variant": "poem"}}, 422, "variant"),
    ("GET", "/api/v1/prompt", {"params": {"format": "xml"}}, 422, "format"),
    ("GET", "/api/v1/prompt", {"params": {"format": ""}}, 422, "format"),
    ("GET", "/api/v1/prompt", {"params": {"variant": ""}}, 422, "variant"),  # not the default
    ("GET", "/api/v1/prompt", {"params": {"project_id": "a b"}}, 422, "project_id"),
    ("POST", "/api/v1/prompt", {"content": b""}, 400, "body"),
    ("POST", "/api/v1/prompt", {"content": b"{"}, 400, "body"),
    ("POST", "/api/v1/prompt", {"json": "a prompt"}, 422, "body"),
    ("POST", "/api/v1/prompt", {"json": {}}, 422, "host_prompt"),
    ("POST", "/api/v1/prompt", {"json": {"host_prompt": ["x"]}}, 422, "host_prompt"),
    ("POST", "/api/v1/prompt", {"json": {"host_prompt": "", "extra": 1}}, 422, "extra"),
    (
        "POST",
        "/api/v1/prompt",
        {"json": {"host_prompt": "", "project_id": "a b"}},
        422,
        "project_id",
    ),
    ("POST", "/api/v1/prompt", {"json": {"host_prompt": "", "project_id": 7}}, 422, "project_id"),
    ("POST", "/api/v1/prompt", {"json": {"host_prompt": "", "variant": "legacy"}}, 422, "variant"),
    ("POST", "/api/v1/prompt", {"json": {"host_prompt": "", "variant": "poem"}}, 422, "variant"),
    ("POST", "/api/v1/prompt", {"json": {"host_prompt": "", "format": "xml"}}, 422, "format"),
    (
        "POST",
        "/api/v1/prompt",
        {"content": b'{"host_prompt": ""}', "headers": {"Content-Type": "text/markdown"}},
        415,
        "content-type",
    ),
    ("DELETE", "/api/v1/preferences/color", {}, 404, None),
    ("DELETE", "/api/v1/preferences/color/", {}, 422, "pattern"),
    ("DELETE", "/api/v1/preferences/color/x/y", {}, 404, None),
    ("DELETE", "/api/v1/preferences/color/%FF", {}, 400, "pattern"),
    ("DELETE", "/api/v1/preferences/color/x", {"params": {"project_id": "!"}}, 422, "project_id"),
    ("GET", "/api/v1/explain/%20/x", {"params": {"project_id": "p-1"}}, 404, "pattern"),
    # a percent-encoded line break reaches the route, which names the field (not "no route")
    ("GET", "/api/v1/explain/color/x%0Ay", {}, 404, "pattern"),
    ("GET", "/api/v1/timeline/color/x%0Ay", {}, 404, "pattern"),
    ("GET", "/api/v1/explain/col%0Aor/x", {}, 404, "pattern"),
    ("POST", "/api/v1/settings", {"json": []}, 422, "body"),
    ("POST", "/api/v1/settings", {"json": {"enabled": True}}, 422, "enabled"),
    ("POST", "/api/v1/settings", {"json": {"memory_enabled": "yes"}}, 422, "memory_enabled"),
    ("POST", "/api/v1/settings", {"json": {"paused_until": "tomorrow"}}, 422, "paused_until"),
    ("POST", "/api/v1/settings", {"json": {"paused_until": 5}}, 422, "paused_until"),
    ("POST", "/api/v1/settings", {"json": {"paused_until": "2001-01-01"}}, 422, "paused_until"),
    (
        "POST",
        "/api/v1/settings",
        {"json": {"paused": False, "paused_until": "2030-01-01"}},
        422,
        "paused_until",
    ),
    (
        "POST",
        "/api/v1/settings",
        {"json": {"project_ignore_global": ["p1"]}},
        422,
        "project_ignore_global",
    ),
    (
        "POST",
        "/api/v1/settings",
        {"json": {"project_ignore_global": {"p 1": True}}},
        422,
        "project_ignore_global.p 1",
    ),
    (
        "POST",
        "/api/v1/settings",
        {"json": {"project_ignore_global": {"p1": "on"}}},
        422,
        "project_ignore_global",
    ),
    ("POST", "/api/v1/settings", {"json": {"diagnostics_feed": 1}}, 422, "diagnostics_feed"),
    # a number too large for a float is valid JSON: the key holding it is named
    ("POST", "/api/v1/settings", {"content": b'{"memory_enabled": 1e400}'}, 422, "memory_enabled"),
    ("POST", "/api/v1/reset", {"json": {}}, 422, "confirm"),
    ("POST", "/api/v1/reset", {"json": {"confirm": "yes"}}, 422, "confirm"),
    ("POST", "/api/v1/reset", {"json": {"confirm": True, "scope": "mine"}}, 422, "scope"),
    (
        "POST",
        "/api/v1/reset",
        {"json": {"confirm": True, "scope": "project:__proto__"}},
        422,
        "scope",  # the key the client sent, not the project id inside it
    ),
    ("POST", "/api/v1/reset", {"json": {"confirm": True, "scope": "project:a b"}}, 422, "scope"),
    ("POST", "/api/v1/reset", {"json": {"confirm": True, "scope": "project:"}}, 422, "scope"),
    ("POST", "/api/v1/reset", {"json": {"confirm": True, "extra": 1}}, 422, "extra"),
    ("POST", "/api/v1/import", {"content": b""}, 422, "archive"),
    ("POST", "/api/v1/import", {"content": b"not json"}, 422, "archive"),
    ("POST", "/api/v1/import", {"json": {"format": "zip"}}, 422, "archive"),
    ("POST", "/api/v1/import", {"json": {}, "params": {"mode": "wipe"}}, 422, "mode"),
    ("POST", "/api/v1/import", {"json": {}, "params": {"mode": ""}}, 422, "mode"),
    ("POST", "/api/v1/import", {"content": b"[" * 1000 + b"]" * 1000}, 422, "archive"),
    ("GET", "/api/v1/nothing-here", {}, 404, None),
    ("PUT", "/api/v1/settings", {"json": {}}, 405, None),
    ("GET", "/static/secret.txt", {}, 404, None),
]


@pytest.mark.parametrize(("method", "path", "kwargs", "status", "field"), BAD)
def test_bad_input_gets_a_problem_document(
    api: Api,
    store: MemoryStore,
    method: str,
    path: str,
    kwargs: dict[str, Any],
    status: int,
    field: str | None,
) -> None:
    r = api.request(method, path, **kwargs)
    assert_problem(r, status, field)
    assert store.events("default") == []


@pytest.mark.parametrize(
    "ctype", ["application/json; charset=utf-8", 'application/json;charset="UTF8"', "text/x+json"]
)
def test_json_declared_in_utf_8_is_read(api: Api, ctype: str) -> None:
    r = api.post("/api/v1/settings", content=b'{"diagnostics_feed": true}',
                 headers={"Content-Type": ctype})  # fmt: skip
    assert r.status_code == 200 and r.json()["diagnostics_feed"] is True


JSON_ROUTES: list[tuple[str, str]] = [
    ("POST", "/api/v1/events"),
    ("POST", "/api/v1/settings"),
    ("POST", "/api/v1/reset"),
    ("POST", "/api/v1/derivation"),
    ("POST", "/api/v1/prompt"),
]


@pytest.mark.parametrize("depth", [65, 1000, 30_000])
@pytest.mark.parametrize(("method", "path"), [*JSON_ROUTES, ("POST", "/api/v1/import")])
def test_json_nested_too_deep_is_422_however_deep(
    api: Api, store: MemoryStore, caplog: pytest.LogCaptureFixture,
    method: str, path: str, depth: int,
) -> None:  # fmt: skip
    before = store.get_settings("default")
    body = b"[" * depth + b"]" * depth
    r = api.request(method, path, content=body, headers={"Content-Type": "application/json"})
    archive = path.endswith("import")  # an archive may nest deeper (MAX_ARCHIVE_DEPTH)
    detail = assert_problem(r, 422, "archive" if archive else "body")["detail"]
    assert "nested deeper than" in detail or (archive and depth <= MAX_ARCHIVE_DEPTH)
    assert store.events("default") == [] and store.get_settings("default") == before
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR]


def test_json_depth_counts_levels_not_brackets_in_strings(api: Api) -> None:
    deepest = b"[" * 64 + b"]" * 64  # 64 levels: allowed, one event that is not an object
    r = api.post("/api/v1/events", content=deepest, headers={"Content-Type": "application/json"})
    assert r.status_code == 200 and r.json()["rejected"] == 1, r.text
    ev = wire(artifact_id="[" * 200, session_id="{" * 200)  # brackets inside strings
    r = api.post("/api/v1/events", json=ev)
    assert r.status_code == 200, r.text
    r = api.post("/api/v1/settings", json={"paused_until": "[" * 100, "paused": True})
    assert_problem(r, 422, "paused_until")


def test_a_number_out_of_range_rejects_only_its_event(api: Api, store: MemoryStore) -> None:
    """``1e400`` is valid JSON: the event holding it is judged on its own (as the CLI does,
    reading it as infinity), and the others are ingested (docs/daemon.md, "Ingestion")."""
    good = json.dumps(wire(artifact_id="good", rating="up"))
    bad = json.dumps(wire(artifact_id="bad")).replace('"2026-03-01T10:00:00Z"', "1e400")
    meta = json.dumps(wire(artifact_id="meta", artifact_meta={**signals("teal"), "w": "BIG"}))
    meta = meta.replace('"BIG"', "-1e400")  # inside the metadata: judged like any value there
    body = f"[{good}, {bad}, {meta}]".encode()
    r = api.post("/api/v1/events", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    doc = r.json()
    rows = {row["where"]: row for row in doc["results"]}
    assert rows["events[0]"]["status"] == "accepted"
    assert rows["events[1]"]["status"] == "rejected"
    assert "timestamp" in rows["events[1]"]["reason"] and "Infinity" in rows["events[1]"]["reason"]
    assert rows["events[2]"]["status"] == "accepted"  # the number is in no field it reads
    assert (doc["accepted"], doc["rejected"]) == (2, 1)


def test_import_rejects_a_tampered_archive(api: Api, store: MemoryStore) -> None:
    api.post("/api/v1/events", json=wire())
    archive = json.loads(api.get("/api/v1/export").content)
    archive["events"][0]["pattern"] = "tampered"
    r = api.post("/api/v1/import", json=archive, params={"mode": "replace"})
    assert_problem(r, 422, "checksum")
    assert [e.pattern for e in store.events("default")] == ["neon_palette"]  # type: ignore[union-attr]


# ------------------------------------------------------------------------------------------
# Endpoints doing their job
# ------------------------------------------------------------------------------------------
def test_ingest_single_and_batch_with_a_report(api: Api, store: MemoryStore) -> None:
    r = api.post("/api/v1/events", json=wire())
    body = r.json()
    assert r.status_code == 200
    assert (body["accepted"], body["coalesced"], body["rejected"]) == (1, 0, 0)
    assert body["learning"] is True
    r = api.post(
        "/api/v1/events",
        json=[
            wire("explicit_tag_applied", artifact_id="a2", artifact_meta=signals("airy_spacing")),
            wire("explicit_tag_applied", artifact_id="a3", tag_text="make it pop"),
            wire("generation_accepted", artifact_id="a4", trigger="tab_promotion"),
            wire(artifact_id="a5", rating="down"),
            wire(artifact_id="a5", rating="down"),  # double click: debounced
        ],
    )
    body = r.json()
    assert (body["accepted"], body["coalesced"], body["rejected"]) == (2, 1, 2)
    statuses = [(x["where"], x["status"]) for x in body["results"]]
    assert statuses == [("events[0]", "accepted"), ("events[1]", "rejected"),
                        ("events[2]", "rejected"), ("events[3]", "accepted"),
                        ("events[4]", "coalesced")]  # fmt: skip
    assert "unrecognized tag" in body["results"][1]["reason"]
    assert "tab_promotion" in body["results"][2]["reason"]
    patterns = [p["pattern"] for p in api.get("/api/v1/memory").json()["preferences"]]
    assert sorted(patterns) == ["airy_spacing", "neon_palette"]
    assert len(store.events("default")) == 3


def test_edit_saves_are_coalesced_then_flushed(
    api: Api, store: MemoryStore, clock: ManualClock
) -> None:
    edit = wire("artifact_edited_and_saved", artifact_meta=signals("airy_spacing", "layout"))
    r1 = api.post("/api/v1/events", json={**edit, "diff": {"gap": "8px"}}).json()
    r2 = api.post("/api/v1/events", json={**edit, "diff": {"gap": "12px"}}).json()
    assert (r1["accepted"], r2["coalesced"]) == (1, 1)
    assert store.events("default") == []  # still in its 30 s window
    clock.advance_days(31 / 86400)
    deadline = time.monotonic() + 5
    while not store.events("default") and time.monotonic() < deadline:
        time.sleep(0.05)  # the daemon's ticker flushes the expired window
    kinds = [type(e).__name__ for e in store.events("default")]
    assert kinds.count("SignalEvent") == 1 and "RefinementEvent" in kinds


def test_events_while_paused_or_disabled_are_not_stored(api: Api, store: MemoryStore) -> None:
    assert api.post("/api/v1/settings", json={"paused": True}).json()["paused_now"] is True
    body = api.post("/api/v1/events", json=wire()).json()
    assert body["accepted"] == 1 and body["learning"] is False
    assert store.events("default") == []
    api.post("/api/v1/settings", json={"paused": False, "memory_enabled": False})
    assert api.post("/api/v1/events", json=wire()).json()["learning"] is False
    assert store.events("default") == []


def _teach(api: Api) -> None:
    events = []
    for i in range(3):
        events.append(
            wire("explicit_tag_applied", artifact_id=f"g{i}", artifact_meta=signals("serif_type"))
        )
        events.append(wire(artifact_id=f"n{i}"))
        events.append(
            wire(
                "explicit_tag_applied",
                artifact_id=f"p{i}",
                project_id="festival",
                tag_text="save this direction",
                artifact_meta=signals("neon_palette"),
            )
        )
    r = api.post("/api/v1/events", json=events)
    assert r.json()["accepted"] == 9, r.json()


def test_memory_prompt_and_explain(api: Api) -> None:
    _teach(api)
    mem = api.get("/api/v1/memory", params={"project_id": "festival"}).json()
    assert mem["projects"] == ["festival"]
    assert mem["project_id"] == "festival"
    rec = mem["preferences"][0]
    for key in ("signal_strength", "confidence", "polarity_status", "sources", "scope",
                "derivation_version", "source_event_count", "last_derived_event_seq"):  # fmt: skip
        assert key in rec
    assert [r["pattern"] for r in mem["retrieval"]["project_overrides"]] == ["neon_palette"]

    gen = api.get("/api/v1/prompt")
    assert gen.headers["content-type"].startswith("text/plain")
    assert gen.text.startswith("## Creative memory (preferences from generation feedback)")
    assert "serif_type" in gen.text
    crit = api.get("/api/v1/prompt", params={"variant": "critique"}).text
    assert crit.startswith("## Creative memory (critique")
    legacy = api.get("/api/v1/prompt", params={"variant": "legacy", "project_id": "festival"})
    assert legacy.text.startswith("[MEMORY CONTEXT]")
    assert "Project override: neon_palette active (festival)" in legacy.text
    js = api.get("/api/v1/prompt", params={"format": "json", "variant": "legacy"}).json()
    assert js["variant"] == "legacy" and js["block"].startswith("[MEMORY CONTEXT]")
    assert js["diagnostics_feed"] == ""
    api.post("/api/v1/settings", json={"diagnostics_feed": True})
    js = api.get("/api/v1/prompt", params={"format": "json", "project_id": "festival"}).json()
    assert js["diagnostics_feed"] != ""

    exp = api.get("/api/v1/explain/color/neon_palette", params={"project_id": "festival"})
    assert exp.status_code == 200
    steps = exp.json()["steps"]
    assert len(steps) == 3 and all(s["kind"] == "signal" for s in steps)
    assert exp.json()["records"][0]["scope"] == "project:festival"
    assert_problem(api.get("/api/v1/explain/color/never_seen"), 404, "pattern")

    # the evidence timeline: the same events, from the log, without the derivation
    line = api.get("/api/v1/timeline/color/neon_palette", params={"project_id": "festival"})
    assert line.status_code == 200
    events = line.json()["events"]
    assert [e["seq"] for e in events] == [s["seq"] for s in steps]
    assert all(e["kind"] == "signal" and e["polarity"] for e in events)
    assert (
        api.get(
            "/api/v1/timeline/color/neon_palette",
            params={"project_id": "festival", "at_seq": events[0]["seq"]},
        ).json()["events"]
        == events[:1]
    )
    assert_problem(api.get("/api/v1/timeline/color/never_seen"), 404, "pattern")
    assert_problem(api.get("/api/v1/timeline/color/neon_palette", params={"at_seq": -1}), 422,
                   "at_seq")  # fmt: skip


HOST = (
    "# Identity and workflow charter (background)\n\nYou are a designer.\n\n"
    "## Personal memory (auto-extracted from past chats)\n\nFreelancer.\n\n"
    "## Active design system \u2014 Acme\n\n# Acme\n\n## Colors\n\n"
    "```css\n## Project metadata\n```\n\n## Project metadata\n- **kind**: prototype\n"
)


def test_prompt_composed_into_a_host_prompt(api: Api) -> None:
    r = api.post("/api/v1/prompt", json={"host_prompt": HOST})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert r.text == HOST  # nothing injectable yet: unchanged
    _teach(api)
    at = HOST.index("## Active design system")
    for variant in ("generation", "critique"):
        for project in (None, "", "festival"):
            params = {"variant": variant, **({"project_id": project} if project else {})}
            block = api.get("/api/v1/prompt", params=params).text
            assert block.startswith("## Creative memory")
            body = {"host_prompt": HOST, "variant": variant, "project_id": project}
            r = api.post("/api/v1/prompt", json=body)
            assert r.status_code == 200, r.text
            assert r.content == (HOST[:at] + block + "\n\n" + HOST[at:]).encode("utf-8")
            again = api.post("/api/v1/prompt", json={**body, "host_prompt": r.text})
            assert again.text == r.text
            js = api.post("/api/v1/prompt", json={**body, "format": "json"}).json()
            assert js["prompt"] == r.text and js["block"] == block
            assert js["variant"] == variant and js["project_id"] == (project or None)
    assert api.post("/api/v1/prompt", json={"host_prompt": ""}).text.endswith("\n")
    # memory off (or forgotten, or nothing injectable): a block composed earlier goes too
    composed = api.post("/api/v1/prompt", json={"host_prompt": HOST}).text
    assert "## Creative memory" in composed
    api.post("/api/v1/settings", json={"memory_enabled": False})
    assert api.post("/api/v1/prompt", json={"host_prompt": composed}).text == HOST


def test_project_toggle_makes_retrieval_ignore_global(api: Api) -> None:
    _teach(api)

    def legacy() -> str:
        r = api.get("/api/v1/prompt", params={"variant": "legacy", "project_id": "festival"})
        text: str = r.text
        return text

    assert "serif_type" in legacy()
    r = api.post("/api/v1/settings", json={"project_ignore_global": {"festival": True}})
    assert r.json()["disabled_projects"] == ["festival"]
    assert "serif_type" not in legacy() and "neon_palette" in legacy()
    api.post("/api/v1/settings", json={"project_ignore_global": {"festival": False}})
    assert "serif_type" in legacy()


def test_settings_round_trip(api: Api) -> None:
    s = api.get("/api/v1/settings").json()
    assert s == {
        "memory_enabled": True,
        "paused": False,
        "paused_until": None,
        "disabled_projects": [],
        "diagnostics_feed": False,
        "paused_now": False,
    }
    s = api.post("/api/v1/settings", json={"paused": True, "paused_until": "2030-01-01"}).json()
    assert s["paused"] and s["paused_now"] and s["paused_until"] == "2030-01-01T00:00:00.000Z"
    s = api.post("/api/v1/settings", json={"paused": False}).json()
    assert not s["paused"] and s["paused_until"] is None
    s = api.post("/api/v1/settings", json={"memory_enabled": False}).json()
    assert s["memory_enabled"] is False
    assert api.get("/api/v1/prompt").text == ""
    assert api.post("/api/v1/settings", json={}).json() == api.get("/api/v1/settings").json()


def test_forget_erases_for_real(api: Api, store: MemoryStore, root: Path) -> None:
    _teach(api)
    r = api.delete("/api/v1/preferences/color/neon_palette")
    assert r.status_code == 200 and r.json()["events_removed"] == 3
    # the project's neon_palette is another record: still there
    mem = api.get("/api/v1/memory").json()
    neon = [p["scope"] for p in mem["preferences"] if p["pattern"] == "neon_palette"]
    assert neon == ["project:festival"]
    r = api.delete("/api/v1/preferences/color/neon_palette", params={"project_id": "festival"})
    assert r.json()["events_removed"] == 3
    again = api.delete("/api/v1/preferences/color/neon_palette")  # erasure is idempotent
    assert again.status_code == 200 and again.json()["events_removed"] == 0
    r = api.delete("/api/v1/preferences/color/neon_palette", params={"project_id": "nowhere"})
    assert r.status_code == 200 and r.json()["events_removed"] == 0
    user_dir = root / "default"
    for f in user_dir.rglob("*"):
        if f.is_file():
            assert b"neon_palette" not in f.read_bytes(), f


def test_forget_and_explain_patterns_with_slashes(api: Api) -> None:
    api.post(
        "/api/v1/events",
        json=wire(artifact_meta=signals("50/50 split", "layout/grid")),
    )
    path = "/api/v1/explain/layout%2Fgrid/50%2F50%20split"
    assert api.get(path).json()["pattern"] == "50/50 split"
    r = api.delete("/api/v1/preferences/layout%2Fgrid/50%2F50%20split")
    assert r.status_code == 200
    assert r.json()["preference_type"] == "layout/grid"


def test_reset_scopes(api: Api, store: MemoryStore) -> None:
    _teach(api)
    r = api.post("/api/v1/reset", json={"confirm": True, "scope": "project:festival"})
    assert r.status_code == 200 and r.json()["scope"] == "project:festival"
    assert r.json()["events_removed"] == 3
    assert r.json()["events_remaining"] == len(store.events("default"))
    r = api.post("/api/v1/reset", json={"confirm": True, "scope": "project:nowhere"})
    assert r.status_code == 200 and r.json()["events_removed"] == 0
    scopes = {p["scope"] for p in api.get("/api/v1/memory").json()["preferences"]}
    assert scopes == {"global"}
    api.post("/api/v1/settings", json={"memory_enabled": False})
    r = api.post("/api/v1/reset", json={"confirm": True})
    assert r.json()["settings"]["memory_enabled"] is True
    assert api.get("/api/v1/memory").json()["preferences"] == []
    assert store.events("default") == []


def test_export_reset_import_round_trip(api: Api, store: MemoryStore) -> None:
    _teach(api)
    api.post("/api/v1/settings", json={"diagnostics_feed": True})
    before = store.events("default")
    ex = api.get("/api/v1/export")
    assert ex.headers["content-type"].startswith("application/json")
    assert ex.headers["content-disposition"].startswith('attachment; filename="creative-memory-')
    archive = ex.json()
    assert archive["format"] == "creative-memory-archive" and len(archive["events"]) == 9
    api.post("/api/v1/reset", json={"confirm": True})
    r = api.post("/api/v1/import", content=ex.content, params={"mode": "replace"})
    got = r.json()
    assert (got["events_added"], got["mode"], got["events_total"]) == (9, "replace", 9)
    after = store.events("default")
    # the same events, numbered on after the erased ones (a seq is never used twice)
    assert [e.seq for e in after] == [before[-1].seq + i for i in range(1, 10)]
    unnumbered = [msgspec.structs.replace(e, seq=0, h="") for e in after]
    assert unnumbered == [msgspec.structs.replace(e, seq=0, h="") for e in before]
    assert store.get_settings("default").diagnostics_feed is True
    r = api.post("/api/v1/import", content=ex.content)  # merge: nothing new
    assert (r.json()["events_added"], r.json()["mode"]) == (0, "merge")


# ------------------------------------------------------------------------------------------
# Host header, CORS, headers
# ------------------------------------------------------------------------------------------
def test_host_header_is_checked_against_dns_rebinding(api: Api, daemon: InProcess) -> None:
    port = daemon.config.port
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.1:1", "localhost"):
        r = api.get("/healthz", headers={"Host": host})
        assert_problem(r, 403, "host")
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", f"LOCALHOST:{port}"):
        assert api.get("/api/v1/settings", headers={"Host": host}).status_code == 200


def test_allowed_hosts() -> None:
    cfg = DaemonConfig(root=Path("/x"), host="0.0.0.0", port=8000, allowed_hosts=("box.lan",))
    hosts = allowed_host_headers(cfg)
    assert "box.lan:8000" in hosts and "box.lan" in hosts
    assert "0.0.0.0:8000" not in hosts and "localhost:8000" in hosts
    hosts = allowed_host_headers(replace(cfg, host="::1", allowed_hosts=()))
    assert "[::1]:8000" in hosts


def test_no_cors(api: Api) -> None:
    origin = {"Origin": "https://evil.example"}
    r = api.options("/api/v1/memory", headers={**origin, "Access-Control-Request-Method": "GET"})
    assert_problem(r, 405)
    r = api.get("/api/v1/memory", headers=origin)
    assert r.status_code == 200
    for resp in (r, api.get("/healthz", headers=origin)):
        assert not any(h.lower().startswith("access-control-") for h in resp.headers)
        assert resp.headers["x-content-type-options"] == "nosniff"
        assert resp.headers["cache-control"] == "no-store"


# ------------------------------------------------------------------------------------------
# The page: login link, session cookie, CSRF header
# ------------------------------------------------------------------------------------------
def test_login_link_sets_a_strict_httponly_cookie(
    daemon: InProcess, root: Path, token: str
) -> None:
    files = DaemonFiles(root)
    browser = daemon.client()
    r = browser.get("/")
    assert r.status_code == 401 and "creative-memory ui" in r.text
    nonce = files.create_login("default")
    # a link preview or a prefetch (HEAD) does not spend the link
    r = browser.head("/login", params={"once": nonce})
    assert r.status_code == 204 and "set-cookie" not in r.headers
    r = browser.get("/login", params={"once": nonce})
    assert r.status_code == 303 and r.headers["location"] == "/"
    cookie = r.headers["set-cookie"]
    assert f"cm_session_{daemon.config.port}=" in cookie
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    page = browser.get("/")
    assert page.status_code == 200 and "Settings → Memory" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    # the script is ES modules: the entry point and every module it imports, served as JavaScript
    assert '<script type="module" src="/static/app.js">' in page.text
    seen, todo = set(), ["app.js"]
    while todo:
        name = todo.pop()
        seen.add(name)
        r = browser.get(f"/static/{name}")
        assert r.status_code == 200, name
        assert r.headers["content-type"].startswith("text/javascript"), name
        todo += [n for n in re.findall(r'from "\./([\w-]+\.js)";', r.text) if n not in seen]
    assert len(seen) > 1
    assert browser.get("/api/v1/memory").json()["user_id"] == "default"
    # cookie writes need the CSRF header
    r = browser.post("/api/v1/settings", json={"diagnostics_feed": True})
    assert_problem(r, 403, "x-requested-with")
    r = browser.post(
        "/api/v1/settings",
        json={"diagnostics_feed": True},
        headers={"X-Requested-With": "creative-memory"},
    )
    assert r.status_code == 200 and r.json()["diagnostics_feed"] is True
    # the link works once
    other = daemon.client()
    assert_problem(other.get("/login", params={"once": nonce}), 401)
    assert_problem(other.get("/login"), 400, "once")
    r = browser.post("/logout", headers={"X-Requested-With": "creative-memory"})
    assert r.status_code == 200
    assert_problem(browser.get("/api/v1/memory"), 401)


def test_expired_login_link_is_refused(daemon: InProcess, root: Path, token: str) -> None:
    nonce = DaemonFiles(root).create_login("default", ttl_s=-1)
    browser = daemon.client()
    assert_problem(browser.get("/login", params={"once": nonce}), 401)


def test_a_bad_login_link_opened_in_a_browser_gets_the_signed_out_page(
    daemon: InProcess, root: Path, token: str
) -> None:
    nonce = DaemonFiles(root).create_login("default", ttl_s=-1)
    browser = daemon.client()
    html = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
    for params, status in (({"once": nonce}, 401), ({}, 400)):
        r = browser.get("/login", params=params, headers=html)
        assert r.status_code == status and r.headers["content-type"].startswith("text/html")
        assert "already used" in r.text and "creative-memory ui" in r.text
        assert "script-src 'self'" in r.headers["content-security-policy"]
    # an API client still gets the problem document
    assert_problem(browser.get("/login", params={"once": nonce}), 401)


def test_login_for_another_user_is_refused_in_single_user_mode(
    daemon: InProcess, root: Path, token: str
) -> None:
    nonce = DaemonFiles(root).create_login("bob")
    browser = daemon.client()
    assert_problem(browser.get("/login", params={"once": nonce}), 401)


# ------------------------------------------------------------------------------------------
# Operations: logs, alarm, no 500s under fuzzing
# ------------------------------------------------------------------------------------------
def test_slow_retrieval_warns(
    root: Path, store: MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    with start(root, store, alarm_ms=0.0) as d:
        tok = DaemonFiles(root).token_for("default")
        with caplog.at_level(logging.WARNING, logger="creative_memory.http"):
            r = d.client(tok).get("/api/v1/prompt")
            assert r.status_code == 200
    slow = [r for r in caplog.records if getattr(r, "fields", {}).get("event") == "slow_retrieval"]
    assert slow and slow[0].fields["alarm_ms"] == 0.0  # type: ignore[attr-defined]
    assert "duration_ms" in slow[0].fields  # type: ignore[attr-defined]


def test_json_log_lines() -> None:
    rec = logging.LogRecord("creative_memory.http", logging.INFO, __file__, 1, "hello", (), None)
    rec.fields = {"event": "hello", "status": 200}
    line = json.loads(JsonFormatter().format(rec))
    assert line["message"] == "hello" and line["status"] == 200 and line["level"] == "info"


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
event_like = st.fixed_dictionaries(
    {
        "event": st.sampled_from(
            [
                "thumbs_rated",
                "explicit_tag_applied",
                "generation_accepted",
                "artifact_edited_and_saved",
                "generation_abandoned",
                "revert_after_edit",
                "pairwise_comparison",
                "generation_started",
                "tab_activated",
            ]
        )
    },
    optional={
        "artifact_id": json_values,
        "session_id": json_values,
        "project_id": json_values | st.sampled_from(["p1", "__proto__", ""]),
        "timestamp": json_values | st.sampled_from(["2026-03-01T10:00:00Z", "2026-13-01", ""]),
        "artifact_meta": json_values
        | st.fixed_dictionaries(
            {
                "signals": st.lists(
                    st.dictionaries(st.sampled_from(["pattern", "preference_type"]), json_values),
                    max_size=2,
                )
            }
        ),
        "rating": json_values | st.sampled_from(["up", "down"]),
        "tag_text": json_values | st.sampled_from(["love this", "too noisy"]),
        "diff": json_values,
        "trigger": json_values,
        "chose": json_values,
        "over": json_values,
        "dimensions": json_values,
        "active": json_values,
    },
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(batch=st.lists(event_like, min_size=1, max_size=4))
def test_fuzzed_events_never_cause_a_server_error(api: Api, batch: list[dict[str, Any]]) -> None:
    r = api.post("/api/v1/events", json=batch)
    assert r.status_code < 500, r.text
    if r.status_code == 200:
        body = r.json()
        assert body["accepted"] + body["coalesced"] + body["rejected"] >= len(batch)


# ------------------------------------------------------------------------------------------
# The commands: serve (subprocess, SIGTERM flush), token, ui
# ------------------------------------------------------------------------------------------
def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OD_DATA_DIR", "MEMORY_STORAGE_ROOT")}
    env["HOME"] = str(tmp)
    env["CREATIVE_MEMORY_USER"] = "default"
    return env


def test_serve_token_ui_and_graceful_shutdown_flush(tmp_path: Path) -> None:
    from click.testing import CliRunner

    root = tmp_path / "data"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "creative_memory.cli.daemon",
            "serve",
            "--data-dir",
            str(root),
            "--port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(tmp_path),
    )
    try:
        files = DaemonFiles(root)
        deadline = time.monotonic() + 20
        while files.read_server_info() is None:
            assert proc.poll() is None, proc.stderr.read().decode()  # type: ignore[union-attr]
            assert time.monotonic() < deadline
            time.sleep(0.05)
        info = files.read_server_info()
        assert info is not None and info["pid"] == proc.pid
        url = info["url"].rstrip("/")
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"{url}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        runner = CliRunner(env={"CREATIVE_MEMORY_USER": "default"})
        res = runner.invoke(cli, ["token", "--data-dir", str(root)])
        assert res.exit_code == 0
        tok = res.output.strip()
        assert files.read_tokens() == {tok: "default"}
        res = runner.invoke(cli, ["ui", "--data-dir", str(root), "--no-browser"])
        assert res.exit_code == 0, res.output
        link = res.output.strip()
        assert link.startswith(f"{url}/login?once=")
        with httpx.Client() as browser:
            r = browser.get(link, follow_redirects=True)
            assert r.status_code == 200 and "Settings → Memory" in r.text
        # a coalesced edit-save is pending (30 s window) when the daemon is stopped
        edit = wire("artifact_edited_and_saved", artifact_meta=signals("airy_spacing", "layout"))
        r = httpx.post(
            f"{url}/api/v1/events", json=edit, headers={"Authorization": f"Bearer {tok}"}
        )
        assert r.json()["accepted"] == 1
        assert MemoryStore(root).events("default") == []
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) in (0, -signal.SIGTERM)  # uvicorn re-raises it
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = proc.stderr.read().decode()  # type: ignore[union-attr]
    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    events = {line.get("event") for line in lines}
    assert {"daemon_started", "listening", "http_request", "capture_flushed"} <= events
    assert tok not in stderr  # the token never reaches the logs
    stored = MemoryStore(root).events("default")
    assert [type(e).__name__ for e in stored] == ["SignalEvent"]
    assert files.read_server_info() is None
    res = CliRunner(env={"CREATIVE_MEMORY_USER": "default"}).invoke(
        cli, ["ui", "--data-dir", str(root), "--no-browser"]
    )
    assert res.exit_code == 1 and "no daemon is running" in res.output


def test_token_rotate_and_users(tmp_path: Path) -> None:
    from click.testing import CliRunner

    runner = CliRunner(env={"CREATIVE_MEMORY_USER": "default"})
    root = tmp_path / "d"
    a = runner.invoke(cli, ["token", "--data-dir", str(root)]).output.strip()
    assert runner.invoke(cli, ["token", "--data-dir", str(root)]).output.strip() == a
    b = runner.invoke(cli, ["token", "--data-dir", str(root), "--rotate"]).output.strip()
    assert b != a
    c = runner.invoke(cli, ["token", "--data-dir", str(root), "--user", "alice"]).output.strip()
    assert DaemonFiles(root).read_tokens() == {b: "default", c: "alice"}
    bad = runner.invoke(cli, ["token", "--data-dir", str(root), "--user", "../x"])
    assert bad.exit_code == 2 and "user_id" in bad.output


def test_resolve_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OD_DATA_DIR", raising=False)
    monkeypatch.delenv("MEMORY_STORAGE_ROOT", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    if sys.platform.startswith("linux"):
        assert resolve_data_dir(None) == tmp_path / "xdg" / "creative-memory"
    monkeypatch.setenv("MEMORY_STORAGE_ROOT", str(tmp_path / "msr"))
    assert resolve_data_dir(None) == tmp_path / "msr"
    monkeypatch.setenv("OD_DATA_DIR", str(tmp_path / "od"))
    assert resolve_data_dir(None) == tmp_path / "od" / "memory"
    assert resolve_data_dir(tmp_path / "flag") == tmp_path / "flag"


@pytest.mark.slow
def test_load_benchmark_smoke(tmp_path: Path) -> None:
    """benchmarks/load.py keeps working (a small run: zero errors, nothing missing)."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "load.py"
    proc = subprocess.run(
        [
            sys.executable,
            str(script),
            "--clients",
            "4",
            "--ingest",
            "10",
            "--retrieve",
            "10",
            "--json",
            "--data-dir",
            str(tmp_path / "data"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(tmp_path),
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert out["errors"] == 0 and out["missing_events"] == 0
    assert out["acknowledged_events"] == out["stored_signal_events"] == 4 * 10 + 2 * 5
    assert out["raw_fsync_lines_per_s"] > 0  # the reference, measured in the same run


def test_storage_errors_and_bugs_are_500_problem_documents_with_a_correlation_id(
    api: Api,
    daemon: InProcess,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from creative_memory.engine.errors import StorageError

    store = daemon.daemon.store

    def disk_full(*args: Any, **kwargs: Any) -> Any:
        raise StorageError("no space left on device")

    def bug(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a genuine bug")

    def bare_value_error(*args: Any, **kwargs: Any) -> Any:
        raise ValueError("an internal ValueError")

    for broken, secret in ((disk_full, "no space"), (bug, "a genuine bug"),
                           (bare_value_error, "an internal ValueError")):  # fmt: skip
        monkeypatch.setattr(store, "inspect", broken)
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="creative_memory.http"):
            body = assert_problem(api.get("/api/v1/memory"), 500)
        assert secret not in body["detail"]  # details stay in the log
        cid = body["correlation_id"]
        assert cid in body["detail"]
        logged = [
            r for r in caplog.records if getattr(r, "fields", {}).get("correlation_id") == cid
        ]
        assert logged and logged[0].exc_info and secret in str(logged[0].exc_info[1])
    assert api.get("/healthz").status_code == 200  # the daemon keeps serving


def test_token_defaults_to_the_running_single_user_daemons_user(tmp_path: Path) -> None:
    from click.testing import CliRunner

    root = tmp_path / "d"
    files = DaemonFiles(root)
    files.write_server_info({"pid": os.getpid(), "port": 1, "multi_user": False, "user": "carol"})
    runner = CliRunner(env={"CREATIVE_MEMORY_USER": "default"})
    tok = runner.invoke(cli, ["token", "--data-dir", str(root)]).output.strip()
    assert files.read_tokens() == {tok: "carol"}
    other = runner.invoke(cli, ["token", "--data-dir", str(root), "--user", "dave"])
    assert files.read_tokens()[other.output.strip()] == "dave"


def test_the_hot_paths_answer_as_starlette_would(
    api: Api,
    daemon: InProcess,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """POST /api/v1/events and /api/v1/prompt (every method) skip Starlette's router and its
    exception layers (http/app.py, HotRoutes): the same answers, headers, errors and logs."""
    from creative_memory.http.app import HotRoutes

    hot = daemon.app.app
    while not isinstance(hot, HotRoutes):  # the middleware stack, innermost last
        hot = hot.app  # type: ignore[attr-defined]
    assert sorted(hot.hot) == [
        ("GET", "/api/v1/prompt"), ("HEAD", "/api/v1/prompt"), ("POST", "/api/v1/events"),
        ("POST", "/api/v1/prompt"),
    ]  # fmt: skip
    served: list[str] = []
    starlette = hot.app

    async def seen(scope: Any, receive: Any, send: Any) -> None:
        served.append(f"{scope['method']} {scope['path']}")
        await starlette(scope, receive, send)

    monkeypatch.setattr(hot, "app", seen)
    r = api.get("/api/v1/prompt")
    assert r.status_code == 200 and r.headers["x-content-type-options"] == "nosniff"
    assert_problem(api.get("/api/v1/prompt", headers={"Authorization": "Bearer nope"}), 401)
    assert api.head("/api/v1/prompt").status_code == 200
    assert_problem(api.post("/api/v1/events", content=b"{"), 400)
    text = {"Content-Type": "text/plain"}
    assert_problem(api.post("/api/v1/events", content=b"x", headers=text), 415)
    assert served == []  # none of them reached Starlette
    assert_problem(api.put("/api/v1/events", json={}), 405)
    assert served == ["PUT /api/v1/events"]  # another method: Starlette, with its Allow

    def bug(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a genuine bug")

    monkeypatch.setattr(daemon.daemon.service, "prompt", bug)
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="creative_memory.http"):
        body = assert_problem(api.get("/api/v1/prompt"), 500)
    logged = [r for r in caplog.records if getattr(r, "fields", {}).get("correlation_id")]
    assert logged[0].fields["path"] == "/api/v1/prompt"  # type: ignore[attr-defined]
    assert body["correlation_id"] == logged[0].fields["correlation_id"]  # type: ignore[attr-defined]
    assert "a genuine bug" not in body["detail"]
    assert served == ["PUT /api/v1/events"]
