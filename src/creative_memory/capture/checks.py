"""The checks the capture rules make of one event before it is held or delivered
(docs/capture.md, "Capture rules"): a trigger that counts, and, for an event the layer
holds or must judge before it is delivered (an edit-save, a generation, a thumbs click),
what delivering it would refuse — the adapter's checks and the store's validators, judged
with nothing written (:func:`check_event`). A failed check is a :class:`Rejected` with the
reason the report gives."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from creative_memory.capture.adapter import Event, Handler
from creative_memory.engine.errors import ValidationError
from creative_memory.engine.events import (
    ComparisonEvent,
    build_refinement_event,
    build_signal_event,
)
from creative_memory.engine.ids import validate_user_id
from creative_memory.engine.models import Preference
from creative_memory.engine.text import PREVIEW_CHARS, preview
from creative_memory.engine.timeutil import format_ts


class Rejected(Exception):
    """An event the capture rules do not take, and why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def short(value: object) -> str:
    """A value as a reason quotes it: its repr, of a short prefix when it is long."""
    if isinstance(value, str) and len(value) > PREVIEW_CHARS:
        return f"{value[:PREVIEW_CHARS]!r}… ({len(value)} characters)"
    return repr(value) if isinstance(value, str) else preview(value)


def check_trigger(trigger: object, default: str, allowed: frozenset[str], kind: str) -> None:
    """Reject ``kind`` unless its ``trigger`` (``default`` when absent) is ``allowed``."""
    t = default if trigger is None else trigger
    if not isinstance(t, str):
        raise Rejected(f"{kind}: trigger must be a string, got {type(t).__name__}")
    if t not in allowed:
        raise Rejected(
            f"{kind} is not captured from trigger {short(t)}; allowed: {', '.join(sorted(allowed))}"
        )


class _Checked:
    """A :class:`SignalSink` that validates what a handler hands it, as a store does before
    it appends (the user id, then every signal), and keeps nothing."""

    def __init__(self, now_ms: int) -> None:
        self._now = now_ms

    def now_ms(self) -> int:
        return self._now

    def ingest_signals(
        self,
        user_id: str,
        signals: Sequence[Mapping[str, Any]],
        *,
        refinement: Mapping[str, Any] | None = None,
        records: bool = True,
    ) -> list[Preference | None]:
        validate_user_id(user_id)
        recorded_at = format_ts(self._now)
        for signal in signals:
            build_signal_event(signal, self._now, recorded_at)
        if refinement is not None:
            build_refinement_event(refinement, recorded_at)
        return [None] * len(signals)

    def append_comparison(self, user_id: str, event: ComparisonEvent) -> bool:
        validate_user_id(user_id)
        return False


def check_event(handler: Handler, event: Event, now_ms: int) -> None:
    """:class:`Rejected`, with the message of the :class:`ValidationError` (naming the
    field), when delivering ``event`` through ``handler`` while learning and logging would
    fail; writes nothing. For a rule that must judge an event before it is delivered: the
    thumbs debounce, and every event the layer holds (an edit-save before it joins a
    window, a generation before it may be inferred abandoned: docs/capture.md, "Limits")."""
    try:
        handler(_Checked(now_ms), event, records=False)
    except ValidationError as exc:
        raise Rejected(str(exc)) from exc
