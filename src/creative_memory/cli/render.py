"""Output: UTF-8 text and JSON on stdout, notes and progress on stderr, rich tables, the
settings line (docs/cli.md)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import click
from rich import box
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from creative_memory.app.service import SettingsView
    from creative_memory.cli.context import State

#: Events at or above this count get a progress bar (on a terminal).
PROGRESS_MIN_EVENTS = 100


def write_utf8(text: str) -> None:
    """Write ``text`` to stdout as UTF-8, whatever the locale says."""
    sys.stdout.flush()
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:  # a text-only stream (e.g. replaced by a host); let it encode
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    buffer.write(text.encode("utf-8"))
    buffer.flush()


def emit_json(doc: Any) -> None:
    """One indented JSON document on stdout."""
    write_utf8(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")


def console(*, stderr: bool = False) -> Console:
    """A rich console; outside a terminal a fixed width ($COLUMNS, else 120) and no colour,
    so piped output is plain and stable."""
    probe = Console(stderr=stderr)
    if probe.is_terminal:
        return Console(stderr=stderr, highlight=False)
    try:
        width = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        width = 120
    return Console(
        stderr=stderr,
        highlight=False,
        width=max(width, 40),
        color_system=None,
        emoji=False,
        legacy_windows=False,
    )


def table(*headers: str, wrap: tuple[str, ...] = ("sources", "what it did")) -> Table:
    """A compact table; only the columns named in ``wrap`` may wrap (at word boundaries)."""
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    for h in headers:
        t.add_column(h, no_wrap=h not in wrap, overflow="fold" if h in wrap else "ellipsis")
    return t


def note(message: str) -> None:
    """An informational line on stderr (never mixed into JSON on stdout)."""
    sys.stdout.flush()
    click.echo(message, err=True)


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


@contextlib.contextmanager
def progress(description: str, total: int | None = None) -> Iterator[Callable[[int], None]]:
    """A progress display on stderr when it is a terminal (quiet in pipes). Yields an
    ``advance(n)`` callback; with ``total=None`` it is an activity spinner."""
    if not _stderr_is_terminal():
        yield lambda n: None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    columns: list[Any] = [SpinnerColumn(), TextColumn("{task.description}")]
    if total is not None:
        columns += [BarColumn(), MofNCompleteColumn()]
    columns.append(TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)


def settings_doc(view: SettingsView) -> dict[str, Any]:
    """The settings as the JSON output shows them."""
    import msgspec

    doc: dict[str, Any] = msgspec.to_builtins(view)
    return doc


def settings_line(doc: Mapping[str, Any]) -> str:
    """``memory on · learning active · diagnostics feed off`` and so on."""
    parts = ["memory on" if doc["memory_enabled"] else "memory OFF (nothing learned or injected)"]
    if doc["paused_now"]:
        until = doc.get("paused_until")
        parts.append(f"learning paused until {until}" if until else "learning paused until resumed")
    elif doc["paused"]:
        parts.append(f"learning active (pause expired {doc.get('paused_until')})")
    else:
        parts.append("learning active")
    projects = doc.get("disabled_projects") or []
    if projects:
        parts.append("global memory ignored in: " + ", ".join(projects))
    parts.append("diagnostics feed " + ("on" if doc["diagnostics_feed"] else "off"))
    return " · ".join(parts)


def report_settings(state: State, view: SettingsView, message: str) -> None:
    """A switch's outcome: ``message`` and the settings line, or the JSON document."""
    doc = settings_doc(view)
    if state.json:
        emit_json({"user_id": state.user, "settings": doc})
        return
    click.echo(message)
    click.echo(f"Settings: {settings_line(doc)}")


def where(project: str | None) -> str:
    """``project P`` or ``global memory``."""
    return f"project {project}" if project else "global memory"


def plural(n: int, noun: str) -> str:
    """``1 event`` / ``3 events``."""
    return f"{n} {noun}{'s' if n != 1 else ''}"
