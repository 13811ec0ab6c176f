"""Forget and reset through a ``MemoryStore`` (docs/architecture.md, "Erasure";
docs/storage.md, "Erasure").

Every erasure, in order: an id is drawn for the note it leaves; the store's listeners
(capture layers, in this process) purge what they hold, and record that id on it; what can
fail to load — the user's settings and the derivation version they name — is loaded, so
an erasure that fails has erased nothing (a full reset reads nothing of the old settings:
it writes the defaults right after the rewrite); the log is rewritten through the pure
filter of ``engine/erasure.py`` — always when the user has a log, even when nothing in it
matches: the rewrite starts a new generation, leaves an erasure note (its id, nothing of
what it erased) for events held elsewhere (a daemon's capture layer, which drops them:
docs/storage.md, "Erasure notes") and deletes every derived artefact, so a retried erasure
cleans up after one that crashed halfway; then the state is derived again.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING

from creative_memory.engine.erasure import Erasure, anchored, forget_filter, in_bucket
from creative_memory.engine.erasure_notes import note_for
from creative_memory.engine.events import Event, ProjectAnchorEvent, validate_user_id
from creative_memory.engine.scope import parse_scope, validate_feature
from creative_memory.engine.settings import UserSettings

if TYPE_CHECKING:
    from creative_memory.app.store import MemoryStore


def forget(
    store: MemoryStore,
    user_id: str,
    preference_type: str,
    pattern: str,
    project_id: str | None,
) -> int:
    """:meth:`MemoryStore.forget`: how many events were removed or changed."""
    validate_feature(user_id, preference_type, pattern, project_id)
    erasure = Erasure(user_id, project_id, preference_type, pattern, note_id=_note_id())
    store._door.purge(erasure)
    if not store._storage.user_exists(user_id):
        return 0
    keep = anchored(lambda ev: forget_filter(ev, preference_type, pattern, project_id))
    return rewrite(store, user_id, keep, erasure)


def reset(store: MemoryStore, user_id: str, scope: str) -> int:
    """:meth:`MemoryStore.reset_memory`, returning how many events were erased.

    A full reset reads nothing of the user's settings: it must work on settings that no
    longer load (docs/api.md, "MemoryStore.reset_memory"); the defaults are written before
    anything is derived again."""
    validate_user_id(user_id)
    project = parse_scope(scope)
    erasure = Erasure(user_id, bucket=project, everything=scope == "all", note_id=_note_id())
    store._door.purge(erasure)
    erased = 0
    if scope == "all":
        erased = rewrite(store, user_id, lambda ev: None, erasure, defaults=True)
    elif scope == "global":
        erased = rewrite(
            store, user_id, anchored(lambda ev: None if in_bucket(ev, None) else ev), erasure
        )
    elif project is not None:
        erased = rewrite(
            store, user_id, anchored(lambda ev: None if in_bucket(ev, project) else ev), erasure
        )
        with store._locked(user_id):
            state, _ = store._refresh(user_id)
            missing = state.project_records(project) is None
        if missing:
            now = store._recorded_at()
            store._append(
                user_id,
                [ProjectAnchorEvent(at=now, recorded_at=now, project_id=project)],
                records=False,
            )
    if not store._storage.user_exists(user_id):
        store._storage.write_settings(user_id, store._settings(user_id))
    return erased


def _note_id() -> str:
    """A fresh id for an erasure's note, made before the capture layers in this process are
    purged: they record it on what they hold (docs/storage.md, "Erasure notes")."""
    return secrets.token_hex(8)


def rewrite(
    store: MemoryStore,
    user_id: str,
    keep: Callable[[Event], Event | None],
    erasure: Erasure,
    *,
    defaults: bool = False,
) -> int:
    """Rewrite the log through ``keep`` with the note of ``erasure`` (its id), then —
    under the same lock — drop the in-memory states and derive again. What can fail to
    load (the settings, their derivation version) is loaded before the log is touched, so
    an erasure that fails has erased nothing. ``defaults``: the user's settings become the
    defaults, written right after the rewrite and before the re-derivation (their old
    values are never read) — a full reset, which goes on when stored events no longer
    decode. Returns how many events were removed or changed."""
    note = note_for(erasure)
    with store._locked(user_id):
        settings = UserSettings() if defaults else None
        states = store._states_of(user_id, settings=settings)
        changed = store._storage.rewrite(user_id, keep, note=note, everything=defaults)
        if settings is not None:
            store._storage.write_settings(user_id, settings)
        store._forget_states(user_id)
        if store._storage.generation(user_id):  # a log (rewritten): its state, written back
            states.refresh(user_id, write_back=True)
        return changed
