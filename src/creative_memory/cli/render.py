"""Output: UTF-8 text and JSON on stdout, notes and progress on stderr, rich tables, the
settings line, and :func:`safe` for every stored string a line shows (docs/cli.md)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import unicodedata
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
#: A progress display appears only when an operation has run this long (seconds);
#: ``$CREATIVE_MEMORY_PROGRESS_DELAY`` overrides it (the tests use 0).
PROGRESS_DELAY_S = 1.0

#: Characters a stored string may not print as themselves: they would end a line, move
#: the cursor, start a terminal escape sequence or reorder the text around them.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})
_SAFE_CF = frozenset({"\u200d"})  # the zero-width joiner inside emoji sequences


def safe(value: object) -> str:
    """``value`` as one printable line: control, format and line-separator characters (a
    newline, ESC, a bidi override) are shown escaped as ``\\n``, ``\\x1b``, ``\\u202e``.
    Every renderer passes stored strings (patterns, types, ids, tags, reasons) through it;
    rich markup is never interpreted from them (the consoles have markup off)."""
    text = str(value)
    if text.isprintable():
        return text
    out: list[str] = []
    for ch in text:
        if (
            ch in _SAFE_CF
            or (unicodedata.category(ch) not in _UNSAFE_CATEGORIES and ch.isprintable())
            or ch == " "
        ):
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)


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


def write_bytes(data: bytes) -> None:
    """Write ``data`` to stdout as it is (an archive for ``export -``)."""
    sys.stdout.flush()
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:  # a text-only stream
        sys.stdout.write(data.decode("utf-8"))
        sys.stdout.flush()
        return
    buffer.write(data)
    buffer.flush()


def emit_json(doc: Any) -> None:
    """One indented JSON document on stdout."""
    write_utf8(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")


def no_color() -> bool:
    """Whether ``$NO_COLOR`` asks for no colour (https://no-color.org: set and not empty)."""
    return bool(os.environ.get("NO_COLOR"))


class _Console(Console):
    """A rich console that leaves a closed pipe to the CLI's one handler (cli/errors.py):
    rich's own exits with status 1."""

    def on_broken_pipe(self) -> None:
        """Stop writing, and let ``BrokenPipeError`` reach the command group."""
        self.quiet = True
        raise BrokenPipeError


def console(*, stderr: bool = False) -> Console:
    """A rich console that never interprets markup or emoji codes (stored strings may hold
    ``[red]``); outside a terminal a fixed width ($COLUMNS, else 120) and no colour, so
    piped output is plain and stable; ``$NO_COLOR`` turns colour off on a terminal too."""
    probe = Console(stderr=stderr)
    if probe.is_terminal:
        return _Console(
            stderr=stderr, highlight=False, markup=False, emoji=False, no_color=no_color()
        )
    try:
        width = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        width = 120
    return _Console(
        stderr=stderr,
        highlight=False,
        width=max(width, 40),
        color_system=None,
        markup=False,
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


def _progress_delay() -> float:
    try:
        return max(0.0, float(os.environ.get("CREATIVE_MEMORY_PROGRESS_DELAY", "")))
    except ValueError:
        return PROGRESS_DELAY_S


@contextlib.contextmanager
def progress(
    description: str, total: int | None = None, *, quiet: bool = False
) -> Iterator[Callable[[int], None]]:
    """A progress display on stderr, shown once the operation has run for a second, only
    when stderr is a terminal and not ``quiet`` (``--quiet``). Yields an ``advance(n)``
    callback; with ``total=None`` it is an activity spinner. Transient: it leaves nothing
    behind on the terminal."""
    if quiet or not _stderr_is_terminal():
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
    bar = Progress(
        *columns,
        console=Console(stderr=True, markup=False, emoji=False, no_color=no_color()),
        transient=True,
    )
    task = bar.add_task(safe(description), total=total)
    lock = threading.Lock()
    done = False

    def show() -> None:
        with lock:
            if not done:
                bar.start()

    timer = threading.Timer(_progress_delay(), show)
    timer.daemon = True
    timer.start()
    try:
        yield lambda n: bar.advance(task, n)
    finally:
        timer.cancel()
        with lock:
            done = True
            bar.stop()


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
        parts.append("global memory ignored in: " + ", ".join(safe(p) for p in projects))
    parts.append("diagnostics feed " + ("on" if doc["diagnostics_feed"] else "off"))
    return " · ".join(parts)


def report_settings(
    state: State, view: SettingsView, message: str, *, changed: bool | None = None
) -> None:
    """A switch's outcome: ``message`` and the settings line, or the JSON document (with
    ``changed`` when the switch reports it: false for a no-op)."""
    doc = settings_doc(view)
    if state.json:
        out: dict[str, Any] = {"user_id": state.user}
        if changed is not None:
            out["changed"] = changed
        out["settings"] = doc
        emit_json(out)
        return
    click.echo(message)
    click.echo(f"Settings: {settings_line(doc)}")


def where(project: str | None) -> str:
    """``project P`` or ``global memory``."""
    return f"project {safe(project)}" if project else "global memory"


def local_time(ts: str | None) -> str:
    """A stored UTC timestamp as the local time with its zone, e.g.
    ``2026-12-31 23:59 CET (2026-12-31T22:59:59.999Z)``."""
    if not ts:
        return ""
    from datetime import datetime

    try:
        at = datetime.fromisoformat(ts.replace("Z", "+00:00")).astimezone()
    except ValueError:
        return safe(ts)
    return f"{at:%Y-%m-%d %H:%M} {at.tzname() or at.strftime('%z')} ({safe(ts)})"


def plural(n: int, noun: str) -> str:
    """``1 event`` / ``3 events``."""
    return f"{n} {noun}{'s' if n != 1 else ''}"


def point_line(as_of: Mapping[str, Any], asked: str | None = None) -> str:
    """The point in the past a view shows (docs/time-travel.md), e.g. ``As of 2026-03-01
    23:59 CET (...): right after event 4, recorded ... · derivation v3 · 4 events of today's
    log``; ``asked`` is the time asked for (``--as-of``), if any."""
    if as_of["events"]:
        where = f"right after event {as_of['at_seq']}, recorded {local_time(as_of['recorded_at'])}"
    else:
        where = "before the first event"
    head = f"As of {local_time(asked)}: {where}" if asked else where[:1].upper() + where[1:]
    return (
        f"{head} · derivation v{safe(as_of['derivation_version'])} · "
        f"{plural(as_of['events'], 'event')} of today's log"
    )
