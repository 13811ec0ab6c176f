"""The derivation version (docs/time-travel.md): which one a user's memory uses, switching
it, and previewing a switch before making it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from starlette.requests import Request
from starlette.responses import Response

from creative_memory.app.service import DerivationInfo, PreviewResult, SettingsUpdate
from creative_memory.engine.errors import ValidationError
from creative_memory.http.jsonlog import log_event
from creative_memory.http.problems import invalid
from creative_memory.http.routes.common import (
    JSON,
    JSON_BODY,
    Operation,
    Param,
    daemon,
    encode,
    project_query,
    query,
    read_struct,
)
from creative_memory.http.schemas import DerivationRequest, ProjectParam, VersionParam

T = TypeVar("T")


def _as_version(call: Callable[[], T]) -> T:
    """Run ``call``; the service's ``derivation_version`` is this API's ``version`` key."""
    try:
        return call()
    except ValidationError as exc:
        if exc.field == "derivation_version":
            raise ValidationError("version", str(exc)) from None
        raise


async def get_derivation(request: Request) -> Response:
    """GET /api/v1/derivation: MemoryService.derivation (in force, default, known, history)."""
    d = daemon(request)
    user = d.auth.authenticate(request)
    return encode(await d.run(d.service.derivation, user))


async def post_derivation(request: Request) -> Response:
    """POST /api/v1/derivation: MemoryService.set_derivation_version (reversible)."""
    d = daemon(request)
    user = d.auth.authenticate(request)
    body = await read_struct(request, DerivationRequest)
    result = await d.run(_as_version, lambda: d.service.set_derivation_version(user, body.version))
    if result.changed:
        d.derived(user)
    log_event(logging.INFO, "derivation_version_set", user=user, version=body.version,
              changed=result.changed)  # fmt: skip
    return encode(result)


async def get_preview(request: Request) -> Response:
    """GET /api/v1/derivation/preview?version=V: MemoryService.preview (writes nothing)."""
    d = daemon(request)
    user = d.auth.authenticate(request)
    version = query(request, "version")
    if version is None:
        raise invalid("version is required: the derivation version to preview", "version")
    project_id = project_query(request)
    result = await d.run(_as_version, lambda: d.service.preview(user, version, project_id))
    return encode(result)


OPERATIONS = (
    Operation(
        "GET", "/api/v1/derivation", get_derivation, "derivation",
        "The derivation version in force for the user, the default, the known versions and "
        "the user's switches.",
        responses={JSON: DerivationInfo},
    ),
    Operation(
        "POST", "/api/v1/derivation", post_derivation, "useDerivation",
        "Switch the user's derivation version (reversible; the log is untouched). An "
        "unknown version is a 422 naming `version`.",
        body=DerivationRequest, responses={JSON: SettingsUpdate}, errors=JSON_BODY,
    ),
    Operation(
        "GET", "/api/v1/derivation/preview", get_preview, "previewDerivation",
        "What switching to `version` would change: records, the injected set with reasons, "
        "the generation block. Writes nothing.",
        params=(Param("version", "query", VersionParam, required=True),
                Param("project_id", "query", ProjectParam)),
        responses={JSON: PreviewResult},
    ),
)  # fmt: skip
