"""Credentials (docs/daemon.md, "Security model"): the ``.daemon/`` state files (bearer
tokens, one-time login nonces, the running server's address), the in-memory page sessions
and the check of every request's ``Authorization`` header or session cookie."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from starlette.requests import Request

from creative_memory.app.service import StorageError
from creative_memory.app.store import wall_clock_ms
from creative_memory.engine.events import validate_user_id
from creative_memory.http.problems import forbidden, unauthorized
from creative_memory.storage.files.fsutil import atomic_write, make_private_dir

try:  # POSIX advisory locks; the daemon's state files are only locked where available
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

STATE_DIR: Final = ".daemon"
LOGIN_TTL_S: Final = 300
SESSION_TTL_S: Final = 24 * 3600
CSRF_HEADER: Final = "x-requested-with"
CSRF_VALUE: Final = "creative-memory"


def sha256(text: str) -> str:
    """Hex SHA-256 of ``text`` (nonces and session ids are stored hashed)."""
    return hashlib.sha256(text.encode()).hexdigest()


class DaemonFiles:
    """``<root>/.daemon/``: ``tokens.json``, ``logins.json`` and ``server.json``; directory
    0700, files 0600, atomic whole-file writes, read-modify-write under ``flock``."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.dir = self.root / STATE_DIR
        self.tokens_path = self.dir / "tokens.json"
        self.logins_path = self.dir / "logins.json"
        self.server_path = self.dir / "server.json"

    def ensure(self) -> Path:
        """Create ``.daemon/`` (0700) if missing; returns it."""
        make_private_dir(self.dir)
        return self.dir

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the exclusive lock on ``.daemon/lock``."""
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
        validate_user_id(user_id)
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
        """(mtime, size, inode) of ``tokens.json``, ``None`` when there is none."""
        try:
            st = self.tokens_path.stat()
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    # -- one-time logins -------------------------------------------------------------------
    def create_login(self, user_id: str, ttl_s: float = LOGIN_TTL_S) -> str:
        """A one-time login nonce for ``user_id`` (stored hashed, valid ``ttl_s`` seconds)."""
        validate_user_id(user_id)
        nonce = secrets.token_urlsafe(32)
        now = wall_clock_ms()
        with self.locked():
            pending = self._pending_logins(now)
            pending.append(
                {"hash": sha256(nonce), "user_id": user_id, "expires_ms": now + int(ttl_s * 1000)}
            )
            self._write(self.logins_path, {"version": 1, "logins": pending})
        return nonce

    def consume_login(self, nonce: str) -> str | None:
        """The user of a valid, unexpired nonce (which is used up), else ``None``."""
        digest = sha256(nonce)
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
        """Record where the running daemon listens (``creative-memory ui`` reads it)."""
        self._write(self.server_path, info)

    def read_server_info(self) -> dict[str, Any] | None:
        """The running daemon's ``server.json``, ``None`` when there is none."""
        info = self._read(self.server_path)
        return info or None

    def remove_server_info(self, pid: int) -> None:
        """Remove ``server.json`` if process ``pid`` wrote it."""
        with self.locked():
            info = self._read(self.server_path)
            if info.get("pid") == pid:
                with contextlib.suppress(FileNotFoundError):
                    self.server_path.unlink()


class TokenCache:
    """Tokens re-read whenever ``tokens.json`` changes (a rotation applies at once)."""

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
        """The user of ``token`` (compared in constant time per candidate), else ``None``."""
        found = None
        for tok, user in self._current().items():
            if hmac.compare_digest(tok.encode(), token.encode()):
                found = user
        return found

    def has_user(self, user_id: str) -> bool:
        """Whether some token acts for ``user_id``."""
        return user_id in self._current().values()


@dataclass
class _Session:
    user: str
    expires_ms: int


class Authenticator:
    """Who a request acts for: a bearer token, or the page's session cookie (whose writes
    need the CSRF header). Single-user mode accepts only the served user."""

    def __init__(self, files: DaemonFiles, *, port: int, multi_user: bool, user: str) -> None:
        self.files = files
        self.tokens = TokenCache(files)
        self.multi_user = multi_user
        self.user = user
        self.cookie_name = f"cm_session_{port}"
        self.sessions: dict[str, _Session] = {}

    def authenticate(self, request: Request) -> str:
        """The user the request acts for; raises a 401/403 problem otherwise."""
        header = request.headers.get("authorization")
        if header is not None:
            scheme, _, credential = header.strip().partition(" ")
            credential = credential.strip()
            if scheme.lower() != "bearer" or not credential:
                raise unauthorized("the Authorization header must be 'Bearer <token>'")
            user = self.tokens.lookup(credential)
            if user is None or not self.user_allowed(user):
                raise unauthorized("the bearer token is not valid for this daemon")
            request.scope["cm_user"] = user
            return user
        user = self.session_user(request)
        if user is None:
            raise unauthorized(
                "credentials required: send 'Authorization: Bearer <token>' "
                "(creative-memory token) or sign in with creative-memory ui"
            )
        if request.method not in ("GET", "HEAD") and (
            request.headers.get(CSRF_HEADER) != CSRF_VALUE
        ):
            raise forbidden(
                f"cookie-authenticated writes need the header X-Requested-With: {CSRF_VALUE}",
                slug="csrf",
                field=CSRF_HEADER,
            )
        request.scope["cm_user"] = user
        return user

    def user_allowed(self, user: str) -> bool:
        """Whether this daemon serves ``user`` (multi-user: some token maps to them)."""
        if self.multi_user:
            return self.tokens.has_user(user)
        return user == self.user

    def session_user(self, request: Request) -> str | None:
        """The user of the request's live session cookie, else ``None``."""
        sid = request.cookies.get(self.cookie_name)
        if not sid:
            return None
        key = sha256(sid)
        s = self.sessions.get(key)
        if s is None:
            return None
        if s.expires_ms <= wall_clock_ms() or not self.user_allowed(s.user):
            self.sessions.pop(key, None)
            return None
        return s.user

    def new_session(self, user: str) -> str:
        """Open a session for ``user``; returns the cookie value (stored hashed)."""
        now = wall_clock_ms()
        for k in [k for k, s in self.sessions.items() if s.expires_ms <= now]:
            del self.sessions[k]
        sid = secrets.token_urlsafe(32)
        self.sessions[sha256(sid)] = _Session(user, now + SESSION_TTL_S * 1000)
        return sid

    def end_session(self, request: Request) -> None:
        """Forget the request's session, if any."""
        sid = request.cookies.get(self.cookie_name)
        if sid:
            self.sessions.pop(sha256(sid), None)
