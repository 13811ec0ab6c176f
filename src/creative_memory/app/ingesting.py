"""Host events fed through the capture layer for one acting user, judged one by one, with
the report every surface renders (``MemoryService.ingest``; docs/cli.md, "Feeding
events: ingest")."""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Callable, Iterable
from typing import Any

from creative_memory.app.results import (
    IngestInput,
    IngestInterrupted,
    IngestItem,
    IngestResult,
    IngestStopped,
)
from creative_memory.app.store import MemoryStore
from creative_memory.capture.layer import CaptureLayer, CaptureReport
from creative_memory.engine.errors import StorageError
from creative_memory.engine.events import validate_user_id
from creative_memory.engine.timeutil import try_parse_ts


def ingest_items(
    store: MemoryStore,
    user_id: str,
    items: Iterable[IngestInput],
    layer: CaptureLayer,
    *,
    now_ms: int | None = None,
    close: bool = False,
    progress: Callable[[int], None] | None = None,
    sync_every: int = 0,
) -> IngestResult:
    """``MemoryService.ingest``: the items through ``layer`` for ``user_id``, a bad one
    rejected with its reason; an interrupt stops it between two items
    (:class:`IngestInterrupted`). ``sync_every``: the appends of every so many items are
    made durable together (the file store's deferred sync: docs/storage.md, "One fsync for
    a batch"), each batch before the next begins and the last before it returns or
    raises; 0: each append on its own."""
    validate_user_id(user_id)  # the acting user
    rows: list[IngestItem] = []
    redactions: dict[str, int] = {}
    located = 0

    def absorb(report: CaptureReport, where: str | None) -> None:
        for r in report.results:
            rows.append(
                IngestItem(
                    where=where if r.index is not None else None,
                    event=r.event,
                    status=r.status,
                    reason=r.reason,
                    artifact_id=r.artifact_id,
                )
            )
        for k, v in report.redactions.items():
            redactions[k] = redactions.get(k, 0) + v

    def take(item: IngestInput) -> None:
        reason = item.error or _precheck(item.value, user_id)
        if reason is not None:
            value = item.value if isinstance(item.value, dict) else {}
            name, art = value.get("event"), value.get("artifact_id")
            rows.append(
                IngestItem(
                    where=item.where,
                    event=name if isinstance(name, str) else "?",
                    status="rejected",
                    reason=reason,
                    artifact_id=art if isinstance(art, str) else None,
                )
            )
        else:
            at = now_ms
            if at is None:
                ts = item.value.get("timestamp")
                parsed = try_parse_ts(ts) if isinstance(ts, str) else None
                at = store.now_ms() if parsed is None else parsed
            absorb(layer.submit(item.value, at), item.where)
        if progress is not None:
            progress(1)

    def block() -> contextlib.AbstractContextManager[Any]:
        return store._states.deferred_appends() if sync_every else contextlib.nullcontext()

    interrupted = False
    failure: StorageError | None = None
    in_hand = False
    pending = iter(items)
    try:
        while True:
            with block():  # made durable when it ends, also when it raises
                taken = 0
                for item in itertools.islice(pending, sync_every or None):
                    located += 1
                    taken += 1
                    in_hand = True
                    take(item)
                    in_hand = False
            if not sync_every or taken < sync_every:
                break
    except KeyboardInterrupt:
        interrupted = True
    except StorageError as exc:
        failure = exc
        located -= in_hand  # the item in hand did not land
    if close and failure is None:
        with block():
            absorb(layer.close(), None)

    def count(status: str, located_only: bool = False) -> int:
        return sum(r.status == status and (not located_only or r.where is not None) for r in rows)

    settings = store.get_settings(user_id)
    result = IngestResult(
        user_id=user_id,
        events=located,
        accepted=count("accepted", True),
        coalesced=count("coalesced", True),
        rejected=count("rejected"),
        flushed=count("flushed"),
        failed=count("failed"),
        inferred=count("inferred"),
        learning=store._learning(settings),
        redactions=dict(sorted(redactions.items())),
        results=rows,
    )
    if interrupted:
        raise IngestInterrupted(result)
    if failure is not None:
        raise IngestStopped(result, failure) from failure
    return result


def _precheck(value: object, user_id: str) -> str | None:
    """An event must be an object for the acting user (the capture layer checks the rest)."""
    if not isinstance(value, dict):
        return "not a JSON object"
    owner = value.get("user_id")
    if owner == user_id:
        return None
    if owner is None:
        return f"user_id is missing (this call acts for {json.dumps(user_id)}; set it explicitly)"
    return f"user_id {json.dumps(owner)} is not the acting user {json.dumps(user_id)}"
