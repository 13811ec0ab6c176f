"""The CLI's lazily built context (data dir, user, store, service) and the command decorator.

Global options are resolved only when a command needs them: ``demo`` and ``--help`` touch
no storage. Reference: docs/cli.md.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import click

from creative_memory.app.paths import (
    ResolvedRoot,
    ResolvedUser,
    check_root,
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

DATE_HELP = "an ISO 8601 date or date-time, e.g. 2026-03-01 or 2026-03-01T10:00:00Z (UTC)"


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
    _store: MemoryStore | None = field(default=None, repr=False)
    _service: MemoryService | None = field(default=None, repr=False)
    _root: ResolvedRoot | None = field(default=None, repr=False)
    _user: ResolvedUser | None = field(default=None, repr=False)

    @property
    def root(self) -> ResolvedRoot:
        """The storage root and where it came from (checked to be usable)."""
        if self._root is None:
            root = resolve_root(self.data_dir)
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

            database = resolve_database(self.database_flag)
            self._store = MemoryStore(
                database or self.root.path, derivation_version=self.derivation_version
            )
        return self._store

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


def parse_date(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    """Parse a DATE option into ``YYYY-MM-DDTHH:MM:SS.mmmZ`` (syntax only)."""
    if value is None:
        return None
    ms = try_parse_ts(value.strip())
    if ms is None:
        raise click.BadParameter(
            f"{value!r} is not an ISO 8601 date (e.g. 2026-03-01 or 2026-03-01T10:00:00Z)"
        )
    return format_ts(ms)


def command(name: str | None = None, *, epilog: str) -> Callable[[F], click.Command]:
    """Make a command with a ``--json`` flag (merged with the global one) that gets the
    :class:`State` as first argument; a ``ValidationError`` names the option it is about."""

    def decorate(fn: F) -> click.Command:
        """Wrap ``fn`` as the command."""
        @functools.wraps(fn)
        def wrapper(*args: Any, as_json: bool, **kwargs: Any) -> Any:
            """Call ``fn`` with the state; name the option a ValidationError is about."""
            ctx = click.get_current_context()
            state = ctx.find_object(State)
            if state is None:  # pragma: no cover - always set by main
                state = State()
            state.json = state.json or as_json
            try:
                return fn(state, *args, **kwargs)
            except ValidationError as exc:
                raise validation_error(exc, ctx) from exc

        option = click.option(
            "--json", "as_json", is_flag=True, help="Machine-readable JSON output."
        )
        cmd = click.command(name, epilog=epilog)(option(wrapper))
        # --json last in --help, after the command's own options
        cmd.params.sort(key=lambda p: p.name == "as_json")
        return cmd

    return decorate
