"""Prompt builders (engine.md §8, design.md §4). Pure string formatting."""

from __future__ import annotations

from .models import RetrievalResult

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
