"""Events a capture layer holds are judged as of their capture (docs/capture.md, "Held
events"; docs/storage.md, "Erasure notes"):

* a forget or a reset run by *another process* (the CLI beside a daemon) reaches the
  daemon's pending edit-saves and generations: the note it leaves holds nothing of what it
  erased, so they cannot be judged against it and are dropped whole — what it erased does
  not come back, and neither do their unrelated parts;
* a forget or a reset through the daemon's own store purges them precisely: what it did
  not erase is still delivered;
* an edit made while learning was paused (or memory off) is not learned because learning
  came back on within the coalescing window.

A second ``MemoryStore`` over the same root stands for another process: the erasure
listeners of one store never hear the other's forget (one test runs the real CLI)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import pytest

from creative_memory import CaptureLayer, MemoryStore
from creative_memory.engine.erasure_notes import NOTES_KEPT, ErasureNote, judged
from creative_memory.engine.events import RefinementEvent, SignalEvent
from creative_memory.storage.base import LogRewritten
from tests.conftest import ManualClock
from tests.test_erasure_capture import NOW, USER, wire

if TYPE_CHECKING:
    from tests.backends import Backend

pytest_plugins = ["tests.pg_fixtures", "tests.backends"]

GONE = "zz_gone_palette"
KEPT = "calm_palette"
SRC = Path(__file__).resolve().parents[1] / "src"


def edit(art: str, *patterns: str, **over: Any) -> dict[str, Any]:
    return wire("artifact_edited_and_saved", art, *patterns, **over)


def signals(store: MemoryStore) -> list[str]:
    return [e.pattern for e in store.events(USER) if isinstance(e, SignalEvent)]


def diffs(store: MemoryStore) -> list[Any]:
    return [e.diff for e in store.events(USER) if isinstance(e, RefinementEvent)]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW)


@pytest.fixture
def daemon(backend: Backend, clock: ManualClock) -> Iterator[tuple[MemoryStore, CaptureLayer]]:
    """The daemon's store and its long-lived capture layer."""
    store = backend.store(clock=clock)
    layer = CaptureLayer(store)
    yield store, layer
    layer.close()


def expire(layer: CaptureLayer, clock: ManualClock) -> None:
    clock.ms += 60_000
    layer.tick(clock.ms)


def held_edits() -> list[dict[str, Any]]:
    return [
        wire("explicit_tag_applied", "a0", GONE, tag_text="love this"),  # delivered now
        edit("a1", GONE, KEPT, diff={"note": f"swapped {GONE} for calm"}),  # held
        edit("a2", "airy_spacing", diff="more air"),  # held, unrelated
    ]


# -- a forget or a reset elsewhere reaches what the daemon holds ---------------------------
def test_a_forget_in_another_process_drops_the_daemons_pending_edits(
    backend: Backend, daemon: tuple[MemoryStore, CaptureLayer], clock: ManualClock
) -> None:
    """Nothing about the forgotten pattern is kept that could tell which held saves name
    it: every edit-save the daemon held for the user is dropped, the unrelated ones too
    (docs/storage.md, "Erasure notes")."""
    store, layer = daemon
    layer.submit_many(held_edits(), clock.ms)
    assert layer.pending_edits() == 2
    cli = backend.store(clock=clock)  # another process: not a listener of the daemon's store
    assert cli.forget(USER, "color", GONE) == 1
    expire(layer, clock)
    assert signals(store) == []  # KEPT and airy_spacing were held too: dropped with GONE
    assert diffs(store) == []
    assert GONE not in {r.pattern for r in store.list_preferences(USER)}
    store.flush()
    assert backend.places_containing(GONE.encode()) == []
    layer.submit(edit("a3", KEPT), clock.ms)  # captured after the forget: delivered
    expire(layer, clock)
    assert signals(store) == [KEPT]


def test_a_forget_through_the_daemons_own_store_keeps_the_rest(
    backend: Backend, daemon: tuple[MemoryStore, CaptureLayer], clock: ManualClock
) -> None:
    """The daemon's own erasure (its HTTP API, its page) purges its capture layer with the
    pattern in memory: the held saves lose exactly what the log lost, nothing more."""
    store, layer = daemon
    layer.submit_many(held_edits(), clock.ms)
    assert store.forget(USER, "color", GONE) == 1
    expire(layer, clock)
    assert sorted(signals(store)) == ["airy_spacing", KEPT]  # the rest is not lost
    assert diffs(store) == ["more air"]  # the diff naming the pattern went with it
    store.flush()
    assert backend.places_containing(GONE.encode()) == []


def test_an_edit_captured_while_the_daemons_own_forget_rewrites_is_kept(
    daemon: tuple[MemoryStore, CaptureLayer], clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save the daemon captures after its own forget purged the capture layer, but before
    the log's rewrite gives it a new generation, came after the erasure: it is delivered,
    not dropped as one the erasure could not judge."""
    store, layer = daemon
    layer.submit(wire("explicit_tag_applied", "a0", GONE, tag_text="love this"), clock.ms)
    rewrite = store._storage.rewrite

    def rewrite_after_a_save(*args: Any, **kw: Any) -> Any:
        layer.submit(edit("a1", KEPT), clock.ms)  # between the purge and the rewrite
        return rewrite(*args, **kw)

    monkeypatch.setattr(store._storage, "rewrite", rewrite_after_a_save)
    assert store.forget(USER, "color", GONE) == 1
    monkeypatch.undo()
    assert layer.pending_edits() == 1
    expire(layer, clock)
    assert signals(store) == [KEPT]


def test_the_real_cli_beside_a_daemon(tmp_path: Path, clock: ManualClock) -> None:
    """The reviewer's repro: the CLI (a child process) forgets while the daemon holds an
    edit-save naming the pattern; the pattern never comes back — and the edit's other
    signal (KEPT) is dropped with it: the CLI's note tells nothing to judge it by."""
    root = tmp_path / "mem"
    store = MemoryStore(root, clock=clock)
    layer = CaptureLayer(store)
    layer.submit_many(
        [wire("explicit_tag_applied", "a0", GONE, tag_text="love this"), edit("a1", GONE, KEPT)],
        clock.ms,
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
    forget = subprocess.run(
        [sys.executable, "-m", "creative_memory.cli", "--user", USER, "--data-dir", str(root),
         "forget", "color", GONE],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert forget.returncode == 0, forget.stderr
    expire(layer, clock)
    layer.close()
    assert signals(store) == []  # the whole held edit-save, KEPT included
    assert GONE not in json.dumps(store.inspect(USER))
    store.close()
    assert [p for p in root.rglob("*") if p.is_file() and GONE.encode() in p.read_bytes()] == []


@pytest.mark.parametrize("own", [False, True], ids=["elsewhere", "own"])
def test_the_pending_generation_a_later_start_abandons(
    backend: Backend, daemon: tuple[MemoryStore, CaptureLayer], clock: ManualClock, own: bool
) -> None:
    """A forget elsewhere drops the abandonment of a generation pending since before it
    whole; the daemon's own forget keeps it, without the forgotten pattern."""
    store, layer = daemon
    layer.submit(wire("explicit_tag_applied", "a0", "seed", tag_text="love this"), clock.ms)
    layer.submit(wire("generation_started", "g1", GONE, KEPT), clock.ms)
    (store if own else backend.store(clock=clock)).forget(USER, "color", GONE)
    report = layer.submit(wire("generation_started", "g2", "other"), clock.ms)
    assert report.inferred == 1
    assert signals(store) == (["seed", KEPT] if own else ["seed"])


@pytest.mark.parametrize(
    ("own", "scope"),
    [(False, "all"), (False, "project:landing"), (True, "project:landing")],
    ids=["elsewhere-all", "elsewhere-project", "own-project"],
)
def test_a_reset_and_the_daemons_pending_edits(
    backend: Backend,
    daemon: tuple[MemoryStore, CaptureLayer],
    clock: ManualClock,
    own: bool,
    scope: str,
) -> None:
    """A reset elsewhere drops every pending edit-save of the user — the global one held
    beside the reset project's too; the daemon's own reset drops only the bucket's."""
    store, layer = daemon
    layer.submit_many(
        [
            wire("explicit_tag_applied", "a0", "seed", tag_text="love this"),
            edit("a1", GONE, project_id="landing", diff=f"{GONE} in landing"),
            edit("a2", KEPT, diff="global edit"),
        ],
        clock.ms,
    )
    (store if own else backend.store(clock=clock)).reset_memory(USER, scope)
    expire(layer, clock)
    assert diffs(store) == (["global edit"] if own else [])
    assert signals(store) == ([] if scope == "all" else ["seed", KEPT] if own else ["seed"])
    store.flush()
    assert backend.places_containing(GONE.encode()) == []


def test_an_erasure_elsewhere_after_one_of_the_daemon_drops_what_it_held(
    backend: Backend, daemon: tuple[MemoryStore, CaptureLayer], clock: ManualClock
) -> None:
    """A held save judged by the daemon's own forget is still dropped by a later forget
    in another process: only the erasures applied to it are passed."""
    store, layer = daemon
    layer.submit(wire("explicit_tag_applied", "a0", "seed", tag_text="love this"), clock.ms)
    layer.submit(edit("a1", GONE, KEPT), clock.ms)
    store.forget(USER, "color", GONE)
    backend.store(clock=clock).forget(USER, "color", "never_taught")
    expire(layer, clock)
    assert signals(store) == ["seed"]


def test_a_save_after_the_forget_is_its_own_window(
    backend: Backend, daemon: tuple[MemoryStore, CaptureLayer], clock: ManualClock
) -> None:
    """A window opened before an erasure elsewhere is closed by the next save (and dropped:
    it cannot be judged), so a save made after the forget (re-teaching the pattern) keeps
    it."""
    store, layer = daemon
    layer.submit(wire("explicit_tag_applied", "a0", "seed", tag_text="love this"), clock.ms)
    layer.submit(edit("a1", GONE, KEPT, timestamp="2026-03-01T10:00:01Z"), clock.ms)
    backend.store(clock=clock).forget(USER, "color", GONE)
    clock.ms += 5_000
    report = layer.submit(edit("a1", GONE, timestamp="2026-03-01T10:00:06Z"), clock.ms)
    assert report.flushed == 1 and report.accepted == 1  # the old window went out first
    expire(layer, clock)
    stored = [(e.pattern, e.at) for e in store.events(USER) if isinstance(e, SignalEvent)]
    assert stored == [
        ("seed", "2026-03-01T10:00:00.000Z"),  # KEPT at 10:00:01 was in the dropped window
        (GONE, "2026-03-01T10:00:06.000Z"),  # taught again after the forget
    ]


def test_the_log_coming_into_being_does_not_split_a_window(
    daemon: tuple[MemoryStore, CaptureLayer], clock: ManualClock
) -> None:
    """A new user's first window opens before they have a log; the log their next event
    creates is no rewrite: later saves still coalesce."""
    store, layer = daemon
    layer.submit(edit("a1", KEPT), clock.ms)
    layer.submit(wire("explicit_tag_applied", "a2", "seed", tag_text="love this"), clock.ms)
    assert layer.submit(edit("a1", KEPT), clock.ms + 1_000).coalesced == 1
    expire(layer, clock)
    assert signals(store) == ["seed", KEPT]


def test_an_erasure_landing_just_before_the_append_is_applied(
    backend: Backend, daemon: tuple[MemoryStore, CaptureLayer], clock: ManualClock
) -> None:
    """The notes are read, then a rewrite commits, then the append: it is refused
    (another generation) and retried on the new notes — which drop it."""
    store, layer = daemon
    layer.submit(wire("explicit_tag_applied", "a0", GONE, tag_text="love this"), clock.ms)
    layer.submit(edit("a1", GONE, KEPT), clock.ms)
    other = backend.store(clock=clock)
    storage = store._storage
    real = storage.rewrite_history
    raced: list[int] = []

    def history_then_a_forget(user_id: str) -> tuple[str, list[ErasureNote]]:
        seen = real(user_id)
        if not raced:
            raced.append(other.forget(USER, "color", GONE))
        return seen

    storage.rewrite_history = history_then_a_forget  # type: ignore[method-assign]
    expire(layer, clock)
    assert raced == [1]
    assert signals(store) == []  # not GONE (nor KEPT, held with it)


def test_a_held_edit_older_than_the_notes_kept_is_dropped(
    backend: Backend, daemon: tuple[MemoryStore, CaptureLayer], clock: ManualClock
) -> None:
    """Whether an event captured before the oldest note kept names what was erased can no
    longer be told: nothing of it is stored (docs/storage.md, "Erasure notes")."""
    store, layer = daemon
    layer.submit(wire("explicit_tag_applied", "a0", "seed", tag_text="love this"), clock.ms)
    layer.submit(edit("a1", KEPT), clock.ms)
    other = backend.store(clock=clock)
    for i in range(NOTES_KEPT + 1):  # the note of the rewrite of its generation is gone
        other.forget(USER, "color", f"never_{i}")
    expire(layer, clock)
    assert signals(store) == ["seed"]
    layer.submit(edit("a2", KEPT), clock.ms)  # captured now: delivered
    expire(layer, clock)
    assert signals(store) == ["seed", KEPT]


def test_a_forget_in_the_same_store_still_purges_at_once(
    daemon: tuple[MemoryStore, CaptureLayer], clock: ManualClock
) -> None:
    store, layer = daemon
    layer.submit(edit("a1", GONE, KEPT), clock.ms)
    store.forget(USER, "color", GONE)
    expire(layer, clock)
    assert signals(store) == [KEPT]


def test_a_save_after_the_daemons_own_forget_joins_the_purged_window(
    daemon: tuple[MemoryStore, CaptureLayer], clock: ManualClock
) -> None:
    """A save made after the daemon's own forget was captured after it, as the purged
    window now is: they coalesce as any two saves of the artifact in the window do (one
    edit, the last save's state), and the pattern taught again is kept."""
    store, layer = daemon
    layer.submit(edit("a1", GONE, KEPT, diff=f"added {GONE}"), clock.ms)
    store.forget(USER, "color", GONE)  # no log yet: nothing rewritten, nothing noted
    report = layer.submit(edit("a1", GONE, diff="again"), clock.ms + 1_000)
    assert report.coalesced == 1
    expire(layer, clock)
    assert signals(store) == [GONE]
    # the first save's diff named the pattern: purged from the window
    assert diffs(store) == [{"coalesced_saves": 2, "diffs": ["again"]}]


# -- what the settings allowed at capture -------------------------------------------------
def test_an_edit_made_while_paused_is_not_learned_after_a_resume(
    daemon: tuple[MemoryStore, CaptureLayer], clock: ManualClock
) -> None:
    store, layer = daemon
    store.pause(USER)
    assert layer.submit(edit("a1", "while_paused", diff="secret edit"), clock.ms).accepted == 1
    store.resume(USER)
    layer.close()
    assert store.events(USER) == []  # neither the signal nor the refinement


def test_an_edit_made_while_memory_was_off_keeps_only_its_refinement(
    daemon: tuple[MemoryStore, CaptureLayer], clock: ManualClock
) -> None:
    store, layer = daemon
    store.set_memory_enabled(USER, False)
    layer.submit(edit("a1", "while_off", diff="an edit"), clock.ms)
    store.set_memory_enabled(USER, True)
    layer.close()
    assert signals(store) == []
    assert diffs(store) == ["an edit"]  # logged even with memory off, as delivered at once


def test_a_pause_splits_the_window(
    daemon: tuple[MemoryStore, CaptureLayer], clock: ManualClock
) -> None:
    store, layer = daemon
    layer.submit(edit("a1", "before_pause", diff="one"), clock.ms)
    store.pause(USER)
    clock.ms += 1_000
    report = layer.submit(edit("a1", "while_paused", diff="two"), clock.ms)
    assert report.flushed == 1  # the save made while learning went out first, and is learned
    store.resume(USER)
    layer.close()
    assert signals(store) == ["before_pause"]
    assert diffs(store) == ["one"]


def test_an_edit_made_while_learning_is_learned_after_a_pause(
    daemon: tuple[MemoryStore, CaptureLayer], clock: ManualClock
) -> None:
    """Decided at capture both ways: the daemon answered "learning": true for it."""
    store, layer = daemon
    layer.submit(edit("a1", "before_pause"), clock.ms)
    store.pause(USER)
    layer.close()
    assert signals(store) == ["before_pause"]


def test_a_store_without_holding_decides_at_delivery(clock: ManualClock) -> None:
    """A plain signal sink (a test double) gets the events as before."""
    got: list[Any] = []

    class Sink:
        def now_ms(self) -> int:
            return clock.ms

        def ingest_signals(self, user_id: str, sigs: Any, **kw: Any) -> list[None]:
            got.append((user_id, [s["pattern"] for s in sigs]))
            return [None] * len(sigs)

        def append_comparison(self, user_id: str, event: Any) -> bool:
            return True

    layer = CaptureLayer(Sink())  # type: ignore[arg-type]
    layer.submit(edit("a1", KEPT), clock.ms)
    layer.close()
    assert got == [(USER, [KEPT])]


# -- the storage side: notes, generations, conditioned appends -----------------------------
def test_every_erasure_leaves_a_note_and_a_new_generation(backend: Backend) -> None:
    store = backend.store()
    store.ingest_signal(USER, {"signal_type": "explicit_tag", "preference_type": "color",
                               "pattern": KEPT, "polarity": "positive", "tag_text": "love this",
                               "scope": "global"})  # fmt: skip
    storage = store._storage
    before, notes = storage.rewrite_history(USER)
    assert before and notes == []
    assert store.forget(USER, "color", "nothing_here") == 0  # nothing matched: still noted
    after, notes = storage.rewrite_history(USER)
    assert after != before and [(n.after, n.kind) for n in notes] == [(before, "erased")]
    assert notes[0].id and "nothing_here" not in repr(notes)
    for i in range(NOTES_KEPT + 2):
        store.forget(USER, "color", f"x{i}")
    assert len(storage.rewrite_history(USER)[1]) == NOTES_KEPT
    assert backend.places_containing(b"nothing_here") == []
    assert [e.pattern for e in store.events(USER) if isinstance(e, SignalEvent)] == [KEPT]


def stored_notes(backend: Backend) -> list[dict[str, Any]]:
    """The erasure notes as stored: the log header's (files), ``cm_users.erasures``."""
    if backend.kind == "files":
        logs = [Path(backend.root) / p for p in backend.places_containing(b'"erasures"')]
        assert len(logs) == 1
        header = json.loads(logs[0].read_bytes().split(b"\n", 1)[0])
        notes: list[dict[str, Any]] = header["erasures"]
        return notes
    import psycopg

    with psycopg.connect(backend.root, autocommit=True) as conn:
        row = conn.execute("SELECT erasures FROM cm_users WHERE user_id = %s", (USER,)).fetchone()
    assert row is not None
    return list(row[0])


def test_a_note_holds_nothing_derived_from_what_was_erased(backend: Backend) -> None:
    """Not a tombstone: no salt, digest, word or length, only which generation was
    replaced, that something was erased, and a random id (docs/storage.md, "Erasure
    notes")."""
    store = backend.store()
    for pattern in (GONE, KEPT):
        store.ingest_signal(USER, {"signal_type": "explicit_tag", "preference_type": "color",
                                   "pattern": pattern, "polarity": "positive",
                                   "tag_text": "love this", "scope": "global"})  # fmt: skip
    store.log_refinement(USER, diff=f"more {GONE}")
    store.forget(USER, "color", GONE)
    store.forget(USER, "color", GONE)  # the same erasure again: another id
    store.reset_memory(USER, "global")
    store.flush()
    notes = stored_notes(backend)
    assert [sorted(n) for n in notes] == [["after", "id", "kind"]] * 3
    assert [n["kind"] for n in notes] == ["erased"] * 3
    assert len({n["id"] for n in notes}) == 3
    for word in (b"salt", b"digest", b"word", b"length", GONE.encode()):
        assert backend.places_containing(word) == []


def test_an_old_note_with_digests_counts_as_an_erasure() -> None:
    """Notes written before this shape (kinds ``feature``/``bucket``/``all``, digests) are
    read, their extra fields ignored, and judge no held event."""
    old = msgspec.json.decode(
        b'[{"after":"g0","kind":"feature","salt":"s","digest":"d","word":"w","length":3}]',
        type=list[ErasureNote],
    )
    assert old == [ErasureNote(after="g0", kind="feature")]
    assert not judged(old, {"x"}) and judged([ErasureNote(after="g0")], ())


def test_an_append_on_a_generation_is_refused_after_a_rewrite(backend: Backend) -> None:
    store = backend.store()
    store.log_refinement(USER, diff="first")
    storage = store._storage
    generation = storage.generation(USER)
    event = store.events(USER)[0]
    store.forget(USER, "color", "anything")
    with pytest.raises(LogRewritten):
        storage.append_positioned(USER, [event], if_generation=generation)
    assert len(store.events(USER)) == 1  # nothing written
    now = storage.generation(USER)
    assert storage.append_positioned(USER, [event], if_generation=now).generation == now
    assert storage.append_positioned("newcomer", [event], if_generation="").events


def test_an_import_in_replace_mode_is_noted_as_erasing_nothing(
    backend: Backend, daemon: tuple[MemoryStore, CaptureLayer], clock: ManualClock, tmp_path: Path
) -> None:
    store, layer = daemon
    store.log_refinement(USER, diff="first")
    store.export_memory(USER, tmp_path / "a.json")
    layer.submit(edit("a1", KEPT), clock.ms)
    backend.store(clock=clock).import_memory(USER, tmp_path / "a.json", mode="replace")
    assert [n.kind for n in store._storage.rewrite_history(USER)[1]] == ["none"]
    expire(layer, clock)
    assert signals(store) == [KEPT]  # an import erases nothing: what was held is delivered


def test_an_import_in_replace_mode_keeps_the_erasures_noted_before_it(
    backend: Backend, daemon: tuple[MemoryStore, CaptureLayer], clock: ManualClock, tmp_path: Path
) -> None:
    """A held edit captured before a forget and a replace import (both in another process)
    is judged against both notes: the import erased nothing, the forget still drops it."""
    store, layer = daemon
    store.log_refinement(USER, diff="first")
    store.export_memory(USER, tmp_path / "a.json")
    layer.submit(edit("a1", GONE, KEPT, diff={"note": f"swapped {GONE}"}), clock.ms)
    cli = backend.store(clock=clock)
    cli.forget(USER, "color", GONE)
    cli.import_memory(USER, tmp_path / "a.json", mode="replace")
    assert [n.kind for n in store._storage.rewrite_history(USER)[1]] == ["erased", "none"]
    expire(layer, clock)
    assert signals(store) == []
    assert diffs(store) == ["first"]
    store.flush()
    assert backend.places_containing(GONE.encode()) == []
