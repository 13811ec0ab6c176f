"""Deferred fsync (docs/storage.md, "One fsync for a batch"): the appends one thread makes
inside a ``FileStorage.deferred_sync()`` block are written at once and fsynced together
when the block ends — one fsync per log for the whole block instead of one per append."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from creative_memory.engine.errors import StorageError
from creative_memory.storage.files.fsutil import fsync_path


class Deferring:
    """Per thread: the users whose logs the thread's open deferred block has written, and
    their fsync when it ends. ``locked(user)`` is the log's lock, ``path(user)`` its file,
    ``synced(user, ok)`` is called under the lock once its fsync is done (or failed)."""

    def __init__(
        self,
        locked: Callable[[str], contextlib.AbstractContextManager[Any]],
        path: Callable[[str], Path],
        synced: Callable[[str, bool], None],
    ) -> None:
        self._local = threading.local()
        self._locked, self._path, self._synced = locked, path, synced

    def scope(self) -> dict[str, None] | None:
        """The users written so far in this thread's block (``None`` outside a block)."""
        users: dict[str, None] | None = getattr(self._local, "users", None)
        return users

    @contextlib.contextmanager
    def block(self) -> Iterator[None]:
        """A block of this thread; at its end (also when it raised) the logs it wrote are
        fsynced, in the order they were first written; a failed fsync raises a
        ``StorageError`` once every log has been tried."""
        if self.scope() is not None:
            raise RuntimeError("deferred_sync blocks do not nest")
        users: dict[str, None] = {}
        self._local.users = users
        try:
            yield
        finally:
            self._local.users = None
            self._sync(list(users))

    def _sync(self, users: Sequence[str]) -> None:
        failed: OSError | None = None
        for user_id in users:
            with self._locked(user_id):
                ok = True
                try:
                    fsync_path(self._path(user_id))
                except FileNotFoundError:  # reset meanwhile: nothing of it is left to sync
                    pass
                except OSError as exc:
                    failed, ok = failed or exc, False
                finally:
                    self._synced(user_id, ok)
        if failed is not None:
            raise StorageError(f"fsync of an event log failed ({failed})") from failed
