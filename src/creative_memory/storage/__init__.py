"""Storage backends behind one contract (docs/storage.md)."""

from creative_memory.engine.settings import UserSettings
from creative_memory.storage.base import (
    Appended,
    EventLogStorage,
    LogSnapshot,
    SettingsChanged,
    SettingsSeen,
)
from creative_memory.storage.files.backend import FileStorage

__all__ = [
    "Appended",
    "EventLogStorage",
    "FileStorage",
    "LogSnapshot",
    "SettingsChanged",
    "SettingsSeen",
    "UserSettings",
]
