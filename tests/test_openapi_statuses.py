"""The OpenAPI document declares exactly the statuses each operation answers (docs/http.md,
"OpenAPI"): for every documented operation, every situation that makes it answer a status
is provoked against the daemon in process, and the statuses seen must be the ones the
document declares — no fewer (a client must know every answer it can get: ``/healthz``
answers a foreign ``Host`` with a 403) and no more. Every error is a problem document.

The situations: a valid request (200), a conditional one (304), a foreign ``Host`` (403),
a body over the limit (413, declared on ``Content-Length``, a ``GET`` too), no credentials
(401), a cookie write without the CSRF header (403), a broken ``tokens.json`` (500: the
credential check fails), a query parameter given twice (422), a bad ``{type}/{pattern}``
path (404 not two segments, 400 not UTF-8, 422 empty), a body that is not JSON (415),
empty (400) or too deep (422), an unknown pattern (404), the daemon shutting down (503).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from creative_memory.http import DaemonConfig, DaemonFiles, create_app, daemon_of
from creative_memory.http.openapi import openapi_document
from creative_memory.http.routes import OPERATIONS, Operation
from creative_memory.http.routes.common import error_statuses
from tests.test_page_conditional import wire

with warnings.catch_warnings():  # Starlette 1.x prefers httpx2 for its TestClient
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

PORT = 7746
BASE = f"http://127.0.0.1:{PORT}"
PROBLEM = "application/problem+json"
MAX_BODY, MAX_IMPORT = 4096, 16384
DOCUMENT = openapi_document()
DOCUMENTED = [op for op in OPERATIONS if op.operation_id]


@dataclass
class Site:
    """A daemon in process with a little memory, a client holding its token."""

    client: TestClient
    anon: TestClient  # no credentials unless a request brings them
    root: Path


#: A request each documented operation answers with 200: method, path, request options.
VALID: dict[str, tuple[str, str, dict[str, Any]]] = {
    "healthz": ("GET", "/healthz", {}),
    "openapi": ("GET", "/openapi.json", {}),
    "inspect": ("GET", "/api/v1/memory", {}),
    "forget": ("DELETE", "/api/v1/preferences/color/never_seen", {}),
    "explain": ("GET", "/api/v1/explain/color/neon_palette", {}),
    "timeline": ("GET", "/api/v1/timeline/color/neon_palette", {}),
    "reset": ("POST", "/api/v1/reset", {"json": {"confirm": True, "scope": "project:zz"}}),
    "check": ("GET", "/api/v1/check", {}),
    "repair": ("POST", "/api/v1/repair", {"json": {"confirm": True}}),
    "ingestEvents": ("POST", "/api/v1/events", {"json": wire("a9", "neon_palette")}),
    "prompt": ("GET", "/api/v1/prompt", {}),
    "composePrompt": ("POST", "/api/v1/prompt", {"json": {"host_prompt": "You design.\n"}}),
    "getSettings": ("GET", "/api/v1/settings", {}),
    "changeSettings": ("POST", "/api/v1/settings", {"json": {"diagnostics_feed": False}}),
    "derivation": ("GET", "/api/v1/derivation", {}),
    "useDerivation": ("POST", "/api/v1/derivation", {"json": {"version": "5"}}),
    "previewDerivation": ("GET", "/api/v1/derivation/preview?version=1", {}),
    "export": ("GET", "/api/v1/export", {}),
    "import": ("POST", "/api/v1/import", {}),  # the body: the site's own export
}


@pytest.fixture
def make_site(tmp_path: Path) -> Iterator[Callable[[str], Site]]:
    clients: list[TestClient] = []

    def make(derivation: str = "lazy") -> Site:
        root = tmp_path / f"mem{len(clients)}"
        config = DaemonConfig(
            root=root, port=PORT, max_body_bytes=MAX_BODY, max_import_bytes=MAX_IMPORT,
            derivation=derivation, log_level="critical",
        )  # fmt: skip
        token = DaemonFiles(root).token_for("default")
        assert token is not None
        app = create_app(config)
        client = TestClient(app, base_url=BASE, headers={"Authorization": f"Bearer {token}"})
        client.__enter__()
        clients.append(client)
        r = client.post("/api/v1/events", json=[wire(f"a{i}", "neon_palette") for i in range(3)])
        assert r.status_code == 200 and r.json()["accepted"] == 3, r.text
        return Site(client, TestClient(app, base_url=BASE), root)

    yield make
    for c in clients:
        c.__exit__(None, None, None)


def _valid(site: Site, op: Operation) -> tuple[str, str, dict[str, Any]]:
    method, path, kw = VALID[op.operation_id]
    if op.operation_id == "import":
        kw = {"content": site.client.get("/api/v1/export").content}
    return method, path, kw


def _with_query(path: str, query: str) -> str:
    return path + ("&" if "?" in path else "?") + query


def _observe(site: Site, op: Operation) -> dict[int, str]:
    """Every status ``op`` answered in the situations that apply to it → what caused it;
    each situation must answer the status it is meant to provoke."""
    seen: dict[int, str] = {}
    method, path, kw = _valid(site, op)
    json_body: dict[str, Any] = {"json": None, "headers": {"content-type": "application/json"}}
    text_body: dict[str, Any] = {"json": None, "headers": {"content-type": "text/plain"}}

    def send(
        why: str, want: int, *, client: TestClient = site.client, path: str = path, **over: Any
    ) -> None:
        r = client.request(method, path, **{**kw, **over})
        assert r.status_code == want, (op.operation_id, why, r.text[:300])
        if r.status_code >= 400:
            assert r.headers["content-type"].startswith(PROBLEM), (why, r.text)
            assert r.json()["status"] == r.status_code, why
        seen.setdefault(r.status_code, why)

    send("a valid request", 200)
    send("a foreign Host", 403, headers={"host": "rebind.example"})
    limit = MAX_IMPORT if op.path == "/api/v1/import" else MAX_BODY
    send("a body over the limit", 413, content=b"x" * (limit + 1), json=None)
    if op.statuses:
        send("If-None-Match: *", 304, headers={"If-None-Match": "*"})
    if not op.public:
        send("no credentials", 401, client=site.anon)
        if method not in ("GET", "HEAD"):
            sid = daemon_of(site.client.app).auth.new_session("default")
            site.anon.cookies.set(f"cm_session_{PORT}", sid)
            send("a cookie write without X-Requested-With", 403, client=site.anon)
            site.anon.cookies.clear()
    for p in op.params:
        if p.where == "query":
            send(f"{p.name} given twice", 422, path=_with_query(path, f"{p.name}=1&{p.name}=2"))
    if any(p.where == "path" for p in op.params):
        prefix = path.rsplit("/", 2)[0]
        send("three segments", 404, path=f"{prefix}/color/neon/palette")
        send("a segment not UTF-8", 400, path=f"{prefix}/color/%FF")
        send("an empty segment", 422, path=f"{prefix}/color/")
    if op.body is not None:
        send("a text/plain body", 415, content=b"{}", **text_body)
        # an upload is read whole and judged by the service: empty is a 422, not a 400
        empty = 422 if op.operation_id == "import" else 400
        send("an empty body", empty, content=b"", **json_body)
        send("JSON 100 deep", 422, content=b"[" * 100 + b"]" * 100, **json_body)
    if op.operation_id in ("explain", "timeline"):
        send("an unknown pattern", 404, path=path.replace("neon_palette", "never_seen"))
    if op.operation_id == "ingestEvents":
        d = daemon_of(site.client.app)
        d.closed = True
        try:
            send("shutting down", 503)
        finally:
            d.closed = False
    tokens = DaemonFiles(site.root).tokens_path
    kept = tokens.read_bytes()
    tokens.write_bytes(b"{not json")
    try:
        send("tokens.json unreadable", 500)
    finally:
        tokens.write_bytes(kept)
    return seen


def _declared(op: Operation) -> set[int]:
    entry = DOCUMENT["paths"][op.path][op.method.lower()]
    return {int(code) for code in entry["responses"]}


def test_every_documented_operation_has_a_valid_request() -> None:
    assert {op.operation_id for op in DOCUMENTED} == set(VALID)


@pytest.mark.parametrize("op", DOCUMENTED, ids=lambda op: op.operation_id)
def test_the_document_declares_exactly_the_statuses_an_operation_answers(
    make_site: Callable[[str], Site], op: Operation
) -> None:
    # /healthz reads credentials (and so can fail on tokens.json) only in background mode
    site = make_site("background" if op.public else "lazy")
    seen = _observe(site, op)
    declared = _declared(op)
    undeclared = {code: why for code, why in seen.items() if code not in declared}
    assert not undeclared, f"{op.operation_id} answers undeclared statuses: {undeclared}"
    assert set(seen) == declared, f"{op.operation_id}: declared but never seen: " + str(
        sorted(declared - set(seen))
    )


def test_every_error_is_declared_with_the_problem_schema() -> None:
    for op in DOCUMENTED:
        responses = DOCUMENT["paths"][op.path][op.method.lower()]["responses"]
        errors = sorted(int(c) for c in responses if int(c) >= 400)
        assert tuple(errors) == error_statuses(op), op.operation_id
        for code in errors:
            schema = responses[str(code)]["content"][PROBLEM]["schema"]
            assert schema == {"$ref": "#/components/schemas/ProblemDoc"}, (op, code)


def test_healthz_declares_the_host_check_and_the_body_limit_but_no_401() -> None:
    responses = DOCUMENT["paths"]["/healthz"]["get"]["responses"]
    assert {"403", "413"} <= set(responses) and "401" not in responses
    assert "Host" in responses["403"]["description"]
    reset = DOCUMENT["paths"]["/api/v1/reset"]["post"]["responses"]
    assert "X-Requested-With" in reset["403"]["description"]
    assert "409" not in reset and "429" not in reset  # nothing answers them
