"""Events the capture layer holds, and what their capture time decides (docs/capture.md,
"Held events").

An edit-save waits for its coalescing window, a generation for the next start that may
abandon it: both reach the store later than they were captured. Two things must still be
judged as of their capture — what the user's settings allowed then (an edit made while
learning was paused is not learned because learning resumed within the window), and what
was erased since. So when the layer begins holding an event it asks the store for a
:class:`Held` — the log's generation and the settings' verdict at that moment — records on
it every erasure it purges the event by (:func:`judged_by`), and delivers the event
through the store's sink for it (:meth:`Holding.sink`), which honours both: an erasure it
was not purged by (a forget in another process, which cannot purge this layer) drops it.
The rules themselves live with the store (docs/architecture.md, "One answer on every
surface"); this module only names what the layer needs, as a ``Protocol`` of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Protocol

from creative_memory.capture.adapter import SignalSink
from creative_memory.engine.erasure_notes import NOTES_KEPT


@dataclass(frozen=True)
class Held:
    """What the store said of ``user_id`` when an event began to be held: the log's
    ``generation`` (``""``: no log yet), whether signals were ``learning`` (memory on, not
    paused) and whether refinements were ``logging`` (not paused); and since then, the
    erasures the layer ``applied`` to the event (the ids of their notes)."""

    user_id: str
    generation: str
    learning: bool = True
    logging: bool = True
    applied: frozenset[str] = frozenset()

    def admits(self, later: Held | None) -> bool:
        """Whether an event captured under ``later`` may join one held since ``self`` (a
        coalescing window): the same settings' verdict, no erasure applied to one and not
        the other, and no rewrite of the log in between — when there was no log yet, its
        creation does not count (what was held since then is checked against every
        erasure the log has kept)."""
        if later is None or later == self:
            return later == self
        return (later.user_id, later.learning, later.logging, later.applied) == (
            self.user_id,
            self.learning,
            self.logging,
            self.applied,
        ) and self.generation == ""


def judged_by(held: Held | None, note_id: str) -> Held | None:
    """``held``, once its event was purged by the erasure whose note is ``note_id`` (the
    store lets it pass that note on delivery)."""
    if held is None or not note_id:
        return held
    return replace(held, applied=held.applied | {note_id})


@dataclass
class RecentErasures:
    """The last erasures a layer purged by, per user: an event it begins to hold after
    such a purge — while the store is still rewriting the log, before its generation
    changes — was captured after the erasure, so that erasure has nothing to take from
    it (:meth:`stamp` counts it as applied)."""

    ids: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def note(self, user_id: str, note_id: str) -> None:
        """Remember that the layer purged ``user_id``'s events by erasure ``note_id``."""
        if note_id:
            self.ids[user_id] = (*self.ids.get(user_id, ()), note_id)[-NOTES_KEPT:]

    def stamp(self, held: Held) -> Held:
        """``held`` with the user's recent erasures counted as applied."""
        recent = self.ids.get(held.user_id)
        return replace(held, applied=held.applied | set(recent)) if recent else held


class Holding(Protocol):
    """What a store offers a capture layer for the events it holds (a ``MemoryStore``
    gives one to every capture layer registered over it)."""

    def hold(self, user_id: str) -> Held:
        """The user's :class:`Held` now (validates ``user_id``)."""
        ...

    def sink(self, held: Held) -> SignalSink:
        """Where an event held since ``held`` is delivered: it keeps only what the settings
        allowed then (and still allow), and nothing of it after an erasure not in
        ``held.applied``."""
        ...
