"""``creative-memory demo``: a guided walkthrough on a scratch file store.

:func:`run_demo` drives a real :class:`~creative_memory.app.store.MemoryStore` through the
engine's behaviour, chapter by chapter, and returns the steps as typed values;
:func:`render_human` and :func:`demo_document` turn them into text for a person or one JSON
document for machines. Every timestamp comes from the script (the store runs on a fixed
clock), so two runs produce identical output.

Chapters:

1. a fresh user with nothing injectable;
2. the confidence ladder climbing to injection;
3. a negative preference;
4. the reversal ladder, a shadow record and its promotion;
5. decay and archive, with time passed explicitly;
6. a realistic multi-category profile through the full retrieval and its diagnostics;
7. a project override and its suppression diagnostic.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from rich import box
from rich.console import Console
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from creative_memory._version import __version__
from creative_memory.app.store import MemoryStore
from creative_memory.capture import adapter
from creative_memory.engine.constants import (
    ARCHIVE_DAYS,
    DECAY_DAYS,
    INJECTION_THRESHOLD,
    MAX_PER_CATEGORY,
)
from creative_memory.engine.models import Preference, RetrievalResult
from creative_memory.engine.prompt import build_prompt_block
from creative_memory.engine.timeutil import MS_PER_DAY, format_ts, parse_ts

#: Derivation version the walkthrough runs on (the prototype's exact behaviour).
DEMO_DERIVATION_VERSION: Final = "1"
#: The fixed instant the walkthrough starts at.
DEMO_START: Final = "2026-01-05T09:00:00.000Z"
#: Shown instead of an empty prompt block.
EMPTY_BLOCK: Final = "(empty — nothing injectable)"

MAYA: Final = "maya"
THEO: Final = "theo"
RIN: Final = "rin"
FESTIVAL: Final = "neon-nights"
REPORT: Final = "quarterly-report"
KAI: Final = "kai"
#: The version the last chapter derives the same log with (the library's default).
DEMO_PAIRWISE_VERSION: Final = "3"

_CHAPTERS: Final[Mapping[str, str]] = {
    "fresh": "A fresh user",
    "ladder": "The confidence ladder",
    "negative": "A negative preference",
    "reversal": "The reversal ladder",
    "decay": "Decay and archive",
    "profile": "A realistic profile through the full retrieval",
    "project": "A project override",
    "pairwise": "Pairwise choices and derivation version 3",
}


# -- typed results -------------------------------------------------------------------------
@dataclass(frozen=True)
class DemoAction:
    """One thing the walkthrough did to the store: a host event or a decay pass."""

    kind: str  # "event" | "decay"
    at: str  # normalised UTC timestamp
    summary: str  # one line: what was sent
    outcome: str  # one line: what it changed
    payload: dict[str, Any]  # the wire-format event, or {"now": ...} for a decay pass
    result: Any  # records touched (dicts), or the DecayResult as a dict

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "at": self.at,
            "summary": self.summary,
            "outcome": self.outcome,
            "payload": self.payload,
            "result": self.result,
        }


@dataclass(frozen=True)
class DemoStep:
    """The state of one user after some actions, seen through retrieval and the prompt."""

    index: int
    chapter: str
    title: str
    narration: str
    user_id: str
    at: str
    actions: tuple[DemoAction, ...]
    records: tuple[Preference, ...]
    #: record id → why it is (not) in the prompt ("injected", "confidence low", ...)
    injection: Mapping[str, str]
    context: Mapping[str, Any] | None
    retrieval: RetrievalResult
    prompt_block: str
    facts: Mapping[str, Any] = field(default_factory=dict)
    #: the derivation version the records of this step come from
    derivation_version: str = DEMO_DERIVATION_VERSION

    @property
    def project_id(self) -> str | None:
        pid = (self.context or {}).get("project_id")
        return pid if isinstance(pid, str) else None

    @property
    def chapter_title(self) -> str:
        return _CHAPTERS.get(self.chapter, self.chapter)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "chapter": self.chapter,
            "chapter_title": self.chapter_title,
            "title": self.title,
            "narration": self.narration,
            "user_id": self.user_id,
            "at": self.at,
            "actions": [a.to_dict() for a in self.actions],
            "records": [r.to_dict() for r in self.records],
            "injection": dict(self.injection),
            "context": dict(self.context) if self.context is not None else None,
            "retrieval": self.retrieval.to_dict(),
            "diagnostics": [d.get("trace", "") for d in self.retrieval.diagnostics],
            "prompt_block": self.prompt_block,
            "facts": dict(self.facts),
            "derivation_version": self.derivation_version,
        }


# -- helpers ---------------------------------------------------------------------------------
class DemoClock:
    """The store's clock: a settable epoch-ms value (never the wall clock)."""

    def __init__(self, start: str) -> None:
        self.ms = parse_ts(start)

    def __call__(self) -> int:
        return self.ms

    def set(self, iso: str) -> str:
        self.ms = parse_ts(iso)
        return format_ts(self.ms)


def _days_after(ts: str, days: int) -> str:
    return format_ts(parse_ts(ts) + days * MS_PER_DAY)


def _num(x: float) -> str:
    """A strength for prose: at most three decimals, no trailing zeros (0.45, 0.288, 0)."""
    s = f"{x:.3f}".rstrip("0").rstrip(".")
    return s or "0"


def _key(rec: Preference) -> str:
    return f"{rec.preference_type}/{rec.pattern}"


def _find(
    records: Sequence[Preference],
    preference_type: str,
    pattern: str,
    polarity: str | None = None,
    *,
    shadow: bool | None = None,
    scope: str | None = None,
) -> Preference | None:
    for r in records:
        if r.preference_type != preference_type or r.pattern != pattern:
            continue
        if polarity is not None and r.polarity != polarity:
            continue
        if shadow is not None and (r.shadow_of is not None) != shadow:
            continue
        if scope is not None and r.scope != scope:
            continue
        return r
    return None


def _require(rec: Preference | None) -> Preference:
    """A record the script has just created (its absence would be an engine regression)."""
    if rec is None:
        raise RuntimeError("demo: an expected preference record is missing")
    return rec


def _brief(rec: Preference | None) -> dict[str, Any] | None:
    """The facts a reader checks about one record."""
    if rec is None:
        return None
    return {
        "id": rec.id,
        "key": _key(rec),
        "polarity": rec.polarity,
        "signal_strength": rec.signal_strength,
        "confidence": rec.confidence,
        "polarity_status": rec.polarity_status,
        "reversal_signals": rec.reversal_signals,
        "shadow_of": rec.shadow_of,
        "scope": rec.scope,
    }


def _describe(rec: Preference) -> str:
    """``airy_spacing (+) 0.45 medium`` plus lifecycle details when they matter."""
    sign = "+" if rec.polarity == "positive" else "−"
    text = f"{rec.pattern} ({sign}) {_num(rec.signal_strength)} {rec.confidence}"
    extras: list[str] = []
    if rec.reversal_signals:
        extras.append(f"reversal {rec.reversal_signals}/4")
    if rec.polarity_status != "stable":
        extras.append(rec.polarity_status.replace("_", " "))
    if rec.shadow_of:
        extras.append("shadow")
    return text + (f" [{', '.join(extras)}]" if extras else "")


def injection_status(
    rec: Preference, retrieval: RetrievalResult, project_id: str | None
) -> str:
    """Why ``rec`` is or is not in the prompt block, in the words of the pipeline stages."""
    if any(r.id == rec.id for r in (*retrieval.positives, *retrieval.negatives)):
        return "injected"
    if rec.polarity_status != "stable":
        return rec.polarity_status.replace("_", " ")
    if rec.scope != "global" and rec.scope != f"project:{project_id}":
        return f"only in {rec.scope.removeprefix('project:')}"
    if rec.scope == "global" and project_id:
        for d in retrieval.diagnostics:
            if (
                d.get("type") == "project_override_suppression"
                and d.get("suppressed_pattern") == rec.pattern
                and d.get("suppressed_polarity") == rec.polarity
                and f" {rec.preference_type}/{rec.pattern} " in str(d.get("trace", ""))
            ):
                return "suppressed (project)"
    if rec.signal_strength < INJECTION_THRESHOLD:
        return f"below {INJECTION_THRESHOLD:.2f}"
    if rec.confidence == "low":
        return "confidence low"
    for d in retrieval.diagnostics:
        kind = d.get("type")
        if kind == "diversity_ceiling_applied" and rec.pattern in d.get("trimmed_patterns", []):
            return "trimmed (polarity)"
        if kind == "category_ceiling_applied" and rec.pattern in d.get("trimmed_patterns", []):
            return "trimmed (category)"
        if kind == "token_budget_exceeded" and d.get("pattern") == rec.pattern:
            return "dropped (tokens)"
    return "over hard cap"


# -- the walkthrough -------------------------------------------------------------------------
class _Walkthrough:
    """Sends events through the real adapter and records what the store shows afterwards."""

    def __init__(self, root: Path) -> None:
        self.clock = DemoClock(DEMO_START)
        self.store = MemoryStore(
            root, derivation_version=DEMO_DERIVATION_VERSION, clock=self.clock
        )
        #: the same root derived with version 3 (switching versions never touches events)
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
        """Send one wire-format host event (api.md) through its adapter handler."""
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
        summary = (
            f"{event}{detail.get(event, '')}{where}: "
            + ", ".join(f"{t}/{p}" for t, p in signals)
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
        outcome = (
            f"decayed {result.decayed}, archived {result.archived}; "
            + (f"{written} decay_pass event appended" if written else "no event written")
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
        return self.store.list_preferences(user_id)

    def injected(self, user_id: str, rec: Preference | None, project_id: str | None = None) -> bool:
        if rec is None:
            return False
        ctx = {"project_id": project_id} if project_id else None
        r = self.store.retrieve_for_injection(user_id, ctx)
        return any(x.id == rec.id for x in (*r.positives, *r.negatives))


def run_demo(root: str | Path) -> list[DemoStep]:
    """Run the whole walkthrough on a store rooted at ``root`` (which should be empty)."""
    w = _Walkthrough(Path(root))
    _chapter_fresh(w)
    _chapter_ladder(w)
    _chapter_negative(w)
    _chapter_reversal(w)
    _chapter_decay(w)
    _chapter_profile(w)
    _chapter_project(w)
    _chapter_pairwise(w)
    return w.steps


# -- chapter 1 -------------------------------------------------------------------------------
def _chapter_fresh(w: _Walkthrough) -> None:
    w.clock.set(DEMO_START)
    w.step(
        "fresh",
        "Maya opens the design tool for the first time",
        "Maya has never given feedback, so her event log is empty. Retrieval returns four "
        "empty lists and the prompt builder returns the empty string: the host injects "
        "nothing and the generation prompt is exactly what it would be without memory.",
        MAYA,
        facts={"records": len(w.records(MAYA)), "events": len(w.store.events(MAYA))},
    )


# -- chapter 2 -------------------------------------------------------------------------------
_LADDER_TAGS: Final = ("keep this style", "love this", "save this direction", "keep this style")
AIRY: Final = ("layout_density", "airy_spacing")


def _chapter_ladder(w: _Walkthrough) -> None:
    was_injectable = False
    for i, tag in enumerate(_LADDER_TAGS, start=1):
        ts = _days_after(DEMO_START, i - 1)
        action = w.send(
            "explicit_tag_applied", MAYA, ts, [AIRY], tag_text=tag
        )
        rec = _require(_find(w.records(MAYA), *AIRY, "positive"))
        injectable = w.injected(MAYA, rec)
        s, conf = _num(rec.signal_strength), rec.confidence
        if i == 1:
            text = (
                f'Maya tags a generated landing page "{tag}". The tag handler classifies it as '
                f"a positive explicit_tag (weight 0.30, so +0.15). A new record starts at "
                f"{s}, confidence {conf}: learned, but not trusted enough to inject."
            )
        elif injectable and not was_injectable:
            text = (
                f"Third tag: airy_spacing reaches {s}, which is at least "
                f"{INJECTION_THRESHOLD:.2f} and labelled {conf}. This is the moment it becomes "
                "injectable: the prompt block appears for the first time."
            )
        elif injectable:
            text = (
                f"Fourth tag: {s}, still {conf} (high starts above 0.65). The block is "
                "unchanged; the record is simply more certain."
            )
        else:
            text = (
                f"Second tag: {s}, still {conf} (medium starts at 0.35, injection at "
                f"{INJECTION_THRESHOLD:.2f}). Still nothing injected."
            )
        w.step(
            "ladder",
            f"Ladder {i}/4 — \"{tag}\" on airy_spacing",
            text,
            MAYA,
            [action],
            facts={
                "signal": i,
                "signal_strength": rec.signal_strength,
                "confidence": conf,
                "injectable": injectable,
                "became_injectable": injectable and not was_injectable,
                "accept_count": rec.accept_count,
            },
        )
        was_injectable = injectable


# -- chapter 3 -------------------------------------------------------------------------------
NEON: Final = ("color", "neon_palette")


def _chapter_negative(w: _Walkthrough) -> None:
    day = "2026-01-09"
    actions = [
        w.send("thumbs_rated", MAYA, f"{day}T10:00:00Z", [NEON], rating="down"),
        w.send("explicit_tag_applied", MAYA, f"{day}T10:05:00Z", [NEON], tag_text="too noisy"),
        w.send("explicit_tag_applied", MAYA, f"{day}T15:30:00Z", [NEON], tag_text="too noisy"),
    ]
    rec = _require(_find(w.records(MAYA), *NEON, "negative"))
    injectable = w.injected(MAYA, rec)
    w.step(
        "negative",
        "Maya pushes back on a neon palette",
        f"A thumbs-down (+0.05) and two \"too noisy\" tags (+0.15 each) build a negative "
        f"record: neon_palette at {_num(rec.signal_strength)}, confidence {rec.confidence}. "
        f"Medium, yet still below {INJECTION_THRESHOLD:.2f}, so it is not injected: polarity "
        "comes from the tag map, strength from the signal weights, and both gates must pass.",
        MAYA,
        actions,
        facts={
            "signal_strength": rec.signal_strength,
            "confidence": rec.confidence,
            "polarity": rec.polarity,
            "reject_count": rec.reject_count,
            "injectable": injectable,
        },
    )
    action = w.send(
        "explicit_tag_applied", MAYA, "2026-01-12T11:00:00Z", [NEON], tag_text="not this"
    )
    rec = _require(_find(w.records(MAYA), *NEON, "negative"))
    w.step(
        "negative",
        "A third tag makes the avoidance injectable",
        f'"not this" lifts neon_palette to {_num(rec.signal_strength)} ({rec.confidence}). '
        "Negatives get a 1.2× retrieval priority, and the block now carries an Avoid line "
        "next to the Prefer line.",
        MAYA,
        [action],
        facts={
            "signal_strength": rec.signal_strength,
            "confidence": rec.confidence,
            "polarity": rec.polarity,
            "reject_count": rec.reject_count,
            "injectable": w.injected(MAYA, rec),
        },
    )


# -- chapter 4 -------------------------------------------------------------------------------
_REVERSAL_NOTES: Final = (
    "Reversal 1/4 is a noise guard: the counter moves to 1 and last_seen is updated, "
    "nothing else changes. One contrary click does not undo a week of evidence.",
    "Reversal 2/4 multiplies the strength by 0.80. The confidence label is deliberately not "
    "recomputed, so the preference is still injected.",
    "Reversal 3/4 multiplies by 0.60 and drops the label one rung. Low confidence means the "
    "preference leaves the prompt block, although nothing is forgotten.",
    "Reversal 4/4 subtracts the signal's full weight, forces confidence low and marks the "
    "original under_review. The contrary evidence now lives in a new negative shadow "
    "record that points at the original (shadow_of).",
)


def _chapter_reversal(w: _Walkthrough) -> None:
    original = _require(_find(w.records(MAYA), *AIRY, "positive"))
    original_id = original.id
    for i, day in enumerate(("2026-02-02", "2026-02-03", "2026-02-04", "2026-02-05"), start=1):
        action = w.send(
            "explicit_tag_applied", MAYA, f"{day}T09:30:00Z", [AIRY], tag_text="too minimal"
        )
        recs = w.records(MAYA)
        orig = next(r for r in recs if r.id == original_id)
        shadow = next((r for r in recs if r.shadow_of == original_id), None)
        narration = _REVERSAL_NOTES[i - 1]
        if i == 1:
            narration = (
                'A month later Maya\'s taste shifts: she tags an airy layout "too minimal" '
                "(negative). It contradicts a stable positive record, so instead of creating "
                "a negative record it walks the original down the reversal ladder. "
                + narration
            )
        narration += (
            f" airy_spacing (+): {_num(orig.signal_strength)} {orig.confidence}, "
            f"{orig.polarity_status}."
        )
        if shadow is not None:
            narration += (
                f" Shadow (−): {_num(shadow.signal_strength)} {shadow.confidence}."
            )
        w.step(
            "reversal",
            f"Reversal {i}/4 — \"too minimal\" on airy_spacing",
            narration,
            MAYA,
            [action],
            facts={
                "reversal_signals": orig.reversal_signals,
                "original": _brief(orig),
                "shadow": _brief(shadow),
                "original_injected": w.injected(MAYA, orig),
            },
        )
    for day, tag in (("2026-02-06", "too minimal"), ("2026-02-09", "wrong direction")):
        action = w.send(
            "explicit_tag_applied", MAYA, f"{day}T09:30:00Z", [AIRY], tag_text=tag
        )
        recs = w.records(MAYA)
        orig = next(r for r in recs if r.id == original_id)
        shadow = _require(_find(recs, *AIRY, "negative"))
        promoted = shadow.shadow_of is None
        if not promoted:
            title = f'The shadow accumulates — "{tag}"'
            narration = (
                "The original is under_review, so it can no longer be contradicted; the "
                "negative signal takes the normal path and accumulates on the first negative "
                f"record, the shadow: {_num(shadow.signal_strength)} {shadow.confidence}. "
                "Nothing about airy_spacing is injected while the contest is open."
            )
        else:
            title = f'The shadow is promoted — "{tag}"'
            narration = (
                f"The shadow reaches {_num(shadow.signal_strength)} ({shadow.confidence}) and "
                "is promoted: shadow_of is cleared and the original positive record is "
                "archived. airy_spacing is now an Avoid item, ranked after the stronger "
                "neon_palette."
            )
        w.step(
            "reversal",
            title,
            narration,
            MAYA,
            [action],
            facts={
                "original": _brief(orig),
                "shadow": _brief(shadow),
                "promoted": promoted,
                "shadow_injected": w.injected(MAYA, shadow),
            },
        )


# -- chapter 5 -------------------------------------------------------------------------------
DUOTONE: Final = ("imagery", "duotone_photos")


def _chapter_decay(w: _Walkthrough) -> None:
    actions = [
        w.send(
            "explicit_tag_applied", THEO, _days_after(DEMO_START, i), [DUOTONE], tag_text=tag
        )
        for i, tag in enumerate(_LADDER_TAGS)
    ]
    rec = _require(_find(w.records(THEO), *DUOTONE))
    last_seen, decay_at = rec.last_seen, rec.decay_at
    w.step(
        "decay",
        "Theo teaches one preference, then goes quiet",
        f"Four tags in the first week put duotone_photos at {_num(rec.signal_strength)} "
        f"({rec.confidence}), injected. Every signal moves decay_at to {DECAY_DAYS} days after "
        f"it: last_seen is {last_seen}, decay_at is {decay_at}. From here on the walkthrough "
        "passes time explicitly with run_decay(now=...).",
        THEO,
        actions,
        facts={"record": _brief(rec), "last_seen": last_seen, "decay_at": decay_at},
    )

    early = _days_after(last_seen, 60)
    action, written = w.decay(THEO, early)
    w.step(
        "decay",
        "Day 60: nothing is due",
        "A decay pass 60 days after the last signal finds nothing due. Decay is an event in "
        "the log, but a pass that changes nothing writes nothing.",
        THEO,
        [action],
        facts={"decay_result": action.result, "events_written": written, "days": 60},
    )

    action, written = w.decay(THEO, decay_at)
    rec = _require(_find(w.records(THEO), *DUOTONE))
    w.step(
        "decay",
        f"Day {DECAY_DAYS}: one decay step",
        f"At decay_at the pass multiplies the strength by 0.70 ({_num(rec.signal_strength)}) "
        f"and drops the label one rung to {rec.confidence}; decay_at moves {DECAY_DAYS} days "
        "past the pass. The label is not recomputed from the strength, so although "
        f"{_num(rec.signal_strength)} is above {INJECTION_THRESHOLD:.2f} the record is no "
        "longer injected. The pass is stored as a decay_pass event, so derived state stays a "
        "pure function of the log.",
        THEO,
        [action],
        facts={
            "decay_result": action.result,
            "events_written": written,
            "days": DECAY_DAYS,
            "record": _brief(rec),
            "decay_at": rec.decay_at,
        },
    )

    late = _days_after(last_seen, ARCHIVE_DAYS)
    action, written = w.decay(THEO, late)
    rec = _require(_find(w.records(THEO), *DUOTONE))
    w.step(
        "decay",
        f"Day {ARCHIVE_DAYS}: archived",
        f"{ARCHIVE_DAYS} days after last_seen the archive check (which runs before the decay "
        f"check) archives the record. Its strength stays {_num(rec.signal_strength)}; a new "
        "signal on duotone_photos would reactivate it.",
        THEO,
        [action],
        facts={
            "decay_result": action.result,
            "events_written": written,
            "days": ARCHIVE_DAYS,
            "record": _brief(rec),
        },
    )


# -- chapter 6 -------------------------------------------------------------------------------
#: Short names for the features of Rin's profile (preference_type, pattern).
_FEATURES: Final[Mapping[str, tuple[str, str]]] = {
    "airy": ("layout_density", "airy_spacing"),
    "crowded": ("layout_density", "crowded_grids"),
    "serif": ("typography", "serif_headlines"),
    "allcaps": ("typography", "all_caps_body"),
    "condensed": ("typography", "condensed_display"),
    "earth": ("color", "muted_earth_tones"),
    "neon": ("color", "neon_palette"),
    "gradients": ("color", "heavy_gradients"),
    "black": ("color", "pure_black_backgrounds"),
    "rainbow": ("color", "rainbow_accents"),
    "candid": ("imagery", "candid_photography"),
    "handshakes": ("imagery", "stock_handshakes"),
    "fades": ("motion", "subtle_fades"),
    "carousels": ("motion", "autoplay_carousels"),
    "plain": ("copy_tone", "plain_language"),
    "exclaim": ("copy_tone", "exclamation_marks"),
    "rounded": ("component_style", "soft_rounded_corners"),
}

#: (timestamp, wire event, argument, features). The argument is the tag text of a tag, the
#: rating of a thumbs event, and "before => after" copy of an edit. Rin is a brand designer
#: four weeks into using the tool; every row is an event a design tool's pipeline emits.
_Row = tuple[str, str, str, str]
_PROFILE: Final[tuple[_Row, ...]] = (
    ("2026-02-02T10:00:00Z", "generation_accepted", "", "airy serif earth"),
    ("2026-02-02T11:30:00Z", "explicit_tag_applied", "too noisy", "neon carousels"),
    ("2026-02-03T09:15:00Z", "explicit_tag_applied", "keep this style", "airy serif"),
    ("2026-02-03T14:00:00Z", "artifact_edited_and_saved",
     "Unleash Your Brand!!! => Your brand, clearly", "plain fades"),
    ("2026-02-04T10:00:00Z", "explicit_tag_applied", "too heavy", "gradients black"),
    ("2026-02-04T16:20:00Z", "thumbs_rated", "down", "neon gradients"),
    ("2026-02-05T09:40:00Z", "explicit_tag_applied", "not this", "handshakes allcaps"),
    ("2026-02-06T11:00:00Z", "explicit_tag_applied", "too crowded", "crowded"),
    ("2026-02-09T10:10:00Z", "generation_accepted", "", "airy serif earth candid"),
    ("2026-02-09T15:00:00Z", "revert_after_edit", "", "fades"),
    ("2026-02-10T10:30:00Z", "explicit_tag_applied", "too noisy", "neon rainbow carousels"),
    ("2026-02-10T12:00:00Z", "explicit_tag_applied", "love this", "candid rounded earth"),
    ("2026-02-11T09:00:00Z", "artifact_edited_and_saved",
     "Get Started Now! => Start a project", "plain fades"),
    ("2026-02-11T17:45:00Z", "generation_abandoned", "", "carousels crowded"),
    ("2026-02-12T10:00:00Z", "explicit_tag_applied", "wrong direction", "exclaim allcaps"),
    ("2026-02-13T09:30:00Z", "explicit_tag_applied", "too heavy", "gradients black"),
    ("2026-02-16T10:00:00Z", "explicit_tag_applied", "keep this style", "airy serif rounded"),
    ("2026-02-16T14:30:00Z", "explicit_tag_applied", "not this", "handshakes"),
    ("2026-02-17T11:00:00Z", "explicit_tag_applied", "too crowded", "crowded"),
    ("2026-02-18T10:00:00Z", "thumbs_rated", "up", "candid plain"),
    ("2026-02-18T16:00:00Z", "revert_after_edit", "", "fades"),
    ("2026-02-19T09:20:00Z", "explicit_tag_applied", "too noisy", "neon rainbow carousels"),
    ("2026-02-20T10:00:00Z", "artifact_edited_and_saved",
     "OUR SERVICES => What we do", "serif plain"),
    ("2026-02-23T10:00:00Z", "explicit_tag_applied", "wrong direction", "exclaim allcaps"),
    ("2026-02-23T11:00:00Z", "explicit_tag_applied", "love this", "rounded airy candid"),
    ("2026-02-24T09:00:00Z", "explicit_tag_applied", "too noisy", "neon rainbow"),
    ("2026-02-25T10:00:00Z", "explicit_tag_applied", "too heavy", "gradients black"),
    ("2026-02-25T10:05:00Z", "thumbs_rated", "down", "gradients rainbow"),
    ("2026-02-26T15:00:00Z", "explicit_tag_applied", "not this", "handshakes crowded"),
    ("2026-02-26T16:00:00Z", "generation_accepted", "", "earth candid"),
    ("2026-02-27T10:00:00Z", "explicit_tag_applied", "keep this style", "airy serif earth"),
    ("2026-02-27T10:30:00Z", "explicit_tag_applied", "too noisy", "neon"),
    ("2026-02-27T11:00:00Z", "thumbs_rated", "down", "gradients rainbow"),
    ("2026-02-27T14:00:00Z", "explicit_tag_applied", "too heavy", "gradients black"),
    ("2026-02-27T15:00:00Z", "explicit_tag_applied", "wrong direction", "exclaim"),
    ("2026-02-27T16:00:00Z", "artifact_edited_and_saved",
     "Don't miss out! => Questions? Write to us.", "plain"),
    ("2026-02-27T16:30:00Z", "explicit_tag_applied", "love this", "earth"),
)

#: Rin's festival project: neon is the brand there.
_FESTIVAL: Final[tuple[_Row, ...]] = (
    ("2026-03-02T10:00:00Z", "explicit_tag_applied", "love this", "neon condensed"),
    ("2026-03-03T11:00:00Z", "explicit_tag_applied", "save this direction", "neon condensed"),
    ("2026-03-04T15:00:00Z", "generation_accepted", "", "neon condensed"),
    ("2026-03-05T09:30:00Z", "revert_after_edit", "", "neon"),
    ("2026-03-05T16:00:00Z", "explicit_tag_applied", "keep this style", "neon condensed"),
    ("2026-03-06T10:00:00Z", "explicit_tag_applied", "love this", "neon"),
)


def _send_row(
    w: _Walkthrough, user_id: str, row: _Row, project_id: str | None = None
) -> DemoAction:
    ts, event, arg, names = row
    signals = [_FEATURES[n] for n in names.split()]
    diff: dict[str, Any] | None = None
    if event == "artifact_edited_and_saved":
        before, after = arg.split(" => ")
        diff = {"copy": {"before": before, "after": after}}
    return w.send(
        event,
        user_id,
        ts,
        signals,
        project_id=project_id,
        tag_text=arg if event == "explicit_tag_applied" else None,
        rating=arg if event == "thumbs_rated" else None,
        diff=diff,
    )


def _diag(result: RetrievalResult, kind: str) -> dict[str, Any] | None:
    return next((d for d in result.diagnostics if d.get("type") == kind), None)


def _priority_note(recs: Sequence[Preference], trimmed: Sequence[str]) -> list[str]:
    """Explain a positive trimmed below a weaker negative of its type (priority ×1.2)."""
    for p in recs:
        if p.polarity != "positive" or p.pattern not in trimmed:
            continue
        for n in recs:
            if (
                n.polarity == "negative"
                and n.preference_type == p.preference_type
                and n.pattern not in trimmed
                and n.signal_strength < p.signal_strength
                and n.polarity_status == "stable"
            ):
                return [
                    f"Priority, not raw strength, decides: {n.pattern} (−) "
                    f"{_num(n.signal_strength)} counts {_num(n.signal_strength * 1.2)} and "
                    f"outranks {p.pattern} (+) {_num(p.signal_strength)}."
                ]
    return []


def _chapter_profile(w: _Walkthrough) -> None:
    actions = [_send_row(w, RIN, row) for row in _PROFILE]
    w.clock.set("2026-03-02T09:00:00Z")
    recs = w.records(RIN)
    types = sorted({r.preference_type for r in recs})
    eligible = [
        r
        for r in recs
        if r.polarity_status == "stable"
        and r.signal_strength >= INJECTION_THRESHOLD
        and r.confidence != "low"
    ]
    probe = w.store.retrieve_for_injection(RIN)
    polarity = _diag(probe, "diversity_ceiling_applied")
    category = _diag(probe, "category_ceiling_applied")
    parts = [
        f"{len(actions)} host events (accepts, edits, reverts, tags, thumbs, an abandon) "
        f"built {len(recs)} records across {len(types)} preference types. "
        f"{len(eligible)} pass the lifecycle filter (stable, at least "
        f"{INJECTION_THRESHOLD:.2f}, medium or high) and are ranked by priority "
        "(negatives ×1.2)."
    ]
    if polarity is not None:
        parts.append(
            "The polarity ceiling keeps negatives from crowding out positives: "
            f"{polarity['negative_count_before']} negatives are capped to "
            f"{polarity['negative_count_after']}, trimming the weakest "
            f"({', '.join(polarity['trimmed_patterns'])})."
        )
    if category is not None:
        cats = ", ".join(c["category"] for c in category["categories_trimmed"])
        parts.append(
            f"The category ceiling then allows at most {MAX_PER_CATEGORY} records per type: "
            f"{cats} loses {', '.join(category['trimmed_patterns'])}."
        )
        parts.extend(_priority_note(recs, category["trimmed_patterns"]))
    parts.append(
        f"What is left fits the token budget: {len(probe.positives)} Prefer and "
        f"{len(probe.negatives)} Avoid items. Every trim is reported as a diagnostic with "
        "a trace."
    )
    w.step(
        "profile",
        "Rin's profile after four weeks, through all eleven retrieval stages",
        " ".join(parts),
        RIN,
        actions,
        facts={
            "preference_types": types,
            "records": len(recs),
            "eligible": len(eligible),
            "diagnostic_types": [d.get("type") for d in probe.diagnostics],
            "positives": [x.pattern for x in probe.positives],
            "negatives": [x.pattern for x in probe.negatives],
        },
    )


# -- chapter 7 -------------------------------------------------------------------------------
CONDENSED: Final = _FEATURES["condensed"]


def _chapter_project(w: _Walkthrough) -> None:
    actions = [_send_row(w, RIN, row, project_id=FESTIVAL) for row in _FESTIVAL]
    w.clock.set("2026-03-09T09:00:00Z")
    probe = w.store.retrieve_for_injection(RIN, {"project_id": FESTIVAL})
    supp = [d for d in probe.diagnostics if d.get("type") == "project_override_suppression"]
    glob = _require(_find(w.records(RIN), *NEON, scope="global"))
    proj = _require(_find(w.records(RIN), *NEON, scope=f"project:{FESTIVAL}"))
    w.step(
        "project",
        f"A neon festival brand: the {FESTIVAL} project overrides the global avoidance",
        f"Rin starts {FESTIVAL}, a music-festival identity where neon is the brand. Signals "
        f"sent with a project_id land in that project's own records: neon_palette (+) "
        f"{_num(proj.signal_strength)} and condensed_display in {FESTIVAL}. When the host "
        f"retrieves for {FESTIVAL}, every global record with the same type and pattern is "
        f"suppressed for that generation — the global neon_palette (−) "
        f"{_num(glob.signal_strength)} — and a project_override_suppression diagnostic says "
        "so. The block names the project's records on a Project override line.",
        RIN,
        actions,
        context={"project_id": FESTIVAL},
        facts={
            "project_id": FESTIVAL,
            "suppressed": [
                {k: d[k] for k in ("suppressed_pattern", "suppressed_polarity",
                                   "suppressed_strength", "override_polarity",
                                   "override_strength", "trace")}
                for d in supp
            ],
            "project_overrides": [x.pattern for x in probe.project_overrides],
            "global_record": _brief(glob),
            "project_record": _brief(proj),
        },
    )
    r = w.store.retrieve_for_injection(RIN, {"project_id": REPORT})
    w.step(
        "project",
        f"Any other project still avoids neon ({REPORT})",
        f"The override is scoped: retrieving for {REPORT}, a project with no records of its "
        "own, uses the global memory unchanged. neon_palette is an Avoid item again and "
        "there is neither a suppression diagnostic nor a Project override line.",
        RIN,
        context={"project_id": REPORT},
        facts={
            "project_id": REPORT,
            "neon_avoided": any(x.pattern == NEON[1] for x in r.negatives),
            "suppressions": sum(
                1 for d in r.diagnostics if d.get("type") == "project_override_suppression"
            ),
        },
    )


# -- chapter 8 -------------------------------------------------------------------------------
CALM: Final = ("color", "calm_pastels")
BOLD: Final = ("typography", "bold_sans")


def _chapter_pairwise(w: _Walkthrough) -> None:
    neon = _FEATURES["neon"]
    actions = [
        w.send(
            "explicit_tag_applied",
            KAI,
            f"2026-03-10T{9 + i:02d}:00:00Z",
            [neon, BOLD],
            tag_text="not this",
        )
        for i in range(3)
    ]
    actions += [
        w.compare(KAI, f"2026-03-10T{13 + i:02d}:00:00Z", [CALM, BOLD], [neon, BOLD])
        for i in range(3)
    ]
    v1 = {r.pattern for r in w.store.retrieve_for_injection(KAI).negatives}
    w.step(
        "pairwise",
        "Kai rejects neon; the extractor also lists the bold headline font",
        "The host's extractor lists the two most salient features of each artifact, so every "
        "'not this' tag Kai gives a neon poster also lands on its bold_sans headlines. Then, "
        "shown two variants that differ only in palette, Kai picks calm pastels over neon "
        "three times. Version 1 — the prototype, run so far — has no use for comparisons "
        "and can only blame whatever was listed: bold_sans becomes an Avoid item too, a "
        "phantom avoidance that will steer generations away from a font Kai never minded.",
        KAI,
        actions,
        facts={"avoid": sorted(v1)},
    )
    ev = w.store_v2.explain(KAI, *BOLD).evidence or [{}]
    bold = ev[0]
    v2 = {r.pattern for r in w.store_v2.retrieve_for_injection(KAI).negatives}
    w.step(
        "pairwise",
        "The same log, derived with version 3 (the library's default)",
        "Opening the same storage root with derivation version 3 re-derives the memory "
        "without touching an event. Version 3 fits all of Kai's evidence jointly: each tag "
        "is one statement about both listed features, each comparison a contrast in which "
        "the shared bold_sans cancels. Neon explains the choices and most of the tags; "
        f"what is left for bold_sans, {bold.get('estimate', 0.0):+.2f} ± "
        f"{bold.get('sd', 0.0):.2f}, is within its uncertainty, so it is not avoided. Only "
        "neon_palette is injected.",
        KAI,
        store=w.store_v2,
        facts={
            "avoid": sorted(v2),
            "bold_sans_estimate": round(float(bold.get("estimate", 0.0)), 3),
            "bold_sans_sd": round(float(bold.get("sd", 0.0)), 3),
            "neon_palette_strength": round(
                next(
                    r.signal_strength
                    for r in w.store_v2.list_preferences(KAI)
                    if r.pattern == _FEATURES["neon"][1]
                ),
                3,
            ),
        },
    )


# -- output ---------------------------------------------------------------------------------
def demo_document(steps: Sequence[DemoStep]) -> dict[str, Any]:
    """The JSON document of ``--json``: metadata and every step."""
    return {
        "demo": "creative-memory walkthrough",
        "version": __version__,
        "derivation_version": DEMO_DERIVATION_VERSION,
        "clock_start": DEMO_START,
        "users": sorted({s.user_id for s in steps}),
        "steps": [s.to_dict() for s in steps],
    }


def demo_json(steps: Sequence[DemoStep]) -> str:
    """``demo_document`` as indented JSON text (UTF-8 safe, deterministic)."""
    return json.dumps(demo_document(steps), indent=2, ensure_ascii=False) + "\n"


#: Actions shown per step in the human output (the JSON document has all of them).
HUMAN_MAX_ACTIONS: Final = 8


def _status_text(rec: Preference) -> str:
    text = rec.polarity_status.replace("_", " ")
    if rec.shadow_of:
        text = "shadow"
    if rec.reversal_signals:
        text += f", rs {rec.reversal_signals}"
    return text


def _prompt_style(status: str) -> str:
    if status == "injected":
        return "bold green"
    if status.startswith(("trimmed", "dropped", "suppressed", "over")):
        return "magenta"
    return "yellow"


def _records_table(step: DemoStep) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, padding=(0, 1))
    table.add_column("record", no_wrap=True)
    table.add_column("strength", justify="right", no_wrap=True)
    table.add_column("conf", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("prompt", overflow="fold")
    for rec in step.records:
        sign = "+" if rec.polarity == "positive" else "−"
        name = f"{sign} {_key(rec)}"
        if rec.scope != "global":
            name += f" @{rec.scope.removeprefix('project:')}"
        status = step.injection.get(rec.id, "")
        table.add_row(
            Text(name, style="dim" if rec.polarity_status == "archived" else ""),
            _num(rec.signal_strength),
            rec.confidence,
            _status_text(rec),
            Text(status, style=_prompt_style(status)),
        )
    return table


def _actions_grid(actions: Sequence[DemoAction]) -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column()
    shown: list[DemoAction | int] = list(actions)
    if len(actions) > HUMAN_MAX_ACTIONS:
        head, tail = HUMAN_MAX_ACTIONS - 3, 2
        hidden = len(actions) - head - tail
        shown = [*actions[:head], hidden, *actions[-tail:]]
    for a in shown:
        if isinstance(a, int):
            grid.add_row("", Text(f"… {a} more events (every one is in --json)", style="dim"))
            continue
        grid.add_row(a.at[:16].replace("T", " "), Text(a.summary))
        grid.add_row("", Text("→ " + a.outcome, style="dim"))
    return grid


def render_human(steps: Sequence[DemoStep], console: Console) -> None:
    """Print the walkthrough for a person (rich; plain text when not a terminal)."""
    console.print(
        Text.assemble(
            ("creative-memory demo", "bold"),
            f" — a walkthrough on a scratch file store (derivation v{DEMO_DERIVATION_VERSION}, "
            f"the prototype's rules, step by step; the last chapter re-derives with "
            f"v{DEMO_PAIRWISE_VERSION}, the library's default; fixed clock from {DEMO_START}). "
            "Each step shows what the host sent, the user's derived records, the retrieval "
            "diagnostics and the prompt block.",
        )
    )
    chapter = ""
    chapter_no = 0
    for step in steps:
        if step.chapter != chapter:
            chapter = step.chapter
            chapter_no += 1
            console.print()
            console.rule(Text(f"Chapter {chapter_no} · {step.chapter_title}", style="bold cyan"))
        console.print()
        ctx = f" · retrieval for project {step.project_id}" if step.project_id else ""
        if step.derivation_version != DEMO_DERIVATION_VERSION:
            ctx += f" · derivation v{step.derivation_version}"
        console.print(Text(f"Step {step.index} · {step.title}", style="bold"))
        console.print(
            Text(f"{step.user_id} · {step.at[:16].replace('T', ' ')} UTC{ctx}", style="dim")
        )
        console.print(Text(step.narration, style="italic"))
        if step.actions:
            console.print(Padding(_actions_grid(step.actions), (0, 0, 0, 2), expand=False))
        if step.records:
            console.print(Padding(_records_table(step), (1, 0, 0, 2), expand=False))
        else:
            console.print(Text("  (no records)", style="dim"))
        if step.retrieval.diagnostics:
            console.print(Padding(_diagnostics_grid(step), (0, 0, 0, 2), expand=False))
        _print_block(console, step)


def _diagnostics_grid(step: DemoStep) -> Table:
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="magenta", no_wrap=True)
    grid.add_column()
    for d in step.retrieval.diagnostics:
        grid.add_row(f"⚑ {d.get('type')}", Text(str(d.get("trace", ""))))
    return grid


def _print_block(console: Console, step: DemoStep) -> None:
    """The prompt block, verbatim: boxed when it fits, never re-wrapped."""
    label = "prompt block" + (f" (project_id={step.project_id})" if step.project_id else "")
    block = step.prompt_block
    if not block:
        body = Text(EMPTY_BLOCK, style="dim")
    else:
        body = Text(block, no_wrap=True, overflow="ignore")
    widest = max(len(line) for line in (block or EMPTY_BLOCK).splitlines())
    if widest + 4 <= console.width:
        console.print(Panel(body, title=label, title_align="left", box=box.ROUNDED, expand=False))
        return
    console.print(Text(f"── {label} ──", style="dim"))
    console.print(body, no_wrap=True, overflow="ignore", crop=False)
    console.print(Text("──", style="dim"))


#: Width of the plain-text rendering (output that is not a terminal).
TEXT_WIDTH: Final = 100


def render_text(steps: Sequence[DemoStep], width: int = TEXT_WIDTH) -> str:
    """The human rendering as plain text (no colour, no trailing spaces), for pipes/files."""
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=width,
        highlight=False,
        color_system=None,
        force_terminal=False,
        force_jupyter=False,
        legacy_windows=False,
    )
    render_human(steps, console)
    return "".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines())


__all__ = [
    "DEMO_DERIVATION_VERSION",
    "DEMO_PAIRWISE_VERSION",
    "DEMO_START",
    "EMPTY_BLOCK",
    "DemoAction",
    "DemoClock",
    "DemoStep",
    "demo_document",
    "demo_json",
    "injection_status",
    "render_human",
    "render_text",
    "run_demo",
]

