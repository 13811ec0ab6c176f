"""Pure-ASGI middleware around the routes, one concern each (docs/http.md, "Layout"):
the last-resort error boundary, the access log, security headers, the ``Host`` guard
against DNS rebinding and the request body limit."""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from creative_memory.http.jsonlog import log, log_event, route_template
from creative_memory.http.problems import Problem, internal_error, invalid, too_large

_SECURITY_HEADERS: Final = (
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
)
_SECURITY_NAMES: Final = frozenset(name for name, _ in _SECURITY_HEADERS)


def header(scope: Scope, name: bytes) -> str | None:
    """The first value of request header ``name`` (lower case bytes), else ``None``. ASGI
    servers send header names in lower case; any other case is matched too."""
    size = len(name)
    for key, value in scope.get("headers", ()):
        if key == name or (len(key) == size and key.lower() == name):
            return str(value.decode("latin-1"))
    return None


class ErrorBoundary:
    """Outermost: an exception nothing answered becomes a 500 problem (with a correlation
    id in the log); one raised after the answer started was already answered and logged."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app, answering a 500 problem if it fails before answering."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            if not started:
                problem = internal_error(route_template(scope), exc)
                await problem.response()(scope, receive, send)


class RequestLog:
    """One ``http_request`` log line per request: method, route template (never the raw
    path: it may name a pattern), status, duration, user."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app and log how it answered."""
        if scope["type"] != "http" or not log.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)  # above INFO no request is logged
            return
        start = time.perf_counter()
        status = 0

        async def logging_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, logging_send)
        finally:
            path = route_template(scope)
            level = logging.DEBUG if path == "/healthz" else logging.INFO
            if log.isEnabledFor(level):  # the line is built only when it is written
                log_event(
                    level,
                    "http_request",
                    method=scope.get("method"),
                    path=path,
                    status=status or 500,
                    duration_ms=round((time.perf_counter() - start) * 1000, 2),
                    user=scope.get("cm_user"),
                )


class SecurityHeaders:
    """``nosniff``, ``no-referrer``, ``DENY`` framing and ``no-store`` on every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app, adding the headers to its answer."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = message["headers"] = list(message.get("headers", ()))
                given = _SECURITY_NAMES.intersection([k.lower() for k, _ in headers])
                headers.extend(h for h in _SECURITY_HEADERS if h[0] not in given)
            await send(message)

        await self.app(scope, receive, send_with_headers)


class HostGuard:
    """403 before routing unless the ``Host`` header names this daemon (DNS rebinding)."""

    def __init__(self, app: ASGIApp, hosts: Collection[str]) -> None:
        self.app = app
        self.hosts = frozenset(hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer 403 for a foreign ``Host``, else run the app."""
        host = header(scope, b"host") if scope["type"] == "http" else ""
        if host is not None and (scope["type"] != "http" or host.lower() in self.hosts):
            await self.app(scope, receive, send)
            return
        problem = Problem(
            403,
            "Forbidden host",
            "the Host header does not name this daemon (DNS rebinding protection); "
            "use http://127.0.0.1:<port> or http://localhost:<port>",
            slug="host-not-allowed",
            field="host",
        )
        await problem.response()(scope, receive, send)


class BodyLimit:
    """413 for a body over the limit: on ``Content-Length`` before the route runs, and while
    a chunked body streams in. ``limits`` maps a path to its own limit."""

    def __init__(self, app: ASGIApp, default: int, limits: dict[str, int]) -> None:
        self.app = app
        self.default = default
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse or meter the request body, then run the app."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limits.get(scope.get("path", ""), self.default)
        length = header(scope, b"content-length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                problem = invalid("Content-Length is not a number", "content-length", 400)
                await problem.response()(scope, receive, send)
                return
            if declared > limit:
                await too_large(limit).response()(scope, receive, send)
                return
        seen = 0

        async def metered_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise too_large(limit)
            return message

        await self.app(scope, metered_receive, send)
