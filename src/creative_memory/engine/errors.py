"""Error types. Every bad-input error is a ``ValueError`` subclass naming its field."""

from __future__ import annotations


class CreativeMemoryError(Exception):
    """Base class for creative-memory errors that are not bad input."""


class ValidationError(ValueError):
    """Bad input. ``field`` names the offending field (also present in the message)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class StorageError(CreativeMemoryError):
    """The storage backend could not complete an operation (nothing was written)."""
