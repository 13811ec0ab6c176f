"""Per-user controls: the settings every surface reads and changes (docs/architecture.md)."""

from __future__ import annotations

import msgspec

from creative_memory.engine.timeutil import ts_to_ms


class VersionChange(msgspec.Struct, kw_only=True):
    """One switch of a user's derivation version: when, and from which to which."""

    at: str  # normalised UTC
    version: str
    previous: str


class UserSettings(msgspec.Struct, kw_only=True):
    """Per-user controls (docs/architecture.md). Settings are not events: they are not derived."""

    memory_enabled: bool = True
    paused: bool = False
    paused_until: str | None = None  # normalised UTC; None with paused=True = until resumed
    disabled_projects: list[str] = msgspec.field(default_factory=list)
    diagnostics_feed: bool = False
    #: The derivation version this user's memory uses; None = the store's default.
    derivation_version: str | None = None
    #: Every switch, oldest first (as-of inspection derives the past under its version).
    derivation_history: list[VersionChange] = msgspec.field(default_factory=list)


def version_at(settings: UserSettings, default: str, at: str | None) -> str:
    """The derivation version in force at ``at`` (normalised UTC; ``None`` = now)."""
    if at is None:
        return settings.derivation_version or default
    version = settings.derivation_history[0].previous if settings.derivation_history else None
    at_ms = ts_to_ms(at)  # as instants: an expanded year (``+010000-…``) sorts apart as text
    for change in settings.derivation_history:
        if ts_to_ms(change.at) <= at_ms:
            version = change.version
    return version or settings.derivation_version or default
