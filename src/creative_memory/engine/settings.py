"""Per-user controls: the settings every surface reads and changes (docs/architecture.md)."""

from __future__ import annotations

import msgspec


class UserSettings(msgspec.Struct, kw_only=True):
    """Per-user controls (docs/architecture.md). Settings are not events: they are not derived."""

    memory_enabled: bool = True
    paused: bool = False
    paused_until: str | None = None  # normalised UTC; None with paused=True = until resumed
    disabled_projects: list[str] = msgspec.field(default_factory=list)
    diagnostics_feed: bool = False
