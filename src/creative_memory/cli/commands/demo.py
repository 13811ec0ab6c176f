"""``demo``: the deterministic walkthrough of the library on a scratch store (docs/cli.md)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import click
from rich.console import Console

from creative_memory.cli.context import State, command
from creative_memory.cli.render import write_utf8


@command(
    epilog="""\b
Examples:
  creative-memory demo            # read the walkthrough
  creative-memory demo --json     # one JSON document, e.g. | jq '.steps[].prompt_block'
  creative-memory demo --keep     # keep the scratch store and print where it is
"""
)
@click.option(
    "--keep",
    is_flag=True,
    help="Keep the scratch store (its path is printed; on stderr with --json).",
)
def demo(state: State, keep: bool) -> None:
    """Walk through the engine on a scratch file store.

    Creates a store in a temporary directory, feeds it host events on a fixed clock and
    prints, step by step, the records, the retrieval diagnostics and the prompt block:
    a fresh user, the confidence ladder, a negative preference, the reversal ladder with
    its shadow record, decay and archive, a realistic multi-category profile, and a
    project override. The output is identical on every run. The directory is removed
    afterwards unless --keep is given. --json prints one JSON document instead of text;
    the global --data-dir and --user do not apply (the store is a scratch one).
    """
    # Imported here so that other commands do not pay for the walkthrough module.
    from creative_memory.cli.demo import demo_json, render_human, render_text, run_demo

    as_json = state.json
    tmp = Path(tempfile.mkdtemp(prefix="creative-memory-demo-"))
    try:
        steps = run_demo(tmp)
        console = Console(highlight=False)
        if as_json:
            write_utf8(demo_json(steps))
        elif console.is_terminal:
            render_human(steps, console)
        else:
            write_utf8(render_text(steps))
        if keep:
            message = f"Scratch store kept at {tmp}"
            if as_json:
                click.echo(message, err=True)
            else:
                click.echo(f"\n{message}")
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)


COMMANDS = (demo,)
