"""The capture rules' settings (docs/capture.md, "Capture rules"; docs/api.md,
``CaptureConfig``): the coalescing and debounce windows, the abandonment mode and the host
``trigger`` values that count. Checked when built: a bad value is a
:class:`~creative_memory.engine.errors.ValidationError` naming the field, never a crash
inside a later ``submit``."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Literal

from creative_memory.engine.errors import ValidationError

AbandonMode = Literal["active_tab", "any_pending"]

_WINDOWS = ("coalesce_window_s", "thumbs_debounce_s")


@dataclass(frozen=True)
class CaptureConfig:
    """Capture rules. Windows are finite, non-negative numbers of seconds. Trigger sets name
    the host's ``trigger`` values that count (a set of strings; a list or tuple of strings
    is taken as a ``frozenset``, a bare string is refused); an event without a ``trigger``
    is taken as the canonical explicit action."""

    coalesce_window_s: float = 30.0
    thumbs_debounce_s: float = 2.0
    abandon_mode: AbandonMode = "active_tab"
    accept_triggers: frozenset[str] = frozenset({"explicit"})
    edit_triggers: frozenset[str] = frozenset({"manual_edit", "bridge_save", "finalize_save"})
    tag_triggers: frozenset[str] = frozenset({"explicit"})
    abandon_triggers: frozenset[str] = frozenset({"explicit_discard", "new_generation"})
    revert_triggers: frozenset[str] = frozenset({"history_panel"})

    def __post_init__(self) -> None:
        for name in _WINDOWS:
            value: object = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value < 0
            ):
                raise ValidationError(
                    name, f"{name} must be a finite number of seconds >= 0, got {value!r}"
                )
        if self.abandon_mode not in ("active_tab", "any_pending"):
            raise ValidationError(
                "abandon_mode",
                f"abandon_mode must be 'active_tab' or 'any_pending', got {self.abandon_mode!r}",
            )
        for f in fields(self):
            if f.name.endswith("_triggers"):
                object.__setattr__(self, f.name, _trigger_set(f.name, getattr(self, f.name)))


def _trigger_set(name: str, value: object) -> frozenset[str]:
    """``value`` as a frozenset of strings, else a :class:`ValidationError` naming ``name``
    (a bare string would match its substrings)."""
    if isinstance(value, (set, frozenset, list, tuple)) and all(isinstance(t, str) for t in value):
        return frozenset(value)
    raise ValidationError(
        name, f"{name} must be a set of strings, got {type(value).__name__} {value!r}"
    )
