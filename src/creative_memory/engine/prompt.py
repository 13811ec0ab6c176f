"""Prompt builders (docs/engine.md, "Prompt blocks"). Pure string formatting.

Every stored string a block prints (patterns, the project id) goes through
:func:`~creative_memory.engine.text.escape_line` first, so none can start a new line, a
heading or a terminal escape; for strings that pass validation that is the identity, and
the blocks are byte-exact (docs/engine.md, "Stored strings")."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Final

from creative_memory.engine.constants import CHARS_PER_TOKEN
from creative_memory.engine.diagnostics import summarize_diagnostics as summarize_diagnostics
from creative_memory.engine.errors import ValidationError
from creative_memory.engine.models import Preference, RetrievalResult
from creative_memory.engine.text import escape_line
from creative_memory.engine.timeutil import u16len

_SEP = " \u00b7 "


def build_prompt_block(retrieved: RetrievalResult, project_id: str | None = None) -> str:
    """The prototype's ``[MEMORY CONTEXT]`` block, exactly (docs/engine.md, "Prompt blocks")."""
    if not retrieved.positives and not retrieved.negatives:
        return ""
    lines = ["[MEMORY CONTEXT]"]
    esc = escape_line
    hp: list[str] = []
    mp: list[str] = []
    hn: list[str] = []
    mn: list[str] = []
    for records, high, medium in ((retrieved.positives, hp, mp), (retrieved.negatives, hn, mn)):
        for r in records:  # one pass: each list keeps the records' order
            if r.confidence == "high":
                high.append(esc(r.pattern))
            elif r.confidence == "medium":
                medium.append(esc(r.pattern))
    if hp:
        lines.append("Prefer (high):    " + _SEP.join(hp))
    if mp:
        lines.append("Prefer (medium):  " + _SEP.join(mp))
    if hn:
        lines.append("Avoid (high):     " + _SEP.join(hn))
    if mn:
        lines.append("Avoid (medium):   " + _SEP.join(mn))
    if retrieved.project_overrides and project_id:
        names = ", ".join(esc(r.pattern) for r in retrieved.project_overrides)
        lines.append(f"Project override: {names} active ({esc(project_id)})")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Generation and critique blocks (docs/engine.md, "Prompt blocks").
# ---------------------------------------------------------------------------------------------

GENERATION_HEADING = "## Creative memory (preferences from generation feedback)"

#: The precedence paragraph, word for word (docs/prompt-composition.md).
PRECEDENCE_PARAGRAPH = (
    "The following stylistic preferences have been derived from this user's past "
    "acceptances, edits, tags, and rejections in generation runs. Treat them as "
    "preferences and context, NOT hard rules: when they collide with the active design "
    "system tokens, the brand wins; when they collide with the active skill's workflow, "
    "the skill wins. Project-level preferences take precedence over global ones whenever "
    "both address the same pattern."
)

CRITIQUE_HEADING = "## Creative memory (critique criteria from generation feedback)"

#: The precedence paragraph, worded for critique.
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
        groups.setdefault((own, rec.polarity, rec.confidence), []).append(escape_line(rec.pattern))
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

    Heading, blank line, the precedence paragraph, blank line, then
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
# Composer helpers (docs/prompt-composition.md).
# ---------------------------------------------------------------------------------------------

#: The kinds a host section (or block) can have, as returned by :func:`heading_kind` and
#: :func:`block_role`.
HOST_KINDS: Final = (
    "personal_memory",
    "creative_memory",
    "custom_instructions",
    "brand",
    "craft",
    "skill",
    "project_metadata",
    "other",
)

#: Open Design's composer headings (the text before any `` — <title>`` tail, normalised).
HOST_HEADINGS: Final[Mapping[str, str]] = {
    "personal memory": "personal_memory",
    "creative memory": "creative_memory",
    "custom instructions": "custom_instructions",
    "active design system": "brand",
    "active design system tokens": "brand",
    "active design system visual direction": "brand",
    "reference fixture": "brand",
    "active craft references": "craft",
    "active skill": "skill",
    "active stage": "skill",
    "project metadata": "project_metadata",
}

# Without personal memory the block goes right before the first section of these kinds.
_BEFORE_KINDS: Final = frozenset(
    {"custom_instructions", "brand", "craft", "skill", "project_metadata"}
)
# Where a heading's name ends and its tail (a title, a qualifier) begins.
_TAIL = re.compile(r"[\u2014\u2013:(]| - ")
_LATER_WORDS = re.compile(r"\b(brand|craft|skills?)\b")
_FENCE_OPEN = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")
_FENCE_CLOSE = re.compile(r" {0,3}(`{3,}|~{3,})[ \t]*")
# A thematic break (``---``, ``***``, ``___``) on a line of its own, as hosts put between parts.
_RULE = re.compile(r"(?:(?:-[ \t\r]*){3,}|(?:\*[ \t\r]*){3,}|(?:_[ \t\r]*){3,})(?:\n|$)")


def _normalise(text: str) -> str:
    return " ".join(text.split()).casefold()


def heading_kind(heading: str) -> str:
    """The kind of a heading's text (without its ``#`` marks) in the host's vocabulary.

    Case and whitespace are ignored, and so is a tail after the name: `` — <title>`` (an
    em or en dash, or a spaced hyphen), ``: <name>`` or ``(<qualifier>)``. So
    ``Active design system — Acme``, ``ACTIVE  design system`` and ``Active stage: plan``
    are known, while ``Colors`` or ``Brand`` (a DESIGN.md's own headings) are ``other``.
    The table is in docs/prompt-composition.md.
    """
    norm = _normalise(heading)
    m = _TAIL.search(norm)
    name = norm[: m.start()].strip() if m else norm
    return HOST_HEADINGS.get(name, "other")


def block_heading(block: str) -> str:
    """The normalised heading of a host block: its first line that is neither blank nor a
    ``---`` separator, ``#``s stripped, whitespace collapsed, casefolded. ``""`` when that
    line is no ``#`` heading."""
    rest = block.lstrip()
    while _RULE.match(rest):
        rest = rest.partition("\n")[2].lstrip()
    if not rest.startswith("#"):
        return ""
    line = rest.partition("\n")[0].splitlines()[0]
    return _normalise(line.lstrip("#"))


def block_role(block: str) -> str:
    """Classify a host block (one part of a list) by its first line's heading.

    The host's own vocabulary first (:func:`heading_kind`), then a tolerant fallback for
    hosts that name their blocks differently (``## Brand contract``, ``## Craft: layout``,
    ``## Skills``, any heading level); see docs/prompt-composition.md. One of
    :data:`HOST_KINDS`.
    """
    h = block_heading(block)
    kind = heading_kind(h)
    if kind != "other":
        return kind
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


def _check_block(block: object) -> str:
    if not isinstance(block, str):
        raise ValidationError("block", f"block must be a string, not {type(block).__name__}")
    return block


def insert_memory_block(blocks: Sequence[str], block: str) -> list[str]:
    """A new list with ``block`` placed among a host's ordered system-prompt blocks.

    Each block is one part the host concatenates, classified by :func:`block_role`.
    Immediately after the (last) personal-memory block when there is one; otherwise before
    the first custom-instructions, brand, craft, skill or project-metadata block; otherwise
    last. ``block`` is inserted as it is. A creative-memory block already in ``blocks`` is
    replaced (so composing twice is a no-op). An empty (or blank) ``block`` returns an equal
    copy of ``blocks``. Never mutates ``blocks``. For a host that composes one string, see
    :func:`insert_memory_block_into_prompt`.
    """
    block = _check_block(block)
    if isinstance(blocks, str) or not isinstance(blocks, Sequence):
        raise ValidationError(
            "blocks",
            "blocks must be a list of strings (for one composed prompt string use "
            "insert_memory_block_into_prompt)",
        )
    for i, b in enumerate(blocks):
        if not isinstance(b, str):
            raise ValidationError(f"blocks[{i}]", f"blocks[{i}] must be a string")
    if not block.strip():
        return list(blocks)
    if block_role(block) != "creative_memory":
        raise ValidationError(
            "block", "block must start with a '## Creative memory' heading (see build_*_block)"
        )
    kept = [(b, role) for b in blocks if (role := block_role(b)) != "creative_memory"]
    out = [b for b, _ in kept]
    roles = [role for _, role in kept]
    at = len(out)
    if "personal_memory" in roles:
        at = len(roles) - roles[::-1].index("personal_memory")
    else:
        for i, role in enumerate(roles):
            if role in _BEFORE_KINDS:
                at = i
                break
    out.insert(at, block)
    return out


def _atx_heading(line: str) -> tuple[int, str] | None:
    """``(level, text)`` when ``line`` (without its line break) is an ATX heading."""
    body = line.lstrip(" ")
    if len(line) - len(body) > 3:
        return None
    level = len(body) - len(body.lstrip("#"))
    if not 1 <= level <= 6:
        return None
    rest = body[level:]
    if rest and rest[0] not in " \t":
        return None
    text = rest.strip(" \t")
    closed = text.rstrip("#")
    if closed != text and (not closed or closed[-1] in " \t"):
        text = closed.rstrip(" \t")
    return level, text


def _lines(text: str) -> list[tuple[int, str]]:
    """``(offset, line without its break)`` for every line; only ``\n`` breaks lines (a
    trailing ``\r`` is ignored by the matchers)."""
    out: list[tuple[int, str]] = []
    pos = 0
    for line in text.split("\n"):
        out.append((pos, line.removesuffix("\r")))
        pos += len(line) + 1
    return out


def _fenced(lines: list[tuple[int, str]]) -> list[bool]:
    """Which lines are inside (or delimit) a fenced code block.

    CommonMark fences: a run of 3+ backticks or tildes (indented at most 3 spaces; a
    backtick fence's info string has no backtick) is closed by a run of the same character
    at least as long with nothing after it. A fence that is never closed is not a fence:
    a host prompt concatenates documents, and one unterminated fence in a DESIGN.md must
    not hide every section after it.
    """
    n = len(lines)
    closers: list[tuple[str, int] | None] = []
    for _, line in lines:
        m = _FENCE_CLOSE.fullmatch(line)
        closers.append((m.group(1)[0], len(m.group(1))) if m else None)
    # longest closing run of each character at or after line i
    longest: dict[str, list[int]] = {ch: [0] * (n + 1) for ch in "`~"}
    for i in range(n - 1, -1, -1):
        for ch in "`~":
            longest[ch][i] = longest[ch][i + 1]
        c = closers[i]
        if c is not None and c[1] > longest[c[0]][i]:
            longest[c[0]][i] = c[1]
    inside = [False] * n
    i = 0
    while i < n:
        m = _FENCE_OPEN.fullmatch(lines[i][1])
        if m is None or (m.group(1)[0] == "`" and "`" in m.group(2)):
            i += 1
            continue
        ch, size = m.group(1)[0], len(m.group(1))
        if longest[ch][i + 1] < size:  # never closed: an ordinary line
            i += 1
            continue
        j = i + 1
        while not ((c := closers[j]) is not None and c[0] == ch and c[1] >= size):
            j += 1
        for k in range(i, j + 1):
            inside[k] = True
        i = j + 1
    return inside


def _sections(text: str) -> list[tuple[int, str]]:
    """``(offset, kind)`` of every ``#``/``##`` heading of a known kind outside fences."""
    lines = _lines(text)
    out: list[tuple[int, str]] = []
    for (offset, line), fenced in zip(lines, _fenced(lines), strict=True):
        if fenced:
            continue
        h = _atx_heading(line)
        if h is None or h[0] > 2:
            continue
        kind = heading_kind(h[1])
        if kind != "other":
            out.append((offset, kind))
    return out


def _check_prompt_block(block: str) -> None:
    lines = _lines(block)
    first = _atx_heading(lines[0][1])
    if first is None or first[0] > 2 or heading_kind(first[1]) != "creative_memory":
        raise ValidationError(
            "block",
            "block must start with a '## Creative memory' heading (see build_*_block)",
        )
    for _, line in lines[1:]:
        if _FENCE_OPEN.fullmatch(line):
            raise ValidationError("block", "block must not contain code fences")
        h = _atx_heading(line)
        if h is not None and h[0] <= 2 and heading_kind(h[1]) != "other":
            raise ValidationError(
                "block", f"block must not contain the host heading {line.strip()!r}"
            )


def _blank_line_before(before: str) -> str:
    """What to add after ``before`` so that a blank line (or the start) precedes."""
    if not before:
        return ""
    if not before.endswith("\n"):
        return "\n\n"
    last = before[:-1].rpartition("\n")[2]
    return "" if not last.strip() else "\n"


def remove_memory_block(prompt: str) -> str:
    """``prompt`` without its creative-memory sections (each up to the next heading of a
    known kind: see :func:`insert_memory_block_into_prompt`); every other character kept.
    What a composition with nothing to inject gives a prompt composed earlier
    (docs/prompt-composition.md, "Where the block lands")."""
    if not isinstance(prompt, str):
        raise ValidationError("prompt", f"prompt must be a string, not {type(prompt).__name__}")
    sections = _sections(prompt)
    if not any(kind == "creative_memory" for _, kind in sections):
        return prompt
    kept: list[str] = []
    pos = 0
    for i, (start, kind) in enumerate(sections):
        if kind == "creative_memory":
            kept.append(prompt[pos:start])
            pos = sections[i + 1][0] if i + 1 < len(sections) else len(prompt)
    kept.append(prompt[pos:])
    return "".join(kept)


def insert_memory_block_into_prompt(prompt: str, block: str) -> str:
    """``prompt`` (a host's composed system prompt) with ``block`` inserted in place.

    Sections start at ``#``/``##`` headings of a known kind (:func:`heading_kind`) outside
    fenced code; any other heading belongs to the section it is in. The block goes right
    after the (last) personal-memory section; otherwise right before the first
    custom-instructions, brand, craft, skill or project-metadata section; otherwise at the
    end. An existing creative-memory section is removed first, so inserting twice equals
    inserting once.

    The block (surrounding whitespace stripped) is put on its own lines at the start of the
    heading line it precedes and followed by one blank line; a line break is added before it
    only where the text before does not already end with a blank line. At the end it is
    followed by one line break. Every other character of ``prompt`` is kept; in a prompt
    whose every line ends in ``\r\n``, what is added does too. An empty (or
    blank) ``block`` returns ``prompt`` unchanged. ``block`` must start with a ``#``/``##``
    creative-memory heading and hold no other known heading and no code fence (the
    generation and critique blocks qualify). See docs/prompt-composition.md.
    """
    if not isinstance(prompt, str):
        raise ValidationError("prompt", f"prompt must be a string, not {type(prompt).__name__}")
    text = _check_block(block).strip()
    if not text:
        return prompt
    _check_prompt_block(text)
    prompt = remove_memory_block(prompt)
    sections = _sections(prompt)
    at = len(prompt)
    kinds = [kind for _, kind in sections]
    if "personal_memory" in kinds:
        i = len(kinds) - 1 - kinds[::-1].index("personal_memory")
        if i + 1 < len(sections):
            at = sections[i + 1][0]
    else:
        at = next((start for start, kind in sections if kind in _BEFORE_KINDS), at)
    before, after = prompt[:at], prompt[at:]
    lead = _blank_line_before(before)
    added = lead + text + ("\n\n" if after else "\n")
    if "\n" in prompt and prompt.count("\n") == prompt.count("\r\n"):
        added = added.replace("\r\n", "\n").replace("\n", "\r\n")  # a CRLF prompt stays CRLF
    return before + added + after
