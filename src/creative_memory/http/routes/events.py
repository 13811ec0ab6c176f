"""Ingestion (docs/http.md, "Ingestion"): wire-format events through the capture layer."""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import Response

from creative_memory.app.service import IngestInput, IngestResult
from creative_memory.http.config import MAX_BATCH
from creative_memory.http.jsonlog import log_event
from creative_memory.http.problems import invalid, unavailable
from creative_memory.http.routes.common import (
    JSON,
    JSON_BODY,
    Operation,
    daemon,
    encode,
    read_json,
)
from creative_memory.http.schemas import EventsBody


def parse_items(body: object) -> list[IngestInput]:
    """One event object or an array of them, each labelled with where it came from."""
    if isinstance(body, dict):
        return [IngestInput(where="body", value=body)]
    if isinstance(body, list):
        if len(body) > MAX_BATCH:
            raise invalid(f"at most {MAX_BATCH} events per request", "body")
        return [IngestInput(where=f"events[{i}]", value=v) for i, v in enumerate(body)]
    raise invalid("send one event object or an array of event objects", "body")


async def post_events(request: Request) -> Response:
    """POST /api/v1/events: MemoryService.ingest, captured now; answers the per-event report."""
    d = daemon(request)
    user = d.auth.authenticate(request)
    items = parse_items(await read_json(request))
    if d.closed:
        raise unavailable("the daemon is shutting down")

    def work() -> IngestResult:
        try:
            return d.service.ingest(user, items, d.capture, now_ms=d.store.now_ms())
        except RuntimeError as exc:  # the capture layer closed under us: shutting down
            if d.closed:
                raise unavailable(str(exc)) from exc
            raise

    try:
        result = await d.ingest(user, work, events=len(items))
    except RuntimeError as exc:  # the ingest lane closed under us: shutting down
        if d.closed:
            raise unavailable(str(exc)) from exc
        raise
    if result.accepted or result.flushed:
        d.derived(user)  # --derivation background: the worker derives, off this request
    log_event(logging.INFO, "events_ingested", user=user, accepted=result.accepted,
              coalesced=result.coalesced, rejected=result.rejected)  # fmt: skip
    return encode(result)


OPERATIONS = (
    Operation(
        "POST", "/api/v1/events", post_events, "ingestEvents",
        "Ingest one wire-format event or an array of them (at most 1000) through the capture "
        "layer; each event is judged on its own and reported.",
        body=EventsBody, responses={JSON: IngestResult},
        errors=(*JSON_BODY, 503),
    ),
)  # fmt: skip
