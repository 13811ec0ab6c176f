"""Prototype import: a prototype-era ``preferences.json`` → ``legacy_record`` events.

Pure parsing and validation (design.md §6, engine.md §2–§3). Everything is validated before
the store writes anything; the store makes the import idempotent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from creative_memory.engine.constants import SCHEMA_VERSION
from creative_memory.engine.errors import ValidationError
from creative_memory.engine.events import LegacyRecordEvent, RefinementEvent, validate_project_id
from creative_memory.engine.timeutil import format_ts, try_parse_ts

_STR = (str,)
_RECORD_FIELDS: dict[str, tuple[type, ...]] = {
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
_ENUMS = {
    "polarity": ("positive", "negative"),
    "confidence": ("low", "medium", "high"),
    "polarity_status": ("stable", "under_review", "archived"),
}


class PrototypeFile(msgspec.Struct, kw_only=True):
    """The validated content of a prototype file, as events ready to append."""

    memory_enabled: bool
    records: list[LegacyRecordEvent]
    refinements: list[RefinementEvent]


def _fail(field: str, message: str) -> ValidationError:
    return ValidationError(field, f"{field}: {message}")


def validate_record(raw: object, where: str, bucket: str | None) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise _fail(where, "must be an object")
    out: dict[str, Any] = {}
    for name, types in _RECORD_FIELDS.items():
        if name not in raw:
            raise _fail(f"{where}.{name}", "is missing")
        value = raw[name]
        if isinstance(value, bool) or not isinstance(value, types):
            raise _fail(f"{where}.{name}", f"has the wrong type ({type(value).__name__})")
        out[name] = value
    for name, allowed in _ENUMS.items():
        if out[name] not in allowed:
            raise _fail(f"{where}.{name}", f"must be one of {', '.join(allowed)}")
    for name in ("id", "preference_type", "pattern"):
        if not out[name]:
            raise _fail(f"{where}.{name}", "must be a non-empty string")
    s = out["signal_strength"]
    if not 0 <= s <= 1:
        raise _fail(f"{where}.signal_strength", "must be within [0, 1]")
    for name in ("sources", "explicit_tags"):
        if not all(isinstance(x, str) for x in out[name]):
            raise _fail(f"{where}.{name}", "must be a list of strings")
    for name in ("accept_count", "reject_count", "reversal_signals"):
        if out[name] < 0:
            raise _fail(f"{where}.{name}", "must be >= 0")
    expected_scope = "global" if bucket is None else f"project:{bucket}"
    if out["scope"] != expected_scope:
        raise _fail(f"{where}.scope", f"must be {expected_scope!r} for this list")
    return out


def parse_prototype(data: bytes, recorded_at: str) -> PrototypeFile:
    """Validate a prototype ``preferences.json`` and turn it into events (unsequenced)."""
    try:
        doc = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise ValidationError("file", f"not valid JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise ValidationError("file", "the top level must be a JSON object")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise _fail(
            "schema_version", f'must be "{SCHEMA_VERSION}", got {doc.get("schema_version")!r}'
        )
    enabled = doc.get("memory_enabled")
    if not isinstance(enabled, bool):
        raise _fail("memory_enabled", "must be true or false")
    globals_ = doc.get("global_preferences")
    if not isinstance(globals_, list):
        raise _fail("global_preferences", "must be a list")
    overrides = doc.get("project_overrides")
    if not isinstance(overrides, dict):
        raise _fail("project_overrides", "must be an object")
    log = doc.get("refinement_log", [])
    if not isinstance(log, list):
        raise _fail("refinement_log", "must be a list")

    def event(rec: dict[str, Any], bucket: str | None) -> LegacyRecordEvent:
        ms = try_parse_ts(rec["last_seen"])
        at = format_ts(ms) if ms is not None else recorded_at
        return LegacyRecordEvent(at=at, recorded_at=recorded_at, bucket=bucket, record=rec)

    records = [
        event(validate_record(r, f"global_preferences[{i}]", None), None)
        for i, r in enumerate(globals_)
    ]
    for pid, recs in overrides.items():
        try:
            validate_project_id(pid)
        except ValidationError as exc:
            raise _fail(f"project_overrides.{pid}", str(exc)) from exc
        if not isinstance(recs, list):
            raise _fail(f"project_overrides.{pid}", "must be a list")
        records += [
            event(validate_record(r, f"project_overrides.{pid}[{i}]", pid), pid)
            for i, r in enumerate(recs)
        ]
    ids: set[str] = set()
    for ev in records:
        rid = ev.record["id"]
        if rid in ids:
            raise _fail("id", f"record id {rid!r} appears twice")
        ids.add(rid)
    refinements: list[RefinementEvent] = []
    for i, entry in enumerate(log):
        where = f"refinement_log[{i}]"
        if not isinstance(entry, Mapping):
            raise _fail(where, "must be an object")
        for name in ("id", "timestamp"):
            if not isinstance(entry.get(name), str) or not entry[name]:
                raise _fail(f"{where}.{name}", "must be a non-empty string")
        for name in ("artifact_id", "project_id"):
            if entry.get(name) is not None and not isinstance(entry[name], str):
                raise _fail(f"{where}.{name}", "must be a string or null")
        ms = try_parse_ts(entry["timestamp"])
        if ms is None:
            raise _fail(f"{where}.timestamp", "is not a valid ISO date string")
        refinements.append(
            RefinementEvent(
                at=format_ts(ms),
                recorded_at=recorded_at,
                ref_id=entry["id"],
                artifact_id=entry.get("artifact_id"),
                project_id=entry.get("project_id"),
                diff=entry.get("diff") if entry.get("diff") is not None else {},
            )
        )
    return PrototypeFile(memory_enabled=enabled, records=records, refinements=refinements)
