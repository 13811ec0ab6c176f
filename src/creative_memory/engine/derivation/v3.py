"""Derivation version ``"3"``: version 2's model with a fit that scales (docs/performance.md).

Version 2 (``derivation_v2``) fits one spike-and-slab paired-comparison model per bucket by
inverting the dense ``n × n`` normal matrix (``n`` = intercept + features + type levels) in
every EM step: O(n³) per step, seconds for a rich vocabulary. Version 3 keeps version 2's
model, weighting table, statistics, records and explanations, and changes only how the
fit is computed:

* **Sparse operator.** The normal matrix ``M = E A Eᵀ + Λ`` is never formed: ``A`` (the
  stored ``Σ w·xᵢ·xⱼ``) is applied as a sparse matrix and the type-level map ``E`` as a
  scatter/gather, so one product costs O(nnz(A) + n).
* **Conjugate gradients.** Each EM step solves ``M β = b`` by conjugate gradients,
  preconditioned with the exact border of ``M`` (the intercept and the type levels, through
  a small Schur complement) and the features' diagonal, warm-started from the previous
  step's β, to a relative residual of
  ``CG_TOLERANCE`` (a fixed rule: the result is a pure function of the statistics). A
  bucket with at most ``DENSE_MAX`` unknowns is solved directly instead (for so few, the
  iterations' overhead costs more than a dense LU). The two agree to about 1e-8 in a
  record's strength (the EM steps before the last stop at ``CG_TOLERANCE_EM``); each is
  deterministic.
* **Effective parameters.** The residual variance's degrees of freedom,
  ``p_eff = n − Σᵢ Λᵢ [M⁻¹]ᵢᵢ``, need the whole diagonal of ``M⁻¹`` in every EM step;
  version 3 uses the first two terms of its Neumann series,
  ``[M⁻¹]ᵢᵢ ≈ 1/Mᵢᵢ + Σ_{j≠i} Mᵢⱼ² / (Mᵢᵢ² Mⱼⱼ)`` (O(nnz)). This is the one modelling
  difference from version 2; on the taste-recovery benchmark it is within noise of the
  exact trace (docs/quality.md).
* **Variances only where they matter.** A record's strength is
  ``clamp((|β| − z·sd) / full_effect, 0, 1)`` with ``sd² = σ² [M⁻¹]_ff``. Since
  ``[M⁻¹]_ff ≥ 1 / M_ff``, a feature with ``|β| ≤ z·σ / √M_ff`` has strength 0 whatever
  its exact variance; only the other features (the few that carry evidence) get the exact
  ``[M⁻¹]_ff`` — by solving ``M x = e_f`` for all of them at once. ``explain`` computes the
  exact variance of any feature on demand.

The cost of a fit is O(iterations × (nnz(A) + n)) — about linear in the evidence — instead
of O(n³). An append never fits: the record it returns is provisional (the event's counts,
tags and times on the estimate of the last fit); the next read fits (lazily, once).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from creative_memory.engine.derivation.v1 import DerivedState, register_version
from creative_memory.engine.derivation.v2 import (
    _QUIET,
    V2_TABLE,
    DerivedStateV2,
    _by_reinforcement,
    _class_sums,
    _content_id,
    _Fit,
    _Model,
)
from creative_memory.engine.models import Preference

VERSION: Final = "3"

#: Conjugate gradients stop at ``‖r‖ ≤ CG_TOLERANCE · ‖b‖`` (or after ``CG_MAX_STEPS``);
#: the EM steps before the last of a pass, which only set the next step's precisions,
#: stop at ``CG_TOLERANCE_EM``.
CG_TOLERANCE: Final = 1e-12
CG_TOLERANCE_EM: Final = 1e-9
CG_MAX_STEPS: Final = 1000
#: Buckets with at most this many unknowns are solved directly (LU), larger ones by CG.
DENSE_MAX: Final = 256


def _class_arrays(model: _Model, lookup: Any) -> dict[str, tuple[Any, Any, Any]]:
    """Each noise class's ``A`` as symmetric coordinate arrays (rows, cols, values) over
    the canonical positions (``lookup``: column → position)."""
    import numpy as np

    out: dict[str, tuple[Any, Any, Any]] = {}
    for c in sorted(model.nrows):
        xx = model.xx.get(c, {})
        m = len(xx)
        ij = np.fromiter((k for pair in xx for k in pair), dtype=np.int64, count=2 * m)
        ij = lookup[ij].reshape(m, 2) if m else np.zeros((0, 2), dtype=np.int64)
        vals = np.fromiter(xx.values(), dtype=np.float64, count=m)
        off = ij[:, 0] != ij[:, 1]
        rows = np.concatenate([ij[:, 0], ij[off, 1]])
        cols = np.concatenate([ij[:, 1], ij[off, 0]])
        out[c] = (rows, cols, np.concatenate([vals, vals[off]]))
    return out


class _Operator:
    """``M = E A Eᵀ + Λ`` of one bucket, applied without forming it (numpy arrays).

    ``A = Σ_c ω_c A_c`` over the classes' coordinate arrays; ``ftype`` maps a feature's
    position to its type level's position (or -1)."""

    def __init__(
        self,
        parts: Mapping[str, tuple[Any, Any, Any]],
        omega: Mapping[str, float],
        ftype: Any,
        n0: int,
        n: int,
        structure: dict[str, Any] | None = None,
    ) -> None:
        import numpy as np

        self.n0, self.n = n0, n
        # what operators of one fit over the same classes share (see _off_diagonal)
        self.structure: dict[str, Any] = {} if structure is None else structure
        self.ftype = ftype
        self.has = np.flatnonzero(ftype >= 0)
        classes = sorted(c for c in omega if c in parts)
        if classes:
            self.rows = np.concatenate([parts[c][0] for c in classes])
            self.cols = np.concatenate([parts[c][1] for c in classes])
            self.vals = np.concatenate([omega[c] * parts[c][2] for c in classes])
        else:
            self.rows = self.cols = np.zeros(0, dtype=np.int64)
            self.vals = np.zeros(0)
        # diag(E A Eᵀ): features and intercept from A's diagonal; a type level sums the
        # block of its patterns
        g = np.zeros(n)
        diag = self.rows == self.cols
        g[:n0] = np.bincount(self.rows[diag], weights=self.vals[diag], minlength=n0)
        if n > n0 and len(self.rows):
            tr = ftype[self.rows]
            tc = ftype[self.cols]
            same = (tr >= 0) & (tr == tc)
            g[n0:] += np.bincount(tr[same] - n0, weights=self.vals[same], minlength=n - n0)
        self.gram_diag = g
        self.prior = np.zeros(n)
        self._off: tuple[Any, Any, Any] | None = None
        self._dense: Any = None
        self._border_cache: tuple[Any, Any, Any] | None = None
        self._features: Any = None

    def gram(self, v: Any) -> Any:
        """``E A Eᵀ v`` for a vector ``v`` (length n) or a matrix (n × k)."""
        import numpy as np

        if v.ndim == 2:
            if v.shape[1] == 1:  # one column: the vector product is cheaper
                return self.gram(v[:, 0])[:, None]
            return self._gram_block(v)
        n0 = self.n0
        u = v[:n0].copy()
        if len(self.has):
            u[self.has] += v[self.ftype[self.has]]
        w = np.bincount(self.rows, weights=self.vals * u[self.cols], minlength=n0)
        out = np.zeros(self.n)
        out[:n0] = w
        if self.n > n0 and len(self.has):
            t = self.ftype[self.has] - n0
            out[n0:] = np.bincount(t, weights=w[self.has], minlength=self.n - n0)
        return out

    def inverse_diagonal(self) -> Any:
        """An estimate of ``diag(M⁻¹)`` at the current precisions: the first two terms of
        the Neumann series, ``1/Mᵢᵢ + Σ_{j≠i} Mᵢⱼ² / (Mᵢᵢ² Mⱼⱼ)``, over the off-diagonal
        entries of the extended matrix (features, intercept and type levels)."""
        import numpy as np

        if self._off is None:
            self._off = self._off_diagonal()
        rows, cols, vals = self._off
        m = self.gram_diag + self.prior
        second = np.bincount(rows, weights=vals * vals / m[cols], minlength=self.n)
        return 1.0 / m + second / (m * m)

    def _off_diagonal(self) -> tuple[Any, Any, Any]:
        """The off-diagonal entries of ``E A Eᵀ`` as unique coordinates: ``A``'s own, and
        those through the type levels (a level is the sum of its patterns' columns)."""
        import numpy as np

        r, c, v = self.rows, self.cols, self.vals
        shared = self.structure
        if shared.get("entries") != len(r):  # the coordinates: the same for every weighting
            tr, tc = self.ftype[r], self.ftype[c]
            to_level, from_level = tc >= 0, tr >= 0
            both = to_level & from_level
            rows = np.concatenate([r, r[to_level], tr[from_level], tr[both]])
            cols = np.concatenate([c, tc[to_level], c[from_level], tc[both]])
            keys, where = np.unique(rows * self.n + cols, return_inverse=True)
            ur, uc = keys // self.n, keys % self.n
            off = ur != uc
            shared.update(
                entries=len(r), masks=(to_level, from_level, both), where=where, off=off,
                ur=ur[off], uc=uc[off],
            )  # fmt: skip
        to_level, from_level, both = shared["masks"]
        vals = np.concatenate([v, v[to_level], v[from_level], v[both]])
        sums = np.bincount(shared["where"], weights=vals)
        return shared["ur"], shared["uc"], sums[shared["off"]]

    def apply(self, v: Any) -> Any:
        """``M v`` at the current prior precisions."""
        if v.ndim == 1:
            return self.gram(v) + self.prior * v
        return self.gram(v) + self.prior[:, None] * v

    def _dense_gram(self) -> Any:
        """``E A Eᵀ`` as a dense matrix (small buckets only: see :meth:`solve`)."""
        import numpy as np

        if self._dense is None:
            a = np.zeros((self.n0, self.n0))
            np.add.at(a, (self.rows, self.cols), self.vals)
            ext = np.zeros((self.n, self.n0))
            ext[np.arange(self.n0), np.arange(self.n0)] = 1.0
            ext[self.ftype[self.has], self.has] = 1.0
            self._dense = ext @ a @ ext.T
        return self._dense

    def _preconditioner(self) -> Callable[[Any], Any]:
        """``P⁻¹`` for the current precisions, where ``P`` keeps the border of ``M`` exact
        (the intercept and the type levels, which touch every feature of their type) and
        the feature block's diagonal: a block factorisation with the small Schur complement
        ``S = M_BB − M_BF D_F⁻¹ M_FB``. Falls back to the diagonal (Jacobi) when ``S`` is
        not positive definite or there is no border."""
        import numpy as np

        d = self.gram_diag + self.prior
        inv_d = 1.0 / d
        border = self._border()
        if border is None:
            return lambda r: inv_d * r if r.ndim == 1 else inv_d[:, None] * r
        at, m_fb, m_bb = border  # border positions, M[features, border], G[border, border]
        f_inv = inv_d[self._features]
        s_mat = m_bb + np.diag(self.prior[at]) - m_fb.T @ (f_inv[:, None] * m_fb)
        try:
            chol = np.linalg.cholesky(s_mat)
        except np.linalg.LinAlgError:
            return lambda r: inv_d * r if r.ndim == 1 else inv_d[:, None] * r
        s_inv = np.linalg.inv(chol).T @ np.linalg.inv(chol)
        feats = self._features

        def apply(r: Any) -> Any:
            rf = r[feats]
            scaled = f_inv * rf if r.ndim == 1 else f_inv[:, None] * rf
            y_b = s_inv @ (r[at] - m_fb.T @ scaled)
            out = np.empty_like(r)
            out[at] = y_b
            out[feats] = (
                f_inv * (rf - m_fb @ y_b) if r.ndim == 1 else f_inv[:, None] * (rf - m_fb @ y_b)
            )
            return out

        return apply

    def _border(self) -> tuple[Any, Any, Any] | None:
        """The border's positions, ``G[features, border]`` and ``G[border, border]``."""
        import numpy as np

        if self._border_cache is None:
            at = np.concatenate([[0], np.arange(self.n0, self.n)]).astype(np.int64)
            eye = np.zeros((self.n, len(at)))
            eye[at, np.arange(len(at))] = 1.0
            cols = self._gram_block(eye)
            self._features = np.arange(1, self.n0)
            self._border_cache = (at, cols[self._features], cols[at])
        return self._border_cache

    def _gram_block(self, v: Any) -> Any:
        """:meth:`gram` of every column of ``v`` (n × k) in one pass: one scatter-add over
        the entries × columns."""
        import numpy as np

        n0, k = self.n0, v.shape[1]
        cols = np.arange(k)
        u = v[:n0].copy()
        if len(self.has):
            u[self.has] += v[self.ftype[self.has]]
        at = (self.rows[:, None] * k + cols[None, :]).ravel()
        w = np.bincount(at, weights=(self.vals[:, None] * u[self.cols]).ravel(), minlength=n0 * k)
        w = w.reshape(n0, k)
        out = np.zeros((self.n, k))
        out[:n0] = w
        if self.n > n0 and len(self.has):
            t = ((self.ftype[self.has] - n0)[:, None] * k + cols[None, :]).ravel()
            out[n0:] = np.bincount(
                t, weights=w[self.has].ravel(), minlength=(self.n - n0) * k
            ).reshape(self.n - n0, k)
        return out

    def _conjugate_gradients(self, b: Any, x0: Any | None, tolerance: float) -> Any:
        """Preconditioned conjugate gradients for every column of ``b`` (n × k) at once,
        from ``x0`` (default 0), each column with its own step sizes and its own stopping
        test (``‖r‖ ≤ tolerance · ‖b‖``) — a converged column is left as it is while the
        others go on."""
        import numpy as np

        precondition = self._preconditioner()
        x = np.zeros(b.shape) if x0 is None else x0.copy()
        r = b.copy() if x0 is None else b - self.apply(x)
        limit = tolerance * tolerance * np.einsum("ij,ij->j", b, b)
        z = precondition(r)
        p = z.copy()
        rz = np.einsum("ij,ij->j", r, z)
        for _ in range(CG_MAX_STEPS):
            active = np.einsum("ij,ij->j", r, r) > limit
            if not active.any():
                break
            q = self.apply(p)
            pq = np.einsum("ij,ij->j", p, q)
            active &= pq > 0.0
            alpha = np.where(active, rz / np.where(active, pq, 1.0), 0.0)
            x += alpha * p
            r -= alpha * q
            z_new = precondition(r)
            rz_new = np.einsum("ij,ij->j", r, z_new)
            beta = np.where(active, rz_new / np.where(active, rz, 1.0), 0.0)
            p = np.where(active, z_new + beta * p, p)
            rz = np.where(active, rz_new, rz)
        return x

    def solve(self, b: Any, x0: Any | None = None, tolerance: float = CG_TOLERANCE) -> Any:
        """``M⁻¹ b`` (``b``: a vector or the columns of a matrix): a direct solve when the
        bucket has at most ``DENSE_MAX`` unknowns (cheaper there than the iterations'
        overhead), else conjugate gradients from ``x0`` (default 0)."""
        import numpy as np

        if self.n <= DENSE_MAX:
            return np.linalg.solve(self._dense_gram() + np.diag(self.prior), b)
        if b.ndim == 2:
            return self._conjugate_gradients(b, x0, tolerance)
        start = None if x0 is None else x0[:, None]
        return self._conjugate_gradients(b[:, None], start, tolerance)[:, 0]


def _needs_exact_variance(beta: Any, threshold: Any, n0: int) -> list[int]:
    """The feature positions whose strength can be above 0: ``|β| > z·σ/√M_ff`` (for any
    other, the exact variance could only be larger, so its strength is 0 either way)."""
    import numpy as np

    return [int(p) for p in np.flatnonzero(np.abs(beta[1:n0]) > threshold[1:n0]) + 1]


class _Column(Mapping[int, float]):
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


class _Variances(dict[int, float]):
    """Exact variances of the features that need them; for any other feature, the lower
    bound ``σ² / M_ff`` (at which its strength is 0 anyway — see the module docstring)."""

    def __init__(self, bound: Mapping[int, float]) -> None:
        super().__init__()
        self.bound = bound

    def __missing__(self, col: int) -> float:
        return self.bound[col]


@dataclass
class _FitV3(_Fit):
    """Version 2's fit record without the dense inverse: the operator solves on demand."""

    operator: Any = None
    # per feature, in canonical key order: estimate, variance (exact where it matters),
    # unary and reinforcing contributions
    vectors: tuple[Any, Any, Any, Any] | None = None
    keys: list[tuple[str, str]] | None = None

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


class _ModelV3(_Model):
    """Version 2's statistics, fitted with the sparse operator and conjugate gradients."""

    _layout_cache: tuple[int, tuple[Any, ...]] | None = None

    def _layout(self) -> tuple[Any, ...]:
        """The canonical layout of the unknowns (kept until a feature is added): features
        in ``(type, pattern)`` order, the types with a level, each column's position, and
        the position → type-level map."""
        import numpy as np

        if self._layout_cache is not None and self._layout_cache[0] == len(self.features):
            return self._layout_cache[1]
        feats, types, tpos, order, pos = self.canonical_layout()
        n0 = len(order)
        ftype = np.full(n0, -1, dtype=np.int64)
        for p, (k, _) in enumerate(feats, start=1):
            if k[0] in tpos:
                ftype[p] = n0 + tpos[k[0]]
        lookup = np.zeros(len(self.keys), dtype=np.int64)
        lookup[order] = np.arange(n0)
        layout = (feats, types, order, pos, ftype, lookup)
        self._layout_cache = (len(self.features), layout)
        return layout

    def solve(self) -> _Fit:
        if self.fit is not None:
            return self.fit
        import numpy as np

        table = V2_TABLE
        feats, types, order, pos, ftype, lookup = self._layout()
        n0 = len(order)
        n = n0 + len(types)
        parts = _class_arrays(self, lookup)
        classes = sorted(self.nrows)
        b_kind = {kind: self._extend_v3(vec, pos, ftype, n0, n) for kind, vec in self.xy.items()}
        b_c = _class_sums(b_kind, classes, n)
        s0 = float(table["sigma_prior"])
        # pass 1: every class at its table weight; its residuals give each class's variance
        ones = dict.fromkeys(classes, 1.0)
        structure: dict[str, Any] = {}
        op1 = _Operator(parts, ones, ftype, n0, n, structure)
        beta1 = self._emvs_v3(op1, b_c, ones, n0, n, s0)[0]
        u1 = beta1[:n0].copy()  # Eᵀ β: each feature's effect plus its type level
        u1[op1.has] += beta1[ftype[op1.has]]
        quad = {  # βᵀ E A_c Eᵀ β
            c: float(np.sum(parts[c][2] * u1[parts[c][0]] * u1[parts[c][1]])) for c in classes
        }
        noise = self.class_noise(quad, b_c, beta1)
        # pass 2: each class weighted by the inverse of its residual variance
        omega = {c: 1.0 / noise[c] for c in classes}
        op = _Operator(parts, omega, ftype, n0, n, structure)
        beta_v, sigma2, slab, prior = self._emvs_v3(op, b_c, omega, n0, n, 1.0)
        op.prior = prior
        unary_b, reinf_b = _by_reinforcement(b_kind, omega, n)
        both = op.solve(np.stack([unary_b, reinf_b], axis=1))
        bu, br = both[:, 0], both[:, 1]
        # exact variances for the features whose strength can be above 0 (module docstring)
        z_pos, z_neg = float(table["z_positive"]), float(table["z_negative"])
        z_min = min(z_pos, z_neg)
        m_diag = op.gram_diag + prior
        bound = np.sqrt(sigma2 / m_diag)
        z_of = np.where(beta_v > 0.0, z_pos, z_min)  # β = 0 keeps either polarity: z_min
        z_of = np.where(beta_v < 0.0, z_neg, z_of)
        need = _needs_exact_variance(beta_v, z_of * bound, n0)
        var_vec = sigma2 / m_diag  # the bound, replaced by the exact value where needed
        var = _Variances(_Column(var_vec, pos))
        if need:
            rhs = np.zeros((n, len(need)))
            rhs[need, np.arange(len(need))] = 1.0
            sol = op.solve(rhs)
            var_vec = var_vec.copy()
            for j, at in enumerate(need):
                value = sigma2 * float(sol[at, j])
                var[order[at]] = value
                var_vec[at] = value
        self.fit = _FitV3(
            sigma2=sigma2,
            order=order,
            pos=pos,
            inverse=None,
            beta=_Column(beta_v, pos),
            var=var,
            unary=_Column(bu, pos),
            reinforcing=_Column(br, pos),
            level={t: float(beta_v[n0 + i]) for i, t in enumerate(types)},
            slab=_Column(slab, pos),
            precision=_Column(prior, pos),
            noise=noise,
            omega=omega,
            b_kind=b_kind,
            operator=op,
            vectors=(beta_v[1:n0], var_vec[1:n0], bu[1:n0], br[1:n0]),
            keys=[k for k, _ in feats],
        )
        return self.fit

    def _emvs_v3(
        self,
        op: _Operator,
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
    def _extend_v3(
        vec: Mapping[int, int], pos: Mapping[int, int], ftype: Any, n0: int, n: int
    ) -> Any:
        """``E b`` without a dense ``E``: a kind's ``Σ w·y·x``, type levels appended."""
        import numpy as np

        out = np.zeros(n)
        for c, v in vec.items():
            out[pos[c]] += float(v)
        has = np.flatnonzero(ftype >= 0)
        if len(has):
            out[n0:] = np.bincount(ftype[has] - n0, weights=out[has], minlength=n - n0)
        return out


class DerivedStateV3(DerivedStateV2):
    """Version 3 state: version 2's with the scalable fit and provisional append reports."""

    model_class = _ModelV3

    def __init__(self, version: str) -> None:
        super().__init__(version)
        # bucket → (feature keys, polarity, strength, status, (events, decay_at) per feature,
        # records) of the last materialisation: see _records_for
        self._built: dict[str | None, tuple[Any, ...]] = {}

    def _records_for(self, bucket_id: str | None, model: _Model) -> list[Preference]:
        """Version 2's record rules, computed for all features at once."""
        if not model.features:
            self._built.pop(bucket_id, None)
            return []
        import numpy as np

        fit = model.solve()
        assert isinstance(fit, _FitV3) and fit.vectors is not None and fit.keys is not None
        beta, var, cu, cr = fit.vectors
        table = V2_TABLE
        z_pos, z_neg = float(table["z_positive"]), float(table["z_negative"])
        full = float(table["full_effect"])
        cap = float(table["provisional_cap"])
        contest = float(table["contest_min"])
        factor = float(table["decay_factor"])
        feats = [model.features[k] for k in fit.keys]
        support = np.array([f.support for f in feats], dtype=np.int64).reshape(-1, 2)
        positive = np.where(beta != 0.0, beta > 0.0, support[:, 0] >= support[:, 1])
        sd = np.sqrt(np.maximum(var, 0.0))
        z = np.where(positive, z_pos, z_neg)
        strength = np.minimum(np.maximum((np.abs(beta) - z * sd) / full, 0.0), 1.0)
        reinforced = np.where(positive, support[:, 0], support[:, 1]) > 0
        strength = np.where(reinforced, strength, np.minimum(strength, cap))
        steps = np.array([f.decay_steps for f in feats], dtype=np.int64)
        for j in np.flatnonzero(steps).tolist():  # Python's float power, as in version 2
            strength[j] = float(strength[j]) * factor ** int(steps[j])
        contested = (cu * cr < 0.0) & (np.minimum(np.abs(cu), np.abs(cr)) >= contest)
        archived = np.array([f.archived for f in feats], dtype=bool)
        status = np.where(archived, 2, np.where(contested, 1, 0))
        stamp = np.array([(f.events, f.decay_at_ms) for f in feats], dtype=np.int64).reshape(-1, 2)
        # what each record depends on besides its feature's identity; last_seen changes only
        # with ``events``. A record whose inputs are unchanged is kept (provenance updated).
        prev = self._built.get(bucket_id)
        if prev is not None and prev[0] == fit.keys:
            _, p_pos, p_strength, p_status, p_stamp, p_recs = prev
            changed = (
                (positive != p_pos)
                | (strength != p_strength)
                | (status != p_status)
                | (stamp != p_stamp).any(axis=1)
            )
            out = list(p_recs)
            for rec in out:
                rec.last_derived_event_seq = self.last_seq
            todo = np.flatnonzero(changed).tolist()
        else:
            out = [_QUIET] * len(feats)
            todo = list(range(len(feats)))
        scope = "global" if bucket_id is None else "project:" + bucket_id
        names = ("stable", "under_review", "archived")
        for i in todo:
            key, f = fit.keys[i], feats[i]
            s_i = float(strength[i])
            polarity = "positive" if positive[i] else "negative"
            out[i] = self._record(bucket_id, key, f, polarity, s_i, names[int(status[i])], scope)
        self._built[bucket_id] = (list(fit.keys), positive, strength, status, stamp, out)
        return out

    def evidence_for(self, record: Preference) -> dict[str, Any]:
        """Version 2's evidence, with the exact uncertainty of this feature."""
        out = super().evidence_for(record)
        bucket_id = None if record.scope == "global" else record.scope[len("project:") :]
        model = self._models[bucket_id]
        fit = model.solve()
        assert isinstance(fit, _FitV3)
        f = model.features[(record.preference_type, record.pattern)]
        sd = math.sqrt(max(fit.variance(f.col), 0.0))
        out["sd"] = sd
        out["lower_bound"] = abs(out["estimate"]) - float(V2_TABLE[f"z_{record.polarity}"]) * sd
        return out

    def report(self, rec: Preference) -> Preference:
        """The record an append returns, without fitting: the feature's counts, sources,
        tags and times as of this event, on the strength and polarity of the last fit
        (strength 0 for a feature the last fit did not know). The next read fits."""
        bucket_id = None if rec.scope == "global" else rec.scope[len("project:") :]
        model = self._models.get(bucket_id)
        key = (rec.preference_type, rec.pattern)
        f = None if model is None else model.features.get(key)
        if f is None:
            return super().export_record(rec)
        first = DerivedState._bucket_for(self, bucket_id).first
        live = None
        for polarity in (rec.polarity, "negative" if rec.polarity == "positive" else "positive"):
            live = first.get((rec.preference_type, rec.pattern, polarity))
            if live is not None:
                break
        base = live if live is not None else rec
        out = base.copy()
        out.id = _content_id(bucket_id, key, base.polarity)
        out.sources, out.accept_count, out.reject_count, out.explicit_tags, out.decay_at = (
            f.summary()
        )
        out.last_seen = f.last_seen
        out.source_event_count = f.events
        out.derivation_version = self.version
        out.last_derived_event_seq = self.last_seq
        return out


register_version(VERSION, DerivedStateV3)
