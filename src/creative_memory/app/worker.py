"""The background derivation worker (docs/daemon.md, "Background derivation").

With it, a long-lived host (the daemon, ``--derivation background``) derives each user's
state after an accepted batch, off the request path, and writes it back under the store's
usual write-back rule, so the next read finds the state folded and fitted. It is an
optimisation only: every read still brings the state up to date itself (lazily, under the
same locks), so a read that finds the worker behind derives what is missing and gets the
same bytes (docs/performance.md, "Daemon").

After deriving it computes the retrievals a host asks for next — global memory and each
project's (at most :data:`WARM_PROJECTS`), which the state memoises — so the first read
after a batch finds its answer ready, not only the records. One thread. Notifications are
coalesced per user: a user waits in the queue at most once, however many batches arrive
before the worker gets to them, and the worker derives a user once their batches have
paused for ``coalesce_ms`` — or, under a steady stream, ``max_wait_ms`` after the first
batch it has not derived yet. It holds user ids and counters only — never an
event or a pattern — and as an erasure listener it drops a user's queued derivation before
a forget or reset rewrites the log (docs/architecture.md, "Erasure").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final, Literal

import msgspec

from creative_memory.app.store import MemoryStore
from creative_memory.engine.erasure import Erasure
from creative_memory.engine.timeutil import format_ts

#: How long a user's batches must pause (no new one) before the user is derived.
DEFAULT_COALESCE_MS: Final = 20.0

#: The longest a user waits for such a pause: under a steady stream of batches the user
#: is derived this long after the first batch not yet derived (so the worker's fits take
#: a bounded share of the interpreter lock the requests need: docs/performance.md).
DEFAULT_MAX_WAIT_MS: Final = 250.0

#: At most this many projects' retrievals are computed ahead of the first read.
WARM_PROJECTS: Final = 16

ErrorReport = Callable[[str, BaseException], None]


class UserDerivation(msgspec.Struct, kw_only=True):
    """The worker's record of one user: whether a derivation is queued (``pending``: the
    batches it will cover), how many derivations ran, and the last one's time (the store's
    clock, ISO 8601), duration and error, if it failed. ``mode`` is ``"lazy"`` where no
    worker runs (:func:`lazy_status`): reads derive, and the rest stays at its defaults."""

    user_id: str
    mode: Literal["lazy", "background"] = "background"
    queued: bool = False
    pending: int = 0
    derivations: int = 0
    last_derived_at: str | None = None
    last_duration_ms: float | None = None
    last_error: str | None = None


class WorkerStatus(msgspec.Struct, kw_only=True):
    """The worker as a whole: ``running`` (its thread is alive and not closed),
    ``queue_depth`` (users waiting for a derivation), the derivations done and failed, and
    the most recent derivation's time and duration, whichever user it was for."""

    running: bool
    queue_depth: int
    derivations: int
    failures: int
    last_derived_at: str | None = None
    last_duration_ms: float | None = None


class DerivationWorker:
    """Derives users' states in one background thread after :meth:`notify`.

    ``store`` is derived through its own refresh under its per-user lock (so the worker and
    the readers never fold the same events twice); ``coalesce_ms`` is the pause that ends a
    burst, ``max_wait_ms`` the longest a user waits for one (at least ``coalesce_ms``);
    ``on_error`` is told of a derivation that failed (the next read will
    try again, lazily). The worker registers itself as the store's erasure listener.
    """

    def __init__(
        self,
        store: MemoryStore,
        *,
        coalesce_ms: float = DEFAULT_COALESCE_MS,
        max_wait_ms: float = DEFAULT_MAX_WAIT_MS,
        on_error: ErrorReport | None = None,
        start: bool = True,
    ) -> None:
        self.store = store
        self.coalesce_s = max(0.0, coalesce_ms) / 1000
        self.max_wait_s = max(self.coalesce_s, max_wait_ms / 1000)
        self.on_error = on_error
        self._cond = threading.Condition()
        # user → monotonic times of the first and the last notification not yet derived
        self._queue: dict[str, tuple[float, float]] = {}
        self._users: dict[str, UserDerivation] = {}
        self._busy: str | None = None
        self._closed = False
        self._derivations = 0
        self._failures = 0
        self._last: tuple[str, float] | None = None
        self._thread = threading.Thread(
            target=self._run, name="creative-memory-derivation", daemon=True
        )
        store.add_erasure_listener(self)
        if start:
            self._thread.start()

    # -- the host's side -----------------------------------------------------------------
    def notify(self, user_id: str) -> bool:
        """Queue a derivation of ``user_id`` (coalesced with one already queued); returns
        ``False`` once the worker is closed (the next read derives lazily)."""
        with self._cond:
            if self._closed:
                return False
            now = time.monotonic()
            first, _ = self._queue.get(user_id, (now, now))
            self._queue[user_id] = (first, now)  # (stays in its place in the queue)
            user = self._user(user_id)
            user.queued = True
            user.pending += 1
            self._cond.notify()
            return True

    def status(self) -> WorkerStatus:
        """Queue depth, counters and the most recent derivation."""
        with self._cond:
            last = self._last
            return WorkerStatus(
                running=self._thread.is_alive() and not self._closed,
                queue_depth=len(self._queue),
                derivations=self._derivations,
                failures=self._failures,
                last_derived_at=None if last is None else last[0],
                last_duration_ms=None if last is None else last[1],
            )

    def status_of(self, user_id: str) -> UserDerivation:
        """One user's record (a copy; all defaults for a user never notified)."""
        with self._cond:
            user = self._users.get(user_id)
            return UserDerivation(user_id=user_id) if user is None else _copy(user)

    def users(self) -> list[UserDerivation]:
        """Every user's record, in user id order (copies)."""
        with self._cond:
            return [_copy(self._users[u]) for u in sorted(self._users)]

    def idle(self) -> bool:
        """Whether nothing is queued or being derived."""
        with self._cond:
            return not self._queue and self._busy is None

    def wait_idle(self, timeout: float) -> bool:
        """Block until :meth:`idle` (or ``timeout`` seconds); returns whether it is."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._queue or self._busy is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    return False
                self._cond.wait(left)
            return True

    def purge(self, erasure: Erasure) -> int:
        """Drop the user's queued derivation before an erasure rewrites their log (the
        rewrite re-derives); 1 when one was queued, else 0. The worker keeps no events or
        patterns, so nothing else can hold what is erased."""
        with self._cond:
            if self._queue.pop(erasure.user_id, None) is None:
                return 0
            user = self._users.get(erasure.user_id)
            if user is not None:
                user.queued, user.pending = False, 0
            self._cond.notify_all()
            return 1

    def close(self, timeout: float = 10.0, *, drain: bool = True) -> bool:
        """Stop: no more notifications; with ``drain`` the queue is derived first (within
        ``timeout`` seconds, then abandoned: every event is in the log already, and reads
        derive lazily). Returns whether the thread stopped in time."""
        with self._cond:
            self._closed = True
            if not drain:
                self._abandon()
            self._cond.notify_all()
        self.store.remove_erasure_listener(self)
        if not self._thread.is_alive():
            return True
        self._thread.join(timeout)
        if self._thread.is_alive():
            with self._cond:
                self._abandon()
                self._cond.notify_all()
            self._thread.join(max(1.0, timeout))
        return not self._thread.is_alive()

    # -- the thread ----------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                user_id = self._next()
                if user_id is None:
                    return
                self._busy = user_id
                user = self._user(user_id)
                user.queued, user.pending = False, 0
            started = time.perf_counter()
            error: BaseException | None = None
            try:
                self._derive(user_id)
            except Exception as exc:  # a read will derive lazily and report it properly
                error = exc
            ms = round((time.perf_counter() - started) * 1000, 3)
            at = format_ts(self.store.now_ms())
            with self._cond:
                self._busy = None
                user.derivations += 1
                user.last_derived_at, user.last_duration_ms = at, ms
                user.last_error = None if error is None else f"{type(error).__name__}: {error}"
                self._derivations += 1
                self._failures += error is not None
                self._last = (at, ms)
                self._cond.notify_all()
            if error is not None and self.on_error is not None:
                self.on_error(user_id, error)

    def _next(self) -> str | None:
        """The next user to derive (the first whose burst has paused, or waited its longest),
        or ``None`` when closed and nothing is left. Called with the condition held."""
        while True:
            if self._queue:
                user_id, due = self._due()
                wait = 0.0 if self._closed else due - time.monotonic()
                if wait <= 0:
                    del self._queue[user_id]
                    return user_id
                self._cond.wait(wait)
                continue
            if self._closed:
                return None
            self._cond.wait()

    def _due(self) -> tuple[str, float]:
        """The queued user to derive first and when (monotonic): the earliest of each
        user's pause (``coalesce_ms`` after their last notification) and longest wait
        (``max_wait_ms`` after their first); ties go to the longest queued. The queue is
        not empty; called with the condition held."""
        due = {
            user_id: min(last + self.coalesce_s, first + self.max_wait_s)
            for user_id, (first, last) in self._queue.items()
        }
        user_id = min(due, key=due.__getitem__)
        return user_id, due[user_id]

    def _derive(self, user_id: str) -> None:
        """Bring ``user_id``'s state up to date and write it back (the store's refresh,
        under the store's lock for that user: readers and appends wait, never race)."""
        store = self.store
        if not store._storage.user_exists(user_id):
            return
        with store._locked(user_id):
            store._refresh(user_id, write_back=True)
            # a refresh that finds nothing new publishes the state for lock-free reads
            # (app/derived.py): so the first read after this one finds it published
            state, _ = store._refresh(user_id)
            projects = sorted(state.projects)[:WARM_PROJECTS]
        # the retrievals a host asks for next (global memory and each project), memoised
        # on the state: the first read finds its answer computed
        for project_id in (None, *projects):
            store._retrieved(user_id, None if project_id is None else {"project_id": project_id})

    def _abandon(self) -> None:
        for user_id in self._queue:
            user = self._users.get(user_id)
            if user is not None:
                user.queued, user.pending = False, 0
        self._queue.clear()

    def _user(self, user_id: str) -> UserDerivation:
        user = self._users.get(user_id)
        if user is None:
            user = self._users[user_id] = UserDerivation(user_id=user_id)
        return user


def lazy_status(user_id: str) -> UserDerivation:
    """What a host without a worker reports for ``user_id``: derivation is lazy."""
    return UserDerivation(user_id=user_id, mode="lazy")


def _copy(user: UserDerivation) -> UserDerivation:
    return msgspec.structs.replace(user)


__all__ = [
    "DEFAULT_COALESCE_MS",
    "DEFAULT_MAX_WAIT_MS",
    "DerivationWorker",
    "UserDerivation",
    "WorkerStatus",
    "lazy_status",
]
