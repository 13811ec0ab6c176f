"""Derivation version ``"2"``: pairwise-aware, with provisional unary evidence
(docs/engine.md, "Version 2").

Version 1 folds each signal into a record through the prototype's reversal ladder. That
cannot use contrastive evidence: a neutral feature that merely rode along with the real reason
collects random-signed evidence, and the ladder turns the noise into stable records. Version 2
instead treats every piece of feedback as an *observation about a set of features* and fits
one regularised linear paired-comparison model per bucket (global, or one project):

* a **comparison** "chose A over B" is a row ``x = 1[A] − 1[B]`` (features in both sides
  cancel; ``dimensions`` keeps only features whose ``preference_type`` starts with one of the
  given prefixes) with outcome ``y = +1``: the Thurstone model ``P(A ≻ B) = Φ(β·x)``,
  linearised;
* a **unary outcome** (accept, thumbs, abandon, rejection) is one bit about a whole artifact:
  the features the extractor listed for it (the adapter's signals of one handler call) form
  one row ``x = 1[listed]`` plus an intercept (the user's base rate), ``y = ±1``. Because
  every listed feature is a regressor, a salient-but-innocent feature that appears in
  accepted and rejected artifacts alike is explained away instead of being blamed;
* **explicit statements** (tag, edit-and-save, revert) are rows about the listed features
  without intercept.

Rows are weighted by the evidence-kind weights of the table (:data:`.table.V2_TABLE`).
The sufficient statistics ``XᵀWX`` and ``XᵀWy`` are integer sums, so the estimate depends
on the *set* of observations only — never on their order. Two structural facts of design
feedback shape the fit:

* an artifact carries **one pattern per type**, so only differences *within* a type are
  identified. Each type with two or more seen patterns gets a **type level** column
  (``x_t = Σ_{f∈t} x_f``, a linear map of the stored statistics: no extra state). It takes
  what the type's patterns have in common — e.g. "whenever the extractor lists a layout, a
  liked but rarely listed layout is absent" — so a salient neutral pattern is not blamed for
  it; a feature's estimate is its deviation from its type's level;
* most patterns are **neutral**: the feature prior is a spike-and-slab mixture (a tight
  spike at zero, a wide slab for the few that carry taste), fitted by a fixed number of EM
  steps (``fit_iterations``) that set each feature's ridge precision from its posterior slab
  probability. The type level is then where most of its patterns are, not their mean.

The estimate is the MAP ``β = (E XᵀWX Eᵀ + Λ)⁻¹ E XᵀWy`` at the final precisions ``Λ``; the
work is fixed, hence deterministic, and is redone lazily, only when a read needs it.

Each feature becomes one record. Its strength is a lower confidence bound on the effect,
``(|β| − z·sd) / full_effect`` clamped to [0, 1], with ``sd = sqrt(σ² [(E XᵀWX Eᵀ + Λ)⁻¹]_ff)``
(``σ²`` the residual variance estimated from the data): the confidence comes from the
evidence behind that particular estimate (collinear features share it). Records supported
only by unary outcomes are **provisional**: strength capped at ``provisional_cap`` (so the
label is at most ``medium``) until a reinforcing kind (tag, edit, revert or comparison)
supports the same direction. A feature whose unary and reinforcing
contributions materially disagree is marked ``under_review`` (not injected) — a large unary
aggregate is neither silently outweighed by a few comparisons nor silently kept against many.

Decay (``decay_pass`` events) works per feature as in version 1 (``decay_at`` = last evidence
+ 90 days; one ×0.70 step per pass that finds it due; archived 180 days after its last
evidence), but on the multiplier applied to the fitted strength; new evidence resets it.

The package: :mod:`.table` (the weighting table), :mod:`.features` (per-feature
bookkeeping), :mod:`.model` (statistics and fit of a bucket), :mod:`.state` (the state
class). :meth:`DerivedStateV2.evidence_for` returns, for a record, the estimate, its
uncertainty, the table in force, the type level, the slab probability and each evidence
kind's events and exact contribution to the estimate (the contributions add up to the
estimate).
"""

from __future__ import annotations

from typing import Final

from creative_memory.engine.derivation.v2.features import Feature, FeatureKey, content_id
from creative_memory.engine.derivation.v2.model import Fit, Model
from creative_memory.engine.derivation.v2.state import QUIET, DerivedStateV2
from creative_memory.engine.derivation.v2.table import V2_TABLE, KindRule, V2Table

VERSION: Final = "2"

__all__ = [
    "QUIET",
    "V2_TABLE",
    "VERSION",
    "DerivedStateV2",
    "Feature",
    "FeatureKey",
    "Fit",
    "KindRule",
    "Model",
    "V2Table",
    "content_id",
]
