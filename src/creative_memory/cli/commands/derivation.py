"""``derivation``: the derivation version a user's memory uses, switching it, and a preview
of a switch before making it (docs/cli.md, docs/time-travel.md)."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any

import click
import msgspec
from rich.console import Console
from rich.text import Text

from creative_memory.cli.commands.switches import NO_CHANGE
from creative_memory.cli.context import State, command, global_options, validate_project
from creative_memory.cli.errors import Group
from creative_memory.cli.render import console as make_console
from creative_memory.cli.render import emit_json, local_time, report_settings, safe, table, where

if TYPE_CHECKING:
    from creative_memory.app.service import DerivationInfo, PreviewResult
    from creative_memory.engine.models import Preference


@command(
    "show",
    epilog="""\b
Examples:
  creative-memory derivation show                # also: creative-memory derivation
  creative-memory derivation show --json | jq .in_force
""",
)
def show(state: State) -> None:
    """Show the derivation version in force, the default, the known versions and your
    switches."""
    info = state.service.derivation(state.user)
    if state.json:
        emit_json(msgspec.to_builtins(info))
        return
    render_derivation(info)


def render_derivation(info: DerivationInfo) -> None:
    """The human rendering of :class:`DerivationInfo`."""
    how = f"chosen; the default is v{safe(info.default)}" if info.chosen else "the default"
    click.echo(f"Derivation for {safe(info.user_id)}: v{safe(info.in_force)} in force ({how}).")
    click.echo(f"Known versions: {', '.join(safe(v) for v in info.known)}")
    if not info.history:
        click.echo("Switches: none")
        return
    click.echo("Switches:")
    for change in info.history:
        click.echo(
            f"  {local_time(change.at)}: v{safe(change.previous)} -> v{safe(change.version)}"
        )


@command(
    "use",
    epilog="""\b
Examples:
  creative-memory derivation preview --to 2      # see what would change first
  creative-memory derivation use 2
  creative-memory derivation use 3               # back again: instant, the log is untouched
Using the version already in force changes nothing (exit 0).
""",
)
@click.argument("derivation_version", metavar="VERSION")
def use(state: State, derivation_version: str) -> None:
    """Make VERSION the derivation version your memory uses (recorded with its time;
    reversible at once: the events are untouched and each version keeps its own cache)."""
    before = state.service.derivation(state.user).in_force
    update = state.service.set_derivation_version(state.user, derivation_version)
    if state.json:
        emit_json(
            {
                "user_id": state.user,
                "changed": update.changed,
                "derivation_version": derivation_version,
                "previous": before,
                "settings": msgspec.to_builtins(update.settings),
            }
        )
        return
    v = safe(derivation_version)
    if not update.changed:
        message = f"Derivation version {v} is already in force for {state.user}; {NO_CHANGE}"
    elif before == derivation_version:
        message = (
            f"Derivation version {v} is now {state.user}'s own choice (it was in force only "
            "as the default)."
        )
    else:
        message = (
            f"Derivation version {v} now in force for {state.user} (was v{safe(before)}); "
            f"`creative-memory derivation use {safe(before)}` switches back."
        )
    report_settings(state, update.settings, message)


@command(
    "preview",
    epilog="""\b
Examples:
  creative-memory derivation preview --to 2
  creative-memory derivation preview --to 2 --project landing
  creative-memory derivation preview --to 2 --json | jq '.change.injection'
A preview writes nothing.
""",
)
@click.option(
    "--to",
    "derivation_version",
    metavar="VERSION",
    required=True,
    help="The derivation version to compare with the one in force.",
)
@click.option(
    "--project", metavar="P", callback=validate_project, help="Retrieve for P (default: global)."
)
def preview(state: State, derivation_version: str, project: str | None) -> None:
    """What switching to VERSION would change: every record added, removed or changed, what
    enters and leaves the memory block (with the reasons), and the block itself."""
    result = state.service.preview(state.user, derivation_version, project)
    if state.json:
        emit_json(msgspec.to_builtins(result))
        return
    render_preview(result, make_console())


def _side(rec: Preference | None, fields: list[str]) -> str:
    """``avoid 0.42 medium`` (with the status, the counts when they are what changed)."""
    if rec is None:
        return "-"
    kind = "prefer" if rec.polarity == "positive" else "avoid"
    out = f"{kind} {rec.signal_strength:.2f} {safe(rec.confidence)}"
    if "polarity_status" in fields:
        out += f" {safe(rec.polarity_status)}"
    if "accept_count" in fields or "reject_count" in fields:
        out += f" +{rec.accept_count}/-{rec.reject_count}"
    return out


def render_preview(result: PreviewResult, console: Console) -> None:
    """The human rendering of a preview: records, the injected set, the block diff."""
    a, b = safe(result.from_version), safe(result.to_version)
    change = result.change
    console.print(
        Text.assemble(
            (f"Derivation v{a} -> v{b} for {safe(result.user_id)}", "bold"),
            f" ({where(result.project_id)}) · preview, nothing is written",
        )
    )
    console.print()
    n = len(change.records)
    console.print(
        Text(f"Records: {n} differ, {change.unchanged} unchanged", style="bold"), soft_wrap=True
    )
    if change.records:
        grid = table("change", "record", "fields", f"v{a}", f"v{b}", wrap=("record", "fields"))
        for rc in change.records:
            scope = "" if rc.scope == "global" else f" [{safe(rc.scope)}]"
            shadow = " (shadow)" if rc.shadow else ""
            grid.add_row(
                rc.change,
                f"{safe(rc.preference_type)}/{safe(rc.pattern)}{scope}{shadow}",
                ", ".join(safe(f) for f in rc.fields) or "-",
                _side(rc.before, rc.fields),
                _side(rc.after, rc.fields),
            )
        console.print(grid)
    console.print()
    if not change.injection:
        console.print(Text("Memory block: the same records injected", style="bold"))
    else:
        console.print(Text("Memory block: records in and out", style="bold"))
        for inj in change.injection:
            sign = "+" if inj.change == "in" else "-"
            kind = "prefer" if inj.polarity == "positive" else "avoid"
            why = "; ".join(safe(r) for r in inj.reasons)  # the other side's reasons
            console.print(
                f"  {sign} {kind} {safe(inj.preference_type)}/{safe(inj.pattern)}"
                + (f" ({why})" if why else ""),
                soft_wrap=True,
            )
    console.print()
    if not change.block_changed:
        console.print(Text("Generation block: unchanged", style="bold"))
        return
    console.print(Text("Generation block:", style="bold"))
    diff = difflib.unified_diff(
        change.block_before.splitlines(),
        change.block_after.splitlines(),
        f"v{a}",
        f"v{b}",
        lineterm="",
    )
    for line in diff:
        console.print(Text(safe(line)), soft_wrap=True)


@click.group(
    "derivation",
    cls=Group,
    invoke_without_command=True,
    epilog="""\b
Examples:
  creative-memory derivation                     # what is in force (= derivation show)
  creative-memory derivation preview --to 2      # what switching would change
  creative-memory derivation use 2               # switch (reversible)
Guide: docs/time-travel.md.
""",
)
@global_options
@click.pass_context
def derivation(ctx: click.Context) -> None:
    """The derivation version your memory uses: show it, preview a switch, switch."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(show)


for _cmd in (show, use, preview):
    derivation.add_command(_cmd)

COMMANDS: tuple[Any, ...] = (derivation,)
