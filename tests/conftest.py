from __future__ import annotations

import contextlib
import gzip
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from creative_memory import MemoryStore
from creative_memory.engine.derivation.registry import DerivedState
from creative_memory.engine.derivation.v1 import DerivedStateV1
from creative_memory.engine.derivation.v2 import DerivedStateV2
from creative_memory.engine.timeutil import parse_ts

FIXTURES = Path(__file__).parent / "fixtures"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "fixtures"


def load_scenario(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data


class ManualClock:
    """An explicit clock for stores under test (epoch ms)."""

    def __init__(self, start: str = "2025-01-01T00:00:00.000Z") -> None:
        self.ms = parse_ts(start)

    def __call__(self) -> int:
        return self.ms

    def set(self, iso: str) -> None:
        self.ms = parse_ts(iso)

    def advance_days(self, days: float) -> None:
        self.ms += int(days * 86_400_000)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def store(tmp_path: Path, clock: ManualClock) -> Iterator[MemoryStore]:
    yield MemoryStore(tmp_path / "mem", derivation_version="1", clock=clock)


@pytest.fixture
def make_store(tmp_path: Path, clock: ManualClock) -> Callable[..., MemoryStore]:
    def make(**kw: Any) -> MemoryStore:
        kw.setdefault("clock", clock)
        kw.setdefault("derivation_version", "1")
        return MemoryStore(tmp_path / "mem", **kw)

    return make


def tag(
    pattern: str,
    ptype: str = "layout",
    polarity: str = "positive",
    *,
    ts: str = "2025-01-01T00:00:00.000Z",
    signal_type: str = "explicit_tag",
    scope: str = "global",
    project_id: str | None = None,
    tag_text: str | None = None,
) -> dict[str, Any]:
    """A signal mapping with sensible defaults."""
    return {
        "signal_type": signal_type,
        "pattern": pattern,
        "preference_type": ptype,
        "polarity": polarity,
        "tag_text": tag_text,
        "scope": scope,
        "project_id": project_id,
        "artifact_id": "art",
        "session_id": "sess",
        "timestamp": ts,
    }


@pytest.fixture
def log_fsyncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Counts fsyncs of event logs; each takes at least 2 ms (a disk), so appends queue."""
    count = [0]
    real = os.fsync

    def fsync(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith("events.jsonl"):
            count[0] += 1
            time.sleep(0.002)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    yield count


@pytest.fixture
def apply_counter(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Counts calls of ``DerivedState.apply`` (events folded) in this process."""
    count = [0]
    original = DerivedState.apply

    def counting(self: DerivedState, event: Any) -> Any:
        count[0] += 1
        return original(self, event)

    def counting_fold(cls: type[DerivedState]) -> Callable[[DerivedState, Any], None]:
        original_fold = cls.fold

        def fold(self: DerivedState, events: Any) -> None:
            # the bulk folds of versions 1 and 2 (3, 4) inline most signals instead of
            # calling apply: count what they folded by the state's own event counter
            start, calls = self.event_count, count[0]
            try:
                original_fold(self, events)
            finally:
                count[0] = calls + self.event_count - start

        return fold

    def counting_folding(cls: type[DerivedState]) -> Callable[[DerivedState], Any]:
        original_folding = cls.folding

        @contextlib.contextmanager
        def folding(self: DerivedState) -> Iterator[Callable[[Any], None]]:
            # version 1 folds the chunks of a derivation from scratch in one block
            with original_folding(self) as fold_chunk:

                def counted(events: Any) -> None:
                    start, calls = self.event_count, count[0]
                    try:
                        fold_chunk(events)
                    finally:
                        count[0] = calls + self.event_count - start

                yield counted

        return folding

    monkeypatch.setattr(DerivedState, "apply", counting)
    for cls in (DerivedStateV1, DerivedStateV2):
        monkeypatch.setattr(cls, "fold", counting_fold(cls))
    monkeypatch.setattr(DerivedStateV1, "folding", counting_folding(DerivedStateV1))
    yield count


@contextlib.contextmanager
def held_elsewhere(lock: contextlib.AbstractContextManager[Any]) -> Iterator[threading.Event]:
    """Hold ``lock`` in another thread while the block runs, or until the block sets the
    event it is given."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            release.wait(10)

    th = threading.Thread(target=hold)
    th.start()
    assert held.wait(10)
    try:
        yield release
    finally:
        release.set()
        th.join()
