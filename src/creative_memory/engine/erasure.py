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
    event_bucket,
)

Keep = Callable[[Event], Event | None]


@dataclass(frozen=True)
class Erasure:
    """What one erasure removes, described for the places outside the log that may hold
    it (the capture layer's pending windows and generations; docs/architecture.md,
    "Erasure"): every trace of (``preference_type``, ``pattern``) in ``bucket`` (a
    forget), or everything in ``bucket`` (a reset of one bucket; ``None`` = global), or
    everything of the user (``everything``, a full reset). ``note_id`` names it."""

    user_id: str
    bucket: str | None = None
    preference_type: str | None = None
    pattern: str | None = None
    everything: bool = False
    #: The id of the note the erasure leaves with the log (docs/storage.md, "Erasure
    #: notes"): a capture layer purged by it records it on what it holds.
    note_id: str = ""

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
    has, b = event_scope(ev)
    return has and b == bucket


def event_scope(ev: Event) -> tuple[bool, str | None]:
    """Whether ``ev`` belongs to a bucket, and which (``None`` = global): the bucket it is
    evidence for, or a refinement's project (``""`` and ``None`` both mean global)."""
    if isinstance(ev, RefinementEvent):
        return True, ev.project_id or None
    return bucket_of(ev)


def strings_of(value: Any) -> Iterator[str]:
    """Every string inside a JSON-like value (mapping keys included)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from strings_of(k)
            yield from strings_of(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from strings_of(v)


def bounded_at(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` stands as a whole word: not run into a letter or digit
    on a side where it begins (ends) with one (docs/storage.md, "Erasure")."""
    if text[start].isalnum() and start > 0 and text[start - 1].isalnum():
        return False
    return not (text[end - 1].isalnum() and end < len(text) and text[end].isalnum())


def names_pattern(text: str, pattern: str) -> bool:
    """Whether ``text`` names ``pattern`` as a whole word or token: an occurrence, exact
    (case-sensitive), that is not part of a longer word — ``red`` is named by ``"removed
    red"``, ``"red_button"`` and ``"#red;"``, not by ``"reduced"`` or ``"credits"``."""
    if not pattern:
        return False
    i = text.find(pattern)
    while i >= 0:
        if bounded_at(text, i, i + len(pattern)):
            return True
        i = text.find(pattern, i + 1)
    return False


def diff_mentions(diff: Any, pattern: str) -> bool:
    """Whether any string inside a free JSON ``diff`` names ``pattern``
    (:func:`names_pattern`)."""
    return any(names_pattern(s, pattern) for s in strings_of(diff))


def forget_filter(
    ev: Event, preference_type: str, pattern: str, project_id: str | None
) -> Event | None:
    """``ev`` with every trace of (``preference_type``, ``pattern``) in the bucket
    ``project_id`` removed: ``None`` when nothing of it is left, a copy without the feature
    (pairwise comparisons), or ``ev`` itself when it does not mention it. Its signals,
    legacy records and comparison features go, and the bucket's refinements whose diff
    names the pattern (:func:`diff_mentions`)."""

    def is_feature(bucket: str | None, t: object, p: object) -> bool:
        return bucket == project_id and t == preference_type and p == pattern

    if isinstance(ev, SignalEvent):
        return None if is_feature(event_bucket(ev), ev.preference_type, ev.pattern) else ev
    if isinstance(ev, LegacyRecordEvent):
        t, p = ev.record.get("preference_type"), ev.record.get("pattern")
        return None if is_feature(ev.bucket, t, p) else ev
    if isinstance(ev, ComparisonEvent):
        bucket = event_bucket(ev)

        def strip(side: Any) -> Any:
            feats = [
                f for f in side.features if not is_feature(bucket, f.preference_type, f.pattern)
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
        named = (ev.project_id or None) == project_id and diff_mentions(ev.diff, pattern)
        return None if named else ev
    return ev
