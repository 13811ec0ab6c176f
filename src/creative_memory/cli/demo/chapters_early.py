"""Chapters 1-4: a fresh user, the confidence ladder, a negative preference, reversal."""

from __future__ import annotations

from typing import Final

from creative_memory.cli.demo.model import (
    DEMO_START,
    MAYA,
    _brief,
    _days_after,
    _find,
    _num,
    _require,
)
from creative_memory.cli.demo.walkthrough import _Walkthrough
from creative_memory.engine.constants import (
    INJECTION_THRESHOLD,
)


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
        action = w.send("explicit_tag_applied", MAYA, ts, [AIRY], tag_text=tag)
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
            f'Ladder {i}/4 — "{tag}" on airy_spacing',
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
        f'A thumbs-down (+0.05) and two "too noisy" tags (+0.15 each) build a negative '
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
                "a negative record it walks the original down the reversal ladder. " + narration
            )
        narration += (
            f" airy_spacing (+): {_num(orig.signal_strength)} {orig.confidence}, "
            f"{orig.polarity_status}."
        )
        if shadow is not None:
            narration += f" Shadow (−): {_num(shadow.signal_strength)} {shadow.confidence}."
        w.step(
            "reversal",
            f'Reversal {i}/4 — "too minimal" on airy_spacing',
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
        action = w.send("explicit_tag_applied", MAYA, f"{day}T09:30:00Z", [AIRY], tag_text=tag)
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
