"""``forget`` and ``reset``: erasure for real, and idempotent (docs/cli.md)."""

from __future__ import annotations

import click

from creative_memory.cli.context import State, command, validate_project
from creative_memory.cli.render import emit_json, plural, safe, where
from creative_memory.engine.errors import ValidationError


@command(
    epilog="""\b
Examples:
  creative-memory forget color neon_palette
  creative-memory forget typography condensed_display --project landing
Erasure is real: the events are removed from the log and every cache; forget and re-teach
is the way to change a record (strengths are never edited by hand). Forgetting what is not
there succeeds ("Nothing to forget: ...", exit 0), with "Did you mean ...?" when one of
your records has a close name.
"""
)
@click.argument("preference_type", metavar="TYPE")
@click.argument("pattern")
@click.option(
    "--project", metavar="P", callback=validate_project, help="Forget in this project only."
)
def forget(state: State, preference_type: str, pattern: str, project: str | None) -> None:
    """Erase every raw event about TYPE PATTERN (global memory, or --project's)."""
    result = state.service.forget(state.user, preference_type, pattern, project)
    if state.json:
        emit_json(
            {
                "user_id": result.user_id,
                "preference_type": result.preference_type,
                "pattern": result.pattern,
                "project_id": result.project_id,
                "events_removed": result.events_removed,
                "suggestions": result.suggestions,
                "elsewhere": result.elsewhere,
            }
        )
        return
    what = f"{safe(preference_type)}/{safe(pattern)} in {where(project)}"
    if result.events_removed == 0:
        hint = found_elsewhere(result.elsewhere) or did_you_mean(result.suggestions)
        click.echo(f"Nothing to forget: {result.user_id} has no events about {what}.{hint}")
        return
    click.echo(f"Forgot {what}: {plural(result.events_removed, 'event')} erased.")


@command(
    epilog="""\b
Examples:
  creative-memory reset --confirm                     # everything; memory is re-enabled
  creative-memory reset --confirm --scope global      # global records only
  creative-memory reset --confirm --scope project:landing
Tip: `creative-memory export backup.json` first. The count is what was erased: every
event of that scope, the records derived from them go with them.
"""
)
@click.option("--confirm", is_flag=True, help="Required: erasure is real and cannot be undone.")
@click.option(
    "--scope",
    default="all",
    show_default=True,
    metavar="all|global|project:P",
    help="What to erase.",
)
def reset(state: State, confirm: bool, scope: str) -> None:
    """Erase memory for real (the raw events, not just the records)."""
    try:
        result = state.service.reset(state.user, scope, confirm=confirm)
    except ValidationError as exc:
        if exc.field != "confirm":
            raise
        # the service's words name both surfaces' spellings; here it is the flag
        raise click.UsageError("a reset erases memory for real: confirm it with --confirm") from exc
    if state.json:
        emit_json(
            {
                "user_id": result.user_id,
                "scope": result.scope,
                "events_removed": result.events_removed,
                "events_remaining": result.events_remaining,
            }
        )
        return
    extra = "; memory is enabled" if scope == "all" else ""
    click.echo(
        f"Reset {result.user_id}'s memory (scope {safe(scope)}): "
        f"{plural(result.events_removed, 'event')} erased, {result.events_remaining} left{extra}."
    )


def found_elsewhere(scopes: list[str]) -> str:
    """`` It is in project landing (--project landing).`` for the other scopes that hold
    the pattern (``""`` when none does)."""
    if not scopes:
        return ""
    places = [
        "global memory (without --project)" if s == "global"
        else f"{where(s.removeprefix('project:'))} (--project {safe(s.removeprefix('project:'))})"
        for s in scopes
    ]  # fmt: skip
    return f" It is in {' and '.join(places)}."


def did_you_mean(suggestions: list[str]) -> str:
    """`` Did you mean color/neon_palette?`` (or ``""`` when there is nothing close)."""
    if not suggestions:
        return ""
    return f" Did you mean {' or '.join(safe(s) for s in suggestions)}?"


COMMANDS = (forget, reset)
