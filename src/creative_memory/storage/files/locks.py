"""The file store's per-user locks (docs/storage.md, "Durability guarantees"): one thread
lock per user directory in the process, and an ``flock`` on the directory's ``.lock`` file
for other processes."""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Callable
from pathlib import Path

from creative_memory.storage.files.fsutil import make_private_dir

LOCK_NAME = ".lock"

# one thread lock per resolved user directory, shared by every FileStorage of the process
_thread_locks: dict[str, threading.Lock] = {}
_thread_locks_guard = threading.Lock()


class UserLocks:
    """The locks of the users under one root; ``user_dir(user)`` is a user's directory
    (created, 0700, when a lock is taken)."""

    def __init__(self, user_dir: Callable[[str], Path]) -> None:
        self._user_dir = user_dir
        self._known: dict[str, tuple[threading.Lock, str]] = {}  # user → (lock, lock path)

    def locked(self, user_id: str) -> contextlib.AbstractContextManager[None]:
        """Hold the user's lock (threads of this process and other processes)."""
        tlock, lock_path = self._lock_of(user_id)
        return _Held(tlock, lock_path, lambda: make_private_dir(self._user_dir(user_id)))

    def is_free(self, user_id: str) -> bool:
        """Whether nobody — no thread of this process, no other process — holds the user's
        lock at this moment: a hint for a caller that must not wait (docs/daemon.md, "The
        ingest lane"); the lock is not kept, so it may be taken right after. Creates
        nothing: a user without a directory has nobody holding their lock."""
        if user_id not in self._known and not os.path.isdir(self._user_dir(user_id)):
            return True
        tlock, lock_path = self._lock_of(user_id)
        if not tlock.acquire(blocking=False):
            return False
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except FileNotFoundError:  # no directory: nobody can hold its lock
            tlock.release()
            return True
        except BaseException:  # (e.g. out of descriptors) the thread lock is not kept
            tlock.release()
            raise
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
            d = self._user_dir(user_id)
            make_private_dir(d)
            with _thread_locks_guard:
                tlock = _thread_locks.setdefault(str(d.resolve()), threading.Lock())
            known = self._known[user_id] = (tlock, str(d / LOCK_NAME))
        return known


class _Held:
    """One holding of a user's lock: the thread lock, then ``flock`` on the lock file (a
    class rather than a generator: it is entered on every append)."""

    __slots__ = ("_ensure", "_fd", "_path", "_tlock")

    def __init__(self, tlock: threading.Lock, path: str, ensure: Callable[[], object]) -> None:
        self._tlock, self._path, self._ensure = tlock, path, ensure
        self._fd = -1

    def __enter__(self) -> None:
        self._tlock.acquire()
        try:
            try:
                fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
            except FileNotFoundError:  # the directory was removed from outside
                self._ensure()
                fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except BaseException:
                os.close(fd)
                raise
        except BaseException:
            self._tlock.release()
            raise
        self._fd = fd

    def __exit__(self, *exc: object) -> None:
        try:
            os.close(self._fd)  # releases the flock
        finally:
            self._tlock.release()
