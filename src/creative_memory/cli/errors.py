"""One place that turns exceptions into exit codes and one line on stderr (docs/cli.md).

=====  =======================================================================================
code   meaning
=====  =======================================================================================
0      success (also: nothing to forget, a reset of a project without memory)
1      the operation failed: ``NotFound``, ``Conflict``, ``StorageError``, an unusable data
       dir, rejected ingest events, anything else — one line, no traceback
2      usage error: click's (unknown option, missing argument, a value that does not parse)
       and every ``ValidationError`` the service raises (it names the field)
=====  =======================================================================================
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Final

import click

from creative_memory.engine.errors import ValidationError

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2

#: The exit codes as the ``--help`` epilog states them.
EXIT_CODES_HELP: Final = (
    "Exit codes: 0 ok; 1 the operation failed (not found, conflict, storage, anything else); "
    "2 usage error (bad options or arguments, invalid values)."
)


def one_line_text(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) made one space."""
    return " ".join(text.split())


def error_line(message: str) -> str:
    """An error message as it is printed: one line, and every control, format or bidi
    character left in it (an argument's ESC, a ``\u202e``) escaped by ``render.safe``, so
    what a person typed or a host stored cannot drive the terminal (docs/cli.md,
    "Conventions")."""
    from creative_memory.cli.render import safe

    return safe(one_line_text(message))


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (its type name when it has none)."""
    return one_line_text(str(exc)) or type(exc).__name__


def _os_error(exc: OSError) -> str:
    what = exc.strerror or one_line(exc)
    if exc.filename:
        return f"cannot use {exc.filename}: {what}"
    return what


class OneLineUsageError(click.UsageError):
    """A usage error shown on one line (with where to find help), exit 2."""

    def show(self, file: Any = None) -> None:
        """Print ``Error: <message> (see '<command> --help')`` on stderr."""
        hint = f" (see '{self.ctx.command_path} --help')" if self.ctx is not None else ""
        click.echo(f"Error: {error_line(self.format_message())}{hint}", err=True)


class OneLineError(click.ClickException):
    """A failure shown on one line, escaped (exit 1)."""

    def show(self, file: Any = None) -> None:
        """Print ``Error: <message>`` on stderr."""
        click.echo(f"Error: {error_line(self.format_message())}", err=True)


def usage_error(exc: click.UsageError) -> click.UsageError:
    """Click's usage error as a one-line one (exit 2); a group called without a command
    keeps click's answer, its whole help (on stderr, exit 2)."""
    if isinstance(exc, (OneLineUsageError, click.exceptions.NoArgsIsHelpError)):
        return exc
    return OneLineUsageError(one_line_text(exc.format_message()), exc.ctx)


def validation_error(exc: ValidationError, ctx: click.Context | None) -> OneLineUsageError:
    """A service ``ValidationError`` as a usage error (exit 2); when its field is one of the
    command's valued options or arguments, the message names it as click would."""
    message = one_line(exc)
    param = _param_for(ctx, exc.field) if ctx is not None else None
    if param is not None:
        message = f"Invalid value for {param}: {message}"
    return OneLineUsageError(message, ctx)


def _param_for(ctx: click.Context, field: str) -> str | None:
    for p in ctx.command.params:
        if p.name not in (field, field.removesuffix("_id")):
            continue
        if isinstance(p, click.Option) and not p.is_flag:
            return f"'{p.opts[0]}'"
        if isinstance(p, click.Argument):
            return f"'{p.human_readable_name}'"
    return None


def failure(exc: BaseException) -> click.ClickException:
    """Any other failure as one line, exit 1."""
    if isinstance(exc, click.ClickException):
        return OneLineError(exc.format_message())
    if isinstance(exc, OSError):
        return OneLineError(_os_error(exc))
    return OneLineError(one_line(exc))


class Group(click.Group):
    """A click group whose commands fail with one line: usage and validation errors exit 2,
    every other failure exits 1 (see the module docstring)."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        """Parse the arguments; a usage error is shown on one line."""
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:
            raise usage_error(exc) from exc

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command, mapping what it raises to exit codes."""
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            raise usage_error(exc) from exc
        except (OneLineError, click.exceptions.Exit, click.Abort):
            raise
        except click.ClickException as exc:
            raise failure(exc) from exc
        except ValidationError as exc:
            raise validation_error(exc, None) from exc
        except Exception as exc:  # NotFound, Conflict, StorageError, OSError, anything else
            raise failure(exc) from exc
        finally:
            # stdout (block-buffered in a pipe) first, so a report precedes its error line
            with contextlib.suppress(Exception):
                sys.stdout.flush()
