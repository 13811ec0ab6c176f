"""Imports into a user's memory: export archives and prototype-era ``preferences.json``
files (docs/api.md, "MemoryStore.import_memory" and "MemoryStore.import_prototype";
docs/storage.md, "Imports").

Everything is validated before anything is written. What an import adds depends on what
the user's log already holds (a merge adds the events not yet there; an archive fills an
empty log whole), so it is decided inside the backend's critical section for the user
(:meth:`~creative_memory.storage.base.EventLogStorage.import_events`): on the log and the
settings as they are there, with every other writer of the user — an ingest, another
import, in this process or another — either wholly before or wholly after it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from creative_memory.engine.errors import ValidationError
from creative_memory.engine.events import Event, LegacyRecordEvent, validate_stored_event
from creative_memory.engine.portability.archive import decode_archive, events_to_merge
from creative_memory.engine.portability.prototype import parse_prototype, prototype_events_to_add
from creative_memory.engine.settings import UserSettings
from creative_memory.storage.base import ImportPlan

if TYPE_CHECKING:
    from creative_memory.app.store import MemoryStore

#: The import modes of an archive.
MODES = ("merge", "replace")


def import_archive(store: MemoryStore, user_id: str, data: bytes, mode: str) -> int:
    """Import the archive ``data`` into ``user_id``'s memory; returns the events added.

    ``replace`` makes the log and the settings exactly the archive's. ``merge`` appends the
    archive's events that the log does not hold yet (by content) and keeps the local
    settings — except into a log without events, which becomes the archive's log whole
    (its ``seq`` numbers kept unless the log handed them out before), and a user without
    settings, who gets the archive's."""
    if mode not in MODES:
        raise ValidationError("mode", f'mode must be "merge" or "replace", got {mode!r}')
    archive = decode_archive(data)  # format, checksum, chain and settings
    for i, ev in enumerate(archive.events):
        validate_stored_event(ev, f"events[{i}]")
    incoming = store._door.admit(archive.events, "events")  # redacted like every append

    def decide(local: list[Event], settings: UserSettings | None) -> ImportPlan:
        keep_settings = mode == "merge" and settings is not None
        if mode == "replace" or not local:
            return ImportPlan(incoming, True, None if keep_settings else archive.settings)
        return ImportPlan(events_to_merge(local, incoming), False)

    with store._locked(user_id):
        plan = store._storage.import_events(user_id, decide)
        if plan.replace:
            store._forget_states(user_id)
    return len(plan.events)


def import_prototype(store: MemoryStore, user_id: str, data: bytes) -> int:
    """Import a prototype ``preferences.json`` (``data``) as ``legacy_record`` events plus
    its refinement log and master switch; records already imported are skipped. Returns
    the number of records imported."""
    parsed = parse_prototype(data, store._recorded_at())
    admitted = store._door.admit([*parsed.records, *parsed.refinements], "file")
    enabled = parsed.memory_enabled

    def decide(local: list[Event], settings: UserSettings | None) -> ImportPlan:
        fresh = prototype_events_to_add(admitted, local)
        current = settings or UserSettings()
        switch = None  # the master switch is stored when it differs, or makes the user exist
        if current.memory_enabled != enabled or (settings is None and not local and not fresh):
            switch = msgspec.structs.replace(current, memory_enabled=enabled)
        return ImportPlan(fresh, False, switch)

    plan = store._storage.import_events(user_id, decide)
    return sum(isinstance(e, LegacyRecordEvent) for e in plan.events)
