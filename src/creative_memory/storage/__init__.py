"""Storage backends behind one contract (design.md §6)."""

from .base import EventLogStorage, LogSnapshot, UserSettings
from .files import FileStorage

__all__ = ["EventLogStorage", "FileStorage", "LogSnapshot", "UserSettings"]
