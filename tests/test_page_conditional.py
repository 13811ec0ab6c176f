"""Conditional GETs of what the page polls and the page's icon (docs/http.md, "Conditional
requests"; docs/daemon.md, "The Settings → Memory page").

GET /api/v1/memory and GET /api/v1/settings answer with a strong ETag; sending it back in
If-None-Match gets a bodiless 304 until the representation changes, then a 200 with a new
tag. The OpenAPI document declares the header parameter, the ETag response header and the
304. /favicon.ico is served (no 404 in the browser's console).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from creative_memory.http import (
    DaemonConfig,
    DaemonFiles,
    create_app,
    ensure_first_start,
    openapi_document,
)
from creative_memory.http.routes.common import etag_matches, etag_of

with warnings.catch_warnings():  # Starlette 1.x prefers httpx2 for its TestClient
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

PORT = 7745


def wire(artifact: str, pattern: str) -> dict[str, Any]:
    return {
        "event": "explicit_tag_applied",
        "user_id": "default",
        "artifact_id": artifact,
        "session_id": "s1",
        "project_id": None,
        "timestamp": "2026-03-01T10:00:00Z",
        "tag_text": "too noisy",
        "artifact_meta": {"signals": [{"preference_type": "color", "pattern": pattern}]},
    }


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    config = DaemonConfig(root=tmp_path / "mem", port=PORT)
    ensure_first_start(config)
    token = DaemonFiles(config.root).token_for("default")
    app = create_app(config)
    with TestClient(
        app, base_url=f"http://127.0.0.1:{PORT}", headers={"Authorization": f"Bearer {token}"}
    ) as c:
        yield c


@pytest.mark.parametrize(
    "path", ["/api/v1/memory", "/api/v1/settings", "/api/v1/memory?project_id=p1"]
)
def test_etag_then_304_until_the_representation_changes(client: TestClient, path: str) -> None:
    first = client.get(path)
    assert first.status_code == 200
    tag = first.headers["ETag"]
    assert tag == etag_of(first.content) and tag.startswith('"') and tag.endswith('"')
    again = client.get(path, headers={"If-None-Match": tag})
    assert again.status_code == 304
    assert again.content == b""
    assert again.headers["ETag"] == tag
    assert "content-type" not in again.headers
    # a list of tags, a weak form of the same tag and * all match; another tag does not
    for header in (f'"nope", {tag}', f"W/{tag}", "*"):
        assert client.get(path, headers={"If-None-Match": header}).status_code == 304
    other = client.get(path, headers={"If-None-Match": '"0000"'})
    assert other.status_code == 200 and other.headers["ETag"] == tag
    # a change: the old tag no longer matches
    if "settings" in path:
        r = client.post("/api/v1/settings", json={"diagnostics_feed": True})
    else:
        r = client.post("/api/v1/events", json=[wire("a1", "neon_palette")])
    assert r.status_code == 200, r.text
    changed = client.get(path, headers={"If-None-Match": tag})
    assert changed.status_code == 200
    assert changed.headers["ETag"] != tag and changed.content != first.content


def test_the_etag_is_per_user_and_needs_credentials(client: TestClient) -> None:
    tag = client.get("/api/v1/memory").headers["ETag"]
    anonymous = client.get(
        "/api/v1/memory", headers={"If-None-Match": tag, "Authorization": "Bearer wrong"}
    )
    assert anonymous.status_code == 401  # never a 304 that confirms what someone else has


def test_etag_matching_rules() -> None:
    tag = etag_of(b"{}")
    assert etag_of(b"{}") == tag and etag_of(b"[]") != tag
    assert not etag_matches(None, tag)
    assert not etag_matches("", tag)
    assert etag_matches(tag, tag)
    assert etag_matches(f' W/{tag} , "x"', tag)
    assert etag_matches(" * ", tag)
    assert not etag_matches(tag[:-1], tag)


def test_openapi_declares_the_conditional_gets() -> None:
    doc = openapi_document()
    for path in ("/api/v1/memory", "/api/v1/settings"):
        op = doc["paths"][path]["get"]
        params = {(p["name"], p["in"]) for p in op["parameters"]}
        assert ("If-None-Match", "header") in params
        assert "ETag" in op["responses"]["200"]["headers"]
        assert "ETag" in op["responses"]["304"]["headers"]
        assert "content" not in op["responses"]["304"]
    # other operations are not conditional
    assert "304" not in doc["paths"]["/api/v1/prompt"]["get"]["responses"]


def test_favicon_is_served(client: TestClient) -> None:
    r = client.get("/favicon.ico", headers={"Authorization": ""})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("image/svg+xml")
    assert r.content.startswith(b"<svg")
