"""The ingest lane (docs/daemon.md, "The ingest lane"): runs a long-lived host's ingest
calls in arrival order, in batches that share their durability — on the event loop when
nothing can make a batch wait, else in the lane's thread.

A host with many concurrent writers (the daemon's ``POST /api/v1/events``) hands each call
to :meth:`IngestLane.run` instead of a thread pool. The lane's thread takes every call
queued so far as one batch and runs them one after the other inside the file store's
``deferred_sync()`` block: each call's appends are written as it runs, and the batch ends
with one fsync per log it wrote — then, and only then, every call of the batch is answered,
with one wake-up of the event loop for the whole batch. The slower the disk, the more calls
queue behind an fsync and the larger the next batch: the batch is the group commit.

Nothing is acknowledged before it is durable: if the batch's fsync fails, every call of
the batch that did not fail on its own fails with that ``StorageError``. Readers of the
store see a batch's events only once they are durable (``Appended.durable``); then they
are folded from memory into the users' derived states (``deferred_appends`` of the
store's states), so the next read need not read them back. Calls keep
their arrival order, so the capture layer's ordering rules hold as they do for one caller.
A store without deferred sync (PostgreSQL) runs each call on its own, one after the other;
the daemon keeps its thread pool for such a store instead (docs/daemon.md).

A call that names its user (the daemon's) runs on the event loop itself when it can run
there without waiting: the calls made within :data:`LOOP_TURNS` turns of the loop form a
batch, run the same way right there — no thread, no hand-off of the interpreter lock, one
fsync — as long as the lane's thread has nothing queued or running (order), the batch
holds at most :data:`LOOP_BATCH_EVENTS` events, and nobody holds the lock of any of its
users (a rewrite: a forget, a reset, an import, a write-back, another process).
Otherwise the batch goes to the thread, where it may wait. That check does not keep the
locks: a call may wait for another thread's delivery of the same artifact (the capture
ticker's), which needs the user's lock, so a batch that kept it would deadlock the loop
(docs/daemon.md, "The ingest lane").
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import zlib
from collections import deque
from collections.abc import Callable
from typing import Any, Final, Generic, TypeVar

from creative_memory.app.store import MemoryStore

T = TypeVar("T")

#: How many lanes a daemon serving several users runs (:class:`IngestLanes`).
MULTI_USER_LANES: Final = 8

#: How many turns of the event loop a batch waits for calls after its first one. Each turn
#: reads the sockets that became readable meanwhile: the clients answered last, whose
#: requests arrive while the loop sends the other answers, join the batch instead of
#: making the next one (with 16 clients: batches about twice as large, fewer fsyncs, and
#: fewer distinct states for reads to derive: docs/performance.md).
LOOP_TURNS: Final = 3

#: The most events a batch may hold to run on the event loop (larger ones run in the
#: lane's thread, so that a bulk request does not hold up the daemon's reads): at ~0.15 ms
#: an event, about 10 ms.
LOOP_BATCH_EVENTS: Final = 64


class _Call(Generic[T]):
    __slots__ = ("error", "events", "fn", "future", "loop", "user", "value")

    def __init__(
        self,
        fn: Callable[[], T],
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[T],
        user: str | None = None,
        events: int = 1,
    ) -> None:
        self.fn, self.loop, self.future = fn, loop, future
        self.user, self.events = user, events
        self.value: T | None = None
        self.error: BaseException | None = None


class IngestLane:
    """Runs calls in arrival order, a batch at a time, on the event loop or in the lane's
    thread (module docstring)."""

    def __init__(self, store: MemoryStore) -> None:
        storage = store._storage
        #: the batch's block: one fsync per log at its end, then its appends folded
        self._deferred: Callable[[], contextlib.AbstractContextManager[Any]] = (
            store._states.deferred_appends
        )
        #: whether a user's lock is free now (the file store); without it, the thread only
        self._free: Callable[[str], bool] | None = getattr(storage, "lock_is_free", None)
        self._queue: deque[_Call[Any]] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._busy = False  # the thread is running a batch
        self._here: dict[asyncio.AbstractEventLoop, list[_Call[Any]]] = {}  # the loop's batch
        self.batches = 0  # how many batches ran (in the thread or on a loop), and their calls
        self.calls = 0
        self.on_loop = 0  # how many of the batches ran on an event loop
        self._thread: threading.Thread | None = None  # started by the first call it runs

    async def run(self, fn: Callable[[], T], *, user: str | None = None, events: int = 1) -> T:
        """``fn()`` in the lane, answered once the batch it ran in is durable; raises what
        ``fn`` raised, or the batch's ``StorageError``. ``RuntimeError`` once closed.

        A call naming the ``user`` whose log it appends to (and how many ``events``) may
        run on this event loop, in a batch with the others made within a few turns of it
        (module docstring); ``fn`` must then not wait long for anything but that user's lock
        (the daemon's ingest waits at most for another delivery of the same artifact)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        call = _Call(fn, loop, future, user, events)
        if user is None or self._free is None:
            self._to_thread([call])
        else:
            if self._closed:
                raise RuntimeError("the ingest lane is closed")
            batch = self._here.get(loop)
            if batch is None:
                batch = self._here[loop] = []
                loop.call_soon(self._run_here, loop, LOOP_TURNS)
            batch.append(call)
        return await future

    def close(self, timeout: float | None = None) -> bool:
        """Stop taking calls, run those already queued and stop the thread; whether it
        stopped within ``timeout``."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is None:  # never used
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def _to_thread(self, calls: list[_Call[Any]], *, closed_too: bool = False) -> None:
        """Queue ``calls`` for the thread (starting it); ``RuntimeError`` once closed, unless
        ``closed_too`` (calls accepted before the lane closed)."""
        with self._cond:
            if self._closed and not closed_too:
                raise RuntimeError("the ingest lane is closed")
            if self._thread is None or not self._thread.is_alive():
                self._start_thread()
            self._queue.extend(calls)
            self._cond.notify()

    def _start_thread(self) -> None:
        """Start the lane's thread (with the condition held)."""
        self._thread = threading.Thread(target=self._serve, name="creative-memory-lane")
        self._thread.daemon = True
        self._thread.start()

    def _run_here(self, loop: asyncio.AbstractEventLoop, turns: int) -> None:
        """After ``turns`` more turns of the loop, the calls made meanwhile: run them here
        if none of them may wait, else queue them for the thread (module docstring)."""
        if turns > 1:
            loop.call_soon(self._run_here, loop, turns - 1)
            return
        batch = self._here.pop(loop)
        try:
            if not self._may_run_here(batch):
                self._to_thread(batch, closed_too=True)
                return
        except Exception as exc:  # (no thread to be had) nothing ran: each call is told
            for call in batch:
                call.error = exc
            _answer(batch)
            return
        self.on_loop += 1
        try:
            self._execute(batch)
        finally:  # (also after an interruption: every call is answered)
            _answer(batch)

    def _may_run_here(self, batch: list[_Call[Any]]) -> bool:
        """Whether ``batch`` may run on the loop: the thread has nothing queued or running,
        the batch holds at most :data:`LOOP_BATCH_EVENTS` events, nobody holds its users'
        locks (a check that fails says no: the thread will meet the failure and report
        it)."""
        free = self._free
        assert free is not None
        with self._cond:
            if self._queue or self._busy:
                return False
        if sum(call.events for call in batch) > LOOP_BATCH_EVENTS:
            return False
        try:
            return all(free(user) for user in {call.user for call in batch if call.user})
        except Exception:
            return False

    def _serve(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:  # closed, and nothing left
                    return
                batch = list(self._queue)
                self._queue.clear()
                self._busy = True
            interrupted: BaseException | None = None
            try:
                self._execute(batch)
            except BaseException as exc:  # (not an Exception) it ends this thread, below
                interrupted = exc
            with self._cond:  # done: the calls after it may run on the loop
                self._busy = False
                if interrupted is not None:  # another thread serves what comes next
                    self._thread = None
                    if self._queue:
                        self._start_thread()
            loops: dict[asyncio.AbstractEventLoop, list[_Call[Any]]] = {}
            for call in batch:  # every call is answered, also after an interruption
                loops.setdefault(call.loop, []).append(call)
            for loop, calls in loops.items():  # one wake-up of each event loop per batch
                with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
                    loop.call_soon_threadsafe(_answer, calls)
            if interrupted is not None:
                raise interrupted

    def _execute(self, batch: list[_Call[Any]]) -> None:
        """Run ``batch`` in one deferred-sync block, each call's value or error kept."""
        try:
            with self._deferred():
                for call in batch:
                    try:
                        call.value = call.fn()
                    except Exception as exc:  # the call's own failure: reported to it alone
                        call.error = exc
        except Exception as exc:  # the batch's fsync: nothing of it is acknowledged
            for call in batch:
                if call.error is None:
                    call.error = exc
        except BaseException:  # an interruption (not an Exception): nothing acknowledged
            for call in batch:
                if call.error is None:
                    call.error = RuntimeError("the ingest was interrupted")
            raise
        finally:
            with self._cond:
                self.batches += 1
                self.calls += len(batch)


class IngestLanes:
    """``count`` lanes, each with a thread of its own once a batch of it had to go there;
    a user's calls always take the same lane (by a hash of the id), in arrival order. A
    daemon serving several users has :data:`MULTI_USER_LANES`, so a user whose log is being
    rewritten (a forget over a long log holds its lock) holds up only the users who share
    its lane."""

    def __init__(self, store: MemoryStore, count: int = 1) -> None:
        self.lanes = [IngestLane(store) for _ in range(count)]

    def of(self, user_id: str) -> IngestLane:
        """The lane of ``user_id``."""
        return self.lanes[zlib.crc32(user_id.encode()) % len(self.lanes)]

    async def run(self, user_id: str, fn: Callable[[], T], *, events: int = 1) -> T:
        """``fn()``, a call that appends ``events`` for ``user_id``, in that user's lane
        (:meth:`IngestLane.run`; it may run on the event loop)."""
        return await self.of(user_id).run(fn, user=user_id, events=events)

    def close(self, timeout: float | None = None) -> bool:
        """Close every lane (:meth:`IngestLane.close`); whether all stopped in time."""
        return all([lane.close(timeout) for lane in self.lanes])


def _answer(calls: list[_Call[Any]]) -> None:
    """Settle the futures of ``calls`` (on their event loop)."""
    for call in calls:
        if call.future.done():  # the request was cancelled meanwhile
            continue
        if call.error is not None:
            call.future.set_exception(call.error)
        else:
            call.future.set_result(call.value)
