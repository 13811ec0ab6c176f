"""Malformed input (engine.md §0.1, §0.3, §0.5, §2.3, §4.1, §9, §10; api.md "Errors").

Every rejection must be a ``ValidationError`` (a ``ValueError``) naming the field in its
message and in ``.field``, and must leave the storage root byte-for-byte unchanged.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from creative_memory import MemoryStore, ValidationError, adapter
from tests.conftest import tag

U = "alice"
TS = "2024-01-01T00:00:00.000Z"


def tree(root: Path) -> dict[str, bytes | None]:
    """Every file (bytes) and directory (None) under ``root``."""
    if not root.exists():
        return {}
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


@pytest.fixture
def seeded(store: MemoryStore, tmp_path: Path) -> MemoryStore:
    """A user with events, a refinement, a project bucket and settings; caches warmed."""
    store.ingest_signal(U, tag("p", "layout", ts=TS))
    store.ingest_signal(U, tag("p", "layout", ts=TS))
    store.ingest_signal(U, tag("q", "color", "negative", ts=TS, scope="project", project_id="pa"))
    store.log_refinement(U, artifact_id="a", project_id="pa", diff={"x": 1})
    store.set_memory_enabled(U, True)
    store.retrieve_for_injection(U)
    store.retrieve_for_injection(U, {"project_id": "pa"})
    store.list_preferences(U)
    assert (Path(store.root) / U / "events.jsonl").is_file()
    return store


def rejects(
    store: MemoryStore,
    field: str,
    fn: Callable[[], Any],
    message: str | None = None,
) -> ValidationError:
    """``fn()`` raises ValidationError naming ``field``; nothing under the root changes."""
    root = Path(store.root).parent  # the whole tmp dir: also catches writes beside the root
    before = tree(root)
    with pytest.raises(ValidationError) as ei:
        fn()
    err = ei.value
    assert isinstance(err, ValueError)
    assert err.field == field, (err.field, str(err))
    assert field.rsplit(".", 1)[-1] in str(err), str(err)  # the message names the field
    if message is not None:
        assert message in str(err), str(err)
    assert tree(root) == before
    return err


def signal(**changes: Any) -> dict[str, Any]:
    s = tag("p", "layout", "positive", ts=TS)
    for k, v in changes.items():
        if v is DELETE:
            del s[k]
        else:
            s[k] = v
    return s


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


DELETE: Any = _Missing()

# ---------------------------------------------------------------------------------------
# ingest_signal: §4.1 checks (and §0.3 timestamps)

BAD_SIGNALS: list[tuple[str, dict[str, Any]]] = [
    ("polarity", {"polarity": "Positive"}),
    ("polarity", {"polarity": ""}),
    ("polarity", {"polarity": None}),
    ("polarity", {"polarity": 1}),
    ("polarity", {"polarity": "neutral"}),
    ("polarity", {"polarity": DELETE}),
    ("pattern", {"pattern": ""}),
    ("pattern", {"pattern": None}),
    ("pattern", {"pattern": 5}),
    ("pattern", {"pattern": ["p"]}),
    ("pattern", {"pattern": DELETE}),
    ("preference_type", {"preference_type": ""}),
    ("preference_type", {"preference_type": None}),
    ("preference_type", {"preference_type": 3}),
    ("preference_type", {"preference_type": DELETE}),
    ("signal_type", {"signal_type": "unknown"}),
    ("signal_type", {"signal_type": "Explicit_tag"}),
    ("signal_type", {"signal_type": ""}),
    ("signal_type", {"signal_type": None}),
    ("signal_type", {"signal_type": "toString"}),
    ("signal_type", {"signal_type": "pairwise_comparison"}),
    ("signal_type", {"signal_type": DELETE}),
    ("scope", {"scope": "Global"}),
    ("scope", {"scope": "all"}),
    ("scope", {"scope": ""}),
    ("scope", {"scope": None}),
    ("scope", {"scope": DELETE}),
    ("scope", {"scope": "project"}),
    ("scope", {"scope": "project", "project_id": ""}),
    ("scope", {"scope": "project", "project_id": None}),
    ("project_id", {"scope": "project", "project_id": "a/b"}),
    ("project_id", {"scope": "project", "project_id": "../x"}),
    ("project_id", {"scope": "project", "project_id": "__proto__"}),
    ("project_id", {"scope": "project", "project_id": "constructor"}),
    ("project_id", {"scope": "project", "project_id": "prototype"}),
    ("project_id", {"scope": "project", "project_id": "a b"}),
    ("project_id", {"scope": "project", "project_id": "x\n"}),
    ("project_id", {"scope": "project", "project_id": "é"}),
    ("project_id", {"scope": "project", "project_id": "."}),
    ("project_id", {"scope": "project", "project_id": 5}),
    ("timestamp", {"timestamp": "not-a-date"}),
    ("timestamp", {"timestamp": "2024-02-30"}),
    ("timestamp", {"timestamp": "2023-02-29"}),
    ("timestamp", {"timestamp": "2024-13-01"}),
    ("timestamp", {"timestamp": "2024-01-01T25:00Z"}),
    ("timestamp", {"timestamp": "2024-01-01T00:60Z"}),
    ("timestamp", {"timestamp": "2024-01-01T00:00:60Z"}),
    ("timestamp", {"timestamp": "2024-01-01T24:00:01Z"}),
    ("timestamp", {"timestamp": "2024-01-01T00:00:00+24:00"}),
    ("timestamp", {"timestamp": "2024-01-01T00:00:00+0100"}),
    ("timestamp", {"timestamp": "2024-01-01t00:00:00z"}),
    ("timestamp", {"timestamp": "2024-01-01 00:00:00"}),
    ("timestamp", {"timestamp": "2024/01/01"}),
    ("timestamp", {"timestamp": "2024-1-1"}),
    ("timestamp", {"timestamp": "1"}),
    ("timestamp", {"timestamp": " 2024-01-01"}),
    ("timestamp", {"timestamp": "2024-01-01T00:00:00.Z"}),
    ("timestamp", {"timestamp": "2024-01-01T00:00:00Z\n"}),
    ("timestamp", {"timestamp": 20240101}),
    ("timestamp", {"timestamp": 1.5}),
    ("timestamp", {"timestamp": True}),
    ("timestamp", {"timestamp": ["2024-01-01"]}),
    ("timestamp", {"timestamp": {}}),
]


@pytest.mark.parametrize(("field", "changes"), BAD_SIGNALS, ids=repr)
def test_bad_signal(seeded: MemoryStore, field: str, changes: dict[str, Any]) -> None:
    rejects(seeded, field, lambda: seeded.ingest_signal(U, signal(**changes)))


@pytest.mark.parametrize(("field", "changes"), BAD_SIGNALS[::4], ids=repr)
def test_bad_signal_new_user_creates_nothing(
    store: MemoryStore, field: str, changes: dict[str, Any]
) -> None:
    rejects(store, field, lambda: store.ingest_signal("newbie", signal(**changes)))
    assert not (Path(store.root) / "newbie").exists()


def test_signal_not_a_mapping(seeded: MemoryStore) -> None:
    rejects(seeded, "signal", lambda: seeded.ingest_signal(U, None))  # type: ignore[arg-type]
    rejects(seeded, "signal", lambda: seeded.ingest_signal(U, ["p"]))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "changes"),
    [
        # §4.1 order: user_id, polarity, pattern, preference_type, signal_type, scope
        # (project_id), then the timestamp (§0.3: before anything is written)
        ("polarity", {"polarity": "x", "pattern": "", "preference_type": "", "timestamp": "x"}),
        ("pattern", {"pattern": "", "preference_type": "", "signal_type": "x"}),
        ("preference_type", {"preference_type": "", "signal_type": "x", "scope": "x"}),
        ("signal_type", {"signal_type": "x", "scope": "x", "timestamp": "x"}),
        ("scope", {"scope": "x", "timestamp": "x"}),
        ("project_id", {"scope": "project", "project_id": "a/b", "timestamp": "x"}),
    ],
)
def test_check_order(seeded: MemoryStore, field: str, changes: dict[str, Any]) -> None:
    rejects(seeded, field, lambda: seeded.ingest_signal(U, signal(**changes)))


def test_a_refinement_key_it_does_not_take_is_refused(seeded: MemoryStore) -> None:
    """``refinement={"diff_": …}`` logged an empty diff, silently."""
    for refinement in ({"zzz": 1}, {"diff_": {"hero": "tighter"}}, {"diff": {}, 3: 1}):
        rejects(seeded, "refinement", lambda r=refinement: seeded.ingest_signals(  # type: ignore[misc]
            U, [signal()], refinement=r))  # fmt: skip
    seeded.ingest_signals(U, [signal(pattern="ok")], refinement={"artifact_id": "a", "diff": {}})


def test_user_id_checked_before_signal(seeded: MemoryStore) -> None:
    rejects(seeded, "user_id", lambda: seeded.ingest_signal("a/b", signal(polarity="x")))


def test_valid_edge_values_accepted(store: MemoryStore) -> None:
    for i, ts in enumerate(["2024-02-29", "2024-01-01T24:00:00Z", "2024", "2024-01-01T00:00"]):
        assert store.ingest_signal(U, signal(pattern=f"p{i}", timestamp=ts)) is not None
    r = store.ingest_signal(U, signal(scope="project", project_id="Ab-_9"))
    assert r is not None and r.scope == "project:Ab-_9"
    r = store.ingest_signal(U, signal(scope="project", project_id="7"))
    assert r is not None and r.scope == "project:7"


def test_multi_signal_later_entry_bad_writes_nothing(seeded: MemoryStore) -> None:
    good = signal(pattern="new1")
    rejects(
        seeded,
        "timestamp",
        lambda: seeded.ingest_signals(U, [good, signal(pattern="new2"), signal(timestamp="no")]),
    )
    assert "new1" not in {r.pattern for r in seeded.list_preferences(U)}


# ---------------------------------------------------------------------------------------
# §2.3 identifiers on every entry point

BAD_USERS: list[Any] = ["a/b", "", "x\n", "../x", "..", ".", "a b", "é", "a\\b", None, 5]


def _calls(store: MemoryStore, user: Any) -> list[Callable[[], Any]]:
    return [
        lambda: store.ingest_signal(user, signal()),
        lambda: store.ingest_signals(user, [signal()]),
        lambda: store.retrieve_for_injection(user),
        lambda: store.run_decay(user, TS),
        lambda: store.list_preferences(user),
        lambda: store.set_memory_enabled(user, False),
        lambda: store.reset_memory(user),
        lambda: store.log_refinement(user, diff={"a": 1}),
    ]


@pytest.mark.parametrize("user", BAD_USERS, ids=repr)
def test_unsafe_user_id_everywhere(seeded: MemoryStore, user: Any) -> None:
    for call in _calls(seeded, user):
        rejects(seeded, "user_id", call)


@pytest.mark.parametrize("user", BAD_USERS, ids=repr)
def test_unsafe_user_id_adapter(seeded: MemoryStore, user: Any) -> None:
    ev = event(user_id=user)
    field_msg = "user_id"
    rejects(seeded, "user_id", lambda: adapter.on_generation_accepted(seeded, ev), field_msg)


BAD_PROJECTS: list[Any] = ["a/b", "", "__proto__", "constructor", "prototype", "x\n", "../x", 5]


@pytest.mark.parametrize("pid", BAD_PROJECTS, ids=repr)
def test_retrieval_project_id_always_validated(seeded: MemoryStore, pid: Any) -> None:
    """§0.5: validated when given, also for a project with no records."""
    rejects(seeded, "project_id", lambda: seeded.retrieve_for_injection(U, {"project_id": pid}))


@pytest.mark.parametrize(
    "scope", ["project:", "project:a/b", "project:__proto__", "project:constructor",
              "project:prototype", "project: x"],
)  # fmt: skip
def test_scope_project_ids(seeded: MemoryStore, scope: str) -> None:
    """A bad id inside ``project:<id>`` names ``scope``, the option the caller gave (the
    message quotes the project id)."""
    rejects(seeded, "scope", lambda: seeded.list_preferences(U, scope=scope), "project_id")
    rejects(seeded, "scope", lambda: seeded.reset_memory(U, scope), "project_id")


@pytest.mark.parametrize("value", ["x", "0.5", None, [], {}, True, False, b"1"])
def test_min_strength_must_be_a_number(seeded: MemoryStore, value: Any) -> None:
    rejects(seeded, "min_strength", lambda: seeded.list_preferences(U, min_strength=value))


def test_min_strength_numbers_compare_as_the_reference(seeded: MemoryStore) -> None:
    everything = seeded.list_preferences(U)
    assert everything
    assert seeded.list_preferences(U, min_strength=0) == everything  # an int is a number
    assert seeded.list_preferences(U, min_strength=float("-inf")) == everything
    assert seeded.list_preferences(U, min_strength=float("inf")) == []
    assert seeded.list_preferences(U, min_strength=float("nan")) == []  # >= NaN keeps nothing


def test_retrieval_context_shapes(seeded: MemoryStore) -> None:
    rejects(
        seeded,
        "preference_types",
        lambda: seeded.retrieve_for_injection(U, {"preference_types": "layout"}),
    )
    rejects(
        seeded,
        "preference_types",
        lambda: seeded.retrieve_for_injection(U, {"preference_types": ["layout", 1]}),
    )
    rejects(seeded, "context", lambda: seeded.retrieve_for_injection(U, ["x"]))  # type: ignore[arg-type]


@pytest.mark.parametrize("now", ["not-a-date", "2024-02-30", 5, datetime(2024, 1, 1)], ids=repr)
def test_run_decay_bad_now(seeded: MemoryStore, now: Any) -> None:
    rejects(seeded, "now", lambda: seeded.run_decay(U, now))


def test_set_memory_enabled_needs_bool(seeded: MemoryStore) -> None:
    rejects(seeded, "enabled", lambda: seeded.set_memory_enabled(U, "no"))  # type: ignore[arg-type]
    rejects(seeded, "enabled", lambda: seeded.set_memory_enabled(U, 0))  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------
# §9 adapter checks

HANDLERS = {
    "accepted": adapter.on_generation_accepted,
    "edited": adapter.on_artifact_edited_and_saved,
    "tag": adapter.on_explicit_tag_applied,
    "thumbs": adapter.on_thumbs_rated,
    "abandoned": adapter.on_generation_abandoned,
    "revert": adapter.on_revert_after_edit,
}


def event(**changes: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "user_id": U,
        "artifact_id": "a1",
        "session_id": "s1",
        "project_id": None,
        "timestamp": TS,
        "artifact_meta": {
            "signals": [
                {"preference_type": "layout", "pattern": "e1"},
                {"preference_type": "color", "pattern": "e2"},
            ]
        },
        "tag_text": "love this",
        "rating": "up",
        "diff": {"css": "+ margin"},
    }
    for k, v in changes.items():
        if v is DELETE:
            del ev[k]
        else:
            ev[k] = v
    return ev


@pytest.mark.parametrize("rating", ["UP", "", None, DELETE, "yes", 1, True, "down "], ids=repr)
def test_thumbs_rating(seeded: MemoryStore, rating: Any) -> None:
    ev = event(rating=rating)
    rejects(
        seeded,
        "rating",
        lambda: adapter.on_thumbs_rated(seeded, ev),
        'must be exactly "up" or "down"',
    )


@pytest.mark.parametrize(
    "tag_text",
    ["unknown tag", None, DELETE, 5, "", "love  this", "\x1clove this", "love this\x85",
     "lovethis", "love this!"],
    ids=repr,
)  # fmt: skip
def test_unrecognized_tag(seeded: MemoryStore, tag_text: Any) -> None:
    ev = event(tag_text=tag_text)
    rejects(
        seeded,
        "tag_text",
        lambda: adapter.on_explicit_tag_applied(seeded, ev),
        "unrecognized tag",
    )


def test_adapter_precheck_before_user_and_timestamp(seeded: MemoryStore) -> None:
    ev = event(rating="no", user_id="", timestamp="bad")
    rejects(seeded, "rating", lambda: adapter.on_thumbs_rated(seeded, ev))
    ev = event(tag_text="meh", user_id=None, timestamp=None)
    rejects(
        seeded,
        "tag_text",
        lambda: adapter.on_explicit_tag_applied(seeded, ev),
        "unrecognized tag",
    )


@pytest.mark.parametrize("name", list(HANDLERS))
@pytest.mark.parametrize("user", ["", None, DELETE, 5], ids=repr)
def test_adapter_user_id(seeded: MemoryStore, name: str, user: Any) -> None:
    ev = event(user_id=user, timestamp="bad", artifact_meta=None)
    rejects(
        seeded,
        "user_id",
        lambda: HANDLERS[name](seeded, ev),
        "event.user_id must be a non-empty string",
    )


@pytest.mark.parametrize("name", list(HANDLERS))
@pytest.mark.parametrize("ts", ["", None, DELETE, 5], ids=repr)
def test_adapter_timestamp_missing(seeded: MemoryStore, name: str, ts: Any) -> None:
    ev = event(timestamp=ts, artifact_meta=None)
    rejects(
        seeded,
        "timestamp",
        lambda: HANDLERS[name](seeded, ev),
        "event.timestamp must be a non-empty string",
    )


@pytest.mark.parametrize("name", list(HANDLERS))
@pytest.mark.parametrize("ts", ["not-a-date", "2024-02-30", "2024-01-01T25:00Z"])
def test_adapter_timestamp_unparseable(seeded: MemoryStore, name: str, ts: str) -> None:
    ev = event(timestamp=ts, artifact_meta=None)
    rejects(seeded, "timestamp", lambda: HANDLERS[name](seeded, ev), "not a valid ISO date string")


@pytest.mark.parametrize("name", list(HANDLERS))
@pytest.mark.parametrize("meta", [None, DELETE], ids=repr)
def test_adapter_meta_required(seeded: MemoryStore, name: str, meta: Any) -> None:
    ev = event(artifact_meta=meta)
    rejects(
        seeded, "artifact_meta", lambda: HANDLERS[name](seeded, ev), "artifact_meta is required"
    )


@pytest.mark.parametrize("name", list(HANDLERS))
@pytest.mark.parametrize(
    "meta", [{}, {"signals": "x"}, {"signals": None}, {"signals": {}}, "signals", []], ids=repr
)
def test_adapter_signals_must_be_array(seeded: MemoryStore, name: str, meta: Any) -> None:
    ev = event(artifact_meta=meta)
    rejects(
        seeded,
        "artifact_meta.signals",
        lambda: HANDLERS[name](seeded, ev),
        "signals must be an array",
    )


BAD_ENTRIES: list[Any] = [
    5,
    None,
    "layout/p",
    {"pattern": "", "preference_type": "t"},
    {"pattern": "p"},
    {"preference_type": "t"},
    {"pattern": 5, "preference_type": "t"},
    {"pattern": "p", "preference_type": ""},
    {"pattern": "p", "preference_type": None},
]


@pytest.mark.parametrize("name", list(HANDLERS))
@pytest.mark.parametrize("bad", BAD_ENTRIES, ids=repr)
def test_adapter_later_entry_bad_writes_nothing(seeded: MemoryStore, name: str, bad: Any) -> None:
    """All entries are checked before any ingestion (and before the refinement log)."""
    good = [{"preference_type": "layout", "pattern": f"g{i}"} for i in range(2)]
    ev = event(artifact_meta={"signals": [*good, bad]})
    err = rejects(
        seeded,
        "artifact_meta.signals[2]",
        lambda: HANDLERS[name](seeded, ev),
        "signals[2] is malformed",
    )
    assert "signals[2]" in err.field
    ev = event(artifact_meta={"signals": [bad, *good]})
    rejects(
        seeded,
        "artifact_meta.signals[0]",
        lambda: HANDLERS[name](seeded, ev),
        "signals[0] is malformed",
    )


@pytest.mark.parametrize("name", list(HANDLERS))
@pytest.mark.parametrize("pid", ["a/b", "__proto__", "prototype", "x\n"], ids=repr)
def test_adapter_unsafe_project_writes_nothing(seeded: MemoryStore, name: str, pid: str) -> None:
    ev = event(project_id=pid)
    rejects(seeded, "project_id", lambda: HANDLERS[name](seeded, ev))


def test_adapter_timestamp_before_meta_and_user_before_timestamp(seeded: MemoryStore) -> None:
    rejects(
        seeded,
        "user_id",
        lambda: adapter.on_generation_accepted(seeded, event(user_id="", timestamp="x")),
    )
    rejects(
        seeded,
        "timestamp",
        lambda: adapter.on_generation_accepted(seeded, event(timestamp="x", artifact_meta=None)),
    )
    rejects(
        seeded,
        "artifact_meta",
        lambda: adapter.on_generation_accepted(seeded, event(artifact_meta=None, project_id="a/b")),
    )


def test_adapter_event_not_a_mapping(seeded: MemoryStore) -> None:
    rejects(seeded, "event", lambda: adapter.on_generation_accepted(seeded, None))  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------
# §9 adapter: accepted input (tags, diff, disabled memory)


@pytest.mark.parametrize(
    ("tag_text", "polarity"),
    [
        ("love this", "positive"),
        ("  LOVE this  ", "positive"),
        ("\u00a0Too Noisy\ufeff", "negative"),
        ("\u3000keep THIS style\u2028", "positive"),
        ("\tnot this\n", "negative"),
    ],
)
def test_tag_normalisation(store: MemoryStore, tag_text: str, polarity: str) -> None:
    (r,) = adapter.on_explicit_tag_applied(
        store,
        event(
            tag_text=tag_text, artifact_meta={"signals": [{"preference_type": "t", "pattern": "p"}]}
        ),
    )
    assert r is not None
    assert r.polarity == polarity
    assert r.explicit_tags == [tag_text]  # stored un-normalised
    assert r.sources == ["explicit_tag"]


def test_adapter_signal_mapping(store: MemoryStore) -> None:
    table = [
        (adapter.on_generation_accepted, {}, "repeated_acceptance", "positive"),
        (adapter.on_artifact_edited_and_saved, {}, "manual_refinement", "positive"),
        (adapter.on_thumbs_rated, {"rating": "up"}, "thumbs_up", "positive"),
        (adapter.on_thumbs_rated, {"rating": "down"}, "thumbs_down", "negative"),
        (adapter.on_generation_abandoned, {}, "abandoned_generation", "negative"),
        (adapter.on_revert_after_edit, {}, "revert_after_edit", "positive"),
    ]
    for i, (handler, extra, st, pol) in enumerate(table):
        meta = {"signals": [{"preference_type": f"t{i}", "pattern": "a"},
                            {"preference_type": f"t{i}", "pattern": "b"}]}  # fmt: skip
        out = handler(store, event(artifact_meta=meta, project_id="pj", **extra))
        assert [(r.pattern, r.sources, r.polarity, r.scope) for r in out if r] == [
            ("a", [st], pol, "project:pj"),
            ("b", [st], pol, "project:pj"),
        ]
    # "" project id means global
    (r,) = adapter.on_generation_accepted(
        store,
        event(project_id="", artifact_meta={"signals": [{"preference_type": "g", "pattern": "g"}]}),
    )
    assert r is not None and r.scope == "global"


def test_adapter_timestamp_normalised(store: MemoryStore) -> None:
    (r, _) = adapter.on_generation_accepted(store, event(timestamp="2024-05-01T12:00:00+02:00"))
    assert r is not None and r.last_seen == "2024-05-01T10:00:00.000Z"


def test_edited_and_saved_logs_refinement(store: MemoryStore) -> None:
    adapter.on_artifact_edited_and_saved(
        store, event(diff={}, project_id="", artifact_meta={"signals": []})
    )
    (ref,) = store.refinement_log(U)
    assert (ref.diff, ref.project_id, ref.artifact_id) == ({}, "", "a1")
    assert store.list_preferences(U) == []  # empty signal list ingests nothing
    adapter.on_artifact_edited_and_saved(store, event(diff=None))
    assert len(store.refinement_log(U)) == 1


def test_disabled_memory_adapter(store: MemoryStore) -> None:
    store.set_memory_enabled(U, False)
    out = adapter.on_artifact_edited_and_saved(store, event(project_id="a/b", diff={"d": 1}))
    assert out == [None, None]  # unsafe project passes silently while disabled
    (ref,) = store.refinement_log(U)  # logged even when memory is disabled
    assert (ref.diff, ref.project_id) == ({"d": 1}, "a/b")
    assert store.list_preferences(U) == []
    # adapter checks still apply
    rejects(store, "timestamp", lambda: adapter.on_generation_accepted(store, event(timestamp="x")))
    rejects(store, "rating", lambda: adapter.on_thumbs_rated(store, event(rating="UP")))


def test_failed_event_leaves_no_side_effects_on_later_success(seeded: MemoryStore) -> None:
    before = {r.id: r.to_dict() for r in seeded.list_preferences(U)}
    ev = event(artifact_meta={"signals": [{"preference_type": "layout", "pattern": "p"}, 7]})
    with pytest.raises(ValidationError):
        adapter.on_generation_accepted(seeded, copy.deepcopy(ev))
    after = {r.id: r.to_dict() for r in seeded.list_preferences(U)}
    assert after == before


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"scope": "bogus"}, "scope"),
        ({"scope": "project:a:b"}, "scope"),
        ({"scope": "Project:a"}, "scope"),
        ({"polarity": "bogus"}, "polarity"),
        ({"polarity": "POSITIVE"}, "polarity"),
        ({"status": "bogus"}, "status"),
        ({"status": "paused"}, "status"),
    ],
)
def test_unknown_option_values_are_errors(
    tmp_path: Path, options: dict[str, str], field: str
) -> None:
    store = MemoryStore(tmp_path / "mem")
    store.ingest_signal("u1", tag("airy"))
    before = tree(tmp_path / "mem")
    with pytest.raises(ValidationError) as ei:
        store.list_preferences("u1", **options)  # type: ignore[arg-type]
    assert ei.value.field == field
    if "scope" in options:
        with pytest.raises(ValidationError) as ei:
            store.reset_memory("u1", options["scope"])
        assert ei.value.field == field
    assert tree(tmp_path / "mem") == before
    assert len(store.list_preferences("u1")) == 1
