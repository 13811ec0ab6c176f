"""The daemon's state behind the routes (docs/http.md, "Layout"): the MemoryService, the
capture layer it feeds, the background derivation worker (``--derivation background``), the
authenticator, the page's files and the slow-retrieval alarm."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from typing import Any, Final, TypeVar

from creative_memory.app.hosting import is_local, reads_current
from creative_memory.app.lane import MULTI_USER_LANES, IngestLanes
from creative_memory.app.service import MemoryService
from creative_memory.app.store import MemoryStore
from creative_memory.app.worker import DerivationWorker
from creative_memory.capture.layer import CaptureLayer, describe
from creative_memory.engine.events import validate_user_id
from creative_memory.http.auth import Authenticator, DaemonFiles
from creative_memory.http.config import DaemonConfig, allowed_host_headers, check_derivation
from creative_memory.http.jsonlog import log_event

T = TypeVar("T")

#: Threads for the blocking part of requests (storage, derivation): a plain thread pool,
#: whose hand-off costs ~30 us of CPU a call where anyio's ``run_in_threadpool`` costs
#: ~100 us (docs/performance.md, "Daemon").
THREADS: Final = 32

#: How long a shutdown lets the derivation worker finish its queue (then it is abandoned:
#: the events are in the log, and the next start derives lazily).
WORKER_STOP_S: Final = 5.0

#: The page's static files and their media types: the script is ES modules, ``app.js`` the
#: entry point, importing the others by relative URL (docs/daemon.md, "The Settings → Memory
#: page").
WEB_FILES: Final = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "state.js": "text/javascript; charset=utf-8",
    "dom.js": "text/javascript; charset=utf-8",
    "words.js": "text/javascript; charset=utf-8",
    "api.js": "text/javascript; charset=utf-8",
    "records.js": "text/javascript; charset=utf-8",
    "load.js": "text/javascript; charset=utf-8",
    "actions.js": "text/javascript; charset=utf-8",
    "why.js": "text/javascript; charset=utf-8",
    "history.js": "text/javascript; charset=utf-8",
    "derivation.js": "text/javascript; charset=utf-8",
    "repair.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}


class Daemon:
    """One running daemon: the service over its store, the capture layer, credentials."""

    def __init__(self, config: DaemonConfig, *, store: MemoryStore | None = None) -> None:
        self.config = config
        if not config.multi_user:
            validate_user_id(config.user)
        check_derivation(config.derivation)
        self.store = store or MemoryStore(
            config.database or config.root, derivation_version=config.derivation_version
        )
        self.worker: DerivationWorker | None = None
        if config.derivation == "background":
            self.worker = DerivationWorker(self.store, on_error=_derivation_failed)
        self.service = MemoryService(self.store, self.worker)  # inspect reports the worker
        self.capture = CaptureLayer(self.store, config.capture)
        self.files = DaemonFiles(config.root)
        self.auth = Authenticator(
            self.files, port=config.port, multi_user=config.multi_user, user=config.user
        )
        self.hosts = allowed_host_headers(config)
        self.closed = False
        base = resources.files("creative_memory.http") / "web"
        self.web = {name: (base / name).read_bytes() for name in WEB_FILES}
        self.openapi: dict[str, Any] = {}
        self.local = is_local(self.store)  # no network round trips
        self.executor = ThreadPoolExecutor(THREADS, thread_name_prefix="creative-memory-http")
        # ingestion on the file store: a thread per lane, batches sharing an fsync
        # (app/lane.py); a database keeps the pool, whose transactions it groups itself
        self.lanes: IngestLanes | None = None
        if self.local:
            self.lanes = IngestLanes(self.store, MULTI_USER_LANES if config.multi_user else 1)

    async def ingest(self, user: str, fn: Callable[[], T], *, events: int = 1) -> T:
        """``fn()``, an ingestion of ``events`` events for ``user``: in their ingest lane
        when there are lanes (on the event loop when it need not wait: app/lane.py), else in
        the pool."""
        if self.lanes is not None:
            return await self.lanes.run(user, fn, events=events)
        return await self.run(fn)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the daemon's thread pool, off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    async def read(self, user: str, present: bool, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``, a read of ``user``'s memory (``present``: now, not a point in the
        past): on the event loop when the store holds their present derived state current
        (nothing to fold or fit, no lock: tens of microseconds, less than the hand-off to
        a thread), else in the thread pool (docs/performance.md, "Daemon")."""
        if present and self.warm(user):
            return fn(*args)
        return await self.run(fn, *args)

    def warm(self, user: str) -> bool:
        """Whether a read of ``user``'s present finds their derived state current, so it
        may run on the event loop (:func:`~creative_memory.app.hosting.reads_current`)."""
        return reads_current(self.store, user)

    def timed(self, operation: str, user: str, project_id: str | None, fn: Callable[[], T]) -> T:
        """``fn()``, with a ``slow_retrieval`` warning when it takes over the alarm."""
        start = time.perf_counter()
        result = fn()
        ms = (time.perf_counter() - start) * 1000
        if ms > self.config.alarm_ms:
            log_event(
                logging.WARNING,
                "slow_retrieval",
                operation=operation,
                user=user,
                project_id=project_id,
                duration_ms=round(ms, 2),
                alarm_ms=self.config.alarm_ms,
            )
        return result

    def derived(self, user: str) -> None:
        """New events for ``user`` are in the log: queue their derivation (background mode)."""
        if self.worker is not None:
            self.worker.notify(user)

    def tick(self) -> None:
        """Deliver the capture layer's expired coalescing windows."""
        report = self.capture.tick(self.store.now_ms())
        if report.flushed or report.failed:
            log_event(logging.INFO, "capture_tick", flushed=report.flushed, failed=report.failed)
            if report.flushed and not self.config.multi_user:  # reports name no user
                self.derived(self.config.user)

    def flush_pending(self) -> None:
        """Deliver every pending coalesced event and write the derived state back (shutdown)."""
        if self.closed:
            return
        self.closed = True
        if self.lanes is not None:  # idle by now: the server let the requests finish
            self.lanes.close(WORKER_STOP_S)
        report = self.capture.close()
        log_event(
            logging.INFO,
            "capture_flushed",
            flushed=report.flushed,
            failed=report.failed,
            summary=describe(report),
        )
        if self.worker is not None:  # every acknowledged event is in the log already
            queued = self.worker.status().queue_depth
            stopped = self.worker.close(WORKER_STOP_S)
            log_event(
                logging.INFO if stopped else logging.WARNING,
                "derivation_worker_stopped",
                stopped=stopped,
                queued_at_shutdown=queued,
                derivations=self.worker.status().derivations,
            )
        try:  # reads defer write-back: leave the derivation cache current
            self.store.flush()
        except Exception as exc:  # the cache is disposable: never fail a shutdown over it
            log_event(logging.WARNING, "derived_state_not_written", error=str(exc))


def _derivation_failed(user: str, exc: BaseException) -> None:
    """The worker's error report: a log line (the next read derives lazily and answers)."""
    log_event(logging.WARNING, "derivation_failed", exc=exc, user=user)
