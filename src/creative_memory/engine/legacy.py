"""Prototype-era preference records: their fields and the one check every reader applies
(docs/engine.md, "Prototype import").

A ``legacy_record`` event carries one record of a prototype ``preferences.json`` as it was;
both the prototype import and the archive import validate it here, before anything is
written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from creative_memory.engine.errors import ValidationError
from creative_memory.engine.text import MAX_TEXT_LENGTH, check_tag, check_text

_STR: Final = (str,)
#: Every field of a prototype record and the JSON types it may have.
RECORD_FIELDS: Final[Mapping[str, tuple[type, ...]]] = {
    "id": _STR,
    "preference_type": _STR,
    "pattern": _STR,
    "polarity": _STR,
    "signal_strength": (int, float),
    "confidence": _STR,
    "sources": (list,),
    "accept_count": (int,),
    "reject_count": (int,),
    "explicit_tags": (list,),
    "last_seen": _STR,
    "decay_at": _STR,
    "scope": _STR,
    "reversal_signals": (int,),
    "reversal_first_seen": (str, type(None)),
    "polarity_status": _STR,
    "shadow_of": (str, type(None)),
}
_ENUMS: Final = {
    "polarity": ("positive", "negative"),
    "confidence": ("low", "medium", "high"),
    "polarity_status": ("stable", "under_review", "archived"),
}


def field_error(field: str, message: str) -> ValidationError:
    """A :class:`ValidationError` for ``field`` whose message starts with the field."""
    return ValidationError(field, f"{field}: {message}")


def validate_record(raw: object, where: str, bucket: str | None) -> dict[str, Any]:
    """The fields of a prototype record found at ``where`` in the list of ``bucket``
    (``None`` = global), checked; raises :class:`ValidationError` naming the bad field."""
    if not isinstance(raw, Mapping):
        raise field_error(where, "must be an object")
    out: dict[str, Any] = {}
    for name, types in RECORD_FIELDS.items():
        if name not in raw:
            raise field_error(f"{where}.{name}", "is missing")
        value = raw[name]
        if isinstance(value, bool) or not isinstance(value, types):
            raise field_error(f"{where}.{name}", f"has the wrong type ({type(value).__name__})")
        out[name] = value
    for name, allowed in _ENUMS.items():
        if out[name] not in allowed:
            raise field_error(f"{where}.{name}", f"must be one of {', '.join(allowed)}")
    for name in ("id", "preference_type", "pattern"):
        if not out[name]:
            raise field_error(f"{where}.{name}", "must be a non-empty string")
        check_text(f"{where}.{name}", out[name], max_length=MAX_TEXT_LENGTH)
    s = out["signal_strength"]
    if not 0 <= s <= 1:
        raise field_error(f"{where}.signal_strength", "must be within [0, 1]")
    for name in ("sources", "explicit_tags"):
        if not all(isinstance(x, str) for x in out[name]):
            raise field_error(f"{where}.{name}", "must be a list of strings")
    for i, tag in enumerate(out["explicit_tags"]):
        if tag:
            check_tag(f"{where}.explicit_tags[{i}]", tag, max_length=MAX_TEXT_LENGTH)
    for name in ("accept_count", "reject_count", "reversal_signals"):
        if out[name] < 0:
            raise field_error(f"{where}.{name}", "must be >= 0")
    expected_scope = "global" if bucket is None else f"project:{bucket}"
    if out["scope"] != expected_scope:
        raise field_error(f"{where}.scope", f"must be {expected_scope!r} for this list")
    return out
