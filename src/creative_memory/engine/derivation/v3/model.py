"""Version 3's fit of a bucket: version 2's statistics and model, fitted through the
sparse :class:`~.operator.Operator`, with exact variances only where a strength can be
above 0 (docs/engine.md, "Version 3")."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from creative_memory.engine.derivation.v2.features import Feature, FeatureKey
from creative_memory.engine.derivation.v2.model import (
    Fit,
    Model,
    by_reinforcement,
    class_sums,
    levels_and_order,
    type_sizes,
)
from creative_memory.engine.derivation.v3.operator import (
    CG_TOLERANCE,
    CG_TOLERANCE_EM,
    Operator,
    class_arrays,
)


def positions(keys: list[FeatureKey]) -> dict[FeatureKey, int]:
    """Each key's position in ``keys`` (one dict built in C: ``{k: i for i, k in …}``)."""
    return dict(zip(keys, range(len(keys)), strict=True))


def needs_exact_variance(beta: Any, threshold: Any, n0: int) -> list[int]:
    """The feature positions whose strength can be above 0: ``|β| > z·σ/√M_ff`` (for any
    other, the exact variance could only be larger, so its strength is 0 either way)."""
    import numpy as np

    return [int(p) for p in np.flatnonzero(np.abs(beta[1:n0]) > threshold[1:n0]) + 1]


class Column(Mapping[int, float]):
    """A fitted vector seen as column → value (positions through ``pos``), without
    building a dict of every column on each fit."""

    def __init__(self, vec: Any, pos: Mapping[int, int]) -> None:
        self.vec, self.pos = vec, pos

    def __getitem__(self, col: int) -> float:
        return float(self.vec[self.pos[col]])

    def __iter__(self) -> Iterator[int]:
        return iter(self.pos)

    def __len__(self) -> int:
        return len(self.pos)


class Variances(dict[int, float]):
    """Exact variances of the features that need them; for any other feature, the lower
    bound ``σ² / M_ff`` (at which its strength is 0 anyway — see the module docstring)."""

    def __init__(self, bound: Mapping[int, float]) -> None:
        super().__init__()
        self.bound = bound

    def __missing__(self, col: int) -> float:
        return self.bound[col]


@dataclass
class FitV3(Fit):
    """Version 2's fit record without the dense inverse: the operator solves on demand."""

    operator: Any = None
    # per feature, in canonical key order: estimate, variance (exact where it matters),
    # unary and reinforcing contributions
    vectors: tuple[Any, Any, Any, Any] | None = None
    keys: list[tuple[str, str]] | None = None
    index: dict[tuple[str, str], int] | None = None  # key → its position in keys

    def variance(self, col: int) -> float:
        """The exact ``σ² [M⁻¹]_ff`` of column ``col`` (computed once, then kept)."""
        if dict.__contains__(self.var, col):
            return self.var[col]
        value = self.sigma2 * float(self.inverse_row(col)[self.pos[col]])
        self.var[col] = value
        return value

    def inverse_row(self, col: int) -> Any:
        """Row ``col`` of ``M⁻¹`` (one solve)."""
        import numpy as np

        e = np.zeros(self.operator.n)
        e[self.pos[col]] = 1.0
        return self.operator.solve(e)


class ModelV3(Model):
    """Version 2's statistics, fitted with the sparse operator and conjugate gradients."""

    _layout_cache: tuple[int, tuple[Any, ...], dict[str, int]] | None = None

    def __init__(self, table: Any) -> None:
        super().__init__(table)
        # the features whose bookkeeping a fold may have changed since feature_info last ran
        # (every fold hook reaches a feature through feature(); a decay pass marks all)
        self._touched: set[FeatureKey] = set()
        self._info: tuple[int, dict[FeatureKey, int], Any] | None = None
        # per noise class: how many entries class_arrays has read and their column pairs
        self._pairs: dict[str, tuple[int, Any]] = {}

    def feature(self, key: FeatureKey) -> Feature:
        """Version 2's feature lookup, noting that the fold is about to change ``key``."""
        self._touched.add(key)
        return super().feature(key)

    def touched_keys(self) -> set[FeatureKey]:
        """The keys :meth:`feature` noted since :meth:`feature_info` last ran."""
        return self._touched

    def touch_all(self) -> None:
        """Note that every feature may have changed (a decay pass)."""
        self._info = None

    def feature_info(
        self, keys: list[FeatureKey], index: dict[FeatureKey, int] | None = None
    ) -> Any:
        """Per feature of ``keys`` (the canonical layout's), as int64 columns: support for,
        support against, decay steps, archived, events, ``decay_at_ms`` — read again only
        for the features changed since the last call (a copy: the caller may keep it).
        ``index``: each key's position in ``keys``, when the caller has it."""
        import numpy as np

        features = self.features

        def row(f: Feature) -> tuple[int, ...]:
            return (f.support[0], f.support[1], f.decay_steps, f.archived, f.events, f.decay_at_ms)

        cached = self._info
        if cached is not None and cached[0] == len(keys) == len(features):
            _, index, info = cached
            for key in self._touched:
                info[index[key]] = row(features[key])
        elif cached is not None and cached[0] < len(keys) == len(features):
            # new features (a new layout): the others' rows moved, read again only if touched
            _, old_index, old_info = cached
            index = positions(keys) if index is None else index
            at = np.fromiter(map(old_index.get, keys, repeat(-1)), dtype=np.int64, count=len(keys))
            info = old_info[np.maximum(at, 0)]
            for i in np.flatnonzero(at < 0).tolist():
                info[i] = row(features[keys[i]])
            for key in self._touched:
                info[index[key]] = row(features[key])
            self._info = (len(keys), index, info)
        else:
            info = np.array([row(features[k]) for k in keys], dtype=np.int64).reshape(-1, 6)
            index = positions(keys) if index is None else index
            self._info = (len(keys), index, info)
        self._touched.clear()
        return info.copy()

    # (features, per-class coordinates for class_arrays, the operators' shared structure)
    _kept_cache: tuple[int, dict[str, Any], dict[str, Any]] | None = None

    def _layout(self) -> tuple[Any, ...]:
        """The canonical layout of the unknowns (kept until a feature is added): features
        in ``(type, pattern)`` order, the types with a level, each column's position, the
        position → type-level map, the column → position lookup, the features' keys in
        that order and each key's position (shared by the fits of one layout: read, never
        changed).

        Version 2's :meth:`~.Model.canonical_layout`; after features were added (they only
        ever are, at the end of ``features``), each is inserted into the last layout's
        sorted list instead of sorting them all again — the same list."""
        import numpy as np

        count = len(self.features)
        cached = self._layout_cache
        if cached is not None and cached[0] == count:
            return cached[1]
        if cached is not None and cached[0] < count:
            feats = list(cached[1][0])
            sizes = dict(cached[2])
            for key, f in itertools.islice(self.features.items(), cached[0], None):
                bisect.insort(feats, (key, f.col))
                sizes[key[0]] = sizes.get(key[0], 0) + 1
        else:
            feats = sorted((k, f.col) for k, f in self.features.items())
            sizes = type_sizes(feats)
        types, tpos, order, pos = levels_and_order(feats, sizes)
        n0 = len(order)
        ftype = np.full(n0, -1, dtype=np.int64)
        start = 1  # the features are sorted by type: each type's are consecutive
        for t in sorted(sizes):
            if t in tpos:
                ftype[start : start + sizes[t]] = n0 + tpos[t]
            start += sizes[t]
        lookup = np.zeros(len(self.keys), dtype=np.int64)
        lookup[order] = np.arange(n0)
        keys = [k for k, _ in feats]
        layout = (feats, types, order, pos, ftype, lookup, keys, positions(keys))
        self._layout_cache = (count, layout, sizes)
        return layout

    def solve(self) -> Fit:
        """The MAP fit of this bucket by the sparse operator (cached until the next row)."""
        if self.fit is not None:
            return self.fit
        import numpy as np

        table = self.table
        _, types, order, pos, ftype, lookup, keys, index = self._layout()
        n0 = len(order)
        n = n0 + len(types)
        classes = sorted(self.nrows)
        # the coordinates of the classes' entries, and what the operators derive from them
        # alone, are kept from the last fit while the layout and every class's number of
        # entries are the same (entries only ever grow: the same number, the same ones)
        coordinates = (len(self.features), tuple((c, len(self.xx.get(c, ()))) for c in classes))
        kept = self._kept_cache
        if kept is None or kept[0] != len(self.features):
            kept = self._kept_cache = (len(self.features), {}, {})
        if kept[2].get("coordinates") != coordinates:
            kept[2].clear()
            kept[2]["coordinates"] = coordinates
        parts = class_arrays(self, lookup, kept[1], self._pairs)
        b_kind = {kind: self._extend_v3(vec, lookup, ftype, n0, n) for kind, vec in self.xy.items()}
        b_c = class_sums(table, b_kind, classes, n)
        s0 = table.sigma_prior
        # pass 1: every class at its table weight; its residuals give each class's variance
        ones = dict.fromkeys(classes, 1.0)
        structure: dict[str, Any] = kept[2]
        op1 = Operator(parts, ones, ftype, n0, n, structure)
        beta1 = self._emvs_v3(op1, b_c, ones, n0, n, s0)[0]
        u1 = beta1[:n0].copy()  # Eᵀ β: each feature's effect plus its type level
        u1[op1.has] += beta1[ftype[op1.has]]
        quad = {  # βᵀ E A_c Eᵀ β
            c: float(np.sum(parts[c][2] * u1[parts[c][0]] * u1[parts[c][1]])) for c in classes
        }
        noise = self.class_noise(quad, b_c, beta1)
        # pass 2: each class weighted by the inverse of its residual variance
        omega = {c: 1.0 / noise[c] for c in classes}
        op = Operator(parts, omega, ftype, n0, n, structure)
        beta_v, sigma2, slab, prior = self._emvs_v3(op, b_c, omega, n0, n, 1.0)
        op.prior = prior
        unary_b, reinf_b = by_reinforcement(table, b_kind, omega, n)
        both = op.solve(np.stack([unary_b, reinf_b], axis=1))
        bu, br = both[:, 0], both[:, 1]
        # exact variances for the features whose strength can be above 0 (module docstring)
        z_pos, z_neg = table.z_positive, table.z_negative
        z_min = min(z_pos, z_neg)
        m_diag = op.gram_diag + prior
        bound = np.sqrt(sigma2 / m_diag)
        z_of = np.where(beta_v > 0.0, z_pos, z_min)  # β = 0 keeps either polarity: z_min
        z_of = np.where(beta_v < 0.0, z_neg, z_of)
        need = needs_exact_variance(beta_v, z_of * bound, n0)
        var_vec = sigma2 / m_diag  # the bound, replaced by the exact value where needed
        var = Variances(Column(var_vec, pos))
        if need:
            rhs = np.zeros((n, len(need)))
            rhs[need, np.arange(len(need))] = 1.0
            sol = op.solve(rhs)
            var_vec = var_vec.copy()
            for j, at in enumerate(need):
                value = sigma2 * float(sol[at, j])
                var[order[at]] = value
                var_vec[at] = value
        self.fit = FitV3(
            sigma2=sigma2,
            order=order,
            pos=pos,
            inverse=None,
            beta=Column(beta_v, pos),
            var=var,
            unary=Column(bu, pos),
            reinforcing=Column(br, pos),
            level={t: float(beta_v[n0 + i]) for i, t in enumerate(types)},
            slab=Column(slab, pos),
            precision=Column(prior, pos),
            noise=noise,
            omega=omega,
            b_kind=b_kind,
            operator=op,
            vectors=(beta_v[1:n0], var_vec[1:n0], bu[1:n0], br[1:n0]),
            keys=keys,
            index=index,
        )
        return self.fit

    def _emvs_v3(
        self,
        op: Operator,
        b_c: Mapping[str, Any],
        omega: Mapping[str, float],
        n0: int,
        n: int,
        s0: float,
    ) -> tuple[Any, float, Any, Any]:
        """Version 2's spike-and-slab EM steps with conjugate-gradient solves (warm-started
        from the previous step) and the Neumann estimate of ``diag(M⁻¹)``."""
        import numpy as np

        b_all = sum((omega[c] * b_c[c] for c in sorted(omega)), np.zeros(n))

        def ridge(prior: Any, previous: Any, last: bool) -> tuple[Any, float]:
            op.prior = prior
            beta = op.solve(b_all, previous, CG_TOLERANCE if last else CG_TOLERANCE_EM)
            return beta, float(prior @ op.inverse_diagonal())

        return self.spike_slab_em(b_all, omega, n0, n, s0, ridge)

    @staticmethod
    def _extend_v3(vec: Mapping[int, int], lookup: Any, ftype: Any, n0: int, n: int) -> Any:
        """``E b`` without a dense ``E``: a kind's ``Σ w·y·x``, type levels appended
        (``lookup``: column → position; each column once, so each position is set once)."""
        import numpy as np

        out = np.zeros(n)
        m = len(vec)
        if m:
            at = lookup[np.fromiter(vec.keys(), dtype=np.int64, count=m)]
            out[at] = np.fromiter(vec.values(), dtype=np.float64, count=m)
        has = np.flatnonzero(ftype >= 0)
        if len(has):
            out[n0:] = np.bincount(ftype[has] - n0, weights=out[has], minlength=n - n0)
        return out
