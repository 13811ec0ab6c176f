"""A forget that fails halfway leaves nothing derived from the erased content behind, and a
retried one cleans up whatever an earlier crash left (docs/storage.md, "Erasure").

Faults are injected between the steps of the file store's rewrite: right after the new log
is in place (where a crash once left every cache entry and the snapshot), and while the
derived artefacts are being deleted."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from creative_memory import MemoryStore
from creative_memory.engine.errors import StorageError
from creative_memory.storage.files import backend as files_backend
from creative_memory.storage.files.backend import FileStorage
from tests.conftest import ManualClock

pytest_plugins = ["tests.pg_fixtures"]

USER = "u"
SECRET = "zz_secret_pat"


class Crash(Exception):
    """Stands for the process dying at this point."""


def seeded(root: Path, clock: ManualClock) -> MemoryStore:
    """A user whose log, cache entries (one per prefix) and snapshot hold SECRET."""
    return seeded_store(MemoryStore(root, derivation_version="1", clock=clock, cache_capacity=100))


def seeded_store(store: MemoryStore) -> MemoryStore:
    """``store`` with twelve events of USER, every third one of SECRET."""
    for i in range(12):
        pattern = SECRET if i % 3 == 0 else f"p{i}"
        store.ingest_signal(USER, {"signal_type": "explicit_tag", "preference_type": "color",
                                   "pattern": pattern, "polarity": "positive",
                                   "tag_text": "love this", "scope": "global"})  # fmt: skip
        store.flush()
    return store


def holders(root: Path) -> list[str]:
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and SECRET.encode() in p.read_bytes()
    )


def test_a_crash_right_after_the_new_log_is_in_place_leaves_nothing(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "mem"
    seeded(root, clock)
    assert len(holders(root)) > 10  # the log, the snapshot, cache entries
    real = files_backend.atomic_write

    def write_then_die(path: Path, data: bytes) -> None:
        real(path, data)
        if path.name == "events.jsonl":
            raise Crash

    monkeypatch.setattr(files_backend, "atomic_write", write_then_die)
    with pytest.raises(Crash):
        MemoryStore(root, derivation_version="1", clock=clock).forget(USER, "color", SECRET)
    monkeypatch.undo()
    assert holders(root) == []  # derived data went before the new log took the old one's place
    retry = MemoryStore(root, derivation_version="1", clock=clock)
    assert retry.forget(USER, "color", SECRET) == 0  # nothing left to erase in the log
    assert retry.list_preferences(USER) and holders(root) == []


def test_a_crash_while_deleting_derived_data_is_cleaned_up_by_the_retry(
    tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "mem"
    seeded(root, clock)
    real = FileStorage._purge_derived

    def half_then_die(self: FileStorage, user_id: str) -> None:
        cache = self.user_dir(user_id) / "cache"
        for entry in sorted(cache.iterdir())[:3]:
            entry.unlink()
        raise Crash

    monkeypatch.setattr(FileStorage, "_purge_derived", half_then_die)
    with pytest.raises(Crash):
        MemoryStore(root, derivation_version="1", clock=clock).forget(USER, "color", SECRET)
    monkeypatch.setattr(FileStorage, "_purge_derived", real)
    retry = MemoryStore(root, derivation_version="1", clock=clock)
    assert retry.forget(USER, "color", SECRET) == 4  # the log was never rewritten: all of it
    assert holders(root) == []


def test_a_forget_with_nothing_to_erase_still_removes_stale_derived_data(
    tmp_path: Path, clock: ManualClock
) -> None:
    """Derived files an older crash left behind (the log already clean): a forget that
    finds nothing in the log still deletes them."""
    root = tmp_path / "mem"
    store = seeded(root, clock)
    d = root / USER
    stale = tmp_path / "stale"
    shutil.copytree(d / "cache", stale / "cache")
    shutil.copy(d / "snapshot.json", stale / "snapshot.json")
    assert store.forget(USER, "color", SECRET) == 4
    store.close()
    shutil.copytree(stale / "cache", d / "cache", dirs_exist_ok=True)
    shutil.copy(stale / "snapshot.json", d / "snapshot.json")
    assert len(holders(root)) > 10
    again = MemoryStore(root, derivation_version="1", clock=clock)
    assert again.forget(USER, "color", SECRET) == 0
    assert holders(root) == []
    again.reset_memory(USER, "project:nothing_there")  # a reset that erases nothing, too
    assert holders(root) == []


@pytest.mark.parametrize("header_too", [False, True], ids=["a-line", "the-header-too"])
def test_a_full_reset_erases_a_log_whose_lines_no_longer_decode(
    tmp_path: Path, clock: ManualClock, header_too: bool
) -> None:
    """A corrupt log must not keep a person from wiping their memory: a full reset erases
    it without reading it, and no ``seq`` any line still shows is used again. Anything
    short of everything still refuses (what to keep would have to be read)."""
    root = tmp_path / "mem"
    seeded(root, clock).close()
    log = root / USER / "events.jsonl"
    lines = log.read_bytes().split(b"\n")
    lines[3] = b'garbage{"seq": 900, "pattern": "' + SECRET.encode() + b'"'
    if header_too:
        lines[0] = b"not a header"
    log.write_bytes(b"\n".join(lines))
    store = MemoryStore(root, derivation_version="1", clock=clock)
    with pytest.raises(StorageError, match=r"not a valid|bad log header"):
        store.forget(USER, "color", "p1")
    store.reset_memory(USER)
    assert holders(root) == []
    assert store.events(USER) == []
    again = {"signal_type": "thumbs_up", "preference_type": "color", "pattern": "after"}
    store.ingest_signal(USER, {**again, "polarity": "positive", "scope": "global"})
    # line 4 shows 900; each line after it is counted at least one above the line before
    # (a line that no longer shows its number still had one): 909 is the highest handed out
    assert [e.seq for e in store.events(USER)] == [910]
    store.close()


@pytest.mark.parametrize("damage", ["a-row", "the-notes-too"])
def test_a_full_reset_erases_a_postgres_log_whose_rows_no_longer_decode(
    pg_url: str, clock: ManualClock, damage: str
) -> None:
    """The same on PostgreSQL: a row (and the erasure notes) that no longer decode do not
    keep a full reset from erasing every row, unread; anything less still refuses."""
    import psycopg

    from tests.backends import pg_places_containing

    store = seeded_store(MemoryStore(pg_url, derivation_version="1", clock=clock))
    store.forget(USER, "color", "p1")  # a first erasure: the user has notes
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE cm_events SET line = %s WHERE user_id = %s AND seq = 4",
            (b'{"kind":"signal","garbage":"' + SECRET.encode() + b'","seq":900}', USER),
        )
        if damage == "the-notes-too":
            conn.execute("UPDATE cm_users SET erasures = '{\"oops\": 1}' WHERE user_id = %s",
                         (USER,))  # fmt: skip
    fresh = MemoryStore(pg_url, derivation_version="1", clock=clock)
    with pytest.raises(StorageError, match=r"not a valid event|unreadable erasure notes"):
        fresh.forget(USER, "color", "p2")
    with pytest.raises(StorageError):
        fresh.reset_memory(USER, "global")
    fresh.reset_memory(USER)
    assert pg_places_containing(pg_url, SECRET.encode()) == []
    assert fresh.events(USER) == []
    again = {"signal_type": "thumbs_up", "preference_type": "color", "pattern": "after"}
    fresh.ingest_signal(USER, {**again, "polarity": "positive", "scope": "global"})
    assert [e.seq for e in fresh.events(USER)] == [13]  # 1..12 were handed out
    store.close()
    fresh.close()
