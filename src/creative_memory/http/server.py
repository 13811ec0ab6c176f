"""The local daemon (design.md §7, issue 4): an HTTP JSON API and the Settings → Memory page.

``create_app(config)`` builds the ASGI application (Starlette); ``run_daemon(config)`` binds
the socket and serves it with uvicorn. The OpenAPI document is written by hand in
:func:`openapi_document` and published at ``GET /openapi.json``.

Security model
--------------
* Binds to loopback by default. The ``Host`` header must name this daemon (``localhost``,
  ``127.0.0.1`` or ``[::1]`` with the port, the configured host, or an explicitly allowed
  name) — a DNS-rebinding page cannot talk to it.
* Every route but ``/healthz``, ``/login`` and the page's static assets needs credentials:
  ``Authorization: Bearer <token>`` or the page's session cookie. Tokens live in
  ``<data-dir>/.daemon/tokens.json`` (directory 0700, file 0600; the leading dot keeps the
  name out of the user-id alphabet, so it can never collide with a user's directory). In
  single-user mode only the configured user's token is accepted; in multi-user mode each
  token maps to exactly one user and every request acts for that user only.
* ``creative-memory ui`` writes a one-time login nonce (hashed, 5 minutes) into
  ``.daemon/logins.json``; ``GET /login?once=…`` consumes it and sets an ``HttpOnly``,
  ``SameSite=Strict`` session cookie. Cookie-authenticated writes also need the header
  ``X-Requested-With: creative-memory`` (a cross-origin page cannot set it without a CORS
  preflight, and the daemon answers no preflight).
* No CORS headers are ever sent. Request bodies are limited (413). Every error is an
  ``application/problem+json`` document (RFC 9457) with ``type``, ``title``, ``status``,
  ``detail`` and, when known, the offending ``field``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import logging.config
import os
import secrets
import socket
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote

import msgspec
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from creative_memory._version import __version__
from creative_memory.app.feed import diagnostics_feed_line
from creative_memory.app.store import MemoryStore, wall_clock_ms
from creative_memory.capture import adapter
from creative_memory.capture.layer import CAPTURE_ONLY_KINDS, CaptureConfig, CaptureLayer, describe
from creative_memory.engine.errors import StorageError, ValidationError
from creative_memory.engine.events import validate_project_id, validate_user_id
from creative_memory.engine.models import RetrievalResult
from creative_memory.engine.portability.archive import encode_archive
from creative_memory.engine.prompt import (
    build_critique_block,
    build_generation_block,
    build_prompt_block,
    insert_memory_block_into_prompt,
)
from creative_memory.engine.timeutil import instant_to_ms

try:  # POSIX advisory locks; the daemon's state files are only locked where available
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("creative_memory.http.server")

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 7744
DEFAULT_USER: Final = "default"
DEFAULT_ALARM_MS: Final = 50.0
DEFAULT_MAX_BODY: Final = 1024 * 1024  # JSON requests
DEFAULT_MAX_IMPORT: Final = 64 * 1024 * 1024  # archive uploads
MAX_BATCH: Final = 1000  # events per POST /api/v1/events
MAX_JSON_DEPTH: Final = 64
LOGIN_TTL_S: Final = 300
SESSION_TTL_S: Final = 24 * 3600
STATE_DIR: Final = ".daemon"
CSRF_HEADER: Final = "x-requested-with"
CSRF_VALUE: Final = "creative-memory"
PROBLEM: Final = "application/problem+json"
LOOPBACK_NAMES: Final = ("localhost", "127.0.0.1", "[::1]")
EVENT_KINDS: Final = (*adapter.HANDLERS, *CAPTURE_ONLY_KINDS)
VARIANTS: Final = ("generation", "critique", "legacy")
COMPOSE_VARIANTS: Final = ("generation", "critique")  # the variants with a heading to place
_RESERVED_IDS: Final = ("__proto__", "constructor", "prototype")
_SAFE_ID_PATTERN: Final = "^[A-Za-z0-9_-]+$"
_MAX_USER_ID: Final = 128


# ---------------------------------------------------------------------------------------------
# Problems (RFC 9457)
# ---------------------------------------------------------------------------------------------
class Problem(Exception):
    """An HTTP error answered with an ``application/problem+json`` document."""

    def __init__(
        self,
        status: int,
        title: str,
        detail: str,
        *,
        slug: str | None = None,
        field: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.title = title
        self.detail = detail
        self.slug = slug or title.lower().replace(" ", "-")
        self.field = field
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": f"urn:creative-memory:problem:{self.slug}",
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
        }
        if self.field is not None:
            out["field"] = self.field
        return out

    def response(self) -> Response:
        return Response(
            json.dumps(self.body(), ensure_ascii=False),
            status_code=self.status,
            media_type=PROBLEM,
            headers=self.headers,
        )


def _bad_input(detail: str, field: str | None, status: int = 422) -> Problem:
    title = "Invalid request" if status == 422 else "Malformed request"
    return Problem(status, title, detail, slug="invalid-request", field=field)


def _unauthorized(detail: str) -> Problem:
    return Problem(
        401,
        "Unauthorized",
        detail,
        slug="unauthorized",
        headers={"WWW-Authenticate": 'Bearer realm="creative-memory"'},
    )


# ---------------------------------------------------------------------------------------------
# Structured logs
# ---------------------------------------------------------------------------------------------
class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``message`` and the record's
    ``fields`` (pass ``extra={"fields": {...}}``)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, Mapping):
            out.update(fields)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def configure_logging(level: str = "info", stream: Any = None) -> None:
    """Route this module's and uvicorn's logs through :class:`JsonFormatter` on stderr."""
    logging.config.dictConfig(
        {
            "version": 1,
            "disable_existing_loggers": False,
            "formatters": {"json": {"()": JsonFormatter}},
            "handlers": {
                "stderr": {
                    "class": "logging.StreamHandler",
                    "formatter": "json",
                    "stream": stream or sys.stderr,
                }
            },
            "loggers": {
                name: {"handlers": ["stderr"], "level": level.upper(), "propagate": False}
                for name in ("creative_memory", "uvicorn", "uvicorn.error")
            }
            | {"uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False}},
        }
    )


def _log(level: int, message: str, **fields: Any) -> None:
    log.log(level, message, extra={"fields": {"event": message, **fields}})


# ---------------------------------------------------------------------------------------------
# Daemon state files: tokens, one-time logins, the running server's address
# ---------------------------------------------------------------------------------------------
def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def make_private_dir(path: Path) -> None:
    """Create ``path`` (and missing parents) with mode 0700."""
    if path.is_dir():
        return
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (mode 0600) atomically: temp file, fsync, rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def check_user_id(user_id: str) -> str:
    """A user id the daemon can hand out a token for (the store's safe-id rule, ≤ 128)."""
    validate_user_id(user_id)
    if len(user_id) > _MAX_USER_ID:
        raise ValidationError("user_id", f"user_id is longer than {_MAX_USER_ID} characters")
    return user_id


class DaemonFiles:
    """``<root>/.daemon/``: ``tokens.json`` (token → user), ``logins.json`` (pending one-time
    logins, hashed) and ``server.json`` (where the running daemon listens). Directory 0700,
    files 0600, whole-file writes atomic, read-modify-write under an ``flock``."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.dir = self.root / STATE_DIR
        self.tokens_path = self.dir / "tokens.json"
        self.logins_path = self.dir / "logins.json"
        self.server_path = self.dir / "server.json"

    def ensure(self) -> Path:
        make_private_dir(self.dir)
        return self.dir

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        self.ensure()
        fd = os.open(self.dir / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _read(self, path: Path) -> dict[str, Any]:
        try:
            data = json.loads(path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise StorageError(f"cannot read {path}: {exc}") from exc
        return data if isinstance(data, dict) else {}

    def _write(self, path: Path, data: Mapping[str, Any]) -> None:
        self.ensure()
        atomic_write(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())

    # -- tokens --------------------------------------------------------------------------
    def read_tokens(self) -> dict[str, str]:
        """token → user id (malformed entries are ignored)."""
        entries = self._read(self.tokens_path).get("tokens", [])
        out: dict[str, str] = {}
        if isinstance(entries, list):
            for e in entries:
                if isinstance(e, dict):
                    tok, user = e.get("token"), e.get("user_id")
                    if isinstance(tok, str) and tok and isinstance(user, str):
                        out[tok] = user
        return out

    def token_for(self, user_id: str, *, create: bool = True, rotate: bool = False) -> str | None:
        """The user's bearer token, created (or replaced with ``rotate``) when needed."""
        check_user_id(user_id)
        with self.locked():
            tokens = self.read_tokens()
            current = [t for t, u in tokens.items() if u == user_id]
            if current and not rotate:
                return current[0]
            if not create and not rotate:
                return None
            token = secrets.token_urlsafe(32)
            kept = {t: u for t, u in tokens.items() if u != user_id}
            kept[token] = user_id
            self._write_tokens(kept)
            return token

    def _write_tokens(self, tokens: Mapping[str, str]) -> None:
        self._write(
            self.tokens_path,
            {
                "about": "creative-memory daemon bearer tokens; each token acts for one user. "
                "Keep this file private (0600).",
                "format": "creative-memory-daemon-tokens",
                "version": 1,
                "tokens": [
                    {"token": t, "user_id": u}
                    for t, u in sorted(tokens.items(), key=lambda x: x[1])
                ],
            },
        )

    def tokens_signature(self) -> tuple[int, int, int] | None:
        try:
            st = self.tokens_path.stat()
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    # -- one-time logins -------------------------------------------------------------------
    def create_login(self, user_id: str, ttl_s: float = LOGIN_TTL_S) -> str:
        """A one-time login nonce for ``user_id`` (stored hashed, valid ``ttl_s`` seconds)."""
        check_user_id(user_id)
        nonce = secrets.token_urlsafe(32)
        now = wall_clock_ms()
        with self.locked():
            pending = self._pending_logins(now)
            pending.append(
                {"hash": _sha256(nonce), "user_id": user_id, "expires_ms": now + int(ttl_s * 1000)}
            )
            self._write(self.logins_path, {"version": 1, "logins": pending})
        return nonce

    def consume_login(self, nonce: str) -> str | None:
        """The user of a valid, unexpired nonce (which is used up), else ``None``."""
        digest = _sha256(nonce)
        now = wall_clock_ms()
        with self.locked():
            pending = self._pending_logins(now)
            found = None
            for entry in pending:
                if hmac.compare_digest(str(entry.get("hash")), digest):
                    found = entry
            if found is None:
                return None
            pending.remove(found)
            self._write(self.logins_path, {"version": 1, "logins": pending})
            user = found.get("user_id")
            return user if isinstance(user, str) else None

    def _pending_logins(self, now: int) -> list[dict[str, Any]]:
        raw = self._read(self.logins_path).get("logins", [])
        if not isinstance(raw, list):
            return []
        return [
            e
            for e in raw
            if isinstance(e, dict)
            and isinstance(e.get("expires_ms"), int)
            and e["expires_ms"] > now
        ]

    # -- server info -------------------------------------------------------------------------
    def write_server_info(self, info: Mapping[str, Any]) -> None:
        self._write(self.server_path, info)

    def read_server_info(self) -> dict[str, Any] | None:
        info = self._read(self.server_path)
        return info or None

    def remove_server_info(self, pid: int) -> None:
        with self.locked():
            info = self._read(self.server_path)
            if info.get("pid") == pid:
                with contextlib.suppress(FileNotFoundError):
                    self.server_path.unlink()


class _TokenCache:
    """Tokens re-read whenever ``tokens.json`` changes (a rotation applies immediately)."""

    def __init__(self, files: DaemonFiles) -> None:
        self.files = files
        self._sig: tuple[int, int, int] | None = None
        self._tokens: dict[str, str] = {}

    def _current(self) -> dict[str, str]:
        sig = self.files.tokens_signature()
        if sig != self._sig:
            self._tokens = self.files.read_tokens() if sig is not None else {}
            self._sig = sig
        return self._tokens

    def lookup(self, token: str) -> str | None:
        found = None
        for tok, user in self._current().items():  # constant time per candidate
            if hmac.compare_digest(tok.encode(), token.encode()):
                found = user
        return found

    def has_user(self, user_id: str) -> bool:
        return user_id in self._current().values()


# ---------------------------------------------------------------------------------------------
# Configuration and the daemon object
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DaemonConfig:
    """Everything ``creative-memory serve`` decides. ``port`` is the bound port (used for the
    Host check and the cookie name). ``allowed_hosts`` adds names accepted in ``Host``."""

    root: Path
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    multi_user: bool = False
    user: str = DEFAULT_USER
    alarm_ms: float = DEFAULT_ALARM_MS
    max_body_bytes: int = DEFAULT_MAX_BODY
    max_import_bytes: int = DEFAULT_MAX_IMPORT
    allowed_hosts: tuple[str, ...] = ()
    tick_seconds: float = 1.0
    derivation_version: str | None = None
    database: str | None = None  # a postgresql:// URL; None = the file store under root
    capture: CaptureConfig = field(default_factory=CaptureConfig)
    log_level: str = "info"


def allowed_host_headers(config: DaemonConfig) -> frozenset[str]:
    """Every ``Host`` header value the daemon answers (lower case)."""
    names = set(LOOPBACK_NAMES)
    host = config.host.strip().lower()
    if host and host not in ("0.0.0.0", "::", "[::]", ""):
        names.add(f"[{host}]" if ":" in host and not host.startswith("[") else host)
    out = {f"{n}:{config.port}" for n in names}
    if config.port == 80:
        out |= names
    for extra in config.allowed_hosts:
        e = extra.strip().lower()
        if e:
            out.add(e)
            if ":" not in e.rsplit("]", 1)[-1]:
                out.add(f"{e}:{config.port}")
    return frozenset(out)


@dataclass
class _Session:
    user: str
    expires_ms: int


class Daemon:
    """The application state: the store, the capture layer, tokens and sessions."""

    def __init__(self, config: DaemonConfig, *, store: MemoryStore | None = None) -> None:
        self.config = config
        if not config.multi_user:
            check_user_id(config.user)
        self.store = store or MemoryStore(
            config.database or config.root, derivation_version=config.derivation_version
        )
        self.capture = CaptureLayer(self.store, config.capture)
        self.files = DaemonFiles(config.root)
        self.tokens = _TokenCache(self.files)
        self.sessions: dict[str, _Session] = {}
        self.cookie_name = f"cm_session_{config.port}"
        self.hosts = allowed_host_headers(config)
        self.closed = False
        self.web = _load_web()

    # -- authentication ----------------------------------------------------------------------
    def authenticate(self, request: Request) -> str:
        """The user the request acts for; raises a 401/403 :class:`Problem` otherwise."""
        header = request.headers.get("authorization")
        if header is not None:
            scheme, _, credential = header.strip().partition(" ")
            credential = credential.strip()
            if scheme.lower() != "bearer" or not credential:
                raise _unauthorized("the Authorization header must be 'Bearer <token>'")
            user = self.tokens.lookup(credential)
            if user is None or (not self.config.multi_user and user != self.config.user):
                raise _unauthorized("the bearer token is not valid for this daemon")
            request.scope["cm_user"] = user
            return user
        user = self.session_user(request)
        if user is None:
            raise _unauthorized(
                "credentials required: send 'Authorization: Bearer <token>' "
                "(creative-memory token) or sign in with creative-memory ui"
            )
        if request.method not in ("GET", "HEAD") and (
            request.headers.get(CSRF_HEADER) != CSRF_VALUE
        ):
            raise Problem(
                403,
                "Forbidden",
                f"cookie-authenticated writes need the header X-Requested-With: {CSRF_VALUE}",
                slug="csrf",
                field=CSRF_HEADER,
            )
        request.scope["cm_user"] = user
        return user

    def session_user(self, request: Request) -> str | None:
        sid = request.cookies.get(self.cookie_name)
        if not sid:
            return None
        key = _sha256(sid)
        s = self.sessions.get(key)
        if s is None:
            return None
        if s.expires_ms <= wall_clock_ms() or not self._user_allowed(s.user):
            self.sessions.pop(key, None)
            return None
        return s.user

    def _user_allowed(self, user: str) -> bool:
        if self.config.multi_user:
            return self.tokens.has_user(user)
        return user == self.config.user

    def new_session(self, user: str) -> str:
        now = wall_clock_ms()
        for k in [k for k, s in self.sessions.items() if s.expires_ms <= now]:
            del self.sessions[k]
        sid = secrets.token_urlsafe(32)
        self.sessions[_sha256(sid)] = _Session(user, now + SESSION_TTL_S * 1000)
        return sid

    # -- timed retrieval -------------------------------------------------------------------
    def timed(
        self, operation: str, user: str, project_id: str | None, fn: Callable[[], Any]
    ) -> Any:
        start = time.perf_counter()
        result = fn()
        ms = (time.perf_counter() - start) * 1000
        if ms > self.config.alarm_ms:
            _log(
                logging.WARNING,
                "slow_retrieval",
                operation=operation,
                user=user,
                project_id=project_id,
                duration_ms=round(ms, 2),
                alarm_ms=self.config.alarm_ms,
            )
        return result

    def retrieve(self, user: str, project_id: str | None) -> RetrievalResult:
        ctx = None if project_id is None else {"project_id": project_id}
        result: RetrievalResult = self.timed(
            "retrieve", user, project_id, lambda: self.store.retrieve_for_injection(user, ctx)
        )
        return result

    # -- shutdown ----------------------------------------------------------------------------
    def flush_pending(self) -> None:
        """Deliver every pending coalesced event (graceful shutdown)."""
        if self.closed:
            return
        self.closed = True
        report = self.capture.close()
        _log(
            logging.INFO,
            "capture_flushed",
            flushed=report.flushed,
            failed=report.failed,
            summary=describe(report),
        )
        try:  # reads defer write-back: leave the derivation cache current
            self.store.flush()
        except Exception as exc:  # the cache is disposable: never fail a shutdown over it
            _log(logging.WARNING, "derived_state_not_written", error=str(exc))


# ---------------------------------------------------------------------------------------------
# Request helpers
# ---------------------------------------------------------------------------------------------
def _daemon(request: Request) -> Daemon:
    d: Daemon = request.app.state.daemon
    return d


async def _read_body(request: Request, limit: int) -> bytes:
    length = request.headers.get("content-length")
    if length is not None:
        try:
            n = int(length)
        except ValueError:
            raise _bad_input("Content-Length is not a number", "content-length", 400) from None
        if n > limit:
            raise _too_large(limit)
    chunks: list[bytes] = []
    total = 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(limit: int) -> Problem:
    return Problem(
        413,
        "Payload too large",
        f"the request body is larger than {limit} bytes",
        slug="payload-too-large",
        field="body",
    )


def _check_json_type(request: Request) -> None:
    ctype = request.headers.get("content-type")
    if ctype is None:
        return
    media = ctype.split(";", 1)[0].strip().lower()
    if media and media != "application/json" and not media.endswith("+json"):
        raise Problem(
            415,
            "Unsupported media type",
            f"send JSON (Content-Type: application/json), not {media}",
            slug="unsupported-media-type",
            field="content-type",
        )


def _depth_ok(value: Any, limit: int) -> bool:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            if d > limit:
                return False
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            if d > limit:
                return False
            stack.extend((x, d + 1) for x in v)
    return True


async def _read_json(request: Request, limit: int) -> Any:
    _check_json_type(request)
    body = await _read_body(request, limit)
    if not body.strip():
        raise _bad_input("the request body is empty; send a JSON document", "body", 400)
    try:
        value = msgspec.json.decode(body)
    except (msgspec.MsgspecError, RecursionError) as exc:
        raise _bad_input(f"the request body is not valid JSON ({exc})", "body", 400) from None
    if not _depth_ok(value, MAX_JSON_DEPTH):
        raise _bad_input(f"JSON nested deeper than {MAX_JSON_DEPTH} levels", "body")
    return value


async def _read_object(
    request: Request, d: Daemon, known: Sequence[str], hint: str, noun: str = "field"
) -> dict[str, Any]:
    """A JSON object body whose keys are all in ``known`` (``hint`` says what to send)."""
    body = await _read_json(request, d.config.max_body_bytes)
    if not isinstance(body, dict):
        raise _bad_input(hint, "body")
    for key in body:
        if key not in known:
            raise _bad_input(f"unknown {noun} {key!r}; known: {', '.join(known)}", key)
    return body


def _query(request: Request, name: str) -> str | None:
    values = request.query_params.getlist(name)
    if not values:
        return None
    if len(values) > 1:
        raise _bad_input(f"{name} given more than once", name)
    return values[0]


def _project_param(request: Request) -> str | None:
    value = _query(request, "project_id")
    if value is None or value == "":
        return None
    return validate_project_id(value)


def _choice(request: Request, name: str, choices: tuple[str, ...], default: str) -> str:
    value = _query(request, name)
    if value is None:
        return default
    if value not in choices:
        raise _bad_input(f"{name} must be one of {', '.join(choices)}; got {value!r}", name)
    return value


def _json(data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(
        msgspec.json.encode(data),
        status_code=status,
        media_type="application/json",
        headers=dict(headers or {}),
    )


def _settings_dict(store: MemoryStore, user: str) -> dict[str, Any]:
    s = store.get_settings(user)
    return {**msgspec.to_builtins(s), "paused_now": store.is_paused(user)}


# ---------------------------------------------------------------------------------------------
# Endpoints
# ---------------------------------------------------------------------------------------------
async def healthz(request: Request) -> Response:
    return _json({"status": "ok", "version": __version__})


async def openapi(request: Request) -> Response:
    _daemon(request).authenticate(request)
    return _json(openapi_document())


async def get_memory(request: Request) -> Response:
    d = _daemon(request)
    user = d.authenticate(request)
    project_id = _project_param(request)

    def work() -> dict[str, Any]:
        data: dict[str, Any] = d.timed(
            "inspect", user, project_id, lambda: d.store.inspect(user, project_id)
        )
        projects = set(data["settings"].get("disabled_projects", []))
        for rec in data["preferences"]:
            scope = rec.get("scope", "")
            if isinstance(scope, str) and scope.startswith("project:"):
                projects.add(scope[len("project:") :])
        data["projects"] = sorted(projects)
        return data

    return _json(await run_in_threadpool(work))


async def post_events(request: Request) -> Response:
    d = _daemon(request)
    user = d.authenticate(request)
    body = await _read_json(request, d.config.max_body_bytes)
    if isinstance(body, dict):
        items, prefix = [body], ""
    elif isinstance(body, list):
        items, prefix = body, "events"
        if len(body) > MAX_BATCH:
            raise _bad_input(f"at most {MAX_BATCH} events per request", "body")
    else:
        raise _bad_input("send one event object or an array of event objects", "body")
    events: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        where = f"{prefix}[{i}]" if prefix else ""
        if not isinstance(item, dict):
            raise _bad_input("each event must be a JSON object", where or "body")
        kind = item.get("event")
        if not isinstance(kind, str) or kind not in EVENT_KINDS:
            raise _bad_input(
                f"event must be one of {', '.join(EVENT_KINDS)}; got {kind!r}",
                f"{where}.event" if where else "event",
            )
        trigger = item.get("trigger")
        if trigger is not None and not isinstance(trigger, str):
            raise _bad_input("trigger must be a string", f"{where}.trigger" if where else "trigger")
        owner = item.get("user_id")
        if owner is None:
            item = {**item, "user_id": user}
        elif not isinstance(owner, str):
            raise _bad_input("user_id must be a string", f"{where}.user_id" if where else "user_id")
        elif owner != user:
            raise Problem(
                403,
                "Forbidden",
                "events may only be sent for the token's own user; nothing was ingested",
                slug="wrong-user",
                field=f"{where}.user_id" if where else "user_id",
            )
        events.append(item)
    if d.closed:
        raise Problem(503, "Shutting down", "the daemon is shutting down", slug="unavailable")

    def work() -> dict[str, Any]:
        try:
            report = d.capture.submit_many(events, d.store.now_ms())
        except RuntimeError as exc:  # capture closed during shutdown
            raise Problem(503, "Shutting down", str(exc), slug="unavailable") from exc
        settings = d.store.get_settings(user)
        out = report.to_dict()
        out["learning"] = settings.memory_enabled and not d.store.is_paused(user)
        return out

    result = await run_in_threadpool(work)
    _log(
        logging.INFO,
        "events_ingested",
        user=user,
        accepted=result["accepted"],
        coalesced=result["coalesced"],
        rejected=result["rejected"],
    )
    return _json(result)


async def prompt_endpoint(request: Request) -> Response:
    if request.method == "POST":
        return await post_prompt(request)
    return await get_prompt(request)


def _build_block(d: Daemon, user: str, project_id: str | None, variant: str) -> tuple[str, str]:
    retrieved = d.retrieve(user, project_id)
    if variant == "generation":
        block = build_generation_block(retrieved, project_id)
    elif variant == "critique":
        block = build_critique_block(retrieved, project_id)
    else:
        block = build_prompt_block(retrieved, project_id)
    return block, diagnostics_feed_line(d.store, user, retrieved)


async def get_prompt(request: Request) -> Response:
    d = _daemon(request)
    user = d.authenticate(request)
    project_id = _project_param(request)
    variant = _choice(request, "variant", VARIANTS, "generation")
    fmt = _choice(request, "format", ("text", "json"), "text")
    block, feed = await run_in_threadpool(_build_block, d, user, project_id, variant)
    if fmt == "json":
        return _json(
            {"variant": variant, "project_id": project_id, "block": block, "diagnostics_feed": feed}
        )
    return Response(block, media_type="text/plain; charset=utf-8")


_COMPOSE_KEYS: Final = ("host_prompt", "project_id", "variant", "format")


def _body_choice(body: Mapping[str, Any], name: str, choices: tuple[str, ...]) -> str:
    value = body.get(name, choices[0])
    if not isinstance(value, str) or value not in choices:
        raise _bad_input(f"{name} must be one of {', '.join(choices)}; got {value!r}", name)
    return value


async def post_prompt(request: Request) -> Response:
    """The host's composed system prompt with the memory block inserted
    (docs/prompt-composition.md)."""
    d = _daemon(request)
    user = d.authenticate(request)
    body = await _read_object(
        request, d, _COMPOSE_KEYS, 'send {"host_prompt": "<the composed system prompt>"}'
    )
    host = body.get("host_prompt")
    if not isinstance(host, str):
        raise _bad_input("host_prompt must be a string (the composed system prompt)", "host_prompt")
    project_id = body.get("project_id")
    if project_id == "":
        project_id = None
    elif project_id is not None:
        try:
            project_id = validate_project_id(project_id)
        except ValidationError as exc:
            raise _bad_input(str(exc), "project_id") from None
    if body.get("variant") == "legacy":
        raise _bad_input(
            "the legacy block has no heading to place; use generation or critique", "variant"
        )
    variant = _body_choice(body, "variant", COMPOSE_VARIANTS)
    fmt = _body_choice(body, "format", ("text", "json"))

    def work() -> tuple[str, str, str]:
        block, feed = _build_block(d, user, project_id, variant)
        return block, insert_memory_block_into_prompt(host, block), feed

    block, composed, feed = await run_in_threadpool(work)
    if fmt == "json":
        return _json(
            {
                "variant": variant,
                "project_id": project_id,
                "block": block,
                "prompt": composed,
                "diagnostics_feed": feed,
            }
        )
    return Response(composed, media_type="text/plain; charset=utf-8")


def _type_and_pattern(request: Request, prefix: str) -> tuple[str, str]:
    """``{preference_type}/{pattern}`` from the raw path, so ``%2F`` may appear in either."""
    raw = request.scope.get("raw_path")
    path = raw.decode("latin-1") if isinstance(raw, bytes) else request.url.path
    path = path.split("?", 1)[0]
    rest = path[len(prefix) :] if path.startswith(prefix) else ""
    parts = rest.split("/")
    if len(parts) != 2:
        raise Problem(
            404,
            "Not found",
            f"use {prefix}{{preference_type}}/{{pattern}} (percent-encode '/' as %2F)",
            slug="not-found",
        )
    out: list[str] = []
    for name, part in zip(("preference_type", "pattern"), parts, strict=True):
        try:
            value = unquote(part, errors="strict")
        except UnicodeDecodeError:
            raise _bad_input(f"{name} is not valid UTF-8 once decoded", name, 400) from None
        if not value:
            raise _bad_input(f"{name} must be a non-empty string", name)
        out.append(value)
    return out[0], out[1]


async def delete_preference(request: Request) -> Response:
    d = _daemon(request)
    user = d.authenticate(request)
    ptype, pattern = _type_and_pattern(request, "/api/v1/preferences/")
    project_id = _project_param(request)
    removed: int = await run_in_threadpool(
        lambda: d.store.forget(user, ptype, pattern, project_id=project_id)
    )
    if removed == 0:
        where = f"project {project_id}" if project_id else "the global memory"
        raise Problem(
            404,
            "Not found",
            f"no events about {ptype}/{pattern} in {where}",
            slug="not-found",
            field="pattern",
        )
    _log(logging.INFO, "forgot", user=user, removed_events=removed, project_id=project_id)
    return _json(
        {
            "preference_type": ptype,
            "pattern": pattern,
            "project_id": project_id,
            "removed_events": removed,
        }
    )


async def get_explain(request: Request) -> Response:
    d = _daemon(request)
    user = d.authenticate(request)
    ptype, pattern = _type_and_pattern(request, "/api/v1/explain/")
    project_id = _project_param(request)
    exp = await run_in_threadpool(
        lambda: d.store.explain(user, ptype, pattern, project_id=project_id).to_dict()
    )
    if not exp["steps"] and not exp["records"]:
        where = f"project {project_id}" if project_id else "the global memory"
        raise Problem(
            404,
            "Not found",
            f"nothing about {ptype}/{pattern} in {where}",
            slug="not-found",
            field="pattern",
        )
    return _json(exp)


async def settings_endpoint(request: Request) -> Response:
    if request.method == "POST":
        return await post_settings(request)
    return await get_settings(request)


async def get_settings(request: Request) -> Response:
    d = _daemon(request)
    user = d.authenticate(request)
    return _json(await run_in_threadpool(_settings_dict, d.store, user))


_SETTING_KEYS: Final = (
    "memory_enabled",
    "paused",
    "paused_until",
    "project_ignore_global",
    "diagnostics_feed",
)


async def post_settings(request: Request) -> Response:
    d = _daemon(request)
    user = d.authenticate(request)
    body = await _read_object(
        request, d, _SETTING_KEYS, "send a JSON object of settings to change", "setting"
    )
    for key in ("memory_enabled", "paused", "diagnostics_feed"):
        if key in body and not isinstance(body[key], bool):
            raise _bad_input(f"{key} must be true or false", key)
    until = body.get("paused_until")
    if until is not None:
        if not isinstance(until, str):
            raise _bad_input("paused_until must be an ISO 8601 date-time or null", "paused_until")
        if body.get("paused") is False:
            raise _bad_input("paused_until needs paused to be true (or absent)", "paused_until")
        instant_to_ms(until, "paused_until")  # raises ValidationError naming the field
    projects = body.get("project_ignore_global", {})
    if not isinstance(projects, dict):
        raise _bad_input(
            "project_ignore_global must map project ids to true/false", "project_ignore_global"
        )
    if len(projects) > 1000:
        raise _bad_input("at most 1000 projects per request", "project_ignore_global")
    for pid, flag in projects.items():
        try:
            validate_project_id(pid)
        except ValidationError as exc:
            raise _bad_input(str(exc), f"project_ignore_global.{pid}") from None
        if not isinstance(flag, bool):
            raise _bad_input("must be true or false", f"project_ignore_global.{pid}")

    def work() -> dict[str, Any]:
        s = d.store
        if "memory_enabled" in body:
            s.set_memory_enabled(user, body["memory_enabled"])
        if body.get("paused") is True or until is not None:
            s.pause(user, until)
        elif body.get("paused") is False:
            s.resume(user)
        for pid, flag in projects.items():
            s.set_project_disabled(user, pid, flag)
        if "diagnostics_feed" in body:
            s.set_diagnostics_feed(user, body["diagnostics_feed"])
        return _settings_dict(s, user)

    result = await run_in_threadpool(work)
    _log(logging.INFO, "settings_changed", user=user, keys=sorted(body))
    return _json(result)


async def post_reset(request: Request) -> Response:
    d = _daemon(request)
    user = d.authenticate(request)
    body = await _read_object(request, d, ("confirm", "scope"), 'send {"confirm": true}')
    if body.get("confirm") is not True:
        raise _bad_input('a reset erases memory for real: send "confirm": true', "confirm")
    scope = body.get("scope", "all")
    if not isinstance(scope, str) or not (
        scope in ("all", "global") or scope.startswith("project:")
    ):
        raise _bad_input('scope must be "all", "global" or "project:<id>"', "scope")
    if scope.startswith("project:"):
        try:
            validate_project_id(scope[len("project:") :])
        except ValidationError as exc:
            raise _bad_input(str(exc), "scope") from None
    await run_in_threadpool(d.store.reset_memory, user, scope)
    _log(logging.INFO, "reset", user=user, scope=scope)
    return _json({"reset": True, "scope": scope, "settings": _settings_dict(d.store, user)})


async def get_export(request: Request) -> Response:
    d = _daemon(request)
    user = d.authenticate(request)

    def work() -> bytes:
        return encode_archive(user, d.store.get_settings(user), d.store.events(user))

    data = await run_in_threadpool(work)
    stamp = datetime.now(UTC).strftime("%Y%m%d")
    return Response(
        data,
        media_type="application/json",
        headers={
            "Content-Disposition": f'attachment; filename="creative-memory-{user}-{stamp}.json"'
        },
    )


async def post_import(request: Request) -> Response:
    d = _daemon(request)
    user = d.authenticate(request)
    mode = _choice(request, "mode", ("merge", "replace"), "merge")
    _check_json_type(request)
    data = await _read_body(request, d.config.max_import_bytes)
    if not data.strip():
        raise _bad_input("the request body is empty; send an export archive", "body", 400)

    def work() -> int:
        tmp_dir = d.files.ensure()
        fd, name = tempfile.mkstemp(prefix="import-", suffix=".json", dir=tmp_dir)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            return d.store.import_memory(user, name, mode=mode)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)

    added = await run_in_threadpool(work)
    _log(logging.INFO, "imported", user=user, mode=mode, imported_events=added)
    return _json({"imported_events": added, "mode": mode})


# -- the page ----------------------------------------------------------------------------------
_WEB_FILES: Final = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
_CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)

_SIGNED_OUT: Final = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sign in — creative-memory</title>
<link rel="stylesheet" href="/static/style.css"></head>
<body><main class="signed-out"><h1>Settings → Memory</h1>
<p>You are not signed in. Run <code>creative-memory ui</code> on this machine: it prints and
opens a one-time login link for this page.</p></main></body></html>
"""


def _load_web() -> dict[str, bytes]:
    base = resources.files("creative_memory.http") / "web"
    return {name: (base / name).read_bytes() for name in _WEB_FILES}


async def page(request: Request) -> Response:
    d = _daemon(request)
    if d.session_user(request) is None:
        return HTMLResponse(_SIGNED_OUT, status_code=401, headers={"Content-Security-Policy": _CSP})
    return Response(
        d.web["index.html"],
        media_type=_WEB_FILES["index.html"],
        headers={"Content-Security-Policy": _CSP},
    )


async def static(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in _WEB_FILES or name == "index.html":
        raise Problem(404, "Not found", f"no static file {name!r}", slug="not-found")
    return Response(_daemon(request).web[name], media_type=_WEB_FILES[name])


async def login(request: Request) -> Response:
    d = _daemon(request)
    nonce = _query(request, "once")
    if not nonce:
        raise _bad_input("the login link has no one-time code (once=)", "once", 400)
    user = await run_in_threadpool(d.files.consume_login, nonce)
    if user is None or not d._user_allowed(user):
        raise _unauthorized(
            "this login link is invalid, expired or already used; run creative-memory ui again"
        )
    sid = d.new_session(user)
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(
        d.cookie_name, sid, httponly=True, samesite="strict", path="/", secure=False
    )
    request.scope["cm_user"] = user
    _log(logging.INFO, "login", user=user)
    return response


async def logout(request: Request) -> Response:
    d = _daemon(request)
    d.authenticate(request)
    sid = request.cookies.get(d.cookie_name)
    if sid:
        d.sessions.pop(_sha256(sid), None)
    response = _json({"signed_out": True})
    response.delete_cookie(d.cookie_name, path="/", httponly=True, samesite="strict")
    return response


# ---------------------------------------------------------------------------------------------
# Error handlers and the guard middleware
# ---------------------------------------------------------------------------------------------
async def _on_problem(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Problem)
    return exc.response()


async def _on_value_error(request: Request, exc: Exception) -> Response:
    name = getattr(exc, "field", None)
    return _bad_input(str(exc), name if isinstance(name, str) else None).response()


async def _on_storage_error(request: Request, exc: Exception) -> Response:
    _log(logging.ERROR, "storage_error", path=request.url.path, detail=str(exc))
    return Problem(503, "Storage unavailable", str(exc), slug="storage-unavailable").response()


async def _on_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    titles = {404: "Not found", 405: "Method not allowed"}
    title = titles.get(exc.status_code, "HTTP error")
    detail = (
        exc.detail
        if exc.status_code not in titles
        else (
            f"no route {request.method} {request.url.path}"
            if exc.status_code == 404
            else f"{request.method} is not allowed on {request.url.path}"
        )
    )
    return Problem(
        exc.status_code,
        title,
        detail,
        slug=title.lower().replace(" ", "-"),
        headers=dict(exc.headers or {}),
    ).response()


def _internal_error() -> Problem:
    return Problem(
        500, "Internal error", "the daemon hit a bug; details are in its log", slug="internal-error"
    )


async def _on_server_error(request: Request, exc: Exception) -> Response:
    return _internal_error().response()


class Guard:
    """Outermost ASGI middleware: Host check (DNS rebinding), security headers, one
    structured access-log line per request, and the last-resort error catch."""

    def __init__(self, app: ASGIApp, daemon: Daemon) -> None:
        self.app = app
        self.daemon = daemon

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        state = {"status": 0, "started": False}
        path = scope.get("path", "")

        async def guarded_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["started"] = True
                state["status"] = message["status"]
                headers = MutableHeaders(scope=message)
                headers.setdefault("X-Content-Type-Options", "nosniff")
                headers.setdefault("Referrer-Policy", "no-referrer")
                headers.setdefault("X-Frame-Options", "DENY")
                headers.setdefault("Cache-Control", "no-store")
            await send(message)

        try:
            host = _header(scope, b"host")
            if host is None or host.lower() not in self.daemon.hosts:
                problem = Problem(
                    403,
                    "Forbidden host",
                    "the Host header does not name this daemon (DNS rebinding protection); "
                    "use http://127.0.0.1:<port> or http://localhost:<port>",
                    slug="host-not-allowed",
                    field="host",
                )
                await problem.response()(scope, receive, guarded_send)
            else:
                await self.app(scope, receive, guarded_send)
        except Exception:
            log.exception(
                "unhandled_error",
                extra={"fields": {"event": "unhandled_error", "path": path}},
            )
            if not state["started"]:
                await _internal_error().response()(scope, receive, guarded_send)
        finally:
            ms = (time.perf_counter() - start) * 1000
            level = logging.DEBUG if path == "/healthz" else logging.INFO
            _log(
                level,
                "http_request",
                method=scope.get("method"),
                path=path,
                status=state["status"],
                duration_ms=round(ms, 2),
                user=scope.get("cm_user"),
            )


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None


# ---------------------------------------------------------------------------------------------
# The application
# ---------------------------------------------------------------------------------------------
def create_app(config: DaemonConfig, *, store: MemoryStore | None = None) -> ASGIApp:
    """The daemon's ASGI application (Guard → Starlette). ``store`` overrides the store
    (tests inject one with a fixed clock)."""
    daemon = Daemon(config, store=store)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        ticker = asyncio.create_task(_tick_forever(daemon))
        _log(
            logging.INFO,
            "daemon_started",
            root=str(config.root),
            host=config.host,
            port=config.port,
            multi_user=config.multi_user,
            user=None if config.multi_user else config.user,
            alarm_ms=config.alarm_ms,
        )
        try:
            yield
        finally:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker
            await run_in_threadpool(daemon.flush_pending)
            daemon.files.remove_server_info(os.getpid())
            _log(logging.INFO, "daemon_stopped")

    routes = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/", page, methods=["GET"]),
        Route("/static/{name}", static, methods=["GET"]),
        Route("/login", login, methods=["GET"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/api/v1/memory", get_memory, methods=["GET"]),
        Route("/api/v1/events", post_events, methods=["POST"]),
        Route("/api/v1/prompt", prompt_endpoint, methods=["GET", "POST"]),
        Route("/api/v1/preferences/{rest:path}", delete_preference, methods=["DELETE"]),
        Route("/api/v1/explain/{rest:path}", get_explain, methods=["GET"]),
        Route("/api/v1/settings", settings_endpoint, methods=["GET", "POST"]),
        Route("/api/v1/reset", post_reset, methods=["POST"]),
        Route("/api/v1/export", get_export, methods=["GET"]),
        Route("/api/v1/import", post_import, methods=["POST"]),
    ]
    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        Problem: _on_problem,
        ValueError: _on_value_error,
        StorageError: _on_storage_error,
        HTTPException: _on_http_exception,
        500: _on_server_error,
    }
    app = Starlette(routes=routes, exception_handlers=handlers, lifespan=lifespan)
    app.state.daemon = daemon
    return Guard(app, daemon)


async def _tick_forever(daemon: Daemon) -> None:
    """Deliver expired coalescing windows even when no request arrives."""
    while True:
        await asyncio.sleep(daemon.config.tick_seconds)
        if daemon.closed:
            return
        try:
            report = await run_in_threadpool(daemon.capture.tick, daemon.store.now_ms())
        except Exception:  # a storage hiccup must not kill the ticker; it retries next time
            log.exception("tick_failed", extra={"fields": {"event": "tick_failed"}})
            continue
        if report.flushed or report.failed:
            _log(logging.INFO, "capture_tick", flushed=report.flushed, failed=report.failed)


def daemon_of(app: ASGIApp) -> Daemon:
    """The :class:`Daemon` behind an app made by :func:`create_app`."""
    if not isinstance(app, Guard):
        raise TypeError("not a creative-memory daemon app")
    return app.daemon


# ---------------------------------------------------------------------------------------------
# Running it
# ---------------------------------------------------------------------------------------------
def _url_host(host: str) -> str:
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host in ("::", "[::]"):
        return "[::1]"
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def bind_socket(host: str, port: int) -> socket.socket:
    """A bound (not yet listening) TCP socket; ``port`` 0 picks a free port."""
    bare = host.strip("[]")
    family = socket.AF_INET6 if ":" in bare else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # TCP_NODELAY
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((bare, port))
    except OSError as exc:
        sock.close()
        raise StorageError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.set_inheritable(True)
    return sock


def ensure_first_start(config: DaemonConfig) -> str | None:
    """Create the data dir and, in single-user mode, the user's token (first start).
    Returns the path of a newly created token file, else ``None``."""
    make_private_dir(config.root)
    files = DaemonFiles(config.root)
    if config.multi_user:
        if not files.read_tokens():
            _log(
                logging.WARNING,
                "no_tokens",
                detail="multi-user mode and no tokens yet: "
                "create one per user with 'creative-memory token --user NAME'",
            )
        return None
    existed = files.token_for(config.user, create=False) is not None
    files.token_for(config.user, create=True)
    return None if existed else str(files.tokens_path)


def run_daemon(config: DaemonConfig, *, ready: Callable[[str], None] | None = None) -> None:
    """Serve until SIGINT/SIGTERM; graceful shutdown flushes pending captured events."""
    configure_logging(config.log_level)
    created = ensure_first_start(config)
    if created:
        _log(logging.INFO, "token_created", path=created, user=config.user)
    sock = bind_socket(config.host, config.port)
    port = int(sock.getsockname()[1])
    config = replace(config, port=port)
    app = create_app(config)
    url = f"http://{_url_host(config.host)}:{port}/"
    files = DaemonFiles(config.root)
    files.write_server_info(
        {
            "pid": os.getpid(),
            "host": config.host,
            "port": port,
            "url": url,
            "multi_user": config.multi_user,
            "user": None if config.multi_user else config.user,
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
    )
    _log(logging.INFO, "listening", url=url)
    if ready is not None:
        ready(url)
    server = _uvicorn_server(app)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        files.remove_server_info(os.getpid())


def _uvicorn_server(app: ASGIApp) -> Any:
    import uvicorn

    return uvicorn.Server(
        uvicorn.Config(
            app,
            log_config=None,
            access_log=False,
            lifespan="on",
            server_header=False,
            timeout_graceful_shutdown=10,
            timeout_keep_alive=5,
        )
    )


class ThreadedDaemon:
    """The daemon served by uvicorn in a background thread (tests, embedding in a Python
    host). ``port`` 0 in the config picks a free port; :attr:`url` tells which. Use as a
    context manager; leaving it shuts down gracefully (pending captured events flushed)."""

    def __init__(self, config: DaemonConfig, *, store: MemoryStore | None = None) -> None:
        ensure_first_start(config)
        self._sock = bind_socket(config.host, config.port)
        self.config = replace(config, port=int(self._sock.getsockname()[1]))
        self.app = create_app(self.config, store=store)
        self.daemon = daemon_of(self.app)
        self._server = _uvicorn_server(self.app)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://{_url_host(self.config.host)}:{self.config.port}"

    def start(self, timeout: float = 10.0) -> ThreadedDaemon:
        if self._thread.is_alive() or self._server.started:
            return self
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise StorageError("the daemon did not start")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 15.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout)
        self._sock.close()

    def __enter__(self) -> ThreadedDaemon:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def login_url(root: str | os.PathLike[str], user: str) -> str:
    """A one-time login link to the running daemon of ``root`` (for ``creative-memory ui``)."""
    files = DaemonFiles(root)
    info = files.read_server_info()
    if not info or not isinstance(info.get("port"), int):
        raise StorageError(
            f"no daemon is running for {root}; start one with 'creative-memory serve'"
        )
    pid = info.get("pid")
    if isinstance(pid, int) and not _alive(pid):
        raise StorageError(
            f"the daemon for {root} (pid {pid}) is not running; start 'creative-memory serve'"
        )
    if info.get("multi_user") is False and info.get("user") not in (None, user):
        user = str(info["user"])
    nonce = files.create_login(user)
    host = _url_host(str(info.get("host") or DEFAULT_HOST))
    return f"http://{host}:{info['port']}/login?once={nonce}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ---------------------------------------------------------------------------------------------
# OpenAPI
# ---------------------------------------------------------------------------------------------
def _problem_responses(*codes: int) -> dict[str, Any]:
    text = {
        400: "Malformed request (not JSON, bad encoding).",
        401: "Missing or invalid credentials.",
        403: "Forbidden: another user's data, or a cookie write without the CSRF header.",
        404: "Nothing matches.",
        413: "Request body too large.",
        415: "Request body is not JSON.",
        422: "Invalid input; `field` names it.",
        503: "Storage unavailable or shutting down.",
    }
    return {
        str(c): {
            "description": text[c],
            "content": {PROBLEM: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for c in codes
    }


def _project_param_doc() -> dict[str, Any]:
    return {
        "name": "project_id",
        "in": "query",
        "required": False,
        "description": "A project id; empty or absent means no project (global memory).",
        "schema": {
            "type": "string",
            "pattern": "^[A-Za-z0-9_-]*$",
            "not": {"enum": list(_RESERVED_IDS)},
        },
    }


_PATH_PARAMS: Final = [
    {
        "name": "preference_type",
        "in": "path",
        "required": True,
        "description": "The record's preference type (percent-encode '/').",
        "schema": {"type": "string", "minLength": 1},
        "example": "color",
    },
    {
        "name": "pattern",
        "in": "path",
        "required": True,
        "description": "The record's pattern (percent-encode '/').",
        "schema": {"type": "string", "minLength": 1},
        "example": "neon_palette",
    },
]

_EVENT_DOC: Final = (
    "A wire-format event (api.md): `event` names the handler without its `on_` prefix; "
    "the rest is the adapter's event object — `user_id` (optional here; it must be the "
    "token's user), `artifact_id`, `session_id`, `project_id` (or null), `timestamp` (ISO "
    '8601), `artifact_meta` = `{"signals": [{"preference_type", "pattern"}]}`, plus '
    "`diff` (edited-and-saved), `tag_text` (tag), `rating` = `up`/`down` (thumbs), `chose` / "
    "`over` / `dimensions` (pairwise), and the capture-only kinds `generation_started` / "
    "`tab_activated`. An optional `trigger` tells the capture layer where the action came "
    "from. Semantic problems are reported per event in the answer, not as an HTTP error."
)


def openapi_document() -> dict[str, Any]:
    """The daemon's OpenAPI 3.0 document (written by hand; tested with schemathesis)."""
    event_schema = {
        "type": "object",
        "description": _EVENT_DOC,
        "required": ["event"],
        "properties": {
            "event": {"type": "string", "enum": list(EVENT_KINDS)},
            "user_id": {
                "type": "string",
                "nullable": True,
                "pattern": _SAFE_ID_PATTERN,
                "description": "Absent or null: the token's user.",
            },
            "trigger": {"type": "string", "nullable": True},
        },
        "additionalProperties": True,
        "example": {
            "event": "thumbs_rated",
            "artifact_id": "a1",
            "session_id": "s1",
            "project_id": None,
            "timestamp": "2026-03-01T10:00:00Z",
            "rating": "down",
            "artifact_meta": {"signals": [{"preference_type": "color", "pattern": "neon_palette"}]},
        },
    }
    settings_schema = {
        "type": "object",
        "required": [
            "memory_enabled",
            "paused",
            "paused_until",
            "disabled_projects",
            "diagnostics_feed",
            "paused_now",
        ],
        "properties": {
            "memory_enabled": {"type": "boolean"},
            "paused": {"type": "boolean"},
            "paused_until": {"type": "string", "nullable": True},
            "disabled_projects": {"type": "array", "items": {"type": "string"}},
            "diagnostics_feed": {"type": "boolean"},
            "paused_now": {"type": "boolean"},
        },
    }
    preference_schema = {
        "type": "object",
        "required": [
            "id",
            "preference_type",
            "pattern",
            "polarity",
            "signal_strength",
            "confidence",
            "sources",
            "scope",
            "polarity_status",
            "derivation_version",
            "source_event_count",
            "last_derived_event_seq",
        ],
        "properties": {
            "id": {"type": "string"},
            "preference_type": {"type": "string"},
            "pattern": {"type": "string"},
            "polarity": {"type": "string", "enum": ["positive", "negative"]},
            "signal_strength": {"type": "number", "minimum": 0, "maximum": 1},
            "confidence": {"type": "string", "enum": ["low", "medium", "high"]},
            "sources": {"type": "array", "items": {"type": "string"}},
            "accept_count": {"type": "integer"},
            "reject_count": {"type": "integer"},
            "explicit_tags": {"type": "array", "items": {"type": "string"}},
            "last_seen": {"type": "string"},
            "decay_at": {"type": "string"},
            "scope": {"type": "string"},
            "reversal_signals": {"type": "integer"},
            "reversal_first_seen": {"type": "string", "nullable": True},
            "polarity_status": {
                "type": "string",
                "enum": ["stable", "under_review", "archived"],
            },
            "shadow_of": {"type": "string", "nullable": True},
            "derivation_version": {"type": "string"},
            "source_event_count": {"type": "integer"},
            "last_derived_event_seq": {"type": "integer"},
        },
    }
    json_ok = {"content": {"application/json": {"schema": {"type": "object"}}}}

    def ok(description: str, schema: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "description": description,
            "content": {"application/json": {"schema": dict(schema)}},
        }

    def json_body(schema: Mapping[str, Any], description: str = "") -> dict[str, Any]:
        return {
            "required": True,
            "description": description,
            "content": {"application/json": {"schema": dict(schema)}},
        }

    def ref(name: str) -> dict[str, Any]:
        return {"$ref": f"#/components/schemas/{name}"}

    return {
        "openapi": "3.0.3",
        "info": {
            "title": "creative-memory daemon",
            "version": __version__,
            "description": "Local HTTP API of creative-memory (design.md §7). Every route but "
            "/healthz acts for the user of the bearer token (or the page's session cookie). "
            "Errors are application/problem+json documents.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}, {"session": []}],
        "paths": {
            "/healthz": {
                "get": {
                    "operationId": "healthz",
                    "summary": "Liveness (no authentication).",
                    "security": [],
                    "responses": {
                        "200": ok(
                            "Alive.",
                            {
                                "type": "object",
                                "required": ["status"],
                                "properties": {
                                    "status": {"type": "string", "enum": ["ok"]},
                                    "version": {"type": "string"},
                                },
                            },
                        )
                    },
                }
            },
            "/openapi.json": {
                "get": {
                    "operationId": "openapi",
                    "summary": "This document.",
                    "responses": {
                        "200": {"description": "The OpenAPI document.", **json_ok},
                        **_problem_responses(401),
                    },
                }
            },
            "/api/v1/memory": {
                "get": {
                    "operationId": "inspect",
                    "summary": "Everything in the user's memory (MemoryStore.inspect).",
                    "parameters": [_project_param_doc()],
                    "responses": {
                        "200": ok("Settings, derived records, retrieval.", ref("Memory")),
                        **_problem_responses(400, 401, 403, 422, 503),
                    },
                }
            },
            "/api/v1/events": {
                "post": {
                    "operationId": "ingestEvents",
                    "summary": "Ingest one wire-format event or an array of them through the "
                    "capture layer.",
                    "requestBody": json_body(
                        {
                            "oneOf": [
                                ref("WireEvent"),
                                {"type": "array", "maxItems": MAX_BATCH, "items": ref("WireEvent")},
                            ]
                        },
                        "One event or a batch (at most 1000). Events for another user than "
                        "the token's are refused with 403 and nothing is ingested.",
                    ),
                    "responses": {
                        "200": ok(
                            "What the capture layer did with each event.", ref("IngestReport")
                        ),
                        **_problem_responses(400, 401, 403, 413, 415, 422, 503),
                    },
                }
            },
            "/api/v1/prompt": {
                "get": {
                    "operationId": "prompt",
                    "summary": "The memory block for a project (text, or JSON with format=json).",
                    "parameters": [
                        _project_param_doc(),
                        {
                            "name": "variant",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "string", "enum": list(VARIANTS)},
                        },
                        {
                            "name": "format",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "string", "enum": ["text", "json"]},
                        },
                    ],
                    "responses": {
                        "200": {
                            "description": "The block ('' when nothing is injectable).",
                            "content": {
                                "text/plain": {"schema": {"type": "string"}},
                                "application/json": {"schema": ref("PromptBlock")},
                            },
                        },
                        **_problem_responses(400, 401, 403, 422, 503),
                    },
                },
                "post": {
                    "operationId": "composePrompt",
                    "summary": "The host's composed system prompt with the memory block inserted "
                    "(after personal memory, else before custom instructions, brand, craft, "
                    "skill and project metadata, else at the end; an existing block is "
                    "replaced). Text, or JSON with format=json.",
                    "requestBody": json_body(
                        ref("ComposePrompt"),
                        "The host prompt and what to retrieve for. Cookie-authenticated "
                        "requests need the X-Requested-With header, as for any POST.",
                    ),
                    "responses": {
                        "200": {
                            "description": "The composed prompt (the host prompt unchanged when "
                            "nothing is injectable).",
                            "content": {
                                "text/plain": {"schema": {"type": "string"}},
                                "application/json": {"schema": ref("ComposedPrompt")},
                            },
                        },
                        **_problem_responses(400, 401, 403, 413, 415, 422, 503),
                    },
                },
            },
            "/api/v1/preferences/{preference_type}/{pattern}": {
                "delete": {
                    "operationId": "forget",
                    "summary": "Forget a pattern: erase every raw event about it (for real).",
                    "parameters": [*_PATH_PARAMS, _project_param_doc()],
                    "responses": {
                        "200": ok(
                            "Erased.",
                            {
                                "type": "object",
                                "required": ["removed_events"],
                                "properties": {
                                    "preference_type": {"type": "string"},
                                    "pattern": {"type": "string"},
                                    "project_id": {"type": "string", "nullable": True},
                                    "removed_events": {"type": "integer", "minimum": 1},
                                },
                            },
                        ),
                        **_problem_responses(400, 401, 403, 404, 422, 503),
                    },
                }
            },
            "/api/v1/explain/{preference_type}/{pattern}": {
                "get": {
                    "operationId": "explain",
                    "summary": "The derivation trace of a pattern (the page's 'Why?').",
                    "parameters": [*_PATH_PARAMS, _project_param_doc()],
                    "responses": {
                        "200": ok("The trace.", ref("Explanation")),
                        **_problem_responses(400, 401, 403, 404, 422, 503),
                    },
                }
            },
            "/api/v1/settings": {
                "get": {
                    "operationId": "getSettings",
                    "summary": "The user's settings.",
                    "responses": {
                        "200": ok("Settings.", ref("Settings")),
                        **_problem_responses(401, 403, 503),
                    },
                },
                "post": {
                    "operationId": "changeSettings",
                    "summary": "Enable/disable, pause/resume, per-project toggles, diagnostics "
                    "feed. Only the fields given change.",
                    "requestBody": json_body(ref("SettingsChange")),
                    "responses": {
                        "200": ok("The settings afterwards.", ref("Settings")),
                        **_problem_responses(400, 401, 403, 413, 415, 422, 503),
                    },
                },
            },
            "/api/v1/reset": {
                "post": {
                    "operationId": "reset",
                    "summary": "Erase memory (all, global or one project) — needs confirm.",
                    "requestBody": json_body(
                        {
                            "type": "object",
                            "required": ["confirm"],
                            "additionalProperties": False,
                            "properties": {
                                "confirm": {"type": "boolean", "enum": [True]},
                                "scope": {
                                    "type": "string",
                                    "pattern": "^(all|global|project:[A-Za-z0-9_-]+)$",
                                    "not": {"enum": [f"project:{r}" for r in _RESERVED_IDS]},
                                },
                            },
                        }
                    ),
                    "responses": {
                        "200": ok(
                            "Erased.",
                            {
                                "type": "object",
                                "required": ["reset", "scope"],
                                "properties": {
                                    "reset": {"type": "boolean"},
                                    "scope": {"type": "string"},
                                    "settings": ref("Settings"),
                                },
                            },
                        ),
                        **_problem_responses(400, 401, 403, 413, 415, 422, 503),
                    },
                }
            },
            "/api/v1/export": {
                "get": {
                    "operationId": "export",
                    "summary": "Download the user's archive (raw events + settings).",
                    "responses": {
                        "200": {
                            "description": "A creative-memory-archive document.",
                            "content": {"application/json": {"schema": ref("Archive")}},
                        },
                        **_problem_responses(401, 403, 503),
                    },
                }
            },
            "/api/v1/import": {
                "post": {
                    "operationId": "import",
                    "summary": "Upload an archive (merge or replace).",
                    "parameters": [
                        {
                            "name": "mode",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "string", "enum": ["merge", "replace"]},
                        }
                    ],
                    "requestBody": json_body(ref("Archive"), "An archive from GET /export."),
                    "responses": {
                        "200": ok(
                            "Imported.",
                            {
                                "type": "object",
                                "required": ["imported_events", "mode"],
                                "properties": {
                                    "imported_events": {"type": "integer", "minimum": 0},
                                    "mode": {"type": "string", "enum": ["merge", "replace"]},
                                },
                            },
                        ),
                        **_problem_responses(400, 401, 403, 413, 415, 422, 503),
                    },
                }
            },
        },
        "components": {
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "Printed by `creative-memory token`.",
                },
                "session": {
                    "type": "apiKey",
                    "in": "cookie",
                    "name": "cm_session_<port>",
                    "description": "Set by the one-time login link of `creative-memory ui`; "
                    "writes also need `X-Requested-With: creative-memory`.",
                },
            },
            "responses": {
                "Problem": {
                    "description": "A problem document.",
                    "content": {PROBLEM: {"schema": ref("Problem")}},
                }
            },
            "schemas": {
                "Problem": {
                    "type": "object",
                    "required": ["type", "title", "status", "detail"],
                    "properties": {
                        "type": {"type": "string"},
                        "title": {"type": "string"},
                        "status": {"type": "integer"},
                        "detail": {"type": "string"},
                        "field": {"type": "string"},
                    },
                },
                "WireEvent": event_schema,
                "IngestReport": {
                    "type": "object",
                    "required": ["accepted", "coalesced", "rejected", "results", "learning"],
                    "properties": {
                        "accepted": {"type": "integer", "minimum": 0},
                        "coalesced": {"type": "integer", "minimum": 0},
                        "rejected": {"type": "integer", "minimum": 0},
                        "flushed": {"type": "integer", "minimum": 0},
                        "failed": {"type": "integer", "minimum": 0},
                        "inferred": {"type": "integer", "minimum": 0},
                        "learning": {
                            "type": "boolean",
                            "description": "false while memory is disabled or paused: "
                            "accepted events were not stored.",
                        },
                        "redactions": {
                            "type": "object",
                            "additionalProperties": {"type": "integer"},
                        },
                        "results": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["event", "status"],
                                "properties": {
                                    "event": {"type": "string"},
                                    "status": {
                                        "type": "string",
                                        "enum": [
                                            "accepted",
                                            "coalesced",
                                            "rejected",
                                            "flushed",
                                            "failed",
                                            "inferred",
                                        ],
                                    },
                                    "reason": {"type": "string", "nullable": True},
                                    "artifact_id": {"type": "string", "nullable": True},
                                    "index": {"type": "integer", "nullable": True},
                                },
                            },
                        },
                    },
                },
                "Settings": settings_schema,
                "SettingsChange": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "memory_enabled": {"type": "boolean"},
                        "paused": {"type": "boolean"},
                        "paused_until": {
                            "type": "string",
                            "nullable": True,
                            "description": "ISO 8601; pauses learning until then.",
                            "example": "2026-04-01T00:00:00Z",
                        },
                        "project_ignore_global": {
                            "type": "object",
                            "description": "project id → true to make retrieval for that "
                            "project ignore global records.",
                            "additionalProperties": {"type": "boolean"},
                        },
                        "diagnostics_feed": {"type": "boolean"},
                    },
                },
                "Preference": preference_schema,
                "Memory": {
                    "type": "object",
                    "required": ["user_id", "settings", "preferences", "retrieval", "projects"],
                    "properties": {
                        "user_id": {"type": "string"},
                        "derivation_version": {"type": "string"},
                        "settings": ref("Settings"),
                        "preferences": {"type": "array", "items": ref("Preference")},
                        "event_count": {"type": "integer"},
                        "project_id": {"type": "string", "nullable": True},
                        "projects": {"type": "array", "items": {"type": "string"}},
                        "retrieval": {
                            "type": "object",
                            "properties": {
                                "positives": {"type": "array", "items": ref("Preference")},
                                "negatives": {"type": "array", "items": ref("Preference")},
                                "project_overrides": {
                                    "type": "array",
                                    "items": ref("Preference"),
                                },
                                "diagnostics": {"type": "array", "items": {"type": "object"}},
                            },
                        },
                    },
                },
                "ComposePrompt": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["host_prompt"],
                    "properties": {
                        "host_prompt": {
                            "type": "string",
                            "description": "The host's composed system prompt, as one string.",
                        },
                        "project_id": {
                            "type": "string",
                            "nullable": True,
                            "description": "A project id; empty, null or absent means no "
                            "project (global memory).",
                            "pattern": "^[A-Za-z0-9_-]*$",
                            "not": {"enum": list(_RESERVED_IDS)},
                        },
                        "variant": {
                            "type": "string",
                            "enum": list(COMPOSE_VARIANTS),
                            "default": "generation",
                        },
                        "format": {"type": "string", "enum": ["text", "json"], "default": "text"},
                    },
                },
                "ComposedPrompt": {
                    "type": "object",
                    "required": ["variant", "block", "prompt", "diagnostics_feed"],
                    "properties": {
                        "variant": {"type": "string", "enum": list(COMPOSE_VARIANTS)},
                        "project_id": {"type": "string", "nullable": True},
                        "block": {"type": "string"},
                        "prompt": {"type": "string"},
                        "diagnostics_feed": {"type": "string"},
                    },
                },
                "PromptBlock": {
                    "type": "object",
                    "required": ["variant", "block", "diagnostics_feed"],
                    "properties": {
                        "variant": {"type": "string", "enum": list(VARIANTS)},
                        "project_id": {"type": "string", "nullable": True},
                        "block": {"type": "string"},
                        "diagnostics_feed": {"type": "string"},
                    },
                },
                "Explanation": {
                    "type": "object",
                    "required": ["preference_type", "pattern", "steps", "records"],
                    "properties": {
                        "preference_type": {"type": "string"},
                        "pattern": {"type": "string"},
                        "project_id": {"type": "string", "nullable": True},
                        "derivation_version": {"type": "string"},
                        "steps": {"type": "array", "items": {"type": "object"}},
                        "records": {"type": "array", "items": ref("Preference")},
                        "evidence": {
                            "type": "array",
                            "nullable": True,
                            "description": "Per record: the estimate, its sd, type level, "
                            "slab probability and each evidence kind's contribution "
                            "(derivation version 2); null for version 1.",
                            "items": {"type": "object"},
                        },
                    },
                },
                "Archive": {
                    "type": "object",
                    "description": "A creative-memory-archive document (docs/formats.md).",
                    "required": [
                        "format",
                        "archive_version",
                        "user_id",
                        "settings",
                        "events",
                        "checksum",
                    ],
                    "properties": {
                        "format": {"type": "string", "enum": ["creative-memory-archive"]},
                        "archive_version": {"type": "integer", "enum": [1]},
                        "user_id": {"type": "string"},
                        "settings": {"type": "object"},
                        "events": {"type": "array", "items": {"type": "object"}},
                        "checksum": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"},
                    },
                },
            },
        },
    }


__all__ = [
    "DEFAULT_ALARM_MS",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "DEFAULT_USER",
    "Daemon",
    "DaemonConfig",
    "DaemonFiles",
    "JsonFormatter",
    "Problem",
    "ThreadedDaemon",
    "allowed_host_headers",
    "configure_logging",
    "create_app",
    "daemon_of",
    "login_url",
    "openapi_document",
    "run_daemon",
]
