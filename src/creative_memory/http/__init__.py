"""The local daemon: the HTTP JSON API and the Settings → Memory page over the
MemoryService (docs/http.md). The names most callers need are re-exported here."""

from __future__ import annotations

from creative_memory.http.app import DaemonApp, create_app, daemon_of
from creative_memory.http.auth import DaemonFiles
from creative_memory.http.config import DaemonConfig, allowed_host_headers
from creative_memory.http.jsonlog import JsonFormatter, configure_logging
from creative_memory.http.openapi import openapi_document
from creative_memory.http.problems import Problem
from creative_memory.http.run import ThreadedDaemon, ensure_first_start, login_url, run_daemon

__all__ = [
    "DaemonApp",
    "DaemonConfig",
    "DaemonFiles",
    "JsonFormatter",
    "Problem",
    "ThreadedDaemon",
    "allowed_host_headers",
    "configure_logging",
    "create_app",
    "daemon_of",
    "ensure_first_start",
    "login_url",
    "openapi_document",
    "run_daemon",
]
