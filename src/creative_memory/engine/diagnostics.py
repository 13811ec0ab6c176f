"""The diagnostics feed: one line for chat summarising a retrieval's diagnostics, off
unless the user's ``diagnostics_feed`` setting is on (docs/prompt-composition.md,
"Diagnostics feed"). Pure string formatting."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from creative_memory.engine.models import RetrievalResult


def _int(d: Mapping[str, Any], key: str) -> int:
    v = d.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0


def _len(d: Mapping[str, Any], key: str) -> int:
    v = d.get(key)
    return len(v) if isinstance(v, list) else 0


# (diagnostic type, singular noun, plural noun, template) in the order the line lists them.
_FEED_PHRASES: tuple[tuple[str, str, str, str], ...] = (
    (
        "hard_cap_applied",
        "lower-ranked preference",
        "lower-ranked preferences",
        "{} left out (limit reached)",
    ),
    ("diversity_ceiling_applied", "avoidance", "avoidances", "{} trimmed for balance"),
    ("diversity_backfill", "preference", "preferences", "{} brought in for balance"),
    (
        "category_ceiling_applied",
        "preference",
        "preferences",
        "{} trimmed so no single category dominates",
    ),
    ("category_backfill", "preference", "preferences", "{} brought in from other categories"),
    ("token_budget_exceeded", "preference", "preferences", "{} left out to fit the token budget"),
    (
        "project_override_suppression",
        "global preference",
        "global preferences",
        "{} overridden by this project",
    ),
    (
        "project_global_memory_disabled",
        "global preference",
        "global preferences",
        "global memory off for this project ({} not used)",
    ),
)


def summarize_diagnostics(retrieved: RetrievalResult) -> str:
    """A one-line human summary of a retrieval's diagnostics; ``""`` when nothing notable.

    e.g. ``"memory adjusted: 2 avoidances trimmed for balance, 1 global preference
    overridden by this project"``. Unknown diagnostic types are ignored.
    """
    totals: dict[str, int] = {}
    for d in retrieved.diagnostics:
        t = d.get("type")
        if t in ("project_override_suppression", "token_budget_exceeded"):
            k = 1
        elif t == "hard_cap_applied":
            k = _int(d, "dropped")
        elif t == "diversity_ceiling_applied":
            k = _len(d, "trimmed_patterns") or max(
                0, _int(d, "negative_count_before") - _int(d, "negative_count_after")
            )
        elif t in ("diversity_backfill", "category_backfill"):
            k = _int(d, "backfilled_count")
        elif t == "category_ceiling_applied":
            k = _int(d, "total_trimmed") or _len(d, "trimmed_patterns")
        elif t == "project_global_memory_disabled":
            k = _int(d, "ignored_global_count")
        else:
            continue
        if k > 0:
            totals[t] = totals.get(t, 0) + k
    parts = []
    for t, one, many, template in _FEED_PHRASES:
        if t in totals:
            k = totals[t]
            parts.append(template.format(f"{k} {one if k == 1 else many}"))
    if not parts:
        return ""
    return "memory adjusted: " + ", ".join(parts)
