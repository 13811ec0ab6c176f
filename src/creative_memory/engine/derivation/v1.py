"""Derivation version ``"1"``: the prototype's fold, exactly (docs/engine.md, "Version 1").

Each signal folds into the first record of its (type, pattern, polarity) in its bucket:
accumulation by the signal's weight, the reversal ladder on a contradiction (noise guard,
×0.80, ×0.60 and a rung down, then under review with a shadow record of the other
polarity), shadow promotion, reactivation of an archived record; decay passes weaken and
archive records by their dates. Pure Python, no I/O, no clock: identical on every machine.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable, Iterator, Sequence

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
from creative_memory.engine.derivation.base import (
    OTHER_POLARITY,
    Bucket,
    DerivedState,
    clamp,
    confidence_of,
    drop_rung,
    new_record,
)
from creative_memory.engine.errors import ValidationError
from creative_memory.engine.events import Event, LegacyRecordEvent, SignalEvent, event_bucket
from creative_memory.engine.ids import scope_of
from creative_memory.engine.models import DecayResult, Preference
from creative_memory.engine.timeutil import MS_PER_DAY, add_days_ts, format_ts, ts_to_ms

#: ``abs(w) / NORMALIZER`` per signal type — the same float the formula gives at each use.
_INCREMENT = {k: abs(w) / NORMALIZER for k, w in SIGNAL_WEIGHTS.items()}


@functools.lru_cache(maxsize=1 << 14)
def _ms_or_none(text: str | None) -> int | None:
    """Epoch ms of a record's timestamp, ``None`` when it has none or an invalid one (pure:
    memoised, as decay passes read the same dates of the same records again)."""
    if not text:
        return None
    try:
        return ts_to_ms(text)
    except ValidationError:
        return None


class DerivedStateV1(DerivedState):
    """Version 1 state: records folded one signal at a time by the prototype's rules."""

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
        return new_record(
            id=self.new_id("pref_", ev.seq),
            preference_type=ev.preference_type,
            pattern=ev.pattern,
            polarity=polarity,
            strength=strength,
            sources=[ev.signal_type],
            accept_count=1 if polarity == "positive" else 0,
            reject_count=1 if polarity == "negative" else 0,
            explicit_tags=[ev.tag_text] if ev.tag_text else [],
            last_seen=ev.at,
            decay_at=decay_at,
            scope=scope,
            shadow_of=shadow_of,
            derivation_version=self.version,
            source_event_count=1,
            last_derived_event_seq=ev.seq,
        )

    def fold(self, events: Iterable[Event]) -> None:
        """:meth:`apply` for each event, with the commonest case inlined (:meth:`_fold`)."""
        pending: dict[int, Preference] = {}  # id(record) → record whose decay_at holds `at`
        try:
            self._fold(events, pending, {})
        except BaseException:
            with contextlib.suppress(Exception):  # the fold's own error is the one raised
                self._settle(pending)
            raise
        self._settle(pending)

    @contextlib.contextmanager
    def folding(self) -> Iterator[Callable[[Sequence[Event]], None]]:
        """One :meth:`fold` of every chunk: the records found eligible, and the ``decay_at``
        still to set, are kept from chunk to chunk (nothing else touches the state in
        between) and settled at the end."""
        pending: dict[int, Preference] = {}
        eligible: dict[tuple[str | None, str, str, str], Preference] = {}

        def fold_chunk(events: Sequence[Event]) -> None:
            self._fold(events, pending, eligible)

        try:
            yield fold_chunk
        except BaseException:
            with contextlib.suppress(Exception):  # the fold's own error is the one raised
                self._settle(pending)
            raise
        self._settle(pending)

    def _fold(
        self,
        events: Iterable[Event],
        pending: dict[int, Preference],
        eligible: dict[tuple[str | None, str, str, str], Preference],
    ) -> None:
        """:meth:`apply` for each event, with the commonest case inlined: a signal that
        accumulates into a stable, unshadowed record of its key in an existing bucket with no
        stable record of the other polarity. Its ``decay_at`` (which nothing reads before
        the next event of another case) is set once per record at the end, or before such
        an event: the record holds the event's time until then.

        Which record a key accumulates into, and whether it may, changes only when
        :meth:`apply` runs (the inlined case changes neither statuses nor the first-match
        index): the records found eligible are kept by (bucket, type, pattern, polarity),
        and are in ``pending`` from their first inlined signal on. A signal that
        :meth:`apply` folds changes only the records of its (type, pattern) in its bucket
        — a new record, a reactivation, a reversal and its shadow — unless it promotes a
        shadow, which archives the record it names by id, wherever that is; any other
        event may change any record. So a signal drops the kept records of its (type,
        pattern) in its bucket (all of them when its record is a shadow), any other event
        all of them."""
        glob = self.global_bucket
        projects = self.projects
        increments = _INCREMENT
        other = OTHER_POLARITY
        # the counters apply() keeps, held here while signals are inlined (``ahead``: these
        # are newer than the state's own, written back before anything else reads them)
        last_seq, count, ahead = self.last_seq, self.event_count, False
        try:
            for ev in events:
                if type(ev) is SignalEvent and (ev.seq > last_seq or not count):
                    pid = ev.project_id if ev.scope == "project" else None  # event_bucket
                    ptype, pattern, polarity = ev.preference_type, ev.pattern, ev.polarity
                    at_key = (pid, ptype, pattern, polarity)
                    same = eligible.get(at_key)
                    if same is None:
                        bucket = glob if pid is None else projects.get(pid)
                        found = None
                        if bucket is not None:  # (else a new bucket: apply() below)
                            first = bucket.first
                            found = first.get((ptype, pattern, polarity))
                            if (
                                found is not None
                                and found.polarity_status != "archived"
                                and not found.shadow_of
                            ):
                                opp = first.get((ptype, pattern, other[polarity]))
                                if opp is None or opp.polarity_status != "stable":
                                    same = eligible[at_key] = found
                                    pending[id(same)] = same
                            if same is None and pending:  # the records it may give a decay_at
                                self._settle_written(pending, bucket, ev)
                        if same is None:  # what apply() below may change
                            if found is not None and found.shadow_of:
                                eligible.clear()  # a promotion archives a record by its id
                            else:  # the records of this (type, pattern) in this bucket
                                eligible.pop((pid, ptype, pattern, "positive"), None)
                                eligible.pop((pid, ptype, pattern, "negative"), None)
                    if same is not None:
                        last_seq, count, ahead = ev.seq, count + 1, True
                        kind = ev.signal_type
                        strength = same.signal_strength + increments[kind]
                        if strength < 0.0:  # clamp(strength, 0.0, 1.0)
                            strength = 0.0
                        if strength > 1.0:
                            strength = 1.0
                        same.signal_strength = strength
                        same.confidence = (
                            "low" if strength < 0.35 else "medium" if strength <= 0.65 else "high"
                        )
                        if kind not in same.sources:
                            same.sources.append(kind)
                        tag = ev.tag_text
                        if tag and tag not in same.explicit_tags:
                            same.explicit_tags.append(tag)
                        if polarity == "positive":
                            same.accept_count += 1
                        else:
                            same.reject_count += 1
                        same.last_seen = same.decay_at = ev.at  # add_days_ts(at, DECAY_DAYS)
                        same.source_event_count += 1
                        continue
                else:
                    if pending:  # a decay pass reads every decay_at
                        self._settle(pending)
                    eligible.clear()
                if ahead:
                    self.last_seq, self.event_count, ahead = last_seq, count, False
                self.apply(ev)
                last_seq, count = self.last_seq, self.event_count
        finally:  # (the caller settles what is pending)
            if ahead:
                self.last_seq, self.event_count = last_seq, count

    @staticmethod
    def _settle_written(pending: dict[int, Preference], bucket: Bucket, ev: SignalEvent) -> None:
        """Settle the record of ``pending`` whose ``decay_at`` :meth:`fold_signal` may set
        for ``ev`` — the record of its key and polarity; the other one it may set, a shadow
        of the other polarity's record, is never pending (a record that shadows another is
        folded by :meth:`fold_signal` itself), and nothing else of the fold reads one."""
        same = bucket.first.get((ev.preference_type, ev.pattern, ev.polarity))
        if same is not None and pending.pop(id(same), None) is not None:
            same.decay_at = add_days_ts(same.decay_at, DECAY_DAYS)

    @staticmethod
    def _settle(pending: dict[int, Preference]) -> None:
        """Give each record of ``pending`` the ``decay_at`` of the event time it holds."""
        for rec in pending.values():
            rec.decay_at = add_days_ts(rec.decay_at, DECAY_DAYS)
        pending.clear()

    def fold_signal(self, ev: SignalEvent) -> Preference:
        """Accumulate, reverse, reactivate or promote, as the prototype does."""
        w = SIGNAL_WEIGHTS[ev.signal_type]
        inc = _INCREMENT[ev.signal_type]
        bucket_id = event_bucket(ev)
        bucket = self.bucket_for(bucket_id)
        t = ev.at
        decay_at = add_days_ts(t, DECAY_DAYS)
        first = bucket.first
        same = first.get((ev.preference_type, ev.pattern, ev.polarity))
        if same is not None and same.polarity_status == "archived":  # reactivation first
            same.polarity_status = "stable"
            same.reversal_signals = 0
            same.reversal_first_seen = None
            same.source_event_count += 1
        opp = first.get((ev.preference_type, ev.pattern, OTHER_POLARITY[ev.polarity]))
        if opp is not None and opp.polarity_status == "stable":  # contradiction wins
            self._reversal(bucket, opp, ev, w, decay_at)
            return opp
        if same is None:
            scope = scope_of(bucket_id) if bucket_id else "global"
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
        self, bucket: Bucket, rec: Preference, ev: SignalEvent, w: float, decay_at: str
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
            sp = OTHER_POLARITY[rec.polarity]
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

    def decay(self, now_ms: int, *, apply: bool) -> DecayResult:
        """One decay pass at ``now_ms`` (docs/engine.md, "Decay"). With ``apply=False``
        only counts."""
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

    def fold_legacy(self, ev: LegacyRecordEvent) -> None:
        """Add the imported record as it was (its id kept)."""
        r = ev.record
        rid = str(r["id"])
        self.used_ids.add(rid)
        rec = new_record(
            id=rid,
            preference_type=r["preference_type"],
            pattern=r["pattern"],
            polarity=r["polarity"],
            strength=float(r["signal_strength"]),
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
        self.bucket_for(ev.bucket).add(rec)
