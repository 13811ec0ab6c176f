"""Command line: ``creative-memory`` (alias ``od-memory``).

The group ``main`` is the console-script entry point. Commands stay thin: they parse
options, call the library (or a module such as :mod:`creative_memory.cli.demo`) and print. The
CLI never touches storage files itself; it resolves the storage root and the user
(:mod:`creative_memory.app.paths`, design.md §2) and calls :class:`MemoryStore`.

Exit codes: 0 success; 1 the operation failed (bad input rejected by the library, a storage
failure, an unusable data dir, an unknown project or pattern, rejected ingest lines) — one
line on stderr, no traceback; 2 usage errors (click's default: bad options, bad dates,
unsafe ids on the command line, a missing ``--confirm``).

Reference: docs/cli.md.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from creative_memory._version import __version__
from creative_memory.app.paths import (
    ResolvedRoot,
    ResolvedUser,
    check_root,
    resolve_database,
    resolve_root,
    resolve_user,
)
from creative_memory.engine.errors import CreativeMemoryError, ValidationError
from creative_memory.engine.events import validate_project_id, validate_user_id
from creative_memory.engine.timeutil import format_ts, try_parse_ts

if TYPE_CHECKING:  # the store is imported lazily: `demo` and `--help` stay fast
    from creative_memory.app.store import MemoryStore

F = TypeVar("F", bound=Callable[..., Any])

#: Events at or above this count get a progress bar (on a terminal).
PROGRESS_MIN_EVENTS = 100

DATE_HELP = "an ISO 8601 date or date-time, e.g. 2026-03-01 or 2026-03-01T10:00:00Z (UTC)"


# -- the group ---------------------------------------------------------------------------------
class _UsageError(click.UsageError):
    """A usage error shown on one line (with where to find help), exit 2."""

    def show(self, file: Any = None) -> None:
        hint = f" (see '{self.ctx.command_path} --help')" if self.ctx is not None else ""
        click.echo(f"Error: {self.format_message()}{hint}", err=True)


def _one_line_usage(exc: click.UsageError) -> _UsageError:
    if isinstance(exc, _UsageError):
        return exc
    return _UsageError(_one_line_text(exc.format_message()), exc.ctx)


class _Group(click.Group):
    """A click group that turns library errors into one-line messages (exit 1) and shows
    usage errors on one line (exit 2)."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:
            raise _one_line_usage(exc) from exc

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise _one_line_usage(exc) from exc
        except click.ClickException:
            raise
        except (ValueError, CreativeMemoryError) as exc:
            raise click.ClickException(_one_line(exc)) from exc
        except OSError as exc:
            raise click.ClickException(_os_error(exc)) from exc
        finally:
            # stdout (block-buffered in a pipe) first, so a report precedes its error line
            with contextlib.suppress(Exception):
                sys.stdout.flush()


def _one_line_text(text: str) -> str:
    return " ".join(text.split())


def _one_line(exc: BaseException) -> str:
    return _one_line_text(str(exc)) or type(exc).__name__


def _os_error(exc: OSError) -> str:
    what = exc.strerror or _one_line(exc)
    if exc.filename:
        return f"cannot use {exc.filename}: {what}"
    return what


@dataclass
class _State:
    """Global options, resolved lazily (``demo`` and ``--help`` need no storage).

    Commands defined in other modules read ``data_dir``, ``user_flag`` and
    ``derivation_version`` from the context object (``server_cli``): keep these names."""

    data_dir: str | None = None
    user_flag: str | None = None
    json: bool = False
    derivation_version: str | None = None
    database_flag: str | None = None
    _store: MemoryStore | None = field(default=None, repr=False)
    _root: ResolvedRoot | None = field(default=None, repr=False)
    _user: ResolvedUser | None = field(default=None, repr=False)

    @property
    def root(self) -> ResolvedRoot:
        if self._root is None:
            root = resolve_root(self.data_dir)
            check_root(root.path)
            self._root = root
        return self._root

    @property
    def resolved_user(self) -> ResolvedUser:
        if self._user is None:
            user = resolve_user(self.user_flag)
            try:
                validate_user_id(user.user_id)
            except ValidationError as exc:
                hint = "--user" if user.source == "--user" else user.source
                raise click.UsageError(f"{hint}: {_one_line(exc)}") from exc
            self._user = user
        return self._user

    @property
    def user(self) -> str:
        return self.resolved_user.user_id

    @property
    def store(self) -> MemoryStore:
        if self._store is None:
            from creative_memory.app.store import MemoryStore

            database = resolve_database(self.database_flag)
            self._store = MemoryStore(
                database or self.root.path, derivation_version=self.derivation_version
            )
        return self._store


def _validator(check: Callable[[str], str]) -> Callable[..., Any]:
    """A click callback running a library check; its ValidationError is a usage error."""

    def callback(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
        if value is None:
            return None
        try:
            return check(value)
        except ValidationError as exc:
            raise click.BadParameter(_one_line(exc)) from exc

    return callback


def _check_version(value: str) -> str:
    from creative_memory.engine.derivation.v1 import check_version

    return check_version(value)


_validate_user_flag = _validator(validate_user_id)
_validate_project = _validator(validate_project_id)
_validate_version = _validator(_check_version)


def _date(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    """Validate a DATE option and normalise it to ``YYYY-MM-DDTHH:MM:SS.mmmZ``."""
    if value is None:
        return None
    ms = try_parse_ts(value.strip())
    if ms is None:
        raise click.BadParameter(
            f"{value!r} is not an ISO 8601 date (e.g. 2026-03-01 or 2026-03-01T10:00:00Z)"
        )
    return format_ts(ms)


@click.group(
    cls=_Group,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog="""\b
Storage root (first match wins): --data-dir, $OD_DATA_DIR/memory, $MEMORY_STORAGE_ROOT,
the platform data dir (e.g. ~/.local/share/creative-memory). Never the current directory.
User: --user, $CREATIVE_MEMORY_USER, else your login name.

\b
Examples:
  creative-memory whoami                      # who and where
  creative-memory ingest events.jsonl         # teach from host events (JSON lines)
  creative-memory inspect                     # settings, records, retrieval
  creative-memory explain color neon_palette  # why is this record what it is?
  creative-memory prompt --project landing    # the block a generation gets now
  creative-memory --json inspect | jq .settings

Guide: docs/cli.md. Exit codes: 0 ok, 1 operation failed, 2 usage error.
""",
)
@click.version_option(__version__, "--version", prog_name="creative-memory")
@click.option(
    "--data-dir",
    metavar="DIR",
    help="Storage root (overrides OD_DATA_DIR and MEMORY_STORAGE_ROOT).",
)
@click.option(
    "--database",
    "database_flag",
    metavar="URL",
    help="Store memory in PostgreSQL at this postgresql:// URL instead of files "
    "(default: $CREATIVE_MEMORY_DATABASE_URL if set).",
)
@click.option(
    "--user",
    "user_flag",
    metavar="ID",
    callback=_validate_user_flag,
    help="Act for this user (default: $CREATIVE_MEMORY_USER, else your login name).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")
@click.option(
    "--derivation-version",
    metavar="N",
    callback=_validate_version,
    help="Derive records with this derivation version (default: the library's).",
)
@click.pass_context
def main(
    ctx: click.Context,
    data_dir: str | None,
    user_flag: str | None,
    as_json: bool,
    derivation_version: str | None,
    database_flag: str | None,
) -> None:
    """creative-memory: a local, deterministic preference memory for generative design
    tools. See, steer and erase what it learned about your taste."""
    # One BLAS thread per process unless the environment says otherwise: the fits' small
    # dense solves ran about 2.5x slower with one thread per core on a busy 2-core machine
    # (docs/performance.md). numpy reads this when it is first imported, on the first fit.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    ctx.obj = _State(
        data_dir=data_dir,
        user_flag=user_flag,
        json=as_json,
        derivation_version=derivation_version,
        database_flag=database_flag,
    )


def _command(
    name: str | None = None, *, epilog: str, parent: click.Group | None = None
) -> Callable[[F], click.Command]:
    """Register a command on ``parent`` (default ``main``) with a ``--json`` flag (merged
    with the global one) and the :class:`_State` as first argument."""

    def decorate(fn: F) -> click.Command:
        @functools.wraps(fn)
        def wrapper(*args: Any, as_json: bool, **kwargs: Any) -> Any:
            state = click.get_current_context().find_object(_State)
            if state is None:  # pragma: no cover - always set by main
                state = _State()
            state.json = state.json or as_json
            return fn(state, *args, **kwargs)

        option = click.option(
            "--json", "as_json", is_flag=True, help="Machine-readable JSON output."
        )
        group = parent or main
        cmd = group.command(name, epilog=epilog)(option(wrapper))
        # --json last in --help, after the command's own options
        cmd.params.sort(key=lambda p: p.name == "as_json")
        return cmd

    return decorate


# -- output helpers ----------------------------------------------------------------------------
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


def _emit_json(doc: Any) -> None:
    _write_utf8(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")


def _console(*, stderr: bool = False) -> Console:
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


def _table(*headers: str, wrap: tuple[str, ...] = ("sources", "what it did")) -> Table:
    """A compact table; only the columns named in ``wrap`` may wrap (at word boundaries)."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    for h in headers:
        table.add_column(h, no_wrap=h not in wrap, overflow="fold" if h in wrap else "ellipsis")
    return table


def _note(message: str) -> None:
    """An informational line on stderr (never mixed into JSON on stdout)."""
    sys.stdout.flush()
    click.echo(message, err=True)


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


@contextlib.contextmanager
def _progress(description: str, total: int | None = None) -> Iterator[Callable[[int], None]]:
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


def _settings_doc(state: _State) -> dict[str, Any]:
    import msgspec

    settings = state.store.get_settings(state.user)
    doc: dict[str, Any] = msgspec.to_builtins(settings)
    doc["paused_now"] = state.store.is_paused(state.user)
    return doc


def _settings_line(doc: Mapping[str, Any]) -> str:
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


def _report_settings(state: _State, message: str) -> None:
    doc = _settings_doc(state)
    if state.json:
        _emit_json({"user_id": state.user, "settings": doc})
        return
    click.echo(message)
    click.echo(f"Settings: {_settings_line(doc)}")


def _known_projects(state: _State) -> list[str]:
    """Projects that have memory (records) for the user."""
    projects: list[str] = []
    for rec in state.store.list_preferences(state.user):
        if rec.scope.startswith("project:"):
            pid = rec.scope.split(":", 1)[1]
            if pid not in projects:
                projects.append(pid)
    return sorted(projects)


def _require_project(state: _State, project: str) -> None:
    known = _known_projects(state)
    if project not in known:
        listing = ", ".join(known) if known else "none"
        raise click.ClickException(
            f"unknown project {project!r}: {state.user} has no memory in it "
            f"(projects with memory: {listing})"
        )


def _where(project: str | None) -> str:
    return f"project {project}" if project else "global memory"


# -- who and where -------------------------------------------------------------------------
@_command(
    epilog="""\b
Examples:
  creative-memory whoami
  creative-memory --user alice --data-dir /srv/memory whoami
  creative-memory whoami --json
"""
)
def whoami(state: _State) -> None:
    """Show the user the CLI acts for and the storage root, with where each came from."""
    user = state.resolved_user
    root = state.root
    from creative_memory.engine.constants import DERIVATION_VERSION

    version = state.derivation_version or DERIVATION_VERSION
    if state.json:
        _emit_json(
            {
                "user_id": user.user_id,
                "user_source": user.source,
                "data_dir": str(root.path),
                "data_dir_source": root.source,
                "data_dir_exists": root.path.is_dir(),
                "derivation_version": version,
            }
        )
        return
    click.echo(f"user      {user.user_id}  ({user.source})")
    click.echo(f"data dir  {root.path}  ({root.source})")


# -- switches ----------------------------------------------------------------------------------
@_command(
    epilog="""\b
Examples:
  creative-memory enable
  creative-memory --user alice enable --json
"""
)
def enable(state: _State) -> None:
    """Turn memory on (learning and injection)."""
    state.store.set_memory_enabled(state.user, True)
    _report_settings(state, f"Memory enabled for {state.user}.")


@_command(
    epilog="""\b
Examples:
  creative-memory disable          # nothing learned, nothing injected, nothing deleted
  creative-memory enable           # back on, everything still there
"""
)
def disable(state: _State) -> None:
    """Turn memory off: nothing is learned or injected; nothing is deleted."""
    state.store.set_memory_enabled(state.user, False)
    _report_settings(
        state, f"Memory disabled for {state.user}: nothing learned or injected, nothing deleted."
    )


@_command(
    epilog="""\b
Examples:
  creative-memory pause                          # until `creative-memory resume`
  creative-memory pause --until 2026-03-15       # expires by itself (midnight UTC)
  creative-memory pause --until 2026-03-15T18:00:00+01:00
"""
)
@click.option("--until", metavar="DATE", callback=_date, help=f"Resume by itself at {DATE_HELP}.")
def pause(state: _State, until: str | None) -> None:
    """Pause learning (events are dropped, not stored); injection continues."""
    if until is not None:
        from creative_memory.engine.timeutil import ts_to_ms

        if ts_to_ms(until) <= state.store.now_ms():
            raise click.BadParameter(f"{until} is in the past", param_hint="'--until'")
    state.store.pause(state.user, until)
    span = f"until {until}" if until else "until you run `creative-memory resume`"
    _report_settings(state, f"Learning paused for {state.user} {span}; injection continues.")


@_command(
    epilog="""\b
Examples:
  creative-memory resume
"""
)
def resume(state: _State) -> None:
    """Resume learning after a pause."""
    state.store.resume(state.user)
    _report_settings(state, f"Learning resumed for {state.user}.")


@_command(
    "project-disable",
    epilog="""\b
Examples:
  creative-memory project-disable client-acme    # only client-acme's own records apply there
  creative-memory project-enable client-acme
""",
)
@click.argument("project", callback=_validate_project)
def project_disable(state: _State, project: str) -> None:
    """Make retrieval for PROJECT ignore global memory (its own records still apply).

    PROJECT does not need any memory yet: a host project can opt out before its first
    generation."""
    state.store.set_project_disabled(state.user, project, True)
    _report_settings(state, f"Project {project} now ignores {state.user}'s global memory.")


@_command(
    "project-enable",
    epilog="""\b
Examples:
  creative-memory project-enable client-acme
""",
)
@click.argument("project", callback=_validate_project)
def project_enable(state: _State, project: str) -> None:
    """Let retrieval for PROJECT use global memory again (undoes project-disable)."""
    was = project in state.store.get_settings(state.user).disabled_projects
    state.store.set_project_disabled(state.user, project, False)
    if was:
        message = f"Project {project} uses {state.user}'s global memory again."
    else:
        message = f"Project {project} was not disabled; nothing changed."
    _report_settings(state, message)


@main.group(
    cls=_Group,
    epilog="""\b
Examples:
  creative-memory config diagnostics-feed on
  creative-memory config diagnostics-feed        # show the current value
""",
)
def config() -> None:
    """Per-user settings."""


@_command(
    "diagnostics-feed",
    parent=config,
    epilog="""\b
Examples:
  creative-memory config diagnostics-feed on     # one summary line per retrieval in chat
  creative-memory config diagnostics-feed off    # the default
  creative-memory config diagnostics-feed        # show the current value
""",
)
@click.argument("value", required=False, type=click.Choice(["on", "off"]))
def diagnostics_feed(state: _State, value: str | None) -> None:
    """Switch the one-line diagnostics summary for chat on or off (off by default)."""
    if value is not None:
        state.store.set_diagnostics_feed(state.user, value == "on")
    current = "on" if state.store.get_settings(state.user).diagnostics_feed else "off"
    verb = "is" if value is None else "is now"
    _report_settings(state, f"Diagnostics feed {verb} {current} for {state.user}.")


# -- inspect and explain -----------------------------------------------------------------------
@_command(
    epilog="""\b
Examples:
  creative-memory inspect
  creative-memory inspect --project landing      # retrieval as that project would get it
  creative-memory inspect --json | jq '.preferences[] | {pattern, signal_strength}'
JSON shape: docs/inspect.schema.json.
"""
)
@click.option(
    "--project",
    metavar="P",
    callback=_validate_project,
    help="Show retrieval for this project (default: global only).",
)
def inspect(state: _State, project: str | None) -> None:
    """Show settings, every derived record with its provenance, and the retrieval (what
    would be injected now) with its diagnostics."""
    doc = state.store.inspect(state.user, project)
    if state.json:
        _emit_json(doc)
        return
    _render_inspect(doc, _console())


def _render_inspect(doc: Mapping[str, Any], console: Console) -> None:
    prefs: list[dict[str, Any]] = list(doc["preferences"])
    n_events = doc["event_count"]
    console.print(
        Text.assemble(
            (f"Memory of {doc['user_id']}", "bold"),
            f" · derivation v{doc['derivation_version']} · "
            f"{n_events} event{'s' if n_events != 1 else ''}",
            f" · derived through seq {prefs[0]['last_derived_event_seq']}" if prefs else "",
        )
    )
    console.print(f"Settings: {_settings_line(doc['settings'])}")
    console.print()
    if not prefs:
        console.print(Text("Preferences: none yet", style="bold"))
    else:
        console.print(Text(f"Preferences ({len(prefs)})", style="bold"))
        _render_records(prefs, console)
    console.print()
    retrieval = doc["retrieval"]
    where = f"project {doc['project_id']}" if doc.get("project_id") else "global"
    console.print(Text(f"Retrieval ({where})", style="bold"))
    lines = [
        ("Prefer", retrieval["positives"]),
        ("Avoid", retrieval["negatives"]),
        ("Project overrides", retrieval["project_overrides"]),
    ]
    for label, recs in lines:
        shown = ", ".join(f"{r['pattern']} ({r['confidence']})" for r in recs) or "-"
        console.print(f"  {label}: {shown}", soft_wrap=True)
    diagnostics = retrieval["diagnostics"]
    if diagnostics:
        console.print(Text("Diagnostics", style="bold"))
        for d in diagnostics:
            console.print(f"  {d.get('type')}: {d.get('trace', '')}", soft_wrap=True)


def _render_records(prefs: list[dict[str, Any]], console: Console) -> None:
    """Records grouped by scope: a table when it fits the width, else two lines each."""
    from rich.cells import cell_len

    headers = ("record", "kind", "strength", "conf", "status", "sources", "last seen", "events")
    wrap_col = headers.index("sources")
    rows: list[tuple[str, ...] | str] = []
    scope = None
    for r in prefs:
        if r["scope"] != scope:
            scope = r["scope"]
            rows.append("global" if scope == "global" else scope.replace(":", " ", 1))
        status = r["polarity_status"] + (" (shadow)" if r["shadow_of"] else "")
        rows.append(
            (
                f"  {r['preference_type']}/{r['pattern']}",
                "prefer" if r["polarity"] == "positive" else "avoid",
                f"{r['signal_strength']:.2f}",
                r["confidence"],
                status,
                ", ".join(r["sources"]),
                r["last_seen"][:10],
                str(r["source_event_count"]),
            )
        )
    records = [row for row in rows if not isinstance(row, str)]
    # sources wrap between entries, never inside one; every other column stays whole
    longest_source = max((cell_len(x) for r in prefs for x in r["sources"]), default=0)
    widths = [
        max([cell_len(h), *(cell_len(row[i]) for row in records)])
        if i != wrap_col
        else max(cell_len(h), longest_source)
        for i, h in enumerate(headers)
    ]
    if sum(widths) + 2 * len(widths) <= console.width:  # with room for rich's padding
        table = _table(*headers)
        table.columns[wrap_col].min_width = widths[wrap_col]
        for row in rows:
            if isinstance(row, str):
                table.add_row(Text(row, style="bold"))
            else:
                table.add_row(*row)
        console.print(table)
        return
    for row in rows:
        if isinstance(row, str):
            console.print(Text(row, style="bold"))
            continue
        record, kind, strength, conf, status, sources, seen, n = row
        console.print(record, soft_wrap=True)
        console.print(
            f"      {kind} {strength} ({conf}) · {status} · {sources} · last seen {seen} · "
            f"{n} event{'s' if n != '1' else ''}",
            soft_wrap=True,
        )


@_command(
    epilog="""\b
Examples:
  creative-memory explain color neon_palette
  creative-memory explain layout_density airy_spacing --project landing
  creative-memory explain color neon_palette --json | jq '.steps[] | {seq, kind}'
"""
)
@click.argument("preference_type", metavar="TYPE")
@click.argument("pattern")
@click.option(
    "--project", metavar="P", callback=_validate_project, help="The project's record, not global."
)
def explain(state: _State, preference_type: str, pattern: str, project: str | None) -> None:
    """Why is the record for TYPE PATTERN what it is? Every raw event that contributed and
    what it did (strength before -> after, confidence, reversal, shadow, decay), ending at
    the current record."""
    if project is not None:
        _require_project(state, project)
    result = state.store.explain(state.user, preference_type, pattern, project_id=project)
    if not result.steps and not result.records:
        raise click.ClickException(
            f"nothing to explain: {state.user} has no memory of "
            f"{preference_type}/{pattern} in {_where(project)}"
        )
    if state.json:
        _emit_json(result.to_dict())
        return
    console = _console()
    console.print(
        Text.assemble(
            (f"Why {preference_type}/{pattern} ({_where(project)})", "bold"),
            f" · derivation v{result.derivation_version}",
        )
    )
    table = _table("seq", "time (UTC)", "event", "record", "what it did", "strength", "conf")
    for step in result.steps:
        event = step.kind.replace("_", " ")
        if step.signal_type:
            sign = "+" if step.polarity == "positive" else "-"
            event = f"{step.signal_type} {sign}"
        for i, eff in enumerate(step.effects or [None]):
            if eff is None:
                table.add_row(str(step.seq), _short_ts(step.at), event, "", "no change", "", "")
                continue
            before = "new" if eff.strength_before is None else f"{eff.strength_before:.2f}"
            conf = (
                eff.confidence_after
                if eff.confidence_before in (None, eff.confidence_after)
                else f"{eff.confidence_before} -> {eff.confidence_after}"
            )
            table.add_row(
                str(step.seq) if i == 0 else "",
                _short_ts(step.at) if i == 0 else "",
                event if i == 0 else "",
                "prefer" if eff.polarity == "positive" else "avoid",
                ", ".join(eff.actions),
                f"{before} -> {eff.strength_after:.2f}",
                conf,
            )
    console.print(table)
    if result.records:
        console.print("Now:")
        for rec in result.records:
            shadow = f" (shadow of {rec.shadow_of})" if rec.shadow_of else ""
            kind = "prefer" if rec.polarity == "positive" else "avoid"
            n = rec.source_event_count
            console.print(
                f"  {kind} {rec.signal_strength:.2f} ({rec.confidence}) · "
                f"{rec.polarity_status}{shadow} · from {n} event{'s' if n != 1 else ''}, "
                f"derived through seq {rec.last_derived_event_seq}",
                soft_wrap=True,
            )
        for ev in result.evidence or []:
            _print_evidence(console, ev)
    else:
        console.print("Now: no record (forgotten or never created)")


def _print_evidence(console: Console, ev: Mapping[str, Any]) -> None:
    """What a fitted estimate (derivation version 2) rests on, in a few lines."""
    level = ev["type_level"]
    console.print(
        f"Estimate {ev['estimate']:+.3f} ± {ev['sd']:.3f} (lower bound {ev['lower_bound']:+.3f})"
        + ("" if level is None else f" · type level {level:+.3f}")
        + f" · slab probability {ev['slab_probability']:.2f}"
        + (" · provisional (unary evidence only)" if ev["provisional"] else ""),
        soft_wrap=True,
    )
    for kind, k in ev["kinds"].items():
        console.print(
            f"  {kind}: {k['for']} for, {k['against']} against · weight {k['weight']} · "
            f"contribution {k['contribution']:+.3f}",
            soft_wrap=True,
        )


def _short_ts(ts: str) -> str:
    return ts[:16].replace("T", " ")


# -- erasure -----------------------------------------------------------------------------------
@_command(
    epilog="""\b
Examples:
  creative-memory forget color neon_palette
  creative-memory forget typography condensed_display --project landing
Erasure is real: the events are removed from the log and every cache; forget and re-teach
is the way to change a record (strengths are never edited by hand).
"""
)
@click.argument("preference_type", metavar="TYPE")
@click.argument("pattern")
@click.option(
    "--project", metavar="P", callback=_validate_project, help="Forget in this project only."
)
def forget(state: _State, preference_type: str, pattern: str, project: str | None) -> None:
    """Erase every raw event about TYPE PATTERN (global memory, or --project's)."""
    if project is not None:
        _require_project(state, project)
    removed = state.store.forget(state.user, preference_type, pattern, project_id=project)
    if removed == 0:
        raise click.ClickException(
            f"nothing to forget: {state.user} has no events about "
            f"{preference_type}/{pattern} in {_where(project)}"
        )
    if state.json:
        _emit_json(
            {
                "user_id": state.user,
                "preference_type": preference_type,
                "pattern": pattern,
                "project_id": project,
                "events_removed": removed,
            }
        )
        return
    noun = "event" if removed == 1 else "events"
    click.echo(f"Forgot {preference_type}/{pattern} in {_where(project)}: {removed} {noun} erased.")


def _parse_scope(ctx: click.Context, param: click.Parameter, value: str) -> Any:
    if value in ("all", "global"):
        return value
    if value.startswith("project:"):
        try:
            validate_project_id(value[len("project:") :])
        except ValidationError as exc:
            raise click.BadParameter(_one_line(exc)) from exc
        return value
    raise click.BadParameter(f"{value!r} is not one of all, global, project:<id>")


@_command(
    epilog="""\b
Examples:
  creative-memory reset --confirm                     # everything; memory is re-enabled
  creative-memory reset --confirm --scope global      # global records only
  creative-memory reset --confirm --scope project:landing
Tip: `creative-memory export --to backup.json` first.
"""
)
@click.option("--confirm", is_flag=True, help="Required: erasure is real and cannot be undone.")
@click.option(
    "--scope",
    default="all",
    show_default=True,
    metavar="all|global|project:P",
    callback=_parse_scope,
    help="What to erase.",
)
def reset(state: _State, confirm: bool, scope: str) -> None:
    """Erase memory for real (the raw events, not just the records)."""
    if not confirm:
        raise click.UsageError(
            f"reset erases {state.user}'s memory (scope {scope}) for real; add --confirm to proceed"
        )
    if scope.startswith("project:"):
        _require_project(state, scope.split(":", 1)[1])
    before = len(state.store.events(state.user))
    state.store.reset_memory(state.user, scope)
    after = len(state.store.events(state.user))
    removed = max(before - after, 0)
    if state.json:
        _emit_json({"user_id": state.user, "scope": scope, "events_remaining": after})
        return
    extra = "; memory is enabled" if scope == "all" else ""
    click.echo(
        f"Reset {state.user}'s memory (scope {scope}): {removed} "
        f"event{'s' if removed != 1 else ''} erased, {after} left{extra}."
    )


# -- portability -------------------------------------------------------------------------------
@_command(
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
def export(state: _State, target: Path) -> None:
    """Write one versioned, checksummed archive of your raw events and settings."""
    from creative_memory.engine.portability.archive import decode_archive

    with _progress(f"Exporting {state.user}'s memory"):
        state.store.export_memory(state.user, target)
    archive = decode_archive(target.read_bytes())
    n = len(archive.events)
    if state.json:
        _emit_json(
            {
                "user_id": state.user,
                "path": str(target),
                "events": n,
                "checksum": archive.checksum,
            }
        )
        return
    click.echo(
        f"Exported {n} event{'s' if n != 1 else ''} and settings of {state.user} to {target}."
    )


@_command(
    "import",
    epilog="""\b
Examples:
  creative-memory import alice-memory.json                  # merge: add missing events
  creative-memory import alice-memory.json --mode replace   # become exactly the archive
Everything is validated (format, checksum, hash chain, every event) before anything is
written; a corrupt or tampered archive changes nothing.
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
def import_(state: _State, source: Path, mode: str) -> None:
    """Import an archive written by `export` (e.g. from another machine)."""
    from creative_memory.engine.portability.archive import decode_archive

    try:
        archive = decode_archive(source.read_bytes())
        with _progress(f"Importing {len(archive.events)} events ({mode})"):
            added = state.store.import_memory(state.user, source, mode=mode)
    except ValueError as exc:
        raise click.ClickException(f"cannot import {source}: {_one_line(exc)}") from exc
    total = len(state.store.events(state.user))
    if state.json:
        _emit_json(
            {
                "user_id": state.user,
                "path": str(source),
                "mode": mode,
                "archive_user_id": archive.user_id,
                "archive_events": len(archive.events),
                "events_added": added,
                "events_total": total,
            }
        )
        return
    origin = f" (archive of {archive.user_id})" if archive.user_id != state.user else ""
    if mode == "replace":
        click.echo(
            f"Replaced {state.user}'s memory with {source}{origin}: {total} "
            f"event{'s' if total != 1 else ''} and the archive's settings."
        )
        return
    click.echo(
        f"Imported {source}{origin} into {state.user}: {added} "
        f"event{'s' if added != 1 else ''} added, {total} in memory."
    )


@_command(
    epilog="""\b
Examples:
  creative-memory migrate ~/.od/memory/alice/preferences.json
  creative-memory migrate ~/.od/memory/alice        # a prototype user directory
  creative-memory migrate ~/.od/memory              # a prototype root: <root>/<user>/
Importing twice imports nothing new (idempotent).
"""
)
@click.argument("source", metavar="PATH", type=click.Path(exists=True, path_type=Path))
def migrate(state: _State, source: Path) -> None:
    """Import a prototype-era preferences.json (schema 1.0) as legacy events."""
    path = _prototype_file(source, state.user)
    with _progress(f"Importing prototype records from {path}"):
        try:
            imported = state.store.import_prototype(state.user, path)
        except ValueError as exc:
            raise click.ClickException(f"cannot migrate {path}: {_one_line(exc)}") from exc
    if state.json:
        _emit_json({"user_id": state.user, "path": str(path), "records_imported": imported})
        return
    if imported:
        click.echo(
            f"Imported {imported} prototype record{'s' if imported != 1 else ''} "
            f"from {path} into {state.user}."
        )
    else:
        click.echo(f"Nothing new to import from {path} (already imported or empty).")


def _prototype_file(source: Path, user: str) -> Path:
    if source.is_file():
        return source
    for candidate in (source / "preferences.json", source / user / "preferences.json"):
        if candidate.is_file():
            return candidate
    raise click.ClickException(
        f"no prototype preferences.json in {source} (looked for {source}/preferences.json "
        f"and {source}/{user}/preferences.json)"
    )


# -- ingest ------------------------------------------------------------------------------------
@dataclass
class _Row:
    """What happened to one input event (or a pending edit-save flushed later)."""

    where: str | None  # "line 3", "item 2", "event"; None for flushed / inferred events
    event: str
    status: str
    reason: str | None = None
    artifact_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "where": self.where,
            "event": self.event,
            "status": self.status,
            "reason": self.reason,
            "artifact_id": self.artifact_id,
        }


@dataclass
class _Parsed:
    where: str
    value: Any = None
    error: str | None = None


def _parse_events(data: bytes) -> list[_Parsed]:
    """One JSON object, a JSON array of objects, or JSON lines (blank lines skipped)."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = None
    if text is not None and text.strip():
        try:
            whole = json.loads(text)
        except ValueError:
            pass
        else:
            if isinstance(whole, list):
                return [_Parsed(f"item {i}", v) for i, v in enumerate(whole, 1)]
            return [_Parsed("line 1" if text.strip().count("\n") == 0 else "event", whole)]
    out: list[_Parsed] = []
    for n, raw in enumerate(data.split(b"\n"), 1):
        if n == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        if not raw.strip():
            continue
        where = f"line {n}"
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            out.append(_Parsed(where, error="not valid UTF-8"))
            continue
        try:
            out.append(_Parsed(where, json.loads(line)))
        except json.JSONDecodeError as exc:
            out.append(_Parsed(where, error=f"not valid JSON ({exc.msg} at column {exc.colno})"))
        except ValueError as exc:  # e.g. a number too large to convert
            out.append(_Parsed(where, error=f"not valid JSON ({_one_line(exc)})"))
    return out


@_command(
    epilog="""\b
Examples:
  creative-memory ingest events.jsonl
  host-tool --emit-events | creative-memory ingest -
  creative-memory ingest batch.json --json | jq '.results[] | select(.status=="rejected")'
Wire format (one per line): {"event": "thumbs_rated", "user_id": "alice",
  "artifact_id": "a1", "session_id": "s1", "project_id": null,
  "timestamp": "2026-03-01T10:00:00Z", "rating": "down",
  "artifact_meta": {"signals": [{"preference_type": "color", "pattern": "neon_palette"}]}}
""",
)
@click.argument(
    "source", metavar="[FILE|-]", default="-", type=click.Path(exists=True, allow_dash=True)
)
def ingest(state: _State, source: str) -> None:
    """Feed host events (wire format: the adapter event plus "event" naming the handler)
    through the capture layer: coalescing, debouncing, redaction.

    Input: one JSON object, a JSON array, or JSON lines. Each event's own timestamp is its
    capture time (edit-saves of an artifact within 30 s coalesce; repeated thumbs within
    2 s count once); pending edit-saves are delivered at the end. A bad line never stops
    the rest. Events for another user are rejected (the CLI acts for one user). Exit 1 if
    any event was rejected, after processing all of them."""
    from creative_memory.capture.layer import CaptureLayer, CaptureReport

    user = state.user
    store = state.store
    if source == "-":
        if sys.stdin.isatty():
            _note("Reading events from the terminal; end with Ctrl-D.")
        data = sys.stdin.buffer.read()
        label = "stdin"
    else:
        path = Path(source)
        if path.is_dir():
            raise click.BadParameter(f"{source} is a directory", param_hint="FILE")
        data = path.read_bytes()
        label = source
    parsed = _parse_events(data)
    rows: list[_Row] = []
    redactions: dict[str, int] = {}

    def absorb(report: CaptureReport, where: str | None) -> None:
        for r in report.results:
            rows.append(
                _Row(
                    where if r.index is not None else None,
                    r.event,
                    r.status,
                    r.reason,
                    r.artifact_id,
                )
            )
        for k, v in report.redactions.items():
            redactions[k] = redactions.get(k, 0) + v

    layer = CaptureLayer(store)
    show = len(parsed) >= PROGRESS_MIN_EVENTS
    with _progress(f"Ingesting {len(parsed)} events", len(parsed) if show else None) as advance:
        for item in parsed:
            reason = item.error or _precheck(item.value, user)
            if reason is not None:
                value = item.value if isinstance(item.value, dict) else {}
                name = value.get("event")
                art = value.get("artifact_id")
                rows.append(
                    _Row(
                        item.where,
                        name if isinstance(name, str) else "?",
                        "rejected",
                        reason,
                        art if isinstance(art, str) else None,
                    )
                )
            else:
                ts = item.value.get("timestamp")
                at = try_parse_ts(ts) if isinstance(ts, str) else None
                absorb(layer.submit(item.value, store.now_ms() if at is None else at), item.where)
            advance(1)
        absorb(layer.close(), None)

    def count(status: str, *, located: bool | None = None) -> int:
        return sum(
            r.status == status and (located is None or (r.where is not None) == located)
            for r in rows
        )

    accepted, coalesced = count("accepted", located=True), count("coalesced", located=True)
    rejected, failed = count("rejected"), count("failed")
    flushed, inferred = count("flushed"), count("inferred")
    problems = [r for r in rows if r.status in ("rejected", "failed")]
    settings = store.get_settings(user)
    not_stored = not settings.memory_enabled or store.is_paused(user)
    if state.json:
        _emit_json(
            {
                "user_id": user,
                "source": label,
                "events": len(parsed),
                "accepted": accepted,
                "coalesced": coalesced,
                "rejected": rejected,
                "flushed": flushed,
                "failed": failed,
                "inferred": inferred,
                "learning": not not_stored,
                "redactions": dict(sorted(redactions.items())),
                "results": [r.to_dict() for r in rows],
            }
        )
    else:
        summary = f"accepted {accepted}, coalesced {coalesced}, rejected {rejected}"
        if failed:
            summary += f", failed {failed}"
        total = len(parsed)
        click.echo(
            f"Ingested {total} event{'s' if total != 1 else ''} from {label} for {user}: {summary}"
        )
        for r in rows:
            if r.status in ("rejected", "coalesced", "failed", "inferred"):
                where = r.where or (f"artifact {r.artifact_id}" if r.artifact_id else "pending")
                kind = f" ({r.event})" if r.event != "?" else ""
                click.echo(f"  {where}: {r.status}{kind}: {r.reason}")
        if flushed:
            click.echo(f"  {flushed} coalesced edit-save{'s' if flushed != 1 else ''} delivered")
        if not_stored:
            why = "disabled" if not settings.memory_enabled else "paused"
            click.echo(f"Note: memory is {why} for {user}; accepted events were not learned.")
    if problems:
        noun = "event" if len(problems) == 1 else "events"
        raise click.ClickException(f"{len(problems)} {noun} not stored ({_locations(problems)})")


def _locations(rows: list[_Row]) -> str:
    """``lines 2, 3, 7`` / ``items 1, 4`` / a mixed list of locations."""
    wheres = [r.where or f"artifact {r.artifact_id}" for r in rows]
    for unit in ("line", "item"):
        if all(w.startswith(f"{unit} ") for w in wheres):
            numbers = ", ".join(w.split(" ", 1)[1] for w in wheres)
            return f"{unit}{'s' if len(wheres) != 1 else ''} {numbers}"
    return ", ".join(wheres)


def _precheck(value: Any, user: str) -> str | None:
    """The CLI's own checks before the capture layer: an object for the selected user."""
    if not isinstance(value, dict):
        return "not a JSON object"
    event_user = value.get("user_id")
    if event_user != user:
        if event_user is None:
            return f"user_id is missing (the CLI acts for {json.dumps(user)}; set it explicitly)"
        return (
            f"user_id {json.dumps(event_user)} is not the selected user {json.dumps(user)} "
            "(the CLI acts for one user; use --user)"
        )
    return None


# -- prompt and decay --------------------------------------------------------------------------
def _read_host_prompt(path: str) -> str:
    """The host prompt in ``path`` (``-``: stdin) exactly as it is: UTF-8, no newline
    translation."""
    stdin = path == "-"
    if stdin and sys.stdin.isatty():
        _note("Reading the host prompt from the terminal; end with Ctrl-D.")
    data = sys.stdin.buffer.read() if stdin else Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        where = "stdin" if stdin else path
        raise ValidationError(
            "host_prompt", f"--host-prompt: {where} is not UTF-8 text ({exc.reason})"
        ) from None


@_command(
    epilog="""\b
Examples:
  creative-memory prompt                       # the generation block
  creative-memory prompt --project landing
  creative-memory prompt --critique            # the evaluative variant
  creative-memory prompt --legacy              # the prototype's [MEMORY CONTEXT] block
  creative-memory prompt --host-prompt system.md > composed.md
  compose-host | creative-memory prompt --critique --host-prompt -
Prints nothing (and a note on stderr) when nothing is injectable; with --host-prompt it
prints the host prompt unchanged then.
"""
)
@click.option("--project", metavar="P", callback=_validate_project, help="Retrieve for P.")
@click.option("--critique", is_flag=True, help="The critique block.")
@click.option("--legacy", is_flag=True, help="The prototype's [MEMORY CONTEXT] block.")
@click.option(
    "--host-prompt",
    "host_prompt",
    metavar="FILE",
    type=click.Path(exists=True, dir_okay=False, allow_dash=True),
    help="Insert the block into the host's composed system prompt in FILE ('-': stdin) "
    "and print the whole prompt (docs/prompt-composition.md).",
)
def prompt(
    state: _State, project: str | None, critique: bool, legacy: bool, host_prompt: str | None
) -> None:
    """Print the memory block a generation (or critique) would get now."""
    from creative_memory.app.feed import diagnostics_feed_line
    from creative_memory.engine.prompt import (
        build_critique_block,
        build_generation_block,
        build_prompt_block,
        insert_memory_block_into_prompt,
    )

    if critique and legacy:
        raise click.UsageError("--critique and --legacy are mutually exclusive")
    if legacy and host_prompt is not None:
        raise click.UsageError(
            "--legacy and --host-prompt are mutually exclusive (the [MEMORY CONTEXT] block "
            "has no heading to place)"
        )
    host = _read_host_prompt(host_prompt) if host_prompt is not None else None
    context = {"project_id": project} if project else None
    result = state.store.retrieve_for_injection(state.user, context)
    variant = "critique" if critique else "legacy" if legacy else "generation"
    builder = {
        "generation": build_generation_block,
        "critique": build_critique_block,
        "legacy": build_prompt_block,
    }[variant]
    block = builder(result, project)
    composed = insert_memory_block_into_prompt(host, block) if host is not None else None
    feed = diagnostics_feed_line(state.store, state.user, result)
    if state.json:
        doc: dict[str, Any] = {
            "user_id": state.user,
            "project_id": project,
            "variant": variant,
            "block": block,
            "diagnostics_feed": feed,
        }
        if composed is not None:
            doc["prompt"] = composed
        _emit_json(doc)
        return
    if composed is not None:
        _write_utf8(composed)
    elif block:
        _write_utf8(block + "\n")
    if not block:
        what = "the host prompt is unchanged" if composed is not None else "no memory block"
        _note(f"({what}: nothing is injectable right now)")
    if feed:
        _note(feed)


@_command(
    epilog="""\b
Examples:
  creative-memory decay                          # at the current time
  creative-memory decay --now 2026-09-01         # as of a given time
A pass that changes nothing stores nothing.
"""
)
@click.option("--now", metavar="DATE", callback=_date, help=f"Run as of {DATE_HELP}.")
def decay(state: _State, now: str | None) -> None:
    """Run one decay pass (stale records weaken, very stale ones are archived)."""
    at = now or format_ts(state.store.now_ms())
    result = state.store.run_decay(state.user, at)
    if state.json:
        _emit_json({"user_id": state.user, "now": at, **result.to_dict()})
        return
    click.echo(f"Decay pass at {at}: {result.decayed} decayed, {result.archived} archived.")


# -- demo (kept) -------------------------------------------------------------------------------
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
@click.pass_context
def demo(ctx: click.Context, as_json: bool, keep: bool) -> None:
    """Walk through the engine on a scratch file store.

    Creates a store in a temporary directory, feeds it host events on a fixed clock and
    prints, step by step, the records, the retrieval diagnostics and the prompt block:
    a fresh user, the confidence ladder, a negative preference, the reversal ladder with
    its shadow record, decay and archive, a realistic multi-category profile, and a
    project override. The output is identical on every run. The directory is removed
    afterwards unless --keep is given.
    """
    # Imported here so that other commands do not pay for the walkthrough module.
    from creative_memory.cli.demo import demo_json, render_human, render_text, run_demo

    state = ctx.find_object(_State)
    as_json = as_json or bool(state and state.json)
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


def _register_daemon_commands() -> None:
    from creative_memory.cli.daemon import serve, token, ui

    for command in (serve, token, ui):
        main.add_command(command)


_register_daemon_commands()


if __name__ == "__main__":
    sys.exit(main(prog_name="creative-memory"))
