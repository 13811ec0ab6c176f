"""Per-feature bookkeeping of version 2: counts, support, tags, times, decay, and the
record id of a feature (docs/engine.md, "Version 2")."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from creative_memory.engine.derivation.base import hash_id
from creative_memory.engine.derivation.v2.table import V2Table
from creative_memory.engine.timeutil import MS_PER_DAY, add_days_ts, format_ts, ts_to_ms

FeatureKey = tuple[str, str]  # (preference_type, pattern)


@functools.lru_cache(maxsize=1 << 16)
def content_id(bucket: str | None, key: FeatureKey, polarity: str) -> str:
    """The record id of a feature with ``polarity`` in ``bucket``: a hash of what it is,
    not of the event that created it (a fit may flip a polarity back and forth)."""
    return hash_id("pref_", f"v2\0{bucket or ''}\0{key[0]}\0{key[1]}\0{polarity}")


@dataclass
class Feature:
    """Per-feature bookkeeping (everything except the fit)."""

    col: int
    table: V2Table = field(repr=False, compare=False)
    counts: dict[str, list[int]] = field(default_factory=dict)  # kind → [for, against]
    support: list[int] = field(default_factory=lambda: [0, 0])  # reinforcing events +/−
    tags: set[str] = field(default_factory=set)
    events: int = 0
    last_ms: int = 0
    last_seen: str = ""
    decay_at_ms: int = 0  # kept as epoch ms; formatted only when shown or stored
    decay_steps: int = 0
    archived: bool = False

    # (events, decay_at_ms) → the record fields that depend on the bookkeeping only
    _summary: tuple[tuple[int, int], tuple[Any, ...]] | None = field(
        default=None, repr=False, compare=False
    )

    @property
    def decay_at(self) -> str:
        """When the feature's next decay step is due ("" before any evidence)."""
        if not self.last_seen:
            return ""
        days = self.table.decay_days
        if self.decay_at_ms == self.last_ms + days * MS_PER_DAY:
            # the usual case (no decay pass since the last evidence): shift the date of
            # ``last_seen`` (``format_ts(last_ms)``), memoised per day — the same string
            return add_days_ts(self.last_seen, days)
        return format_ts(self.decay_at_ms)

    def touch(self, at: str) -> None:
        """Count one event about the feature at ``at``: newest evidence time, decay
        restarted, un-archived."""
        ms = ts_to_ms(at)
        self.events += 1
        if ms >= self.last_ms or not self.last_seen:
            self.last_ms = ms
            self.last_seen = at
        self.decay_at_ms = self.last_ms + self.table.decay_days * MS_PER_DAY
        self.decay_steps = 0
        self.archived = False

    def count(self, kind: str, positive: bool, *, supports: bool) -> None:
        """One event of ``kind`` for (``positive``) or against the feature; with
        ``supports`` it also counts as reinforcing support of that direction."""
        side = 0 if positive else 1
        self.counts.setdefault(kind, [0, 0])[side] += 1
        if supports:
            self.support[side] += 1

    def summary(self) -> tuple[list[str], int, int, list[str], str]:
        """``(sources, accept_count, reject_count, explicit_tags, decay_at)`` of the
        feature's record, kept until its bookkeeping changes (every change of counts, tags
        or times also changes ``events`` or ``decay_at_ms``)."""
        stamp = (self.events, self.decay_at_ms)
        if self._summary is None or self._summary[0] != stamp:
            pos = sum(v[0] for v in self.counts.values())
            neg = sum(v[1] for v in self.counts.values())
            sources = [k for k in self.table.kinds if k in self.counts]
            self._summary = (stamp, (sources, pos, neg, sorted(self.tags), self.decay_at))
        sources, pos, neg, tags, decay_at = self._summary[1]
        return list(sources), pos, neg, list(tags), decay_at

    def dump(self) -> dict[str, Any]:
        """The bookkeeping as JSON-ready data (for the derivation cache)."""
        return {
            "col": self.col,
            "counts": self.counts,
            "support": self.support,
            "tags": sorted(self.tags),
            "events": self.events,
            "last_ms": self.last_ms,
            "last_seen": self.last_seen,
            "decay_at": self.decay_at,
            "decay_steps": self.decay_steps,
            "archived": self.archived,
        }

    @classmethod
    def load(cls, d: Mapping[str, Any], table: V2Table) -> Feature:
        """Inverse of :meth:`dump`."""
        return cls(
            col=int(d["col"]),
            table=table,
            counts={k: [int(v[0]), int(v[1])] for k, v in d["counts"].items()},
            support=[int(d["support"][0]), int(d["support"][1])],
            tags=set(d["tags"]),
            events=int(d["events"]),
            last_ms=int(d["last_ms"]),
            last_seen=str(d["last_seen"]),
            decay_at_ms=ts_to_ms(str(d["decay_at"])) if d["decay_at"] else 0,
            decay_steps=int(d["decay_steps"]),
            archived=bool(d["archived"]),
        )
