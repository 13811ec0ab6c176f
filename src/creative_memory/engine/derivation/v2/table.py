"""The version-2 weighting table: data inside the version (docs/engine.md, "Version 2").

A typed, frozen :class:`V2Table`; :data:`V2_TABLE` is the table version 2 (and 3) runs
with. A state class reads it through its ``table`` class attribute, so a later version can
run the same model with another table. Tuned on ``benchmarks/taste_recovery.py``
(docs/quality.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

import msgspec

from creative_memory.engine.constants import DECAY_DAYS


class KindRule(msgspec.Struct, frozen=True, kw_only=True):
    """How the rows of one evidence kind (a signal type, or a comparison) enter the fit."""

    #: row precision in integer evidence units
    weight: int
    #: the row is a verdict on a whole artifact (it gets the intercept); else it is a
    #: statement about the listed features
    outcome: bool
    #: the kind releases the provisional cap
    reinforcing: bool
    #: the noise class whose residual variance weights the kind's rows in the final fit
    noise: str


class V2Table(msgspec.Struct, frozen=True, kw_only=True):
    """The weighting policy of the paired-comparison model (field order = explain's)."""

    #: every evidence kind, in the order records list their sources
    kinds: Mapping[str, KindRule]
    # Gaussian prior precisions (evidence units): a feature effect before the first EM
    # step, the intercept, each type level
    prior: int
    intercept_prior: int
    type_prior: int
    # spike-and-slab prior on feature effects: precision of the spike (neutral patterns)
    # and of the slab (patterns that carry taste), the slab's prior share, and the fixed
    # number of fits (EM steps + 1)
    spike_prior: int
    slab_prior: int
    slab_share: float
    fit_iterations: int
    # a comparison feature whose type the other side does not list: its contrast, in
    # halves (1 = x = ±½: it may be present there too, unlisted)
    unaligned_contrast_halves: int
    # residual variance per evidence unit of each noise class (and of the unweighted
    # first pass): prior guess and its weight in rows. The weighted pass guesses 1.
    sigma_prior: float
    sigma_prior_rows: int
    # strength = clamp((|β| − z·sd) / full_effect, 0, 1); z by polarity (an Avoid that is
    # wrong costs more than a missed one: it steers generation away from good options)
    z_positive: float
    z_negative: float
    full_effect: float
    # unary-only records: strength ≤ cap (label ≤ medium) until reinforced
    provisional_cap: float
    # a legacy record of strength s counts as round(s × legacy_units) units
    legacy_units: int
    # unary vs reinforcing contributions of opposite sign, both ≥ this ⇒ under_review
    contest_min: float
    decay_factor: float
    decay_days: int
    archive_days: int

    def z(self, polarity: str) -> float:
        """The z of the lower confidence bound for a record of ``polarity``."""
        return self.z_positive if polarity == "positive" else self.z_negative

    def as_dict(self) -> dict[str, Any]:
        """The table as plain JSON-ready data (what explain shows)."""
        out: dict[str, Any] = msgspec.to_builtins(
            msgspec.structs.replace(self, kinds=dict(self.kinds))
        )
        return out


def _kind(weight: int, outcome: bool, reinforcing: bool, noise: str) -> KindRule:
    return KindRule(weight=weight, outcome=outcome, reinforcing=reinforcing, noise=noise)


#: The table of versions 2 and 3.
V2_TABLE: Final = V2Table(
    kinds=MappingProxyType(
        {
            "pairwise_comparison": _kind(4, False, True, "comparison"),
            "explicit_tag": _kind(6, False, True, "statement"),
            "revert_after_edit": _kind(5, False, True, "statement"),
            "manual_refinement": _kind(4, True, True, "verdict"),
            "legacy_record": _kind(2, False, False, "statement"),
            "repeated_acceptance": _kind(3, True, False, "verdict"),
            "thumbs_up": _kind(2, True, False, "verdict"),
            "thumbs_down": _kind(2, True, False, "verdict"),
            "single_rejection": _kind(2, True, False, "verdict"),
            "abandoned_generation": _kind(1, True, False, "verdict"),
        }
    ),
    prior=8,
    intercept_prior=32,
    type_prior=32,
    spike_prior=160,
    slab_prior=8,
    slab_share=0.2,
    fit_iterations=6,
    unaligned_contrast_halves=1,
    sigma_prior=2.0,
    sigma_prior_rows=4,
    z_positive=1.0,
    z_negative=2.25,
    full_effect=0.30,
    provisional_cap=0.65,
    legacy_units=20,
    contest_min=0.15,
    decay_factor=0.70,
    decay_days=DECAY_DAYS,
    archive_days=180,
)
