"""Derivation version ``"3"``: version 2's model with a fit that scales (docs/performance.md).

Version 2 (:mod:`..v2`) fits one spike-and-slab paired-comparison model per bucket by
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

from typing import Final

from creative_memory.engine.derivation.v3.model import FitV3, ModelV3
from creative_memory.engine.derivation.v3.operator import (
    CG_MAX_STEPS,
    CG_TOLERANCE,
    CG_TOLERANCE_EM,
    DENSE_MAX,
    Operator,
)
from creative_memory.engine.derivation.v3.state import DerivedStateV3

VERSION: Final = "3"

__all__ = [
    "CG_MAX_STEPS",
    "CG_TOLERANCE",
    "CG_TOLERANCE_EM",
    "DENSE_MAX",
    "VERSION",
    "DerivedStateV3",
    "FitV3",
    "ModelV3",
    "Operator",
]
