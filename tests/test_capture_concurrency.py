"""The capture layer under concurrent calls (docs/capture.md; capture/layer.py).

Its lock guards only its bookkeeping: a delivery under way does not stop another call's
delivery (about another artifact); a delivery about an artifact waits for the deliveries
about it decided earlier; an erasure rewrites the held deliveries still waiting and waits
for those under way; ``close`` waits for every delivery under way.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from creative_memory import MemoryStore, adapter
from creative_memory.capture.layer import CaptureLayer, CaptureReport
from creative_memory.engine.events import SignalEvent
from creative_memory.engine.timeutil import parse_ts

T0 = parse_ts("2025-03-01T10:00:00Z")
U = "alice"


def at(seconds: float) -> int:
    return T0 + round(seconds * 1000)


def ev(kind: str, artifact: str, pattern: str, **kw: Any) -> dict[str, Any]:
    return {
        "event": kind,
        "user_id": U,
        "artifact_id": artifact,
        "session_id": "s1",
        "project_id": None,
        "timestamp": "2025-03-01T10:00:00Z",
        "artifact_meta": {"signals": [{"preference_type": "color", "pattern": pattern}]},
        "tag_text": "love this",
        **kw,
    }


class Gate:
    """Blocks deliveries of explicit tags on artifact ``slow`` until opened."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.open = threading.Event()

    def handlers(self) -> dict[str, Any]:
        real = adapter.HANDLERS["explicit_tag_applied"]

        def gated(store: MemoryStore, event: Mapping[str, Any], *, records: bool = True) -> Any:
            if event.get("artifact_id") == "slow":
                self.entered.set()
                assert self.open.wait(10)
            return real(store, event, records=records)

        return dict(adapter.HANDLERS, explicit_tag_applied=gated)


@pytest.fixture
def mem(tmp_path: Path) -> MemoryStore:
    return MemoryStore(tmp_path / "mem", derivation_version="1", clock=lambda: T0)


@pytest.fixture
def gate() -> Iterator[Gate]:
    g = Gate()
    yield g
    g.open.set()


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    th = threading.Thread(target=lambda: out.append(fn()))
    th.start()
    return th, out


def patterns(store: MemoryStore) -> list[str]:
    return [e.pattern for e in store.events(U) if isinstance(e, SignalEvent)]


def test_a_delivery_under_way_does_not_hold_up_other_calls(mem: MemoryStore, gate: Gate) -> None:
    cap = CaptureLayer(mem, handlers=gate.handlers())
    slow, _ = in_thread(lambda: cap.submit(ev("explicit_tag_applied", "slow", "p_slow"), at(0)))
    assert gate.entered.wait(10)
    fast, out = in_thread(lambda: cap.submit(ev("explicit_tag_applied", "fast", "p_fast"), at(0)))
    fast.join(10)
    assert out and out[0].accepted == 1  # delivered while the other is still under way
    assert cap.pending_edits() == 0  # the bookkeeping is not locked either
    assert patterns(mem) == ["p_fast"]
    gate.open.set()
    slow.join(10)
    assert patterns(mem) == ["p_fast", "p_slow"]


def test_an_event_waits_for_the_earlier_delivery_about_its_artifact(
    mem: MemoryStore, gate: Gate
) -> None:
    cap = CaptureLayer(mem, handlers=gate.handlers())
    first, _ = in_thread(lambda: cap.submit(ev("explicit_tag_applied", "slow", "p_one"), at(0)))
    assert gate.entered.wait(10)
    later, out = in_thread(lambda: cap.submit(ev("generation_accepted", "slow", "p_two"), at(0)))
    later.join(0.3)
    assert later.is_alive() and not out  # its turn comes after the tag's
    gate.open.set()
    first.join(10)
    later.join(10)
    assert out[0].accepted == 1
    assert patterns(mem) == ["p_one", "p_two"]  # in the order the layer took them


def test_erasure_rewrites_waiting_deliveries_and_waits_for_those_under_way(
    mem: MemoryStore, gate: Gate
) -> None:
    cap = CaptureLayer(mem, handlers=gate.handlers())
    running, _ = in_thread(lambda: cap.submit(ev("explicit_tag_applied", "slow", "gone"), at(0)))
    assert gate.entered.wait(10)
    edit = ev("artifact_edited_and_saved", "slow", "gone", trigger="manual_edit")
    assert cap.submit(edit, at(1)).accepted == 1  # a coalescing window opens
    ticking, ticked = in_thread(lambda: cap.tick(at(40)))  # expired: its delivery waits its turn
    deadline = time.monotonic() + 10
    while len(cap._out.inflight) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    forgetting, forgot = in_thread(lambda: mem.forget(U, "color", "gone"))
    forgetting.join(0.3)
    assert forgetting.is_alive()  # the tag under way lands before the rewrite, not after it
    gate.open.set()
    for th in (running, ticking, forgetting):
        th.join(10)
    assert forgot == [1]  # the tag, which had landed; the edit-save was purged before delivery
    assert patterns(mem) == []
    assert b"gone" not in (mem._storage.user_dir(U) / "events.jsonl").read_bytes()  # type: ignore[attr-defined]
    report: CaptureReport = ticked[0]
    assert report.flushed == 0 and report.failed == 0


def test_close_waits_for_the_deliveries_under_way(mem: MemoryStore, gate: Gate) -> None:
    cap = CaptureLayer(mem, handlers=gate.handlers())
    running, _ = in_thread(lambda: cap.submit(ev("explicit_tag_applied", "slow", "last"), at(0)))
    assert gate.entered.wait(10)
    closing, _ = in_thread(cap.close)
    closing.join(0.3)
    assert closing.is_alive()
    with pytest.raises(RuntimeError, match="closed"):  # nothing new is taken meanwhile
        cap.submit(ev("explicit_tag_applied", "fast", "p_fast"), at(0))
    gate.open.set()
    running.join(10)
    closing.join(10)
    assert patterns(mem) == ["last"]


def test_concurrent_calls_keep_each_artifacts_order(mem: MemoryStore) -> None:
    cap = CaptureLayer(mem)
    errors: list[BaseException] = []

    def client(k: int) -> None:
        try:
            for i in range(10):
                art = f"a{k}"
                cap.submit(ev("explicit_tag_applied", art, f"k{k}_{i}_tag"), at(i))
                cap.submit(ev("generation_accepted", art, f"k{k}_{i}_acc"), at(i))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    stored = patterns(mem)
    assert len(stored) == 160
    for k in range(8):
        mine = [p for p in stored if p.startswith(f"k{k}_")]
        assert mine == [f"k{k}_{i}_{s}" for i in range(10) for s in ("tag", "acc")]
