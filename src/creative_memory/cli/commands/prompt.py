"""``prompt`` and ``decay``: the block a generation gets now, and one decay pass
(docs/cli.md, docs/prompt-composition.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from creative_memory.cli.context import (
    DATE_HELP,
    State,
    command,
    parse_date,
    point_options,
    validate_project,
)
from creative_memory.cli.render import emit_json, note, point_line, safe, write_utf8
from creative_memory.engine.errors import ValidationError
from creative_memory.engine.timeutil import format_ts


def read_host_prompt(path: str) -> str:
    """The host prompt in ``path`` (``-``: stdin) exactly as it is: UTF-8, no newline
    translation."""
    stdin = path == "-"
    if stdin and sys.stdin.isatty():
        note("Reading the host prompt from the terminal; end with Ctrl-D.")
    data = sys.stdin.buffer.read() if stdin else Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        where = "stdin" if stdin else path
        raise ValidationError("host_prompt", f"{where} is not UTF-8 text ({exc.reason})") from None


@command(
    epilog="""\b
Examples:
  creative-memory prompt                       # the generation block
  creative-memory prompt --project landing
  creative-memory prompt --critique            # the evaluative variant
  creative-memory prompt --legacy              # the prototype's [MEMORY CONTEXT] block
  creative-memory prompt --host-prompt system.md > composed.md
  compose-host | creative-memory prompt --critique --host-prompt -
  creative-memory prompt --as-of 2026-03-01    # the block as it was then (point on stderr)
Prints nothing (and a note on stderr) when nothing is injectable; with --host-prompt it
prints the host prompt unchanged then.
"""
)
@click.option("--project", metavar="P", callback=validate_project, help="Retrieve for P.")
@click.option("--critique", is_flag=True, help="The critique block.")
@click.option("--legacy", is_flag=True, help="The prototype's [MEMORY CONTEXT] block.")
@click.option(
    "--host-prompt",
    "host_prompt",
    metavar="FILE",
    type=click.Path(exists=True, dir_okay=False, allow_dash=True),
    help="Insert the block into the host's composed system prompt in FILE ('-': stdin) "
    "and print the whole prompt (docs/prompt-composition.md).",
)
@point_options
def prompt(
    state: State,
    project: str | None,
    critique: bool,
    legacy: bool,
    host_prompt: str | None,
    at_seq: int | None,
    as_of: str | None,
) -> None:
    """Print the memory block a generation (or critique) would get now (or got at a point
    in the past)."""
    if critique and legacy:
        raise click.UsageError("--critique and --legacy are mutually exclusive")
    variant = "critique" if critique else "legacy" if legacy else "generation"
    service = state.service
    host_text = None if host_prompt is None else read_host_prompt(host_prompt)
    if host_text is None:
        result = service.prompt(state.user, project, variant, at_seq=at_seq, as_of=as_of)
    else:
        result = service.compose(
            state.user, host_text, project, variant, at_seq=at_seq, as_of=as_of
        )
    if state.json:
        doc: dict[str, Any] = {
            "user_id": state.user,
            "project_id": result.project_id,
            "variant": result.variant,
            "block": result.block,
            "diagnostics_feed": result.diagnostics_feed,
        }
        if result.prompt is not None:
            doc["prompt"] = result.prompt
        if result.as_of is not None:
            import msgspec

            doc["as_of"] = msgspec.to_builtins(result.as_of)
        emit_json(doc)
        return
    if result.as_of is not None:
        import msgspec

        note(point_line(msgspec.to_builtins(result.as_of), as_of))
    if result.prompt is not None:
        write_utf8(result.prompt)
    elif result.block:
        write_utf8(result.block + "\n")
    if not result.block:
        what = "no memory block"
        if result.prompt is not None:
            what = (
                "the host prompt is unchanged"
                if result.prompt == host_text
                else "the memory block composed earlier is removed"
            )
        note(f"({what}: {_why_empty(state, project, past=result.as_of is not None)})")
    if result.diagnostics_feed:
        note(result.diagnostics_feed)


def _why_empty(state: State, project: str | None, *, past: bool) -> str:
    """Why a memory block is empty: memory off, the project ignoring global memory, or
    nothing confident enough (``past``: at a point in the past, which today's switches
    apply to as well: docs/time-travel.md)."""
    nothing = "nothing was injectable then" if past else "nothing is injectable right now"
    settings = state.service.settings(state.user)
    if not settings.memory_enabled:
        return "memory is off; `creative-memory enable` turns it on"
    if project is not None and project in settings.disabled_projects:
        return (
            f"{nothing} in project {safe(project)}, which ignores global memory; "
            f"`creative-memory project-enable {safe(project)}` lets it use it"
        )
    return nothing


@command(
    epilog="""\b
Examples:
  creative-memory decay                          # at the current time
  creative-memory decay --now 2026-09-01         # as of a given time
A pass that changes nothing stores nothing.
"""
)
@click.option("--now", metavar="DATE", callback=parse_date, help=f"Run as of {DATE_HELP}.")
def decay(state: State, now: str | None) -> None:
    """Run one decay pass (stale records weaken, very stale ones are archived)."""
    service = state.service
    at = now or format_ts(service.store.now_ms())
    result = service.decay(state.user, at)
    if state.json:
        emit_json({"user_id": state.user, "now": at, **result.to_dict()})
        return
    click.echo(f"Decay pass at {at}: {result.decayed} decayed, {result.archived} archived.")


COMMANDS = (prompt, decay)
