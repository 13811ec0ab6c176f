"""The Settings → Memory page and the routes around it (docs/daemon.md): liveness, the
OpenAPI document, the page, its static files and icon, the one-time login link, logout."""

from __future__ import annotations

import contextlib
import logging
from importlib import resources
from typing import Final

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from creative_memory._version import __version__
from creative_memory.http.jsonlog import log_event
from creative_memory.http.problems import Problem, invalid, not_found, unauthorized
from creative_memory.http.routes.common import JSON, Operation, daemon, encode, query
from creative_memory.http.schemas import DerivationHealth, Health, OpenApiDoc
from creative_memory.http.state import WEB_FILES

CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)

#: The page's icon (an SVG, served at /favicon.ico so no browser asks in vain).
FAVICON: Final = (resources.files("creative_memory.http") / "web" / "favicon.svg").read_bytes()

_SIGNED_OUT_PAGE: Final = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sign in — creative-memory</title>
<link rel="stylesheet" href="/static/style.css">
<link rel="icon" href="/favicon.ico" type="image/svg+xml"></head>
<body><main class="signed-out"><h1>Settings → Memory</h1>
<p>{why} Run <code>creative-memory ui</code> on this machine: it prints and
opens a one-time login link for this page.</p></main></body></html>
"""
_SIGNED_OUT: Final = _SIGNED_OUT_PAGE.format(why="You are not signed in.")
#: A login link that was used, has expired, or has no code, opened in a browser.
_BAD_LINK: Final = _SIGNED_OUT_PAGE.format(
    why="This login link is invalid, expired or already used: each link works once."
)


def _signed_out(status: int, html: str = _SIGNED_OUT) -> Response:
    """The signed-out page (how to sign in), with ``status``."""
    return HTMLResponse(html, status_code=status, headers={"Content-Security-Policy": CSP})


def _wants_html(request: Request) -> bool:
    """A browser opening a link (``Accept: text/html``), not an API client."""
    return "text/html" in request.headers.get("accept", "")


async def healthz(request: Request) -> Response:
    """GET /healthz: liveness and how derivation runs, no credentials (with them, also the
    caller's own derivation record)."""
    d = daemon(request)
    worker = d.worker
    if worker is None:
        derivation = DerivationHealth(mode="lazy")
    else:
        s = worker.status()
        derivation = DerivationHealth(
            mode="background", running=s.running, queue_depth=s.queue_depth,
            derivations=s.derivations, failures=s.failures,
            last_derived_at=s.last_derived_at, last_duration_ms=s.last_duration_ms,
        )  # fmt: skip
        if request.headers.get("authorization") or request.cookies:
            with contextlib.suppress(Problem):
                derivation.user = worker.status_of(d.auth.authenticate(request))
    return encode(Health(status="ok", version=__version__, derivation=derivation))


async def openapi(request: Request) -> Response:
    """GET /openapi.json: the generated OpenAPI document."""
    d = daemon(request)
    d.auth.authenticate(request)
    return encode(d.openapi)


async def page(request: Request) -> Response:
    """GET /: the page for a signed-in session, else how to sign in."""
    d = daemon(request)
    if d.auth.session_user(request) is None:
        return _signed_out(401)
    return Response(d.web["index.html"], media_type=WEB_FILES["index.html"],
                    headers={"Content-Security-Policy": CSP})  # fmt: skip


async def static(request: Request) -> Response:
    """GET /static/{name}: the page's scripts (ES modules) and style sheet."""
    name = request.path_params["name"]
    if name not in WEB_FILES or name == "index.html":
        raise not_found(f"no static file {name!r}")
    return Response(daemon(request).web[name], media_type=WEB_FILES[name])


async def favicon(request: Request) -> Response:
    """GET /favicon.ico: the page's icon (SVG), cacheable for a day."""
    return Response(FAVICON, media_type="image/svg+xml",
                    headers={"Cache-Control": "public, max-age=86400"})  # fmt: skip


async def login(request: Request) -> Response:
    """GET /login?once=: consume a one-time nonce, set the session cookie, go to the page.
    A link that does not sign in gets the signed-out page in a browser (same status), the
    problem document otherwise. A HEAD (a link preview, a prefetch) spends nothing: the
    link stays valid for the person who opens it."""
    if request.method == "HEAD":
        return Response(status_code=204, headers={"Cache-Control": "no-store"})
    d = daemon(request)
    nonce = query(request, "once")
    if not nonce:
        if _wants_html(request):
            return _signed_out(400, _BAD_LINK)
        raise invalid("the login link has no one-time code (once=)", "once", 400)
    user = await d.run(d.files.consume_login, nonce)
    if user is None or not d.auth.user_allowed(user):
        if _wants_html(request):
            return _signed_out(401, _BAD_LINK)
        raise unauthorized(
            "this login link is invalid, expired or already used; run creative-memory ui again"
        )
    sid = d.auth.new_session(user)
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(
        d.auth.cookie_name, sid, httponly=True, samesite="strict", path="/", secure=False
    )
    request.scope["cm_user"] = user
    log_event(logging.INFO, "login", user=user)
    return response


async def logout(request: Request) -> Response:
    """POST /logout: end the page's session."""
    d = daemon(request)
    d.auth.authenticate(request)
    d.auth.end_session(request)
    response = encode({"signed_out": True})
    response.delete_cookie(d.auth.cookie_name, path="/", httponly=True, samesite="strict")
    return response


OPERATIONS = (
    Operation("GET", "/healthz", healthz, "healthz", "Liveness (no credentials).",
              responses={JSON: Health}, public=True),
    Operation("GET", "/openapi.json", openapi, "openapi", "This document.",
              responses={JSON: OpenApiDoc}),
    Operation("GET", "/", page, public=True),
    Operation("GET", "/static/{name}", static, public=True),
    Operation("GET", "/favicon.ico", favicon, public=True),
    Operation("GET", "/login", login, public=True),
    Operation("POST", "/logout", logout),
)  # fmt: skip
