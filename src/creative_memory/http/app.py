"""The ASGI application (docs/http.md, "Layout"): the middleware stack around Starlette,
the routes from the operation table, the one exception handler and the lifespan (the
capture ticker; at shutdown, pending captured events are delivered)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Sequence
from typing import Final

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from creative_memory.app.store import MemoryStore
from creative_memory.http.config import IMPORT_PATH, DaemonConfig
from creative_memory.http.jsonlog import log, log_event
from creative_memory.http.middleware import (
    BodyLimit,
    ErrorBoundary,
    HostGuard,
    RequestLog,
    SecurityHeaders,
)
from creative_memory.http.openapi import openapi_document
from creative_memory.http.problems import HANDLED, on_error
from creative_memory.http.routes import OPERATIONS, Operation
from creative_memory.http.routes.common import Endpoint
from creative_memory.http.state import Daemon

#: The paths hosts call on every generation and every feedback event, matched first.
HOT_PATHS: Final = ("/api/v1/prompt", "/api/v1/events")


class DaemonApp:
    """The daemon's ASGI application; :attr:`daemon` is its state."""

    def __init__(self, app: ASGIApp, daemon: Daemon) -> None:
        self.app = app
        self.daemon = daemon

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection."""
        await self.app(scope, receive, send)


def create_app(config: DaemonConfig, *, store: MemoryStore | None = None) -> DaemonApp:
    """The daemon's ASGI application; ``store`` overrides the store (tests fix its clock)."""
    daemon = Daemon(config, store=store)
    daemon.openapi = openapi_document(OPERATIONS)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        ticker = asyncio.create_task(_tick_forever(daemon))
        log_event(
            logging.INFO,
            "daemon_started",
            root=str(config.root),
            host=config.host,
            port=config.port,
            multi_user=config.multi_user,
            user=None if config.multi_user else config.user,
            alarm_ms=config.alarm_ms,
        )
        try:
            yield
        finally:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker
            await daemon.run(daemon.flush_pending)
            daemon.executor.shutdown(wait=False)  # idle: uvicorn let the requests finish
            daemon.files.remove_server_info(os.getpid())
            log_event(logging.INFO, "daemon_stopped")

    starlette = Starlette(
        routes=_routes(OPERATIONS),
        exception_handlers=dict.fromkeys(HANDLED, on_error),
        lifespan=lifespan,
    )
    starlette.state.daemon = daemon
    hot = HotRoutes(starlette)
    limited = BodyLimit(hot, config.max_body_bytes, {IMPORT_PATH: config.max_import_bytes})
    stack = ErrorBoundary(RequestLog(SecurityHeaders(HostGuard(limited, daemon.hosts))))
    return DaemonApp(stack, daemon)


class HotRoutes:
    """Innermost: a request for one of the :data:`HOT_PATHS` goes straight to its route's
    endpoint and the one exception handler, past Starlette's two exception layers and its
    router (about a tenth of the daemon's CPU per request: docs/performance.md, "Where the
    goals stand (fourth pass, 2026-12-03 evening)"); what Starlette would add to the scope
    for it is added here. Every other request, and every other method of these paths (a
    405 lists the allowed ones), goes to Starlette."""

    def __init__(self, app: Starlette) -> None:
        self.app: ASGIApp = app
        self.starlette = app
        self.hot: dict[tuple[str, str], tuple[Route, Endpoint]] = {}
        for route in app.routes:
            if isinstance(route, Route) and route.path in HOT_PATHS:
                for method in route.methods or ():
                    self.hot[method, route.path] = (route, route.endpoint)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve a hot path here, anything else through Starlette."""
        hit = self.hot.get((scope.get("method", ""), scope.get("path", "")))
        if hit is None or scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route, endpoint = hit
        scope["app"], scope["router"] = self.starlette, self.starlette.router
        scope["route"], scope["endpoint"], scope["path_params"] = route, endpoint, {}
        request = Request(scope, receive, send)
        try:
            response = await endpoint(request)
        except Exception as exc:  # what Starlette's handlers do: answer with the problem
            response = await on_error(request, exc)
        await response(scope, receive, send)


def _routes(ops: Sequence[Operation]) -> list[Route]:
    """One Starlette route per path, so a 405's ``Allow`` lists every method of the path."""
    by_path: dict[str, dict[str, Endpoint]] = {}
    for op in ops:
        by_path.setdefault(op.route_path or op.path, {})[op.method] = op.endpoint
    routes = []
    # Starlette tries routes in order: the hot paths first (no other route overlaps them)
    hot = sorted(by_path, key=lambda p: p not in HOT_PATHS)
    for path in hot:
        endpoints = by_path[path]
        if "GET" in endpoints:
            endpoints["HEAD"] = endpoints["GET"]

        async def dispatch(
            request: Request, endpoints: dict[str, Endpoint] = endpoints
        ) -> Response:
            return await endpoints[request.method](request)

        routes.append(Route(path, dispatch, methods=list(endpoints)))
    return routes


async def _tick_forever(daemon: Daemon) -> None:
    """Deliver expired coalescing windows even when no request arrives."""
    while True:
        await asyncio.sleep(daemon.config.tick_seconds)
        if daemon.closed:
            return
        try:
            await daemon.run(daemon.tick)
        except Exception:  # a storage hiccup must not kill the ticker; it retries next time
            log.exception("tick_failed", extra={"fields": {"event": "tick_failed"}})


def daemon_of(app: ASGIApp) -> Daemon:
    """The :class:`Daemon` behind an app made by :func:`create_app`."""
    if not isinstance(app, DaemonApp):
        raise TypeError("not a creative-memory daemon app")
    return app.daemon
