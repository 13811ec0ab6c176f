"""Prototype import: a prototype-era ``preferences.json`` → ``legacy_record`` events.

Pure parsing and validation (docs/engine.md, "Prototype import"). Everything is validated before
the store writes anything; the store makes the import idempotent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from creative_memory.engine.constants import SCHEMA_VERSION
from creative_memory.engine.errors import ValidationError
from creative_memory.engine.events import (
    MAX_DIFF_DEPTH,
    Event,
    LegacyRecordEvent,
    RefinementEvent,
)
from creative_memory.engine.ids import validate_project_id
from creative_memory.engine.jsondepth import deeper_than
from creative_memory.engine.legacy import field_error as _fail
from creative_memory.engine.legacy import validate_record
from creative_memory.engine.text import preview
from creative_memory.engine.timeutil import format_ts, try_parse_ts


class PrototypeFile(msgspec.Struct, kw_only=True):
    """The validated content of a prototype file, as events ready to append."""

    memory_enabled: bool
    records: list[LegacyRecordEvent]
    refinements: list[RefinementEvent]


def _decode(data: bytes) -> Any:
    """A prototype file's JSON, refused (``file``) when it nests deeper than
    :data:`MAX_DIFF_DEPTH` levels (measured before decoding) or is not JSON."""
    if deeper_than(data, MAX_DIFF_DEPTH):
        raise ValidationError("file", f"the file is nested deeper than {MAX_DIFF_DEPTH} levels")
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise ValidationError("file", f"not valid JSON ({exc})") from exc


def prototype_owner(data: bytes) -> str | None:
    """The ``user_id`` a prototype file names (``None``: none, or not a JSON object —
    :func:`parse_prototype` reports that); a file too deep or not JSON is refused."""
    doc = _decode(data)
    owner = doc.get("user_id") if isinstance(doc, dict) else None
    return owner if isinstance(owner, str) else None


def parse_prototype(data: bytes, recorded_at: str) -> PrototypeFile:
    """Validate a prototype ``preferences.json`` and turn it into events (unsequenced).
    A file nested deeper than :data:`MAX_DIFF_DEPTH` levels is refused (``file``) before
    it is decoded: its refinements' diffs then fit the store's limit too."""
    doc = _decode(data)
    if not isinstance(doc, dict):
        raise ValidationError("file", "the top level must be a JSON object")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise _fail(
            "schema_version",
            f'must be "{SCHEMA_VERSION}", got {preview(doc.get("schema_version"))}',
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
            raise _fail("id", f"record id {preview(rid)} appears twice")
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


def prototype_events_to_add(parsed: Sequence[Event], existing: Sequence[Event]) -> list[Event]:
    """The events of a parsed prototype file not already in ``existing`` (the import is
    idempotent): legacy records by bucket and content, refinements by their ``ref_id``."""
    have_records = {
        (e.bucket, msgspec.json.encode(e.record))
        for e in existing
        if isinstance(e, LegacyRecordEvent)
    }
    have_refs = {e.ref_id for e in existing if isinstance(e, RefinementEvent) and e.ref_id}
    records = [
        e
        for e in parsed
        if isinstance(e, LegacyRecordEvent)
        and (e.bucket, msgspec.json.encode(e.record)) not in have_records
    ]
    refs = [e for e in parsed if isinstance(e, RefinementEvent) and e.ref_id not in have_refs]
    return [*records, *refs]
