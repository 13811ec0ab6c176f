"""The store's side of the events a capture layer holds (docs/capture.md, "Held events").

A ``MemoryStore`` gives every capture layer registered over it a :class:`StoreHolding`. When
the layer begins holding an event it asks :meth:`StoreHolding.hold` for the user's
:class:`~creative_memory.capture.holding.Held` — the log's generation, and whether the
settings let signals be learned and refinements be logged — and it later delivers the
event through :meth:`StoreHolding.sink`. The sink appends:

* what the settings allowed when it was captured, whatever they are when it is delivered:
  an edit made while paused is dropped even if learning resumed within its window; one
  made while memory was off keeps only its refinement-log entry, as an edit delivered at
  once would; one made while learning is learned even if a pause came before its window
  closed (the daemon answered ``"learning": true`` for it);
* only when every rewrite of the log since the capture is accounted for, told by the
  erasure notes the log keeps (docs/storage.md, "Erasure notes"): a rewrite that erased
  nothing (an import in replace mode), or an erasure made through the store the layer is
  registered with, which purged the held event first and recorded its note's id on it
  (``Held.applied``). A forget or a reset run by another process (the CLI beside a daemon)
  left nothing that would let the event be judged against it: nothing of the event is
  appended — nor when the notes of those rewrites are no longer kept. The append is
  conditioned on the generation the notes were read in: a rewrite in between makes it
  read them again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from creative_memory.app import learning as rules
from creative_memory.capture.adapter import SignalSink
from creative_memory.capture.holding import Held
from creative_memory.engine.erasure_notes import judged, notes_since
from creative_memory.engine.events import ComparisonEvent, validate_user_id
from creative_memory.engine.models import Preference, Refinement
from creative_memory.storage.base import LogRewritten

if TYPE_CHECKING:
    from creative_memory.app.store import MemoryStore

#: Appends tried when a rewrite keeps landing between reading the notes and appending;
#: after that the event is dropped (erased content must not come back).
_TRIES: Final = 8


class StoreHolding:
    """A store's :class:`~creative_memory.capture.holding.Holding`."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store

    def hold(self, user_id: str) -> Held:
        """The user's generation and what their settings allow, now."""
        validate_user_id(user_id)
        store = self._store
        generation = store._storage.generation(user_id)
        settings = store._settings(user_id)
        now = store.now_ms()
        return Held(
            user_id, generation, rules.is_learning(settings, now), rules.unpaused(settings, now)
        )

    def sink(self, held: Held) -> SignalSink:
        """Where an event held since ``held`` is delivered (module docstring)."""
        return HeldSink(self._store, held)


class HeldSink:
    """The store, for one held event of ``held.user_id`` (module docstring). Records are
    never derived here: every entry returned is ``None``."""

    def __init__(self, store: MemoryStore, held: Held) -> None:
        self._store = store
        self._held = held

    def now_ms(self) -> int:
        """The store's clock."""
        return self._store.now_ms()

    def ingest_signals(
        self,
        user_id: str,
        signals: Sequence[Mapping[str, Any]],
        *,
        refinement: Mapping[str, Any] | None = None,
        records: bool = True,
    ) -> list[Preference | None]:
        """The signals if learning was on at capture, the refinement unless learning was
        paused then; nothing after an erasure it was not purged by."""
        held = self._held
        if user_id != held.user_id:  # not the event it was made for: as any other
            return self._store.ingest_signals(
                user_id, signals, refinement=refinement, records=records
            )
        validate_user_id(user_id)
        decide = rules.captured_decision(
            signals, refinement, self._store.now_ms(), learning=held.learning, logging=held.logging
        )
        append_held(self._store, held, decide)
        return [None] * len(signals)

    def append_comparison(self, user_id: str, event: ComparisonEvent) -> bool:
        """The comparison if learning was on at capture and no erasure it was not purged
        by came since; whether it was stored."""
        held = self._held
        if user_id != held.user_id:
            return self._store.append_comparison(user_id, event)
        validate_user_id(user_id)
        if not held.learning:
            return False
        return bool(append_held(self._store, held, lambda _settings: [event]))


def append_held(
    store: MemoryStore, held: Held, decide: rules.Decision
) -> list[Preference | Refinement | None] | None:
    """Append what ``decide`` makes of the settings when every rewrite since
    ``held.generation`` erased nothing or was applied to the event (``held.applied``), on
    the condition that no other rewrite comes in between; what was appended (``None``:
    nothing — not allowed, or an erasure since capture that cannot be judged)."""
    user_id = held.user_id
    for _ in range(_TRIES):
        current, notes = store._storage.rewrite_history(user_id)
        since = notes_since(notes, current, held.generation)
        if since is None or not judged(since, held.applied):
            return None
        try:
            _, out = store._append_allowed(user_id, decide, records=False, if_generation=current)
        except LogRewritten:
            continue
        return out
    return None
