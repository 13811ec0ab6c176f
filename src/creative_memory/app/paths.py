"""Where the CLI (and the daemon) keep memory, and whom they act for (docs/cli.md, "Where
memory lives and whom it is for").

The engine never reads the environment; hosts resolve the storage root and the user here
and pass them in explicitly. Storage root, first match wins:

1. the ``--data-dir`` flag (a relative flag value is taken relative to the current
   directory: the person typed it there);
2. ``OD_DATA_DIR`` — memory lives in ``<OD_DATA_DIR>/memory``;
3. ``MEMORY_STORAGE_ROOT``;
4. the platform's user data directory: ``$XDG_DATA_HOME/creative-memory`` or
   ``~/.local/share/creative-memory`` (Linux and other Unix),
   ``~/Library/Application Support/creative-memory`` (macOS),
   ``%LOCALAPPDATA%\\creative-memory`` (Windows).

There is never a cwd-relative fallback: environment values must be absolute paths
(``~`` is expanded), and a relative ``XDG_DATA_HOME`` is ignored, as the XDG spec says.
An environment variable set to the empty string counts as unset; an empty ``--data-dir``
is refused.

Default user: ``CREATIVE_MEMORY_USER``, else the login name made safe (every character
outside ``[A-Za-z0-9_-]`` becomes ``_``).
"""

from __future__ import annotations

import getpass
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Final

from creative_memory.engine.errors import ValidationError
from creative_memory.engine.ids import safe_name
from creative_memory.storage.dburl import redact_url

APP_NAME: Final = "creative-memory"

#: Sources of the storage root, in precedence order.
ROOT_SOURCES: Final = ("--data-dir", "OD_DATA_DIR", "MEMORY_STORAGE_ROOT", "platform")

#: Why an empty ``--data-dir`` is refused: ``--data-dir "$UNSET" reset --confirm`` must not
#: erase the default store. (An empty environment variable is unset, as usual.)
EMPTY_DATA_DIR: Final = "must not be empty (an empty value never means the default store)"


class PathConfigError(ValueError):
    """The environment or a flag names an unusable storage root (one-line message)."""


@dataclass(frozen=True)
class ResolvedRoot:
    """The storage root and where it came from (flag, environment, default)."""

    path: Path
    source: str  # one of ROOT_SOURCES


@dataclass(frozen=True)
class ResolvedUser:
    """The acting user id and where it came from (flag, environment, login name)."""

    user_id: str
    source: str  # "--user", "CREATIVE_MEMORY_USER" or "login name"


def _is_absolute(value: str, platform: str) -> bool:
    if platform == "win32":
        return PureWindowsPath(value).is_absolute()
    return PurePosixPath(value).is_absolute()


def _expand(value: str, home: str | None) -> str:
    if home is not None and (value == "~" or value.startswith(("~/", "~\\"))):
        return home + value[1:]
    return value


def platform_data_dir(
    env: Mapping[str, str], platform: str = sys.platform, home: str | None = None
) -> Path:
    """The platform's per-user data directory for creative-memory (no I/O)."""
    home = home if home is not None else env.get("HOME") or env.get("USERPROFILE")
    if platform == "win32":
        base = env.get("LOCALAPPDATA", "")
        if base and _is_absolute(base, platform):
            return Path(base) / APP_NAME
        if not home:
            raise PathConfigError(
                "cannot find the user data directory: LOCALAPPDATA and the home directory "
                "are not set; pass --data-dir or set MEMORY_STORAGE_ROOT"
            )
        return Path(home) / "AppData" / "Local" / APP_NAME
    if platform == "darwin":
        if not home:
            raise PathConfigError(
                "cannot find the user data directory: HOME is not set; pass --data-dir or "
                "set MEMORY_STORAGE_ROOT"
            )
        return Path(home) / "Library" / "Application Support" / APP_NAME
    xdg = env.get("XDG_DATA_HOME", "")
    if xdg and _is_absolute(xdg, platform):
        return Path(xdg) / APP_NAME
    if not home:
        raise PathConfigError(
            "cannot find the user data directory: HOME is not set; pass --data-dir or set "
            "MEMORY_STORAGE_ROOT"
        )
    return Path(home) / ".local" / "share" / APP_NAME


def resolve_root(
    flag: str | os.PathLike[str] | None,
    env: Mapping[str, str] | None = None,
    *,
    platform: str = sys.platform,
    home: str | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> ResolvedRoot:
    """The storage root and where it came from (docs/cli.md, "Where memory lives and whom
    it is for"). Pure apart from reading the current directory for a relative
    ``--data-dir``; checks nothing on disk."""
    env = os.environ if env is None else env
    home = home if home is not None else env.get("HOME") or env.get("USERPROFILE")
    if flag is not None:
        if os.fspath(flag) == "":
            raise PathConfigError(f"--data-dir: {EMPTY_DATA_DIR}")
        value = _expand(os.fspath(flag), home)
        path = Path(value)
        if not _is_absolute(value, platform):
            path = Path(cwd if cwd is not None else os.getcwd()) / path
        return ResolvedRoot(path, "--data-dir")
    for name, suffix in (("OD_DATA_DIR", "memory"), ("MEMORY_STORAGE_ROOT", None)):
        raw = env.get(name, "")
        if not raw:
            continue
        value = _expand(raw, home)
        if not _is_absolute(value, platform):
            raise PathConfigError(
                f"{name} must be an absolute path (memory is never stored relative to the "
                f"current directory), got {raw!r}"
            )
        path = Path(value)
        return ResolvedRoot(path / suffix if suffix else path, name)
    return ResolvedRoot(platform_data_dir(env, platform, home), "platform")


DATABASE_ENV = "CREATIVE_MEMORY_DATABASE_URL"
DATABASE_SCHEMES: Final = ("postgresql://", "postgres://")


def database_url_problem(value: str) -> str | None:
    """Why ``value`` is not a database URL the store takes (``None``: it is one)."""
    if value.startswith(DATABASE_SCHEMES):
        return None
    return f"must be a postgresql:// URL, got {value.split('@')[-1]!r}"


def resolve_database(
    flag: str | None, env: Mapping[str, str] | None = None, *, data_dir_flag: bool = False
) -> str | None:
    """The PostgreSQL URL to store memory in: ``--database``, else
    ``$CREATIVE_MEMORY_DATABASE_URL``, else ``None`` (the file store). A ``--data-dir``
    given on the command line (``data_dir_flag``) beats the environment's URL — a flag
    says where, this time — and beside ``--database`` it is refused: which store a
    ``reset`` erases must never be a guess."""
    env = os.environ if env is None else env
    if data_dir_flag:
        if flag:
            raise PathConfigError("give --data-dir or --database, not both")
        return None
    value = flag if flag else env.get(DATABASE_ENV, "")
    if not value:
        return None
    problem = database_url_problem(value)
    if problem is not None:
        raise PathConfigError(f"{'--database' if flag else DATABASE_ENV} {problem}")
    return value


def check_root(path: Path) -> None:
    """Fail with a one-line message when ``path`` cannot be a storage root: it, or the
    nearest existing ancestor, is not a directory, or cannot be read/written. A missing
    root is fine (created on the first write)."""
    probe = path
    while not probe.exists():
        if probe.is_symlink():
            raise PathConfigError(f"data dir {path} is unusable: {probe} is a broken symlink")
        parent = probe.parent
        if parent == probe:
            break
        probe = parent
    if probe.exists() and not probe.is_dir():
        if probe == path:
            raise PathConfigError(f"data dir {path} is not a directory")
        raise PathConfigError(f"data dir {path} is unusable: {probe} is not a directory")
    if probe == path and not os.access(path, os.R_OK | os.X_OK):
        raise PathConfigError(f"data dir {path} is not readable (permission denied)")


def login_name() -> str:
    """The login name, or ``"user"`` when the system cannot tell."""
    try:
        name = getpass.getuser()
    except (OSError, KeyError, ImportError):  # no USER/LOGNAME and no passwd entry
        return "user"
    return name or "user"


def resolve_user(flag: str | None, env: Mapping[str, str] | None = None) -> ResolvedUser:
    """The user the CLI acts for: ``--user``, then ``CREATIVE_MEMORY_USER``, then the login
    name made safe. Flag and variable values are returned as given (the caller validates
    them, so an unsafe id is reported rather than silently rewritten)."""
    env = os.environ if env is None else env
    if flag is not None:
        return ResolvedUser(flag, "--user")
    value = env.get("CREATIVE_MEMORY_USER", "")
    if value:
        return ResolvedUser(value, "CREATIVE_MEMORY_USER")
    return ResolvedUser(safe_name(login_name()) or "user", "login name")


__all__ = [
    "APP_NAME",
    "EMPTY_DATA_DIR",
    "ROOT_SOURCES",
    "PathConfigError",
    "ResolvedRoot",
    "ResolvedUser",
    "check_root",
    "database_url_problem",
    "login_name",
    "platform_data_dir",
    "redact_url",
    "resolve_database",
    "resolve_root",
    "resolve_user",
    "safe_name",
]


def read_file(field: str, path: Path) -> bytes:
    """The bytes of ``path``; a ``ValidationError`` naming ``field`` when it cannot be read."""
    try:
        return path.read_bytes()
    except IsADirectoryError:
        raise ValidationError(field, f"{path} is a directory") from None
    except OSError as exc:
        raise ValidationError(field, f"cannot read {path}: {exc.strerror}") from None


def output_file(field: str, path: str | os.PathLike[str], store_root: Path | None) -> Path:
    """The file a copy of memory is written to (an export, a repair's dropped lines),
    checked before anything is written: named, not a directory, in a directory that
    exists, and not inside ``store_root`` — the file store's directory, where the copy
    would outlive every later erasure (docs/storage.md, "Erasure"). ``ValidationError``s
    name ``field``."""
    if not os.fspath(path):
        raise ValidationError(field, "an empty path")
    target = Path(path)
    if target.is_dir():
        raise ValidationError(field, f"{target} is a directory")
    if not target.parent.is_dir():
        raise ValidationError(field, f"directory {target.parent} does not exist")
    if store_root is not None and target.resolve().is_relative_to(store_root.resolve()):
        raise ValidationError(
            field,
            f"{target} is inside the memory's own directory {store_root}: a copy there would "
            "outlive every later erasure; choose a place outside it",
        )
    return target


def prototype_file(source: Path, user_id: str) -> Path:
    """The prototype ``preferences.json`` that ``source`` names: the file itself, or in a
    prototype user directory, or under ``<root>/<user>/``."""
    if source.is_file():
        return source
    for candidate in (source / "preferences.json", source / user_id / "preferences.json"):
        if candidate.is_file():
            return candidate
    raise ValidationError("path", f"no preferences.json in {source} (nor in {source / user_id})")
