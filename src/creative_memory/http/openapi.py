"""The OpenAPI 3.1 document, generated (docs/http.md, "OpenAPI"): component schemas come
from the msgspec types of the request and response bodies (``schema_components``), paths
from the routes' operation table; nothing about a body is written by hand here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import msgspec

from creative_memory._version import __version__
from creative_memory.http.problems import PROBLEM, ProblemDoc
from creative_memory.http.routes import OPERATIONS, Operation
from creative_memory.http.routes.common import error_statuses
from creative_memory.http.schemas import COMPONENTS, OPEN_COMPONENTS

REF_TEMPLATE: Final = "#/components/schemas/{name}"

_ERRORS: Final = {
    400: "Malformed request (not JSON, bad encoding, empty).",
    401: "Missing or invalid credentials.",
    403: "Forbidden: the Host header does not name this daemon (any route).",
    404: "Nothing matches.",
    413: "Request body too large: over the limit declared in Content-Length (checked on "
    "every request, before routing) or while a chunked body streams.",
    415: "Request body is not JSON.",
    422: "Invalid input; `field` names it.",
    500: "The daemon could not complete the request; `correlation_id` finds it in the log.",
    503: "Shutting down.",
}
#: 403 on a write that needs credentials: the session cookie also needs the CSRF header.
_FORBIDDEN_WRITE: Final = (
    "Forbidden: the Host header does not name this daemon, or a write with the page's "
    "session cookie lacks `X-Requested-With: creative-memory`."
)


_SECURITY_SCHEMES: Final = {
    "bearer": {"type": "http", "scheme": "bearer", "description": "`creative-memory token`."},
    "session": {
        "type": "apiKey",
        "in": "cookie",
        "name": "cm_session_<port>",
        "description": "Set by the one-time login link of `creative-memory ui`; writes also "
        "need `X-Requested-With: creative-memory`.",
    },
}


def _types(ops: Sequence[Operation]) -> list[Any]:
    """Every type the document needs a schema for: components first, then per operation."""
    out: list[Any] = [*COMPONENTS]
    for op in ops:
        out.extend(p.type for p in op.params)
        if op.body is not None:
            out.append(op.body)
        out.extend(op.responses.values())
    return out


def _error_text(op: Operation, code: int) -> str:
    """The description of problem status ``code`` on ``op``."""
    if code == 403 and not op.public and op.method not in ("GET", "HEAD"):
        return _FORBIDDEN_WRITE
    return _ERRORS[code]


def openapi_document(ops: Sequence[Operation] = OPERATIONS) -> dict[str, Any]:
    """The daemon's OpenAPI document for ``ops`` (schemathesis checks the daemon against it)."""
    documented = [op for op in ops if op.operation_id]
    types = _types(documented)
    refs, components = msgspec.json.schema_components(types, ref_template=REF_TEMPLATE)
    for t in OPEN_COMPONENTS:  # msgspec has no way to say so on the struct itself
        components[t.__name__]["additionalProperties"] = True
    schema_of = iter(refs[len(COMPONENTS) :])
    problem_ref = refs[COMPONENTS.index(ProblemDoc)]
    paths: dict[str, dict[str, Any]] = {}
    for op in documented:
        entry: dict[str, Any] = {"operationId": op.operation_id, "summary": op.summary}
        if op.public:
            entry["security"] = []
        if op.params:
            entry["parameters"] = [
                {"name": p.name, "in": p.where, "required": p.required, "schema": next(schema_of)}
                for p in op.params
            ]
        if op.body is not None:
            entry["requestBody"] = {
                "required": True,
                "content": {op.body_media: {"schema": next(schema_of)}},
            }
        headers = {
            name: {"description": text, "required": True, "schema": {"type": "string"}}
            for name, text in op.headers.items()
        }
        with_headers = {"headers": headers} if headers else {}
        responses: dict[str, Any] = {
            "200": {
                "description": "OK.",
                "content": {media: {"schema": next(schema_of)} for media in op.responses},
                **with_headers,
            }
        }
        for code, text in op.statuses.items():  # bodiless answers (304 Not Modified)
            responses[str(code)] = {"description": text, **with_headers}
        for code in error_statuses(op):  # every problem the route can answer, no other
            responses[str(code)] = {
                "description": _error_text(op, code),
                "content": {PROBLEM: {"schema": problem_ref}},
            }
        entry["responses"] = responses
        paths.setdefault(op.path, {})[op.method.lower()] = entry
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "creative-memory daemon",
            "version": __version__,
            "description": "Local HTTP API of creative-memory (docs/http.md). Every route but "
            "/healthz acts for the user of the bearer token (or the page's session cookie). "
            "Errors are application/problem+json documents (RFC 9457).",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}, {"session": []}],
        "paths": paths,
        "components": {"securitySchemes": _SECURITY_SCHEMES, "schemas": components},
    }
