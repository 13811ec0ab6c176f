"""The version-3 state: version 2's, with the scalable fit, record rules computed for all
features at once, and provisional append reports (docs/engine.md, "Version 3").

:class:`DerivedStateV3` is a deliberate subclass of
:class:`~creative_memory.engine.derivation.v2.DerivedStateV2`: the same table, statistics,
fold hooks and explanations (through its public in-package methods ``model``,
``records_for``, ``record`` and ``evidence_for``), another :attr:`model_class`.
"""

from __future__ import annotations

import math
import operator
from itertools import repeat
from typing import Any

import msgspec

from creative_memory.engine.derivation.v2.features import FeatureKey, content_id
from creative_memory.engine.derivation.v2.model import Model
from creative_memory.engine.derivation.v2.state import QUIET, DerivedStateV2
from creative_memory.engine.derivation.v3.model import FitV3, ModelV3, positions
from creative_memory.engine.events import SignalEvent
from creative_memory.engine.ids import bucket_of_scope, scope_of
from creative_memory.engine.models import DecayResult, Preference


class DerivedStateV3(DerivedStateV2):
    """Version 3 state: version 2's with the scalable fit and provisional append reports."""

    model_class = ModelV3

    def __init__(self, version: str) -> None:
        super().__init__(version)
        # bucket → (feature keys, key → position, polarity, strength, status, per-feature
        # stamp, records) of the last materialisation: see records_for
        self._built: dict[str | None, tuple[Any, ...]] = {}
        # bucket → (records, the previous records, those of them replaced, the records made)
        # of the last records_for that started from the previous materialisation
        self._delta: dict[str | None, tuple[list[Preference], ...]] = {}
        # (bucket, feature, polarity) → what apply returns for its signals (see _stub)
        self._stubs: dict[tuple[str | None, FeatureKey, str], Preference] = {}

    def materialize(self) -> None:
        """Version 2's materialisation; a bucket whose records were rebuilt at a few
        positions only (see :meth:`records_for`) has its indexes updated there
        (:meth:`~creative_memory.engine.derivation.base.Bucket.patch`: the indexes a
        full replacement builds)."""
        if not self._stale:
            return
        self._stale = False
        self._inline.clear()  # (see DerivedStateV2.__init__)
        for bucket_id, model in self.models.items():
            bucket = self.bucket_for(bucket_id)
            before = bucket.records
            records = self.records_for(bucket_id, model)
            delta = self._delta.pop(bucket_id, None)
            if (
                delta is not None
                and delta[0] is records
                and len(before) == len(delta[1])
                and all(map(operator.is_, before, delta[1]))
            ):
                bucket.patch(records, delta[2], delta[3])
            else:
                bucket.replace(records)

    def records_for(self, bucket_id: str | None, model: Model) -> list[Preference]:
        """Version 2's record rules, computed for all features at once; a record whose
        inputs are unchanged since the last materialisation is kept (provenance updated)."""
        self._delta.pop(bucket_id, None)
        if not model.features:
            self._built.pop(bucket_id, None)
            return []
        import numpy as np

        fit = model.solve()
        assert isinstance(fit, FitV3) and fit.vectors is not None and fit.keys is not None
        beta, var, cu, cr = fit.vectors
        table = self.table
        z_pos, z_neg = table.z_positive, table.z_negative
        full = table.full_effect
        cap = table.provisional_cap
        contest = table.contest_min
        factor = table.decay_factor
        keys = fit.keys
        # per feature: support for / against, decay steps, archived, events, decay_at_ms
        assert isinstance(model, ModelV3)
        info = model.feature_info(keys, fit.index)
        positive = np.where(beta != 0.0, beta > 0.0, info[:, 0] >= info[:, 1])
        sd = np.sqrt(np.maximum(var, 0.0))
        z = np.where(positive, z_pos, z_neg)
        strength = np.minimum(np.maximum((np.abs(beta) - z * sd) / full, 0.0), 1.0)
        reinforced = np.where(positive, info[:, 0], info[:, 1]) > 0
        strength = np.where(reinforced, strength, np.minimum(strength, cap))
        steps = info[:, 2]
        for j in np.flatnonzero(steps).tolist():  # Python's float power, as in version 2
            strength[j] = float(strength[j]) * factor ** int(steps[j])
        contested = (cu * cr < 0.0) & (np.minimum(np.abs(cu), np.abs(cr)) >= contest)
        status = np.where(info[:, 3] != 0, 2, np.where(contested, 1, 0))
        strength = self.raise_stated(model, fit, positive, strength, status)
        # what each record depends on besides its feature's identity (``events`` and
        # ``decay_at_ms``; last_seen changes only with ``events``). A record whose inputs are
        # unchanged is kept (provenance updated); a new feature is a new position.
        stamp = info[:, 4:6]
        prev = self._built.get(bucket_id)
        if prev is not None:
            p_keys, p_index, p_pos, p_strength, p_status, p_stamp, p_recs = prev
            if p_keys == keys:
                index = p_index
                at = np.arange(len(keys))
                new = np.zeros(len(keys), dtype=bool)
            else:  # new features: each key's position in the previous materialisation
                index = positions(keys) if fit.index is None else fit.index
                at = np.fromiter(
                    map(p_index.get, keys, repeat(-1)), dtype=np.int64, count=len(keys)
                )
                new = at < 0
                at = np.where(new, 0, at)
            changed = (
                new
                | (positive != p_pos[at])
                | (strength != p_strength[at])
                | (status != p_status[at])
                | (stamp != p_stamp[at]).any(axis=1)
            )
            for rec in p_recs:
                rec.last_derived_event_seq = self.last_seq
            out = [p_recs[j] for j in at.tolist()]
            kept = np.zeros(len(p_recs), dtype=bool)
            kept[at[~changed]] = True
            replaced = [p_recs[j] for j in np.flatnonzero(~kept).tolist()]
            todo = np.flatnonzero(changed).tolist()
        else:
            index = positions(keys) if fit.index is None else fit.index
            out = [QUIET] * len(keys)
            todo = list(range(len(keys)))
        scope = scope_of(bucket_id)
        names = ("stable", "under_review", "archived")
        made: list[Preference] = []
        features = model.features
        for i in todo:
            key = keys[i]
            f = features[key]
            s_i = float(strength[i])
            polarity = "positive" if positive[i] else "negative"
            status_i = names[int(status[i])]
            out[i] = rec = self.record(bucket_id, key, f, polarity, s_i, status_i, scope)
            made.append(rec)
        self._built[bucket_id] = (list(keys), index, positive, strength, status, stamp, out)
        if prev is not None:
            self._delta[bucket_id] = (out, p_recs, replaced, made)
        return out

    def raise_stated(
        self, model: ModelV3, fit: FitV3, positive: Any, strength: Any, status: Any
    ) -> Any:
        """The strengths of ``fit.keys`` (after the record rules and decay) as a later version's
        rule for explicit statements raises them, before :meth:`records_for` compares them
        with the last materialisation's; version 3 has no such rule (``strength`` as is).
        ``status`` is 0 for a stable record, 1 under review, 2 archived."""
        return strength

    def decay(self, now_ms: int, *, apply: bool) -> DecayResult:
        """Version 2's decay pass; a pass that changes features marks them all changed for
        the records' bookkeeping (:meth:`~.model.ModelV3.feature_info`)."""
        result = super().decay(now_ms, apply=apply)
        if apply:
            for model in self.models.values():
                if isinstance(model, ModelV3):
                    model.touch_all()
        return result

    def evidence_for(self, record: Preference) -> dict[str, Any]:
        """Version 2's evidence, with the exact uncertainty of this feature."""
        out = super().evidence_for(record)
        model = self.models[bucket_of_scope(record.scope)]
        fit = model.solve()
        assert isinstance(fit, FitV3)
        f = model.features[(record.preference_type, record.pattern)]
        sd = math.sqrt(max(fit.variance(f.col), 0.0))
        out["sd"] = sd
        out["lower_bound"] = abs(out["estimate"]) - self.table.z(record.polarity) * sd
        return out

    def _stub(self, bucket_id: str | None, key: FeatureKey, ev: SignalEvent) -> Preference:
        """What :meth:`apply` returns for a signal: version 2's record of the feature's
        identity, made once per (bucket, feature, polarity) and returned again after —
        :meth:`report` reads only that identity, and every field it copies from a stub
        (when the last fit did not know the feature) is the same for every signal of it.
        Not to be changed by its receiver."""
        at = (bucket_id, key, ev.polarity)
        stub = self._stubs.get(at)
        if stub is None:
            stub = self._stubs[at] = super()._stub(bucket_id, key, ev)
        return stub

    def report(self, rec: Preference) -> Preference:
        """The record an append returns, without fitting: the feature's counts, sources,
        tags and times as of this event, on the strength and polarity of the last fit
        (strength 0 for a feature the last fit did not know). The next read fits."""
        bucket_id = bucket_of_scope(rec.scope)
        model = self.models.get(bucket_id)
        key = (rec.preference_type, rec.pattern)
        f = None if model is None else model.features.get(key)
        if f is None:
            return super().export_record(rec)
        live = self.bucket_for(bucket_id).live(rec.preference_type, rec.pattern, rec.polarity)
        base = live if live is not None else rec
        sources, accepts, rejects, tags, decay_at = f.summary()  # (new lists)
        return msgspec.structs.replace(
            base,
            id=content_id(bucket_id, key, base.polarity),
            sources=sources,
            accept_count=accepts,
            reject_count=rejects,
            explicit_tags=tags,
            decay_at=decay_at,
            last_seen=f.last_seen,
            source_event_count=f.events,
            derivation_version=self.version,
            last_derived_event_seq=self.last_seq,
        )
