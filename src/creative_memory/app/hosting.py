"""What a long-lived host (the daemon) may do on its event loop (docs/http.md, "Serving a
request"): questions about a :class:`~creative_memory.app.store.MemoryStore` that only
this layer answers, so the HTTP layer never reaches into the store."""

from __future__ import annotations

from creative_memory.app.store import MemoryStore
from creative_memory.storage import FileStorage


def is_local(store: MemoryStore) -> bool:
    """Whether ``store`` keeps its data in local files (no network round trips): the file
    store, whose ingest the lane batches and whose current reads may run on the loop."""
    return isinstance(store._storage, FileStorage)


def reads_current(store: MemoryStore, user: str) -> bool:
    """Whether the store's published read-only state of ``user`` (app/derived.py) reflects
    the whole log: one settings read and one ``read_events`` from its end, which the file
    store answers with a ``stat``; a database is never asked (``False``). ``False``
    whenever that cannot be told (the read itself then judges and reports it)."""
    if not is_local(store):
        return False
    try:
        return store._states_of(user).published_current(user)
    except Exception:
        return False
