"""The engine on every storage backend: all 68 conformance traces, prototype import,
erasure (nothing left anywhere in the store), export/import round trips (also across
backends), the derivation cache surviving a reopen, and ``seq`` never reused.

The file backend also has its own deeper suites (crash, torn tails, permissions:
``test_storage_durability.py``); PostgreSQL concurrency is in ``test_pg_concurrency.py``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import pytest

from creative_memory import MemoryStore, build_prompt_block
from creative_memory.engine.events import SignalEvent
from creative_memory.engine.timeutil import format_ts
from creative_memory.storage import FileStorage
from tests.conftest import FIXTURES, ManualClock, load_scenario, tag
from tests.test_conformance import SCENARIOS, replay
from tests.test_prototype_import import comparable

if TYPE_CHECKING:
    from tests.backends import Backend

pytest_plugins = ["tests.pg_fixtures", "tests.backends"]

USER = "bk_user"
PROTO = FIXTURES / "prototype"


# -- the 68 conformance traces ---------------------------------------------------------------
@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name.removesuffix(".json.gz"))
def test_conformance_trace(backend: Backend, path: Path) -> None:
    clock = ManualClock()
    store = backend.store(derivation_version="1", clock=clock)
    replay(store, clock, load_scenario(path), f" [{backend.kind}]")


def test_every_trace_is_replayed() -> None:
    assert len(SCENARIOS) == 68


# -- helpers ---------------------------------------------------------------------------------
def observe(store: MemoryStore, user: str, projects: tuple[str, ...] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {
        "list": [p.to_dict() for p in store.list_preferences(user)],
        "refinements": [r.to_dict() for r in store.refinement_log(user)],
        "retrieval:-": store.retrieve_for_injection(user).to_dict(),
    }
    for p in projects:
        out["retrieval:" + p] = store.retrieve_for_injection(user, {"project_id": p}).to_dict()
    return out


def observe_from_scratch(
    store: MemoryStore, user: str, projects: tuple[str, ...] = ()
) -> dict[str, Any]:
    """What a fresh file store derives from ``store``'s raw events and settings alone."""
    with tempfile.TemporaryDirectory(prefix="cm-scratch-") as d:
        fs = FileStorage(d)
        fs.replace_all(user, store.events(user))
        fs.write_settings(user, store.get_settings(user))
        return observe(MemoryStore(d, derivation_version="1", clock=ManualClock()), user, projects)


def ts(clock: ManualClock) -> str:
    clock.advance_days(1)
    return format_ts(clock.ms)


# -- prototype import ------------------------------------------------------------------------
@pytest.mark.parametrize("user", ["designer_fresh", "designer"])
def test_prototype_import(backend: Backend, user: str) -> None:
    store = backend.store()
    src = json.loads((PROTO / user / "preferences.json").read_text())
    n = store.import_prototype(user, PROTO / user / "preferences.json")
    assert n == len(src["global_preferences"]) + sum(
        len(v) for v in src["project_overrides"].values()
    )
    expected = json.loads((PROTO / user / "expected-retrieval.json").read_text())
    all_src = src["global_preferences"] + [r for v in src["project_overrides"].values() for r in v]
    by_id = {r["id"]: r for r in all_src}
    parts = {"positives": "positives", "negatives": "negatives"}
    parts["project_overrides"] = "projectOverrides"
    for ctx_json, exp in expected.items():
        ctx = json.loads(ctx_json)
        got = store.retrieve_for_injection(user, ctx)
        for part, theirs in parts.items():
            assert [comparable(r.to_dict(), by_id) for r in getattr(got, part)] == [
                comparable(r, by_id) for r in exp["retrieval"][theirs]
            ], (ctx_json, part)
        assert got.diagnostics == exp["retrieval"]["diagnostics"], ctx_json
        assert build_prompt_block(got, ctx.get("project_id")) == exp["prompt_block"]
    assert {r.id for r in store.list_preferences(user)} == set(by_id)
    before = backend.dump()
    assert backend.store().import_prototype(user, PROTO / user / "preferences.json") == 0
    assert backend.dump() == before  # a second import changes nothing at all


def test_prototype_import_of_a_paused_user(backend: Backend) -> None:
    store = backend.store()
    path = PROTO / "paused_user" / "preferences.json"
    assert store.import_prototype("paused_user", path) >= 1
    assert store.get_settings("paused_user").memory_enabled is False
    assert store.retrieve_for_injection("paused_user").positives == []
    assert store.list_preferences("paused_user")
    assert store.import_prototype("paused_user", path) == 0


# -- erasure ---------------------------------------------------------------------------------
SECRET = "zz_forget_me_zz"


def seed_secret(store: MemoryStore, clock: ManualClock, project: str | None) -> None:
    scope = "project" if project else "global"
    store.ingest_signal(USER, tag(SECRET, "color", scope=scope, project_id=project, ts=ts(clock)))
    store.ingest_signal(USER, tag("airy", ts=ts(clock)))
    store.ingest_signal(USER, tag("keep_proj", scope="project", project_id="px", ts=ts(clock)))
    store.list_preferences(USER)  # a cache entry and the snapshot hold the secret
    store.ingest_signal(USER, tag(SECRET, "color", scope=scope, project_id=project, ts=ts(clock)))
    store.ingest_signal(
        USER,
        tag(
            SECRET,
            "color",
            scope=scope,
            project_id=project,
            signal_type="thumbs_up",
            ts=ts(clock),
        ),
    )
    store.log_refinement(USER, artifact_id="a1", project_id=project, diff={"x": SECRET})
    store.retrieve_for_injection(USER, {"project_id": project})
    store.ingest_signal(USER, tag("dense", "spacing", "negative", ts=ts(clock)))
    store.list_preferences(USER)


def everything_read(store: MemoryStore, projects: tuple[str, ...]) -> bytes:
    blob = json.dumps(observe(store, USER, projects)).encode()
    return blob + b"".join(msgspec.json.encode(e) for e in store.events(USER))


@pytest.mark.parametrize("project", [None, "p1"])
def test_forget_leaves_the_pattern_nowhere(backend: Backend, project: str | None) -> None:
    clock = ManualClock()
    store = backend.store(clock=clock)
    seed_secret(store, clock, project)
    other = backend.store(clock=clock)
    other.list_preferences(USER)  # another instance holding it in memory
    held = backend.places_containing(SECRET.encode())
    if backend.kind == "postgres":
        assert {"cm_events.line", "cm_cache.state", "cm_snapshots.snapshot"} <= set(held)
    else:
        assert {f"{USER}/events.jsonl", f"{USER}/snapshot.json"} <= set(held)
    max_seq = max(e.seq for e in store.events(USER))

    assert store.forget(USER, "color", SECRET, project_id=project) == 4

    assert backend.places_containing(SECRET.encode()) == []
    projects = ("p1", "px")
    for s in (store, other, backend.store(clock=clock)):
        assert SECRET.encode() not in everything_read(s, projects)
    assert backend.places_containing(SECRET.encode()) == []  # reads wrote nothing back
    kept = {e.pattern for e in store.events(USER) if isinstance(e, SignalEvent)}
    assert kept == {"airy", "keep_proj", "dense"}
    assert observe(store, USER, projects) == observe_from_scratch(store, USER, projects)
    store.ingest_signal(USER, tag("after", ts=ts(clock)))
    backend.store(clock=clock).ingest_signal(USER, tag("after2", ts=ts(clock)))
    assert [e.seq for e in store.events(USER)][-2:] == [max_seq + 1, max_seq + 2]


SECRETS = {"global": "zz_global_secret_zz", "p1": "zz_p1_secret_zz", "p2": "zz_p2_secret_zz"}


@pytest.mark.parametrize(
    ("scope", "erased"),
    [("all", {"global", "p1", "p2"}), ("global", {"global"}), ("project:p1", {"p1"})],
)
def test_reset_leaves_the_scope_nowhere(backend: Backend, scope: str, erased: set[str]) -> None:
    clock = ManualClock()
    store = backend.store(clock=clock)
    for _ in range(2):
        for bucket, secret in SECRETS.items():
            project = None if bucket == "global" else bucket
            store.ingest_signal(
                USER,
                tag(
                    secret,
                    scope="project" if project else "global",
                    project_id=project,
                    ts=ts(clock),
                ),
            )
            store.retrieve_for_injection(USER, {"project_id": project})
    store.run_decay(USER, now="2026-01-01T00:00:00Z")
    store.list_preferences(USER)
    max_seq = max(e.seq for e in store.events(USER))

    store.reset_memory(USER, scope)

    projects = ("p1", "p2")
    for bucket, secret in SECRETS.items():
        places = backend.places_containing(secret.encode())
        seen = [
            secret.encode() in everything_read(s, projects)
            for s in (store, backend.store(clock=clock))
        ]
        if bucket in erased:
            assert places == [], (bucket, places)
            assert seen == [False, False]
        else:
            assert places, bucket
            assert seen == [True, True]
    assert observe(store, USER, projects) == observe_from_scratch(store, USER, projects)
    store.ingest_signal(USER, tag("after_reset", ts=ts(clock)))
    assert store.events(USER)[-1].seq == max_seq + 1


# -- seq never reused ------------------------------------------------------------------------
def test_erasing_the_tail_never_reuses_seq(backend: Backend) -> None:
    clock = ManualClock()
    store = backend.store(clock=clock)
    for pat in ("a", "b", SECRET, SECRET):
        store.ingest_signal(USER, tag(pat, ts=ts(clock)))
    assert store.forget(USER, "layout", SECRET) == 2
    assert [e.seq for e in store.events(USER)] == [1, 2]
    backend.store(clock=clock).ingest_signal(USER, tag("c"))
    assert [e.seq for e in store.events(USER)] == [1, 2, 5]


def test_reset_all_never_reuses_seq(backend: Backend) -> None:
    clock = ManualClock()
    store = backend.store(clock=clock)
    for pat in ("a", "b", SECRET):
        store.ingest_signal(USER, tag(pat, ts=ts(clock)))
    store.reset_memory(USER, "all")
    assert store.events(USER) == [] and store.list_preferences(USER) == []
    backend.store(clock=clock).ingest_signal(USER, tag("d"))
    assert [e.seq for e in store.events(USER)] == [4]
    store.reset_memory(USER, "all")
    store.ingest_signal(USER, tag("e"))
    assert [e.seq for e in store.events(USER)] == [5]


@pytest.mark.parametrize("mode", ["replace", "merge"])
def test_an_import_after_an_erasure_never_reuses_seq(
    backend: Backend, tmp_path: Path, mode: str
) -> None:
    """Restoring a backup after a wipe (a replace, or a merge into the emptied log): the
    archive's events are numbered on after every number the log handed out."""
    clock = ManualClock()
    store = backend.store(clock=clock)
    for pat in ("a", "b", "c"):
        store.ingest_signal(USER, tag(pat, ts=ts(clock)))
    backup = tmp_path / "backup.json"
    store.export_memory(USER, backup)
    store.ingest_signal(USER, tag(SECRET, ts=ts(clock)))  # seq 4
    store.reset_memory(USER, "all")
    assert store.import_memory(USER, backup, mode=mode) == 3
    events = backend.store(clock=clock).events(USER)
    assert [e.seq for e in events] == [5, 6, 7]
    assert [e.pattern for e in events if isinstance(e, SignalEvent)] == ["a", "b", "c"]
    store.ingest_signal(USER, tag("d", ts=ts(clock)))
    assert store.events(USER)[-1].seq == 8
    # and into a user who never had a log, the archive's numbers are kept
    assert store.import_memory("fresh", backup, mode=mode) == 3
    assert [e.seq for e in store.events("fresh")] == [1, 2, 3]


# -- export / import -------------------------------------------------------------------------
def seed_mixed(store: MemoryStore, clock: ManualClock, n: int = 30, prefix: str = "p") -> None:
    for i in range(n):
        store.ingest_signal(
            USER,
            tag(
                f"{prefix}{i % 7}",
                "layout" if i % 2 else "color",
                "negative" if i % 5 == 0 else "positive",
                scope="project" if i % 3 == 0 else "global",
                project_id="proj",
                ts=ts(clock),
            ),
        )
    store.log_refinement(USER, artifact_id="art", project_id="proj", diff={"k": "v"})
    store.run_decay(USER, now="2027-01-01T00:00:00Z")
    store.set_project_disabled(USER, "other", True)


def test_export_import_round_trip(backend: Backend, tmp_path: Path) -> None:
    clock = ManualClock()
    store = backend.store(clock=clock)
    seed_mixed(store, clock)
    first = tmp_path / "a.json"
    store.export_memory(USER, first)
    assert store.import_memory("copy", first, mode="replace") == len(store.events(USER))
    second = tmp_path / "b.json"
    store.export_memory("copy", second)
    a, b = json.loads(first.read_bytes()), json.loads(second.read_bytes())
    assert (b["events"], b["settings"], b["user_id"]) == (a["events"], a["settings"], "copy")
    # merging the same archive again adds nothing
    assert store.import_memory(USER, first, mode="merge") == 0
    third = tmp_path / "c.json"
    store.export_memory(USER, third)
    assert third.read_bytes() == first.read_bytes()


@pytest.mark.parametrize("direction", ["files_to_postgres", "postgres_to_files"])
def test_archives_move_between_backends_byte_identically(
    tmp_path: Path, pg_url: str, direction: str
) -> None:
    clock = ManualClock()
    roots = {"files": str(tmp_path / "mem"), "postgres": pg_url}
    src_kind, dst_kind = direction.split("_to_")
    with (
        MemoryStore(roots[src_kind], derivation_version="1", clock=clock) as src,
        MemoryStore(roots[dst_kind], derivation_version="1", clock=clock) as dst,
    ):
        seed_mixed(src, clock)
        archive = tmp_path / "out.json"
        src.export_memory(USER, archive)
        assert dst.import_memory(USER, archive, mode="replace") == len(src.events(USER))
        back = tmp_path / "back.json"
        dst.export_memory(USER, back)
        assert back.read_bytes() == archive.read_bytes()
        assert observe(dst, USER, ("proj",)) == observe(src, USER, ("proj",))
        # new events continue the same chain on both
        for s in (src, dst):
            s.ingest_signal(USER, tag("next", ts="2027-06-01T00:00:00Z"))
        assert src.events(USER)[-1] == dst.events(USER)[-1]


# -- the derivation cache --------------------------------------------------------------------
def test_cache_survives_reopen_and_extends_in_o_k(
    backend: Backend, apply_counter: list[int]
) -> None:
    clock = ManualClock()
    a = backend.store(clock=clock)
    seed_mixed(a, clock, 40)
    expected = observe(a, USER, ("proj",))
    a.close()

    apply_counter[0] = 0
    assert observe(backend.store(clock=clock), USER, ("proj",)) == expected
    assert apply_counter[0] == 0, "a reopened store is served from the cache"

    seed_mixed(backend.store(clock=clock), clock, 7, prefix="q")
    apply_counter[0] = 0
    d = backend.store(clock=clock)
    got = observe(d, USER, ("proj",))
    n_new = 7 + 1 + 1  # signals, the refinement and a decay pass (a settings change is not)
    assert apply_counter[0] <= n_new + 1, "a new store extends the cached prefix by k"
    assert got == observe_from_scratch(d, USER, ("proj",))


def test_capacity_bounds_the_cache(backend: Backend) -> None:
    clock = ManualClock()
    store = backend.store(clock=clock, cache_capacity=3)
    for i in range(8):
        store.ingest_signal(USER, tag(f"p{i % 3}", ts=ts(clock)))
        store.list_preferences(USER)
        store.flush()  # reads defer write-back; this writes the entry now
        if backend.kind == "files":
            import time

            time.sleep(0.02)
    keys = backend.storage().cache_keys(USER)
    assert len(keys) == 3
    newest = {f"v1-{e.h}" for e in store.events(USER)[-3:]}
    assert keys == newest
