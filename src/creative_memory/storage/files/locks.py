"""The file store's per-user locks (docs/storage.md, "Durability guarantees"): one thread
lock per user directory in the process, and an ``flock`` on the directory's ``.lock`` file
for other processes. A thread that must not wait takes them only if they are free
(:meth:`UserLocks.hold_if_free`), and its own appends inside that holding take them again
without waiting."""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from creative_memory.storage.files.fsutil import make_private_dir

LOCK_NAME = ".lock"
_ALREADY_HELD = -2  # _Held's descriptor while an enclosing holding of its thread has it

# one thread lock per resolved user directory, shared by every FileStorage of the process
_thread_locks: dict[str, threading.Lock] = {}
_thread_locks_guard = threading.Lock()

# per thread: the users' thread locks it holds through hold_if_free, with their flock
# (``locked`` of one of them, in that thread, holds nothing more: it is already held)
_holding = threading.local()


def _held_here() -> set[threading.Lock]:
    held: set[threading.Lock] | None = getattr(_holding, "locks", None)
    if held is None:
        held = _holding.locks = set()
    return held


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

    @contextlib.contextmanager
    def hold_if_free(self, user_ids: Iterable[str]) -> Iterator[bool]:
        """Hold the locks of ``user_ids`` for the block if nobody — no thread of this
        process, no other process — holds any of them now, without waiting: yields whether
        it did (``False``: it holds none). Inside the block this thread's ``locked`` of
        those users holds nothing more (docs/storage.md, "Durability guarantees"); other
        threads and processes wait for the block to end. Creates nothing: a user without a
        directory has nobody holding their lock, and is not held (their first append takes
        the lock as usual)."""
        held = _held_here()
        taken: list[tuple[threading.Lock, int]] = []
        try:
            for user_id in sorted(set(user_ids)):
                if user_id not in self._known and not os.path.isdir(self._user_dir(user_id)):
                    continue
                tlock, lock_path = self._lock_of(user_id)
                if tlock in held:  # (an enclosing holding of this thread)
                    continue
                if not tlock.acquire(blocking=False):
                    yield False
                    return
                try:
                    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
                except FileNotFoundError:  # the directory is gone: nobody holds its lock
                    tlock.release()
                    continue
                except BaseException:
                    tlock.release()
                    raise
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BaseException as exc:
                    os.close(fd)
                    tlock.release()
                    if isinstance(exc, BlockingIOError):
                        yield False
                        return
                    raise
                taken.append((tlock, fd))
                held.add(tlock)
            yield True
        finally:
            for tlock, fd in reversed(taken):
                held.discard(tlock)
                try:
                    os.close(fd)  # releases the flock
                finally:
                    tlock.release()

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
    class rather than a generator: it is entered on every append); nothing more when this
    thread holds it already through :meth:`UserLocks.hold_if_free`."""

    __slots__ = ("_ensure", "_fd", "_path", "_tlock")

    def __init__(self, tlock: threading.Lock, path: str, ensure: Callable[[], object]) -> None:
        self._tlock, self._path, self._ensure = tlock, path, ensure
        self._fd = -1

    def __enter__(self) -> None:
        held: set[threading.Lock] | None = getattr(_holding, "locks", None)
        if held and self._tlock in held:
            self._fd = _ALREADY_HELD
            return
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
        if self._fd == _ALREADY_HELD:
            return
        try:
            os.close(self._fd)  # releases the flock
        finally:
            self._tlock.release()
