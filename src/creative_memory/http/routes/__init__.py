"""The routes, grouped by area; each module publishes its ``OPERATIONS`` (docs/http.md)."""

from __future__ import annotations

from creative_memory.http.routes import (
    derivation,
    events,
    memory,
    page,
    portability,
    prompt,
    settings,
)
from creative_memory.http.routes.common import Operation

#: Every route of the daemon, in mounting order.
OPERATIONS: tuple[Operation, ...] = (
    *page.OPERATIONS,
    *memory.OPERATIONS,
    *events.OPERATIONS,
    *prompt.OPERATIONS,
    *settings.OPERATIONS,
    *derivation.OPERATIONS,
    *portability.OPERATIONS,
)

__all__ = ["OPERATIONS", "Operation"]
