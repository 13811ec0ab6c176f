"""Command line: ``creative-memory`` (alias ``od-memory``).

The group ``main`` is the console-script entry point. Commands stay thin: they parse
options, call the library (or a module such as :mod:`creative_memory.demo`) and print.
Add a command with ``@main.command()`` here, or define it elsewhere and register it with
``main.add_command(...)``.

Exit codes: 0 success; 1 bad input or a storage failure reported by the library (one line on
stderr, no traceback); 2 usage errors (click's default).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from . import __version__
from .errors import CreativeMemoryError


class _Group(click.Group):
    """A click group that turns library errors into one-line messages (exit 1)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (ValueError, CreativeMemoryError) as exc:
            message = " ".join(str(exc).split()) or type(exc).__name__
            raise click.ClickException(message) from exc


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="creative-memory")
def main() -> None:
    """creative-memory: a local, deterministic preference memory for generative design
    tools."""


@main.command(
    epilog="""\b
Examples:
  creative-memory demo            # read the walkthrough
  creative-memory demo --json     # one JSON document, e.g. | jq '.steps[].prompt_block'
  creative-memory demo --keep     # keep the scratch store and print where it is
"""
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of text.")
@click.option(
    "--keep",
    is_flag=True,
    help="Keep the scratch store (its path is printed; on stderr with --json).",
)
def demo(as_json: bool, keep: bool) -> None:
    """Walk through the engine on a scratch file store.

    Creates a store in a temporary directory, feeds it host events on a fixed clock and
    prints, step by step, the records, the retrieval diagnostics and the prompt block:
    a fresh user, the confidence ladder, a negative preference, the reversal ladder with
    its shadow record, decay and archive, a realistic multi-category profile, and a
    project override. The output is identical on every run. The directory is removed
    afterwards unless --keep is given.
    """
    # Imported here so that other commands do not pay for the walkthrough module.
    from .demo import demo_json, render_human, render_text, run_demo

    tmp = Path(tempfile.mkdtemp(prefix="creative-memory-demo-"))
    try:
        steps = run_demo(tmp)
        console = Console(highlight=False)
        if as_json:
            _write_utf8(demo_json(steps))
        elif console.is_terminal:
            render_human(steps, console)
        else:
            _write_utf8(render_text(steps))
        if keep:
            note = f"Scratch store kept at {tmp}"
            if as_json:
                click.echo(note, err=True)
            else:
                click.echo(f"\n{note}")
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)


def _write_utf8(text: str) -> None:
    """Write ``text`` to stdout as UTF-8, whatever the locale says."""
    sys.stdout.flush()
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:  # a text-only stream (e.g. replaced by a host); let it encode
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    buffer.write(text.encode("utf-8"))
    buffer.flush()


if __name__ == "__main__":
    sys.exit(main())
