"""Derivation-version preview, the per-user version switch and as-of inspection
(docs/time-travel.md), through the application service."""

from __future__ import annotations

import gzip
import itertools
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any
from unittest import mock

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from creative_memory import MemoryStore
from creative_memory.app.service import MemoryService
from creative_memory.engine.errors import ValidationError
from tests.conftest import ManualClock, load_scenario
from tests.test_conformance import SCENARIOS, replay
from tests.test_golden_versions import USERS
from tests.test_golden_versions import History as GoldenHistory

if TYPE_CHECKING:
    from tests.backends import Backend

pytest_plugins = ["tests.pg_fixtures", "tests.backends"]

GOLDEN = Path(__file__).parent / "fixtures" / "golden" / "preview-1-to-2.json.gz"
T0 = "2026-01-01T00:00:00.000Z"


def signal(pattern: str, polarity: str, ptype: str = "color", **kw: Any) -> dict[str, Any]:
    return {
        "signal_type": kw.get("signal_type", "explicit_tag"),
        "pattern": pattern,
        "preference_type": ptype,
        "polarity": polarity,
        "tag_text": None,
        "scope": kw.get("scope", "global"),
        "project_id": kw.get("project_id"),
        "artifact_id": kw.get("artifact", "a"),
        "session_id": "s",
        "timestamp": kw.get("ts", T0),
    }


def tree_bytes(root: Path) -> dict[str, bytes]:
    files = sorted(p for p in root.rglob("*") if p.is_file())
    return {str(p.relative_to(root)): p.read_bytes() for p in files}


def golden_store(tmp_path: Path, version: str) -> tuple[MemoryStore, Any]:
    with mock.patch.object(os, "fsync", lambda fd: None):
        h = GoldenHistory(tmp_path / "mem", version, tmp_path)
        h.run()
    return h.store, h.clock


# -- preview -------------------------------------------------------------------------------
def test_preview_writes_nothing(tmp_path: Path) -> None:
    store, _ = golden_store(tmp_path, "1")
    store.flush()
    svc = MemoryService(store)
    before = tree_bytes(tmp_path / "mem")
    for user in USERS:
        for version in ("1", "2", "3"):
            svc.preview(user, version)
            svc.preview(user, version, "p1")
    assert tree_bytes(tmp_path / "mem") == before


def test_preview_to_the_version_in_force_changes_nothing(tmp_path: Path) -> None:
    store, _ = golden_store(tmp_path, "1")
    svc = MemoryService(store)
    for user in USERS:
        result = svc.preview(user, "1")
        assert result.change.records == [] and result.change.injection == []
        assert result.change.unchanged == len(store.list_preferences(user)) > 0
        assert not result.change.block_changed


def preview_document(tmp_path: Path) -> bytes:
    store, _ = golden_store(tmp_path, "1")
    svc = MemoryService(store)
    doc = {u: msgspec.to_builtins(svc.preview(u, "2")) for u in USERS}
    return msgspec.json.format(msgspec.json.encode(doc), indent=1) + b"\n"


def test_preview_from_1_to_2_is_pinned(tmp_path: Path) -> None:
    """The golden history's preview from version 1 to 2 (python -m tests.test_time_travel
    --write regenerates the file; version 2's floats are compared to 1e-9)."""
    want = msgspec.json.decode(gzip.decompress(GOLDEN.read_bytes()))
    got = msgspec.json.decode(preview_document(tmp_path))
    assert _close(want, got), "the preview from version 1 to 2 changed"
    for user in USERS:
        assert got[user]["change"]["records"], "version 2 must differ from version 1 here"


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= 1e-9 * max(1.0, abs(a))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def test_preview_checks_its_input(tmp_path: Path) -> None:
    svc = MemoryService(MemoryStore(tmp_path / "mem"))
    with pytest.raises(ValidationError) as e:
        svc.preview("alice", "99")
    assert e.value.field == "derivation_version"
    with pytest.raises(ValidationError) as e:
        svc.preview("alice", "1", "a b")
    assert e.value.field == "project_id"


# -- the per-user switch ---------------------------------------------------------------------
def test_switching_a_users_version_is_recorded_and_reversible(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "mem", derivation_version="3")
    svc = MemoryService(store)
    for i in range(4):
        store.ingest_signal("alice", signal("neon_palette", "negative", artifact=f"n{i}"))
        store.ingest_signal("bob", signal("neon_palette", "negative", artifact=f"n{i}"))
    as_3 = store.list_preferences("alice")
    preview = svc.preview("alice", "1")
    update = svc.set_derivation_version("alice", "1")
    assert update.changed
    assert svc.inspect("alice")["derivation_version"] == "1"
    assert svc.inspect("bob")["derivation_version"] == "3"  # per user
    as_1 = store.list_preferences("alice")
    assert {r.derivation_version for r in as_1} == {"1"}
    assert preview.change.records or as_1 != as_3
    # the same log, so switching back gives version 3's records again, byte for byte
    assert not svc.set_derivation_version("alice", "1").changed
    svc.set_derivation_version("alice", "3")
    assert store.list_preferences("alice") == as_3
    history = store.get_settings("alice").derivation_history
    assert [(c.previous, c.version) for c in history] == [("3", "1"), ("1", "3")]
    # a new store over the same files honours the setting
    svc.set_derivation_version("alice", "1")
    again = MemoryStore(tmp_path / "mem", derivation_version="3")
    assert {r.derivation_version for r in again.list_preferences("alice")} == {"1"}
    with pytest.raises(ValidationError):
        svc.set_derivation_version("alice", "nope")


def test_as_of_uses_the_version_in_force_then(tmp_path: Path) -> None:
    clock_ms = [1_767_225_600_000]  # 2026-01-01
    store = MemoryStore(tmp_path / "mem", derivation_version="3", clock=lambda: clock_ms[0])
    svc = MemoryService(store)
    for i in range(3):
        store.ingest_signal("alice", signal("neon_palette", "negative", artifact=f"n{i}"))
    first = store.events("alice")[-1].seq
    clock_ms[0] += 86_400_000
    svc.set_derivation_version("alice", "1")
    clock_ms[0] += 86_400_000
    store.ingest_signal("alice", signal("airy_spacing", "positive", "layout"))
    then = svc.inspect("alice", at_seq=first)
    assert then["as_of"]["derivation_version"] == "3"
    assert {r["derivation_version"] for r in then["preferences"]} == {"3"}
    now = svc.inspect("alice")
    assert now["derivation_version"] == "1"
    # as of a time after the switch (no event since): the version in force at that time
    after_switch = svc.inspect("alice", as_of="2026-01-02T12:00:00Z")
    assert after_switch["as_of"]["at_seq"] == first
    assert after_switch["as_of"]["derivation_version"] == "1"
    assert svc.inspect("alice", as_of="2026-01-01T12:00:00Z")["as_of"]["derivation_version"] == "3"


def test_past_the_end_is_now_and_before_the_first_event_is_before_it(tmp_path: Path) -> None:
    clock_ms = [1_767_225_600_000]  # 2026-01-01
    store = MemoryStore(tmp_path / "mem", derivation_version="3", clock=lambda: clock_ms[0])
    svc = MemoryService(store)
    assert svc.inspect("alice", at_seq=0)["as_of"]["derivation_version"] == "3"  # no log: now
    svc.set_derivation_version("alice", "5")  # before any event
    clock_ms[0] += 60_000
    for i in range(3):
        store.ingest_signal("alice", signal("neon_palette", "negative", artifact=f"n{i}"))
    last = store.events("alice")[-1].seq
    clock_ms[0] += 60_000
    svc.set_derivation_version("alice", "1")  # after the last event
    # right after the last event: the version then; past the end: now, like no point at all
    assert svc.inspect("alice", at_seq=last)["as_of"]["derivation_version"] == "5"
    past = svc.inspect("alice", at_seq=last + 100)
    assert past["as_of"]["at_seq"] == last
    assert past["as_of"]["derivation_version"] == "1"
    assert {r["derivation_version"] for r in past["preferences"]} == {"1"}
    assert past["preferences"] == svc.inspect("alice")["preferences"]
    # before the first event: the version in force just before it (the switch to 5)
    assert svc.inspect("alice", at_seq=0)["as_of"]["derivation_version"] == "5"
    as_of = svc.prompt("alice", at_seq=last + 1).as_of
    assert as_of is not None and as_of.derivation_version == "1"


def test_a_point_names_the_next_event_over_the_gaps_a_forget_leaves(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "mem", derivation_version="1")
    svc = MemoryService(store)
    for i, pattern in enumerate(["neon", "serif", "neon", "grid", "serif", "teal"]):
        store.ingest_signal("alice", signal(pattern, "negative", artifact=f"a{i}"))
    svc.forget("alice", "color", "serif")
    seqs = [e.seq for e in store.events("alice")]
    assert seqs != list(range(1, len(seqs) + 1))  # gaps where serif was
    steps, at = [], 0
    while True:
        point = svc.inspect("alice", at_seq=at)["as_of"]
        if point["next_seq"] is None:
            assert point["at_seq"] == seqs[-1]
            break
        at = point["next_seq"]
        steps.append(at)
    assert steps == seqs
    assert svc.inspect("alice", at_seq=seqs[1] - 1)["as_of"]["next_seq"] == seqs[1]
    assert svc.inspect("alice", as_of="2020-01-01")["as_of"]["next_seq"] == seqs[0]


# -- as of -----------------------------------------------------------------------------------
USER_IDS = itertools.count()
ACTIONS = st.lists(
    st.tuples(
        st.sampled_from(["neon", "teal", "airy", "serif", "grid"]),
        st.sampled_from(["positive", "negative"]),
        st.sampled_from(["explicit_tag", "thumbs_up", "thumbs_down", "repeated_acceptance"]),
        st.sampled_from([None, "p1"]),
    ),
    min_size=1,
    max_size=25,
)


def feed(store: MemoryStore, user: str, actions: list[tuple[str, str, str, str | None]]) -> None:
    for i, (pattern, polarity, kind, project) in enumerate(actions):
        scope = "project" if project else "global"
        ts = f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}.000Z"
        store.ingest_signal(
            user,
            signal(pattern, polarity, signal_type=kind, scope=scope, project_id=project, ts=ts),
        )


@pytest.mark.parametrize("version", ["1", "3"])
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(actions=ACTIONS, cut=st.integers(min_value=0, max_value=30))
def test_at_seq_equals_a_fresh_store_fed_only_that_prefix(
    backend: Backend, version: str, actions: list[Any], cut: int
) -> None:
    user = f"u{next(USER_IDS)}"  # every example its own users on the shared backend
    store = MemoryStore(backend.root, derivation_version=version)
    svc = MemoryService(store)
    feed(store, user, actions)
    events = store.events(user)
    n = min(cut, len(events))
    at_seq = events[n - 1].seq if n else 0
    past = svc.inspect(user, at_seq=at_seq)
    fresh_user = user + "_prefix"
    fresh = MemoryStore(backend.root, derivation_version=version)
    feed(fresh, fresh_user, actions[:n])
    want = MemoryService(fresh).inspect(fresh_user)
    for key in ("preferences", "retrieval", "event_count", "derivation_version"):
        assert past[key] == want[key], key
    prompt_then = svc.prompt(user, at_seq=at_seq).block
    assert prompt_then == MemoryService(fresh).prompt(fresh_user).block
    store.close()
    fresh.close()


def test_as_of_a_time_and_its_errors(tmp_path: Path) -> None:
    clock_ms = [1_767_225_600_000]
    store = MemoryStore(tmp_path / "mem", derivation_version="1", clock=lambda: clock_ms[0])
    svc = MemoryService(store)
    store.ingest_signal("alice", signal("neon_palette", "negative", artifact="n0"))
    clock_ms[0] += 3_600_000
    store.ingest_signal("alice", signal("neon_palette", "negative", artifact="n1"))
    early = svc.inspect("alice", as_of="2026-01-01T00:30:00Z")
    assert early["event_count"] == 1 and early["as_of"]["at_seq"] == 1
    before_anything = svc.inspect("alice", as_of="2025-01-01")
    assert before_anything["preferences"] == [] and before_anything["event_count"] == 0
    # a time past year 9999 in UTC (an expanded year) is after every event, not before
    far = svc.inspect("alice", as_of="9999-12-31T20:00:00-05:00")
    assert far["event_count"] == 2 and far["as_of"]["at_seq"] == 2
    explained = svc.explain("alice", "color", "neon_palette", at_seq=1)
    assert len(explained.steps) == 1
    for user in ("../x", "a/b"):  # an unsafe id is refused before any log is read
        with pytest.raises(ValidationError) as e:
            svc.inspect(user, at_seq=1)
        assert e.value.field == "user_id"
    for kwargs, field in (
        ({"at_seq": -1}, "at_seq"),
        ({"as_of": "yesterday"}, "as_of"),
        ({"at_seq": 1, "as_of": "2026-01-01"}, "at_seq"),
    ):
        with pytest.raises(ValidationError) as e:
            svc.inspect("alice", **kwargs)
        assert e.value.field == field


def test_forgotten_events_stay_forgotten_in_the_past(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "mem", derivation_version="1")
    svc = MemoryService(store)
    for i in range(3):
        store.ingest_signal("alice", signal("neon_palette", "negative", artifact=f"n{i}"))
    store.ingest_signal("alice", signal("airy_spacing", "positive", "layout"))
    last = store.events("alice")[-1].seq
    then = svc.inspect("alice", at_seq=last)["preferences"]
    assert any(r["pattern"] == "neon_palette" for r in then)
    svc.forget("alice", "color", "neon_palette")
    for seq in range(0, last + 1):
        past = svc.inspect("alice", at_seq=seq)
        assert all(r["pattern"] != "neon_palette" for r in past["preferences"])
        assert "neon_palette" not in svc.prompt("alice", at_seq=seq).block


def test_an_erasure_drops_what_the_history_holds_of_the_user(tmp_path: Path) -> None:
    """Nothing erased stays in memory: a forget or reset drops the user's decoded log and
    prefix states (another user's stay), whichever surface erases."""
    store = MemoryStore(tmp_path / "mem", derivation_version="1")
    svc = MemoryService(store)
    for user in ("alice", "bob"):
        store.ingest_signal(user, signal("neon_palette", "negative"))
        store.ingest_signal(user, signal("airy_spacing", "positive", "layout"))
        svc.inspect(user, at_seq=1)
        svc.explain(user, "color", "neon_palette")

    def held(user: str) -> list[object]:
        h = svc.history
        prefixes = [k for k in (*h._prefixes, *h._explained) if k[0] == user]
        return [*([h._logs[user]] if user in h._logs else []), *prefixes]

    assert held("alice") and held("bob")
    store.forget("alice", "color", "neon_palette")  # the store directly: the listener hears it
    assert held("alice") == [] and held("bob")
    svc.inspect("alice", at_seq=1)
    svc.reset("bob", "all", confirm=True)
    assert held("bob") == [] and held("alice")


@pytest.mark.parametrize("version", ["1", "5"])
def test_explain_asked_again_of_an_unchanged_memory_is_a_lookup(
    tmp_path: Path, version: str
) -> None:
    """The same answer as MemoryStore.explain, computed once per log, version and point;
    a new event, a switch of version or an erasure asks again, and nothing forgotten is
    ever answered from what was kept."""
    from creative_memory.app import history as history_module
    from creative_memory.engine.errors import NotFound

    store = MemoryStore(tmp_path / "mem", derivation_version=version)
    svc = MemoryService(store)
    for i in range(4):
        store.ingest_signal("alice", signal("neon_palette", "negative", artifact=f"n{i}"))
        store.ingest_signal("alice", signal("serif", "positive", "typography", artifact=f"s{i}"))
    calls: list[tuple[str, str]] = []
    from creative_memory.engine.explain import explain as real

    def counted(events: Any, v: str, ptype: str, pattern: str, project: Any) -> Any:
        calls.append((v, pattern))
        return real(events, v, ptype, pattern, project)

    def as_json(x: Any) -> Any:
        return msgspec.to_builtins(x)

    with mock.patch.object(history_module, "explain", counted):
        first = svc.explain("alice", "color", "neon_palette")
        assert as_json(first) == as_json(store.explain("alice", "color", "neon_palette"))
        then = svc.explain("alice", "color", "neon_palette", at_seq=3)  # a point: its own
        assert then.as_of is not None and then.as_of["at_seq"] == 3
        again = svc.explain("alice", "color", "neon_palette")
        assert again.as_of is None and as_json(again) == as_json(first)  # a copy each time
        assert svc.explain("alice", "color", "neon_palette", at_seq=3).as_of == then.as_of
        assert len(calls) == 2
        store.ingest_signal("alice", signal("neon_palette", "positive", artifact="late"))
        after = svc.explain("alice", "color", "neon_palette")
        assert len(calls) == 3 and len(after.steps) > len(first.steps)
        svc.set_derivation_version("alice", "1" if version != "1" else "5")
        svc.explain("alice", "color", "neon_palette")
        assert len(calls) == 4 and calls[-1][0] != version
        svc.forget("alice", "color", "neon_palette")
        assert not [k for k in svc.history._explained if k[0] == "alice"]  # dropped whole
        with pytest.raises(NotFound):
            svc.explain("alice", "color", "neon_palette")
        assert not [k for k in svc.history._explained if "neon_palette" in k]


def test_the_history_keeps_the_logs_of_the_last_users_only(tmp_path: Path) -> None:
    from creative_memory.app.history import LOG_CAPACITY

    store = MemoryStore(tmp_path / "mem", derivation_version="1")
    svc = MemoryService(store)
    users = [f"u{i}" for i in range(LOG_CAPACITY + 2)]
    for user in users:
        store.ingest_signal(user, signal("teal", "positive"))
        assert svc.inspect(user, at_seq=1)["event_count"] == 1
    assert list(svc.history._logs) == users[-LOG_CAPACITY:]
    assert svc.inspect(users[0], at_seq=1)["event_count"] == 1  # read again when asked


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            GOLDEN.write_bytes(gzip.compress(preview_document(Path(d)), mtime=0))


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name.removesuffix(".json.gz"))
def test_a_replayed_conformance_trace_previews_to_1_without_change(
    path: Path, tmp_path: Path
) -> None:
    """Every recorded prototype trace, replayed under version "1": a preview to "1" for
    each of its users reports no change (and writes nothing)."""
    clock = ManualClock()
    store = MemoryStore(tmp_path / "mem", derivation_version="1", clock=clock)
    scenario = load_scenario(path)
    replay(store, clock, scenario)
    svc = MemoryService(store)
    users = sorted(
        {u for op in scenario["ops"] if isinstance(u := op.get("user"), str) and u.isidentifier()}
    )
    for user in users:
        try:
            result = svc.preview(user, "1")
        except ValidationError:  # a trace's deliberately unsafe user id
            continue
        assert result.change.records == [] and result.change.injection == [], user
        assert not result.change.block_changed


def test_a_past_view_read_across_a_forget_keeps_nothing_erased_and_stays_consistent(
    tmp_path: Path,
) -> None:
    """A time-travel read that found its point before a forget and derives after it (the
    daemon serves both at once): it shows the log it found the point in — no event after
    the point — and keeps nothing of that log, which held what the forget erased."""
    store = MemoryStore(tmp_path / "mem", derivation_version="1")
    svc = MemoryService(store)
    for i in range(3):
        store.ingest_signal("alice", signal("secret_pat", "negative", artifact=f"s{i}"))
    for i in range(4):
        store.ingest_signal("alice", signal(f"p{i}", "positive", artifact=f"p{i}"))
    history = svc.history
    point = history.point("alice", 5, None)  # the read finds its point ...
    assert point is not None and point.events == 5
    svc.forget("alice", "color", "secret_pat")  # ... an erasure lands ...
    store.ingest_signal("alice", signal("late", "positive", artifact="late"))
    state = history.state_at("alice", point)  # ... and the read goes on
    seen = {r.pattern for r in state.all_records()}
    assert seen == {"secret_pat", "p0", "p1"}  # the point's own prefix, nothing after it
    assert [getattr(e, "pattern", None) for e in history.events_until("alice", point)] == [
        "secret_pat", "secret_pat", "secret_pat", "p0", "p1"
    ]  # fmt: skip
    kept = [r for s in history._prefixes.values() for r in s.all_records()]
    assert all(r.pattern != "secret_pat" for r in kept)
    assert all(
        getattr(e, "pattern", None) != "secret_pat"
        for log in history._logs.values()
        for e in log.events
    )
    # a point found now is in the rewritten log, and its state is kept
    now = history.point("alice", 5, None)
    assert now is not None and now.events == 2  # seq 4 and 5 remain at or before 5
    assert {r.pattern for r in history.state_at("alice", now).all_records()} == {"p0", "p1"}
    assert len(history._prefixes) == 1
