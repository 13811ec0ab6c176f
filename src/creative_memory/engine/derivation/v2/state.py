"""The version-2 state: per-bucket models, records materialised lazily from the fit
(docs/engine.md, "Version 2").

:class:`DerivedStateV2` is a :class:`~creative_memory.engine.derivation.base.DerivedState`
(the buckets, ids, refinement log and persistence every version shares) whose fold hooks
turn events into rows of the bucket's :class:`~.model.Model` instead of folding records;
the records are rebuilt from the fit on the first read after new evidence.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, ClassVar, Final

from creative_memory.engine.derivation.base import Bucket, DerivedState, new_record
from creative_memory.engine.derivation.v2.bulk import fold_inline
from creative_memory.engine.derivation.v2.features import Feature, FeatureKey, content_id
from creative_memory.engine.derivation.v2.model import Model
from creative_memory.engine.derivation.v2.table import V2_TABLE, V2Table
from creative_memory.engine.events import (
    ComparisonEvent,
    Event,
    LegacyRecordEvent,
    SignalEvent,
    event_bucket,
)
from creative_memory.engine.ids import bucket_of_scope, scope_of
from creative_memory.engine.models import DecayResult, Preference, Refinement
from creative_memory.engine.timeutil import MS_PER_DAY, format_ts, ts_to_ms

#: What a signal's :meth:`DerivedStateV2.apply` returns inside ``fold()`` (never handed out).
QUIET: Final = new_record(
    id="",
    preference_type="",
    pattern="",
    polarity="positive",
    strength=0.0,
    sources=[],
    last_seen="",
    decay_at="",
    scope="global",
    derivation_version="",
    source_event_count=0,
    last_derived_event_seq=0,
)

#: Sources of a legacy record that count as reinforcing support.
_STRONG_SOURCES: Final = frozenset({"explicit_tag", "manual_refinement", "revert_after_edit"})


class DerivedStateV2(DerivedState):
    """Version 2 state: per-bucket models; records are materialised lazily from the fit."""

    records_per_event = False
    #: The weighting table in force; a later version may run with another one.
    table: ClassVar[V2Table] = V2_TABLE
    #: The bucket model (statistics and fit); a later version may fit differently.
    model_class: ClassVar[type[Model]] = Model

    def __init__(self, version: str) -> None:
        super().__init__(version)
        self.models: dict[str | None, Model] = {}
        self._row: tuple[tuple[Any, ...], str | None, list[tuple[int, int]]] | None = None
        self._stale = False
        self._quiet = False  # inside fold(): apply returns no records
        # what the bulk fold looked up for its inlined signals, kept from one fold to the
        # next (a cold derivation folds a log a chunk at a time) until the records are
        # materialised (:func:`~.bulk.fold_inline`)
        self._inline: dict[Any, Any] = {}

    # -- lazy materialisation: every read path refreshes the records first ----------------
    def materialize(self) -> None:
        """Bring the record lists up to date with the evidence (no-op when fresh)."""
        if not self._stale:
            return
        self._stale = False
        self._inline.clear()
        for bucket_id, model in self.models.items():
            self.bucket_for(bucket_id).replace(self.records_for(bucket_id, model))

    @property
    def global_records(self) -> list[Preference]:
        """The global bucket's records, fitted."""
        self.materialize()
        return self.global_bucket.records

    def project_records(self, project_id: str) -> list[Preference] | None:
        """A project's records, fitted."""
        self.materialize()
        return super().project_records(project_id)

    def buckets(self) -> Iterable[Bucket]:
        """Every bucket, fitted."""
        self.materialize()
        return super().buckets()

    def export_record(self, rec: Preference) -> Preference:
        """A copy of the *current* record for ``rec``'s feature (its polarity may have
        changed since ``rec`` was returned by :meth:`apply`)."""
        self.materialize()
        bucket = self.bucket_for(bucket_of_scope(rec.scope))
        live = bucket.live(rec.preference_type, rec.pattern, rec.polarity)
        return super().export_record(rec if live is None else live)

    def dump(self) -> bytes:
        """The state, fitted, as JSON bytes."""
        self.materialize()
        return super().dump()

    # -- persistence hooks ---------------------------------------------------------------
    def dump_extra(self) -> Any:
        """The models and the open signal row."""
        return {
            "models": [[b, m.dump()] for b, m in self.models.items()],
            "row": None
            if self._row is None
            else [list(self._row[0]), self._row[1], [list(c) for c in self._row[2]]],
        }

    def load_extra(self, extra: Any) -> None:
        """Restore the models and the open row (records are refitted on the next read)."""
        self._inline.clear()  # (it holds objects of the models replaced here)
        if not extra:
            return
        self.models = {b: self.model_class.load(m, self.table) for b, m in extra["models"]}
        row = extra.get("row")
        if row is not None:
            self._row = (tuple(row[0]), row[1], [(int(c), int(x)) for c, x in row[2]])
        self._stale = True

    # -- the fold ------------------------------------------------------------------------
    def fold(self, events: Iterable[Event]) -> None:
        """Fold without building the records :meth:`apply` returns for signals; the
        commonest signal is folded inline (:func:`~.bulk.fold_inline`: the same
        statistics, in the same order, as :meth:`fold_signal`)."""
        self._quiet = True
        try:
            if (
                type(self).fold_signal is DerivedStateV2.fold_signal
                and type(self).apply is DerivedStateV2.apply
                and self.model_class.add_row is Model.add_row
            ):
                fold_inline(self, events)
            else:
                for ev in events:
                    self.apply(ev)
        finally:
            self._quiet = False

    def apply(self, event: Event) -> Preference | Refinement | None:
        """Fold one event (any event but a signal closes the open signal row)."""
        if not isinstance(event, SignalEvent):
            self._row = None  # a signal row never spans another event
        return super().apply(event)

    def model(self, bucket_id: str | None) -> Model:
        """The model of a bucket, created (with its bucket) on first evidence."""
        m = self.models.get(bucket_id)
        if m is None:
            m = self.models[bucket_id] = self.model_class(self.table)
            self.bucket_for(bucket_id)  # keep bucket order = first evidence
        return m

    def fold_signal(self, ev: SignalEvent) -> Preference:
        """One row of the signal's kind, or one more column of the open row when the
        signal lists another feature of the same artifact verdict."""
        kind = ev.signal_type
        rule = self.table.kinds[kind]
        bucket_id = event_bucket(ev)
        model = self.model(bucket_id)
        key = (ev.preference_type, ev.pattern)
        f = model.feature(key)
        y = 1 if ev.polarity == "positive" else -1
        row_key = (
            ev.artifact_id,
            ev.session_id,
            ev.at,
            kind,
            ev.polarity,
            ev.scope,
            ev.tag_text,
        )
        open_row = self._row
        if (
            ev.artifact_id is not None
            and open_row is not None
            and open_row[0] == row_key
            and open_row[1] == bucket_id
            and all(c != f.col for c, _ in open_row[2])
        ):
            row = open_row[2]
            if rule.outcome and len(row) == 1:
                # a verdict on an artifact with several listed features: part of it is the
                # user's general tendency (the intercept), identified across artifacts
                model.extend_row(kind, row, 0, y)
            model.extend_row(kind, row, f.col, y)
        else:
            # a verdict on an artifact with one listed feature is about that feature (as in
            # version 1): the intercept is not identifiable from such rows
            cols = [(f.col, 1)]
            model.add_row(kind, cols, y)
            self._row = (row_key, bucket_id, cols)
        f.count(kind, y > 0, supports=rule.reinforcing)
        if ev.tag_text:
            f.tags.add(ev.tag_text)
        f.touch(ev.at)
        self._stale = True
        if self._quiet:
            return QUIET
        return self._stub(bucket_id, key, ev)

    def fold_comparison(self, ev: ComparisonEvent) -> Preference | None:
        """One row ``x = 1[chosen] − 1[rejected]`` (outcome +1) over the kept dimensions."""
        bucket_id = event_bucket(ev)
        dims = ev.dimensions

        def keep(ptype: str) -> bool:
            return dims is None or any(ptype.startswith(d) for d in dims)

        chose = {(x.preference_type, x.pattern) for x in ev.chose.features}
        over = {(x.preference_type, x.pattern) for x in ev.over.features}
        plus = sorted(k for k in chose - over if keep(k[0]))
        minus = sorted(k for k in over - chose if keep(k[0]))
        if not plus and not minus:
            return None
        # A feature listed on one side only is a full contrast (x = ±1) when the other side
        # lists a different pattern of the same type; when the other side says nothing about
        # that type the feature may be present there too, just not listed (extractors list
        # the salient features only), so it counts as half a contrast (x = ±½).
        chose_types = {k[0] for k in chose}
        over_types = {k[0] for k in over}
        model = self.model(bucket_id)
        kind = "pairwise_comparison"
        cols: list[tuple[int, int]] = []
        for keys, sign, other in ((plus, 1, over_types), (minus, -1, chose_types)):
            for key in keys:
                half = 2 if key[0] in other else self.table.unaligned_contrast_halves
                if half == 0:
                    continue
                f = model.feature(key)
                cols.append((f.col, sign * half))
                f.count(kind, sign > 0, supports=True)
                f.touch(ev.at)
        if not cols:
            return None
        cols.sort()
        model.add_row(kind, cols, 1, denom=2)
        self._stale = True
        return None

    def fold_legacy(self, ev: LegacyRecordEvent) -> None:
        """An imported record as ``round(strength × legacy_units)`` unit rows."""
        r = ev.record
        model = self.model(ev.bucket)
        key = (str(r["preference_type"]), str(r["pattern"]))
        f = model.feature(key)
        units = round(float(r.get("signal_strength") or 0.0) * self.table.legacy_units)
        y = 1 if r.get("polarity") == "positive" else -1
        kind = "legacy_record"
        # one unit-weight row per unit keeps the statistics integral
        for _ in range(max(units, 0) // self.table.kinds[kind].weight):
            model.add_row(kind, [(f.col, 1)], y)
        f.count(kind, y > 0, supports=bool(_STRONG_SOURCES & set(r.get("sources") or [])))
        for t in r.get("explicit_tags") or []:
            f.tags.add(str(t))
        last_seen = str(r.get("last_seen") or ev.at)
        try:
            f.touch(format_ts(ts_to_ms(last_seen)))
        except ValueError:
            f.touch(ev.at)
        self.used_ids.add(str(r.get("id")))
        self._row = None
        self._stale = True

    # -- decay ---------------------------------------------------------------------------
    def decay(self, now_ms: int, *, apply: bool) -> DecayResult:
        """Per feature: one decay step when due, archived after ``archive_days``."""
        decayed = archived = 0
        archive_ms = self.table.archive_days * MS_PER_DAY
        new_decay_at = now_ms + self.table.decay_days * MS_PER_DAY
        for model in self.models.values():
            for f in model.features.values():
                if f.archived:
                    continue
                if now_ms - f.last_ms >= archive_ms:
                    archived += 1
                    if apply:
                        f.archived = True
                    continue
                if now_ms - f.decay_at_ms >= 0:
                    decayed += 1
                    if apply:
                        f.decay_steps += 1
                        f.decay_at_ms = new_decay_at
        if apply and (decayed or archived):
            self._stale = True
        return DecayResult(decayed=decayed, archived=archived)

    # -- records -------------------------------------------------------------------------
    def _stub(self, bucket_id: str | None, key: FeatureKey, ev: SignalEvent) -> Preference:
        """What :meth:`apply` returns for a signal without fitting: the feature's identity.
        :meth:`export_record` turns it into the current record (fitting lazily)."""
        return new_record(
            id=content_id(bucket_id, key, ev.polarity),
            preference_type=key[0],
            pattern=key[1],
            polarity=ev.polarity,
            strength=0.0,
            confidence="low",
            sources=[ev.signal_type],
            last_seen=ev.at,
            decay_at=ev.at,
            scope=scope_of(bucket_id),
            derivation_version=self.version,
            source_event_count=0,
            last_derived_event_seq=ev.seq,
        )

    def records_for(self, bucket_id: str | None, model: Model) -> list[Preference]:
        """The bucket's records from its fit, one per feature in canonical order."""
        if not model.features:
            return []
        fit = model.solve()
        table = self.table
        scope = scope_of(bucket_id)
        out: list[Preference] = []
        for key in sorted(model.features):
            f = model.features[key]
            beta = fit.beta[f.col]
            if beta > 0:
                polarity = "positive"
            elif beta < 0:
                polarity = "negative"
            else:
                polarity = "positive" if f.support[0] >= f.support[1] else "negative"
            sd = math.sqrt(max(fit.var[f.col], 0.0))
            z = table.z(polarity)
            strength = min(max((abs(beta) - z * sd) / table.full_effect, 0.0), 1.0)
            sign = 1 if polarity == "positive" else -1
            reinforced = f.support[0 if sign > 0 else 1] > 0
            if not reinforced:
                strength = min(strength, table.provisional_cap)
            strength *= table.decay_factor**f.decay_steps
            cu, cr = fit.unary[f.col], fit.reinforcing[f.col]
            contested = cu * cr < 0 and min(abs(cu), abs(cr)) >= table.contest_min
            status = "archived" if f.archived else ("under_review" if contested else "stable")
            out.append(self.record(bucket_id, key, f, polarity, strength, status, scope))
        return out

    def record(
        self,
        bucket_id: str | None,
        key: FeatureKey,
        f: Feature,
        polarity: str,
        strength: float,
        status: str,
        scope: str | None = None,
    ) -> Preference:
        """The record of feature ``f`` with its fitted polarity, strength and status."""
        sources, pos, neg, tags, decay_at = f.summary()
        return new_record(
            id=content_id(bucket_id, key, polarity),
            preference_type=key[0],
            pattern=key[1],
            polarity=polarity,
            strength=strength,
            sources=sources,
            accept_count=pos,
            reject_count=neg,
            explicit_tags=tags,
            last_seen=f.last_seen,
            decay_at=decay_at,
            scope=scope or scope_of(bucket_id),
            polarity_status=status,
            derivation_version=self.version,
            source_event_count=f.events,
            last_derived_event_seq=self.last_seq,
        )

    # -- explanation ---------------------------------------------------------------------
    def evidence_for(self, record: Preference) -> dict[str, Any]:
        """Which evidence kinds contributed to ``record``, how much, and its estimate.

        ``kinds[k]``, for every kind with evidence in the bucket: events for / against the
        feature (for a comparison: the feature was on the chosen / the rejected side; 0 / 0
        for a kind that never named it), the kind's table weight and its exact
        ``contribution`` to ``estimate`` (contributions sum to the estimate).
        """
        model = self.models.get(bucket_of_scope(record.scope))
        key = (record.preference_type, record.pattern)
        if model is None or key not in model.features:
            raise KeyError(f"no evidence for {record.preference_type}/{record.pattern}")
        f = model.features[key]
        fit = model.solve()
        contrib = model.kind_contributions(f.col)
        beta = fit.beta[f.col]
        sd = math.sqrt(max(fit.var[f.col], 0.0))
        sign = 1 if record.polarity == "positive" else -1
        # every kind with evidence in the bucket: a kind that never named this feature still
        # moves its estimate through the intercept, the type level and correlated features
        kinds = {
            kind: {
                "for": f.counts.get(kind, [0, 0])[0],
                "against": f.counts.get(kind, [0, 0])[1],
                "weight": rule.weight,
                "contribution": contrib.get(kind, 0.0),
            }
            for kind, rule in self.table.kinds.items()
            if kind in f.counts or kind in contrib
        }
        return {
            "derivation_version": self.version,
            "estimate": beta,
            "sd": sd,
            "lower_bound": abs(beta) - self.table.z(record.polarity) * sd,
            # the feature's type level (None: the only pattern seen of its type) — the
            # estimate is the deviation from it — and the spike-and-slab state of the feature
            "type_level": fit.level.get(record.preference_type),
            "slab_probability": fit.slab[f.col],
            "prior_precision": fit.precision[f.col],
            # residual variance per unit of weight of each noise class in this bucket, and
            # the weight each class had in the fit (its inverse)
            "noise": dict(fit.noise),
            "class_weights": dict(fit.omega),
            "unary_contribution": fit.unary[f.col],
            "reinforcing_contribution": fit.reinforcing[f.col],
            "provisional": f.support[0 if sign > 0 else 1] == 0,
            "decay_steps": f.decay_steps,
            "kinds": kinds,
            "table": self.table.as_dict(),
        }
