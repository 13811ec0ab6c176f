"""The one door into the log (docs/architecture.md, "Erasure"; docs/capture.md,
"Redaction").

Every event a :class:`~creative_memory.app.store.MemoryStore` appends — from the capture
layer, the adapter, a direct library call, an archive import or a prototype migration —
passes :meth:`LogDoor.admit`: its stored strings are checked (one plain line each:
docs/engine.md, "Stored strings") and its free text goes through the store's
:class:`~creative_memory.capture.redaction.RedactionPolicy` (unless redaction was turned off
explicitly).

The door also knows what holds events on their way in: capture layers register as erasure
listeners, and an erasure purges them (:meth:`LogDoor.purge`) before the log is rewritten,
so a pending edit-save or generation cannot bring an erased pattern back.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence

from creative_memory.capture.redaction import RedactionPolicy
from creative_memory.engine.erasure import Erasure, ErasureListener
from creative_memory.engine.events import Event, check_event_text


class LogDoor:
    """Checks and redacts what enters the log; purges what waits outside it."""

    def __init__(self, redaction: RedactionPolicy | bool = True) -> None:
        if redaction is True:
            self.redaction: RedactionPolicy | None = RedactionPolicy()
        elif redaction is False:
            self.redaction = None
        elif isinstance(redaction, RedactionPolicy):
            self.redaction = redaction
        else:
            from creative_memory.engine.errors import ValidationError

            raise ValidationError("redaction", "redaction must be true, false or a RedactionPolicy")
        self._listeners: weakref.WeakSet[ErasureListener] = weakref.WeakSet()
        self._lock = threading.Lock()

    def admit(self, events: Sequence[Event], where: str | None = None) -> list[Event]:
        """``events`` checked (a ``ValidationError`` naming the field, ``<where>[i]....``;
        nothing is written) and redacted, in order."""
        out: list[Event] = []
        for i, ev in enumerate(events):
            if where is None and len(events) == 1:
                check_event_text(ev)
            else:
                check_event_text(ev, f"{where or 'events'}[{i}]")
            out.append(ev if self.redaction is None else self.redaction.redact_stored(ev))
        return out

    def add_listener(self, listener: ErasureListener) -> None:
        """Purge ``listener`` on every erasure (held weakly: a dropped layer unregisters)."""
        with self._lock:
            self._listeners.add(listener)

    def remove_listener(self, listener: ErasureListener) -> None:
        """Stop purging ``listener``."""
        with self._lock:
            self._listeners.discard(listener)

    def purge(self, erasure: Erasure) -> int:
        """Purge every listener; how many pending items changed."""
        with self._lock:
            listeners = list(self._listeners)
        return sum(listener.purge(erasure) for listener in listeners)
