"""Capture policy (docs/capture.md, "Capture rules"), with an explicit clock — no sleeping."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from creative_memory import MemoryStore, adapter
from creative_memory.capture.layer import CaptureConfig, CaptureLayer, describe
from creative_memory.engine.errors import StorageError, ValidationError
from creative_memory.engine.events import RefinementEvent, SignalEvent
from creative_memory.engine.models import Preference
from creative_memory.engine.timeutil import parse_ts

T0 = parse_ts("2025-03-01T10:00:00Z")
U = "alice"


def at(seconds: float) -> int:
    return T0 + round(seconds * 1000)


def ev(kind: str, artifact: str = "a1", **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "event": kind,
        "user_id": U,
        "artifact_id": artifact,
        "session_id": "s1",
        "project_id": None,
        "timestamp": "2025-03-01T10:00:00Z",
        "artifact_meta": {"signals": [{"preference_type": "color", "pattern": f"p_{artifact}"}]},
    }
    out.update(kw)
    return out


@pytest.fixture
def mem(tmp_path: Path) -> MemoryStore:
    return MemoryStore(tmp_path / "mem", derivation_version="1", clock=lambda: T0)


def signals(store: MemoryStore) -> list[tuple[str, str]]:
    if not store._storage.user_exists(U):
        return []
    return [(e.signal_type, e.pattern) for e in store.events(U) if isinstance(e, SignalEvent)]


def refinements(store: MemoryStore) -> list[RefinementEvent]:
    return [e for e in store.events(U) if isinstance(e, RefinementEvent)]


# -- accept --------------------------------------------------------------------------------
def test_accept_only_on_explicit_use_this(mem: MemoryStore) -> None:
    cap = CaptureLayer(mem)
    r = cap.submit_many(
        [
            ev("generation_accepted", "a1"),
            ev("generation_accepted", "a2", trigger="explicit"),
            ev("generation_accepted", "a3", trigger="tab_promotion"),
            ev("generation_accepted", "a4", trigger="idle_preview"),
        ],
        at(0),
    )
    assert (r.accepted, r.rejected) == (2, 2)
    assert signals(mem) == [("repeated_acceptance", "p_a1"), ("repeated_acceptance", "p_a2")]
    reasons = [x.reason for x in r.results if x.status == "rejected"]
    assert all(x is not None and "not captured from trigger" in x for x in reasons)
    assert [x.index for x in r.results if x.status == "rejected"] == [2, 3]


# -- edit-save coalescing --------------------------------------------------------------------
def test_edit_saves_coalesce_within_the_window_and_flush_on_expiry(mem: MemoryStore) -> None:
    cap = CaptureLayer(mem)
    r1 = cap.submit(ev("artifact_edited_and_saved", diff={"n": 1}), at(0))
    r2 = cap.submit(ev("artifact_edited_and_saved", diff={"n": 2}, trigger="bridge_save"), at(10))
    r3 = cap.submit(
        ev("artifact_edited_and_saved", diff={"n": 3}, trigger="finalize_save"), at(29.9)
    )
    assert (r1.accepted, r2.coalesced, r3.coalesced) == (1, 1, 1)
    assert signals(mem) == []  # nothing delivered yet
    assert cap.tick(at(29.999)).flushed == 0
    flushed = cap.tick(at(30))
    assert flushed.flushed == 1
    assert signals(mem) == [("manual_refinement", "p_a1")]  # one signal for three saves
    (ref,) = refinements(mem)
    assert ref.diff == {"coalesced_saves": 3, "diffs": [{"n": 1}, {"n": 2}, {"n": 3}]}
    assert cap.pending_edits() == 0


def test_coalescing_is_per_artifact_and_session_and_window_is_configurable(
    mem: MemoryStore,
) -> None:
    cap = CaptureLayer(mem, CaptureConfig(coalesce_window_s=5))
    r = cap.submit_many(
        [
            ev("artifact_edited_and_saved", "a1"),
            ev("artifact_edited_and_saved", "a1", session_id="s2"),
            ev("artifact_edited_and_saved", "a2"),
            ev("artifact_edited_and_saved", "a1"),
        ],
        at(0),
    )
    assert (r.accepted, r.coalesced) == (3, 1)
    assert cap.pending_edits() == 3
    # a save after the window has expired starts a new window; the old one is delivered first
    r = cap.submit(ev("artifact_edited_and_saved", "a1"), at(5))
    assert (r.flushed, r.accepted) == (3, 1)
    assert len(signals(mem)) == 3
    assert cap.close().flushed == 1
    assert len(signals(mem)) == 4


def test_an_edit_with_invalid_payload_is_rejected_up_front(mem: MemoryStore) -> None:
    cap = CaptureLayer(mem)
    r = cap.submit_many(
        [
            ev("artifact_edited_and_saved", artifact_meta=None),
            ev("artifact_edited_and_saved", timestamp="yesterday"),
            ev("artifact_edited_and_saved", project_id="__proto__"),
            ev("artifact_edited_and_saved", trigger="autosave"),
        ],
        at(0),
    )
    assert r.rejected == 4
    assert cap.pending_edits() == 0


def test_close_flushes_pending_edits_and_then_refuses_more(mem: MemoryStore) -> None:
    cap = CaptureLayer(mem)
    with cap:
        cap.submit(ev("artifact_edited_and_saved", diff={"x": 1}), at(0))
        assert signals(mem) == []
    assert signals(mem) == [("manual_refinement", "p_a1")]  # flushed on shutdown
    with pytest.raises(RuntimeError, match="closed"):
        cap.submit(ev("generation_accepted"), at(1))


def test_other_feedback_on_an_artifact_flushes_its_pending_edit_first(mem: MemoryStore) -> None:
    cap = CaptureLayer(mem)
    cap.submit(ev("artifact_edited_and_saved"), at(0))
    r = cap.submit(ev("revert_after_edit", trigger="history_panel"), at(3))
    assert (r.flushed, r.accepted) == (1, 1)
    assert signals(mem) == [("manual_refinement", "p_a1"), ("revert_after_edit", "p_a1")]


def test_a_storage_failure_on_flush_keeps_the_event_pending(mem: MemoryStore) -> None:
    calls: list[Mapping[str, Any]] = []
    checked: list[Mapping[str, Any]] = []
    fail = [True]

    def flaky(
        store: adapter.SignalSink, event: Mapping[str, Any], *, records: bool = True
    ) -> list[Preference | None]:
        checked.append(event)
        if len(checked) == 1:  # the check the save passes before it opens its window
            return []
        if fail[0]:
            fail[0] = False
            raise StorageError("disk full")
        calls.append(event)
        return []

    handlers: dict[str, adapter.Handler] = dict(adapter.HANDLERS, artifact_edited_and_saved=flaky)
    cap = CaptureLayer(mem, handlers=handlers)
    cap.submit(ev("artifact_edited_and_saved"), at(0))
    with pytest.raises(StorageError):
        cap.tick(at(31))
    assert cap.pending_edits() == 1
    assert cap.tick(at(32)).flushed == 1
    assert len(calls) == 1


# -- thumbs --------------------------------------------------------------------------------
def test_thumbs_double_click_counts_once(mem: MemoryStore) -> None:
    cap = CaptureLayer(mem)
    r = cap.submit(ev("thumbs_rated", rating="up"), at(0))
    r.extend(cap.submit(ev("thumbs_rated", rating="up"), at(0.3)))
    r.extend(cap.submit(ev("thumbs_rated", rating="up"), at(1.5)))  # burst: still one
    assert (r.accepted, r.coalesced) == (1, 2)
    assert signals(mem) == [("thumbs_up", "p_a1")]
    # a later click, a changed rating, and another artifact are separate ratings
    r = cap.submit(ev("thumbs_rated", rating="up"), at(10))
    r.extend(cap.submit(ev("thumbs_rated", rating="down"), at(10.2)))
    r.extend(cap.submit(ev("thumbs_rated", "a2", rating="down"), at(10.3)))
    assert r.accepted == 3
    assert [s for s, _ in signals(mem)] == ["thumbs_up", "thumbs_up", "thumbs_down", "thumbs_down"]


def test_thumbs_bad_rating_is_rejected_with_the_adapter_message(mem: MemoryStore) -> None:
    r = CaptureLayer(mem).submit(ev("thumbs_rated", rating="UP"), at(0))
    assert r.rejected == 1
    assert r.results[0].reason is not None and 'exactly "up" or "down"' in r.results[0].reason


def test_a_rejected_click_debounces_nothing(mem: MemoryStore) -> None:
    """A click that will not be stored neither holds the next one (its correction, sent at
    once) nor is merged into the previous one: the debounce judges a click first."""
    cap = CaptureLayer(mem)
    bad_project = ev("thumbs_rated", rating="up", project_id="my project")
    empty_pattern = ev(
        "thumbs_rated",
        rating="up",
        artifact_meta={"signals": [{"preference_type": "c", "pattern": ""}]},
    )
    for t, bad in ((0, bad_project), (10, empty_pattern)):
        r = cap.submit_many([bad, ev("thumbs_rated", rating="up", project_id="my-project")], at(t))
        assert [x.status for x in r.results] == ["rejected", "accepted"]
    assert signals(mem) == [("thumbs_up", "p_a1")] * 2
    r = cap.submit(ev("thumbs_rated", "a2", rating="down"), at(20))
    r.extend(
        cap.submit(ev("thumbs_rated", "a2", rating="down", artifact_meta={"signals": "x"}), at(5.5))
    )
    assert [x.status for x in r.results] == ["accepted", "rejected"]
    assert r.results[1].reason is not None and "artifact_meta.signals" in r.results[1].reason


def test_a_click_a_storage_error_keeps_out_debounces_nothing(mem: MemoryStore) -> None:
    fail = [True]

    def flaky(
        store: adapter.SignalSink, event: Mapping[str, Any], *, records: bool = True
    ) -> list[Preference | None]:
        if store is mem and fail[0]:  # the delivery, not the debounce's check
            fail[0] = False
            raise StorageError("disk full")
        return list(adapter.on_thumbs_rated(store, event, records=records))

    cap = CaptureLayer(mem, handlers=dict(adapter.HANDLERS, thumbs_rated=flaky))
    with pytest.raises(StorageError):
        cap.submit(ev("thumbs_rated", rating="up"), at(0))
    r = cap.submit(ev("thumbs_rated", rating="up"), at(0.5))  # the retry is a click
    assert r.accepted == 1
    assert signals(mem) == [("thumbs_up", "p_a1")]


# -- tags and reverts ----------------------------------------------------------------------
def test_tags_must_be_explicit_and_known(mem: MemoryStore) -> None:
    cap = CaptureLayer(mem)
    r = cap.submit_many(
        [
            ev("explicit_tag_applied", tag_text="too noisy"),
            ev("explicit_tag_applied", tag_text="love this", trigger="chat_nlp"),
            ev("explicit_tag_applied", tag_text="nice vibes"),
        ],
        at(0),
    )
    assert (r.accepted, r.rejected) == (1, 2)
    assert signals(mem) == [("explicit_tag", "p_a1")]
    assert "unrecognized tag" in (r.results[2].reason or "")


def test_revert_only_from_the_history_panel(mem: MemoryStore) -> None:
    cap = CaptureLayer(mem)
    r = cap.submit_many(
        [
            ev("revert_after_edit", trigger="history_panel"),
            ev("revert_after_edit", trigger="undo"),
            ev("revert_after_edit", trigger="vcs_revert"),
        ],
        at(0),
    )
    assert (r.accepted, r.rejected) == (1, 2)
    assert signals(mem) == [("revert_after_edit", "p_a1")]


# -- abandonment ---------------------------------------------------------------------------
def test_abandonment_never_on_inactivity_but_on_explicit_discard(mem: MemoryStore) -> None:
    cap = CaptureLayer(mem)
    r = cap.submit_many(
        [
            ev("generation_abandoned", "a1", trigger="inactivity_timeout"),
            ev("generation_abandoned", "a2", trigger="explicit_discard"),
            ev("generation_abandoned", "a3"),
        ],
        at(0),
    )
    assert (r.accepted, r.rejected) == (2, 1)
    assert "inactivity" in (r.results[0].reason or "")
    assert signals(mem) == [("abandoned_generation", "p_a2"), ("abandoned_generation", "p_a3")]


def test_new_generation_abandons_the_unaccepted_active_tab(mem: MemoryStore) -> None:
    cap = CaptureLayer(mem)  # default: active_tab
    cap.submit(ev("generation_started", "a1"), at(0))
    r = cap.submit(
        ev("generation_started", "a2", active=False, timestamp="2025-03-01T10:05:00Z"), at(300)
    )
    assert r.inferred == 1
    assert signals(mem) == [("abandoned_generation", "p_a1")]
    (abandon,) = [e for e in mem.events(U) if isinstance(e, SignalEvent)]
    assert abandon.at == "2025-03-01T10:05:00.000Z"  # when the new generation started
    # a2 started in a background tab: the active tab (a1) is settled now, so starting a3
    # abandons nothing, and a2 stays pending
    assert cap.submit(ev("generation_started", "a3"), at(301)).inferred == 0
    assert cap.pending_generations(U, "s1") == ["a2", "a3"]


@pytest.mark.parametrize(("mode", "abandoned"), [("active_tab", []), ("any_pending", ["p_a1"])])
def test_abandon_mode_active_tab_vs_any_pending(
    mem: MemoryStore, mode: str, abandoned: list[str]
) -> None:
    cap = CaptureLayer(mem, CaptureConfig(abandon_mode=mode))  # type: ignore[arg-type]
    cap.submit(ev("generation_started", "a1"), at(0))
    # the user moved to a tab that is not a pending generation
    cap.submit(
        {"event": "tab_activated", "user_id": U, "session_id": "s1", "artifact_id": "old"}, at(1)
    )
    cap.submit(ev("generation_started", "b1", session_id="other"), at(2))  # other session
    cap.submit(ev("generation_started", "a2"), at(3))
    assert [p for _, p in signals(mem)] == abandoned


@pytest.mark.parametrize(
    "settle",
    [
        ev("generation_accepted", "a1"),
        ev("artifact_edited_and_saved", "a1"),
        ev("generation_abandoned", "a1"),
        {
            **ev("pairwise_comparison", "x"),
            "chose": {"artifact_id": "zz", "artifact_meta": {"signals": []}},
            "over": {"artifact_id": "a1", "artifact_meta": {"signals": []}},
        },
    ],
    ids=["accepted", "edited", "discarded", "compared"],
)
def test_settled_generations_are_not_abandoned(mem: MemoryStore, settle: dict[str, Any]) -> None:
    cap = CaptureLayer(mem)
    cap.submit(ev("generation_started", "a1"), at(0))
    cap.submit(settle, at(1))
    assert cap.pending_generations(U, "s1") == []
    r = cap.submit(ev("generation_started", "a2"), at(40))
    assert r.inferred == 0
    kinds = [k for k, _ in signals(mem)]
    assert kinds.count("abandoned_generation") == (
        1 if settle["event"] == "generation_abandoned" else 0
    )


def test_thumbs_do_not_settle_a_generation(mem: MemoryStore) -> None:
    cap = CaptureLayer(mem)
    cap.submit(ev("generation_started", "a1"), at(0))
    cap.submit(ev("thumbs_rated", "a1", rating="down"), at(1))
    assert cap.submit(ev("generation_started", "a2"), at(2)).inferred == 1


def test_tab_activation_moves_the_abandonment_target(mem: MemoryStore) -> None:
    cap = CaptureLayer(mem)
    cap.submit(ev("generation_started", "a1", active=False), at(0))
    cap.submit(ev("generation_started", "a2", active=False), at(1))  # no active tab: nothing
    assert signals(mem) == []
    cap.submit(
        {"event": "tab_activated", "user_id": U, "session_id": "s1", "artifact_id": "a1"}, at(2)
    )
    cap.submit(ev("generation_started", "a3"), at(3))
    assert signals(mem) == [("abandoned_generation", "p_a1")]
    assert cap.pending_generations(U, "s1") == ["a2", "a3"]


# -- reports -------------------------------------------------------------------------------
def test_report_counts_and_unknown_events(mem: MemoryStore) -> None:
    cap = CaptureLayer(mem)
    r = cap.submit_many(
        [
            ev("generation_accepted"),
            {"event": "telepathy", "user_id": U},
            "not an object",  # type: ignore[list-item]
            ev("thumbs_rated", rating="down"),
            ev("thumbs_rated", rating="down"),
        ],
        at(0),
    )
    d = r.to_dict()
    assert (d["accepted"], d["coalesced"], d["rejected"]) == (2, 1, 2)
    assert "unknown event 'telepathy'" in (r.results[1].reason or "")
    assert describe(r) == "accepted 2, coalesced 1, rejected 2"


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        CaptureConfig(coalesce_window_s=-1)
    with pytest.raises(ValueError):
        CaptureConfig(abandon_mode="whatever")  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "30", True, None, -0.5])
@pytest.mark.parametrize("name", ["coalesce_window_s", "thumbs_debounce_s"])
def test_config_windows_must_be_finite_non_negative_numbers(name: str, value: object) -> None:
    with pytest.raises(ValidationError) as err:
        CaptureConfig(**{name: value})  # type: ignore[arg-type]
    assert err.value.field == name and name in str(err.value)


def test_config_trigger_sets_are_sets_of_strings() -> None:
    with pytest.raises(ValidationError) as err:
        CaptureConfig(accept_triggers="explicit")  # type: ignore[arg-type]
    assert err.value.field == "accept_triggers"
    with pytest.raises(ValidationError) as err:
        CaptureConfig(edit_triggers=frozenset({"manual_edit", 5}))  # type: ignore[arg-type]
    assert err.value.field == "edit_triggers"
    cfg = CaptureConfig(tag_triggers=["explicit", "menu"], coalesce_window_s=0)  # type: ignore[arg-type]
    assert cfg.tag_triggers == frozenset({"explicit", "menu"})


def test_a_trigger_is_matched_whole_not_as_a_substring(mem: MemoryStore) -> None:
    cap = CaptureLayer(mem, CaptureConfig(accept_triggers=frozenset({"explicit"})))
    r = cap.submit_many([ev("generation_accepted", trigger=t) for t in ("e", "pl", "")], at(0))
    assert r.rejected == 3
    assert signals(mem) == []


def test_non_string_trigger_is_rejected_not_crashing(tmp_path: Path) -> None:
    from creative_memory import CaptureLayer, MemoryStore

    store = MemoryStore(tmp_path / "m", derivation_version="1")
    layer = CaptureLayer(store)
    ev = {
        "event": "generation_accepted",
        "user_id": "u",
        "artifact_id": "a",
        "session_id": "s",
        "project_id": None,
        "timestamp": "2026-01-01T00:00:00Z",
        "trigger": ["explicit"],
        "artifact_meta": {"signals": [{"preference_type": "layout", "pattern": "airy"}]},
    }
    report = layer.submit(ev, "2026-01-01T00:00:00Z")
    assert [r.status for r in report.results] == ["rejected"]
    assert "trigger" in (report.results[0].reason or "")
    assert store.events("u") == []


def test_settled_sessions_are_pruned(tmp_path: Path) -> None:
    from creative_memory import CaptureLayer, MemoryStore

    store = MemoryStore(tmp_path / "m", derivation_version="1")
    layer = CaptureLayer(store)
    meta = {"signals": [{"preference_type": "layout", "pattern": "airy"}]}
    base = {"user_id": "u", "project_id": None, "timestamp": "2026-01-01T00:00:00Z"}
    for i in range(50):
        sid = f"s{i}"
        layer.submit(
            {
                **base,
                "event": "generation_started",
                "artifact_id": f"a{i}",
                "session_id": sid,
                "artifact_meta": meta,
            },
            "2026-01-01T00:00:00Z",
        )
        layer.submit(
            {
                **base,
                "event": "generation_accepted",
                "artifact_id": f"a{i}",
                "session_id": sid,
                "artifact_meta": meta,
            },
            "2026-01-01T00:00:00Z",
        )
    assert layer._sessions == {}


# -- out-of-order capture times ------------------------------------------------------------
def test_a_click_earlier_than_the_previous_one_is_not_debounced(mem: MemoryStore) -> None:
    """A replayed file out of order (or a clock set back): a click 5 minutes before the
    previous one is not "within 2 s" of it; the later click stays the one a burst repeats."""
    cap = CaptureLayer(mem)
    r = cap.submit(ev("thumbs_rated", rating="down", session_id="s2"), at(300))
    r.extend(cap.submit(ev("thumbs_rated", rating="down"), at(0)))
    r.extend(cap.submit(ev("thumbs_rated", rating="down"), at(299.5)))  # 0.5 s before the first
    r.extend(cap.submit(ev("thumbs_rated", rating="down"), at(301)))  # 1 s after it: a repeat
    assert [x.status for x in r.results] == ["accepted", "accepted", "accepted", "coalesced"]
    assert signals(mem) == [("thumbs_down", "p_a1")] * 3


def test_a_save_earlier_than_the_window_s_latest_save_does_not_join_it(
    mem: MemoryStore,
) -> None:
    cap = CaptureLayer(mem)
    late = ev("artifact_edited_and_saved", diff={"n": 2}, timestamp="2025-03-01T10:05:00Z")
    r = cap.submit(late, at(300))
    r.extend(cap.submit(ev("artifact_edited_and_saved", diff={"n": 1}), at(0)))
    assert [x.status for x in r.results] == ["accepted", "flushed", "accepted"]
    # inside a window too: a save before its latest save starts a window of its own
    r = cap.submit(ev("artifact_edited_and_saved", "a2", diff={"n": 3}), at(10))
    r.extend(cap.submit(ev("artifact_edited_and_saved", "a2", diff={"n": 4}), at(20)))
    r.extend(cap.submit(ev("artifact_edited_and_saved", "a2", diff={"n": 5}), at(15)))
    assert [x.status for x in r.results] == ["accepted", "coalesced", "flushed", "accepted"]
    cap.close()
    assert [x.diff for x in refinements(mem)] == [
        {"n": 2},
        {"coalesced_saves": 2, "diffs": [{"n": 3}, {"n": 4}]},
        {"n": 1},
        {"n": 5},
    ]


def test_a_replayed_file_out_of_order_debounces_and_merges_nothing(mem: MemoryStore) -> None:
    """``creative-memory ingest`` replays a file with each event's own time as its capture
    time (MemoryService.ingest): a thumbs click and a save dated 5 minutes before the line
    above them are events of their own."""
    from creative_memory.app.results import IngestInput
    from creative_memory.app.service import MemoryService

    late, early = "2025-03-01T10:05:00Z", "2025-03-01T10:00:00Z"
    lines = [
        ev("thumbs_rated", rating="down", session_id="s2", timestamp=late),
        ev("thumbs_rated", rating="down", timestamp=early),
        ev("artifact_edited_and_saved", "a2", diff={"n": 1}, timestamp=late),
        ev("artifact_edited_and_saved", "a2", diff={"n": 2}, timestamp=early),
    ]
    items = [IngestInput(where=f"line {i + 1}", value=v) for i, v in enumerate(lines)]
    result = MemoryService(mem).ingest(U, items, CaptureLayer(mem), close=True)
    assert (result.accepted, result.coalesced, result.flushed) == (4, 0, 2)
    assert [x.diff for x in refinements(mem)] == [{"n": 1}, {"n": 2}]


# -- adapter error names -------------------------------------------------------------------
def _compared(**kw: Any) -> dict[str, Any]:
    def side(art: str, pattern: str) -> dict[str, Any]:
        meta = {"signals": [{"preference_type": "t", "pattern": "fine"}]}
        meta["signals"].append({"preference_type": "t", "pattern": pattern})
        return {"artifact_id": art, "artifact_meta": meta}

    out = ev("pairwise_comparison", chose=side("a", "x"), over=side("b", "y"))
    out.update(kw)
    return out


@pytest.mark.parametrize(
    ("handler", "event", "field"),
    [
        (
            adapter.on_thumbs_rated,
            ev(
                "thumbs_rated",
                rating="up",
                artifact_meta={
                    "signals": [
                        {"preference_type": "c", "pattern": "ok"},
                        {"preference_type": "c", "pattern": "bad\nline"},
                    ]
                },
            ),
            "artifact_meta.signals[1].pattern",
        ),
        (
            adapter.on_generation_accepted,
            ev(
                "generation_accepted",
                artifact_meta={"signals": [{"preference_type": "c\u202e", "pattern": "ok"}]},
            ),
            "artifact_meta.signals[0].preference_type",
        ),
        (
            adapter.on_pairwise_comparison,
            _compared(
                over={
                    "artifact_id": "b",
                    "artifact_meta": {"signals": [{"preference_type": "t", "pattern": "y\u202e"}]},
                }
            ),
            "over.artifact_meta.signals[0].pattern",
        ),
        (
            adapter.on_pairwise_comparison,
            _compared(chose={"artifact_id": "a\nb", "artifact_meta": {"signals": []}}),
            "chose.artifact_id",
        ),
        (adapter.on_pairwise_comparison, _compared(dimensions=["ok", "a\nb"]), "dimensions[1]"),
        (adapter.on_pairwise_comparison, _compared(session_id="s\n1"), "session_id"),
    ],
    ids=["signal-index", "preference-type", "comparison-side", "side-id", "dimension", "session"],
)
def test_adapter_errors_name_the_wire_field_and_write_nothing(
    mem: MemoryStore, handler: adapter.Handler, event: dict[str, Any], field: str
) -> None:
    """The adapter names a field as the wire does (the capture layer's check, the same
    names), a list entry by its index (docs/engine.md, "Adapter")."""
    with pytest.raises(ValidationError) as err:
        handler(mem, event)
    assert err.value.field == field
    assert field in str(err.value)
    assert signals(mem) == []
    if event["event"] != "pairwise_comparison":  # the capture layer's wire check agrees
        r = CaptureLayer(mem).submit(event, at(0))
        assert [x.status for x in r.results] == ["rejected"]
        assert field in (r.results[0].reason or "")
