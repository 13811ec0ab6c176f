"""The evidence timeline of a pattern: the events of its bucket that are evidence about it,
straight from the log (pure; no derivation).

``explain`` (:mod:`creative_memory.engine.explain`) tells what each event did to the records,
which under a fitting version means fitting the bucket before and after each of them — a
second or more on a long history. A timeline only lists the events: what they were, when,
and which way they pointed (a signal's polarity; a comparison's side: the chosen side is
``positive``, the rejected one ``negative``, ``None`` when the pattern is on both). The
page draws one for every card on screen (docs/daemon.md, "The Settings → Memory page")."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from creative_memory.engine.events import (
    ComparisonEvent,
    ComparisonSide,
    Event,
    LegacyRecordEvent,
    SignalEvent,
    mentions,
)


class TimelineEvent(msgspec.Struct, kw_only=True):
    """One event of evidence about the pattern."""

    seq: int
    at: str
    #: the event's kind: ``signal``, ``comparison`` or ``legacy_record``
    kind: str
    signal_type: str | None = None
    #: which way the event points for the pattern (see the module docstring)
    polarity: str | None = None


class Timeline(msgspec.Struct, kw_only=True):
    """The evidence about one (type, pattern) in one bucket, oldest first."""

    preference_type: str
    pattern: str
    project_id: str | None
    events: list[TimelineEvent]
    #: for a timeline up to a point in the past, that point (``at_seq``, ``recorded_at``,
    #: ``derivation_version``, ``events``: set by the application service); ``None`` for now
    as_of: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The timeline as JSON-ready data (``as_of`` only for a point in the past)."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        if out["as_of"] is None:
            del out["as_of"]
        return out


def _side(ev: ComparisonEvent, preference_type: str, pattern: str) -> str | None:
    """``positive`` when only the chosen side names the pattern, ``negative`` when only
    the rejected one does, else ``None``."""

    def named(side: ComparisonSide) -> bool:
        return any(
            f.preference_type == preference_type and f.pattern == pattern for f in side.features
        )

    chose, over = named(ev.chose), named(ev.over)
    if chose == over:
        return None
    return "positive" if chose else "negative"


def timeline(
    events: Iterable[Event], preference_type: str, pattern: str, project_id: str | None = None
) -> Timeline:
    """The events of ``events`` that are evidence about (type, pattern) in the bucket of
    ``project_id`` (``None``: global), as :class:`TimelineEvent` items."""
    out: list[TimelineEvent] = []
    for ev in events:
        if not mentions(ev, preference_type, pattern, project_id):
            continue
        signal_type: str | None = None
        polarity: str | None
        if isinstance(ev, SignalEvent):
            kind, signal_type, polarity = "signal", ev.signal_type, ev.polarity
        elif isinstance(ev, ComparisonEvent):
            kind, polarity = "comparison", _side(ev, preference_type, pattern)
        else:
            assert isinstance(ev, LegacyRecordEvent)  # the third kind mentions() names
            said = ev.record.get("polarity")
            kind, polarity = "legacy_record", said if isinstance(said, str) else None
        out.append(
            TimelineEvent(
                seq=ev.seq, at=ev.at, kind=kind, signal_type=signal_type, polarity=polarity
            )
        )
    return Timeline(
        preference_type=preference_type, pattern=pattern, project_id=project_id, events=out
    )


__all__ = ["Timeline", "TimelineEvent", "timeline"]
