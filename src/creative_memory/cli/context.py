"""The CLI's lazily built context (data dir, user, store, service) and the command decorator.

Global options are resolved only when a command needs them: ``demo`` and ``--help`` touch
no storage. Reference: docs/cli.md.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, time
from typing import TYPE_CHECKING, Any, Final, TypeVar

import click

from creative_memory.app.paths import (
    DATABASE_ENV,
    EMPTY_DATA_DIR,
    PathConfigError,
    ResolvedRoot,
    ResolvedUser,
    check_root,
    database_url_problem,
    redact_url,
    resolve_database,
    resolve_root,
    resolve_user,
)
from creative_memory.cli.errors import one_line, validation_error
from creative_memory.engine.errors import ValidationError
from creative_memory.engine.events import validate_project_id, validate_user_id
from creative_memory.engine.timeutil import format_ts, try_parse_ts

if TYPE_CHECKING:  # imported lazily: `demo` and `--help` stay fast
    from creative_memory.app.service import MemoryService
    from creative_memory.app.store import MemoryStore

F = TypeVar("F", bound=Callable[..., Any])

DATE_HELP = (
    "an ISO 8601 date or date-time, e.g. 2026-03-01 (the end of that day in your local "
    "time zone) or 2026-03-01T10:00:00Z"
)


def root_of(flag: str | os.PathLike[str] | None) -> ResolvedRoot:
    """:func:`~creative_memory.app.paths.resolve_root`, a bad value (a relative
    ``$MEMORY_STORAGE_ROOT``…) a usage error, on every command (the daemon's too)."""
    try:
        return resolve_root(flag)
    except PathConfigError as exc:
        raise click.UsageError(one_line(exc)) from exc


@dataclass
class State:
    """Global options, resolved lazily.

    Commands defined in other modules read ``data_dir``, ``user_flag`` and
    ``derivation_version`` from the context object (cli/daemon.py): keep these names."""

    data_dir: str | None = None
    user_flag: str | None = None
    json: bool = False
    derivation_version: str | None = None
    database_flag: str | None = None
    quiet: bool = False
    _store: MemoryStore | None = field(default=None, repr=False)
    _service: MemoryService | None = field(default=None, repr=False)
    _root: ResolvedRoot | None = field(default=None, repr=False)
    _user: ResolvedUser | None = field(default=None, repr=False)

    @property
    def root(self) -> ResolvedRoot:
        """The storage root and where it came from (checked to be usable)."""
        if self._root is None:
            root = root_of(self.data_dir)
            check_root(root.path)
            self._root = root
        return self._root

    @property
    def resolved_user(self) -> ResolvedUser:
        """The acting user and where it came from (an unsafe id is a usage error)."""
        if self._user is None:
            user = resolve_user(self.user_flag)
            try:
                validate_user_id(user.user_id)
            except ValidationError as exc:
                hint = "--user" if user.source == "--user" else user.source
                raise click.UsageError(f"{hint}: {one_line(exc)}") from exc
            self._user = user
        return self._user

    @property
    def user(self) -> str:
        """The acting user's id."""
        return self.resolved_user.user_id

    @property
    def store(self) -> MemoryStore:
        """The memory store (files under the root, or PostgreSQL with --database)."""
        if self._store is None:
            from creative_memory.app.store import MemoryStore

            database = self.database
            self._store = MemoryStore(
                database[0] if database else self.root.path,
                derivation_version=self.derivation_version,
            )
        return self._store

    @property
    def database(self) -> tuple[str, str] | None:
        """The PostgreSQL URL memory lives in and where it came from (``--database`` or
        ``$CREATIVE_MEMORY_DATABASE_URL``); ``None``: files under the root — also when a
        ``--data-dir`` was given, which says where memory is this time (both flags: a
        usage error). A bad URL is a usage error naming its source."""
        return self._database(data_dir_flag=self.data_dir is not None)

    @property
    def daemon_database(self) -> tuple[str, str] | None:
        """:attr:`database` for ``serve``, whose data dir holds the daemon's own files
        (tokens, logins, server.json) beside a database's memory: both may be given."""
        return self._database(data_dir_flag=False)

    def _database(self, *, data_dir_flag: bool) -> tuple[str, str] | None:
        try:
            url = resolve_database(self.database_flag, data_dir_flag=data_dir_flag)
        except PathConfigError as exc:
            raise click.UsageError(one_line(exc)) from exc
        if url is None:
            return None
        return url, "--database" if self.database_flag else DATABASE_ENV

    def options_given(self) -> str:
        """The global options given on the command line that choose the memory (data dir,
        user, database — its password shown as ``***``), shell-quoted: what a command
        suggested in advice needs to reach the same memory (the environment reaches it
        anyway)."""
        import shlex

        given = [
            ("--data-dir", self.data_dir),
            ("--database", redact_url(self.database_flag) if self.database_flag else None),
            ("--user", self.user_flag),
        ]
        return " ".join(f"{flag} {shlex.quote(value)}" for flag, value in given if value)

    @property
    def service(self) -> MemoryService:
        """The application service every command calls (docs/architecture.md)."""
        if self._service is None:
            from creative_memory.app.service import MemoryService

            self._service = MemoryService(self.store)
        return self._service


def validator(check: Callable[[str], str]) -> Callable[..., Any]:
    """A click callback running a library syntax check; its ValidationError is a usage
    error."""

    def callback(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
        """Check ``value`` (``None`` passes)."""
        if value is None:
            return None
        try:
            return check(value)
        except ValidationError as exc:
            raise click.BadParameter(one_line(exc)) from exc

    return callback


def _check_version(value: str) -> str:
    from creative_memory.engine.derivation.registry import check_version

    return check_version(value)


validate_user_flag = validator(validate_user_id)
validate_project = validator(validate_project_id)
validate_version = validator(_check_version)


_BARE_DATE = re.compile(r"([0-9]{4})(?:-([0-9]{2})(?:-([0-9]{2}))?)?")


def end_of_local_day(text: str) -> str | None:
    """``YYYY-MM-DD`` (or ``YYYY-MM``, ``YYYY``) as the last millisecond of that day (month,
    year) in the local time zone, in UTC; ``None`` when ``text`` is not a bare date."""
    m = _BARE_DATE.fullmatch(text)
    if m is None:
        return None
    year, month, day = int(m[1]), int(m[2] or 12), m[3]
    if not 1 <= month <= 12:
        return None
    try:
        if day is None:
            first_of_next = date(year + month // 12, month % 12 + 1, 1)
            last = date.fromordinal(first_of_next.toordinal() - 1)
        else:
            last = date(year, month, int(day))
        local = datetime.combine(last, time(23, 59, 59, 999000)).astimezone()
    except (ValueError, OverflowError):
        return None
    return format_ts(round(local.timestamp() * 1000))


def parse_date(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    """Parse a DATE option into ``YYYY-MM-DDTHH:MM:SS.mmmZ`` (syntax only). A date without
    a time is the end of that day in the local time zone; a date-time without a zone is
    UTC (docs/cli.md, "Dates and times")."""
    if value is None:
        return None
    text = value.strip()
    end = end_of_local_day(text)
    if end is not None:
        return end
    ms = try_parse_ts(text)
    if ms is None:
        raise click.BadParameter(
            f"{value!r} is not an ISO 8601 date (e.g. 2026-03-01 or 2026-03-01T10:00:00Z)"
        )
    return format_ts(ms)


def point_options(fn: F) -> F:
    """``--at-seq N`` / ``--as-of DATE``: show memory as it was right after event N, or as
    of a time (docs/time-travel.md). Parsed here; the service refuses a negative N or both."""
    fn = click.option(
        "--as-of",
        "as_of",
        metavar="DATE",
        callback=parse_date,
        help=f"As it was at {DATE_HELP}: right after the last event recorded by then.",
    )(fn)
    return click.option(
        "--at-seq",
        "at_seq",
        metavar="N",
        type=int,
        help="As it was right after event N (the seq of `explain`; 0: before the first).",
    )(fn)


# -- the global options, declared once -----------------------------------------------------
def _state(ctx: click.Context) -> State:
    return ctx.ensure_object(State)


def _set(attr: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    """A callback storing a valued option on the :class:`State` (a later one wins)."""

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        """Store ``value`` unless it was not given."""
        if value is not None:
            setattr(_state(ctx), attr, value)

    return callback


def _flag(attr: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    """A callback turning a flag on (given before or after the command, it counts)."""

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        """Set the flag when given."""
        if value:
            setattr(_state(ctx), attr, True)

    return callback


def _set_data_dir(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value == "":  # `--data-dir "$UNSET"` must never mean the default store
        raise click.BadParameter(EMPTY_DATA_DIR)
    _set("data_dir")(ctx, param, value)


def _set_database(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    problem = None if not value else database_url_problem(value)
    if problem is not None:
        raise click.BadParameter(problem)
    _set("database_flag")(ctx, param, value)


def _set_user(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    _set("user_flag")(ctx, param, validate_user_flag(ctx, param, value))


def _set_version(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    _set("derivation_version")(ctx, param, validate_version(ctx, param, value))


#: (name, option) for every global option. The main group and every command take them,
#: so ``creative-memory --user alice inspect`` and ``creative-memory inspect --user alice``
#: mean the same; the value given last wins.
GLOBAL_OPTIONS: tuple[click.Option, ...] = (
    click.Option(
        ["--data-dir", "g_data_dir"],
        metavar="DIR",
        expose_value=False,
        callback=_set_data_dir,
        help="Storage root (overrides OD_DATA_DIR and MEMORY_STORAGE_ROOT).",
    ),
    click.Option(
        ["--database", "g_database"],
        metavar="URL",
        expose_value=False,
        callback=_set_database,
        help="Store memory in PostgreSQL at this postgresql:// URL instead of files "
        "(default: $CREATIVE_MEMORY_DATABASE_URL if set).",
    ),
    click.Option(
        ["--user", "g_user"],
        metavar="ID",
        expose_value=False,
        callback=_set_user,
        help="Act for this user (default: $CREATIVE_MEMORY_USER, else your login name).",
    ),
    click.Option(
        ["--derivation-version", "g_derivation_version"],
        metavar="N",
        expose_value=False,
        callback=_set_version,
        help="Derive records with this derivation version (default: the library's).",
    ),
    click.Option(
        ["--json", "g_json"],
        is_flag=True,
        expose_value=False,
        callback=_flag("json"),
        help="Machine-readable JSON output.",
    ),
    click.Option(
        ["--quiet", "-q", "g_quiet"],
        is_flag=True,
        expose_value=False,
        callback=_flag("quiet"),
        help="No progress display on stderr.",
    ),
)
GLOBAL_NAMES: Final = frozenset(str(o.name) for o in GLOBAL_OPTIONS)


def global_options(fn: F) -> F:
    """Add the global options to a click command or group (before it is made)."""
    params: list[click.Parameter] = getattr(fn, "__click_params__", [])
    params.extend(reversed(GLOBAL_OPTIONS))  # click reverses decorator order
    fn.__click_params__ = params  # type: ignore[attr-defined]
    return fn


class Command(click.Command):
    """A command whose ``--help`` lists its own options first, then the global ones (its
    arguments are in the usage line and the text, not listed bare among the options)."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Two sections: ``Options`` and ``Global options``."""
        own: list[tuple[str, str]] = []
        shared: list[tuple[str, str]] = []
        for param in self.get_params(ctx):
            if isinstance(param, click.Argument):
                continue
            record = param.get_help_record(ctx)
            if record is not None:
                (shared if param.name in GLOBAL_NAMES else own).append(record)
        if own:
            with formatter.section("Options"):
                formatter.write_dl(own)
        if shared:
            with formatter.section("Global options (also accepted before the command)"):
                formatter.write_dl(shared)


def command(name: str | None = None, *, epilog: str) -> Callable[[F], click.Command]:
    """Make a command that takes the global options and gets the :class:`State` as first
    argument; a ``ValidationError`` names the option it is about."""

    def decorate(fn: F) -> click.Command:
        """Wrap ``fn`` as the command."""

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            """Call ``fn`` with the state; name the option a ValidationError is about."""
            ctx = click.get_current_context()
            state = _state(ctx)
            try:
                return fn(state, *args, **kwargs)
            except ValidationError as exc:
                raise validation_error(exc, ctx) from exc

        return click.command(name, cls=Command, epilog=epilog)(global_options(wrapper))

    return decorate
