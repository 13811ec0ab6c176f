"""The capture boundary's limits and its share of erasure (docs/capture.md, "Limits" and
"Erasure").

:func:`check_wire_event` is what a wire-format event must meet before the capture layer
looks at it, on top of the adapter's own checks: ids strings or null (``user_id`` and
``project_id`` safe ids), every string one plain line (docs/engine.md, "Stored strings")
and bounded, a diff that still fits the store's depth limit once merged with the other
saves of its coalescing window, an event time between 1970 and a day after the recording
time. The engine's own calls (the adapter handlers, ``ingest_signals``) keep
their wider rules, which the conformance traces pin.

:func:`purge_event` is the pure half of erasing what the capture layer still holds: one
pending event with every trace of the erasure removed.

Pure: no I/O, no clock (the recording time is an argument).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec

from creative_memory.engine.erasure import Erasure, diff_mentions
from creative_memory.engine.errors import ValidationError
from creative_memory.engine.events import MAX_DIFF_DEPTH
from creative_memory.engine.ids import MAX_ID_LENGTH, validate_project_id, validate_user_id
from creative_memory.engine.jsondepth import deeper_than
from creative_memory.engine.text import check_text
from creative_memory.engine.timeutil import try_parse_ts

#: The longest pattern the wire format accepts.
MAX_PATTERN_LENGTH: Final = 300
#: The longest preference type: the vocabulary is open by design (a host's classifier
#: names its own categories), so it is bounded instead of enumerated.
MAX_TYPE_LENGTH: Final = 64
#: The longest tag text (the nine phrases of ``TAG_POLARITY`` are far shorter).
MAX_TAG_LENGTH: Final = 64
#: At most this many signals in one ``artifact_meta``.
MAX_SIGNALS: Final = 100
#: At most this many comparison dimensions, each a short label.
MAX_DIMENSIONS: Final = 32
#: The largest diff, as JSON bytes.
MAX_DIFF_BYTES: Final = 64 * 1024
#: How far after the recording time an event may be dated (a clock a little ahead).
MAX_FUTURE_MS: Final = 24 * 60 * 60 * 1000
#: The levels :func:`~creative_memory.capture.delivery.merge_edits` wraps around each diff
#: of a coalescing window (``{"coalesced_saves": n, "diffs": [diff, ...]}``).
COALESCED_DIFF_LEVELS: Final = 2
#: The deepest diff the wire format accepts: the store's limit less the coalescing wrapper,
#: so the merged diff of any window is one the store takes (docs/capture.md, "Limits").
MAX_WIRE_DIFF_DEPTH: Final = MAX_DIFF_DEPTH - COALESCED_DIFF_LEVELS

_IDS: Final = ("user_id", "artifact_id", "session_id", "project_id")


def _meta(meta: object, field: str) -> None:
    if not isinstance(meta, Mapping) or not isinstance(meta.get("signals"), list):
        return  # the adapter rejects the shape with its own message
    signals = meta["signals"]
    if len(signals) > MAX_SIGNALS:
        raise ValidationError(f"{field}.signals", f"at most {MAX_SIGNALS} signals per event")
    for i, entry in enumerate(signals):
        if not isinstance(entry, Mapping):
            continue
        where = f"{field}.signals[{i}]"
        for name, limit in (("preference_type", MAX_TYPE_LENGTH), ("pattern", MAX_PATTERN_LENGTH)):
            value = entry.get(name)
            if isinstance(value, str) and value:
                check_text(f"{where}.{name}", value, max_length=limit)


def check_wire_event(raw: Mapping[str, Any], recorded_ms: int) -> None:
    """A :class:`ValidationError` naming the field when ``raw`` breaks a limit of the wire
    format; ``recorded_ms`` is the recording time (the store's clock)."""
    for name in _IDS:
        value = raw.get(name)
        if name != "user_id" and value is not None and not isinstance(value, str):
            raise ValidationError(
                name, f"{name} must be a string or null, got {type(value).__name__}"
            )
        if isinstance(value, str) and value:
            check_text(name, value, max_length=MAX_ID_LENGTH)
            if name == "user_id":
                validate_user_id(value)
            elif name == "project_id":
                validate_project_id(value)
    ts = raw.get("timestamp")
    if isinstance(ts, str) and ts:
        check_text("timestamp", ts, max_length=64)
        ms = try_parse_ts(ts)
        if ms is not None and ms < 0:
            raise ValidationError("timestamp", f"timestamp {ts} is before 1970")
        if ms is not None and ms > recorded_ms + MAX_FUTURE_MS:
            raise ValidationError(
                "timestamp", f"timestamp {ts} is more than a day after the recording time"
            )
    tag = raw.get("tag_text")
    if isinstance(tag, str):
        check_text("tag_text", tag, max_length=MAX_TAG_LENGTH)
    _meta(raw.get("artifact_meta"), "artifact_meta")
    for side in ("chose", "over"):
        value = raw.get(side)
        if isinstance(value, Mapping):
            art = value.get("artifact_id")
            if isinstance(art, str) and art:
                check_text(f"{side}.artifact_id", art, max_length=MAX_ID_LENGTH)
            _meta(value.get("artifact_meta"), f"{side}.artifact_meta")
    dims = raw.get("dimensions")
    if isinstance(dims, list):
        if len(dims) > MAX_DIMENSIONS:
            raise ValidationError("dimensions", f"at most {MAX_DIMENSIONS} dimensions")
        for i, d in enumerate(dims):
            if isinstance(d, str):
                check_text(f"dimensions[{i}]", d, max_length=MAX_TYPE_LENGTH)
    diff = raw.get("diff")
    if diff is not None:
        _diff(diff)


def _diff(diff: object) -> None:
    too_deep = ValidationError(
        "diff",
        f"diff is nested deeper than {MAX_WIRE_DIFF_DEPTH} levels (the store's "
        f"{MAX_DIFF_DEPTH}, less {COALESCED_DIFF_LEVELS} for merging the saves of a window)",
    )
    try:
        encoded = msgspec.json.encode(diff)
    except (TypeError, msgspec.EncodeError):
        return  # the store rejects a diff that is not JSON with its own message
    except RecursionError:  # msgspec's own guard, far deeper than the limit
        raise too_deep from None
    if len(encoded) > MAX_DIFF_BYTES:
        raise ValidationError(
            "diff", f"diff is {len(encoded)} bytes of JSON: at most {MAX_DIFF_BYTES}"
        )
    if deeper_than(encoded, MAX_WIRE_DIFF_DEPTH):
        raise too_deep


def purge_event(ev: dict[str, Any], erasure: Erasure) -> dict[str, Any] | None:
    """A pending wire event with ``erasure`` applied: ``None`` when nothing of it is left,
    a copy without the pattern's signals and without a diff that names it (both in its
    bucket, as the log's signals and refinements), or ``ev`` itself when it is untouched."""
    if ev.get("user_id") != erasure.user_id:
        return ev
    bucket = ev.get("project_id") or None
    if erasure.everything or (not erasure.is_forget and bucket == erasure.bucket):
        return None
    if not erasure.is_forget or bucket != erasure.bucket:
        return ev
    out = ev
    diff = ev.get("diff")
    if diff is not None and erasure.pattern is not None and diff_mentions(diff, erasure.pattern):
        out = {**out, "diff": None}
    meta = ev.get("artifact_meta")
    signals = meta.get("signals") if isinstance(meta, Mapping) else None
    if isinstance(signals, list):
        kept = [
            s
            for s in signals
            if not (
                isinstance(s, Mapping)
                and s.get("preference_type") == erasure.preference_type
                and s.get("pattern") == erasure.pattern
            )
        ]
        if len(kept) != len(signals):
            if not kept and out.get("diff") is None:
                return None
            out = {**out, "artifact_meta": {**dict(meta or {}), "signals": kept}}
    return out
