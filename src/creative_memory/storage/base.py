"""The storage contract every backend implements (design.md §6)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import msgspec

from ..events import Event


class UserSettings(msgspec.Struct, kw_only=True):
    """Per-user controls (design.md §5). Settings are not events: they are not derived."""

    memory_enabled: bool = True
    paused: bool = False
    paused_until: str | None = None  # normalised UTC; None with paused=True = until resumed
    disabled_projects: list[str] = msgspec.field(default_factory=list)
    diagnostics_feed: bool = False


class LogSnapshot(msgspec.Struct, kw_only=True):
    """Events read from a user's log starting at some position.

    ``generation`` changes whenever the log is rewritten (erasure); ``end`` is an opaque
    position to continue reading from while ``generation`` is unchanged.
    """

    events: list[Event]
    generation: str
    end: int


class EventLogStorage(Protocol):
    """Append-only per-user event log plus settings."""

    def user_exists(self, user_id: str) -> bool: ...

    def read_events(self, user_id: str, *, generation: str | None = None, start: int = 0) -> LogSnapshot:
        """Events from ``start`` when ``generation`` still matches, else the whole log."""
        ...

    def append(self, user_id: str, events: Sequence[Event]) -> list[Event]:
        """Durably append ``events`` (assigning ``seq``); returns them with their ``seq``."""
        ...

    def rewrite(self, user_id: str, keep: Callable[[Event], Event | None]) -> int:
        """Atomically rewrite the log through ``keep`` (``None`` drops an event).

        Returns the number of events dropped or changed. ``seq`` numbers are never reused.
        """
        ...

    def read_settings(self, user_id: str) -> UserSettings | None: ...

    def write_settings(self, user_id: str, settings: UserSettings) -> None: ...
