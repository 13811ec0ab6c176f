"""Check and repair a damaged log (docs/storage.md, "Check and repair"): what a check
finds, that it writes nothing, and that a repair leaves a log every reader, an export, a
forget and the next append accept — on both backends."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from creative_memory import LogDamaged, MemoryStore, StorageError, ValidationError
from creative_memory.app.service import MemoryService
from creative_memory.cli.main import main
from creative_memory.engine.events import (
    CHAIN_GENESIS,
    SignalEvent,
    decode_event,
    encode_event,
    rechain,
    sequenced,
)
from creative_memory.engine.logcheck import (
    MAX_LISTED_PROBLEMS,
    RawLine,
    RawLog,
    examine,
    listed,
)
from creative_memory.engine.portability.archive import decode_archive
from tests.backends import Backend
from tests.conftest import ManualClock

pytest_plugins = ["tests.pg_fixtures", "tests.backends"]

USER = "u"
SECRET = b"zz_secret_pat"
AFTER = {
    "signal_type": "thumbs_up",
    "preference_type": "color",
    "pattern": "after",
    "polarity": "positive",
    "scope": "global",
}


def teach(store: MemoryStore, n: int = 8) -> None:
    for i in range(n):
        store.ingest_signal(
            USER,
            {
                "signal_type": "thumbs_down",
                "preference_type": "color",
                "pattern": f"p{i % 3}",
                "polarity": "negative",
                "scope": "global",
            },
        )
    store.flush()


def damage(backend: Backend, seq: int, line: bytes) -> str:
    """Replace the stored event ``seq`` (the log's ``seq``-th line) by ``line``; where a
    check names it."""
    if backend.kind == "files":
        log = Path(backend.root) / USER / "events.jsonl"
        lines = log.read_bytes().split(b"\n")
        lines[seq] = line  # line 0 is the header
        log.write_bytes(b"\n".join(lines))
        return f"line {seq + 1}"
    import psycopg

    with psycopg.connect(backend.root, autocommit=True) as conn:
        conn.execute(
            "UPDATE cm_events SET line = %s WHERE user_id = %s AND seq = %s", (line, USER, seq)
        )
    return f"seq {seq}"


def stored_line(backend: Backend, seq: int) -> bytes:
    return encode_event(next(e for e in backend.store().events(USER) if e.seq == seq))


def without_chain(events: list[Any]) -> list[bytes]:
    return [encode_event(msgspec.structs.replace(e, h="")) for e in events]


def test_a_healthy_log_is_healthy_and_a_repair_leaves_it_alone(backend: Backend) -> None:
    store = backend.store()
    teach(store)
    service = MemoryService(store)
    assert service.check(USER) == service.check(USER)
    result = service.check(USER)
    assert (result.healthy, result.events, result.problems) == (True, 8, [])
    before = backend.dump()
    repaired = service.repair(USER, confirm=True)
    assert (repaired.repaired, repaired.events_kept, repaired.events_dropped) == (False, 8, 0)
    assert backend.dump() == before
    # a user with no log is healthy too, and nothing is created for them
    assert service.check("nobody").healthy
    assert not service.repair("nobody", confirm=True).repaired
    assert not store._storage.user_exists("nobody")


def test_a_line_that_is_not_an_event_is_found_then_dropped(backend: Backend) -> None:
    store = backend.store()
    teach(store)
    old = store.events(USER)
    garbage = b'{"kind":"signal","pattern":"' + SECRET + b'","seq":4'
    where = damage(backend, 4, garbage)
    fresh = backend.store()
    service = MemoryService(fresh)
    with pytest.raises(StorageError, match=r"creative-memory repair --confirm"):
        fresh.forget(USER, "color", "p1")
    before = backend.dump()
    found = service.check(USER)
    assert not found.healthy and found.events == 7
    assert [(p.where, p.kind) for p in found.problems] == [(where, "unreadable")]
    assert backend.dump() == before  # a check writes nothing
    with pytest.raises(ValidationError) as refused:
        service.repair(USER, confirm=False)
    assert refused.value.field == "confirm"
    assert backend.dump() == before
    result = service.repair(USER, confirm=True)
    assert (result.repaired, result.events_kept, result.events_dropped) == (True, 7, 1)
    assert result.problems == found.problems
    assert service.check(USER).healthy
    assert backend.places_containing(SECRET) == []
    kept = fresh.events(USER)
    assert without_chain(kept) == without_chain([e for e in old if e.seq != 4])
    data, exported = service.export_archive(USER)  # the chain verifies again
    assert exported.events == 7
    decode_archive(data)
    assert fresh.forget(USER, "color", "p1") > 0
    fresh.ingest_signal(USER, AFTER)
    assert fresh.events(USER)[-1].seq == 9  # 1..8 were handed out
    # another process's store sees the repaired log, not a state derived before it
    assert backend.store().list_preferences(USER) == fresh.list_preferences(USER)


def test_the_last_line_dropped_keeps_its_number_used(backend: Backend) -> None:
    """The highest ``seq`` a dropped line held is never handed out again."""
    store = backend.store()
    teach(store, 5)
    damage(backend, 5, b"\x00not json\xff")
    service = MemoryService(backend.store())
    assert service.repair(USER, confirm=True).events_dropped == 1
    again = backend.store()
    again.ingest_signal(USER, AFTER)
    assert [e.seq for e in again.events(USER)] == [1, 2, 3, 4, 6]


def test_an_edited_event_is_kept_as_it_reads_and_chained_again(backend: Backend) -> None:
    store = backend.store()
    teach(store)
    edited = stored_line(backend, 3).replace(b'"p2"', b'"p9"')
    where = damage(backend, 3, edited)
    fresh = backend.store()
    service = MemoryService(fresh)
    with pytest.raises(StorageError, match=r"hash chain broken.*repair --confirm"):
        service.export_archive(USER)
    assert [(p.where, p.kind) for p in service.check(USER).problems] == [(where, "altered")]
    result = service.repair(USER, confirm=True)
    assert (result.repaired, result.events_dropped, result.events_kept) == (True, 0, 8)
    assert service.check(USER).healthy
    third = next(e for e in fresh.events(USER) if e.seq == 3)
    assert isinstance(third, SignalEvent) and third.pattern == "p9"
    decode_archive(service.export_archive(USER)[0])


def test_an_erasure_after_an_edit_chains_the_log_again_on_both_backends(backend: Backend) -> None:
    """storage.md, "Check and repair": an erasure re-chains the log, the edited event
    included. On PostgreSQL it kept the rows before the first erased event as stored, so
    the rows it wrote were chained onto an edited row's old hash: export failed on, and a
    check named an event creative-memory had written itself."""
    store = backend.store()
    teach(store)  # p0 p1 p2 p0 p1 p2 p0 p1
    damage(backend, 2, stored_line(backend, 2).replace(b'"p1"', b'"p7"'))  # before any p2
    service = MemoryService(backend.store())
    assert service.forget(USER, "color", "p2").events_removed == 2
    assert service.check(USER).healthy, service.check(USER).problems
    archive = decode_archive(service.export_archive(USER)[0])
    kept = [e.pattern if isinstance(e, SignalEvent) else None for e in archive.events]
    assert kept == ["p0", "p7", "p0", "p1", "p0", "p1"]


def test_events_out_of_order_are_numbered_on(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path, derivation_version="1", clock=ManualClock())
    teach(store, 6)
    log = tmp_path / USER / "events.jsonl"
    lines = log.read_bytes().split(b"\n")
    lines[5] = lines[5].replace(b'"seq":5', b'"seq":2')
    log.write_bytes(b"\n".join(lines))
    service = MemoryService(MemoryStore(tmp_path, derivation_version="1", clock=ManualClock()))
    kinds = {p.kind for p in service.check(USER).problems}
    assert kinds == {"altered", "out_of_order"}
    result = service.repair(USER, confirm=True)
    assert (result.events_renumbered, result.events_kept) == (2, 6)
    assert [e.seq for e in service.store.events(USER)] == [1, 2, 3, 4, 7, 8]
    assert service.check(USER).healthy


def test_a_header_that_does_not_load_is_written_anew(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path, derivation_version="1", clock=ManualClock())
    teach(store, 4)
    log = tmp_path / USER / "events.jsonl"
    lines = log.read_bytes().split(b"\n")
    lines[0] = b'{"kind":"header","seq_floor":40'
    log.write_bytes(b"\n".join(lines))
    service = MemoryService(MemoryStore(tmp_path, derivation_version="1", clock=ManualClock()))
    with pytest.raises(StorageError, match="bad log header"):
        service.store.list_preferences(USER)
    (header,) = service.check(USER).problems
    assert header.kind == "header" and header.detail.startswith("it does not decode (")
    assert str(tmp_path) not in header.detail
    assert service.repair(USER, confirm=True).repaired
    assert service.check(USER).healthy
    assert [e.seq for e in service.store.events(USER)] == [1, 2, 3, 4]
    service.store.ingest_signal(USER, AFTER)
    assert service.store.events(USER)[-1].seq == 41  # the floor the broken header still showed


def test_settings_that_do_not_load_are_written_anew_with_memory_off(backend: Backend) -> None:
    """Settings that no longer decode keep every operation from running (each reads them).
    What they said — memory off, a pause — cannot be read, so a repair writes them anew
    with memory off: nothing is learned or injected behind the person's back, and no event
    is lost (a full reset, the way back before, erased them all)."""
    store = backend.store()
    teach(store, 3)
    store.set_memory_enabled(USER, True)
    damage_settings(backend, b"{not json")
    service = MemoryService(backend.store())
    with pytest.raises(LogDamaged, match=r"unreadable settings.*repair --confirm"):
        service.store.list_preferences(USER)
    found = service.check(USER)
    assert [(p.where, p.kind) for p in found.problems] == [("settings", "settings")]
    result = service.repair(USER, confirm=True)
    assert (result.repaired, result.settings_rewritten, result.events_dropped) == (True, True, 0)
    assert result.problems == found.problems
    assert service.check(USER).healthy
    view = service.settings(USER)
    assert (view.memory_enabled, view.paused) == (False, False)
    assert len(service.store.events(USER)) == 3
    assert service.store.retrieve_for_injection(USER).positives == []  # memory is off
    service.set_enabled(USER, True)
    assert len(service.store.list_preferences(USER)) == 3
    # with the log damaged too: both mended in one repair
    damage_settings(backend, b"[]")
    damage(backend, 2, b"oops")
    again = MemoryService(backend.store()).repair(USER, confirm=True)
    assert again.settings_rewritten and [p.kind for p in again.problems] == [
        "unreadable",
        "settings",
    ]
    assert MemoryService(backend.store()).check(USER).healthy


def damage_settings(backend: Backend, data: bytes) -> None:
    if backend.kind == "files":
        (Path(backend.root) / USER / "settings.json").write_bytes(data)
        return
    import psycopg

    with psycopg.connect(backend.root, autocommit=True) as conn:
        # jsonb holds only JSON: a settings document of the wrong shape stands for damage
        doc = data if data.startswith(b"[") else b'{"memory_enabled": "not a bool"}'
        conn.execute("UPDATE cm_users SET settings = %s WHERE user_id = %s", (doc.decode(), USER))


def damage_files(root: Path, seq: int, line: bytes) -> None:
    log = root / USER / "events.jsonl"
    lines = log.read_bytes().split(b"\n")
    lines[seq] = line
    log.write_bytes(b"\n".join(lines))


def test_dropped_lines_are_saved_first_or_nothing_is_repaired(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "mem"
    store = MemoryStore(root, derivation_version="1", clock=ManualClock())
    teach(store, 5)
    damage_files(root, 2, b"first bad line")
    damage_files(root, 4, b"")
    service = MemoryService(MemoryStore(root, derivation_version="1", clock=ManualClock()))
    log = root / USER / "events.jsonl"
    before = log.read_bytes()
    for wrong in (tmp_path / "missing" / "x", tmp_path, root / "dropped.jsonl", root / USER / "x"):
        with pytest.raises(ValidationError) as refused:
            service.repair(USER, confirm=True, save_dropped=wrong)
        assert refused.value.field == "save_dropped"
    assert log.read_bytes() == before

    def failing(path: Path, data: bytes) -> None:
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr("creative_memory.app.repair.atomic_write", failing)
    with pytest.raises(OSError):
        service.repair(USER, confirm=True, save_dropped=tmp_path / "dropped.jsonl")
    assert log.read_bytes() == before
    monkeypatch.undo()
    problems = service.check(USER).problems
    assert [(p.where, p.detail) for p in problems] == [
        ("line 3", problems[0].detail),
        ("line 5", "an empty line"),
    ]
    result = service.repair(USER, confirm=True, save_dropped=tmp_path / "dropped.jsonl")
    assert result.dropped_saved_to == str((tmp_path / "dropped.jsonl").resolve())
    assert (tmp_path / "dropped.jsonl").read_bytes() == b"first bad line\n\n"
    assert result.events_dropped == 2 and result.events_kept == 3


def test_the_cli_reports_and_repairs(tmp_path: Path) -> None:
    root = tmp_path / "mem"
    store = MemoryStore(root, derivation_version="1", clock=ManualClock())
    teach(store, 4)
    runner = CliRunner()

    def cli(*args: str) -> Any:
        return runner.invoke(main, ["--data-dir", str(root), "--user", USER, *args])

    assert cli("check").exit_code == 0
    damage_files(root, 2, b'{"kind":"signal"\x1b[2J')
    shown = cli("check")
    assert shown.exit_code == 1
    assert "line 3: not an event" in shown.output and "\x1b" not in shown.output
    as_json = cli("check", "--json")
    assert as_json.exit_code == 1
    service = MemoryService(MemoryStore(root, derivation_version="1", clock=ManualClock()))
    assert json.loads(as_json.output) == msgspec.to_builtins(service.check(USER))
    refused = cli("repair")
    assert refused.exit_code == 2 and "--confirm" in refused.output
    saved = tmp_path / "dropped.jsonl"
    done = cli("repair", "--confirm", "--save-dropped", str(saved), "--json")
    assert done.exit_code == 0, done.output
    doc = json.loads(done.output)
    assert (doc["repaired"], doc["events_dropped"], doc["events_kept"]) == (True, 1, 3)
    assert saved.read_bytes() == b'{"kind":"signal"\x1b[2J\n'
    assert cli("check").exit_code == 0
    assert "Nothing to repair" in cli("repair", "--confirm").output


# -- the pure examination ----------------------------------------------------------------------
def chained(n: int) -> list[bytes]:
    """``n`` stored lines of a healthy log."""
    body = [
        SignalEvent(
            at="2026-01-01T00:00:00Z",
            recorded_at="2026-01-01T00:00:00Z",
            signal_type="thumbs_down",
            preference_type="color",
            pattern=f"p{i % 4}",
            polarity="negative",
            scope="global",
        )
        for i in range(n)
    ]
    return [encode_event(e) for e in sequenced(body, 0, CHAIN_GENESIS)]


DAMAGES: dict[str, Callable[[bytes], bytes]] = {
    "garbage": lambda b: b"\x00not json\xff",
    "torn": lambda b: b[: len(b) // 2],
    "empty": lambda b: b"",
    "edited": lambda b: b.replace(b'"p', b'"q', 1),
    "seq": lambda b: b.replace(b'"seq":', b'"seq":1', 1),
}


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(min_value=0, max_value=12),
    hits=st.dictionaries(st.integers(0, 11), st.sampled_from(sorted(DAMAGES)), max_size=6),
    floor=st.integers(0, 30),
)
def test_what_a_repair_keeps(n: int, hits: dict[int, str], floor: int) -> None:
    """For any damage: the events kept are the lines that still decode, in order; their
    ``seq`` strictly increase and none reuses a number the log showed; chained again they
    verify; a repaired log examines clean; an undamaged one has no problem."""
    lines = chained(n)
    for i, how in hits.items():
        if i < n:
            lines[i] = DAMAGES[how](lines[i])
    raw = RawLog(
        generation="g",
        floor=floor,
        notes=[],
        lines=[RawLine(where=f"line {i + 2}", seq=None, data=b) for i, b in enumerate(lines)],
    )
    found = examine(raw)
    readable = []
    for b in lines:
        with contextlib.suppress(msgspec.DecodeError):
            readable.append(decode_event(b))
    assert without_chain(found.events) == without_chain(
        [msgspec.structs.replace(e, seq=f.seq) for e, f in zip(readable, found.events, strict=True)]
    )
    seqs = [e.seq for e in found.events]
    assert seqs == sorted(set(seqs))
    renumbered = [e.seq for e, r in zip(found.events, readable, strict=True) if e.seq != r.seq]
    # the lines were numbered 1..n: no number any of them had is handed out again
    shown = max([floor, n, *(r.seq for r in readable)])
    assert all(s > shown for s in renumbered)
    assert found.floor >= max([shown, *seqs])
    assert found.dropped == len(lines) - len(readable)
    again = RawLog(
        generation="h",
        floor=found.floor,
        notes=[],
        lines=[RawLine(where="x", seq=None, data=encode_event(e)) for e in rechain(found.events)],
    )
    assert examine(again).problems == []
    if not any(i < n for i in hits):
        assert found.problems == [] and found.events == [decode_event(b) for b in lines]


def test_a_full_reset_does_not_hand_out_a_destroyed_last_lines_number(tmp_path: Path) -> None:
    """A full reset of a log whose last line shows no number any more: that line still
    had one (one above the line before), and it is not handed out again."""
    store = MemoryStore(tmp_path, derivation_version="1", clock=ManualClock())
    teach(store, 5)
    damage_files(tmp_path, 5, b"\x00\x00\x00")
    fresh = MemoryStore(tmp_path, derivation_version="1", clock=ManualClock())
    fresh.reset_memory(USER)
    fresh.ingest_signal(USER, AFTER)
    assert [e.seq for e in fresh.events(USER)] == [6]


def test_problems_are_listed_in_the_logs_order() -> None:
    lines = chained(6)
    lines[4] = lines[4].replace(b'"seq":5', b'"seq":1')  # edited, and out of order
    lines[5] = b"junk"
    raw = RawLog(
        generation="g",
        floor=0,
        notes=[],
        header_problem="bad log header (test)",
        lines=[RawLine(where=f"line {i + 2}", seq=None, data=b) for i, b in enumerate(lines)],
    )
    found = examine(raw)
    assert [(p.where, p.kind) for p in found.problems] == [
        ("header", "header"),
        ("line 6", "altered"),
        ("line 6", "out_of_order"),
        ("line 7", "unreadable"),
    ]
    assert [e.seq for e in found.events] == [1, 2, 3, 4, 7]  # lines 6 and 7 had 5 and 6


def test_erasure_notes_that_do_not_load_are_written_anew_on_postgres(pg_url: str) -> None:
    """On PostgreSQL the user's row stands for a file's header: notes that no longer
    decode are a ``header`` problem, and a repair writes them anew."""
    import psycopg

    store = MemoryStore(pg_url, derivation_version="1", clock=ManualClock())
    teach(store, 4)
    store.forget(USER, "color", "p1")  # a first erasure: the user has notes
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE cm_users SET erasures = '{\"oops\": 1}' WHERE user_id = %s", (USER,))
    service = MemoryService(MemoryStore(pg_url, derivation_version="1", clock=ManualClock()))
    with pytest.raises(StorageError, match="unreadable erasure notes"):
        service.forget(USER, "color", "p2")
    (notes,) = service.check(USER).problems
    assert notes.kind == "header"
    assert notes.detail.startswith("the erasure notes: it does not decode (")
    assert "postgresql" not in notes.detail and "cm_users" not in notes.detail
    assert service.repair(USER, confirm=True).repaired
    assert service.check(USER).healthy
    assert service.forget(USER, "color", "p2").events_removed > 0
    store.close()


def test_an_append_during_a_repair_lands_after_it(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A repair reads, decides and writes in one critical section: another store's append
    (another process, another replica) that comes while it decides waits for it, then
    lands in the repaired log — not in the old one, which the repair would replace."""
    store = backend.store()
    teach(store, 6)
    damage(backend, 3, b"junk")
    repairing = MemoryService(backend.store())
    other = backend.store()
    deciding = threading.Event()

    def slow(raw: RawLog) -> Any:
        deciding.set()
        time.sleep(0.5)
        return examine(raw)

    monkeypatch.setattr("creative_memory.app.repair.examine", slow)
    done: list[Any] = []
    worker = threading.Thread(target=lambda: done.append(repairing.repair(USER, confirm=True)))
    worker.start()
    assert deciding.wait(10)
    other.ingest_signal(USER, AFTER)
    worker.join(10)
    assert done and done[0].events_dropped == 1
    monkeypatch.undo()
    assert [e.seq for e in backend.store().events(USER)] == [1, 2, 4, 5, 6, 7]
    assert MemoryService(backend.store()).check(USER).healthy


def test_settings_naming_an_unknown_version_are_left_and_derivation_use_mends_them(
    tmp_path: Path,
) -> None:
    """Settings a newer release wrote (a derivation version this one does not know) are not
    damage a repair may undo; choosing a known version is the way back, and works."""
    store = MemoryStore(tmp_path, derivation_version="1", clock=ManualClock())
    teach(store, 3)
    service = MemoryService(store)
    service.set_derivation_version(USER, "4")
    settings_file = tmp_path / USER / "settings.json"
    doc = json.loads(settings_file.read_bytes())
    settings_file.write_text(json.dumps({**doc, "derivation_version": "99"}))
    fresh = MemoryService(MemoryStore(tmp_path, derivation_version="1", clock=ManualClock()))
    found = fresh.check(USER)
    assert [(p.where, p.kind) for p in found.problems] == [("settings", "version")]
    before = settings_file.read_bytes()
    result = fresh.repair(USER, confirm=True)
    assert not result.repaired and not result.settings_rewritten
    assert settings_file.read_bytes() == before
    update = fresh.set_derivation_version(USER, "5")
    assert update.changed
    assert fresh.check(USER).healthy
    switch = fresh.store.get_settings(USER).derivation_history[-1]
    assert (switch.previous, switch.version) == ("99", "5")


def test_a_log_that_is_all_damage_lists_the_first_thousand_problems(tmp_path: Path) -> None:
    """A log that is all damage (a file replaced by another one) would list a problem per
    line: an answer lists the first 1,000 in the log's order — the header's and the
    settings' always among them — and counts them all; a repair still drops every one."""
    store = MemoryStore(tmp_path, derivation_version="1", clock=ManualClock())
    teach(store, 2)
    log = tmp_path / USER / "events.jsonl"
    log.write_bytes(b"not a header\n" + b"".join(b"junk %d\n" % i for i in range(1500)))
    (tmp_path / USER / "settings.json").write_bytes(b"{")
    service = MemoryService(MemoryStore(tmp_path, derivation_version="1", clock=ManualClock()))
    found = service.check(USER)
    assert (found.problems_total, len(found.problems)) == (1502, MAX_LISTED_PROBLEMS)
    assert found.problems[0].where == "header" and found.problems[-1].where == "settings"
    # the decoder's words, nothing of where the store keeps its files (HTTP shows them too)
    assert found.problems[0].detail.startswith("it does not decode (")
    assert found.problems[-1].detail.startswith("it does not decode (")
    assert not [p for p in found.problems if str(tmp_path) in p.detail]
    assert [p.where for p in found.problems[1:3]] == ["line 2", "line 3"]
    runner = CliRunner()
    shown = runner.invoke(main, ["--data-dir", str(tmp_path), "--user", USER, "check"])
    assert "… and 502 more (the first 1,000 are listed)" in shown.output
    result = service.repair(USER, confirm=True)
    assert (result.events_dropped, result.events_kept, result.problems_total) == (1500, 0, 1502)
    assert service.check(USER).healthy
    assert len(listed(found.problems)) == MAX_LISTED_PROBLEMS  # already short: as it is


def test_every_users_memory_checked_at_once(backend: Backend) -> None:
    """An operator's question — is anyone's memory damaged? — asked once: every user with a
    log or settings, in the order of their ids; a user of the daemon's own files is none."""
    store = backend.store()
    for user in ("carol", "alice", "bob"):
        store.ingest_signal(user, AFTER)
    store.set_memory_enabled("dave", False)  # settings, no log: a user too
    if backend.kind == "files":
        (Path(backend.root) / ".daemon").mkdir()  # not a user id: skipped
        log = Path(backend.root) / "bob" / "events.jsonl"
        log.write_bytes(log.read_bytes().replace(b'"after"', b'"other"'))
    else:
        import psycopg

        with psycopg.connect(backend.root, autocommit=True) as conn:
            conn.execute("UPDATE cm_events SET line = 'junk'::bytea WHERE user_id = 'bob'")
    results = MemoryService(backend.store()).check_all()
    assert [(r.user_id, r.healthy) for r in results] == [
        ("alice", True),
        ("bob", False),
        ("carol", True),
        ("dave", True),
    ]
    if backend.kind != "files":
        return
    runner = CliRunner()
    shown = runner.invoke(main, ["--data-dir", backend.root, "check", "--all-users"])
    assert shown.exit_code == 1
    assert shown.output.splitlines()[0] == "4 users: 3 healthy, 1 with problems."
    assert "`creative-memory repair --confirm --user bob`" in shown.output
    as_json = runner.invoke(main, ["--data-dir", backend.root, "--json", "check", "--all-users"])
    doc = json.loads(as_json.output)
    assert doc["healthy"] is False and [u["user_id"] for u in doc["users"]][:2] == ["alice", "bob"]
