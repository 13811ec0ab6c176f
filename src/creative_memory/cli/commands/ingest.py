"""``ingest``: host events from a file or stdin through the capture layer (docs/cli.md)."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import click
import msgspec

from creative_memory.cli.context import State, command
from creative_memory.cli.errors import Interrupted, OneLineError, one_line
from creative_memory.cli.render import (
    PROGRESS_MIN_EVENTS,
    emit_json,
    note,
    plural,
    progress,
    safe,
)

if TYPE_CHECKING:
    from creative_memory.app.service import IngestInput, IngestItem, IngestResult


class Parsed(NamedTuple):
    """The events of an input: how many, and each with its location, decoded as it is
    taken (JSON lines are not all held decoded at once: a large file's events would take
    some ten times its size)."""

    events: int
    items: Iterable[IngestInput]


def parse_events(data: bytes) -> list[IngestInput]:
    """:func:`read_events`, every event decoded."""
    return list(read_events(data).items)


def read_events(data: bytes) -> Parsed:
    """One JSON object, a JSON array of objects, or JSON lines (blank lines skipped), each
    with its location; a line that does not decode carries the reason instead. Every
    document and every line is decoded by the rule the HTTP API applies to a request body
    (:func:`~creative_memory.engine.jsontext.decode_json`, docs/capture.md, "One JSON
    rule"): a byte order mark before it ignored, nested at most 64 levels, no ``NaN``, a
    number too large to hold read as infinity and judged with its event."""
    from creative_memory.app.service import IngestInput
    from creative_memory.engine.jsontext import JsonTextError, decode_json

    refused: JsonTextError | None = None
    if data.strip():
        try:
            whole = decode_json(data)
        except JsonTextError as exc:
            refused = exc  # JSON lines, or a document that is not JSON: judged line by line
        else:
            if isinstance(whole, list):
                items = [IngestInput(where=f"item {i}", value=v) for i, v in enumerate(whole, 1)]
                return Parsed(len(items), items)
            single = "line 1" if data.strip().count(b"\n") == 0 else "event"
            return Parsed(1, [IngestInput(where=single, value=whole)])
    lines = sum(1 for raw in data.split(b"\n") if _holds_text(raw))

    def decoded(raw: bytes, n: int) -> IngestInput:
        try:
            return IngestInput(where=f"line {n}", value=decode_json(raw))
        except JsonTextError as exc:
            return IngestInput(where=f"line {n}", error=exc.reason)

    def each() -> Iterator[IngestInput]:
        for n, raw in enumerate(data.split(b"\n"), 1):
            if _holds_text(raw):
                yield decoded(raw, n)

    if refused is not None and lines > 1 and _one_document(each()):
        # one document spread over lines (pretty-printed) that is not JSON: refused once,
        # where its decoder stopped — not fragment by fragment
        return Parsed(1, [IngestInput(where="the document", error=refused.reason)])
    return Parsed(lines, each())


def _holds_text(raw: bytes) -> bool:
    return bool(raw.removeprefix(b"\xef\xbb\xbf").strip())


def _one_document(lines: Iterator[IngestInput]) -> bool:
    """Whether lines judged one by one read as fragments of one document: none decodes on
    its own and the first ends early (an opening ``[`` or ``{`` alone); JSON lines whose
    every line is bad keep a reason per line. Stops at the first line that says no."""
    first = next(lines).error or ""
    return first.startswith("not valid JSON (JSON ends early") and all(
        i.error is not None for i in lines
    )


@command(
    epilog="""\b
Examples:
  creative-memory ingest events.jsonl
  host-tool --emit-events | creative-memory ingest -
  creative-memory ingest batch.json --json | jq '.results[] | select(.status=="rejected")'
Wire format (one per line): {"event": "thumbs_rated", "user_id": "alice",
  "artifact_id": "a1", "session_id": "s1", "project_id": null,
  "timestamp": "2026-03-01T10:00:00Z", "rating": "down",
  "artifact_meta": {"signals": [{"preference_type": "color", "pattern": "neon_palette"}]}}
""",
)
@click.argument(
    "source",
    metavar="[FILE|-]",
    default="-",
    type=click.Path(exists=True, dir_okay=False, allow_dash=True),
)
def ingest(state: State, source: str) -> None:
    """Feed host events (wire format: the adapter event plus "event" naming the handler)
    through the capture layer: coalescing, debouncing, redaction.

    Input: one JSON object, a JSON array, or JSON lines. Each event's own timestamp is its
    capture time (edit-saves of an artifact within 30 s coalesce; repeated thumbs within
    2 s count once); pending edit-saves are delivered at the end. A bad line never stops
    the rest. Events for another user are rejected (the CLI acts for one user). Exit 1 if
    any event was rejected, after processing all of them. Ctrl-C stops it between two
    events: what was read is stored and reported, and it exits 130."""
    from creative_memory.app.service import IngestInterrupted, IngestStopped
    from creative_memory.capture.layer import CaptureLayer

    user = state.user
    service = state.service
    if source == "-":
        if sys.stdin.isatty():
            note("Reading events from the terminal; end with Ctrl-D.")
        data = sys.stdin.buffer.read()
        label = "stdin"
    else:
        data = Path(source).read_bytes()
        label = source
    count, items = read_events(data)
    layer = CaptureLayer(service.store)
    total = count if count >= PROGRESS_MIN_EVENTS else None
    held = HeldInterrupt()
    with (
        progress(f"Ingesting {count} events", total, quiet=state.quiet) as advance,
        held.installed(),
    ):

        def step(n: int) -> None:
            advance(n)
            held.done()

        stopped: Stopped | None = None
        try:
            result = service.ingest(
                user, held.items(items), layer, close=True, progress=step, sync_every=SYNC_EVERY
            )
        except (IngestInterrupted, IngestStopped) as exc:
            result = exc.result
            where = held.last.where if held.last is not None else None
            why = None if isinstance(exc, IngestInterrupted) else one_line(exc)
            stopped = Stopped(where, count - result.events, why)
    _report(state, result, label, stopped)


class Stopped(NamedTuple):
    """Where an ingest stopped before its end: ``where`` the item taken last (stored when
    interrupted, not stored when storage failed: ``error``), ``unread`` how many items are
    not stored from there on."""

    where: str | None
    unread: int
    error: str | None  # the storage failure; None: interrupted (Ctrl-C)


#: How many events an ingest makes durable together: one fsync each (a report comes only
#: at the end, so one per event bought nothing), and a bounded batch held in memory.
SYNC_EVERY = 1000


class HeldInterrupt:
    """Ctrl-C during an ingest waits for the event in hand to be stored and reported, then
    stops it between two events (``MemoryService.ingest`` delivers what is pending); a
    second Ctrl-C stops at once."""

    def __init__(self) -> None:
        self.busy = False
        self.pending = False
        self.last: IngestInput | None = None  # the item taken last

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """This object as the SIGINT handler (in the main thread; elsewhere nothing)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.signal(signal.SIGINT, self._handle)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    def _handle(self, signum: int, frame: object) -> None:
        if self.busy and not self.pending:
            self.pending = True
            return
        raise KeyboardInterrupt

    def items(self, items: Iterable[IngestInput]) -> Iterator[IngestInput]:
        """``items``, each marked in hand until :meth:`done`."""
        for item in items:
            self.busy = True
            self.last = item
            yield item

    def done(self) -> None:
        """The item in hand is done: a Ctrl-C held back meanwhile stops the ingest here."""
        self.busy = False
        if self.pending:
            raise KeyboardInterrupt


def _report(
    state: State,
    result: IngestResult,
    label: str,
    stopped: Stopped | None = None,
) -> None:
    """Print the report; ``stopped``: where an ingest stopped before its end — then exit
    130 (interrupted) or 1 (storage failed)."""
    rows = result.results
    problems = [r for r in rows if r.status in ("rejected", "failed")]
    if state.json:
        doc = msgspec.to_builtins(result)
        extra: dict[str, object] = {}
        if stopped is not None and stopped.error is None:
            extra["interrupted"] = {"after": stopped.where, "unread": stopped.unread}
        elif stopped is not None:
            extra["storage_failed"] = {
                "at": stopped.where,
                "not_stored": stopped.unread,
                "error": stopped.error,
            }
        emit_json(
            {
                "user_id": doc["user_id"],
                "source": label,
                **{k: v for k, v in doc.items() if k != "user_id"},
                **extra,
            }
        )
    else:
        summary = (
            f"accepted {result.accepted}, coalesced {result.coalesced}, rejected {result.rejected}"
        )
        if result.failed:
            summary += f", failed {result.failed}"
        click.echo(
            f"Ingested {plural(result.events, 'event')} from {safe(label)} for {result.user_id}: "
            f"{summary}"
        )
        for r in rows:
            if r.status in ("rejected", "coalesced", "failed", "inferred"):
                where = r.where or (f"artifact {r.artifact_id}" if r.artifact_id else "pending")
                kind = f" ({safe(r.event)})" if r.event != "?" else ""
                click.echo(f"  {safe(where)}: {safe(r.status)}{kind}: {safe(r.reason)}")
        if result.flushed:
            click.echo(f"  {plural(result.flushed, 'coalesced edit-save')} delivered")
        if not result.learning:
            enabled = state.service.settings(result.user_id).memory_enabled
            why = "paused" if enabled else "disabled"
            click.echo(
                f"Note: memory is {why} for {result.user_id}; accepted events were not learned."
            )
    if stopped is not None and stopped.error is None:
        after = safe(stopped.where) if stopped.where else "the start"
        raise Interrupted(
            f"interrupted after {after}: {plural(stopped.unread, 'event')} after it not read; "
            "what was read is stored as reported"
        )
    if stopped is not None:
        raise OneLineError(
            f"{stopped.error} — stopped at {safe(stopped.where or 'the start')}: it and the "
            f"{plural(stopped.unread - 1, 'event')} after it are not stored; what came before "
            "is stored as reported (pending edit-saves were not delivered)"
        )
    if problems:
        noun = "event" if len(problems) == 1 else "events"
        locations = safe(_locations(problems))
        raise click.ClickException(f"{len(problems)} {noun} not stored ({locations})")


def _locations(rows: list[IngestItem]) -> str:
    """``lines 2, 3, 7`` / ``items 1, 4`` / a mixed list of locations."""
    wheres = [r.where or f"artifact {r.artifact_id}" for r in rows]
    for unit in ("line", "item"):
        if all(w.startswith(f"{unit} ") for w in wheres):
            numbers = ", ".join(w.split(" ", 1)[1] for w in wheres)
            return f"{unit}{'s' if len(wheres) != 1 else ''} {numbers}"
    return ", ".join(wheres)


COMMANDS = (ingest,)
