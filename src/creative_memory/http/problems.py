"""Errors as RFC 9457 problem documents, and the one mapping from exceptions to them
(docs/http.md, "Errors"): ``ValidationError`` → 422 naming ``field``, ``NotFound`` → 404,
``Conflict`` → 409, anything else (``StorageError``, a bare ``ValueError``, a bug) → 500 with
a correlation id that is logged with the traceback; the body never carries internal detail.
A damaged log (``LogDamaged``) is a 500 of its own type, ``log-damaged``, saying how to mend
it."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping
from typing import Any, Final

import msgspec
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from creative_memory.app.service import Conflict, NotFound, StorageError, ValidationError
from creative_memory.engine.errors import LogDamaged
from creative_memory.http.jsonlog import log_event, route_template

PROBLEM: Final = "application/problem+json"
_TYPE: Final = "urn:creative-memory:problem:"


class Problem(Exception):
    """An HTTP error answered with an ``application/problem+json`` document."""

    def __init__(
        self,
        status: int,
        title: str,
        detail: str,
        *,
        slug: str | None = None,
        field: str | None = None,
        headers: Mapping[str, str] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.title = title
        self.detail = detail
        self.slug = slug or title.lower().replace(" ", "-")
        self.field = field
        self.headers = dict(headers or {})
        self.extra = dict(extra or {})

    def body(self) -> dict[str, Any]:
        """The problem document."""
        out: dict[str, Any] = {
            "type": _TYPE + self.slug,
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
        }
        if self.field is not None:
            out["field"] = self.field
        out.update(self.extra)
        return out

    def response(self) -> Response:
        """The problem as a response."""
        return Response(
            msgspec.json.encode(self.body()),
            status_code=self.status,
            media_type=PROBLEM,
            headers=self.headers,
        )


class ProblemDoc(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The shape of every error body (RFC 9457), for the OpenAPI document."""

    type: str
    title: str
    status: int
    detail: str
    field: str | None = None
    correlation_id: str | None = None


def invalid(detail: str, field: str | None, status: int = 422) -> Problem:
    """Bad input: 422 naming ``field`` (400 for a body that does not parse)."""
    title = "Invalid request" if status == 422 else "Malformed request"
    return Problem(status, title, detail, slug="invalid-request", field=field)


def unauthorized(detail: str) -> Problem:
    """401 with the ``WWW-Authenticate: Bearer`` challenge."""
    return Problem(
        401,
        "Unauthorized",
        detail,
        headers={"WWW-Authenticate": 'Bearer realm="creative-memory"'},
    )


def forbidden(detail: str, *, slug: str, field: str | None = None) -> Problem:
    """403: the request is understood and refused."""
    return Problem(403, "Forbidden", detail, slug=slug, field=field)


def not_found(detail: str, field: str | None = None) -> Problem:
    """404: nothing there."""
    return Problem(404, "Not found", detail, slug="not-found", field=field)


def too_large(limit: int) -> Problem:
    """413: the body is over ``limit`` bytes."""
    return Problem(
        413,
        "Payload too large",
        f"the request body is larger than {limit} bytes",
        slug="payload-too-large",
        field="body",
    )


def unavailable(detail: str) -> Problem:
    """503: the daemon is shutting down."""
    return Problem(503, "Shutting down", detail, slug="unavailable")


def internal_error(route: str, exc: BaseException) -> Problem:
    """500 with a fresh correlation id, logged here together with the traceback and the
    ``route`` template."""
    cid = secrets.token_hex(8)
    event = "storage_error" if isinstance(exc, StorageError) else "unhandled_error"
    log_event(logging.ERROR, event, exc=exc, path=route, correlation_id=cid)
    if isinstance(exc, LogDamaged):  # the person can mend it: say how, still nothing internal
        return Problem(
            500,
            "Memory damaged",
            "the stored memory was changed outside creative-memory: GET /api/v1/check lists "
            'what is wrong, POST /api/v1/repair mends it (docs/storage.md, "Check and '
            f"repair\"); the daemon's log has the details under correlation id {cid}",
            slug="log-damaged",
            extra={"correlation_id": cid},
        )
    return Problem(
        500,
        "Internal error",
        f"the daemon could not complete the request; its log has the details under "
        f"correlation id {cid}",
        slug="internal-error",
        extra={"correlation_id": cid},
    )


def problem_for(exc: BaseException, method: str, path: str, template: str | None = None) -> Problem:
    """The one exception → problem mapping (never a 4xx for a bare ``ValueError``). A 500 is
    logged under the route ``template`` (never the raw ``path``: it may name a pattern)."""
    if isinstance(exc, Problem):
        return exc
    if isinstance(exc, ValidationError):
        return invalid(str(exc), exc.field)
    if isinstance(exc, NotFound):
        return not_found(str(exc), exc.field)
    if isinstance(exc, Conflict):
        return Problem(409, "Conflict", str(exc), slug="conflict", field=exc.field)
    if isinstance(exc, HTTPException):
        return _http_problem(exc, method, path)
    return internal_error(template or "(no route)", exc)


def _http_problem(exc: HTTPException, method: str, path: str) -> Problem:
    if exc.status_code == 404:
        return not_found(f"no route {method} {path}")
    if exc.status_code == 405:
        return Problem(405, "Method not allowed", f"{method} is not allowed on {path}",
                       headers=dict(exc.headers or {}))  # fmt: skip
    return Problem(exc.status_code, "HTTP error", exc.detail, slug="http-error",
                   headers=dict(exc.headers or {}))  # fmt: skip


async def on_error(request: Request, exc: Exception) -> Response:
    """The Starlette exception handler for every exception type (see :func:`problem_for`)."""
    problem = problem_for(exc, request.method, request.url.path, route_template(request.scope))
    return problem.response()


#: Exception types the handler is registered for (``Exception`` last: the catch-all).
HANDLED: Final = (Problem, ValidationError, NotFound, Conflict, HTTPException, Exception)
