"""``inspect``, ``explain`` and ``timeline``: what memory holds and why (docs/cli.md)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console
from rich.text import Text

from creative_memory.cli.context import State, command, point_options, validate_project
from creative_memory.cli.render import console as make_console
from creative_memory.cli.render import (
    emit_json,
    point_line,
    progress,
    safe,
    settings_line,
    table,
    where,
)

if TYPE_CHECKING:
    from creative_memory.engine.explain import Explanation

F = TypeVar("F", bound=Callable[..., Any])


@command(
    epilog="""\b
Examples:
  creative-memory inspect
  creative-memory inspect --project landing      # retrieval as that project would get it
  creative-memory inspect --json | jq '.preferences[] | {pattern, signal_strength}'
  creative-memory inspect --at-seq 12             # right after event 12
  creative-memory inspect --as-of 2026-03-01      # as of the end of that day (local time)
JSON shape: docs/inspect.schema.json (with "as_of" for a point in the past).
"""
)
@click.option(
    "--project",
    metavar="P",
    callback=validate_project,
    help="Show retrieval for this project (default: global only).",
)
@point_options
def inspect(state: State, project: str | None, at_seq: int | None, as_of: str | None) -> None:
    """Show settings, every derived record with its provenance, and the retrieval (what
    would be injected now, or at a point in the past) with its diagnostics."""
    doc = state.service.inspect(state.user, project, at_seq=at_seq, as_of=as_of)
    if state.json:
        emit_json(doc)
        return
    console = make_console()
    if doc.get("as_of") is not None:
        console.print(point_line(doc["as_of"], as_of), soft_wrap=True)
    render_inspect(doc, console)


def render_inspect(doc: Mapping[str, Any], console: Console) -> None:
    """The human rendering of an inspect document."""
    prefs: list[dict[str, Any]] = list(doc["preferences"])
    n_events = doc["event_count"]
    console.print(
        Text.assemble(
            (f"Memory of {safe(doc['user_id'])}", "bold"),
            f" · derivation v{doc['derivation_version']} · "
            f"{n_events} event{'s' if n_events != 1 else ''}",
            f" · derived through seq {prefs[0]['last_derived_event_seq']}" if prefs else "",
        )
    )
    console.print(f"Settings: {settings_line(doc['settings'])}")
    console.print()
    if not prefs:
        console.print(Text("Preferences: none yet", style="bold"))
    else:
        console.print(Text(f"Preferences ({len(prefs)})", style="bold"))
        _render_records(prefs, console)
    console.print()
    retrieval = doc["retrieval"]
    where = f"project {safe(doc['project_id'])}" if doc.get("project_id") else "global"
    console.print(Text(f"Retrieval ({where})", style="bold"))
    lines = [
        ("Prefer", retrieval["positives"]),
        ("Avoid", retrieval["negatives"]),
        ("Project overrides", retrieval["project_overrides"]),
    ]
    for label, recs in lines:
        shown = ", ".join(f"{safe(r['pattern'])} ({safe(r['confidence'])})" for r in recs) or "-"
        console.print(f"  {label}: {shown}", soft_wrap=True)
    diagnostics = retrieval["diagnostics"]
    if diagnostics:
        console.print(Text("Diagnostics", style="bold"))
        for d in diagnostics:
            console.print(f"  {safe(d.get('type'))}: {safe(d.get('trace', ''))}", soft_wrap=True)


def _render_records(prefs: list[dict[str, Any]], console: Console) -> None:
    """Records grouped by scope: a table when it fits the width, else two lines each."""
    from rich.cells import cell_len

    headers = ("record", "kind", "strength", "conf", "status", "sources", "last seen", "events")
    wrap_col = headers.index("sources")
    rows: list[tuple[str, ...] | str] = []
    scope = None
    for r in prefs:
        if r["scope"] != scope:
            scope = r["scope"]
            rows.append("global" if scope == "global" else safe(scope.replace(":", " ", 1)))
        status = safe(r["polarity_status"]) + (" (shadow)" if r["shadow_of"] else "")
        rows.append(
            (
                f"  {safe(r['preference_type'])}/{safe(r['pattern'])}",
                "prefer" if r["polarity"] == "positive" else "avoid",
                f"{r['signal_strength']:.2f}",
                safe(r["confidence"]),
                status,
                ", ".join(safe(x) for x in r["sources"]),
                safe(r["last_seen"][:10]),
                str(r["source_event_count"]),
            )
        )
    records = [row for row in rows if not isinstance(row, str)]
    # sources wrap between entries, never inside one; every other column stays whole
    longest_source = max((cell_len(safe(x)) for r in prefs for x in r["sources"]), default=0)
    widths = [
        max([cell_len(h), *(cell_len(row[i]) for row in records)])
        if i != wrap_col
        else max(cell_len(h), longest_source)
        for i, h in enumerate(headers)
    ]
    if sum(widths) + 2 * len(widths) <= console.width:  # with room for rich's padding
        grid = table(*headers)
        grid.columns[wrap_col].min_width = widths[wrap_col]
        for row in rows:
            if isinstance(row, str):
                grid.add_row(Text(row, style="bold"))
            else:
                grid.add_row(*row)
        console.print(grid)
        return
    for row in rows:
        if isinstance(row, str):
            console.print(Text(row, style="bold"))
            continue
        record, kind, strength, conf, status, sources, seen, n = row
        console.print(record, soft_wrap=True)
        console.print(
            f"      {kind} {strength} ({conf}) · {status} · {sources} · last seen {seen} · "
            f"{n} event{'s' if n != '1' else ''}",
            soft_wrap=True,
        )


def about_a_pattern(project_help: str) -> Callable[[F], F]:
    """The arguments TYPE PATTERN, ``--project`` and ``--at-seq`` / ``--as-of`` of a command
    about one pattern (explain, timeline)."""

    def add(fn: F) -> F:
        fn = point_options(fn)
        fn = click.option("--project", metavar="P", callback=validate_project, help=project_help)(
            fn
        )
        fn = click.argument("pattern")(fn)
        return click.argument("preference_type", metavar="TYPE")(fn)

    return add


@command(
    epilog="""\b
Examples:
  creative-memory explain color neon_palette
  creative-memory explain layout_density airy_spacing --project landing
  creative-memory explain color neon_palette --json | jq '.steps[] | {seq, kind}'
  creative-memory explain color neon_palette --at-seq 3   # the story up to event 3
Nothing to explain (no events about the pattern there) exits 1.
"""
)
@about_a_pattern("The project's record, not global.")
def explain(
    state: State,
    preference_type: str,
    pattern: str,
    project: str | None,
    at_seq: int | None,
    as_of: str | None,
) -> None:
    """Why is the record for TYPE PATTERN what it is? Every raw event that contributed and
    what it did (strength before -> after, confidence, reversal, shadow, decay), ending at
    the current record (or the record at a point in the past)."""
    # it fits the memory again at each event of the pattern: seconds on a long history
    with progress(f"Explaining {preference_type}/{pattern}", quiet=state.quiet):
        result = state.service.explain(
            state.user, preference_type, pattern, project, at_seq=at_seq, as_of=as_of
        )
    if state.json:
        emit_json(result.to_dict())
        return
    console = make_console()
    if result.as_of is not None:
        console.print(point_line(result.as_of, as_of), soft_wrap=True)
    render_explanation(result, preference_type, pattern, project, console)


@command(
    epilog="""\b
Examples:
  creative-memory timeline color neon_palette
  creative-memory timeline color neon_palette --project landing --json
Nothing to show (no events about the pattern there) exits 1.
"""
)
@about_a_pattern("The project's events, not global.")
def timeline(
    state: State,
    preference_type: str,
    pattern: str,
    project: str | None,
    at_seq: int | None,
    as_of: str | None,
) -> None:
    """The events of evidence about TYPE PATTERN, oldest first: each signal, comparison or
    imported record that names it, and which way it points — read from the log without
    deriving (milliseconds where explain takes seconds on a long memory)."""
    result = state.service.timeline(
        state.user, preference_type, pattern, project, at_seq=at_seq, as_of=as_of
    )
    if state.json:
        emit_json(result.to_dict())
        return
    console = make_console()
    if result.as_of is not None:
        console.print(point_line(result.as_of, as_of), soft_wrap=True)
    console.print(
        Text(f"Evidence about {safe(preference_type)}/{safe(pattern)} ({where(project)})", "bold")
    )
    grid = table("seq", "time (UTC)", "event", "way")
    for ev in result.events:
        way = {"positive": "+ prefer", "negative": "- avoid"}.get(ev.polarity or "", "both")
        event = safe(ev.signal_type or ev.kind.replace("_", " "))
        grid.add_row(str(ev.seq), _short_ts(ev.at), event, way)
    console.print(grid)
    n = len(result.events)
    console.print(f"{n} event{'s' if n != 1 else ''}")


def render_explanation(
    result: Explanation,
    preference_type: str,
    pattern: str,
    project: str | None,
    console: Console,
) -> None:
    """The human rendering of an explanation: the steps table, then the record now."""
    console.print(
        Text.assemble(
            (f"Why {safe(preference_type)}/{safe(pattern)} ({where(project)})", "bold"),
            f" · derivation v{result.derivation_version}",
        )
    )
    grid = table("seq", "time (UTC)", "event", "record", "what it did", "strength", "conf")
    for step in result.steps:
        event = safe(step.kind.replace("_", " "))
        if step.kind == "joint_fit":  # moved by events about other patterns (the effect
            # says so): the event's features, or the run of events
            event = (
                safe(", ".join(step.about))
                if step.about
                else f"{step.events} events #{step.seq_from}-{step.seq}"
            )
        elif step.signal_type:
            sign = "+" if step.polarity == "positive" else "-"
            event = f"{safe(step.signal_type)} {sign}"
        for i, eff in enumerate(step.effects or [None]):
            if eff is None:
                grid.add_row(str(step.seq), _short_ts(step.at), event, "", "no change", "", "")
                continue
            before = "new" if eff.strength_before is None else f"{eff.strength_before:.2f}"
            conf = (
                safe(eff.confidence_after)
                if eff.confidence_before in (None, eff.confidence_after)
                else f"{safe(eff.confidence_before)} -> {safe(eff.confidence_after)}"
            )
            grid.add_row(
                str(step.seq) if i == 0 else "",
                _short_ts(step.at) if i == 0 else "",
                event if i == 0 else "",
                "prefer" if eff.polarity == "positive" else "avoid",
                ", ".join(safe(a) for a in eff.actions),
                f"{before} -> {eff.strength_after:.2f}",
                conf,
            )
    console.print(grid)
    if result.records:
        console.print("Now:")
        for rec in result.records:
            shadow = f" (shadow of {safe(rec.shadow_of)})" if rec.shadow_of else ""
            kind = "prefer" if rec.polarity == "positive" else "avoid"
            n = rec.source_event_count
            console.print(
                f"  {kind} {rec.signal_strength:.2f} ({safe(rec.confidence)}) · "
                f"{safe(rec.polarity_status)}{shadow} · from {n} event{'s' if n != 1 else ''}, "
                f"derived through seq {rec.last_derived_event_seq}",
                soft_wrap=True,
            )
        for why in result.why_listed:
            if why:
                console.print(f"  ({safe(why)})", soft_wrap=True)
        for ev in result.evidence or []:
            _print_evidence(console, ev)
    else:
        console.print("Now: no record (forgotten or never created)")


def _print_evidence(console: Console, ev: Mapping[str, Any]) -> None:
    """What a fitted estimate (derivation versions 2 and later) rests on, in a few lines,
    and from version 4 on whether it reaches the prompt and why."""
    level = ev["type_level"]
    console.print(
        f"Estimate {ev['estimate']:+.3f} ± {ev['sd']:.3f} (lower bound {ev['lower_bound']:+.3f})"
        + ("" if level is None else f" · type level {level:+.3f}")
        + f" · slab probability {ev['slab_probability']:.2f}"
        + (" · provisional (unary evidence only)" if ev["provisional"] else ""),
        soft_wrap=True,
    )
    for kind, k in ev["kinds"].items():
        console.print(
            f"  {safe(kind)}: {k['for']} for, {k['against']} against · weight {k['weight']} · "
            f"contribution {k['contribution']:+.3f}",
            soft_wrap=True,
        )
    injection = ev.get("injection")  # versions 4 and later: the injection decision
    if injection:
        console.print(f"Prompt: {safe(injection['why'])}", soft_wrap=True)


def _short_ts(ts: str) -> str:
    """``2026-03-01 10:00Z``: minutes, with the zone (stored times are UTC)."""
    return safe(ts[:16].replace("T", " ")) + "Z"


COMMANDS = (inspect, explain, timeline)
