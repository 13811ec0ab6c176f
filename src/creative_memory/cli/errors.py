"""One place that turns exceptions into exit codes and one line on stderr (docs/cli.md).

=====  =======================================================================================
code   meaning
=====  =======================================================================================
0      success (also: nothing to forget, a reset of a project without memory)
1      the operation failed: ``NotFound``, ``Conflict``, ``StorageError``, an unusable data
       dir, rejected ingest events, anything else — one line, no traceback
2      usage error: click's (unknown option, missing argument, a value that does not parse)
       and every ``ValidationError`` the service raises (it names the field)
141    stdout's reader went away (``| head -1``): quiet, as a tool SIGPIPE ended
=====  =======================================================================================
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from typing import Any, Final

import click

from creative_memory.engine.errors import LogDamaged, ValidationError

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
#: stdout's reader went away: 128 + SIGPIPE, what a shell reports for a tool SIGPIPE ended.
EXIT_PIPE: Final = 141

#: an ``ingest`` stopped by Ctrl-C between two events: 128 + SIGINT, as a shell reports it.
EXIT_INTERRUPTED: Final = 130

#: The exit codes as the ``--help`` epilog states them.
EXIT_CODES_HELP: Final = (
    "Exit codes: 0 ok; 1 the operation failed (not found, conflict, storage, anything else); "
    "2 usage error (bad options or arguments, invalid values); 130 ingest stopped by Ctrl-C; "
    "141 stdout's reader went away (| head)."
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


class Interrupted(OneLineError):
    """An ``ingest`` stopped by Ctrl-C between two events, shown on one line (exit 130)."""

    exit_code = EXIT_INTERRUPTED


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


def damaged(exc: LogDamaged, state: object) -> str:
    """A damaged memory's message, its advice naming the global options this command was
    given (``--data-dir``, ``--user``…), so the commands it suggests reach the same memory."""
    from creative_memory.engine.logcheck import REPAIR_HINT, repair_hint

    message = one_line(exc)
    options_given = getattr(state, "options_given", None)
    options = options_given() if callable(options_given) else ""
    return message.replace(REPAIR_HINT, repair_hint(options)) if options else message


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
        except BrokenPipeError as exc:  # `--help | head -1`
            raise pipe_closed(exc) from None

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command, mapping what it raises to exit codes."""
        try:
            result = super().invoke(ctx)
            sys.stdout.flush()  # a reader that went away shows here, while it can be handled
            return result
        except BrokenPipeError as exc:
            raise pipe_closed(exc) from None
        except click.UsageError as exc:
            raise usage_error(exc) from exc
        except (OneLineError, click.exceptions.Exit, click.Abort):
            raise
        except click.ClickException as exc:
            raise failure(exc) from exc
        except ValidationError as exc:
            raise validation_error(exc, None) from exc
        except LogDamaged as exc:
            raise OneLineError(damaged(exc, ctx.obj)) from exc
        except Exception as exc:  # NotFound, Conflict, StorageError, OSError, anything else
            raise failure(exc) from exc
        finally:
            # stdout (block-buffered in a pipe) first, so a report precedes its error line
            try:
                sys.stdout.flush()
            except BrokenPipeError:
                _silence_stdout()
            except Exception:  # an error is on its way; this flush is a courtesy
                pass


def pipe_closed(exc: BrokenPipeError) -> click.ClickException | click.exceptions.Exit:
    """The reader of stdout went away (``creative-memory inspect | head -1``): exit quietly
    with status 141, as a Unix tool killed by SIGPIPE does (docs/cli.md, "Exit codes and
    errors"). A broken pipe of a file the command was given (an export into a FIFO whose
    reader died) is an ordinary failure naming it."""
    if exc.filename is not None:
        return failure(exc)
    _silence_stdout()
    return click.exceptions.Exit(EXIT_PIPE)


def _silence_stdout() -> None:
    """Point stdout at the null device, so what is still buffered cannot fail again when
    Python flushes it on exit."""
    with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
        fd = sys.stdout.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
