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
8. pairwise choices derived with the default version (5).

Modules: :mod:`.model` (typed results and helpers), :mod:`.walkthrough` (the driver),
:mod:`.chapters_early` and :mod:`.chapters_late` (the script), :mod:`.render` (output).
"""

from __future__ import annotations

from pathlib import Path

from creative_memory.cli.demo.chapters_early import (
    _chapter_fresh,
    _chapter_ladder,
    _chapter_negative,
    _chapter_reversal,
)
from creative_memory.cli.demo.chapters_late import (
    _chapter_decay,
    _chapter_pairwise,
    _chapter_profile,
    _chapter_project,
)
from creative_memory.cli.demo.model import (
    DEMO_DERIVATION_VERSION,
    DEMO_PAIRWISE_VERSION,
    DEMO_START,
    EMPTY_BLOCK,
    DemoAction,
    DemoClock,
    DemoStep,
    injection_status,
)
from creative_memory.cli.demo.render import demo_document, demo_json, render_human, render_text
from creative_memory.cli.demo.walkthrough import _Walkthrough


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
