"""Derivation version ``"5"``: version 3's model, quicker to remember what the user keeps
rejecting, without version 4's phantoms (docs/quality.md, "Version 5").

Version 4 (:mod:`..v4`) guesses every noise class's residual variance at 1.0 per row and
floors every feature an explicit tag names. Both were chosen in a world without tags; with
hosts that forward a "not this" tag to every feature an artifact lists, they make phantoms
(the tag's innocent neighbours avoided). Version 5 keeps version 3's statistics, fit,
record rules and cost, and changes two things:

* **the noise prior per class** (:data:`.table.V5_TABLE`): the verdicts (thumbs,
  rejections, acceptances) — the commonest rows of a sparse history — are guessed at 1.0
  per row (the variance of a ±1 outcome is at most 1), the comparisons and statements at
  version 3's 2.0; the unweighted first pass guesses 1.0. The guess matters while a class
  has few rows and fades as rows accumulate;
* **the statement floor for a lone, uncontradicted tag**: a stable record that an
  explicit tag about its feature *alone* states (the artifact listed nothing else), and
  that no event of the feature contradicts, has at least ``statement_floor`` strength
  (0.50, injected), decayed like any strength. A tag forwarded to several features floors
  none of them, nor does a tag about a feature the user also accepted (for an Avoid) or
  rejected (for a Prefer): the fit weighs those like any statement. The floor follows the
  fit (a reversal flips the polarity or puts the record ``under_review``, and the floor no
  longer applies).

``evidence_for`` adds ``injection`` as version 4 does (lower bound, provisional cap, decay,
floor, whether the record crosses the injection threshold and why), with ``lone_tags`` and
``events_against``.
"""

from __future__ import annotations

from typing import Final

from creative_memory.engine.derivation.v5.model import ModelV5
from creative_memory.engine.derivation.v5.state import DerivedStateV5
from creative_memory.engine.derivation.v5.table import V5_TABLE, V5Table

VERSION: Final = "5"

__all__ = ["V5_TABLE", "VERSION", "DerivedStateV5", "ModelV5", "V5Table"]
