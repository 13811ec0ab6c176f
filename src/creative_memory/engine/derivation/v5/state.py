"""The version-5 state: version 3's fit and records with version 5's table, a statement
floor for a tag about one feature alone, and version 4's explanation of each record's
injection decision (docs/quality.md, "Version 5").

:class:`DerivedStateV5` subclasses
:class:`~creative_memory.engine.derivation.v3.DerivedStateV3` deliberately: the same
statistics, fold hooks and scalable fit; another :attr:`table` and :attr:`model_class`, the
floor in :meth:`raise_stated` and more in :meth:`evidence_for`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from creative_memory.engine.derivation.v3 import DerivedStateV3, FitV3, ModelV3
from creative_memory.engine.derivation.v4.state import STATEMENT_KIND, injection
from creative_memory.engine.derivation.v5.model import ModelV5, events_against
from creative_memory.engine.derivation.v5.table import V5_TABLE, V5Table
from creative_memory.engine.ids import bucket_of_scope
from creative_memory.engine.models import Preference


class DerivedStateV5(DerivedStateV3):
    """Version 5 state: version 3's fit and records, version 5's table and model, the
    statement floor for lone tags, and the injection decision in :meth:`evidence_for`."""

    table: ClassVar[V5Table] = V5_TABLE
    model_class = ModelV5

    def raise_stated(
        self, model: ModelV3, fit: FitV3, positive: Any, strength: Any, status: Any
    ) -> Any:
        """The statement floor: a stable record that an explicit tag about its feature
        alone states — in the direction of the fitted estimate — and that no event of the
        feature contradicts has at least ``statement_floor`` strength, decayed like any
        strength. A tag forwarded to several features of an artifact floors none of them,
        nor does a tag about a feature the user also treated the other way (the fit weighs
        both); a record under review or archived keeps its strength."""
        tagged = model.xy.get(STATEMENT_KIND)  # the columns of every feature with a tag
        if not tagged:
            return strength
        assert isinstance(model, ModelV5) and fit.index is not None
        floor = self.table.statement_floor
        factor = self.table.decay_factor
        raised = strength
        for col in tagged:
            key = model.keys[col]
            assert key is not None
            f = model.features[key]
            i = fit.index[key]
            polarity = "positive" if positive[i] else "negative"
            if status[i] != 0 or model.lone_tags(f, polarity) <= 0 or events_against(f, polarity):
                continue
            value = floor * factor**f.decay_steps
            if value > raised[i]:
                if raised is strength:
                    raised = strength.copy()
                raised[i] = value
        return raised

    def evidence_for(self, record: Preference) -> dict[str, Any]:
        """Version 3's evidence, plus ``injection`` (as version 4's: lower bound, provisional
        cap, decay, statement floor, whether it crosses the threshold and why), with what
        the floor looks at: ``lone_tags`` (tags stating the record's direction about its
        feature alone) and ``events_against`` (events of the feature the other way)."""
        out = super().evidence_for(record)
        model = self.models[bucket_of_scope(record.scope)]
        assert isinstance(model, ModelV5)
        f = model.features[(record.preference_type, record.pattern)]
        lone = model.lone_tags(f, record.polarity)
        against = events_against(f, record.polarity)
        floor = lone > 0 and not against and record.polarity_status == "stable"
        out["injection"] = injection(self.table, out, f, record, floor=floor)
        out["injection"]["lone_tags"] = lone
        out["injection"]["events_against"] = against
        return out


__all__ = ["DerivedStateV5"]
