"""What every derivation version shares (docs/engine.md, "Derivation").

A derivation version is a state class whose :meth:`DerivedState.apply` folds one event.
This module holds the pieces every version uses — the record buckets (:class:`Bucket`), the
deterministic ids (:func:`hash_id`), the confidence ladder (:func:`confidence_of`,
:func:`drop_rung`), the one constructor of a :class:`Preference` (:func:`new_record`) —
and the abstract :class:`DerivedState`: the event loop, the queries, the refinement log,
persistence for the derivation cache. A version implements the fold hooks
(:meth:`DerivedState.fold_signal`, :meth:`~DerivedState.fold_legacy`,
:meth:`~DerivedState.decay`, optionally :meth:`~DerivedState.fold_comparison`).

The versions themselves are listed in :mod:`.registry`. No I/O, no clock.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, ClassVar, TypeVar

import msgspec

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
from creative_memory.engine.timeutil import ts_to_ms

_B36 = "abcdefghijklmnopqrstuvwxyz0123456789"

Key = tuple[str, str, str]  # (preference_type, pattern, polarity)
T = TypeVar("T")

#: How many keys :meth:`DerivedState.memoised` keeps at once (a few contexts per user).
_MEMO_KEYS = 16
_MISSING: Any = object()

#: The opposite polarity.
OTHER_POLARITY = {"positive": "negative", "negative": "positive"}


def clamp(v: float, lo: float, hi: float) -> float:
    """``v`` limited to ``[lo, hi]``."""
    return min(max(v, lo), hi)


def confidence_of(s: float) -> str:
    """The confidence label of strength ``s``: low below 0.35, medium up to 0.65, else high."""
    if s < 0.35:
        return "low"
    if s <= 0.65:
        return "medium"
    return "high"


def drop_rung(c: str) -> str:
    """One confidence rung down (high → medium → low; low stays low)."""
    return {"high": "medium", "medium": "low"}.get(c, "low")


def hash_id(prefix: str, seed: str) -> str:
    """``prefix`` + 6 base-36 characters of SHA-256(``seed``): a reproducible id."""
    n = int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big")
    chars = []
    for _ in range(6):
        n, r = divmod(n, 36)
        chars.append(_B36[r])
    return prefix + "".join(chars)


def new_record(
    *,
    id: str,
    preference_type: str,
    pattern: str,
    polarity: str,
    strength: float,
    sources: list[str],
    last_seen: str,
    decay_at: str,
    scope: str,
    derivation_version: str,
    source_event_count: int,
    last_derived_event_seq: int,
    confidence: str | None = None,
    accept_count: int = 0,
    reject_count: int = 0,
    explicit_tags: list[str] | None = None,
    reversal_signals: int = 0,
    reversal_first_seen: str | None = None,
    polarity_status: str = "stable",
    shadow_of: str | None = None,
) -> Preference:
    """The one place a :class:`Preference` is built: ``confidence`` defaults to the label
    of ``strength``; a record is stable, unreversed and nobody's shadow unless told."""
    return Preference(
        id=id,
        preference_type=preference_type,
        pattern=pattern,
        polarity=polarity,
        signal_strength=strength,
        confidence=confidence_of(strength) if confidence is None else confidence,
        sources=sources,
        accept_count=accept_count,
        reject_count=reject_count,
        explicit_tags=[] if explicit_tags is None else explicit_tags,
        last_seen=last_seen,
        decay_at=decay_at,
        scope=scope,
        reversal_signals=reversal_signals,
        reversal_first_seen=reversal_first_seen,
        polarity_status=polarity_status,
        shadow_of=shadow_of,
        derivation_version=derivation_version,
        source_event_count=source_event_count,
        last_derived_event_seq=last_derived_event_seq,
    )


class Bucket:
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
        """Append ``rec`` and index it (the first record of a key or an id wins)."""
        self.records.append(rec)
        self.first.setdefault((rec.preference_type, rec.pattern, rec.polarity), rec)
        self.by_id.setdefault(rec.id, rec)
        if rec.shadow_of:
            self.shadows.setdefault((rec.shadow_of, rec.polarity), []).append(rec)

    def replace(self, records: list[Preference]) -> None:
        """Make ``records`` the bucket's list (in place: callers may hold the list) and
        rebuild the first-match indexes."""
        self.records[:] = records
        self.first.clear()
        self.by_id.clear()
        for r in records:
            self.first.setdefault((r.preference_type, r.pattern, r.polarity), r)
            self.by_id.setdefault(r.id, r)

    def patch(
        self, records: list[Preference], replaced: list[Preference], made: list[Preference]
    ) -> None:
        """:meth:`replace` for a list that differs from the bucket's own only in that the
        records ``replaced`` are gone and the records ``made`` are new (the other records
        the same objects, their keys and ids unchanged): when every key and every id of
        both lists occurs once, the indexes are updated for those records only — the same
        indexes :meth:`replace` builds; otherwise it is :meth:`replace`."""
        first, by_id = self.first, self.by_id
        n = len(self.records)
        if len(first) != n or len(by_id) != n:  # a key or an id occurs twice
            self.replace(records)
            return
        for rec in replaced:
            key = (rec.preference_type, rec.pattern, rec.polarity)
            if first.get(key) is not rec or by_id.get(rec.id) is not rec:
                self.replace(records)
                return
            del first[key]
            del by_id[rec.id]
        for rec in made:
            key = (rec.preference_type, rec.pattern, rec.polarity)
            if key in first or rec.id in by_id:
                self.replace(records)
                return
            first[key] = rec
            by_id[rec.id] = rec
        self.records[:] = records
        if len(first) != len(records) or len(by_id) != len(records):
            self.replace(records)

    def live(self, preference_type: str, pattern: str, polarity: str) -> Preference | None:
        """The first record of (type, pattern) with ``polarity``, else with the other one."""
        for p in (polarity, OTHER_POLARITY[polarity]):
            rec = self.first.get((preference_type, pattern, p))
            if rec is not None:
                return rec
        return None

    def shadow(self, of: str, polarity: str) -> Preference | None:
        """The first record whose ``shadow_of`` is ``of`` with ``polarity``, or None."""
        for rec in self.shadows.get((of, polarity), ()):
            if rec.shadow_of == of:
                return rec
        return None


class DerivedState:
    """The derived records of one user after folding a prefix of the log (abstract: each
    derivation version is a subclass, listed in :mod:`.registry`)."""

    #: Whether a record is meaningful right after each event of a batch (version 1 folds
    #: record by record). A version that fits all evidence jointly sets it False: the store
    #: then reports what a batch touched as it stands after the whole batch, one fit.
    records_per_event: ClassVar[bool] = True

    def __init__(self, version: str) -> None:
        self.version = version
        self.global_bucket = Bucket()
        self.projects: dict[str, Bucket] = {}
        self.refinements: list[Refinement] = []
        self.last_seq = 0
        self.event_count = 0
        #: every record and refinement id handed out so far (ids are never reused)
        self.used_ids: set[str] = set()
        # (last_seq, event_count) → what :meth:`memoised` computed since then
        self._memo: tuple[tuple[int, int], dict[Any, Any]] = ((-1, -1), {})

    # -- queries -----------------------------------------------------------------------
    @property
    def global_records(self) -> list[Preference]:
        """The global bucket's records."""
        return self.global_bucket.records

    def project_records(self, project_id: str) -> list[Preference] | None:
        """The records of project ``project_id`` (``None``: the project has no bucket)."""
        b = self.projects.get(project_id)
        return None if b is None else b.records

    def buckets(self) -> Iterable[Bucket]:
        """The global bucket, then the project buckets in order of first evidence."""
        yield self.global_bucket
        yield from self.projects.values()

    def all_records(self) -> list[Preference]:
        """Every record of every bucket, in bucket order."""
        out: list[Preference] = []
        for b in self.buckets():
            out.extend(b.records)
        return out

    def has_records(self) -> bool:
        """Whether any bucket holds a record."""
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

    def materialize(self) -> None:
        """Bring derived records up to date before a read (a no-op for a version that
        folds records directly; versions that fit lazily recompute here)."""

    def memoised(self, key: Any, compute: Callable[[], T]) -> T:
        """``compute()``, computed once per ``key`` while this state folds no further event
        (for pure functions of the materialised records, such as a retrieval: the records
        change only when an event is folded). The caller copies what it hands out. Safe for
        concurrent readers of a state nobody folds into (each step replaces, never clears,
        the table: at worst two of them compute the same value)."""
        self.materialize()
        at = (self.last_seq, self.event_count)
        memo = self._memo
        if memo[0] != at or len(memo[1]) >= _MEMO_KEYS:
            memo = self._memo = (at, {})
        value: T = memo[1].get(key, _MISSING)
        if value is _MISSING:
            value = memo[1][key] = compute()
        return value

    def decay_preview(self, now_ms: int) -> DecayResult:
        """What a decay pass at ``now_ms`` would change, without changing anything."""
        return self.decay(now_ms, apply=False)

    # -- persistence (for the derivation cache) ----------------------------------------------
    def dump(self) -> bytes:
        """Serialise the whole state (records, refinement log, counters) to JSON bytes."""
        doc = StateDoc(
            version=self.version,
            last_seq=self.last_seq,
            event_count=self.event_count,
            global_records=self.global_bucket.records,
            projects={pid: b.records for pid, b in self.projects.items()},
            refinements=self.refinements,
            used_ids=sorted(self.used_ids),
            extra=self.dump_extra(),
        )
        return _state_encoder.encode(doc)

    @classmethod
    def load(cls, data: bytes) -> DerivedState:
        """Inverse of :meth:`dump`: a state of the version ``data`` names (its class from
        :mod:`.registry`, which imports every version module — hence looked up here, at
        call time, not at import time)."""
        from creative_memory.engine.derivation.registry import new_state

        doc = _state_decoder.decode(data)
        state = new_state(doc.version)
        state.restore(doc)
        return state

    def restore(self, doc: StateDoc) -> None:
        """Fill this fresh state from a decoded :class:`StateDoc`."""
        self.last_seq = doc.last_seq
        self.event_count = doc.event_count
        for rec in doc.global_records:
            self.global_bucket.add(rec)
        for pid, recs in doc.projects.items():
            b = self.bucket_for(pid)
            for rec in recs:
                b.add(rec)
        self.refinements = doc.refinements
        self.used_ids = set(doc.used_ids)
        self.load_extra(doc.extra)

    def dump_extra(self) -> Any:
        """Version-specific state beyond records (JSON-ready); none by default."""
        return None

    def load_extra(self, extra: Any) -> None:
        """Restore what :meth:`dump_extra` produced."""

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
            return self.fold_signal(event)
        if isinstance(event, DecayPassEvent):
            self.decay(ts_to_ms(event.at), apply=True)
        elif isinstance(event, RefinementEvent):
            return self.fold_refinement(event)
        elif isinstance(event, LegacyRecordEvent):
            self.fold_legacy(event)
        elif isinstance(event, ProjectAnchorEvent):
            self.fold_anchor(event)
        elif isinstance(event, ComparisonEvent):
            return self.fold_comparison(event)
        return None

    def fold(self, events: Iterable[Event]) -> None:
        """Fold ``events`` when nothing needs what each one touched (a version may do it
        faster than one :meth:`apply` per event; the state is the same)."""
        for ev in events:
            self.apply(ev)

    @contextlib.contextmanager
    def folding(self) -> Iterator[Callable[[Sequence[Event]], None]]:
        """A :meth:`fold` of events that arrive in chunks (a derivation from scratch reads
        the log a chunk at a time): the function given folds each chunk, and when the block
        ends the state is what one :meth:`fold` of all of them makes. In between nothing
        may read or change the state (a version may keep work across the chunks and finish
        it at the end). By default each chunk is one :meth:`fold`."""
        yield self.fold

    def fold_signal(self, ev: SignalEvent) -> Preference:
        """Fold a signal; returns the record it created or updated (version-specific)."""
        raise NotImplementedError

    def fold_legacy(self, ev: LegacyRecordEvent) -> None:
        """Fold a record imported from a prototype file (version-specific)."""
        raise NotImplementedError

    def decay(self, now_ms: int, *, apply: bool) -> DecayResult:
        """One decay pass at ``now_ms``; with ``apply=False`` it only counts
        (version-specific)."""
        raise NotImplementedError

    def fold_comparison(self, ev: ComparisonEvent) -> Preference | None:
        """Fold a pairwise comparison; ignored by default (version 1 has no pairwise
        evidence)."""
        return None

    def fold_refinement(self, ev: RefinementEvent) -> Refinement:
        """Append a refinement-log entry (the same in every version)."""
        entry = Refinement(
            id=ev.ref_id or self.new_id("ref_", ev.seq),
            artifact_id=ev.artifact_id,
            project_id=ev.project_id,
            timestamp=ev.at,
            diff=ev.diff,
        )
        self.refinements.append(entry)
        return entry

    def fold_anchor(self, ev: ProjectAnchorEvent) -> None:
        """Give the anchored project its bucket (its place in bucket order)."""
        self.bucket_for(ev.project_id)

    def new_id(self, prefix: str, seq: int) -> str:
        """A fresh id for what event ``seq`` creates (:func:`hash_id`, re-seeded until it
        is not already used)."""
        seed = f"{prefix}{seq}"
        rid = hash_id(prefix, seed)
        n = 0
        while rid in self.used_ids:
            n += 1
            rid = hash_id(prefix, f"{seed}#{n}")
        self.used_ids.add(rid)
        return rid

    def bucket_for(self, project_id: str | None) -> Bucket:
        """The bucket of ``project_id`` (``None`` = global), created empty if new."""
        if project_id is None:
            return self.global_bucket
        b = self.projects.get(project_id)
        if b is None:
            b = self.projects[project_id] = Bucket()
        return b


class StateDoc(msgspec.Struct, kw_only=True):
    """The serialised form of a :class:`DerivedState` (a derivation-cache entry)."""

    version: str
    last_seq: int
    event_count: int
    global_records: list[Preference]
    projects: dict[str, list[Preference]]
    refinements: list[Refinement]
    used_ids: list[str]
    extra: Any = None


_state_encoder = msgspec.json.Encoder()
_state_decoder = msgspec.json.Decoder(StateDoc)
