"""Version 2's statistics and fit of one bucket (docs/engine.md, "Version 2").

:class:`Model` keeps the integer sufficient statistics of one bucket's rows, per noise
class, and fits the spike-and-slab paired-comparison model on them (two passes: the first
estimates each noise class's residual variance, the second weights the classes by its
inverse). The fit is a dense inverse of the ``n × n`` normal matrix — version 3 keeps the
statistics and replaces only the solver. :class:`Fit` is what a fit produces.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from creative_memory.engine.derivation.v2.features import Feature, FeatureKey
from creative_memory.engine.derivation.v2.table import V2Table


@dataclass
class Fit:
    """One fit of a bucket: the estimate, its uncertainty and what explain shows."""

    sigma2: float  # residual variance per evidence unit (pooled, with a prior)
    order: list[int]  # canonical column order used for the factorisation
    pos: dict[int, int]  # column → position in ``order``
    inverse: Any  # (E A Eᵀ + Λ)⁻¹ at the final precisions
    beta: Mapping[int, float]
    var: dict[int, float]
    unary: Mapping[int, float]  # contribution of outcome kinds (+ legacy)
    reinforcing: Mapping[int, float]
    level: dict[str, float]  # estimated type levels
    slab: Mapping[int, float]  # posterior slab probability of each feature
    precision: Mapping[int, float]  # each column's final prior precision
    noise: dict[str, float]  # residual variance per unit of weight, by noise class
    omega: dict[str, float]  # the weight of each class in the final fit (1 / noise)
    b_kind: dict[str, Any]  # each kind's E·Σ w·y·x (unweighted by its class)

    def inverse_row(self, col: int) -> Any:
        """Row ``col`` of ``(E A Eᵀ + Λ)⁻¹``."""
        return self.inverse[self.pos[col]]


def class_sums(
    table: V2Table, b_kind: Mapping[str, Any], classes: Iterable[str], n: int
) -> dict[str, Any]:
    """Each noise class's ``Σ w·y·x`` (the sum of its kinds' vectors)."""
    import numpy as np

    b_c = {c: np.zeros(n) for c in classes}
    for kind, vb in b_kind.items():
        b_c[table.kinds[kind].noise] += vb
    return b_c


def by_reinforcement(
    table: V2Table, b_kind: Mapping[str, Any], omega: Mapping[str, float], n: int
) -> tuple[Any, Any]:
    """The class-weighted ``Σ w·y·x`` of the unary and of the reinforcing kinds."""
    import numpy as np

    unary_b = np.zeros(n)
    reinf_b = np.zeros(n)
    for kind, vb in b_kind.items():
        rule = table.kinds[kind]
        if rule.reinforcing:
            reinf_b += omega[rule.noise] * vb
        else:
            unary_b += omega[rule.noise] * vb
    return unary_b, reinf_b


class Model:
    """Sufficient statistics and fit of one bucket."""

    def __init__(self, table: V2Table) -> None:
        self.table = table
        self.features: dict[FeatureKey, Feature] = {}
        self.keys: list[FeatureKey | None] = [None]  # column → feature (0 = intercept)
        # per noise class (the kinds' "noise" in the table): the class's rows
        self.xx: dict[str, dict[tuple[int, int], int]] = {}  # (i ≤ j) → Σ w·x_i·x_j
        self.yy: dict[str, int] = {}  # Σ w·y²
        self.nrows: dict[str, int] = {}
        self.xy: dict[str, dict[int, int]] = {}  # kind → column → Σ w·y·x
        self.fit: Fit | None = None

    @property
    def rows(self) -> int:
        """How many rows (observations) the bucket has."""
        return sum(self.nrows.values())

    def feature(self, key: FeatureKey) -> Feature:
        """The bookkeeping of ``key``, with a new column if the feature is new."""
        f = self.features.get(key)
        if f is None:
            f = self.features[key] = Feature(col=len(self.keys), table=self.table)
            self.keys.append(key)
        return f

    def touched_keys(self) -> set[FeatureKey] | None:
        """The set in which :meth:`feature` notes each key it is asked for, for a fold that
        looks features up itself (``None``: this model notes none)."""
        return None

    def add_row(self, kind: str, cols: list[tuple[int, int]], y: int, denom: int = 1) -> None:
        """Add one observation: ``cols`` are (column, x·denom) pairs, outcome ``y`` (±1).

        With ``denom = 2`` a feature can enter with x = ±½; the sums stay integral because
        such kinds have weights that are multiples of 4 (checked)."""
        rule = self.table.kinds[kind]
        w = rule.weight
        d2 = denom * denom
        if w % d2:
            raise ValueError(f"weight of {kind} must be a multiple of {d2}")
        noise = rule.noise
        xx = self.xx.setdefault(noise, {})
        xy = self.xy.setdefault(kind, {})
        self.yy[noise] = self.yy.get(noise, 0) + w
        self.nrows[noise] = self.nrows.get(noise, 0) + 1
        for a, (i, xi) in enumerate(cols):
            xy[i] = xy.get(i, 0) + w * y * xi // denom
            for j, xj in cols[a:]:
                k = (i, j) if i <= j else (j, i)
                xx[k] = xx.get(k, 0) + w * xi * xj // d2
        self.fit = None

    def extend_row(self, kind: str, row: list[tuple[int, int]], col: int, y: int) -> None:
        """Add column ``col`` (x = 1) to the open row ``row`` (which already counted)."""
        rule = self.table.kinds[kind]
        w = rule.weight
        xx = self.xx.setdefault(rule.noise, {})
        xy = self.xy.setdefault(kind, {})
        xy[col] = xy.get(col, 0) + w * y
        for i, xi in row:
            k = (i, col) if i <= col else (col, i)
            xx[k] = xx.get(k, 0) + w * xi
        xx[(col, col)] = xx.get((col, col), 0) + w
        row.append((col, 1))
        self.fit = None

    # -- the fit -------------------------------------------------------------------------
    def solve(self) -> Fit:
        """The MAP fit of this bucket (cached until the next observation).

        Columns: the intercept, the features in canonical ``(type, pattern)`` order, then one
        *type level* per preference type with two or more seen patterns, in sorted order. A
        type column is the sum of its features' columns (``x_t = Σ_{f∈t} x_f``), so its
        statistics are a linear map of the stored ones (``A' = E A Eᵀ``) — no extra state.
        Artifacts carry one pattern per type, so only differences within a type are
        identified; the type level takes what the type's patterns have in common, and a
        feature's estimate is its deviation from that level. The feature prior is a
        spike-and-slab mixture (most patterns of a type are neutral, a few carry taste),
        fitted by a fixed number of EM steps that set each feature's ridge precision from its
        posterior slab probability.

        Rows of different noise classes (verdicts, comparisons, statements) are not equally
        noisy per unit of weight, so the fit runs twice: the first pass estimates each
        class's residual variance, the second weights each class by its inverse (feasible
        generalised least squares). The statistics are integers (exact in float64), so the
        fit depends on the set of observations only."""
        if self.fit is not None:
            return self.fit
        import numpy as np  # imported on the first fit: commands that never fit start faster

        table = self.table
        feats, types, tpos, order, pos = self.canonical_layout()
        n0 = len(order)
        n = n0 + len(types)
        ext = np.zeros((n, n0))  # x' = E x: the columns, then the type levels
        ext[np.arange(n0), np.arange(n0)] = 1.0
        for p, (k, _) in enumerate(feats, start=1):
            if k[0] in tpos:
                ext[n0 + tpos[k[0]], p] = 1.0
        classes = sorted(self.nrows)
        gram_c: dict[str, Any] = {}
        for c in classes:
            a0 = np.zeros((n0, n0))
            for (i, j), v in self.xx.get(c, {}).items():
                a0[pos[i], pos[j]] = a0[pos[j], pos[i]] = float(v)
            gram_c[c] = ext @ a0 @ ext.T
        b_kind = {kind: self._extend(vec, pos, ext) for kind, vec in self.xy.items()}
        b_c = class_sums(table, b_kind, classes, n)
        s0 = table.sigma_prior
        # pass 1: every class at its table weight; its residuals give each class's variance
        ones = dict.fromkeys(classes, 1.0)
        beta1 = self._emvs(gram_c, b_c, ones, n0, n, s0)[0]
        noise = self.class_noise({c: float(beta1 @ gram_c[c] @ beta1) for c in classes}, b_c, beta1)
        # pass 2: each class weighted by the inverse of its residual variance, so the
        # weighted residuals have unit variance: that is the prior guess of this pass
        omega = {c: 1.0 / noise[c] for c in classes}
        beta_v, inverse, sigma2, slab, prior = self._emvs(gram_c, b_c, omega, n0, n, 1.0)
        unary_b, reinf_b = by_reinforcement(table, b_kind, omega, n)
        bu = inverse @ unary_b
        br = inverse @ reinf_b
        var = sigma2 * np.diag(inverse)
        self.fit = Fit(
            sigma2=sigma2,
            order=order,
            pos=pos,
            inverse=inverse,
            beta={c: float(beta_v[pos[c]]) for c in order},
            var={c: float(var[pos[c]]) for c in order},
            unary={c: float(bu[pos[c]]) for c in order},
            reinforcing={c: float(br[pos[c]]) for c in order},
            level={t: float(beta_v[n0 + i]) for i, t in enumerate(types)},
            slab={c: float(slab[pos[c]]) for c in order},
            precision={c: float(prior[pos[c]]) for c in order},
            noise=noise,
            omega=omega,
            b_kind=b_kind,
        )
        return self.fit

    def class_noise(
        self, quad: Mapping[str, float], b_c: Mapping[str, Any], beta: Any
    ) -> dict[str, float]:
        """Each noise class's residual variance per unit of weight at the first pass's
        ``beta`` (``quad[c] = βᵀ G_c β``), with the prior guess :meth:`noise_prior`."""
        nu0 = self.table.sigma_prior_rows
        noise: dict[str, float] = {}
        for c in sorted(self.nrows):
            rss = float(self.yy[c]) - 2.0 * float(beta @ b_c[c]) + quad[c]
            noise[c] = (max(rss, 0.0) + nu0 * self.noise_prior(c)) / (self.nrows[c] + nu0)
        return noise

    def noise_prior(self, noise_class: str) -> float:
        """The prior guess of ``noise_class``'s residual variance per row (versions 2–4:
        the table's ``sigma_prior`` for every class)."""
        return self.table.sigma_prior

    def canonical_layout(
        self,
    ) -> tuple[list[tuple[FeatureKey, int]], list[str], dict[str, int], list[int], dict[int, int]]:
        """The unknowns in canonical order: ``(feats, types, tpos, order, pos)`` — the
        features sorted by ``(type, pattern)`` with their columns, the types that get a
        level (two or more seen patterns: a level needs two to be told apart from a
        pattern's own effect) and their index, the column order (intercept first) and each
        column's position in it."""
        feats = sorted((k, f.col) for k, f in self.features.items())
        return (feats, *levels_and_order(feats, type_sizes(feats)))

    def _emvs(
        self,
        gram_c: Mapping[str, Any],
        b_c: Mapping[str, Any],
        omega: Mapping[str, float],
        n0: int,
        n: int,
        s0: float,
    ) -> tuple[Any, Any, float, Any, Any]:
        """The spike-and-slab MAP fit with the classes weighted by ``omega`` (see
        :meth:`spike_slab_em`), each ridge fit by a dense inverse. Returns (β, (A + Λ)⁻¹,
        σ², slab probability at the final estimate, final precisions Λ)."""
        import numpy as np

        classes = sorted(omega)
        gram = sum((omega[c] * gram_c[c] for c in classes), np.zeros((n, n)))
        b_all = sum((omega[c] * b_c[c] for c in classes), np.zeros(n))
        kept: dict[str, Any] = {}

        def ridge(prior: Any, _previous: Any, _last: bool) -> tuple[Any, float]:
            inverse = kept["inverse"] = np.linalg.inv(gram + np.diag(prior))
            return inverse @ b_all, float(prior @ np.diag(inverse))

        beta_v, sigma2, slab, prior = self.spike_slab_em(b_all, omega, n0, n, s0, ridge)
        return beta_v, kept["inverse"], sigma2, slab, prior

    def spike_slab_em(
        self,
        b_all: Any,
        omega: Mapping[str, float],
        n0: int,
        n: int,
        s0: float,
        ridge: Callable[[Any, Any, bool], tuple[Any, float]],
    ) -> tuple[Any, float, Any, Any]:
        """The spike-and-slab EM steps: a fixed number of ridge fits, each setting every
        feature's precision from its posterior slab probability at the previous estimate.
        ``ridge(Λ, β_previous, last)`` solves ``(A + Λ) β = b`` and returns β and
        ``Σᵢ Λᵢ [(A + Λ)⁻¹]ᵢᵢ`` (for the effective number of parameters); ``s0`` is the
        prior guess of the residual variance per unit of (weighted) evidence. Returns (β,
        σ², slab probability at the final estimate, final precisions Λ)."""
        import numpy as np

        table = self.table
        yy = sum(omega[c] * float(self.yy[c]) for c in sorted(omega))
        lam1 = table.slab_prior
        lam0 = table.spike_prior
        share = table.slab_share
        # log prior odds of spike vs slab, up to the data term
        log_odds0 = math.log((1.0 - share) / share) + 0.5 * math.log(lam0 / lam1)
        prior = np.array(
            [table.intercept_prior] + [table.prior] * (n0 - 1) + [table.type_prior] * (n - n0),
            dtype=np.float64,
        )
        nu0 = table.sigma_prior_rows
        iterations = table.fit_iterations
        slab = np.ones(n)
        beta_v: Any = None
        sigma2 = s0
        for step in range(iterations):
            last = step == iterations - 1
            beta_v, trace = ridge(prior, beta_v, last)
            # residual variance: RSS = yᵀWy − βᵀb − βᵀΛβ; dof = rows − effective parameters
            rss = yy - float(beta_v @ b_all) - float(prior @ (beta_v * beta_v))
            p_eff = n - trace
            sigma2 = (max(rss, 0.0) + nu0 * s0) / max(self.rows - p_eff + nu0, 1.0)
            # E step: posterior slab probability of each feature (at the final step: at the
            # final estimate); M step: its precision for the next fit
            t = log_odds0 - 0.5 * (lam0 - lam1) * beta_v[1:n0] ** 2 / sigma2
            r = 1.0 / (1.0 + np.exp(np.minimum(t, 700.0)))
            slab[1:n0] = r
            if last:
                break
            prior[1:n0] = r * lam1 + (1.0 - r) * lam0
        return beta_v, sigma2, slab, prior

    @staticmethod
    def _extend(vec: Mapping[int, int], pos: Mapping[int, int], ext: Any) -> Any:
        """``E b``: a kind's ``Σ w·y·x`` over the columns, with the type levels appended."""
        import numpy as np

        b0 = np.zeros(ext.shape[1])
        for c, v in vec.items():
            b0[pos[c]] += float(v)
        return ext @ b0

    def kind_contributions(self, col: int) -> dict[str, float]:
        """Each evidence kind's exact contribution to the estimate of column ``col``."""
        fit = self.solve()
        row = fit.inverse_row(col)
        out: dict[str, float] = {}
        for kind, rule in self.table.kinds.items():
            if self.xy.get(kind):
                weight = fit.omega[rule.noise]
                out[kind] = weight * float(row @ fit.b_kind[kind])
        return out

    # -- persistence ---------------------------------------------------------------------
    def dump(self) -> dict[str, Any]:
        """The statistics and bookkeeping as JSON-ready data (for the derivation cache)."""
        return {
            "features": [[list(k), f.dump()] for k, f in self.features.items()],
            "xx": {c: [[i, j, v] for (i, j), v in xx.items()] for c, xx in self.xx.items()},
            "xy": {kind: [[c, v] for c, v in vec.items()] for kind, vec in self.xy.items()},
            "yy": self.yy,
            "rows": self.nrows,
        }

    @classmethod
    def load(cls, d: Mapping[str, Any], table: V2Table) -> Model:
        """Inverse of :meth:`dump`."""
        if not isinstance(d.get("xx"), Mapping):
            # a cache entry from before the statistics were kept per noise class: the
            # store treats it as unreadable and derives from the log
            raise ValueError("version-2 state without per-class statistics")
        m = cls(table)
        feats = [((str(k[0]), str(k[1])), Feature.load(f, table)) for k, f in d["features"]]
        m.keys = [None] * (1 + len(feats))
        for key, f in feats:
            m.features[key] = f
            m.keys[f.col] = key
        m.xx = {str(c): {(int(i), int(j)): int(v) for i, j, v in xx} for c, xx in d["xx"].items()}
        m.xy = {kind: {int(c): int(v) for c, v in vec} for kind, vec in d["xy"].items()}
        m.yy = {str(c): int(v) for c, v in d["yy"].items()}
        m.nrows = {str(c): int(v) for c, v in d["rows"].items()}
        return m


def type_sizes(feats: list[tuple[FeatureKey, int]]) -> dict[str, int]:
    """How many features of ``feats`` each type has (types in first-seen order)."""
    sizes: dict[str, int] = {}
    for k, _ in feats:
        sizes[k[0]] = sizes.get(k[0], 0) + 1
    return sizes


def levels_and_order(
    feats: list[tuple[FeatureKey, int]], sizes: dict[str, int]
) -> tuple[list[str], dict[str, int], list[int], dict[int, int]]:
    """:meth:`Model.canonical_layout` after its sorted ``feats``: the types with a level
    (two or more features) and their index, the column order and each column's position."""
    types = sorted(t for t, count in sizes.items() if count > 1)
    tpos = {t: i for i, t in enumerate(types)}
    order = [0] + [c for _, c in feats]
    pos = {c: p for p, c in enumerate(order)}
    return types, tpos, order, pos
