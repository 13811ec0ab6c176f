"""An archive import is one critical section, and one write (docs/storage.md, "Imports").

What a merge adds depends on what the log holds, so the import reads the log, decides and
writes under the user's lock (one transaction on PostgreSQL). The races are run
deterministically: another writer — another store on the same root, as another process
or replica would be — does its whole write at the worst moment the storage API leaves
open, right before the importing thread's first write call to the storage. Reading the
log before that call (the bug) decides on a log that no longer is.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from creative_memory import MemoryStore
from creative_memory.engine.events import SignalEvent
from tests.conftest import tag

if TYPE_CHECKING:
    from tests.backends import Backend

pytest_plugins = ["tests.pg_fixtures", "tests.backends"]

U = "importer"
#: The storage calls that write (any of them may be an import's first write).
WRITES = (
    "append",
    "append_positioned",
    "rewrite",
    "replace_all",
    "import_events",
    "write_settings",
    "update_settings",
)


def archive_of(store: MemoryStore, tmp_path: Path, n: int) -> Path:
    """An archive of ``n`` signals (of another user: the events are what counts)."""
    store.ingest_signals(
        "source", [tag(f"p{i}", ts=f"2025-01-{1 + i % 28:02d}T00:00:00.000Z") for i in range(n)]
    )
    path = tmp_path / "archive.json"
    store.export_memory("source", path)
    return path


@pytest.fixture
def before_first_write(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """``arm(store, other)``: the first storage write of the calling thread through
    ``store`` first runs ``other()`` to the end in another thread (errors re-raised)."""

    def arm(store: MemoryStore, other: Callable[[], Any]) -> None:
        storage = store._storage
        me = threading.get_ident()
        fired: list[BaseException | None] = []

        def run_other() -> None:
            errors: list[BaseException] = []

            def body() -> None:
                try:
                    other()
                except BaseException as exc:  # re-raised in the importing thread
                    errors.append(exc)

            th = threading.Thread(target=body)
            th.start()
            th.join()
            if errors:
                raise errors[0]

        for name in WRITES:
            real = getattr(storage, name, None)
            if real is None:  # a storage without that call
                continue

            def write(*args: Any, _real: Any = real, **kw: Any) -> Any:
                if not fired and threading.get_ident() == me:
                    fired.append(None)
                    run_other()
                return _real(*args, **kw)

            monkeypatch.setattr(storage, name, write)

    yield arm


def test_two_merge_imports_at_once_add_each_event_once(
    backend: Backend, tmp_path: Path, before_first_write: Callable[..., None]
) -> None:
    store, other = backend.store(), backend.store()
    archive = archive_of(store, tmp_path, 40)
    store.ingest_signal(U, tag("seed"))
    added: list[int] = []
    before_first_write(store, lambda: added.append(other.import_memory(U, archive)))
    added.append(store.import_memory(U, archive))
    assert added == [40, 0]  # the other import, then this one (which finds them all there)
    assert len(store.events(U)) == 41
    assert len(other.events(U)) == 41
    assert store.import_memory(U, archive) == 0


def test_an_import_into_an_empty_log_keeps_an_event_ingested_meanwhile(
    backend: Backend, tmp_path: Path, before_first_write: Callable[..., None]
) -> None:
    store, other = backend.store(), backend.store()
    archive = archive_of(store, tmp_path, 30)
    assert store.events(U) == []
    before_first_write(store, lambda: other.ingest_signal(U, tag("live")))
    added = store.import_memory(U, archive)
    patterns = [e.pattern for e in store.events(U) if isinstance(e, SignalEvent)]
    assert "live" in patterns  # acknowledged to the other writer: never lost
    assert added == 30 and len(patterns) == 31
    assert [e.pattern for e in other.events(U) if isinstance(e, SignalEvent)] == patterns


def test_an_import_that_fails_to_write_leaves_the_log_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A merge of many events is one write: a crash or an I/O error midway (here: the
    write stops after half its bytes) leaves none of them — not the half that reached the
    file before (an append of many lines can be cut short)."""
    store = MemoryStore(tmp_path / "mem", derivation_version="1")
    archive = archive_of(store, tmp_path, 2000)
    store.ingest_signal(U, tag("seed"))
    before = (tmp_path / "mem" / U / "events.jsonl").read_bytes()
    real = os.write

    def write(fd: int, data: Any) -> int:
        if len(data) > 64 * 1024 and "events.jsonl" in os.readlink(f"/proc/self/fd/{fd}"):
            real(fd, bytes(data[: len(data) // 2]))
            raise OSError(errno.EIO, "simulated crash in the middle of the write")
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)
    with pytest.raises(OSError):
        store.import_memory(U, archive)
    monkeypatch.undo()
    assert (tmp_path / "mem" / U / "events.jsonl").read_bytes() == before
    assert not [p.name for p in (tmp_path / "mem" / U).iterdir() if p.name.endswith(".tmp")]
    again = MemoryStore(tmp_path / "mem", derivation_version="1")
    assert len(again.events(U)) == 1
    assert again.import_memory(U, archive) == 2000  # and a retry imports it all
    assert len(again.events(U)) == 2001


def test_a_merge_keeps_the_log_and_its_readers_positions(backend: Backend, tmp_path: Path) -> None:
    """A merge appends: the events before it keep their bytes (file) and rows, the
    generation stays, and a store that had derived the log continues from where it was."""
    store = backend.store()
    archive = archive_of(store, tmp_path, 5)
    store.ingest_signal(U, tag("seed"))
    generation = store._storage.generation(U)
    first = store.events(U)
    assert [r.pattern for r in store.list_preferences(U)] == ["seed"]
    assert store.import_memory(U, archive) == 5
    assert store._storage.generation(U) == generation
    events = store.events(U)
    assert events[:1] == first and [e.seq for e in events] == [1, 2, 3, 4, 5, 6]
    assert sorted(r.pattern for r in store.list_preferences(U)) == sorted(
        ["seed", *(f"p{i}" for i in range(5))]
    )
    fresh = backend.store()
    assert [r.to_dict() for r in fresh.list_preferences(U)] == [
        r.to_dict() for r in store.list_preferences(U)
    ]
