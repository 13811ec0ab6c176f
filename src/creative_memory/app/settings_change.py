"""Several settings changed at once (``POST /api/v1/settings``, ``MemoryService
.change_settings``): judged whole, then written in one settings update.

Every key is validated first, each error naming the key the caller sent (``paused_until``,
``project_ignore_global.<id>``); only then is anything written, as one change of the
user's settings — so a change with one bad key writes nothing, and no check runs between
two writes (a pause end judged "in the future" is not judged again a moment later).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

import msgspec
from msgspec import UNSET

from creative_memory.app.results import MAX_SETTINGS_PROJECTS, SettingsChange
from creative_memory.engine.errors import ValidationError
from creative_memory.engine.events import validate_project_id
from creative_memory.engine.settings import UserSettings
from creative_memory.engine.timeutil import format_ts, try_parse_ts

_SWITCHES: Final = ("memory_enabled", "paused", "diagnostics_feed")

SettingsEdit = Callable[[UserSettings], UserSettings]


def future_time(field: str, value: object, now_ms: int) -> str:
    """``value`` — an ISO 8601 date or date-time after ``now_ms`` — normalised, else a
    :class:`ValidationError` naming ``field``."""
    if not isinstance(value, str):
        raise ValidationError(field, f"{field} must be an ISO 8601 date-time or null")
    ms = try_parse_ts(value.strip())
    if ms is None:
        raise ValidationError(field, f"{field} {value!r} is not an ISO 8601 date")
    if ms <= now_ms:
        raise ValidationError(field, f"{field} {format_ts(ms)} is in the past")
    return format_ts(ms)


def settings_edit(change: SettingsChange, now_ms: int) -> SettingsEdit | None:
    """What ``change`` does to a user's settings, every key validated (``now_ms``: the
    moment a ``paused_until`` must follow); ``None`` when it names nothing to change."""
    for name in _SWITCHES:
        value = getattr(change, name)
        if value is not UNSET and not isinstance(value, bool):
            raise ValidationError(name, f"{name} must be true or false")
    until: str | None = None
    if change.paused_until is not UNSET and change.paused_until is not None:
        if change.paused is False:
            raise ValidationError(
                "paused_until", "paused_until needs paused to be true (or absent)"
            )
        until = future_time("paused_until", change.paused_until, now_ms)
    projects = _projects(change.project_ignore_global)
    # paused: true (or an end) starts a pause (until resumed when no end is given)
    pause = change.paused is True or until is not None
    resume = not pause and change.paused is False
    enable, feed = change.memory_enabled, change.diagnostics_feed
    if enable is UNSET and feed is UNSET and not (pause or resume or projects):
        return None

    def edit(s: UserSettings) -> UserSettings:
        changes: dict[str, object] = {}
        if isinstance(enable, bool):
            changes["memory_enabled"] = enable
        if pause or resume:
            changes["paused"] = pause
            changes["paused_until"] = until
        if projects:
            disabled = list(s.disabled_projects)
            for pid, ignore in projects.items():
                disabled = [p for p in disabled if p != pid] + ([pid] if ignore else [])
            changes["disabled_projects"] = disabled
        if isinstance(feed, bool):
            changes["diagnostics_feed"] = feed
        return msgspec.structs.replace(s, **changes)

    return edit


def _projects(value: object) -> Mapping[str, bool]:
    """``project_ignore_global``: project ids (each validated) → true/false."""
    if value is UNSET:
        return {}
    if not isinstance(value, dict):
        raise ValidationError(
            "project_ignore_global", "project_ignore_global must map project ids to true/false"
        )
    if len(value) > MAX_SETTINGS_PROJECTS:
        raise ValidationError(
            "project_ignore_global", f"at most {MAX_SETTINGS_PROJECTS} projects per change"
        )
    for pid, flag in value.items():
        try:
            validate_project_id(pid)
        except ValidationError as exc:
            raise ValidationError(f"project_ignore_global.{pid}", str(exc)) from None
        if not isinstance(flag, bool):
            raise ValidationError(f"project_ignore_global.{pid}", "must be true or false")
    return value
