"""Ctrl-C during an ingest (docs/cli.md, "ingest"): it stops between two events, the
pending edit-saves are delivered, the report says what was read and stored, and the CLI
exits 130 naming where it stopped — nothing read is lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from creative_memory import CaptureLayer, MemoryStore
from creative_memory.app.results import IngestInput
from creative_memory.app.service import IngestInterrupted, MemoryService
from creative_memory.cli.commands.ingest import HeldInterrupt
from tests.test_cli import Cli, event, jsonl

EDIT = event("artifact_edited_and_saved", "dense_grid", "layout", artifact="e1", diff="tighter")


def thumbs(n: int) -> list[dict[str, object]]:
    """``n`` thumbs of distinct artifacts (none debounced) at the time of :data:`EDIT`,
    whose edit-save stays pending (its window is 30 s of capture time)."""
    return [event("thumbs_rated", f"p{i % 7}", artifact=f"a{i}", rating="up") for i in range(n)]


def kinds(store: MemoryStore) -> list[str]:
    return [type(e).__name__ for e in store.events("alice")]


def test_the_service_stops_between_items_and_delivers_what_is_pending(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "m")
    wires = [EDIT, *thumbs(5)]

    def items() -> Iterator[IngestInput]:
        for i, value in enumerate(wires, 1):
            if i == 4:
                raise KeyboardInterrupt  # taken between the third item and the fourth
            yield IngestInput(where=f"line {i}", value=value)

    with pytest.raises(IngestInterrupted) as caught:
        MemoryService(store).ingest("alice", items(), CaptureLayer(store), close=True)
    result = caught.value.result
    assert isinstance(caught.value, KeyboardInterrupt)  # uncaught, it is the interrupt
    assert (result.events, result.accepted, result.flushed) == (3, 3, 1)
    assert [r.where for r in result.results if r.where] == ["line 1", "line 2", "line 3"]
    # the two thumbs read, then the edit-save of line 1 (its signal and its refinement),
    # delivered though interrupted
    assert kinds(store) == ["SignalEvent"] * 3 + ["RefinementEvent"]


def test_a_ctrl_c_is_held_until_the_item_in_hand_is_done(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "m")
    wires = thumbs(6)
    items = [IngestInput(where=f"line {i}", value=v) for i, v in enumerate(wires, 1)]
    held = HeldInterrupt()
    sent = []

    def step(n: int) -> None:
        held.done()

    def in_hand(stream: Iterator[IngestInput]) -> Iterator[IngestInput]:
        for item in stream:
            if item.where == "line 2":  # Ctrl-C while line 2 is in hand
                os.kill(os.getpid(), signal.SIGINT)
                sent.append(item.where)
            yield item

    with held.installed(), pytest.raises(IngestInterrupted) as caught:
        MemoryService(store).ingest(
            "alice", in_hand(held.items(items)), CaptureLayer(store), close=True, progress=step
        )
    assert sent == ["line 2"]
    assert caught.value.result.events == 2  # line 2 was stored and reported, then it stopped
    assert len(store.events("alice")) == 2
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back


def test_the_cli_exits_130_naming_where_it_stopped(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    source = tmp_path / "events.jsonl"
    source.write_text(jsonl([EDIT, *thumbs(20_000)]))
    log = cli.root / "alice" / "events.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "creative_memory.cli", "--json", "ingest", str(source)],
        env=cli.env,
        cwd=cli.cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not log.exists() or log.read_bytes().count(b"\n") < 50:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    report = json.loads(out)
    read = report["events"]
    assert 50 <= read < 20_001
    assert report["interrupted"] == {"after": f"line {read}", "unread": 20_001 - read}
    assert report["flushed"] == 1
    lines = err.decode().strip().splitlines()
    assert lines == [
        f"Error: interrupted after line {read}: {20_001 - read} events after it not read; "
        "what was read is stored as reported"
    ]
    # every line read is stored: its thumbs, then the edit-save of line 1
    assert kinds(cli.store()) == ["SignalEvent"] * read + ["RefinementEvent"]
    assert cli.json("check")["healthy"] is True


@pytest.mark.parametrize(("sync_every", "fsyncs"), [(0, 25), (10, 3), (25, 1), (100, 1)])
def test_an_ingest_makes_its_events_durable_a_batch_at_a_time(
    tmp_path: Path, log_fsyncs: list[int], sync_every: int, fsyncs: int
) -> None:
    """``sync_every`` (the CLI's ingest: docs/cli.md): one fsync per batch of events instead
    of one per event, every batch durable before the next begins — the report, which comes
    only at the end, names only durable events."""
    store = MemoryStore(tmp_path / "m")
    items = [IngestInput(where=f"line {i}", value=v) for i, v in enumerate(thumbs(25), 1)]
    result = MemoryService(store).ingest(
        "alice", items, CaptureLayer(store), close=True, sync_every=sync_every
    )
    assert result.accepted == 25 and len(store.events("alice")) == 25
    assert log_fsyncs[0] == 1 + fsyncs  # one more: the log's creation


def test_a_storage_failure_stops_the_ingest_and_says_what_landed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database gone away or a full disk mid-ingest: the CLI prints the report of what
    was stored, then one line naming where it stopped (exit 1) — before, no report, so a
    person could not tell what to feed again."""
    from creative_memory import StorageError
    from creative_memory.storage import FileStorage

    real = FileStorage.append_positioned
    calls = [0]

    def failing(self: FileStorage, *args: object, **kw: object) -> object:
        calls[0] += 1
        if calls[0] == 6:
            raise StorageError("disk full")
        return real(self, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(FileStorage, "append_positioned", failing)
    cli = Cli(tmp_path)
    r = cli("--json", "ingest", "-", input=jsonl(thumbs(10)))
    assert r.code == 1
    report = json.loads(r.out)
    assert report["events"] == 5 and report["accepted"] == 5
    assert report["storage_failed"] == {"at": "line 6", "not_stored": 5, "error": "disk full"}
    assert r.err.strip() == (
        "Error: disk full — stopped at line 6: it and the 4 events after it are not stored; "
        "what came before is stored as reported (pending edit-saves were not delivered)"
    )
    monkeypatch.undo()
    assert len(cli.store().events("alice")) == 5
