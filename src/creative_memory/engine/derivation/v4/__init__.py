"""Derivation version ``"4"``: version 3's model, quicker to remember what the user keeps
rejecting (docs/quality.md, "Version 4").

Version 3 (:mod:`..v3`) holds back sparse evidence: a noise class with few rows takes its
residual variance mostly from the table's prior guess, 2.0 per row, so five rejections of
artifacts that all list one pattern leave its lower bound under the injection threshold,
and one explicit "too noisy" tag is not injected at all. Version 4 keeps version 3's
statistics, fit, record rules and cost, and changes two things:

* **the noise prior** (:data:`.table.V4_TABLE`): the prior guess of a class's residual
  variance per row is 1.0 (the variance of a ±1 outcome is at most 1) — it matters while a
  class has few rows and fades as rows accumulate, so dense histories fit as in version 3;
* **the statement floor**: a stable record whose direction an explicit tag states has at
  least ``statement_floor`` strength (0.50, injected), decayed like any strength. The floor
  follows the fit: when later evidence turns the estimate the other way, the record's
  polarity follows the estimate and the tag no longer props it; when unary and explicit
  evidence disagree materially the record is ``under_review`` (not injected), as in
  version 2.

``evidence_for`` adds ``injection``: the lower bound as a strength, after the provisional
cap and decay, the floor, the final strength, whether it crosses the injection threshold
and, in one sentence, why (or what holds it back).
"""

from __future__ import annotations

from typing import Final

from creative_memory.engine.derivation.v4.state import STATEMENT_KIND, DerivedStateV4, stated
from creative_memory.engine.derivation.v4.table import V4_TABLE, V4Table

VERSION: Final = "4"

__all__ = ["STATEMENT_KIND", "V4_TABLE", "VERSION", "DerivedStateV4", "V4Table", "stated"]
