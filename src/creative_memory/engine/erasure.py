"""Erasure as pure event filters (docs/architecture.md, "Erasure").

A rewrite of the log runs every event through a ``keep`` function: ``None`` drops the
event, another event replaces it. :func:`anchored` wraps a ``keep`` so that the first event
of each project bucket becomes a content-free ``project_anchor`` instead of vanishing
(the bucket's place in the iteration order survives its erasure).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from creative_memory.engine.events import (
    ComparisonEvent,
    Event,
    LegacyRecordEvent,
    ProjectAnchorEvent,
    RefinementEvent,
    SignalEvent,
    bucket_of,
    mentions,
)

Keep = Callable[[Event], Event | None]


def anchored(keep: Keep) -> Keep:
    """``keep``, except that a dropped first event of a project bucket becomes an anchor."""
    seen: set[str] = set()

    def keep_anchored(ev: Event) -> Event | None:
        has, bucket = bucket_of(ev)
        first = False
        if isinstance(ev, ProjectAnchorEvent):
            has, bucket = True, ev.project_id
        if has and bucket is not None and bucket not in seen:
            seen.add(bucket)
            first = True
        new = keep(ev)
        if new is None and first and not isinstance(ev, ProjectAnchorEvent):
            return ProjectAnchorEvent(
                seq=ev.seq, at=ev.at, recorded_at=ev.recorded_at, project_id=bucket or ""
            )
        return new

    return keep_anchored


def in_bucket(ev: Event, bucket: str | None) -> bool:
    """Whether ``ev`` belongs to the record bucket ``bucket`` (``None`` = global)."""
    has, b = bucket_of(ev)
    return has and b == bucket


def forget_filter(
    ev: Event, preference_type: str, pattern: str, project_id: str | None
) -> Event | None:
    """``ev`` with every trace of (``preference_type``, ``pattern``) in the bucket removed:
    ``None`` when nothing of it is left, a copy without the pattern's features (pairwise
    comparisons), or ``ev`` itself when it does not mention it."""
    if isinstance(ev, SignalEvent | LegacyRecordEvent):
        return None if mentions(ev, preference_type, pattern, project_id) else ev
    if isinstance(ev, ComparisonEvent):
        if not mentions(ev, preference_type, pattern, project_id):
            return ev

        def strip(side: Any) -> Any:
            feats = [
                f
                for f in side.features
                if not (f.preference_type == preference_type and f.pattern == pattern)
            ]
            return (
                side
                if len(feats) == len(side.features)
                else msgspec.structs.replace(side, features=feats)
            )

        chose, over = strip(ev.chose), strip(ev.over)
        if chose is ev.chose and over is ev.over:
            return ev
        if not chose.features and not over.features:
            return None
        return msgspec.structs.replace(ev, chose=chose, over=over)
    if isinstance(ev, RefinementEvent):
        # Free-text diffs can name the pattern; erasure must be real, so drop such entries.
        return None if pattern.encode() in msgspec.json.encode(ev.diff) else ev
    return ev
