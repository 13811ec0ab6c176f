"""Erasure as pure event filters (docs/architecture.md, "Erasure").

A rewrite of the log runs every event through a ``keep`` function: ``None`` drops the
event, another event replaces it. :func:`anchored` wraps a ``keep`` so that the first event
of each project bucket becomes a content-free ``project_anchor`` instead of vanishing
(the bucket's place in the iteration order survives its erasure).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

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


@dataclass(frozen=True)
class Erasure:
    """What one erasure removes, described for the places outside the log that may hold
    it (the capture layer's pending windows and generations; docs/architecture.md,
    "Erasure"): every trace of (``preference_type``, ``pattern``) in ``bucket`` (a
    forget), or everything in ``bucket`` (a reset of one bucket; ``None`` = global), or
    everything of the user (``everything``, a full reset)."""

    user_id: str
    bucket: str | None = None
    preference_type: str | None = None
    pattern: str | None = None
    everything: bool = False

    @property
    def is_forget(self) -> bool:
        """Whether this erases one pattern (else a whole bucket or everything)."""
        return self.pattern is not None


class ErasureListener(Protocol):
    """Something that holds events on their way to the log (a capture layer): the store
    calls :meth:`purge` before it rewrites the log, so nothing erased comes back."""

    def purge(self, erasure: Erasure) -> int:
        """Drop what ``erasure`` removes from what is pending; how many items changed."""
        ...


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
    """Whether ``ev`` belongs to the record bucket ``bucket`` (``None`` = global): evidence
    for it (signals, comparisons, legacy records) or a refinement-log entry of its project
    (a reset of the bucket erases both)."""
    if isinstance(ev, RefinementEvent):
        return (ev.project_id or None) == bucket
    has, b = bucket_of(ev)
    return has and b == bucket


def _strings(value: Any) -> Iterator[str]:
    """Every string inside a JSON-like value (mapping keys included)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)


def diff_mentions(diff: Any, pattern: str) -> bool:
    """Whether any string inside a free JSON ``diff`` contains ``pattern``."""
    return any(pattern in s for s in _strings(diff))


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
        return None if diff_mentions(ev.diff, pattern) else ev
    return ev
