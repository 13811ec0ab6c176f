"""Export and import (docs/daemon.md, "HTTP API"): the user's archive down and up."""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import Response

from creative_memory.app.service import ImportResult
from creative_memory.http.jsonlog import log_event
from creative_memory.http.routes.common import (
    JSON,
    Operation,
    Param,
    check_json_type,
    daemon,
    encode,
    query_or,
)
from creative_memory.http.schemas import Archive, ModeParam


async def get_export(request: Request) -> Response:
    """GET /api/v1/export: MemoryService.export_archive, as a download."""
    d = daemon(request)
    user = d.auth.authenticate(request)
    data, result = await d.run(d.service.export_archive, user)
    disposition = f'attachment; filename="{result.filename}"'
    return Response(data, media_type=JSON, headers={"Content-Disposition": disposition})


async def post_import(request: Request) -> Response:
    """POST /api/v1/import?mode=: MemoryService.import_archive of the uploaded archive."""
    d = daemon(request)
    user = d.auth.authenticate(request)
    mode = query_or(request, "mode", "merge")
    check_json_type(request)
    data = await request.body()  # the BodyLimit middleware meters it (max_import_bytes)
    result = await d.run(d.service.import_archive, user, data, mode)
    if result.events_added:
        d.derived(user)
    log_event(logging.INFO, "imported", user=user, mode=mode, events_added=result.events_added)
    return encode(result)


OPERATIONS = (
    Operation(
        "GET", "/api/v1/export", get_export, "export",
        "Download the user's archive (raw events and settings, checksummed).",
        responses={JSON: Archive},
    ),
    Operation(
        "POST", "/api/v1/import", post_import, "import", "Upload an archive (merge or replace).",
        params=(Param("mode", "query", ModeParam),), body=Archive,
        responses={JSON: ImportResult},
        errors=(415, 422),  # read whole, judged by the service: an empty upload is 422
    ),
)  # fmt: skip
