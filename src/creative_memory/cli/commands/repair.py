"""``check`` and ``repair``: what is wrong with a stored memory, and a log without what is
not an event (docs/cli.md, "check and repair")."""

from __future__ import annotations

import click
import msgspec

from creative_memory.app.results import CheckResult, RepairResult
from creative_memory.cli.context import State, command
from creative_memory.cli.render import emit_json, plural, progress, safe
from creative_memory.engine.errors import ValidationError
from creative_memory.engine.logcheck import LogProblem

#: How each kind of problem reads in a line of the report.
KIND_WORDS = {
    "unreadable": "not an event",
    "altered": "edited",
    "out_of_order": "out of order",
    "header": "bad header",
    "settings": "settings do not load",
    "version": "unknown derivation version",
}


@command(
    epilog="""\b
Examples:
  creative-memory check
  creative-memory check --json
  creative-memory check --all-users --database "$CREATIVE_MEMORY_DATABASE_URL"
Reads the whole log and writes nothing (--all-users: every user's). Exit 0 when nothing
is wrong, 1 when something is: a line that is not an event, an event edited outside
creative-memory, events out of order, a header or settings that do not load, settings
naming an unknown derivation version. `creative-memory repair --confirm` mends the rest.
"""
)
@click.option(
    "--all-users",
    is_flag=True,
    help="Check every user of the data dir (or database), not only --user.",
)
def check(state: State, all_users: bool) -> None:
    """Check the stored memory: the log line by line, and the settings."""
    if all_users:
        with progress("Checking every user's memory", quiet=state.quiet):
            results = state.service.check_all()
        if state.json:
            emit_json(
                {
                    "healthy": all(r.healthy for r in results),
                    "users": [msgspec.to_builtins(r) for r in results],
                }
            )
        else:
            bad = [r for r in results if not r.healthy]
            click.echo(
                f"{plural(len(results), 'user')}: {len(results) - len(bad)} healthy, "
                f"{len(bad)} with problems."
            )
            for result in results:
                _report_check(result, others=True)
        if any(not r.healthy for r in results):
            raise click.exceptions.Exit(1)
        return
    with progress(f"Checking {state.user}'s memory", quiet=state.quiet):
        result = state.service.check(state.user)
    if state.json:
        emit_json(msgspec.to_builtins(result))
    else:
        _report_check(result)
    if not result.healthy:
        raise click.exceptions.Exit(1)


@command(
    epilog="""\b
Examples:
  creative-memory repair --confirm
  creative-memory repair --confirm --save-dropped dropped-lines.jsonl
A repair drops the lines that are not events (--save-dropped writes them to FILE first),
keeps events edited outside creative-memory as they read now and chains the log again,
numbers events out of order on after the highest number used, and writes a new header
when the old one does not load. Settings that no longer load are written anew with memory
off (turn it on with `enable`); settings of a newer release are left. The derived state
is derived again. A healthy memory is left as it is.
"""
)
@click.option("--confirm", is_flag=True, help="Required: what is dropped is gone from the store.")
@click.option(
    "--save-dropped",
    metavar="FILE",
    help="Write the dropped lines to FILE first (nothing is repaired if that fails).",
)
def repair(state: State, confirm: bool, save_dropped: str | None) -> None:
    """Mend a damaged log: drop what is not an event, chain it again."""
    try:
        with progress(f"Repairing {state.user}'s memory", quiet=state.quiet):
            result = state.service.repair(state.user, confirm=confirm, save_dropped=save_dropped)
    except ValidationError as exc:
        if exc.field != "confirm":
            raise
        raise click.UsageError(
            "a repair drops what is not an event for good: confirm it with --confirm"
        ) from exc
    if state.json:
        emit_json(msgspec.to_builtins(result))
        return
    _report_repair(result)


def problem_line(problem: LogProblem) -> str:
    """``  line 4: not an event — JSON is malformed: …`` (one problem, made safe)."""
    return f"  {safe(problem.where)}: {KIND_WORDS[problem.kind]} — {safe(problem.detail)}"


def _report_check(result: CheckResult, *, others: bool = False) -> None:
    """One user's check; ``others``: among every user's (the advice names the user)."""
    user = f" --user {result.user_id}" if others else ""
    if result.healthy:
        click.echo(f"{result.user_id}'s memory is healthy: {plural(result.events, 'event')}.")
        return
    click.echo(
        f"{result.user_id}'s memory has {plural(result.problems_total, 'problem')} "
        f"({plural(result.events, 'event')} read):"
    )
    for problem in result.problems:
        click.echo(problem_line(problem))
    _more(len(result.problems), result.problems_total)
    if any(p.kind != "version" for p in result.problems):
        click.echo(
            f"Mend it with `creative-memory repair --confirm{user}` (--save-dropped FILE "
            "keeps the lines it drops; settings that do not load are written anew, memory off)."
        )
    if any(p.kind == "version" for p in result.problems):
        click.echo(
            "A newer release chose that version: use it, or choose one this release knows "
            f"(`creative-memory derivation use VERSION{user}`)."
        )


def _report_repair(result: RepairResult) -> None:
    log_problems = [p for p in result.problems if p.kind not in ("settings", "version")]
    if not result.repaired:
        click.echo(
            f"Nothing to repair: {result.user_id}'s log is healthy "
            f"({plural(result.events_kept, 'event')})."
        )
    if log_problems:
        saved = f" (saved to {safe(result.dropped_saved_to)})" if result.dropped_saved_to else ""
        edited = sum(1 for p in log_problems if p.kind == "altered")
        click.echo(
            f"Repaired {result.user_id}'s log: {plural(result.events_dropped, 'line')} "
            f"dropped{saved}, {plural(edited, 'edited event')} kept as read, "
            f"{plural(result.events_renumbered, 'event')} numbered anew; "
            f"{plural(result.events_kept, 'event')} kept."
        )
        for problem in log_problems:
            click.echo(problem_line(problem))
        _more(len(result.problems), result.problems_total)
    for problem in result.problems:
        if problem.kind not in ("settings", "version"):
            continue
        if result.settings_rewritten and problem.kind == "settings":
            click.echo(
                "Settings did not load: written anew with memory off (`creative-memory "
                "enable` turns it on; pause, project switches and the derivation version "
                "are back to their defaults)."
            )
            click.echo(problem_line(problem))
        else:
            click.echo(f"Left as they are: {problem_line(problem).strip()}")


def _more(listed: int, total: int) -> None:
    if total > listed:
        click.echo(f"  … and {total - listed:,} more (the first {listed:,} are listed)")


COMMANDS = (check, repair)
