"""Group commit, for every backend (docs/storage.md, "Group commit"): the appends that
arrive under one key while a write of that key is in flight wait, and the next leader
writes all of them together — one write and one fsync for the file log (a key per user),
one transaction for PostgreSQL (one key for the process: appends of several users share a
transaction) — in arrival order, exactly as one append after the other would be. Each
caller returns once that write is durable, with its own events and positions, or with its
own error.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

from creative_memory.engine.errors import StorageError
from creative_memory.storage.base import Appended

K = TypeVar("K", bound=Hashable)
P = TypeVar("P")

#: Writes one key's calls (each call's payload, in arrival order) durably, together;
#: returns each call's :class:`Appended` — or the exception that call fails with — in the
#: same order. If it raises, every call fails with that exception.
Commit = Callable[[K, Sequence[P]], Sequence[Appended | BaseException]]


class _Waiter(Generic[P]):
    __slots__ = ("done", "error", "lead", "payload", "result")

    def __init__(self, payload: P) -> None:
        self.payload = payload
        self.done: threading.Event | None = None  # a follower's: set when it may go on
        self.lead = False
        self.result: Appended | None = None
        self.error: BaseException | None = None


class GroupCommit(Generic[K, P]):
    """Leader/follower queues, one per key with a write in flight (and only while it is)."""

    def __init__(self, commit: Commit[K, P]) -> None:
        self._commit = commit
        self._lock = threading.Lock()
        self._queues: dict[K, list[_Waiter[P]]] = {}  # a key with a leader -> its waiters

    def pending(self, key: K) -> int:
        """How many calls under ``key`` wait for the next write."""
        with self._lock:
            return len(self._queues.get(key, []))

    def append(self, key: K, payload: P) -> Appended:
        """Append ``payload`` (events, non-empty), alone or together with concurrent appends
        of the same key; returns once they are durable. If the write fails, every call it
        carried fails: the leader with the error itself, the others with it (a
        ``StorageError`` as a new one, raised from it, so each thread has its own
        traceback); a call the write fails alone fails the same way."""
        me = _Waiter(payload)
        with self._lock:
            queue = self._queues.get(key)
            if queue is None:
                self._queues[key] = []
                me.lead = True
            else:
                me.done = threading.Event()
                queue.append(me)
        if me.done is not None:
            me.done.wait()
        if me.lead:
            self._lead(key, me)
        if me.error is not None:
            if me.lead or not isinstance(me.error, StorageError):
                raise me.error
            raise StorageError(str(me.error)) from me.error  # the leader's, re-raised here
        assert me.result is not None
        return me.result

    def _lead(self, key: K, me: _Waiter[P]) -> None:
        with self._lock:
            queue = self._queues[key]
            batch = [me, *queue]
            queue.clear()
        try:
            self._write(key, batch)
        finally:
            with self._lock:
                queue = self._queues[key]
                successor = queue.pop(0) if queue else None
                if successor is None:
                    del self._queues[key]
                else:
                    successor.lead = True
            for w in batch[1:]:
                assert w.done is not None
                w.done.set()
            if successor is not None:
                assert successor.done is not None
                successor.done.set()

    def _write(self, key: K, batch: list[_Waiter[P]]) -> None:
        try:
            results = self._commit(key, [w.payload for w in batch])
        except BaseException as exc:  # nothing of the batch was acknowledged: all fail
            for w in batch:
                w.error = exc
            return
        for w, result in zip(batch, results, strict=True):
            if isinstance(result, BaseException):
                w.error = result
            else:
                w.result = result
