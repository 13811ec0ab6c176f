"""Stateful property test of the derivation cache (issue 7, acceptance).

After any random sequence of ingest, decay, forget, reset, version switch and reopen (a new
``MemoryStore`` on the same root), what the store serves — retrieval for every context and
``list_preferences`` — equals a derivation from scratch: the user directory copied to a fresh
root with ``cache/`` and ``snapshot.json`` deleted, opened with the same derivation version.
Records are compared in full, provenance included.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar
from unittest import mock

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from creative_memory import SIGNAL_WEIGHTS, MemoryStore, adapter
from creative_memory.engine.derivation import registry
from creative_memory.engine.derivation.registry import known_versions
from creative_memory.engine.derivation.v1 import DerivedStateV1
from creative_memory.engine.timeutil import MS_PER_DAY, format_ts, parse_ts
from tests.conftest import ManualClock

USER = "prop_user"
TYPES = ("layout", "color")
PATTERNS = ("airy", "dense", "neon")
PROJECTS = ("p1", "p2")
START_MS = parse_ts("2025-01-01T00:00:00.000Z")

#: Version registered by this module when the project has only one real version, so that
#: "switch version" still exercises a different cache key and different provenance.
ALIAS_VERSION = "1t"


def real_versions() -> list[str]:
    """The derivation versions of the registry."""
    return list(known_versions())


@contextlib.contextmanager
def versions_for_test() -> Iterator[list[str]]:
    """At least two versions: the real ones, plus a v1-behaving alias when there is only one."""
    versions = real_versions()
    if len(versions) >= 2 or ALIAS_VERSION in versions:
        yield versions
        return
    with mock.patch.object(
        registry,
        "VERSIONS",
        MappingProxyType({**registry.VERSIONS, ALIAS_VERSION: DerivedStateV1}),
    ):
        yield [*versions, ALIAS_VERSION]


def from_scratch(root: Path, user: str, version: str) -> MemoryStore:
    """A store over a copy of ``user``'s directory without any derived artefact."""
    fresh_root = Path(tempfile.mkdtemp(prefix="cm-fresh-"))
    src = root / user
    if src.is_dir():
        shutil.copytree(src, fresh_root / user)
        shutil.rmtree(fresh_root / user / "cache", ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            (fresh_root / user / "snapshot.json").unlink()
    return MemoryStore(fresh_root, derivation_version=version, clock=ManualClock())


def observed(store: MemoryStore, user: str) -> dict[str, Any]:
    """Everything a reader can see, as plain data."""
    out: dict[str, Any] = {
        "list_all": [p.to_dict() for p in store.list_preferences(user)],
        "list_global": [p.to_dict() for p in store.list_preferences(user, scope="global")],
        "refinements": [r.to_dict() for r in store.refinement_log(user)],
    }
    for ctx in (None, *({"project_id": p} for p in PROJECTS)):
        key = "retrieval:" + (ctx["project_id"] if ctx else "-")
        out[key] = store.retrieve_for_injection(user, ctx).to_dict()
    for p in PROJECTS:
        out["list:" + p] = [r.to_dict() for r in store.list_preferences(user, scope="project:" + p)]
    return out


signal_st = st.fixed_dictionaries(
    {
        "ptype": st.sampled_from(TYPES),
        "pattern": st.sampled_from(PATTERNS),
        "polarity": st.sampled_from(("positive", "negative")),
        "signal_type": st.sampled_from(tuple(SIGNAL_WEIGHTS)),
        "project": st.sampled_from((None, None, *PROJECTS)),
        "hours": st.integers(0, 24 * 40),
        "tag": st.sampled_from((None, "love this", "too noisy")),
    }
)


features_st = st.lists(
    st.tuples(st.sampled_from(TYPES), st.sampled_from(PATTERNS)),
    min_size=1,
    max_size=3,
    unique=True,
)

#: adapter handlers driven by the machine ("thumbs_down" = thumbs_rated with rating "down")
HANDLERS = (
    "generation_accepted",
    "thumbs_rated",
    "thumbs_down",
    "generation_abandoned",
    "explicit_tag_applied",
    "artifact_edited_and_saved",
    "revert_after_edit",
)


class CacheMachine(RuleBasedStateMachine):
    versions: ClassVar[list[str]] = ["1"]

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="cm-prop-"))
        self.t = START_MS
        self.clock = ManualClock()
        self.clock.ms = self.t
        self.version = self.versions[0]
        self.capacity = 1000
        self.store = self._open()

    def _open(self) -> MemoryStore:
        return MemoryStore(
            self.root,
            derivation_version=self.version,
            clock=self.clock,
            cache_capacity=self.capacity,
        )

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def _tick(self, hours: int) -> None:
        self.t += hours * 3_600_000
        self.clock.ms = self.t

    def _signal(self, s: dict[str, Any]) -> dict[str, Any]:
        self._tick(s["hours"])
        project = s["project"]
        return {
            "signal_type": s["signal_type"],
            "pattern": s["pattern"],
            "preference_type": s["ptype"],
            "polarity": s["polarity"],
            "tag_text": s["tag"],
            "scope": "project" if project else "global",
            "project_id": project,
            "artifact_id": "art",
            "session_id": "sess",
            "timestamp": format_ts(self.t),
        }

    @initialize(first=st.lists(signal_st, min_size=0, max_size=6))
    def seed(self, first: list[dict[str, Any]]) -> None:
        if first:
            self.store.ingest_signals(USER, [self._signal(s) for s in first])

    @rule(sigs=st.lists(signal_st, min_size=1, max_size=4), batched=st.booleans())
    def ingest(self, sigs: list[dict[str, Any]], batched: bool) -> None:
        if batched:
            self.store.ingest_signals(USER, [self._signal(s) for s in sigs])
        else:
            for s in sigs:
                self.store.ingest_signal(USER, self._signal(s))

    @rule(
        handler=st.sampled_from(HANDLERS),
        features=features_st,
        project=st.sampled_from((None, *PROJECTS)),
        hours=st.integers(0, 24 * 20),
    )
    def adapter_event(
        self, handler: str, features: list[tuple[str, str]], project: str | None, hours: int
    ) -> None:
        """A host event with several features (one all-or-nothing append; version 2 reads
        the features of one call as one observation)."""
        self._tick(hours)
        event: dict[str, Any] = {
            "user_id": USER,
            "artifact_id": f"a{self.t}",
            "session_id": "s",
            "project_id": project,
            "timestamp": format_ts(self.t),
            "artifact_meta": {
                "signals": [{"preference_type": t, "pattern": p} for t, p in features]
            },
        }
        if handler == "thumbs_down":
            handler, event["rating"] = "thumbs_rated", "down"
        elif handler == "thumbs_rated":
            event["rating"] = "up"
        elif handler == "explicit_tag_applied":
            event["tag_text"] = "too noisy" if self.t % 2 else "love this"
        elif handler == "artifact_edited_and_saved":
            event["diff"] = {"changed": [p for _, p in features]}
        adapter.HANDLERS[handler](self.store, event)

    @rule(
        chose=features_st,
        over=features_st,
        project=st.sampled_from((None, *PROJECTS)),
        dimensions=st.sampled_from((None, ["layout"], ["color", "layout"])),
        hours=st.integers(0, 24 * 20),
    )
    def comparison(
        self,
        chose: list[tuple[str, str]],
        over: list[tuple[str, str]],
        project: str | None,
        dimensions: list[str] | None,
        hours: int,
    ) -> None:
        self._tick(hours)

        def side(name: str, feats: list[tuple[str, str]]) -> dict[str, Any]:
            signals = [{"preference_type": t, "pattern": p} for t, p in feats]
            return {"artifact_id": f"{name}{self.t}", "artifact_meta": {"signals": signals}}

        event: dict[str, Any] = {
            "user_id": USER,
            "session_id": "s",
            "project_id": project,
            "timestamp": format_ts(self.t),
            "chose": side("c", chose),
            "over": side("o", over),
        }
        if dimensions is not None:
            event["dimensions"] = dimensions
        adapter.on_pairwise_comparison(self.store, event)

    @rule(sig=signal_st)
    def ingest_through_other_instance(self, sig: dict[str, Any]) -> None:
        """Another writer (as the CLI next to a daemon) appends behind this store's back."""
        other = MemoryStore(self.root, derivation_version=self.version, clock=self.clock)
        other.ingest_signal(USER, self._signal(sig))

    @rule(days=st.integers(0, 200))
    def decay(self, days: int) -> None:
        self.t += days * MS_PER_DAY
        self.clock.ms = self.t
        self.store.run_decay(USER, now=format_ts(self.t))

    @rule(pattern=st.sampled_from(PATTERNS), project=st.sampled_from((None, *PROJECTS)))
    def refinement(self, pattern: str, project: str | None) -> None:
        self.t += 60_000
        self.clock.ms = self.t
        self.store.log_refinement(
            USER, artifact_id="art", project_id=project, diff={"note": f"more {pattern}"}
        )

    @rule(
        ptype=st.sampled_from(TYPES),
        pattern=st.sampled_from(PATTERNS),
        project=st.sampled_from((None, *PROJECTS)),
    )
    def forget(self, ptype: str, pattern: str, project: str | None) -> None:
        self.store.forget(USER, ptype, pattern, project_id=project)

    @rule(scope=st.sampled_from(("all", "global", *(f"project:{p}" for p in PROJECTS))))
    def reset(self, scope: str) -> None:
        self.store.reset_memory(USER, scope)

    @rule(
        ptype=st.sampled_from(TYPES),
        pattern=st.sampled_from(PATTERNS),
        project=st.sampled_from((None, *PROJECTS)),
        scope=st.sampled_from((None, "global", *(f"project:{p}" for p in PROJECTS))),
    )
    def erase_through_other_instance(
        self, ptype: str, pattern: str, project: str | None, scope: str | None
    ) -> None:
        """Another process rewrites the log while this store holds a derived state."""
        other = MemoryStore(self.root, derivation_version=self.version, clock=self.clock)
        if scope is None:
            other.forget(USER, ptype, pattern, project_id=project)
        else:
            other.reset_memory(USER, scope)

    @rule(index=st.integers(0, 7))
    def switch_version(self, index: int) -> None:
        self.version = self.versions[index % len(self.versions)]
        self.store = self._open()

    @rule(
        pending=st.lists(signal_st, max_size=3),
        capacity=st.sampled_from((1000, 1000, 2, 1, 0)),
    )
    def reopen(self, pending: list[dict[str, Any]], capacity: int) -> None:
        """Reopen, optionally after appending events nobody has read yet (so the new store
        must extend a cached prefix instead of finding the tail cached)."""
        for s in pending:
            self.store.ingest_signal(USER, self._signal(s))
        self.capacity = capacity
        self.store = self._open()

    @invariant()
    def matches_derivation_from_scratch(self) -> None:
        got = observed(self.store, USER)
        fresh = from_scratch(self.root, USER, self.version)
        try:
            want = observed(fresh, USER)
        finally:
            shutil.rmtree(fresh.root, ignore_errors=True)
        for key in want:
            assert got[key] == want[key], key
        for rec in got["list_all"]:
            assert rec["derivation_version"] == self.version


def test_cached_reads_equal_derivation_from_scratch() -> None:
    with versions_for_test() as versions:
        CacheMachine.versions = versions
        run_state_machine_as_test(
            CacheMachine,
            settings=settings(
                max_examples=30,
                stateful_step_count=25,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
            ),
        )


def test_versions_available_for_switching() -> None:
    """The property test switches between at least two versions (an alias if need be)."""
    with versions_for_test() as versions:
        assert len(versions) >= 2
        assert "1" in versions
        for v in versions:
            assert registry.check_version(v) == v
    assert ALIAS_VERSION not in known_versions()  # the alias is removed afterwards


@pytest.mark.parametrize("reads_between", [True, False])
def test_version_switch_and_back_serves_each_versions_records(
    tmp_path: Path, reads_between: bool
) -> None:
    """A deterministic slice of the machine: v_a → v_b → v_a on the same log."""
    with versions_for_test() as versions:
        va, vb = versions[0], versions[1]
        clock = ManualClock()
        root = tmp_path / "mem"
        a = MemoryStore(root, derivation_version=va, clock=clock)
        for i, pat in enumerate(("airy", "airy", "neon", "dense")):
            a.ingest_signal(
                USER,
                {
                    "signal_type": "explicit_tag",
                    "pattern": pat,
                    "preference_type": "layout",
                    "polarity": "negative" if pat == "neon" else "positive",
                    "scope": "global",
                    "timestamp": format_ts(START_MS + i * 3_600_000),
                },
            )
        log_before = (root / USER / "events.jsonl").read_bytes()
        for v in (va, vb, va, vb):
            s = MemoryStore(root, derivation_version=v, clock=clock)
            if reads_between:
                s.list_preferences(USER)
            fresh = from_scratch(root, USER, v)
            try:
                assert observed(s, USER) == observed(fresh, USER)
            finally:
                shutil.rmtree(fresh.root, ignore_errors=True)
            assert {p.derivation_version for p in s.list_preferences(USER)} == {v}
        assert (root / USER / "events.jsonl").read_bytes() == log_before
