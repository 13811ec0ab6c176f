"""The controls (docs/daemon.md, "HTTP API"): read and change a user's settings."""

from __future__ import annotations

import logging

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from creative_memory.app.service import SettingsChange, SettingsView
from creative_memory.http.jsonlog import log_event
from creative_memory.http.routes.common import (
    ETAG_HEADERS,
    IF_NONE_MATCH,
    JSON,
    JSON_BODY,
    NOT_MODIFIED,
    Operation,
    conditional,
    daemon,
    encode,
    read_struct,
)


async def get_settings(request: Request) -> Response:
    """GET /api/v1/settings: MemoryService.settings (conditional)."""
    d = daemon(request)
    user = d.auth.authenticate(request)
    return conditional(request, encode(await d.run(d.service.settings, user)))


async def post_settings(request: Request) -> Response:
    """POST /api/v1/settings: MemoryService.change_settings (only the keys given change)."""
    d = daemon(request)
    user = d.auth.authenticate(request)
    change = await read_struct(request, SettingsChange)
    result = await d.run(d.service.change_settings, user, change)
    keys = sorted(k for k, v in msgspec.structs.asdict(change).items() if v is not msgspec.UNSET)
    log_event(logging.INFO, "settings_changed", user=user, keys=keys)
    return encode(result)


OPERATIONS = (
    Operation(
        "GET", "/api/v1/settings", get_settings, "getSettings", "The user's settings.",
        params=(IF_NONE_MATCH,), responses={JSON: SettingsView},
        headers=ETAG_HEADERS, statuses=NOT_MODIFIED,
    ),
    Operation(
        "POST", "/api/v1/settings", post_settings, "changeSettings",
        "Enable/disable, pause/resume, per-project toggles, diagnostics feed. Only the "
        "fields given change; nothing changes when one is invalid.",
        body=SettingsChange, responses={JSON: SettingsView}, errors=JSON_BODY,
    ),
)  # fmt: skip
