"""``whoami`` and the switches: enable, disable, pause, resume, project-disable/enable,
``config diagnostics-feed`` (docs/cli.md)."""

from __future__ import annotations

import click

from creative_memory.cli.context import (
    DATE_HELP,
    State,
    command,
    global_options,
    parse_date,
    validate_project,
)
from creative_memory.cli.errors import Group
from creative_memory.cli.render import emit_json, local_time, report_settings, safe

#: How a switch that changed nothing ends its message (exit 0, ``"changed": false``).
NO_CHANGE = "nothing changed."


@command(
    epilog="""\b
Examples:
  creative-memory whoami
  creative-memory --user alice --data-dir /srv/memory whoami
  creative-memory whoami --json
"""
)
def whoami(state: State) -> None:
    """Show the user the CLI acts for and where their memory lives (the storage root, or
    the database with its password hidden), with where each came from."""
    from creative_memory.app.paths import redact_url
    from creative_memory.engine.constants import DERIVATION_VERSION

    user = state.resolved_user
    database = state.database
    version = state.derivation_version or DERIVATION_VERSION
    doc: dict[str, object] = {"user_id": user.user_id, "user_source": user.source}
    if database is not None:
        shown = redact_url(database[0])
        doc.update(storage="postgresql", database=shown, database_source=database[1])
    else:
        root = state.root
        doc.update(
            storage="files",
            data_dir=str(root.path),
            data_dir_source=root.source,
            data_dir_exists=root.path.is_dir(),
        )
    doc["derivation_version"] = version
    if state.json:
        emit_json(doc)
        return
    click.echo(f"user      {safe(user.user_id)}  ({safe(user.source)})")
    if database is not None:
        click.echo(f"database  {safe(doc['database'])}  ({safe(database[1])})")
    else:
        click.echo(f"data dir  {safe(doc['data_dir'])}  ({safe(doc['data_dir_source'])})")


@command(
    epilog="""\b
Examples:
  creative-memory enable
  creative-memory --user alice enable --json
"""
)
def enable(state: State) -> None:
    """Turn memory on (learning and injection)."""
    update = state.service.set_enabled(state.user, True)
    message = (
        f"Memory enabled for {state.user}."
        if update.changed
        else f"Memory is already enabled for {state.user}; {NO_CHANGE}"
    )
    report_settings(state, update.settings, message, changed=update.changed)


@command(
    epilog="""\b
Examples:
  creative-memory disable          # nothing learned, nothing injected, nothing deleted
  creative-memory enable           # back on, everything still there
"""
)
def disable(state: State) -> None:
    """Turn memory off: nothing is learned or injected; nothing is deleted."""
    update = state.service.set_enabled(state.user, False)
    message = (
        f"Memory disabled for {state.user}: nothing learned or injected, nothing deleted."
        if update.changed
        else f"Memory is already disabled for {state.user}; {NO_CHANGE}"
    )
    report_settings(state, update.settings, message, changed=update.changed)


@command(
    epilog="""\b
Examples:
  creative-memory pause                          # until `creative-memory resume`
  creative-memory pause --until 2026-03-15       # through the end of that day, local time
  creative-memory pause --until 2026-03-15T18:00:00+01:00
A date in the past is refused (exit 2). Pausing again with the same end changes nothing.
"""
)
@click.option(
    "--until", metavar="DATE", callback=parse_date, help=f"Resume by itself at {DATE_HELP}."
)
def pause(state: State, until: str | None) -> None:
    """Pause learning (events are dropped, not stored); injection continues."""
    update = state.service.pause(state.user, until)
    span = f"until {local_time(until)}" if until else "until you run `creative-memory resume`"
    injection = (
        "injection continues."
        if update.settings.memory_enabled
        else "memory is off, so nothing is injected either (`creative-memory enable`)."
    )
    message = (
        f"Learning paused for {state.user} {span}; {injection}"
        if update.changed
        else f"Learning is already paused for {state.user} {span}; {NO_CHANGE}"
    )
    report_settings(state, update.settings, message, changed=update.changed)


@command(
    epilog="""\b
Examples:
  creative-memory resume
Resuming when learning is not paused changes nothing (exit 0).
"""
)
def resume(state: State) -> None:
    """Resume learning after a pause."""
    update = state.service.resume(state.user)
    message = (
        f"Learning resumed for {state.user}."
        if update.changed
        else f"Learning was not paused for {state.user}; {NO_CHANGE}"
    )
    report_settings(state, update.settings, message, changed=update.changed)


@command(
    "project-disable",
    epilog="""\b
Examples:
  creative-memory project-disable client-acme    # only client-acme's own records apply there
  creative-memory project-enable client-acme
""",
)
@click.argument("project", callback=validate_project)
def project_disable(state: State, project: str) -> None:
    """Make retrieval for PROJECT ignore global memory (its own records still apply).

    PROJECT does not need any memory yet: a host project can opt out before its first
    generation."""
    toggle = state.service.set_project_ignores_global(state.user, project, True)
    message = (
        f"Project {project} now ignores {state.user}'s global memory."
        if toggle.changed
        else f"Project {project} already ignores {state.user}'s global memory; {NO_CHANGE}"
    )
    report_settings(state, toggle.settings, message, changed=toggle.changed)


@command(
    "project-enable",
    epilog="""\b
Examples:
  creative-memory project-enable client-acme
""",
)
@click.argument("project", callback=validate_project)
def project_enable(state: State, project: str) -> None:
    """Let retrieval for PROJECT use global memory again (undoes project-disable)."""
    toggle = state.service.set_project_ignores_global(state.user, project, False)
    if toggle.changed:
        message = f"Project {project} uses {state.user}'s global memory again."
    else:
        message = f"Project {project} was not disabled; {NO_CHANGE}"
    report_settings(state, toggle.settings, message, changed=toggle.changed)


@click.group(
    cls=Group,
    epilog="""\b
Examples:
  creative-memory config diagnostics-feed on
  creative-memory config diagnostics-feed        # show the current value
""",
)
@global_options
@click.pass_context
def config(ctx: click.Context) -> None:
    """Per-user settings."""
    ctx.ensure_object(State)


@command(
    "diagnostics-feed",
    epilog="""\b
Examples:
  creative-memory config diagnostics-feed on     # one summary line per retrieval in chat
  creative-memory config diagnostics-feed off    # the default
  creative-memory config diagnostics-feed        # show the current value
""",
)
@click.argument("value", required=False, type=click.Choice(["on", "off"]))
def diagnostics_feed(state: State, value: str | None) -> None:
    """Switch the one-line diagnostics summary for chat on or off (off by default)."""
    if value is None:
        view = state.service.settings(state.user)
        current = "on" if view.diagnostics_feed else "off"
        report_settings(state, view, f"Diagnostics feed is {current} for {state.user}.")
        return
    update = state.service.set_diagnostics_feed(state.user, value == "on")
    message = (
        f"Diagnostics feed is now {value} for {state.user}."
        if update.changed
        else f"Diagnostics feed is already {value} for {state.user}; {NO_CHANGE}"
    )
    report_settings(state, update.settings, message, changed=update.changed)


config.add_command(diagnostics_feed)

COMMANDS = (whoami, enable, disable, pause, resume, project_disable, project_enable, config)
