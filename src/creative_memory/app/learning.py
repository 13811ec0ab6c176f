"""What a user's settings let the memory learn, and appends that depend on it
(docs/storage.md, "Settings an append depends on").

Whether a signal is recorded depends on the user's settings (memory on, not paused), so
an append decided on settings must not land after those settings changed: a pause that
was acknowledged stops every append decided after it. :func:`append_as_allowed` decides
on the settings the backend offers — remembered from an earlier read where the backend
can check them inside the append itself (PostgreSQL: one statement, no extra round
trip), read now otherwise — and decides again when the append reports that they changed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from creative_memory.engine.events import Event, build_refinement_event, build_signal_event
from creative_memory.engine.settings import UserSettings
from creative_memory.engine.timeutil import format_ts, instant_to_ms
from creative_memory.storage.base import EventLogStorage, SettingsChanged, SettingsSeen

R = TypeVar("R")

#: Decisions on settings that changed under them before the append is made unconditioned
#: on settings read just before it (as when the backend cannot check them).
_TRIES = 4


def is_paused(settings: UserSettings, now_ms: int) -> bool:
    """Whether learning is paused at ``now_ms`` (a pause with an end lifts by itself)."""
    if not settings.paused:
        return False
    if settings.paused_until is None:
        return True
    return now_ms < instant_to_ms(settings.paused_until, "paused_until")


def unpaused(settings: UserSettings, now_ms: int) -> bool:
    """Whether learning is not paused at ``now_ms`` (refinements are logged then)."""
    return not is_paused(settings, now_ms)


def is_learning(settings: UserSettings, now_ms: int) -> bool:
    """Whether signals are recorded at ``now_ms``: memory on and not paused."""
    return settings.memory_enabled and not is_paused(settings, now_ms)


#: What to append under given settings.
Decision = Callable[[UserSettings], list[Event]]


def signals_decision(
    signals: Sequence[Mapping[str, Any]], refinement: Mapping[str, Any] | None, now_ms: int
) -> Decision:
    """Signals are recorded while learning; a refinement also with memory off, unless
    paused (docs/architecture.md). Built (and validated) per decision."""
    recorded_at = format_ts(now_ms)

    def decide(settings: UserSettings) -> list[Event]:
        events: list[Event] = []
        if is_learning(settings, now_ms):
            events = [build_signal_event(s, now_ms, recorded_at) for s in signals]
        if refinement is not None and not is_paused(settings, now_ms):
            events.append(build_refinement_event(refinement, recorded_at))
        return events

    return decide


def captured_decision(
    signals: Sequence[Mapping[str, Any]],
    refinement: Mapping[str, Any] | None,
    now_ms: int,
    *,
    learning: bool,
    logging: bool,
) -> Decision:
    """The decision for an event held since its capture (docs/capture.md, "Held events"):
    taken then — signals if learning was on, the refinement unless learning was paused —
    whatever the settings at delivery."""
    recorded_at = format_ts(now_ms)

    def decide(_settings: UserSettings) -> list[Event]:
        events: list[Event] = []
        if learning:
            events = [build_signal_event(s, now_ms, recorded_at) for s in signals]
        if refinement is not None and logging:
            events.append(build_refinement_event(refinement, recorded_at))
        return events

    return decide


def when(
    allowed: Callable[[UserSettings, int], bool], events: list[Event], now_ms: int
) -> Decision:
    """``events`` if ``allowed(settings, now_ms)``, else nothing."""
    return lambda settings: events if allowed(settings, now_ms) else []


def append_as_allowed(
    storage: EventLogStorage,
    user_id: str,
    decide: Decision,
    append: Callable[[UserSettings, Sequence[Event], SettingsSeen], R],
) -> tuple[UserSettings, R | None]:
    """``decide`` what to append under the user's settings, then ``append`` it on the
    condition that they are still those; the settings decided on, and what ``append``
    returned (``None`` when the decision was to append nothing).

    A decision to append nothing is never taken on remembered settings: they are read
    again first. After repeated changes the last decision is taken on settings read just
    now, unconditioned (the append then lands as if just before the next change)."""
    seen = storage.recent_settings(user_id)
    for attempt in range(_TRIES):
        if attempt == _TRIES - 1:
            seen = SettingsSeen(storage.read_settings(user_id))
        settings = seen.settings or UserSettings()
        events = decide(settings)
        if not events and not seen.fresh:  # a "nothing" is decided on settings read now
            seen = storage.recent_settings(user_id, fresh=True)
            settings = seen.settings or UserSettings()
            events = decide(settings)
        if not events:
            return settings, None
        try:
            return settings, append(settings, events, seen)
        except SettingsChanged as moved:
            seen = moved.now
    raise AssertionError("unreachable")  # pragma: no cover - the last try is unconditioned
