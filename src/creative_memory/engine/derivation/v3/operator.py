"""Version 3's solver: the normal matrix of a bucket as a sparse operator, solved by
preconditioned conjugate gradients (docs/performance.md, "Scaling with the vocabulary")."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any, Final

from creative_memory.engine.derivation.v2.model import Model

#: Conjugate gradients stop at ``‖r‖ ≤ CG_TOLERANCE · ‖b‖`` (or after ``CG_MAX_STEPS``);
#: the EM steps before the last of a pass, which only set the next step's precisions,
#: stop at ``CG_TOLERANCE_EM``.
CG_TOLERANCE: Final = 1e-12
CG_TOLERANCE_EM: Final = 1e-9
CG_MAX_STEPS: Final = 1000
#: Buckets with at most this many unknowns are solved directly (LU), larger ones by CG.
DENSE_MAX: Final = 256


def class_arrays(
    model: Model,
    lookup: Any,
    kept: dict[str, Any] | None = None,
    pairs: dict[str, tuple[int, Any]] | None = None,
) -> dict[str, tuple[Any, Any, Any]]:
    """Each noise class's ``A`` as symmetric coordinate arrays (rows, cols, values) over
    the canonical positions (``lookup``: column → position).

    A class's entries only ever grow, in insertion order, so the same number of them is
    the same coordinates. ``kept`` (per class: the number of entries, rows, cols and the
    off-diagonal mask of an earlier call with the same ``lookup``; the caller drops it when
    the layout changes) saves rebuilding them; ``pairs`` (per class: the number of entries
    and their column pairs, which no layout changes) saves reading again the pairs an
    earlier call read."""
    import numpy as np

    out: dict[str, tuple[Any, Any, Any]] = {}
    for c in sorted(model.nrows):
        xx = model.xx.get(c, {})
        m = len(xx)
        known = None if kept is None else kept.get(c)
        if known is not None and known[0] == m:
            _, rows, cols, off = known
        else:
            read = None if pairs is None else pairs.get(c)
            if read is not None and read[0] <= m:  # the pairs added since: at the end
                added = itertools.islice(xx, read[0], None)
                ij = np.fromiter(
                    (k for pair in added for k in pair), dtype=np.int64, count=2 * (m - read[0])
                )
                ij = np.concatenate([read[1], ij]) if read[0] else ij
            else:
                ij = np.fromiter((k for pair in xx for k in pair), dtype=np.int64, count=2 * m)
            if pairs is not None:
                pairs[c] = (m, ij)
            ij = lookup[ij].reshape(m, 2) if m else np.zeros((0, 2), dtype=np.int64)
            off = ij[:, 0] != ij[:, 1]
            rows = np.concatenate([ij[:, 0], ij[off, 1]])
            cols = np.concatenate([ij[:, 1], ij[off, 0]])
            if kept is not None:
                kept[c] = (m, rows, cols, off)
        vals = np.fromiter(xx.values(), dtype=np.float64, count=m)
        out[c] = (rows, cols, np.concatenate([vals, vals[off]]))
    return out


def unique_coordinates(rows: Any, cols: Any, n: int) -> tuple[Any, Any]:
    """``numpy.unique(rows · n + cols, return_inverse=True)`` for coordinates below ``n``:
    the sorted distinct keys and each entry's index among them — one answer, however it
    is found. Below 2¹⁶ positions, by two stable sorts of 16-bit coordinates (columns,
    then rows: numpy sorts those by radix) instead of one general sort of the keys."""
    import numpy as np

    keys = rows * n + cols
    if n > 1 << 16 or not len(keys):
        return np.unique(keys, return_inverse=True)
    order = cols.astype(np.uint16).argsort(kind="stable")
    order = order[rows.astype(np.uint16)[order].argsort(kind="stable")]
    ranked = keys[order]
    first = np.empty(len(ranked), dtype=bool)
    first[0] = True
    np.not_equal(ranked[1:], ranked[:-1], out=first[1:])
    where = np.empty(len(keys), dtype=np.intp)
    where[order] = np.cumsum(first) - 1
    return ranked[first], where


def _column_dots() -> Callable[..., Any]:
    """``numpy.einsum`` itself, without its Python wrapper where numpy exposes it (the same
    C function: the same sums; the wrapper only forwards to it when ``optimize`` is off)."""
    import numpy as np

    core = getattr(np, "_core", None)
    c_einsum = getattr(getattr(core, "multiarray", None), "c_einsum", None)
    return c_einsum if callable(c_einsum) else np.einsum


class Operator:
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
        # what operators over the same coordinates share (see _off_diagonal): the operators
        # of one fit, and of later fits while the coordinates stay the same (see ModelV3)
        self.structure: dict[str, Any] = {} if structure is None else structure
        self.ftype = ftype
        self.has = np.flatnonzero(ftype >= 0)
        self._level_of = ftype[self.has]  # the type level's position of each such feature
        self._level_bin = self._level_of - n0  # ... as an index among the levels
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
        masks = self.structure.get("diagonal")
        if masks is None or masks[0] != len(self.rows):  # the coordinates' masks (see below)
            diag = self.rows == self.cols
            tr = ftype[self.rows]
            same = (tr >= 0) & (tr == ftype[self.cols])
            masks = (len(self.rows), self.rows[diag], diag, tr[same] - n0, same)
            self.structure["diagonal"] = masks
        _, diag_rows, diag, level_rows, same = masks
        g[:n0] = np.bincount(diag_rows, weights=self.vals[diag], minlength=n0)
        if n > n0 and len(self.rows):
            g[n0:] += np.bincount(level_rows, weights=self.vals[same], minlength=n - n0)
        self.gram_diag = g
        self.prior = np.zeros(n)
        self._off: tuple[Any, Any, Any] | None = None
        self._dense: Any = None
        self._border_cache: tuple[Any, Any, Any] | None = None
        self._parts_cache: tuple[Any, tuple[Any, ...]] | None = None
        self._features: Any = None

    def gram(self, v: Any) -> Any:
        """``E A Eᵀ v`` for a vector ``v`` (length n) or a matrix (n × k)."""
        import numpy as np

        if v.ndim == 2:
            if v.shape[1] == 1:  # one column: the vector product is cheaper
                return self.gram(v[:, 0])[:, None]
            out = np.zeros(v.shape)  # column by column (see _column_product)
            add = self._column_product()
            for j in range(v.shape[1]):
                add(v[:, j], out[:, j])
            return out
        n0, has = self.n0, self.has
        u = v[:n0].copy()
        if len(has):
            u[has] += v[self._level_of]
        w = np.bincount(self.rows, weights=self.vals * u[self.cols], minlength=n0)
        if self.n == n0:
            return w
        if not len(has):
            return np.concatenate((w, np.zeros(self.n - n0)))
        levels = np.bincount(self._level_bin, weights=w[has], minlength=self.n - n0)
        return np.concatenate((w, levels))

    def inverse_diagonal(self) -> Any:
        """An estimate of ``diag(M⁻¹)`` at the current precisions: the first two terms of
        the Neumann series, ``1/Mᵢᵢ + Σ_{j≠i} Mᵢⱼ² / (Mᵢᵢ² Mⱼⱼ)``, over the off-diagonal
        entries of the extended matrix (features, intercept and type levels)."""
        import numpy as np

        if self._off is None:
            rows, cols, vals = self._off_diagonal()
            self._off = (rows, cols, vals * vals)  # the squares: the same at every step
        rows, cols, squares = self._off
        m = self.gram_diag + self.prior
        second = np.bincount(rows, weights=squares / m[cols], minlength=self.n)
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
            keys, where = unique_coordinates(rows, cols, self.n)
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

    def _preconditioner_parts(self) -> tuple[Any, ...]:
        """What ``P⁻¹`` needs at the current precisions (see :meth:`_preconditioner`):
        ``(inv_d,)`` for the diagonal fallback, else ``(at, m_fb, s_inv, f_inv)`` — the
        border's positions, ``M[features, border]``, ``S⁻¹`` and ``D_F⁻¹`` (a column).
        Kept for the next call while the precisions are the same values (the solves after
        a fit's last EM step run at its precisions)."""
        import numpy as np

        kept = self._parts_cache
        if kept is not None and kept[0].tobytes() == self.prior.tobytes():
            return kept[1]
        prior = self.prior.copy()
        d = self.gram_diag + prior
        inv_d = 1.0 / d
        parts: tuple[Any, ...] = (inv_d,)
        border = self._border()
        if border is not None:
            at, m_fb, m_bb = border  # border positions, M[features, border], G[border, border]
            f_inv = inv_d[1 : self.n0]  # the features (see _border)
            s_mat = m_bb + np.diag(prior[at]) - m_fb.T @ (f_inv[:, None] * m_fb)
            try:
                chol = np.linalg.cholesky(s_mat)
            except np.linalg.LinAlgError:
                pass
            else:
                lower_inv = np.linalg.inv(chol)
                # ``L⁻ᵀ L⁻¹`` from two buffers, as two inversions gave: numpy may compute a
                # product of one buffer with its own transpose by another BLAS routine
                s_inv = lower_inv.T @ lower_inv.copy()
                # f_inv as a column: the residuals are n × k (see _conjugate_gradients)
                parts = (at, m_fb, s_inv, f_inv[:, None])
        self._parts_cache = (prior, parts)
        return parts

    def _preconditioner(self) -> Callable[[Any], Any]:
        """``P⁻¹`` for the current precisions, where ``P`` keeps the border of ``M`` exact
        (the intercept and the type levels, which touch every feature of their type) and
        the feature block's diagonal: a block factorisation with the small Schur complement
        ``S = M_BB − M_BF D_F⁻¹ M_FB``. Falls back to the diagonal (Jacobi) when ``S`` is
        not positive definite or there is no border."""
        import numpy as np

        parts = self._preconditioner_parts()
        if len(parts) == 1:
            inv_d = parts[0]
            return lambda r: inv_d[:, None] * r
        at, m_fb, s_inv, f_inv = parts
        n0 = self.n0
        concatenate = np.concatenate

        def apply(r: Any) -> Any:
            # the border is position 0 and positions n0 … n-1, the features 1 … n0-1
            rf = r[1:n0]
            y_b = s_inv @ (r[at] - m_fb.T @ (f_inv * rf))
            return concatenate((y_b[:1], f_inv * (rf - m_fb @ y_b), y_b[1:]))

        return apply

    def _preconditioner_into(self, r: Any, z: Any) -> Callable[[], None]:
        """:meth:`_preconditioner` as ``z ← P⁻¹ r`` between two fixed n × k arrays: the
        same products on arrays of the same shapes and layouts (each matrix product the
        same BLAS call), written into buffers instead of new arrays."""
        import numpy as np

        parts = self._preconditioner_parts()
        multiply, subtract, matmul, copyto = np.multiply, np.subtract, np.matmul, np.copyto
        if len(parts) == 1:
            inv_d = parts[0][:, None]

            def jacobi() -> None:
                multiply(inv_d, r, out=z)

            return jacobi
        at, m_fb, s_inv, f_inv = parts
        n0, nb, k = self.n0, len(at), r.shape[1]
        rf, m_fb_t = r[1:n0], m_fb.T
        t, m = np.empty((n0 - 1, k)), np.empty((n0 - 1, k))
        g, h, y = np.empty((nb, k)), np.empty((nb, k)), np.empty((nb, k))
        z_head, z_mid, z_tail, y_head, y_tail = z[:1], z[1:n0], z[n0:], y[:1], y[1:]
        take = r.take

        def apply() -> None:
            multiply(f_inv, rf, out=t)
            matmul(m_fb_t, t, out=g)  # m_fb.T @ (f_inv * rf)
            take(at, axis=0, out=h, mode="clip")  # r[at]
            subtract(h, g, out=h)
            matmul(s_inv, h, out=y)  # y_b
            matmul(m_fb, y, out=m)
            subtract(rf, m, out=z_mid)
            multiply(f_inv, z_mid, out=z_mid)  # f_inv * (rf - m_fb @ y_b)
            copyto(z_head, y_head)
            copyto(z_tail, y_tail)

        return apply

    def _border(self) -> tuple[Any, Any, Any] | None:
        """The border's positions, ``G[features, border]`` and ``G[border, border]``."""
        import numpy as np

        if self._border_cache is None:
            at = np.concatenate([[0], np.arange(self.n0, self.n)]).astype(np.int64)
            eye = np.zeros((self.n, len(at)))
            eye[at, np.arange(len(at))] = 1.0
            cols = self.gram(eye)
            self._features = np.arange(1, self.n0)
            self._border_cache = (at, cols[self._features], cols[at])
        return self._border_cache

    def _column_product(self) -> Callable[[Any, Any], None]:
        """A function ``add(v, out)`` adding ``E A Eᵀ v`` for one column ``v`` (length n,
        any stride) to ``out`` in place, with its own buffers (one per solve: an operator
        kept on a fit may be used again later).

        These are the floats of the product of a block of columns as version 3 defines it —
        one scatter-add over every entry × column, then one over every feature × column for
        the type levels, into zeros (tests/test_operator_fast_paths.py keeps it as the
        reference) — at a fraction of its cost and memory: a scatter-add sums each bin in
        entry order, whichever other columns share the call, and ``out + w`` is ``w + out``
        (IEEE-754 sums commute, signed zeros included). Where the type levels are the
        block's appended zeros, ``out + 0.0`` is kept (a ``-0.0`` becomes ``+0.0``). One
        column at a time, the arrays stay the size of the entries: a block of k columns
        gathers, multiplies and scatters k times as much at once, which at tens of
        thousands of entries no longer fits the caches (docs/performance.md, "Long
        histories")."""
        import numpy as np

        bincount, multiply = np.bincount, np.multiply
        n0, has, level_of = self.n0, self.has, self._level_of
        rows, cols, vals, levels = self.rows, self.cols, self.vals, self.n - self.n0
        with_levels = levels > 0 and len(has) > 0
        # the features with a type level, as a slice when they are consecutive (the common
        # case: every type has a level): a view instead of a gather
        span: Any = has
        if len(has) and int(has[-1]) - int(has[0]) + 1 == len(has):
            span = slice(int(has[0]), int(has[-1]) + 1)
        u = np.empty(n0)
        products = np.empty(len(rows))
        gathered = np.empty(len(has))
        u_span = u[span] if isinstance(span, slice) else None
        copyto, add_to = np.copyto, np.add
        # the level sums visit the features round-robin across the levels: each level's
        # features still in their order, so each sum is the same, without one addition
        # waiting on the previous one (in layout order a level's features are consecutive)
        by_turn, turn_bin = self._level_turns()

        def add(v: Any, out: Any) -> None:
            copyto(u, v[:n0])
            if u_span is not None:
                v.take(level_of, out=gathered, mode="clip")
                add_to(u_span, gathered, out=u_span)  # u[has] + v[level_of]
            elif len(has):
                u[has] += v[level_of]
            u.take(cols, out=products, mode="clip")
            multiply(products, vals, out=products)  # vals · u[cols]
            w = bincount(rows, weights=products, minlength=n0)
            head = out[:n0]
            add_to(head, w, out=head)
            if with_levels:
                tail = out[n0:]
                w.take(by_turn, out=gathered, mode="clip")  # w[has] in turns
                add_to(tail, bincount(turn_bin, weights=gathered, minlength=levels), out=tail)
            elif levels:
                out[n0:] += 0.0

        return add

    def _level_turns(self) -> tuple[Any, Any]:
        """The features with a level (positions, and their level bins) reordered by turns:
        the first feature of every level, then the second of every level, … — each level's
        features in their own order (kept with the structure: they depend on the layout)."""
        import numpy as np

        has, level_bin = self.has, self._level_bin
        kept = self.structure.get("turns")
        if kept is not None and kept[0] == (self.n0, self.n, len(has)):
            return kept[1], kept[2]
        order = np.argsort(level_bin, kind="stable")
        ranked = level_bin[order]
        within = np.empty(len(has), dtype=np.int64)
        within[order] = np.arange(len(has)) - np.searchsorted(ranked, ranked, side="left")
        turns = np.lexsort((level_bin, within))  # by turn, then by level
        self.structure["turns"] = ((self.n0, self.n, len(has)), has[turns], level_bin[turns])
        return has[turns], level_bin[turns]

    def _apply_columns(self, v: Any, add: Callable[[Any, Any], None]) -> Any:
        """``M v`` for ``v`` (n × k) column by column through ``add`` (see
        :meth:`_column_product`): the floats of :meth:`apply`."""
        out = self.prior[:, None] * v
        for j in range(v.shape[1]):
            add(v[:, j], out[:, j])
        return out

    def _conjugate_gradients(self, b: Any, x0: Any | None, tolerance: float) -> Any:
        """Preconditioned conjugate gradients for every column of ``b`` (n × k) at once,
        from ``x0`` (default 0), each column with its own step sizes and its own stopping
        test (``‖r‖ ≤ tolerance · ‖b‖``) — a converged column is left as it is while the
        others go on. The iterations keep their arrays in C order (every caller's order:
        their buffers and matrix products assume it)."""
        import numpy as np

        b = np.ascontiguousarray(b)
        x0 = None if x0 is None else np.ascontiguousarray(x0)
        if b.shape[1] == 1:
            return self._conjugate_gradients_1(b, x0, tolerance)
        return self._conjugate_gradients_masked(b, x0, tolerance)

    def _conjugate_gradients_masked(self, b: Any, x0: Any | None, tolerance: float) -> Any:
        """:meth:`_conjugate_gradients` with a mask of the columns still going: the
        arithmetic that defines its result (the single-column path repeats it).

        While every column is going, the masks select every quotient and update, and the
        step is taken without them (in place, ``p ← z + β p`` as ``p ← p β + z``: IEEE-754
        products and sums commute); ``M p`` is taken column by column (:meth:`_apply_columns`:
        the same floats as :meth:`apply`)."""
        import numpy as np

        einsum, where, multiply = _column_dots(), np.where, np.multiply
        k = b.shape[1]
        prior = self.prior[:, None]
        x = np.zeros(b.shape) if x0 is None else x0.copy()
        r = b.copy() if x0 is None else b - self.apply(x)
        z_new = np.empty(b.shape)
        precondition = self._preconditioner_into(r, z_new)  # z_new ← P⁻¹ r
        q = np.empty(b.shape)
        add = self._column_product()

        def apply(v: Any) -> Any:  # q ← Λ v + gram(v), column by column
            multiply(prior, v, out=q)
            for j in range(k):
                add(v[:, j], q[:, j])
            return q

        limit = tolerance * tolerance * einsum("ij,ij->j", b, b)
        precondition()
        p = z_new.copy()
        rz = einsum("ij,ij->j", r, p)
        step = np.empty(b.shape)
        for _ in range(CG_MAX_STEPS):
            active = einsum("ij,ij->j", r, r) > limit
            if not active.any():
                break
            q = apply(p)
            pq = einsum("ij,ij->j", p, q)
            active &= pq > 0.0
            if active.all():
                alpha = rz / pq
                x += multiply(p, alpha, out=step)
                r -= multiply(q, alpha, out=step)
                precondition()
                rz_new = einsum("ij,ij->j", r, z_new)
                p *= rz_new / rz
                p += z_new
                rz = rz_new
                continue
            alpha = where(active, rz / where(active, pq, 1.0), 0.0)
            x += alpha * p
            r -= alpha * q
            precondition()
            rz_new = einsum("ij,ij->j", r, z_new)
            beta = where(active, rz_new / where(active, rz, 1.0), 0.0)
            p = where(active, z_new + beta * p, p)
            rz = where(active, rz_new, rz)
        return x

    def _conjugate_gradients_1(self, b: Any, x0: Any | None, tolerance: float) -> Any:
        """:meth:`_conjugate_gradients` for one column (``b``: n × 1), with the same
        arithmetic on the same arrays — the same products, sums and quotients, so the same
        floats — and its step sizes and stopping tests as scalars instead of masks.

        Only the order of operands of a commutative product or sum and where a result is
        written differ from the masked path (IEEE-754 ``a·b = b·a`` and ``a + b = b + a``,
        signed zeros included): ``M p`` is ``Λ p`` with ``E A Eᵀ p`` added in place, and the
        updates of ``x``, ``r`` and ``p`` are in place (``p ← z + β p`` as ``p ← p β + z``)."""
        import numpy as np

        dot = _column_dots()
        multiply = np.multiply
        add = self._column_product()
        prior = self.prior[:, None]
        x = np.zeros(b.shape) if x0 is None else x0.copy()
        r = b.copy() if x0 is None else b - self.apply(x)
        z = np.empty(b.shape)
        precondition = self._preconditioner_into(r, z)  # z ← P⁻¹ r
        limit = (tolerance * tolerance * dot("ij,ij->j", b, b))[0]
        precondition()
        p = z.copy()
        rz = dot("ij,ij->j", r, z)[0]
        q, step = np.empty(b.shape), np.empty(b.shape)
        p_column, q_column = p[:, 0], q[:, 0]
        for _ in range(CG_MAX_STEPS):
            if not dot("ij,ij->j", r, r)[0] > limit:
                break
            multiply(prior, p, out=q)
            add(p_column, q_column)  # q = Λ p + gram(p)
            pq = dot("ij,ij->j", p, q)[0]
            if not pq > 0.0:
                # the masked steps would move nothing from here on but the sign of a zero
                # (x + 0·p), the same at every later step: take that step once and stop
                x += 0.0 * p
                break
            alpha = rz / pq
            x += multiply(p, alpha, out=step)
            r -= multiply(q, alpha, out=step)
            precondition()
            rz_new = dot("ij,ij->j", r, z)[0]
            p *= rz_new / rz
            p += z
            rz = rz_new
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
