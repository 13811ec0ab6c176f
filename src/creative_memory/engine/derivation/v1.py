"""Derivation: a pure, versioned fold of raw events into preference records (design.md §1).

``derive(events, version)`` is a pure function of the event sequence and the version. The
fold itself is :class:`DerivedState.apply`, so a caller holding a state for a prefix of the log
can extend it with the events that follow (used for O(k) appends).

Version ``"1"`` reproduces the prototype exactly (engine.md §3–§6). No I/O, no clock.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any, ClassVar

import msgspec

from creative_memory.engine.constants import (
    ARCHIVE_DAYS,
    DECAY_DAYS,
    DECAY_FACTOR,
    NORMALIZER,
    REVERSAL_FACTOR_2,
    REVERSAL_FACTOR_3,
    REVERSAL_PENALTY_MULTIPLIER,
    SIGNAL_WEIGHTS,
)
from creative_memory.engine.errors import ValidationError
from creative_memory.engine.events import (
    ComparisonEvent,
    DecayPassEvent,
    Event,
    LegacyRecordEvent,
    ProjectAnchorEvent,
    RefinementEvent,
    SignalEvent,
)
from creative_memory.engine.models import DecayResult, Preference, Refinement
from creative_memory.engine.timeutil import MS_PER_DAY, add_days_ts, format_ts, ts_to_ms

_B36 = "abcdefghijklmnopqrstuvwxyz0123456789"

#: ``abs(w) / NORMALIZER`` per signal type — the same float the formula gives at each use.
_INCREMENT = {k: abs(w) / NORMALIZER for k, w in SIGNAL_WEIGHTS.items()}
_OTHER = {"positive": "negative", "negative": "positive"}

Key = tuple[str, str, str]  # (preference_type, pattern, polarity)


def clamp(v: float, lo: float, hi: float) -> float:
    return min(max(v, lo), hi)


def confidence_of(s: float) -> str:
    if s < 0.35:
        return "low"
    if s <= 0.65:
        return "medium"
    return "high"


def drop_rung(c: str) -> str:
    return {"high": "medium", "medium": "low"}.get(c, "low")


def _hash_id(prefix: str, seed: str) -> str:
    n = int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big")
    chars = []
    for _ in range(6):
        n, r = divmod(n, 36)
        chars.append(_B36[r])
    return prefix + "".join(chars)


def _ms_or_none(text: str | None) -> int | None:
    if not text:
        return None
    try:
        return ts_to_ms(text)
    except ValidationError:
        return None


#: Registry of derivation versions: version string → state class implementing its fold.
#: Version modules register themselves (see ``register_version``).
_REGISTRY: dict[str, type[DerivedState]] = {}


def register_version(version: str, cls: type[DerivedState]) -> None:
    _REGISTRY[version] = cls


def known_versions() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def check_version(version: object) -> str:
    if not isinstance(version, str) or version not in _REGISTRY:
        raise ValidationError(
            "derivation_version",
            f"Unknown derivation_version {version!r}. Known: {', '.join(_REGISTRY)}.",
        )
    return version


def new_state(version: str) -> DerivedState:
    """A fresh, empty state for ``version``."""
    return _REGISTRY[check_version(version)](version)


class _Bucket:
    """One record list (global, or one project) with first-match indexes."""

    __slots__ = ("by_id", "first", "records", "shadows")

    def __init__(self) -> None:
        self.records: list[Preference] = []
        self.first: dict[Key, Preference] = {}
        self.by_id: dict[str, Preference] = {}
        # (shadowed record id, polarity) → records created as its shadows, in list order
        # (``shadow_of`` only ever changes from an id to None, so the first one that still
        # names it is the first match in ``records``)
        self.shadows: dict[tuple[str, str], list[Preference]] = {}

    def add(self, rec: Preference) -> None:
        self.records.append(rec)
        self.first.setdefault((rec.preference_type, rec.pattern, rec.polarity), rec)
        self.by_id.setdefault(rec.id, rec)
        if rec.shadow_of:
            self.shadows.setdefault((rec.shadow_of, rec.polarity), []).append(rec)

    def shadow(self, of: str, polarity: str) -> Preference | None:
        """The first record whose ``shadow_of`` is ``of`` with ``polarity``, or None."""
        for rec in self.shadows.get((of, polarity), ()):
            if rec.shadow_of == of:
                return rec
        return None


class DerivedState:
    """The derived records of one user after folding a prefix of the log."""

    #: Whether a record is meaningful right after each event of a batch (version 1 folds
    #: record by record). A version that fits all evidence jointly sets it False: the store
    #: then reports what a batch touched as it stands after the whole batch, one fit.
    records_per_event: ClassVar[bool] = True

    def __init__(self, version: str) -> None:
        self.version = version
        self.global_bucket = _Bucket()
        self.projects: dict[str, _Bucket] = {}
        self.refinements: list[Refinement] = []
        self.last_seq = 0
        self.event_count = 0
        self._used_ids: set[str] = set()

    # -- queries -----------------------------------------------------------------------
    @property
    def global_records(self) -> list[Preference]:
        return self.global_bucket.records

    def project_records(self, project_id: str) -> list[Preference] | None:
        b = self.projects.get(project_id)
        return None if b is None else b.records

    def buckets(self) -> Iterable[_Bucket]:
        yield self.global_bucket
        yield from self.projects.values()

    def all_records(self) -> list[Preference]:
        out: list[Preference] = []
        for b in self.buckets():
            out.extend(b.records)
        return out

    def has_records(self) -> bool:
        return any(b.records for b in self.buckets())

    def export_record(self, rec: Preference) -> Preference:
        """A copy of ``rec`` carrying the provenance of this derivation."""
        out = rec.copy()
        out.last_derived_event_seq = self.last_seq
        return out

    def report(self, rec: Preference) -> Preference:
        """What an append returns for a record its event touched (right after the batch
        when :attr:`records_per_event` is False). By default the current record; a version
        whose records need a fit may return a provisional one instead, so that an append
        never fits (docs/performance.md, "Scaling with the vocabulary")."""
        return self.export_record(rec)

    # -- persistence (for the derivation cache) ----------------------------------------------
    def dump(self) -> bytes:
        """Serialise the whole state (records, refinement log, counters) to JSON bytes."""
        doc = _StateDoc(
            version=self.version,
            last_seq=self.last_seq,
            event_count=self.event_count,
            global_records=self.global_bucket.records,
            projects={pid: b.records for pid, b in self.projects.items()},
            refinements=self.refinements,
            used_ids=sorted(self._used_ids),
            extra=self._dump_extra(),
        )
        return _state_encoder.encode(doc)

    @classmethod
    def load(cls, data: bytes) -> DerivedState:
        """Inverse of :meth:`dump` (the version's registered class is used)."""
        doc = _state_decoder.decode(data)
        state = new_state(doc.version)
        state.last_seq = doc.last_seq
        state.event_count = doc.event_count
        for rec in doc.global_records:
            state.global_bucket.add(rec)
        for pid, recs in doc.projects.items():
            b = state._bucket_for(pid)
            for rec in recs:
                b.add(rec)
        state.refinements = doc.refinements
        state._used_ids = set(doc.used_ids)
        state._load_extra(doc.extra)
        return state

    def materialize(self) -> None:
        """Bring derived records up to date before a read (a no-op in version 1; versions
        that fit lazily, like "2", recompute here)."""

    def _dump_extra(self) -> Any:
        """Version-specific state beyond records (JSON-ready). Version 1 has none."""
        return None

    def _load_extra(self, extra: Any) -> None:
        """Restore what :meth:`_dump_extra` produced."""

    # -- the fold ------------------------------------------------------------------------
    def apply(self, event: Event) -> Preference | Refinement | None:
        """Fold one event. Returns the record a signal created or updated (on a
        contradiction, the contradicted record), the refinement-log entry of a refinement
        event, else ``None``. Returned objects are live state: copy before handing out."""
        if event.seq <= self.last_seq and self.event_count:
            raise ValueError(f"events out of order: seq {event.seq} after {self.last_seq}")
        self.last_seq = event.seq
        self.event_count += 1
        if isinstance(event, SignalEvent):
            return self._apply_signal(event)
        if isinstance(event, DecayPassEvent):
            self._decay(ts_to_ms(event.at), apply=True)
        elif isinstance(event, RefinementEvent):
            return self._apply_refinement(event)
        elif isinstance(event, LegacyRecordEvent):
            self._apply_legacy(event)
        elif isinstance(event, ProjectAnchorEvent):
            self._bucket_for(event.project_id)
        elif isinstance(event, ComparisonEvent):
            pass  # version 1 has no pairwise evidence
        return None

    def fold(self, events: Iterable[Event]) -> None:
        """Fold ``events`` when nothing needs what each one touched (a version may do it
        faster than one :meth:`apply` per event; the state is the same)."""
        for ev in events:
            self.apply(ev)

    def _new_id(self, prefix: str, seq: int) -> str:
        seed = f"{prefix}{seq}"
        rid = _hash_id(prefix, seed)
        n = 0
        while rid in self._used_ids:
            n += 1
            rid = _hash_id(prefix, f"{seed}#{n}")
        self._used_ids.add(rid)
        return rid

    def _bucket_for(self, project_id: str | None) -> _Bucket:
        if project_id is None:
            return self.global_bucket
        b = self.projects.get(project_id)
        if b is None:
            b = self.projects[project_id] = _Bucket()
        return b

    def _find_by_id(self, rid: str) -> Preference | None:
        for b in self.buckets():
            rec = b.by_id.get(rid)
            if rec is not None:
                return rec
        return None

    def _new_record(
        self,
        ev: SignalEvent,
        polarity: str,
        strength: float,
        scope: str,
        shadow_of: str | None,
        decay_at: str,
    ) -> Preference:
        return Preference(
            id=self._new_id("pref_", ev.seq),
            preference_type=ev.preference_type,
            pattern=ev.pattern,
            polarity=polarity,
            signal_strength=strength,
            confidence=confidence_of(strength),
            sources=[ev.signal_type],
            accept_count=1 if polarity == "positive" else 0,
            reject_count=1 if polarity == "negative" else 0,
            explicit_tags=[ev.tag_text] if ev.tag_text else [],
            last_seen=ev.at,
            decay_at=decay_at,
            scope=scope,
            reversal_signals=0,
            reversal_first_seen=None,
            polarity_status="stable",
            shadow_of=shadow_of,
            derivation_version=self.version,
            source_event_count=1,
            last_derived_event_seq=ev.seq,
        )

    def _apply_signal(self, ev: SignalEvent) -> Preference:
        w = SIGNAL_WEIGHTS[ev.signal_type]
        inc = _INCREMENT[ev.signal_type]
        bucket = self.global_bucket if ev.scope != "project" else self._bucket_for(ev.project_id)
        t = ev.at
        decay_at = add_days_ts(t, DECAY_DAYS)
        first = bucket.first
        same = first.get((ev.preference_type, ev.pattern, ev.polarity))
        if same is not None and same.polarity_status == "archived":  # reactivation first
            same.polarity_status = "stable"
            same.reversal_signals = 0
            same.reversal_first_seen = None
            same.source_event_count += 1
        opp = first.get((ev.preference_type, ev.pattern, _OTHER[ev.polarity]))
        if opp is not None and opp.polarity_status == "stable":  # contradiction wins
            self._reversal(bucket, opp, ev, w, decay_at)
            return opp
        if same is None:
            scope = (
                "project:" + ev.project_id if ev.scope == "project" and ev.project_id else "global"
            )
            rec = self._new_record(ev, ev.polarity, clamp(inc, 0.0, 1.0), scope, None, decay_at)
            bucket.add(rec)
            return rec
        # accumulation
        strength = clamp(same.signal_strength + inc, 0.0, 1.0)
        same.signal_strength = strength
        same.confidence = "low" if strength < 0.35 else "medium" if strength <= 0.65 else "high"
        if ev.signal_type not in same.sources:
            same.sources.append(ev.signal_type)
        if ev.tag_text and ev.tag_text not in same.explicit_tags:
            same.explicit_tags.append(ev.tag_text)
        if ev.polarity == "positive":
            same.accept_count += 1
        else:
            same.reject_count += 1
        same.last_seen = t
        same.decay_at = decay_at
        same.source_event_count += 1
        if same.shadow_of and same.confidence in ("medium", "high"):  # shadow promotion
            original = self._find_by_id(same.shadow_of)
            if original is not None:
                original.polarity_status = "archived"
                original.source_event_count += 1
            same.shadow_of = None
        return same

    def _reversal(
        self, bucket: _Bucket, rec: Preference, ev: SignalEvent, w: float, decay_at: str
    ) -> None:
        t = ev.at
        rec.reversal_signals = (rec.reversal_signals or 0) + 1
        if not rec.reversal_first_seen:
            rec.reversal_first_seen = t
        rec.source_event_count += 1
        rs = rec.reversal_signals
        if rs == 2:
            rec.signal_strength = clamp(rec.signal_strength * REVERSAL_FACTOR_2, 0.0, 1.0)
        elif rs == 3:
            rec.signal_strength = clamp(rec.signal_strength * REVERSAL_FACTOR_3, 0.0, 1.0)
            rec.confidence = drop_rung(rec.confidence)
        elif rs >= 4:
            penalty = (abs(w) * REVERSAL_PENALTY_MULTIPLIER) / 2.0
            rec.signal_strength = clamp(rec.signal_strength - penalty, 0.0, 1.0)
            rec.confidence = "low"
            rec.polarity_status = "under_review"
            sp = _OTHER[rec.polarity]
            existing = bucket.shadow(rec.id, sp)
            if existing is None:
                shadow = self._new_record(ev, sp, abs(w) / 2.0, rec.scope, rec.id, decay_at)
                bucket.add(shadow)
            else:
                existing.signal_strength = clamp(existing.signal_strength + abs(w) / 2.0, 0.0, 1.0)
                existing.confidence = confidence_of(existing.signal_strength)
                existing.last_seen = t
                existing.decay_at = decay_at
                existing.source_event_count += 1
                if existing.confidence in ("medium", "high"):
                    rec.polarity_status = "archived"
                    existing.shadow_of = None
        rec.last_seen = t

    def _decay(self, now_ms: int, *, apply: bool) -> DecayResult:
        """One decay pass at ``now_ms`` (engine.md §6). With ``apply=False`` only counts."""
        decayed = archived = 0
        new_decay_at: str | None = None
        for b in self.buckets():
            for rec in b.records:
                if rec.polarity_status == "archived":
                    continue
                seen = _ms_or_none(rec.last_seen)
                if seen is not None and (now_ms - seen) / MS_PER_DAY >= ARCHIVE_DAYS:
                    archived += 1
                    if apply:
                        rec.polarity_status = "archived"
                        rec.source_event_count += 1
                    continue
                due = _ms_or_none(rec.decay_at)
                if due is not None and (now_ms - due) / MS_PER_DAY >= 0:
                    decayed += 1
                    if apply:
                        if new_decay_at is None:
                            new_decay_at = format_ts(now_ms + DECAY_DAYS * MS_PER_DAY)
                        rec.signal_strength = clamp(rec.signal_strength * DECAY_FACTOR, 0.0, 1.0)
                        rec.confidence = drop_rung(rec.confidence)
                        rec.decay_at = new_decay_at
                        rec.source_event_count += 1
        return DecayResult(decayed=decayed, archived=archived)

    def decay_preview(self, now_ms: int) -> DecayResult:
        """What a decay pass at ``now_ms`` would change, without changing anything."""
        return self._decay(now_ms, apply=False)

    def _apply_refinement(self, ev: RefinementEvent) -> Refinement:
        entry = Refinement(
            id=ev.ref_id or self._new_id("ref_", ev.seq),
            artifact_id=ev.artifact_id,
            project_id=ev.project_id,
            timestamp=ev.at,
            diff=ev.diff,
        )
        self.refinements.append(entry)
        return entry

    def _apply_legacy(self, ev: LegacyRecordEvent) -> None:
        r = ev.record
        rid = str(r["id"])
        self._used_ids.add(rid)
        rec = Preference(
            id=rid,
            preference_type=r["preference_type"],
            pattern=r["pattern"],
            polarity=r["polarity"],
            signal_strength=float(r["signal_strength"]),
            confidence=r["confidence"],
            sources=list(r.get("sources") or []),
            accept_count=int(r.get("accept_count") or 0),
            reject_count=int(r.get("reject_count") or 0),
            explicit_tags=list(r.get("explicit_tags") or []),
            last_seen=r["last_seen"],
            decay_at=r["decay_at"],
            scope=r["scope"],
            reversal_signals=int(r.get("reversal_signals") or 0),
            reversal_first_seen=r.get("reversal_first_seen"),
            polarity_status=r["polarity_status"],
            shadow_of=r.get("shadow_of"),
            derivation_version=self.version,
            source_event_count=1,
            last_derived_event_seq=ev.seq,
        )
        self._bucket_for(ev.bucket).add(rec)


register_version("1", DerivedState)


class _StateDoc(msgspec.Struct, kw_only=True):
    version: str
    last_seq: int
    event_count: int
    global_records: list[Preference]
    projects: dict[str, list[Preference]]
    refinements: list[Refinement]
    used_ids: list[str]
    extra: Any = None


_state_encoder = msgspec.json.Encoder()
_state_decoder = msgspec.json.Decoder(_StateDoc)


def derive(events: Iterable[Event], version: str) -> DerivedState:
    """Fold ``events`` (in ``seq`` order) into a fresh state of ``version``. Pure."""
    state = new_state(version)
    for ev in events:
        state.apply(ev)
    return state
