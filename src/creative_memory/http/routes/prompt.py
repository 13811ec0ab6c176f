"""The memory block (docs/prompt-composition.md): alone, or placed in the host's prompt."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from creative_memory.app.service import PromptResult
from creative_memory.http.routes.common import (
    JSON,
    JSON_BODY,
    POINT,
    TEXT,
    Operation,
    Param,
    daemon,
    encode,
    point_query,
    project_query,
    query_or,
    read_struct,
    response_format,
)
from creative_memory.http.schemas import ComposeRequest, FormatParam, ProjectParam, VariantParam


def _render(result: PromptResult, text: str, fmt: str) -> Response:
    if fmt == "json":
        return encode(result)
    return Response(text, media_type="text/plain; charset=utf-8")


async def get_prompt(request: Request) -> Response:
    """GET /api/v1/prompt: MemoryService.prompt, as text (or JSON with format=json)."""
    d = daemon(request)
    user = d.auth.authenticate(request)
    project_id = project_query(request)
    variant = query_or(request, "variant", "generation")
    fmt = response_format(request)
    at_seq, as_of = point_query(request)
    result = await d.read(
        user, at_seq is None and as_of is None, d.timed, "retrieve", user, project_id,
        lambda: d.service.prompt(user, project_id, variant, at_seq=at_seq, as_of=as_of),
    )  # fmt: skip
    return _render(result, result.block, fmt)


async def post_prompt(request: Request) -> Response:
    """POST /api/v1/prompt: MemoryService.compose, the host prompt with the block placed."""
    d = daemon(request)
    user = d.auth.authenticate(request)
    body = await read_struct(request, ComposeRequest)
    project_id = body.project_id or None
    at_seq, as_of = point_query(request)
    result = await d.read(
        user, at_seq is None and as_of is None, d.timed, "retrieve", user, project_id,
        lambda: d.service.compose(
            user, body.host_prompt, project_id, body.variant, at_seq=at_seq, as_of=as_of
        ),
    )  # fmt: skip
    return _render(result, result.prompt or "", body.format)


OPERATIONS = (
    Operation(
        "GET", "/api/v1/prompt", get_prompt, "prompt",
        "The memory block for a project (text, or JSON with format=json).",
        params=(Param("project_id", "query", ProjectParam),
                Param("variant", "query", VariantParam),
                Param("format", "query", FormatParam), *POINT),
        responses={TEXT: str, JSON: PromptResult},
    ),
    Operation(
        "POST", "/api/v1/prompt", post_prompt, "composePrompt",
        "The host's composed system prompt with the memory block inserted (an existing block "
        "is replaced). Text, or JSON with format=json; at_seq / as_of: the block as it was "
        "then.",
        params=POINT, body=ComposeRequest, responses={TEXT: str, JSON: PromptResult},
        errors=JSON_BODY,
    ),
)  # fmt: skip
