"""The demo's output: one JSON document, the rich rendering and its plain-text form."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from typing import Any, Final

from rich import box
from rich.console import Console
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from creative_memory._version import __version__
from creative_memory.cli.demo.model import (
    DEMO_DERIVATION_VERSION,
    DEMO_PAIRWISE_VERSION,
    DEMO_START,
    EMPTY_BLOCK,
    DemoAction,
    DemoStep,
    _key,
    _num,
)
from creative_memory.engine.models import Preference


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
