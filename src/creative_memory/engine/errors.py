"""Error types (docs/architecture.md, "Errors"). Every bad-input error is a ``ValueError``
subclass naming its field; the surfaces map each type to one answer:

=================  ==================  ===========================================
type               CLI                 HTTP
=================  ==================  ===========================================
ValidationError    exit 2, one line    422 problem+json naming ``field``
NotFound           exit 1, one line    404 problem+json naming ``field``
Conflict           exit 1, one line    409 problem+json naming ``field``
anything else      exit 1, one line    500 problem+json with a correlation id
=================  ==================  ===========================================
"""

from __future__ import annotations

import re


class CreativeMemoryError(Exception):
    """Base class for creative-memory errors that are not bad input."""


class ValidationError(ValueError):
    """Bad input. ``field`` names the offending field (also present in the message)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class NotFound(CreativeMemoryError, LookupError):
    """The input is well-formed but names nothing that exists; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class Conflict(CreativeMemoryError):
    """The operation cannot be done in the current state; ``field`` names the input."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class StorageError(CreativeMemoryError):
    """The storage backend could not complete an operation (nothing was written)."""


class LogDamaged(StorageError):
    """A user's stored memory was changed outside creative-memory (a line of the log that
    is not an event, an edited event, a header or settings that do not load): a check says
    what, a repair mends it (docs/storage.md, "Check and repair")."""


_AT = re.compile(r" - at `\$\.?(?P<path>[^`]*)`$")
_NAMED = re.compile(r"^Object (?:missing required|contains unknown) field `(?P<name>[^`]+)`")


def struct_error_field(message: str, whole: str = "body") -> str:
    """The field a msgspec validation message is about (``whole`` when it is about the
    whole document): ``"events[3].polarity"`` for "... - at `$.events[3].polarity`"."""
    at = _AT.search(message)
    path = at["path"].replace("[...]", "") if at else ""
    named = _NAMED.match(message)
    if named:
        path = f"{path}.{named['name']}" if path else named["name"]
    return path or whole
