"""The diagnostics feed for chat: one line per retrieval, only for users who switched it on.

The summary itself is the pure :func:`creative_memory.engine.prompt.summarize_diagnostics`; this
helper adds the per-user ``diagnostics_feed`` setting (off by default,
``MemoryStore.set_diagnostics_feed``).
"""

from __future__ import annotations

from creative_memory.app.store import MemoryStore
from creative_memory.engine.models import RetrievalResult
from creative_memory.engine.prompt import summarize_diagnostics


def diagnostics_feed_line(store: MemoryStore, user_id: str, retrieved: RetrievalResult) -> str:
    """The one-line diagnostics summary for ``user_id``'s chat, or ``""`` when the user's
    ``diagnostics_feed`` setting is off or nothing notable happened in ``retrieved``."""
    if not store.get_settings(user_id).diagnostics_feed:
        return ""
    return summarize_diagnostics(retrieved)
