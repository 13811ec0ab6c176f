"""Export archives: one versioned, checksummed JSON document of a user's raw events and
settings (not the cache). Pure encoding and validation; the store does the I/O.

Format (docs/engine.md, "Prototype import")::

    {"format": "creative-memory-archive", "archive_version": 1, "user_id": ...,
     "settings": {...}, "events": [...], "checksum": "sha256:<hex>"}

The checksum is SHA-256 over the canonical JSON encoding of the document without its
``checksum`` key. Encoding is deterministic, so export → import → export is byte-identical.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Final

import msgspec

from creative_memory.engine.derivation.registry import check_version
from creative_memory.engine.errors import ValidationError, struct_error_field
from creative_memory.engine.events import CHAIN_GENESIS, Event, chain_hash
from creative_memory.engine.ids import validate_project_id
from creative_memory.engine.jsondepth import deeper_than
from creative_memory.engine.settings import UserSettings, VersionChange
from creative_memory.engine.text import preview
from creative_memory.engine.timeutil import check_normalised_ts

ARCHIVE_FORMAT: Final = "creative-memory-archive"
ARCHIVE_VERSION: Final = 1
#: The deepest an archive may nest: what any stored event needs (a refinement's ``diff``,
#: three levels below the archive's top, nests at most
#: :data:`~creative_memory.engine.events.MAX_DIFF_DEPTH` levels) with room to spare, and far
#: less than decoding, hashing or redacting its events would need to recurse.
MAX_ARCHIVE_DEPTH: Final = 256


class _Body(msgspec.Struct, kw_only=True):
    format: str
    archive_version: int
    user_id: str
    settings: UserSettings
    events: list[Event]


class Archive(_Body, kw_only=True):
    """A decoded, verified export archive."""

    checksum: str


_encoder = msgspec.json.Encoder()


def _checksum(body: _Body) -> str:
    return "sha256:" + hashlib.sha256(_encoder.encode(body)).hexdigest()


def encode_archive(user_id: str, settings: UserSettings, events: list[Event]) -> bytes:
    """The archive of a user's settings and events, as canonical JSON bytes."""
    body = _Body(
        format=ARCHIVE_FORMAT,
        archive_version=ARCHIVE_VERSION,
        user_id=user_id,
        settings=settings,
        events=events,
    )
    doc = Archive(**msgspec.structs.asdict(body), checksum=_checksum(body))
    return _encoder.encode(doc) + b"\n"


def decode_archive(data: bytes) -> Archive:
    """Parse and verify an archive — its nesting (at most :data:`MAX_ARCHIVE_DEPTH`),
    format, checksum, hash chain, then the settings (:func:`check_settings`; the events'
    own checks are :func:`~creative_memory.engine.events.validate_stored_event`); raises
    :class:`ValidationError` naming what is wrong (``archive`` for one that is not JSON or
    nests too deep)."""
    if deeper_than(data, MAX_ARCHIVE_DEPTH):
        raise ValidationError(
            "archive", f"archive is nested deeper than {MAX_ARCHIVE_DEPTH} levels"
        )
    try:
        raw: Any = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise ValidationError("archive", f"archive is not valid JSON ({exc})") from exc
    if not isinstance(raw, dict) or raw.get("format") != ARCHIVE_FORMAT:
        raise ValidationError("archive", "not a creative-memory archive (format field)")
    if raw.get("archive_version") != ARCHIVE_VERSION:
        raise ValidationError(
            "archive_version",
            f"unsupported archive_version {preview(raw.get('archive_version'))} "
            f"(this version reads {ARCHIVE_VERSION})",
        )
    unknown = sorted(str(k) for k in raw if k not in Archive.__struct_fields__)
    if unknown:  # neither the checksum nor the chain covers it: it would be dropped unread
        raise ValidationError(
            unknown[0],
            f"unknown key {preview(unknown[0])} in the archive (this version writes and "
            f"reads {', '.join(Archive.__struct_fields__)}): nothing is imported rather than "
            "it dropped",
        )
    try:
        doc = msgspec.convert(raw, Archive)
    except msgspec.ValidationError as exc:
        field = struct_error_field(str(exc), "archive")
        raise ValidationError(field, f"malformed archive: {exc}") from exc
    body = _Body(
        format=doc.format,
        archive_version=doc.archive_version,
        user_id=doc.user_id,
        settings=doc.settings,
        events=doc.events,
    )
    if _checksum(body) != doc.checksum:
        raise ValidationError("checksum", "archive checksum mismatch: the file was modified")
    prev = CHAIN_GENESIS
    last_seq = 0
    for i, ev in enumerate(doc.events):
        if ev.seq <= last_seq:
            raise ValidationError(f"events[{i}].seq", "seq numbers must strictly increase")
        last_seq = ev.seq
        if ev.h != chain_hash(prev, ev):
            raise ValidationError(f"events[{i}].h", "hash chain broken: events were altered")
        prev = ev.h
    _known_keys(raw["settings"])
    check_settings(doc.settings)
    return doc


def _known_keys(settings: dict[str, Any]) -> None:
    """Refuse a setting this version does not know (it would be dropped silently)."""
    known: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
        ("settings", settings, UserSettings.__struct_fields__)
    ]
    for i, change in enumerate(settings.get("derivation_history") or ()):
        known.append((f"settings.derivation_history[{i}]", change, VersionChange.__struct_fields__))
    for where, value, fields in known:
        for key in value:
            if key not in fields:
                raise ValidationError(
                    f"{where}.{key}",
                    f"unknown setting {where}.{key}; this version knows {', '.join(fields)}",
                )


def check_settings(settings: UserSettings, where: str = "settings") -> UserSettings:
    """``settings`` if every value is one the store itself would write (docs/api.md,
    "MemoryStore.import_memory"): a normalised ``paused_until``, safe and distinct
    ``disabled_projects``, known derivation versions and normalised switch times. Else a
    :class:`ValidationError` naming the field (``settings.derivation_version``, ...)."""
    if settings.paused_until is not None:
        check_normalised_ts(settings.paused_until, f"{where}.paused_until")
    seen: set[str] = set()
    for i, project_id in enumerate(settings.disabled_projects):
        field = f"{where}.disabled_projects[{i}]"
        _renamed(field, validate_project_id, project_id)
        if project_id in seen:
            raise ValidationError(field, f"{field} {preview(project_id)} is listed twice")
        seen.add(project_id)
    if settings.derivation_version is not None:
        _renamed(f"{where}.derivation_version", check_version, settings.derivation_version)
    for i, change in enumerate(settings.derivation_history):
        at = f"{where}.derivation_history[{i}]"
        check_normalised_ts(change.at, f"{at}.at")
        _renamed(f"{at}.version", check_version, change.version)
        _renamed(f"{at}.previous", check_version, change.previous)
    return settings


def _renamed(field: str, check: Callable[[str], object], value: str) -> None:
    """``check(value)``, its :class:`ValidationError` naming ``field`` instead."""
    try:
        check(value)
    except ValidationError as exc:
        raise ValidationError(field, f"{field}: {exc}") from None


def event_identity(ev: Event) -> bytes:
    """Content identity of an event for merging: everything but where and when it was
    stored (``seq``, ``h``, ``recorded_at``), so the same host event recorded on two
    machines is one event."""
    return _encoder.encode(msgspec.structs.replace(ev, seq=0, h="", recorded_at=""))


def events_to_merge(local: Sequence[Event], incoming: Sequence[Event]) -> list[Event]:
    """The events of ``incoming`` that ``local`` does not hold yet, by content
    (:func:`event_identity`), as a multiset difference: a duplicate counts. They come back
    unsequenced (``seq`` 0, no ``h``), ready to be appended."""
    have = Counter(event_identity(e) for e in local)
    fresh: list[Event] = []
    for e in incoming:
        ident = event_identity(e)
        if have[ident] > 0:
            have[ident] -= 1
        else:
            fresh.append(msgspec.structs.replace(e, seq=0, h=""))
    return fresh
