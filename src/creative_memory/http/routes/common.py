"""What every route shares (docs/http.md, "Layout"): the operation table entry each route
module publishes (app.py mounts it, openapi.py documents it), and parsing a request into
Python values — the JSON body into a typed Struct, query and path parameters — and the
conditional GET of what the page polls (``conditional``: ETag / If-None-Match → 304)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar
from urllib.parse import unquote

import msgspec
from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import Request
from starlette.responses import Response

from creative_memory.engine.errors import struct_error_field
from creative_memory.engine.jsontext import MAX_JSON_DEPTH, JsonTextError, decode_json
from creative_memory.http.problems import Problem, invalid, not_found
from creative_memory.http.schemas import AsOfParam, AtSeqParam
from creative_memory.http.state import Daemon

T = TypeVar("T")
Endpoint = Callable[[Request], Awaitable[Response]]
JSON: Final = "application/json"
TEXT: Final = "text/plain"


@dataclass(frozen=True)
class Param:
    """A documented query or path parameter; ``type`` is its msgspec type."""

    name: str
    where: str  # "query" | "path" | "header"
    type: Any
    required: bool = False


class _Segments(Convertor[str]):
    """``{rest:segments}``: the rest of the path, line breaks included (Starlette's ``path``
    stops at one), so a pattern holding a percent-encoded one reaches its route, which
    names the field, instead of no route at all."""

    regex = "[\\s\\S]*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("segments", _Segments())


@dataclass(frozen=True)
class Operation:
    """One route: how Starlette mounts it and what the OpenAPI document says about it."""

    method: str
    path: str  # the OpenAPI path template
    endpoint: Endpoint
    operation_id: str = ""  # empty: not in the OpenAPI document (the page's routes)
    summary: str = ""
    route_path: str = ""  # the Starlette path when it differs from ``path``
    params: tuple[Param, ...] = ()
    body: Any = None  # the request body's msgspec type
    body_media: str = JSON
    responses: Mapping[str, Any] = field(default_factory=dict)  # media type → msgspec type
    errors: tuple[int, ...] = ()  # what the handler itself answers: see ``error_statuses``
    public: bool = False  # no credentials needed
    headers: Mapping[str, str] = field(default_factory=dict)  # response header → description
    statuses: Mapping[int, str] = field(default_factory=dict)  # bodiless answers (304)


#: Problem statuses any request can get, whatever its route (docs/http.md, "Errors"): the
#: ``Host`` check (``HostGuard``: 403), the body limit, checked on ``Content-Length`` before
#: routing (``BodyLimit``: 413 — on a ``GET`` too), and an unexpected failure (500).
#: (``BodyLimit``'s 400 for a ``Content-Length`` that is not a number never reaches the
#: app through uvicorn, whose parser answers such a request itself.)
EVERY_REQUEST: Final = (403, 413, 500)
#: What a route that needs credentials adds (``Authenticator.authenticate``): 401, and 403
#: for a cookie-authenticated write without the CSRF header.
AUTHENTICATED: Final = (401, 403)
#: What parsing a parameter can answer, by where it is: a query parameter given twice or
#: refused (``query``, ``point_query``, the service) is a 422; a ``{type}/{pattern}`` path
#: (``type_and_pattern``) is 404 when it is not two segments, 400 when a segment is not
#: UTF-8 once decoded, 422 when one is empty or refused by the service.
PARAM_ERRORS: Final[Mapping[str, tuple[int, ...]]] = {
    "query": (422,),
    "path": (400, 404, 422),
    "header": (),
}
#: What a JSON body read with ``read_json`` / ``read_struct`` can answer: 415 not JSON,
#: 400 empty or not parseable, 422 too deep, a wrong key, or refused by the service.
JSON_BODY: Final = (400, 415, 422)


def error_statuses(op: Operation) -> tuple[int, ...]:
    """Every problem status ``op`` can answer, in order: what every request can get, 401 /
    403 unless public, what its parameters' parsing can answer, and its own ``errors``
    (the body's, the service's: 404 nothing to explain, 503 shutting down). The OpenAPI
    document declares exactly these (tests/test_openapi_statuses.py provokes each)."""
    out = set(EVERY_REQUEST)
    if not op.public:
        out.update(AUTHENTICATED)
    for p in op.params:
        out.update(PARAM_ERRORS[p.where])
    out.update(op.errors)
    return tuple(sorted(out))


def daemon(request: Request) -> Daemon:
    """The :class:`Daemon` serving this request."""
    d: Daemon = request.app.state.daemon
    return d


def encode(data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    """A JSON response of any msgspec-encodable value (service results included)."""
    return Response(msgspec.json.encode(data), status, dict(headers or {}), JSON)


#: What a conditional GET declares (docs/http.md, "Conditional requests").
IF_NONE_MATCH: Final = Param("If-None-Match", "header", str)
ETAG_HEADERS: Final = {"ETag": "The entity tag of this answer; send it back in If-None-Match."}
NOT_MODIFIED: Final = {304: "Not modified: If-None-Match names the current entity tag."}


def etag_of(body: bytes) -> str:
    """A strong entity tag of a response body: its BLAKE2b-128 digest, quoted."""
    return '"' + hashlib.blake2b(body, digest_size=16).hexdigest() + '"'


def etag_matches(if_none_match: str | None, tag: str) -> bool:
    """Whether an If-None-Match header names ``tag`` (weak comparison, ``*`` matches)."""
    if if_none_match is None:
        return False
    if if_none_match.strip() == "*":
        return True
    return any(t.strip().removeprefix("W/") == tag for t in if_none_match.split(","))


def conditional(request: Request, response: Response) -> Response:
    """``response`` with its ETag, or a bodiless 304 when If-None-Match already names it."""
    tag = etag_of(bytes(response.body))
    if etag_matches(request.headers.get("if-none-match"), tag):
        return Response(status_code=304, headers={"ETag": tag})
    response.headers["ETag"] = tag
    return response


def check_json_type(request: Request) -> None:
    """415 unless the request body is declared JSON (or not declared at all), in UTF-8 (a
    ``charset`` other than UTF-8 is refused rather than read as UTF-8)."""
    media, *params = (request.headers.get("content-type") or "").split(";")
    media = media.strip().lower()
    if media and media != JSON and not media.endswith("+json"):
        raise _unsupported(f"send JSON (Content-Type: application/json), not {media}")
    for param in params:
        name, _, value = param.partition("=")
        charset = value.strip().strip('"').lower()
        if name.strip().lower() == "charset" and charset not in ("utf-8", "utf8"):
            raise _unsupported(f"send JSON in UTF-8 (charset=utf-8), not charset={charset}")


def _unsupported(detail: str) -> Problem:
    return Problem(
        415, "Unsupported media type", detail, slug="unsupported-media-type", field="content-type"
    )


async def read_json(request: Request) -> Any:
    """The JSON body as Python values, decoded by the one rule every surface applies
    (:func:`~creative_memory.engine.jsontext.decode_json`, docs/capture.md, "One JSON
    rule"): 415 not JSON, 400 empty, not UTF-8 or not JSON (``NaN`` included), 422 nested
    deeper than :data:`MAX_JSON_DEPTH` — measured before decoding, so however deep the
    body, the decoder never recurses past the limit. A number too large to hold is
    infinity, judged where it is used (one event rejected, a settings key named)."""
    check_json_type(request)
    body = await request.body()  # the BodyLimit middleware meters it
    if not body.strip():
        raise invalid("the request body is empty; send a JSON document", "body", 400)
    try:
        return decode_json(body, MAX_JSON_DEPTH)
    except JsonTextError as exc:
        status = 422 if exc.too_deep else 400
        raise invalid(f"the request body is {exc.reason}", "body", status) from None


async def read_struct(request: Request, type_: type[T]) -> T:
    """The JSON body decoded into ``type_``; a wrong or unknown key is a 422 naming it, and
    so is a key an object names twice (``{"confirm": false, "confirm": true}``: which one
    is meant is a guess — JSON leaves it open — and the last one would erase memory)."""
    value = await read_json(request)
    key = _repeated_key(await request.body())
    if key is not None:
        raise invalid(f"the request body names {key!r} more than once in one object", key)
    try:
        return msgspec.convert(value, type_)
    except msgspec.ValidationError as exc:
        raise invalid(str(exc), struct_error_field(str(exc))) from None


def _repeated_key(body: bytes) -> str | None:
    """The first key an object of ``body`` (a JSON text the one rule took, so no deeper
    than the limit) names twice, else ``None``."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for k, v in items:
            if k in seen:
                raise _Repeated(k)
            seen[k] = v
        return seen

    try:
        json.loads(body, object_pairs_hook=pairs)
    except _Repeated as exc:
        return exc.key
    except ValueError:  # the one rule took it; Python's reader is not the judge
        return None
    return None


class _Repeated(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def query(request: Request, name: str) -> str | None:
    """The query parameter ``name`` (given at most once), else ``None``."""
    values = request.query_params.getlist(name)
    if len(values) > 1:
        raise invalid(f"{name} given more than once", name)
    return values[0] if values else None


def query_or(request: Request, name: str, default: str) -> str:
    """The query parameter ``name``, or ``default`` only when it is absent: given but empty
    is a value like any other, for the service to judge (``variant=`` is a 422, not the
    default variant)."""
    value = query(request, name)
    return default if value is None else value


def project_query(request: Request) -> str | None:
    """``?project_id=``: empty or absent means no project."""
    return query(request, "project_id") or None


#: ``at_seq`` / ``as_of``: the past, right after an event or as of a time (docs/time-travel.md).
POINT: Final = (Param("at_seq", "query", AtSeqParam), Param("as_of", "query", AsOfParam))
_EVENT_NUMBER = re.compile(r"-?[0-9]{1,30}")


def point_query(request: Request) -> tuple[int | None, str | None]:
    """``?at_seq=N`` / ``?as_of=TIME`` (docs/time-travel.md): parsed, not judged — a
    negative number, a bad time or both given are the service's to refuse."""
    raw = query(request, "at_seq")
    at_seq: int | None = None
    if raw is not None:
        if _EVENT_NUMBER.fullmatch(raw) is None:
            raise invalid(f"at_seq must be an event number >= 0, got {raw[:40]!r}", "at_seq")
        at_seq = int(raw)
    return at_seq, query(request, "as_of")


def response_format(request: Request) -> str:
    """``?format=text|json`` (default text): how the answer is rendered."""
    fmt = query_or(request, "format", "text")  # given but empty is not one of the two
    if fmt not in ("text", "json"):
        raise invalid(f"format must be one of text, json; got {fmt!r}", "format")
    return fmt


def type_and_pattern(request: Request, prefix: str) -> tuple[str, str]:
    """``{preference_type}/{pattern}`` from the raw path, so ``%2F`` may appear in either."""
    raw = request.scope.get("raw_path")
    path = raw.decode("latin-1") if isinstance(raw, bytes) else request.url.path
    path = path.split("?", 1)[0]
    parts = (path[len(prefix) :] if path.startswith(prefix) else "").split("/")
    if len(parts) != 2:
        raise not_found(f"use {prefix}{{preference_type}}/{{pattern}} (percent-encode '/' as %2F)")
    out: list[str] = []
    for name, part in zip(("preference_type", "pattern"), parts, strict=True):
        try:
            value = unquote(part, errors="strict")
        except UnicodeDecodeError:
            raise invalid(f"{name} is not valid UTF-8 once decoded", name, 400) from None
        if not value:
            raise invalid(f"{name} must be a non-empty string", name)
        out.append(value)
    return out[0], out[1]
