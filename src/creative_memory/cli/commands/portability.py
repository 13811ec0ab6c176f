"""``export``, ``import`` and ``migrate``: archives and prototype files (docs/cli.md)."""

from __future__ import annotations

from pathlib import Path

import click

from creative_memory.cli.context import State, command
from creative_memory.cli.errors import one_line
from creative_memory.cli.render import emit_json, plural, progress
from creative_memory.engine.errors import ValidationError


@command(
    epilog="""\b
Examples:
  creative-memory export --to alice-memory.json
  creative-memory --user alice export --to /backups/alice-$(date +%F).json
The archive holds raw events and settings (not the cache) with a SHA-256 checksum.
"""
)
@click.option(
    "--to",
    "target",
    required=True,
    metavar="PATH",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Archive file to write (replaced atomically if it exists).",
)
def export(state: State, target: Path) -> None:
    """Write one versioned, checksummed archive of your raw events and settings."""
    service = state.service
    with progress(f"Exporting {state.user}'s memory"):
        result = service.export_to(state.user, target)
    if state.json:
        emit_json(
            {
                "user_id": result.user_id,
                "path": str(target),
                "events": result.events,
                "checksum": result.checksum,
            }
        )
        return
    click.echo(
        f"Exported {plural(result.events, 'event')} and settings of {result.user_id} to {target}."
    )


@command(
    "import",
    epilog="""\b
Examples:
  creative-memory import alice-memory.json                  # merge: add missing events
  creative-memory import alice-memory.json --mode replace   # become exactly the archive
Everything is validated (format, checksum, hash chain, every event) before anything is
written; a corrupt or tampered archive changes nothing (exit 2).
""",
)
@click.argument(
    "source", metavar="PATH", type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.option(
    "--mode",
    type=click.Choice(["merge", "replace"]),
    default="merge",
    show_default=True,
    help="merge: add only events not already present, keep local settings; replace: the "
    "log and settings become exactly the archive's.",
)
def import_(state: State, source: Path, mode: str) -> None:
    """Import an archive written by `export` (e.g. from another machine)."""
    service = state.service
    try:
        with progress(f"Importing {source} ({mode})"):
            result = service.import_file(state.user, source, mode)
    except ValidationError as exc:
        raise ValidationError(exc.field, f"cannot import {source}: {one_line(exc)}") from exc
    if state.json:
        emit_json(
            {
                "user_id": result.user_id,
                "path": str(source),
                "mode": result.mode,
                "archive_user_id": result.archive_user_id,
                "archive_events": result.archive_events,
                "events_added": result.events_added,
                "events_total": result.events_total,
            }
        )
        return
    user, total = result.user_id, result.events_total
    origin = f" (archive of {result.archive_user_id})" if result.archive_user_id != user else ""
    if mode == "replace":
        click.echo(
            f"Replaced {user}'s memory with {source}{origin}: {plural(total, 'event')} "
            "and the archive's settings."
        )
        return
    click.echo(
        f"Imported {source}{origin} into {user}: {plural(result.events_added, 'event')} "
        f"added, {total} in memory."
    )


@command(
    epilog="""\b
Examples:
  creative-memory migrate ~/.od/memory/alice/preferences.json
  creative-memory migrate ~/.od/memory/alice        # a prototype user directory
  creative-memory migrate ~/.od/memory              # a prototype root: <root>/<user>/
Importing twice imports nothing new (idempotent).
"""
)
@click.argument("source", metavar="PATH", type=click.Path(exists=True, path_type=Path))
def migrate(state: State, source: Path) -> None:
    """Import a prototype-era preferences.json (schema 1.0) as legacy events."""
    service = state.service
    try:
        with progress(f"Importing prototype records from {source}"):
            imported = service.migrate(state.user, source)
    except ValidationError as exc:
        raise ValidationError(exc.field, f"cannot migrate {source}: {one_line(exc)}") from exc
    if state.json:
        emit_json({"user_id": state.user, "path": str(source), "records_imported": imported})
        return
    if imported:
        click.echo(
            f"Imported {plural(imported, 'prototype record')} from {source} into {state.user}."
        )
    else:
        click.echo(f"Nothing new to import from {source} (already imported or empty).")


COMMANDS = (export, import_, migrate)
