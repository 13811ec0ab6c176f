"""Daemon commands: ``creative-memory serve``, ``token`` and ``ui`` (docs/daemon.md).

Registered on the main CLI group (``main.add_command(...)``); also runnable on their own as
``python -m creative_memory.cli.daemon serve|token|ui``. The server module (Starlette,
uvicorn) is imported only by the command that needs it, so the CLI stays quick to start.

They take the CLI's global options (``--data-dir``, ``--user``, ``--database``,
``--derivation-version``, ``--json``, ``--quiet``; declared once in
:mod:`creative_memory.cli.context`), before or after the command. The data directory is
resolved as everywhere in the CLI (docs/cli.md, "Where memory lives and whom it is for"):
``--data-dir``, then ``$OD_DATA_DIR/memory``, then ``$MEMORY_STORAGE_ROOT``, then the
platform's user data directory — never a cwd-relative fallback.
"""

from __future__ import annotations

import os
import webbrowser
from pathlib import Path
from typing import Any

import click

from creative_memory.app.paths import resolve_user
from creative_memory.cli.context import State, command, global_options, root_of
from creative_memory.cli.errors import Group
from creative_memory.cli.render import emit_json, safe
from creative_memory.engine.events import validate_user_id

DEFAULT_PORT = 7744


def _group_option(name: str) -> Any:
    """A global option from the context object (``creative-memory --data-dir D serve`` and
    ``creative-memory serve --data-dir D`` alike)."""
    ctx = click.get_current_context(silent=True)
    while ctx is not None:
        value = getattr(ctx.obj, name, None)
        if value is not None:
            return value
        ctx = ctx.parent
    return None


def resolve_data_dir(flag: str | os.PathLike[str] | None) -> Path:
    """``--data-dir`` → ``$OD_DATA_DIR/memory`` → ``$MEMORY_STORAGE_ROOT`` → platform dir
    (:func:`creative_memory.app.paths.resolve_root`); the global ``--data-dir`` counts."""
    if flag is None:
        flag = _group_option("data_dir")
    return root_of(flag).path


def resolve_user_id(flag: str | None) -> str:
    """``--user`` → ``$CREATIVE_MEMORY_USER`` → the login name made safe (as the CLI)."""
    if flag is None:
        flag = _group_option("user_flag")
    user = resolve_user(flag).user_id
    try:
        return validate_user_id(user)
    except ValueError as exc:
        raise click.BadParameter(" ".join(str(exc).split()), param_hint="--user") from exc


@command(
    epilog="""\b
Examples:
  creative-memory serve                         # http://127.0.0.1:7744, loopback only
  creative-memory serve --port 0                # pick a free port
  creative-memory serve --multi-user            # one user per token
  creative-memory serve --port 0 --json         # one JSON document on stdout once ready
  creative-memory serve --derivation background # derive after each batch, off the request
  creative-memory --data-dir /srv/memory serve --alarm-ms 20
--user is whose memory a single-user daemon serves; --database a PostgreSQL URL (daemon
state, the tokens, stays in the data dir, so replicas sharing a database are stateless
apart from their token file).
""",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="TCP port (0 picks a free one; see <data-dir>/.daemon/server.json).",
)
@click.option(
    "--multi-user",
    is_flag=True,
    help="Each token maps to its own user (create them with 'token --user NAME').",
)
@click.option(
    "--alarm-ms",
    type=click.FloatRange(min=0),
    default=50.0,
    show_default=True,
    help="Log a warning when a retrieval takes longer than this.",
)
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    help="Extra Host header value to accept (e.g. a name you bound with --host 0.0.0.0).",
)
@click.option(
    "--max-body-bytes",
    type=click.IntRange(min=1024),
    default=1024 * 1024,
    show_default=True,
    help="Largest JSON request body.",
)
@click.option(
    "--max-import-bytes",
    type=click.IntRange(min=1024),
    default=64 * 1024 * 1024,
    show_default=True,
    help="Largest archive upload.",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
)
@click.option(
    "--derivation",
    type=click.Choice(["lazy", "background"]),
    default=None,
    help="When derived state is brought up to date: on the first read after new events "
    "(lazy), or by a worker after each batch (background). "
    "[default: $CREATIVE_MEMORY_DERIVATION, else lazy]",
)
def serve(
    state: State,
    host: str,
    port: int,
    multi_user: bool,
    alarm_ms: float,
    allow_hosts: tuple[str, ...],
    max_body_bytes: int,
    max_import_bytes: int,
    log_level: str,
    derivation: str | None,
) -> None:
    """Run the local daemon: the HTTP API under /api/v1 and the Settings → Memory page.

    Binds to loopback by default. On first start a bearer token is created in
    <data-dir>/.daemon/tokens.json (0600); print it with 'creative-memory token', or open the
    page with 'creative-memory ui'. Logs are JSON lines on stderr. SIGINT/SIGTERM shut down
    gracefully and deliver pending coalesced events. With --json, one JSON document
    (url, data_dir, user_id, multi_user) is printed on stdout once the daemon listens.
    """
    from creative_memory.http import DaemonConfig, run_daemon
    from creative_memory.http.config import resolve_derivation

    try:
        mode = resolve_derivation(derivation)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="CREATIVE_MEMORY_DERIVATION") from exc
    root = resolve_data_dir(state.data_dir)
    if host not in ("127.0.0.1", "localhost", "::1"):
        hint = (
            "" if allow_hosts else " Pass --allow-host NAME for the Host header clients will send."
        )
        click.echo(
            f"warning: binding to {safe(host)}, not loopback; anyone who can reach it still "
            f"needs a token.{hint}",
            err=True,
        )
    user = resolve_user_id(state.user_flag)
    config = DaemonConfig(
        root=root,
        host="127.0.0.1" if host == "localhost" else host,
        port=port,
        multi_user=multi_user,
        user=user,
        alarm_ms=alarm_ms,
        derivation_version=state.derivation_version,
        database=database[0] if (database := state.daemon_database) else None,
        allowed_hosts=allow_hosts,
        max_body_bytes=max_body_bytes,
        max_import_bytes=max_import_bytes,
        log_level=log_level,
        derivation=mode,
    )

    def ready(url: str) -> None:
        if state.json:
            emit_json(
                {
                    "url": url,
                    "data_dir": str(root),
                    "user_id": None if multi_user else user,
                    "multi_user": multi_user,
                }
            )
        click.echo(f"creative-memory daemon on {url} (data: {safe(root)})", err=True)
        click.echo("Open the page: creative-memory ui" + _dir_hint(state.data_dir), err=True)

    run_daemon(config, ready=ready)


def _dir_hint(data_dir: str | None) -> str:
    return f" --data-dir {safe(data_dir)}" if data_dir else ""


@command(
    epilog="""\b
Examples:
  creative-memory token                         # print the bearer token
  creative-memory token --user alice            # multi-user mode: alice's token
  creative-memory token --json | jq -r .token
  curl -H "Authorization: Bearer $(creative-memory token)" http://127.0.0.1:7744/api/v1/memory
Without --user: the running single-user daemon's user, else the CLI's user.
""",
)
@click.option("--rotate", is_flag=True, help="Replace the token (the old one stops working).")
def token(state: State, rotate: bool) -> None:
    """Print the daemon's bearer token (created if there is none yet).

    Send it as 'Authorization: Bearer <token>'. In multi-user mode run it once per user.
    """
    from creative_memory.http import DaemonFiles
    from creative_memory.storage.files.fsutil import make_private_dir

    root = resolve_data_dir(state.data_dir)
    make_private_dir(root)
    files = DaemonFiles(root)
    user = state.user_flag
    if user is None:
        # no --user: the user of a running single-user daemon, if any, else as the CLI
        info = files.read_server_info() or {}
        if info.get("multi_user") is False and isinstance(info.get("user"), str):
            user = info["user"]
    user_id = resolve_user_id(user)
    tok = files.token_for(user_id, create=True, rotate=rotate)
    if state.json:
        emit_json({"user_id": user_id, "token": tok, "rotated": rotate})
        return
    click.echo(tok)


@command(
    epilog="""\b
Examples:
  creative-memory ui                            # print and open a one-time login link
  creative-memory ui --no-browser               # just print it
  creative-memory ui --no-browser --json        # {"url": ..., "data_dir": ...}
""",
)
@click.option("--no-browser", is_flag=True, help="Only print the link.")
def ui(state: State, no_browser: bool) -> None:
    """Print and open a one-time login link to the running daemon's Settings → Memory page
    (--user: whose page, in multi-user mode).

    The link works once, within 5 minutes; it sets a session cookie for this browser.
    """
    from creative_memory.http import login_url

    root = resolve_data_dir(state.data_dir)
    url = login_url(root, resolve_user_id(state.user_flag))
    if state.json:
        emit_json({"url": url, "data_dir": str(root)})
    else:
        click.echo(url)
    if not no_browser:
        webbrowser.open(url)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@global_options
@click.pass_context
def cli(ctx: click.Context) -> None:
    """creative-memory daemon commands (the same as ``creative-memory serve|token|ui``)."""
    ctx.ensure_object(State)


cli.add_command(serve)
cli.add_command(token)
cli.add_command(ui)

__all__ = ["cli", "resolve_data_dir", "resolve_user_id", "serve", "token", "ui"]

if __name__ == "__main__":
    cli()
