"""Judging a host event before it is delivered: what delivering it would refuse, with
nothing written (docs/capture.md, "Capture rules")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from creative_memory.capture.adapter import Event, Handler
from creative_memory.engine.events import ComparisonEvent, build_signal_event
from creative_memory.engine.ids import validate_user_id
from creative_memory.engine.models import Preference
from creative_memory.engine.timeutil import format_ts


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
        return [None] * len(signals)

    def append_comparison(self, user_id: str, event: ComparisonEvent) -> bool:
        validate_user_id(user_id)
        return False


def check_event(handler: Handler, event: Event, now_ms: int) -> None:
    """Raise the :class:`ValidationError` that delivering ``event`` through ``handler``
    while learning would raise, writing nothing: for a rule that must judge an event before
    it is delivered (the thumbs debounce, docs/capture.md)."""
    handler(_Checked(now_ms), event, records=False)
