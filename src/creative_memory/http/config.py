"""What ``creative-memory serve`` decides: the daemon's configuration, its defaults and the
``Host`` header values it answers (docs/daemon.md, "Security model")."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from creative_memory.capture.layer import CaptureConfig
from creative_memory.engine.errors import ValidationError

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 7744
DEFAULT_USER: Final = "default"
DEFAULT_ALARM_MS: Final = 50.0
DEFAULT_MAX_BODY: Final = 1024 * 1024  # JSON requests
DEFAULT_MAX_IMPORT: Final = 64 * 1024 * 1024  # archive uploads
MAX_BATCH: Final = 1000  # events per POST /api/v1/events
LOOPBACK_NAMES: Final = ("localhost", "127.0.0.1", "[::1]")
IMPORT_PATH: Final = "/api/v1/import"  # the one route whose body limit is max_import_bytes
#: When derived state is brought up to date (docs/daemon.md, "Background derivation"):
#: ``lazy`` on the first read after new events, ``background`` by a worker after each batch.
DERIVATION_MODES: Final = ("lazy", "background")
DEFAULT_DERIVATION: Final = "lazy"
DERIVATION_ENV: Final = "CREATIVE_MEMORY_DERIVATION"


@dataclass(frozen=True)
class DaemonConfig:
    """Everything ``creative-memory serve`` decides (docs/daemon.md, "Quickstart").

    ``root`` may be given as a ``str`` or any path-like: it is stored as a :class:`Path`.
    """

    root: Path
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT  # the bound port: the Host check and the cookie name use it
    multi_user: bool = False
    user: str = DEFAULT_USER
    alarm_ms: float = DEFAULT_ALARM_MS
    max_body_bytes: int = DEFAULT_MAX_BODY
    max_import_bytes: int = DEFAULT_MAX_IMPORT
    allowed_hosts: tuple[str, ...] = ()  # extra names accepted in the Host header
    tick_seconds: float = 1.0
    derivation_version: str | None = None
    database: str | None = None  # a postgresql:// URL; None = the file store under root
    capture: CaptureConfig = field(default_factory=CaptureConfig)
    log_level: str = "info"
    derivation: str = DEFAULT_DERIVATION  # one of DERIVATION_MODES

    def __post_init__(self) -> None:
        if not isinstance(self.root, Path):
            object.__setattr__(self, "root", Path(self.root))


def resolve_derivation(flag: str | None, env: Mapping[str, str] | None = None) -> str:
    """The derivation mode: ``--derivation``, else ``$CREATIVE_MEMORY_DERIVATION``, else
    ``lazy``; anything but ``lazy`` or ``background`` is a ``ValidationError`` naming the
    source (``derivation`` for the flag, the variable's name for the environment)."""
    env = os.environ if env is None else env
    value = flag if flag else env.get(DERIVATION_ENV, "").strip().lower()
    return check_derivation(value or DEFAULT_DERIVATION, "derivation" if flag else DERIVATION_ENV)


def check_derivation(value: object, field_name: str = "derivation") -> str:
    """``value`` if it is a derivation mode, else a ``ValidationError`` naming the field."""
    if value not in DERIVATION_MODES:
        raise ValidationError(
            field_name, f"{field_name} must be one of {', '.join(DERIVATION_MODES)}, got {value!r}"
        )
    return str(value)


def allowed_host_headers(config: DaemonConfig) -> frozenset[str]:
    """Every ``Host`` header value the daemon answers, lower case (docs/daemon.md)."""
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


def url_host(host: str) -> str:
    """The host part of a URL reaching a daemon bound to ``host`` (wildcards → loopback)."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host in ("::", "[::]"):
        return "[::1]"
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
