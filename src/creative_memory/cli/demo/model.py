"""The demo's typed results, fixed names, clock and record helpers (docs/cli.md, ``demo``).

The walkthrough itself, and what each chapter shows, is described in the package's
docstring (:mod:`creative_memory.cli.demo`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from creative_memory.engine.constants import (
    DERIVATION_VERSION,
    INJECTION_THRESHOLD,
)
from creative_memory.engine.models import Preference, RetrievalResult
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
DEMO_PAIRWISE_VERSION: Final = DERIVATION_VERSION

_CHAPTERS: Final[Mapping[str, str]] = {
    "fresh": "A fresh user",
    "ladder": "The confidence ladder",
    "negative": "A negative preference",
    "reversal": "The reversal ladder",
    "decay": "Decay and archive",
    "profile": "A realistic profile through the full retrieval",
    "project": "A project override",
    "pairwise": f"Pairwise choices and derivation version {DEMO_PAIRWISE_VERSION}",
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
        """The action as JSON-ready values."""
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
        """The project the step retrieved for, if any."""
        pid = (self.context or {}).get("project_id")
        return pid if isinstance(pid, str) else None

    @property
    def chapter_title(self) -> str:
        """The chapter's title as printed."""
        return _CHAPTERS.get(self.chapter, self.chapter)

    def to_dict(self) -> dict[str, Any]:
        """The step as JSON-ready values (the ``--json`` document's steps)."""
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
        """Move the clock to ``iso``; returns it normalised."""
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


def injection_status(rec: Preference, retrieval: RetrievalResult, project_id: str | None) -> str:
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
