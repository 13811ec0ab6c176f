"""Chapters 5-8: decay and archive, a realistic profile, a project override, pairwise."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from creative_memory.cli.demo.chapters_early import _LADDER_TAGS, NEON
from creative_memory.cli.demo.model import (
    DEMO_PAIRWISE_VERSION,
    DEMO_START,
    FESTIVAL,
    KAI,
    REPORT,
    RIN,
    THEO,
    DemoAction,
    _brief,
    _days_after,
    _find,
    _num,
    _require,
)
from creative_memory.cli.demo.walkthrough import _Walkthrough
from creative_memory.engine.constants import (
    ARCHIVE_DAYS,
    DECAY_DAYS,
    INJECTION_THRESHOLD,
    MAX_PER_CATEGORY,
)
from creative_memory.engine.models import Preference, RetrievalResult

DUOTONE: Final = ("imagery", "duotone_photos")


def _chapter_decay(w: _Walkthrough) -> None:
    actions = [
        w.send("explicit_tag_applied", THEO, _days_after(DEMO_START, i), [DUOTONE], tag_text=tag)
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
    (
        "2026-02-03T14:00:00Z",
        "artifact_edited_and_saved",
        "Unleash Your Brand!!! => Your brand, clearly",
        "plain fades",
    ),
    ("2026-02-04T10:00:00Z", "explicit_tag_applied", "too heavy", "gradients black"),
    ("2026-02-04T16:20:00Z", "thumbs_rated", "down", "neon gradients"),
    ("2026-02-05T09:40:00Z", "explicit_tag_applied", "not this", "handshakes allcaps"),
    ("2026-02-06T11:00:00Z", "explicit_tag_applied", "too crowded", "crowded"),
    ("2026-02-09T10:10:00Z", "generation_accepted", "", "airy serif earth candid"),
    ("2026-02-09T15:00:00Z", "revert_after_edit", "", "fades"),
    ("2026-02-10T10:30:00Z", "explicit_tag_applied", "too noisy", "neon rainbow carousels"),
    ("2026-02-10T12:00:00Z", "explicit_tag_applied", "love this", "candid rounded earth"),
    (
        "2026-02-11T09:00:00Z",
        "artifact_edited_and_saved",
        "Get Started Now! => Start a project",
        "plain fades",
    ),
    ("2026-02-11T17:45:00Z", "generation_abandoned", "", "carousels crowded"),
    ("2026-02-12T10:00:00Z", "explicit_tag_applied", "wrong direction", "exclaim allcaps"),
    ("2026-02-13T09:30:00Z", "explicit_tag_applied", "too heavy", "gradients black"),
    ("2026-02-16T10:00:00Z", "explicit_tag_applied", "keep this style", "airy serif rounded"),
    ("2026-02-16T14:30:00Z", "explicit_tag_applied", "not this", "handshakes"),
    ("2026-02-17T11:00:00Z", "explicit_tag_applied", "too crowded", "crowded"),
    ("2026-02-18T10:00:00Z", "thumbs_rated", "up", "candid plain"),
    ("2026-02-18T16:00:00Z", "revert_after_edit", "", "fades"),
    ("2026-02-19T09:20:00Z", "explicit_tag_applied", "too noisy", "neon rainbow carousels"),
    (
        "2026-02-20T10:00:00Z",
        "artifact_edited_and_saved",
        "OUR SERVICES => What we do",
        "serif plain",
    ),
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
    (
        "2026-02-27T16:00:00Z",
        "artifact_edited_and_saved",
        "Don't miss out! => Questions? Write to us.",
        "plain",
    ),
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
                {
                    k: d[k]
                    for k in (
                        "suppressed_pattern",
                        "suppressed_polarity",
                        "suppressed_strength",
                        "override_polarity",
                        "override_strength",
                        "trace",
                    )
                }
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
    # rounded once, so the narration and the facts show the same numbers
    estimate = round(float(bold.get("estimate", 0.0)), 3)
    sd = round(float(bold.get("sd", 0.0)), 3)
    v2 = {r.pattern for r in w.store_v2.retrieve_for_injection(KAI).negatives}
    w.step(
        "pairwise",
        f"The same log, derived with version {DEMO_PAIRWISE_VERSION} (the library's default)",
        f"Opening the same storage root with derivation version {DEMO_PAIRWISE_VERSION} "
        "re-derives the memory without touching an event. It fits all of Kai's evidence "
        "jointly: each tag is one statement about both listed features (about neither "
        "alone, so it is weighed, not taken at its word), each comparison a contrast in which "
        "the shared bold_sans cancels. Neon explains the choices and most of the tags; "
        f"what is left for bold_sans, {estimate:+.2f} ± "
        f"{sd:.2f}, is within its uncertainty, so it is not avoided. Only "
        "neon_palette is injected.",
        KAI,
        store=w.store_v2,
        facts={
            "avoid": sorted(v2),
            "bold_sans_estimate": estimate,
            "bold_sans_sd": sd,
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
