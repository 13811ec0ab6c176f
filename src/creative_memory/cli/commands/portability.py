"""``export``, ``import`` and ``migrate``: archives and prototype files (docs/cli.md)."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import click

from creative_memory.cli.context import State, command, validate_user_flag
from creative_memory.cli.errors import one_line
from creative_memory.cli.render import (
    emit_json,
    note,
    plural,
    progress,
    safe,
    settings_doc,
    settings_line,
    write_bytes,
)
from creative_memory.engine.errors import ValidationError


@command(
    epilog="""\b
Examples:
  creative-memory export alice-memory.json
  creative-memory export - | gzip > alice-memory.json.gz     # '-': the archive on stdout
  creative-memory --user alice export /backups/alice-$(date +%F).json
  creative-memory export --to alice-memory.json             # the older spelling, same thing
The archive holds raw events and settings (not the cache) with a SHA-256 checksum. With
'-' stdout holds only the archive; the summary goes to stderr.
"""
)
@click.argument("target", metavar="[FILE|-]", required=False)
@click.option(
    "--to",
    "to",
    metavar="PATH",
    help="Same as FILE (kept so existing scripts keep working).",
)
def export(state: State, target: str | None, to: str | None) -> None:
    """Write one versioned, checksummed archive of your raw events and settings to FILE
    (replaced atomically if it exists; a symlink's target is replaced, a FIFO or device is
    written into) or, with '-', to stdout."""
    if target is not None and to is not None:
        raise click.UsageError("give the archive file once: FILE or --to PATH, not both")
    path = target if target is not None else to
    if path is None:
        raise click.UsageError("missing the archive file: give FILE, '-' for stdout, or --to PATH")
    service = state.service
    to_stdout = path == "-" or _is_stdout(path)
    with progress(f"Exporting {state.user}'s memory", quiet=state.quiet):
        if to_stdout:
            data, result = service.export_archive(state.user)
        else:
            result = service.export_to(state.user, path)
    doc = {
        "user_id": result.user_id,
        "path": path,
        "events": result.events,
        "checksum": result.checksum,
    }
    line = (
        f"Exported {plural(result.events, 'event')} and settings of {result.user_id} to "
        f"{'stdout' if path == '-' else safe(path)}."
    )
    if to_stdout:
        write_bytes(data)
        if not state.quiet:
            note(line)
        return
    if state.json:
        emit_json(doc)
        return
    click.echo(line)


def _is_stdout(path: str) -> bool:
    """Whether ``path`` is the file stdout already writes to (``/dev/stdout``, or ``FILE``
    with ``> FILE``): the archive then goes through stdout, like ``-``, and the summary to
    stderr, so neither overwrites the other."""
    try:
        out = os.fstat(sys.stdout.fileno())
        named = os.stat(path)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return False
    return (named.st_dev, named.st_ino) == (out.st_dev, out.st_ino)


@command(
    "import",
    epilog="""\b
Examples:
  creative-memory import alice-memory.json                  # merge: add missing events
  creative-memory import alice-memory.json --mode replace   # become exactly the archive
  gunzip -c alice-memory.json.gz | creative-memory import -  # '-': the archive from stdin
Everything is validated (format, checksum, hash chain, every event) before anything is
written; a corrupt or tampered archive changes nothing (exit 2).
""",
)
@click.argument(
    "source", metavar="FILE|-", type=click.Path(exists=True, dir_okay=False, allow_dash=True)
)
@click.option(
    "--mode",
    type=click.Choice(["merge", "replace"]),
    default="merge",
    show_default=True,
    help="merge: add only events not already present, keep local settings; replace: the "
    "log and settings become exactly the archive's.",
)
def import_(state: State, source: str, mode: str) -> None:
    """Import an archive written by `export` (e.g. from another machine) from FILE or,
    with '-', from stdin."""
    service = state.service
    label = "stdin" if source == "-" else source
    try:
        with progress(f"Importing {label} ({mode})", quiet=state.quiet):
            if source == "-":
                if sys.stdin.isatty():
                    note("Reading the archive from the terminal; end with Ctrl-D.")
                result = service.import_archive(state.user, sys.stdin.buffer.read(), mode)
            else:
                result = service.import_file(state.user, Path(source), mode)
    except ValidationError as exc:
        raise ValidationError(exc.field, f"cannot import {label}: {one_line(exc)}") from exc
    if state.json:
        emit_json(
            {
                "user_id": result.user_id,
                "path": source,
                "mode": result.mode,
                "archive_user_id": result.archive_user_id,
                "archive_events": result.archive_events,
                "events_added": result.events_added,
                "events_total": result.events_total,
            }
        )
        return
    user, total = result.user_id, result.events_total
    shown = safe(label)
    archive_user = safe(result.archive_user_id)
    origin = f" (archive of {archive_user})" if result.archive_user_id != user else ""
    if mode == "replace":
        click.echo(
            f"Replaced {user}'s memory with {shown}{origin}: {plural(total, 'event')} "
            "and the archive's settings."
        )
        return
    click.echo(
        f"Imported {shown}{origin} into {user}: {plural(result.events_added, 'event')} "
        f"added, {total} in memory."
    )


@command(
    epilog="""\b
Examples:
  creative-memory migrate ~/.od/memory/alice/preferences.json
  creative-memory migrate ~/.od/memory/alice        # a prototype user directory
  creative-memory migrate ~/.od/memory              # a prototype root: <root>/<user>/
  creative-memory --user alice migrate --from-user old_alice ~/.od/memory
Importing twice imports nothing new (idempotent). A file that belongs to another user
(its user_id) is refused unless --from-user names that user. The file's master switch
(memory_enabled) is applied, and the output says when that changed your settings.
"""
)
@click.argument("source", metavar="PATH", type=click.Path(exists=True, path_type=Path))
@click.option(
    "--from-user",
    "from_user",
    metavar="ID",
    callback=validate_user_flag,
    help="Import this prototype user's file into --user (required when the file belongs to "
    "another user; under a prototype root, reads <root>/ID/preferences.json).",
)
def migrate(state: State, source: Path, from_user: str | None) -> None:
    """Import a prototype-era preferences.json (schema 1.0) as legacy events."""
    service = state.service
    try:
        with progress(f"Importing prototype records from {source}", quiet=state.quiet):
            result = service.migrate(state.user, source, from_user=from_user)
    except ValidationError as exc:
        raise ValidationError(exc.field, f"cannot migrate {source}: {one_line(exc)}") from exc
    if state.json:
        emit_json(
            {
                "user_id": result.user_id,
                "path": str(source),
                "file": result.path,
                "file_user_id": result.file_user_id,
                "records_imported": result.records_imported,
                "settings_changed": result.settings_changed,
                "settings": settings_doc(result.settings),
            }
        )
        return
    imported, user = result.records_imported, result.user_id
    owner = result.file_user_id
    origin = f" ({safe(owner)}'s file)" if owner is not None and owner != user else ""
    if imported:
        click.echo(
            f"Imported {plural(imported, 'prototype record')} from {safe(source)}{origin} "
            f"into {user}."
        )
    else:
        click.echo(
            f"Nothing new to import from {safe(source)}{origin} (already imported or empty)."
        )
    if result.settings_changed:
        before, after = result.settings_before, result.settings
        if before.memory_enabled != after.memory_enabled:
            click.echo(
                f"The file's master switch turned memory {'on' if after.memory_enabled else 'OFF'}"
                f" for {user}"
                + ("." if after.memory_enabled else
                   ": nothing is learned or injected until `creative-memory enable`.")
            )  # fmt: skip
        click.echo(f"Settings: {settings_line(settings_doc(after))}")
    version = service.derivation(user).in_force
    if imported and version != "1":
        click.echo(
            f"Note: derivation v{version} reads each record as a statement about that feature: "
            "a prototype hint can weigh more than the prototype gave it. "
            "`creative-memory derivation preview --to 1` shows the prototype's reading "
            '(docs/storage.md, "Prototype import").'
        )


COMMANDS = (export, import_, migrate)
