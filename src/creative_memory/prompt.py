"""Prompt builders (engine.md §8, design.md §4). Pure string formatting."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from .constants import CHARS_PER_TOKEN
from .models import Preference, RetrievalResult
from .timeutil import u16len

_SEP = " \u00b7 "


def build_prompt_block(retrieved: RetrievalResult, project_id: str | None = None) -> str:
    """The prototype's ``[MEMORY CONTEXT]`` block, exactly (engine.md §8)."""
    if not retrieved.positives and not retrieved.negatives:
        return ""
    lines = ["[MEMORY CONTEXT]"]
    hp = [r.pattern for r in retrieved.positives if r.confidence == "high"]
    mp = [r.pattern for r in retrieved.positives if r.confidence == "medium"]
    hn = [r.pattern for r in retrieved.negatives if r.confidence == "high"]
    mn = [r.pattern for r in retrieved.negatives if r.confidence == "medium"]
    if hp:
        lines.append("Prefer (high):    " + _SEP.join(hp))
    if mp:
        lines.append("Prefer (medium):  " + _SEP.join(mp))
    if hn:
        lines.append("Avoid (high):     " + _SEP.join(hn))
    if mn:
        lines.append("Avoid (medium):   " + _SEP.join(mn))
    if retrieved.project_overrides and project_id:
        names = ", ".join(r.pattern for r in retrieved.project_overrides)
        lines.append(f"Project override: {names} active ({project_id})")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Generation and critique blocks (design.md §4; seed decisions A3, B1 and C).
# ---------------------------------------------------------------------------------------------

GENERATION_HEADING = "## Creative memory (preferences from generation feedback)"

#: The seed's "Decision C" wording, word for word (its markdown soft wraps joined by spaces).
PRECEDENCE_PARAGRAPH = (
    "The following stylistic preferences have been derived from this user's past "
    "acceptances, edits, tags, and rejections in generation runs. Treat them as "
    "preferences and context, NOT hard rules: when they collide with the active design "
    "system tokens, the brand wins; when they collide with the active skill's workflow, "
    "the skill wins. Project-level preferences take precedence over global ones whenever "
    "both address the same pattern."
)

CRITIQUE_HEADING = "## Creative memory (critique criteria from generation feedback)"

#: Decision C's precedence clause, worded for critique.
CRITIQUE_PRECEDENCE_PARAGRAPH = (
    "The following stylistic preferences have been derived from this user's past "
    "acceptances, edits, tags, and rejections in generation runs. Use them to critique "
    "the work as preferences and context, NOT hard rules: when they collide with the "
    "active design system tokens, the brand wins; when they collide with the active "
    "skill's workflow, the skill wins. Project constraints take precedence over the "
    "user's global preferences whenever both address the same pattern. Check the work "
    "against the Avoid items first; the Prefer items are supporting context."
)

# (project-scoped?, polarity, confidence, label) in output order. Low confidence never shows.
_Line = tuple[bool, str, str, str]

_GENERATION_LINES: tuple[_Line, ...] = (
    (False, "positive", "high", "Prefer (high): "),
    (False, "positive", "medium", "Prefer (medium): "),
    (False, "negative", "high", "Avoid (high): "),
    (False, "negative", "medium", "Avoid (medium): "),
    (True, "positive", "high", "This project prefers (high): "),
    (True, "positive", "medium", "This project prefers (medium): "),
    (True, "negative", "high", "This project avoids (high): "),
    (True, "negative", "medium", "This project avoids (medium): "),
)

_CRITIQUE_LINES: tuple[_Line, ...] = (
    (False, "negative", "high", "Avoid (high): "),
    (False, "negative", "medium", "Avoid (medium): "),
    (True, "negative", "high", "This project says avoid (high): "),
    (True, "negative", "medium", "This project says avoid (medium): "),
    (True, "positive", "high", "This project says prefer (high): "),
    (True, "positive", "medium", "This project says prefer (medium): "),
    (False, "positive", "high", "Prefer (high, supporting context): "),
    (False, "positive", "medium", "Prefer (medium, supporting context): "),
)


def estimate_tokens(text: str) -> int:
    """The retrieval's chars/4 estimate (``ceil(u16len / CHARS_PER_TOKEN)``)."""
    return math.ceil(u16len(text) / CHARS_PER_TOKEN)


def _fixed_overhead(heading: str, paragraph: str, lines: tuple[_Line, ...]) -> int:
    # Everything a block can contain that is not a pattern: heading, blank lines, paragraph,
    # every label with its newline. Each pattern costs at most ceil((len + 3) / 4) more (the
    # " · " separator), which retrieval already over-counts as ceil(len / 4) + 5.
    fixed = heading + "\n\n" + paragraph + "\n\n" + "".join(label + "\n" for *_, label in lines)
    return estimate_tokens(fixed)


#: Estimated tokens of the generation block's fixed wording (heading, paragraph, all labels).
GENERATION_OVERHEAD_TOKENS: Final = _fixed_overhead(
    GENERATION_HEADING, PRECEDENCE_PARAGRAPH, _GENERATION_LINES
)
#: Estimated tokens of the critique block's fixed wording (heading, paragraph, all labels).
CRITIQUE_OVERHEAD_TOKENS: Final = _fixed_overhead(
    CRITIQUE_HEADING, CRITIQUE_PRECEDENCE_PARAGRAPH, _CRITIQUE_LINES
)


def _is_projects(rec: Preference, project_id: str | None) -> bool | None:
    """True: the project's record; False: global; None: another project's (left out)."""
    if not rec.scope.startswith("project:"):
        return False
    if project_id is None or rec.scope == "project:" + project_id:
        return True
    return None


def _render(
    retrieved: RetrievalResult,
    project_id: str | None,
    heading: str,
    paragraph: str,
    spec: tuple[_Line, ...],
) -> str:
    groups: dict[tuple[bool, str, str], list[str]] = {}
    for rec in (*retrieved.positives, *retrieved.negatives):
        own = _is_projects(rec, project_id)
        if own is None:
            continue
        groups.setdefault((own, rec.polarity, rec.confidence), []).append(rec.pattern)
    lines = [
        label + _SEP.join(groups[(own, pol, conf)])
        for own, pol, conf, label in spec
        if (own, pol, conf) in groups
    ]
    if not lines:
        return ""
    return heading + "\n\n" + paragraph + "\n\n" + "\n".join(lines)


def build_generation_block(retrieved: RetrievalResult, project_id: str | None = None) -> str:
    """The ``## Creative memory (preferences from generation feedback)`` block.

    Heading, blank line, the seed's precedence paragraph (Decision C), blank line, then
    ``Prefer`` / ``Avoid`` lines by confidence tier (high before medium; low skipped), the
    global records first and the project's (scope ``project:…``) after them. With
    ``project_id`` only records of that project count as the project's; another project's
    records are left out. ``""`` when nothing is injectable. Patterns keep retrieval's order.
    """
    return _render(
        retrieved, project_id, GENERATION_HEADING, PRECEDENCE_PARAGRAPH, _GENERATION_LINES
    )


def build_critique_block(retrieved: RetrievalResult, project_id: str | None = None) -> str:
    """The evaluative variant of :func:`build_generation_block` over the same retrieval.

    Avoid items first (the user's, then ``This project says avoid``), then the project's
    preferences as project constraints (``This project says prefer``), then the user's
    preferences as supporting context. ``""`` when nothing is injectable.
    """
    return _render(
        retrieved, project_id, CRITIQUE_HEADING, CRITIQUE_PRECEDENCE_PARAGRAPH, _CRITIQUE_LINES
    )


# ---------------------------------------------------------------------------------------------
# Composer helper (seed decision B1; docs/prompt-composition.md).
# ---------------------------------------------------------------------------------------------

_LATER_WORDS = re.compile(r"\b(brand|craft|skills?)\b")


def block_heading(block: str) -> str:
    """The normalised heading of a host block: first non-blank line, ``#``s stripped,
    whitespace collapsed, casefolded. ``""`` when the block has no ``#`` heading."""
    rest = block.lstrip()
    if not rest.startswith("#"):
        return ""
    line = rest.partition("\n")[0].splitlines()[0]
    return " ".join(line.lstrip("#").split()).casefold()


def block_role(block: str) -> str:
    """Classify a host block by its heading (tolerant, see docs/prompt-composition.md):
    ``personal_memory``, ``creative_memory``, ``custom_instructions``, ``brand``, ``craft``,
    ``skill`` or ``other``."""
    h = block_heading(block)
    if h.startswith("personal memory"):
        return "personal_memory"
    if h.startswith("creative memory"):
        return "creative_memory"
    if h.startswith("custom instructions"):
        return "custom_instructions"
    if h.startswith("design system"):
        return "brand"
    m = _LATER_WORDS.search(h)
    if m:
        return "skill" if m.group(1).startswith("skill") else m.group(1)
    return "other"


def insert_memory_block(blocks: Sequence[str], block: str) -> list[str]:
    """A new list with ``block`` placed among a host's ordered system-prompt blocks.

    Immediately after the (last) ``## Personal memory`` block when there is one; otherwise
    before the first custom-instructions, brand, craft or skill block; otherwise last. A
    creative-memory block already in ``blocks`` is replaced (so composing twice is a no-op).
    An empty (or blank) ``block`` returns an equal copy of ``blocks``. Never mutates ``blocks``.
    """
    if not block.strip():
        return list(blocks)
    kept = [(b, role) for b in blocks if (role := block_role(b)) != "creative_memory"]
    out = [b for b, _ in kept]
    roles = [role for _, role in kept]
    at = len(out)
    if "personal_memory" in roles:
        at = len(roles) - roles[::-1].index("personal_memory")
    else:
        for i, role in enumerate(roles):
            if role in ("custom_instructions", "brand", "craft", "skill"):
                at = i
                break
    out.insert(at, block)
    return out


# ---------------------------------------------------------------------------------------------
# Diagnostics feed (one line for chat; off unless the user's ``diagnostics_feed`` is on).
# ---------------------------------------------------------------------------------------------


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
