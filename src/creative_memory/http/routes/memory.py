"""Reading and erasing memory (docs/daemon.md, "HTTP API"): inspect, explain, timeline, forget,
reset; and checking and repairing a damaged log (docs/storage.md, "Check and repair")."""

from __future__ import annotations

import logging
from typing import Literal

from starlette.requests import Request
from starlette.responses import Response

from creative_memory.app.service import CheckResult, ForgetResult, RepairResult, ResetResult
from creative_memory.engine.explain import Explanation
from creative_memory.engine.timeline import Timeline
from creative_memory.http.jsonlog import log_event
from creative_memory.http.routes.common import (
    ETAG_HEADERS,
    IF_NONE_MATCH,
    JSON,
    JSON_BODY,
    NOT_MODIFIED,
    POINT,
    Operation,
    Param,
    conditional,
    daemon,
    encode,
    point_query,
    project_query,
    read_struct,
    type_and_pattern,
)
from creative_memory.http.schemas import (
    MemoryView,
    PathSegment,
    ProjectParam,
    RepairRequest,
    ResetRequest,
)

_PROJECT = Param("project_id", "query", ProjectParam)
_TYPE_PATTERN = (
    Param("preference_type", "path", PathSegment, required=True),
    Param("pattern", "path", PathSegment, required=True),
)


async def get_memory(request: Request) -> Response:
    """GET /api/v1/memory: MemoryService.inspect for the token's user (conditional)."""
    d = daemon(request)
    user = d.auth.authenticate(request)
    project_id = project_query(request)
    at_seq, as_of = point_query(request)
    doc = await d.run(
        d.timed, "inspect", user, project_id,
        lambda: d.service.inspect(user, project_id, at_seq=at_seq, as_of=as_of),
    )  # fmt: skip
    return conditional(request, encode(doc))


async def get_explain(request: Request) -> Response:
    """GET /api/v1/explain/{type}/{pattern}: MemoryService.explain (404 when unknown)."""
    return await _about_pattern(request, "explain")


async def get_timeline(request: Request) -> Response:
    """GET /api/v1/timeline/{type}/{pattern}: MemoryService.timeline (404 when unknown)."""
    return await _about_pattern(request, "timeline")


async def _about_pattern(request: Request, op: Literal["explain", "timeline"]) -> Response:
    """``GET /api/v1/{op}/{type}/{pattern}?project_id=&at_seq=&as_of=``: the service's
    ``op`` for the token's user, in the thread pool."""
    d = daemon(request)
    user = d.auth.authenticate(request)
    ptype, pattern = type_and_pattern(request, f"/api/v1/{op}/")
    project_id = project_query(request)
    at_seq, as_of = point_query(request)
    read = d.service.explain if op == "explain" else d.service.timeline
    result = await d.run(lambda: read(user, ptype, pattern, project_id, at_seq=at_seq, as_of=as_of))
    return encode(result)


async def delete_preference(request: Request) -> Response:
    """DELETE /api/v1/preferences/{type}/{pattern}: MemoryService.forget (idempotent)."""
    d = daemon(request)
    user = d.auth.authenticate(request)
    ptype, pattern = type_and_pattern(request, "/api/v1/preferences/")
    project_id = project_query(request)
    result = await d.run(d.service.forget, user, ptype, pattern, project_id)
    log_event(logging.INFO, "forgot", user=user, events_removed=result.events_removed,
              project_id=project_id)  # fmt: skip
    return encode(result)


async def post_reset(request: Request) -> Response:
    """POST /api/v1/reset: MemoryService.reset."""
    d = daemon(request)
    user = d.auth.authenticate(request)
    body = await read_struct(request, ResetRequest)
    result = await d.run(lambda: d.service.reset(user, body.scope, confirm=body.confirm))
    log_event(logging.INFO, "reset", user=user, scope=body.scope,
              events_removed=result.events_removed)  # fmt: skip
    return encode(result)


async def get_check(request: Request) -> Response:
    """GET /api/v1/check: MemoryService.check — what is wrong with the stored log and
    settings; writes nothing (docs/storage.md, "Check and repair")."""
    d = daemon(request)
    user = d.auth.authenticate(request)
    return encode(await d.run(d.service.check, user))


async def post_repair(request: Request) -> Response:
    """POST /api/v1/repair: MemoryService.repair (needs confirm). No ``save_dropped``: the
    body names no path on the daemon's disk (docs/storage.md, "Check and repair")."""
    d = daemon(request)
    user = d.auth.authenticate(request)
    body = await read_struct(request, RepairRequest)
    result = await d.run(lambda: d.service.repair(user, confirm=body.confirm))
    log_event(logging.INFO, "repaired", user=user, repaired=result.repaired,
              events_kept=result.events_kept, events_dropped=result.events_dropped,
              events_renumbered=result.events_renumbered)  # fmt: skip
    return encode(result)


OPERATIONS = (
    Operation(
        "GET", "/api/v1/memory", get_memory, "inspect",
        "Everything in the user's memory (MemoryService.inspect).",
        params=(_PROJECT, *POINT, IF_NONE_MATCH), responses={JSON: MemoryView},
        headers=ETAG_HEADERS, statuses=NOT_MODIFIED,
    ),
    Operation(
        "DELETE", "/api/v1/preferences/{preference_type}/{pattern}", delete_preference,
        "forget", "Forget a pattern: erase every raw event about it (0 when there was none).",
        route_path="/api/v1/preferences/{rest:segments}", params=(*_TYPE_PATTERN, _PROJECT),
        responses={JSON: ForgetResult},
    ),
    Operation(
        "GET", "/api/v1/explain/{preference_type}/{pattern}", get_explain, "explain",
        "The derivation trace of a pattern (the page's 'Why?').",
        route_path="/api/v1/explain/{rest:segments}", params=(*_TYPE_PATTERN, _PROJECT, *POINT),
        responses={JSON: Explanation}, errors=(404,),
    ),
    Operation(
        "GET", "/api/v1/timeline/{preference_type}/{pattern}", get_timeline, "timeline",
        "The events of evidence about a pattern, from the log without deriving (the page's "
        "evidence timelines).",
        route_path="/api/v1/timeline/{rest:segments}", params=(*_TYPE_PATTERN, _PROJECT, *POINT),
        responses={JSON: Timeline}, errors=(404,),
    ),
    Operation(
        "POST", "/api/v1/reset", post_reset, "reset",
        "Erase memory (all, global or one project); needs confirm.",
        body=ResetRequest, responses={JSON: ResetResult}, errors=JSON_BODY,
    ),
    Operation(
        "GET", "/api/v1/check", get_check, "check",
        "What is wrong with the user's stored log and settings (MemoryService.check); "
        "writes nothing.",
        responses={JSON: CheckResult},
    ),
    Operation(
        "POST", "/api/v1/repair", post_repair, "repair",
        "Rewrite a damaged log without what is not an event (MemoryService.repair); needs "
        "confirm.",
        body=RepairRequest, responses={JSON: RepairResult}, errors=JSON_BODY,
    ),
)  # fmt: skip
