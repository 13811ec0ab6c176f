"""The walkthrough driver: sends events through the real adapter and records each step."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from creative_memory.app.store import MemoryStore
from creative_memory.capture import adapter
from creative_memory.cli.demo.model import (
    DEMO_DERIVATION_VERSION,
    DEMO_PAIRWISE_VERSION,
    DEMO_START,
    DemoAction,
    DemoClock,
    DemoStep,
    _describe,
    injection_status,
)
from creative_memory.engine.models import Preference
from creative_memory.engine.prompt import build_prompt_block
from creative_memory.engine.timeutil import format_ts


# -- the walkthrough -------------------------------------------------------------------------
class _Walkthrough:
    """Sends events through the real adapter and records what the store shows afterwards."""

    def __init__(self, root: Path) -> None:
        self.clock = DemoClock(DEMO_START)
        self.store = MemoryStore(root, derivation_version=DEMO_DERIVATION_VERSION, clock=self.clock)
        #: the same root derived with the default version (switching versions never touches events)
        self.store_v2 = MemoryStore(
            root, derivation_version=DEMO_PAIRWISE_VERSION, clock=self.clock
        )
        self.steps: list[DemoStep] = []
        self._artifacts = 0

    # actions ------------------------------------------------------------------------------
    def send(
        self,
        event: str,
        user_id: str,
        timestamp: str,
        signals: Sequence[tuple[str, str]],
        *,
        project_id: str | None = None,
        tag_text: str | None = None,
        rating: str | None = None,
        diff: Mapping[str, Any] | None = None,
    ) -> DemoAction:
        """Send one wire-format host event (docs/cli.md, ingest) through its adapter handler."""
        self._artifacts += 1
        at = self.clock.set(timestamp)
        wire: dict[str, Any] = {
            "event": event,
            "user_id": user_id,
            "artifact_id": f"{user_id}-art-{self._artifacts:03d}",
            "session_id": f"{user_id}-{at[:10]}",
            "project_id": project_id,
            "timestamp": timestamp,
        }
        if tag_text is not None:
            wire["tag_text"] = tag_text
        if rating is not None:
            wire["rating"] = rating
        if diff is not None:
            wire["diff"] = dict(diff)
        wire["artifact_meta"] = {
            "signals": [{"preference_type": t, "pattern": p} for t, p in signals]
        }
        handler = adapter.HANDLERS[event]
        body = {k: v for k, v in wire.items() if k != "event"}
        touched = [r for r in handler(self.store, body) if r is not None]
        detail = {"explicit_tag_applied": f' "{tag_text}"', "thumbs_rated": f" {rating}"}
        where = f" in {project_id}" if project_id else ""
        summary = f"{event}{detail.get(event, '')}{where}: " + ", ".join(
            f"{t}/{p}" for t, p in signals
        )
        outcome = "; ".join(_describe(r) for r in touched) or "nothing stored"
        return DemoAction(
            kind="event",
            at=at,
            summary=summary,
            outcome=outcome,
            payload=wire,
            result=[r.to_dict() for r in touched],
        )

    def compare(
        self,
        user_id: str,
        timestamp: str,
        chose: Sequence[tuple[str, str]],
        over: Sequence[tuple[str, str]],
    ) -> DemoAction:
        """Send one ``pairwise_comparison`` event: the user picked ``chose`` over ``over``."""
        at = self.clock.set(timestamp)
        sides = []
        for signals in (chose, over):
            self._artifacts += 1
            sides.append(
                {
                    "artifact_id": f"{user_id}-art-{self._artifacts:03d}",
                    "artifact_meta": {
                        "signals": [{"preference_type": t, "pattern": p} for t, p in signals]
                    },
                }
            )
        wire: dict[str, Any] = {
            "event": "pairwise_comparison",
            "user_id": user_id,
            "session_id": f"{user_id}-{at[:10]}",
            "project_id": None,
            "timestamp": timestamp,
            "chose": sides[0],
            "over": sides[1],
        }
        adapter.on_pairwise_comparison(self.store, {k: v for k, v in wire.items() if k != "event"})

        def names(signals: Sequence[tuple[str, str]]) -> str:
            """``type/pattern, ...``."""
            return ", ".join(f"{t}/{p}" for t, p in signals)

        return DemoAction(
            kind="event",
            at=at,
            summary=f"pairwise_comparison: chose {names(chose)} over {names(over)}",
            outcome="one comparison event stored",
            payload=wire,
            result=[],
        )

    def decay(self, user_id: str, now: str) -> tuple[DemoAction, int]:
        """One decay pass at ``now``; also returns how many events it appended."""
        at = self.clock.set(now)
        before = len(self.store.events(user_id))
        result = self.store.run_decay(user_id, now=now)
        written = len(self.store.events(user_id)) - before
        outcome = f"decayed {result.decayed}, archived {result.archived}; " + (
            f"{written} decay_pass event appended" if written else "no event written"
        )
        action = DemoAction(
            kind="decay",
            at=at,
            summary=f"run_decay({user_id!r}, now={at!r})",
            outcome=outcome,
            payload={"now": at},
            result=result.to_dict(),
        )
        return action, written

    # observation --------------------------------------------------------------------------
    def step(
        self,
        chapter: str,
        title: str,
        narration: str,
        user_id: str,
        actions: Sequence[DemoAction] = (),
        *,
        context: Mapping[str, Any] | None = None,
        facts: Mapping[str, Any] | None = None,
        store: MemoryStore | None = None,
    ) -> DemoStep:
        """Snapshot ``user_id`` (records, retrieval, prompt block) into a new step, as
        ``store`` (default: the version-1 store) derives it."""
        store = store or self.store
        records = tuple(store.list_preferences(user_id))
        retrieval = store.retrieve_for_injection(user_id, context)
        pid = (context or {}).get("project_id")
        project_id = pid if isinstance(pid, str) else None
        block = build_prompt_block(retrieval, project_id)
        step = DemoStep(
            index=len(self.steps) + 1,
            chapter=chapter,
            title=title,
            narration=narration,
            user_id=user_id,
            at=format_ts(self.clock()),
            actions=tuple(actions),
            records=records,
            injection={r.id: injection_status(r, retrieval, project_id) for r in records},
            context=dict(context) if context is not None else None,
            retrieval=retrieval,
            prompt_block=block,
            facts=dict(facts or {}),
            derivation_version=store.derivation_version,
        )
        self.steps.append(step)
        return step

    def records(self, user_id: str) -> list[Preference]:
        """The user's records now."""
        return self.store.list_preferences(user_id)

    def injected(self, user_id: str, rec: Preference | None, project_id: str | None = None) -> bool:
        """Whether ``rec`` is in the retrieval now."""
        if rec is None:
            return False
        ctx = {"project_id": project_id} if project_id else None
        r = self.store.retrieve_for_injection(user_id, ctx)
        return any(x.id == rec.id for x in (*r.positives, *r.negatives))
