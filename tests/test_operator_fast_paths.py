"""Version 3's conjugate gradients give exactly the floats of their plain arithmetic
(docs/performance.md, "Version 3's first read (second pass)"): the column-by-column
product ``M v``, the in-place steps of the one-column path, and the masked path's steps
while every column is going, against the masked iteration as it was written first; and the
layout kept across new features, against version 2's canonical layout; and the unique
coordinates of the Neumann estimate, against ``numpy.unique``."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest

from creative_memory.engine.derivation.registry import new_state
from creative_memory.engine.derivation.v3 import ModelV3
from creative_memory.engine.derivation.v3.operator import (
    CG_MAX_STEPS,
    Operator,
    unique_coordinates,
)
from tests.test_engine_speedups import big_model, history


def block_gram(op: Operator, v: Any) -> Any:
    """``E A Eᵀ v`` for the columns of ``v`` (n × k) in one pass, as version 3 first took a
    block of columns: one scatter-add over every entry × column, then one over every
    feature × column for the type levels, into zeros — the floats that define it."""
    n0, k = op.n0, v.shape[1]
    has = op.has
    u = v[:n0].copy()
    if len(has):
        u[has] += v[op._level_of]
    at = (op.rows[:, None] * k + np.arange(k)[None, :]).ravel()
    w = np.bincount(at, weights=(op.vals[:, None] * u[op.cols]).ravel(), minlength=n0 * k)
    w = w.reshape(n0, k)
    out = np.zeros((op.n, k))
    out[:n0] = w
    if op.n > n0 and len(has):
        t = (op._level_bin[:, None] * k + np.arange(k)[None, :]).ravel()
        out[n0:] = np.bincount(t, weights=w[has].ravel(), minlength=(op.n - n0) * k).reshape(
            op.n - n0, k
        )
    return out


def block_apply(op: Operator, v: Any) -> Any:
    """``M v`` of a block of columns (n × k, k ≥ 2) as first written."""
    return block_gram(op, v) + op.prior[:, None] * v


def plain_masked(op: Operator, b: Any, x0: Any | None, tolerance: float) -> Any:
    """The masked conjugate gradients as first written (every step through the masks,
    ``M v`` of the whole block at once): the arithmetic that defines version 3's fit."""
    apply = op.apply if b.shape[1] == 1 else functools.partial(block_apply, op)
    precondition = op._preconditioner()
    x = np.zeros(b.shape) if x0 is None else x0.copy()
    r = b.copy() if x0 is None else b - apply(x)
    limit = tolerance * tolerance * np.einsum("ij,ij->j", b, b)
    z = precondition(r)
    p = z.copy()
    rz = np.einsum("ij,ij->j", r, z)
    for _ in range(CG_MAX_STEPS):
        active = np.einsum("ij,ij->j", r, r) > limit
        if not active.any():
            break
        q = apply(p)
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


def synthetic(seed: int, *, levels: str) -> Operator:
    """A random operator over 300 features: every type with a level (consecutive level
    features), some features without one (a gather), or no level at all."""
    rng = np.random.default_rng(seed)
    n0 = 300
    n_types = 0 if levels == "none" else 4
    n = n0 + n_types
    ftype = np.full(n0, -1, dtype=np.int64)
    if n_types:
        ftype[1:] = n0 + np.sort(rng.integers(0, n_types, n0 - 1))
        if levels == "some":
            ftype[rng.choice(np.arange(1, n0), 40, replace=False)] = -1
    parts = {}
    for c in ("a", "b"):
        m = 900
        i = rng.integers(0, n0, m)
        j = rng.integers(0, n0, m)
        pairs = {(int(min(p, q)), int(max(p, q))) for p, q in zip(i, j, strict=True)}
        pairs |= {(p, p) for p in range(n0)}
        ij = np.array(sorted(pairs, key=lambda _: rng.random()), dtype=np.int64)
        vals = rng.integers(1, 9, len(ij)).astype(np.float64)
        vals[ij[:, 0] != ij[:, 1]] *= -0.25
        vals[ij[:, 0] == ij[:, 1]] += 8.0
        off = ij[:, 0] != ij[:, 1]
        rows = np.concatenate([ij[:, 0], ij[off, 1]])
        cols = np.concatenate([ij[:, 1], ij[off, 0]])
        parts[c] = (rows, cols, np.concatenate([vals, vals[off]]))
    op = Operator(parts, {"a": 1.3, "b": 0.7}, ftype, n0, n)
    op.prior = rng.uniform(0.5, 3.0, n)
    return op


@functools.cache
def operators() -> list[Operator]:
    """The operators of these tests (built once: a test that changes one restores it)."""
    return [
        big_model(),
        synthetic(1, levels="all"),
        synthetic(2, levels="some"),
        synthetic(3, levels="none"),
    ]


def test_column_by_column_products_are_the_block_ones_bit_for_bit() -> None:
    rng = np.random.default_rng(11)
    for op in operators():
        add = op._column_product()
        for k in (2, 3, 8, 11, 40):
            v = rng.standard_normal((op.n, k))
            v[rng.integers(0, op.n, 7), rng.integers(0, k, 7)] = -0.0
            v[rng.integers(0, op.n, 7), rng.integers(0, k, 7)] = 0.0
            want = block_apply(op, v).tobytes()
            assert op._apply_columns(v, add).tobytes() == want
            assert op.apply(v).tobytes() == want
            assert op.gram(v).tobytes() == block_gram(op, v).tobytes()


@pytest.mark.parametrize("k", [1, 2, 5, 10, 40])
def test_conjugate_gradients_are_the_plain_masked_ones_bit_for_bit(k: int) -> None:
    rng = np.random.default_rng(k)
    for op in operators():
        for tolerance in (1e-12, 1e-9, 1e-3):
            for start in (None, "random"):
                b = rng.standard_normal((op.n, k))
                b[rng.integers(0, op.n, 5)] = 0.0
                if k > 1:
                    b[:, 0] *= 1e-6  # columns that converge at different steps
                    b[:, -1] = 0.0  # and one at the start
                x0 = None if start is None else rng.standard_normal((op.n, k))
                # a zero column from a random start runs its residual down to underflow
                # (0/0 in a step size: the same NaN on both paths)
                with np.errstate(invalid="ignore", divide="ignore"):
                    want = plain_masked(op, b, x0, tolerance)
                    got = op._conjugate_gradients(b, x0, tolerance)
                assert got.shape == want.shape == (op.n, k)
                assert got.tobytes() == want.tobytes()
                if k == 1:
                    with np.errstate(invalid="ignore", divide="ignore"):
                        masked = op._conjugate_gradients_masked(b, x0, tolerance)
                    assert masked.tobytes() == want.tobytes()


def test_no_descent_stops_like_the_plain_masked_path() -> None:
    for op in operators():
        prior = op.prior
        op.prior = np.full(op.n, -1e6)  # M is not positive definite: pᵀ M p ≤ 0 at once
        try:
            for k in (1, 3):
                b = np.ones((op.n, k))
                want = plain_masked(op, b, None, 1e-12)
                assert op._conjugate_gradients(b, None, 1e-12).tobytes() == want.tobytes()
        finally:
            op.prior = prior


def plain_layout(model: ModelV3) -> tuple[Any, ...]:
    """The layout from version 2's canonical_layout, as the fit first built it."""
    feats, types, tpos, order, pos = model.canonical_layout()
    n0 = len(order)
    ftype = np.full(n0, -1, dtype=np.int64)
    for p, (k, _) in enumerate(feats, start=1):
        if k[0] in tpos:
            ftype[p] = n0 + tpos[k[0]]
    lookup = np.zeros(len(model.keys), dtype=np.int64)
    lookup[order] = np.arange(n0)
    return feats, types, order, pos, ftype, lookup, [k for k, _ in feats]


@pytest.mark.parametrize("seed", [3, 4])
def test_the_layout_kept_across_new_features_is_the_canonical_one(seed: int) -> None:
    state = new_state("3")
    events = history(400, 90, seed)
    for i, ev in enumerate(events):
        state.apply(ev)
        if i % 3 and i < 300:  # sometimes several features arrive between two layouts
            continue
        for model in state.models.values():  # type: ignore[attr-defined]
            assert isinstance(model, ModelV3)
            got, want = model._layout(), plain_layout(model)
            assert got[:4] == want[:4] and got[6] == want[6]
            assert got[4].tobytes() == want[4].tobytes()
            assert got[5].tobytes() == want[5].tobytes()


@pytest.mark.parametrize("n", [1, 2, 300, 1 << 16, (1 << 16) + 1])
def test_unique_coordinates_are_numpys_unique(n: int) -> None:
    rng = np.random.default_rng(n)
    for size in (0, 1, 50, 5_000):
        rows = rng.integers(0, n, size).astype(np.int64)
        cols = rng.integers(0, n, size).astype(np.int64)
        rows[size // 2 :] = rows[: size - size // 2]  # repeated coordinates
        cols[size // 2 :] = cols[: size - size // 2]
        keys, where = unique_coordinates(rows, cols, n)
        want_keys, want_where = np.unique(rows * n + cols, return_inverse=True)
        assert keys.dtype == want_keys.dtype and where.dtype == want_where.dtype
        assert keys.tobytes() == want_keys.tobytes()
        assert where.tobytes() == want_where.tobytes()
