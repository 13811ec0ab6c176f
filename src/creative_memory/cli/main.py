"""Command line: ``creative-memory`` (alias ``od-memory``).

The group ``main`` is the console-script entry point. Commands stay thin: they parse
options into Python values, call :class:`creative_memory.app.service.MemoryService` (the
same service the HTTP API calls) and render its result; ``demo`` walks through the library
itself. The storage root and the user are resolved lazily (:mod:`creative_memory.cli.context`);
exceptions become exit codes in one place (:mod:`creative_memory.cli.errors`).

Reference: docs/cli.md.
"""

from __future__ import annotations

import os
import sys

import click

from creative_memory._version import __version__
from creative_memory.cli.commands import (
    demo,
    derivation,
    erasure,
    ingest,
    inspect,
    portability,
    prompt,
    repair,
    switches,
)
from creative_memory.cli.context import State, global_options
from creative_memory.cli.errors import EXIT_CODES_HELP, Group

__all__ = ["State", "main"]


@click.group(
    cls=Group,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=f"""\b
Storage root (first match wins): --data-dir, $OD_DATA_DIR/memory, $MEMORY_STORAGE_ROOT,
the platform data dir (e.g. ~/.local/share/creative-memory). Never the current directory.
User: --user, $CREATIVE_MEMORY_USER, else your login name.
Global options work before or after the command. Dates without a time mean the end of
that day in your local time zone. NO_COLOR is honoured; --quiet hides progress.

\b
Examples:
  creative-memory whoami                      # who and where
  creative-memory ingest events.jsonl         # teach from host events (JSON lines)
  creative-memory inspect                     # settings, records, retrieval
  creative-memory explain color neon_palette  # why is this record what it is?
  creative-memory prompt --project landing    # the block a generation gets now
  creative-memory inspect --as-of 2026-03-01  # what memory said then
  creative-memory derivation preview --to 2   # what a version switch would change
  creative-memory --json inspect | jq .settings
  creative-memory export - | gzip > backup.json.gz   # '-' is stdout (or stdin) everywhere

\b
Guide: docs/cli.md.
{EXIT_CODES_HELP}
""",
)
@click.version_option(__version__, "--version", prog_name="creative-memory")
@global_options
@click.pass_context
def main(ctx: click.Context) -> None:
    """creative-memory: a local, deterministic preference memory for generative design
    tools. See, steer and erase what it learned about your taste."""
    # One BLAS thread per process unless the environment says otherwise: the fits' small
    # dense solves ran about 2.5x slower with one thread per core on a busy 2-core machine
    # (docs/performance.md). numpy reads this when it is first imported, on the first fit.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    ctx.ensure_object(State)


def _register() -> None:
    from creative_memory.cli.daemon import serve, token, ui

    modules = (switches, inspect, erasure, repair, portability, ingest, prompt, derivation, demo)
    for module in modules:
        for cmd in module.COMMANDS:
            main.add_command(cmd)
    for cmd in (serve, token, ui):
        main.add_command(cmd)


_register()


if __name__ == "__main__":
    sys.exit(main(prog_name="creative-memory"))
