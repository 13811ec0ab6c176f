"""Adapter: host pipeline events → classified signals (docs/engine.md, "Adapter"; docs/capture.md).

Each handler validates the event in the reference's order, then hands all of its signals to
the store in one all-or-nothing append. Handlers return the records the signals created or
updated (``None`` entries while memory is disabled or paused); with ``records=False`` they
only append, deriving nothing (hosts that do not need the records back).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, Protocol

from creative_memory.engine.constants import TAG_POLARITY
from creative_memory.engine.errors import ValidationError
from creative_memory.engine.events import (
    ComparisonEvent,
    ComparisonSide,
    Feature,
    validate_project_id,
)
from creative_memory.engine.models import Preference
from creative_memory.engine.text import (
    MAX_TEXT_LENGTH,
    PREVIEW_CHARS,
    check_name,
    check_optional_text,
    escape_line,
)
from creative_memory.engine.timeutil import format_ts, parse_ts, try_parse_ts

Event = Mapping[str, Any]


class SignalSink(Protocol):
    """What the adapter hands signals to: the app layer's ``MemoryStore`` is one."""

    def now_ms(self) -> int:
        """The store's clock, in epoch milliseconds."""
        ...

    def ingest_signals(
        self,
        user_id: str,
        signals: Sequence[Mapping[str, Any]],
        *,
        refinement: Mapping[str, Any] | None = None,
        records: bool = True,
    ) -> list[Preference | None]:
        """Validate and append the signals all at once; the records when ``records``."""
        ...

    def append_comparison(self, user_id: str, event: ComparisonEvent) -> bool:
        """Store one pairwise comparison; whether it was stored."""
        ...


# JS String.prototype.trim's whitespace set (docs/engine.md, "Adapter").
_JS_WS: Final = (
    "\t\n\x0b\x0c\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def normalise_tag(tag_text: str) -> str:
    """Tag text as ``TAG_POLARITY`` keys it: lower case, trimmed of JavaScript whitespace."""
    return tag_text.lower().strip(_JS_WS)


def _got(value: object, **kw: Any) -> str:
    """``value`` as JSON for an error message: at most a short, escaped prefix of it."""
    text = json.dumps(value, **kw)
    if len(text) > 2 * PREVIEW_CHARS:
        text = f"{text[: 2 * PREVIEW_CHARS]}… ({len(text)} characters)"
    return escape_line(text)


def _js_type(value: object) -> str:
    if value is None or isinstance(value, (Mapping, list)):
        return "object"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return type(value).__name__


def _check_event(event: object) -> Mapping[str, Any]:
    if not isinstance(event, Mapping):
        raise ValidationError("event", "event must be a mapping")
    return event


def _check_user_and_time(event: Event) -> None:
    user_id = event.get("user_id")
    if not isinstance(user_id, str) or not user_id:
        raise ValidationError(
            "user_id", f"event.user_id must be a non-empty string. Got: {_got(user_id)}"
        )
    ts = event.get("timestamp")
    if not isinstance(ts, str) or not ts:
        shown = "undefined" if ts is None and "timestamp" not in event else _got(ts)
        raise ValidationError(
            "timestamp", f"event.timestamp must be a non-empty string. Got: {shown}"
        )
    if try_parse_ts(ts) is None:
        raise ValidationError(
            "timestamp", f"event.timestamp {_got(ts)} is not a valid ISO date string."
        )


def classify(meta: object, field: str = "artifact_meta") -> list[dict[str, str]]:
    """Validate ``artifact_meta`` and return its signal entries (docs/engine.md, "Adapter").

    Each entry's names pass the store's rule (:func:`check_name`) here, so a bad one
    is named as the wire names it, by its index (``artifact_meta.signals[1].pattern``;
    ``over.artifact_meta.signals[0].pattern`` for a side of a comparison)."""
    if meta is None:
        raise ValidationError(
            field,
            f"{field} is required. A null payload indicates a pipeline wiring bug; the "
            "adapter fails fast rather than silently dropping feedback.",
        )
    signals = meta.get("signals") if isinstance(meta, Mapping) else None
    if not isinstance(signals, list):
        got = (
            "undefined"
            if not isinstance(meta, Mapping) or "signals" not in meta
            else _js_type(signals)
        )
        raise ValidationError(
            f"{field}.signals",
            f"{field}.signals must be an array. Got {got}. "
            "Upstream classification is missing or malformed.",
        )
    out: list[dict[str, str]] = []
    for i, entry in enumerate(signals):
        ok = (
            isinstance(entry, Mapping)
            and isinstance(entry.get("pattern"), str)
            and entry["pattern"] != ""
            and isinstance(entry.get("preference_type"), str)
            and entry["preference_type"] != ""
        )
        if not ok:
            raise ValidationError(
                f"{field}.signals[{i}]",
                f'signals[{i}] is malformed. Each entry must have non-empty string "pattern" '
                f'and "preference_type". Got: {_got(entry, default=str)}',
            )
        for name in ("preference_type", "pattern"):
            check_name(f"{field}.signals[{i}].{name}", entry[name], max_length=MAX_TEXT_LENGTH)
        out.append({"preference_type": entry["preference_type"], "pattern": entry["pattern"]})
    return out


def _dispatch(
    store: SignalSink,
    event: Event,
    signal_type: str,
    polarity: str,
    *,
    tag_text: str | None = None,
    refinement: Mapping[str, Any] | None = None,
    records: bool = True,
) -> list[Preference | None]:
    _check_user_and_time(event)
    entries = classify(event.get("artifact_meta"))
    project_id = event.get("project_id") or None
    signals = [
        {
            "signal_type": signal_type,
            "polarity": polarity,
            "pattern": e["pattern"],
            "preference_type": e["preference_type"],
            "tag_text": tag_text,
            "scope": "project" if project_id else "global",
            "project_id": project_id,
            "artifact_id": event.get("artifact_id"),
            "session_id": event.get("session_id"),
            "timestamp": event.get("timestamp"),
        }
        for e in entries
    ]
    return store.ingest_signals(event["user_id"], signals, refinement=refinement, records=records)


def on_generation_accepted(
    store: SignalSink, event: Event, *, records: bool = True
) -> list[Preference | None]:
    """An explicit accept: a ``repeated_acceptance`` signal per classified pattern."""
    return _dispatch(store, _check_event(event), "repeated_acceptance", "positive", records=records)


def on_artifact_edited_and_saved(
    store: SignalSink, event: Event, *, records: bool = True
) -> list[Preference | None]:
    """An edit saved: ``manual_refinement`` signals plus a refinement-log entry."""
    event = _check_event(event)
    diff = event.get("diff")
    refinement = None
    if diff is not None and diff is not False and diff != "" and diff != 0:
        refinement = {
            "artifact_id": event.get("artifact_id"),
            "project_id": event.get("project_id"),
            "diff": diff,
        }
    return _dispatch(
        store, event, "manual_refinement", "positive", refinement=refinement, records=records
    )


def on_explicit_tag_applied(
    store: SignalSink, event: Event, *, records: bool = True
) -> list[Preference | None]:
    """A tag: ``explicit_tag`` signals with the tag's polarity (``TAG_POLARITY``)."""
    event = _check_event(event)
    tag_text = event.get("tag_text")
    polarity = TAG_POLARITY.get(normalise_tag(tag_text)) if isinstance(tag_text, str) else None
    if polarity is None:
        raise ValidationError(
            "tag_text",
            f"tag_text: unrecognized tag {_got(tag_text)}. Known tags: {', '.join(TAG_POLARITY)}.",
        )
    return _dispatch(store, event, "explicit_tag", polarity, tag_text=tag_text, records=records)


def on_thumbs_rated(
    store: SignalSink, event: Event, *, records: bool = True
) -> list[Preference | None]:
    """A thumbs up or down: ``thumbs_up`` / ``thumbs_down`` signals."""
    event = _check_event(event)
    rating = event.get("rating")
    if rating not in ("up", "down"):
        raise ValidationError(
            "rating", f'rating must be exactly "up" or "down". Got: {_got(rating)}'
        )
    if rating == "up":
        return _dispatch(store, event, "thumbs_up", "positive", records=records)
    return _dispatch(store, event, "thumbs_down", "negative", records=records)


def on_generation_abandoned(
    store: SignalSink, event: Event, *, records: bool = True
) -> list[Preference | None]:
    """A discarded generation: ``abandoned_generation`` signals."""
    return _dispatch(
        store, _check_event(event), "abandoned_generation", "negative", records=records
    )


def on_revert_after_edit(
    store: SignalSink, event: Event, *, records: bool = True
) -> list[Preference | None]:
    """A revert to an earlier version: ``revert_after_edit`` signals."""
    return _dispatch(store, _check_event(event), "revert_after_edit", "positive", records=records)


def _side(value: object, field: str) -> ComparisonSide:
    if not isinstance(value, Mapping):
        raise ValidationError(field, f"{field} must be an object with artifact_meta")
    artifact_id = value.get("artifact_id")
    if artifact_id is not None and not isinstance(artifact_id, str):
        raise ValidationError(f"{field}.artifact_id", f"{field}.artifact_id must be a string")
    check_optional_text(f"{field}.artifact_id", artifact_id, max_length=MAX_TEXT_LENGTH)
    entries = classify(value.get("artifact_meta"), f"{field}.artifact_meta")
    return ComparisonSide(
        artifact_id=artifact_id,
        features=[Feature(e["preference_type"], e["pattern"]) for e in entries],
    )


def on_pairwise_comparison(
    store: SignalSink, event: Event, *, records: bool = True
) -> list[Preference | None]:
    """Store one ``comparison`` event: the user chose ``chose`` over ``over``. Returns no
    records (``records`` is accepted for the common handler signature)."""
    event = _check_event(event)
    _check_user_and_time(event)
    chose = _side(event.get("chose"), "chose")
    over = _side(event.get("over"), "over")
    dims = event.get("dimensions")
    if dims is not None and (
        not isinstance(dims, list) or not all(isinstance(d, str) for d in dims)
    ):
        raise ValidationError("dimensions", "dimensions must be a list of strings")
    for i, dim in enumerate(dims or ()):
        check_optional_text(f"dimensions[{i}]", dim, max_length=MAX_TEXT_LENGTH)
    project_id = event.get("project_id") or None
    if project_id is not None:
        validate_project_id(project_id)
    session_id = event.get("session_id")
    if session_id is not None and not isinstance(session_id, str):
        raise ValidationError("session_id", "session_id must be a string")
    check_optional_text("session_id", session_id, max_length=MAX_TEXT_LENGTH)
    now = format_ts(store.now_ms())
    at = format_ts(parse_ts(event["timestamp"]))  # validated above
    store.append_comparison(
        event["user_id"],
        ComparisonEvent(
            at=at,
            recorded_at=now,
            chose=chose,
            over=over,
            dimensions=list(dims) if dims is not None else None,
            scope="project" if project_id else "global",
            project_id=project_id,
            session_id=session_id,
        ),
    )
    return []


class Handler(Protocol):
    """An adapter handler. ``records=False``: the caller does not need the records back,
    so the store appends without deriving (the next read derives)."""

    def __call__(
        self, store: SignalSink, event: Event, *, records: bool = True
    ) -> Sequence[Preference | None]: ...


#: Wire-format event names (docs/capture.md) → handlers.
HANDLERS: Final[Mapping[str, Handler]] = {
    "generation_accepted": on_generation_accepted,
    "artifact_edited_and_saved": on_artifact_edited_and_saved,
    "explicit_tag_applied": on_explicit_tag_applied,
    "thumbs_rated": on_thumbs_rated,
    "generation_abandoned": on_generation_abandoned,
    "revert_after_edit": on_revert_after_edit,
    "pairwise_comparison": on_pairwise_comparison,
}
