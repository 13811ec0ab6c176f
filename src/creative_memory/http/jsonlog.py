"""Structured logs: one JSON object per line on stderr (docs/daemon.md, "Operations")."""

from __future__ import annotations

import json
import logging
import logging.config
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

#: The daemon's logger; every line it writes carries an ``event`` field.
log = logging.getLogger("creative_memory.http")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``message`` and the record's
    ``fields`` (``extra={"fields": {...}}``), plus ``exception`` with the traceback."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
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
    """Route creative-memory's and uvicorn's logs through :class:`JsonFormatter`."""
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


def route_template(scope: Mapping[str, Any]) -> str:
    """What a log line says about a request's path: the template of the route that matched
    (``/api/v1/preferences/{rest:segments}``), never the path itself — a path can carry a
    pattern name, which must not outlive its erasure in a log (docs/daemon.md,
    "Operations"). ``(no route)`` when nothing matched."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "(no route)"


def log_event(level: int, event: str, *, exc: BaseException | None = None, **fields: Any) -> None:
    """Log one line named ``event`` with ``fields`` (and ``exc``'s traceback when given)."""
    if not log.isEnabledFor(level):  # (a line per request below the level: build nothing)
        return
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    log.log(level, event, exc_info=exc_info, extra={"fields": {"event": event, **fields}})
