"""Storage backends behind one contract (design.md §6)."""

from .base import Appended, EventLogStorage, LogSnapshot, UserSettings
from .files import FileStorage

__all__ = ["Appended", "EventLogStorage", "FileStorage", "LogSnapshot", "UserSettings"]
