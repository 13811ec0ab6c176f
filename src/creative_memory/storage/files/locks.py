"""The file store's per-user locks (docs/storage.md, "Durability guarantees"): one thread
lock per user directory in the process, and an ``flock`` on the directory's ``.lock`` file
for other processes."""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

LOCK_NAME = ".lock"

# one thread lock per resolved user directory, shared by every FileStorage of the process
_thread_locks: dict[str, threading.Lock] = {}
_thread_locks_guard = threading.Lock()


class UserLocks:
    """The locks of the users under one root; ``ensure_dir(user)`` creates (0700) and
    returns a user's directory."""

    def __init__(self, ensure_dir: Callable[[str], Path]) -> None:
        self._ensure_dir = ensure_dir
        self._known: dict[str, tuple[threading.Lock, str]] = {}  # user → (lock, lock path)

    @contextlib.contextmanager
    def locked(self, user_id: str) -> Iterator[None]:
        """Hold the user's lock (threads of this process and other processes)."""
        tlock, lock_path = self._lock_of(user_id)
        with tlock:
            try:
                fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            except FileNotFoundError:  # the directory was removed from outside
                self._ensure_dir(user_id)
                fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)

    def is_free(self, user_id: str) -> bool:
        """Whether nobody — no thread of this process, no other process — holds the user's
        lock at this moment: a hint for a caller that must not wait (docs/daemon.md, "The
        ingest lane"); the lock is not kept, so it may be taken right after."""
        tlock, lock_path = self._lock_of(user_id)
        if not tlock.acquire(blocking=False):
            return False
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except FileNotFoundError:  # no directory: nobody can hold its lock
            tlock.release()
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        finally:
            os.close(fd)  # releases the flock
            tlock.release()
        return True

    def _lock_of(self, user_id: str) -> tuple[threading.Lock, str]:
        known = self._known.get(user_id)
        if known is None:
            d = self._ensure_dir(user_id)
            with _thread_locks_guard:
                tlock = _thread_locks.setdefault(str(d.resolve()), threading.Lock())
            known = self._known[user_id] = (tlock, str(d / LOCK_NAME))
        return known
