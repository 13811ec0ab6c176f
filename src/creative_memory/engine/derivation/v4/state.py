"""The version-4 state: version 3's fit with version 4's table, the statement floor and
an explanation of each record's injection decision (docs/quality.md, "Version 4").

:class:`DerivedStateV4` subclasses
:class:`~creative_memory.engine.derivation.v3.DerivedStateV3` deliberately: the same
statistics, fold hooks and scalable fit; another :attr:`table`, one more record rule
(:meth:`record`) and more in :meth:`evidence_for`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from creative_memory.engine.constants import INJECTION_THRESHOLD
from creative_memory.engine.derivation.v2.features import Feature, FeatureKey
from creative_memory.engine.derivation.v3 import DerivedStateV3
from creative_memory.engine.derivation.v4.table import V4_TABLE, V4Table
from creative_memory.engine.ids import bucket_of_scope
from creative_memory.engine.models import Preference

#: The evidence kind whose events are explicit statements of taste.
STATEMENT_KIND = "explicit_tag"


def stated(f: Feature, polarity: str) -> int:
    """How many explicit tags state ``polarity`` about the feature."""
    return f.counts.get(STATEMENT_KIND, [0, 0])[0 if polarity == "positive" else 1]


class DerivedStateV4(DerivedStateV3):
    """Version 4 state: version 3's fit and records, version 4's table, the statement
    floor, and the injection decision in :meth:`evidence_for`."""

    table: ClassVar[V4Table] = V4_TABLE

    def floored(self, f: Feature, polarity: str, strength: float, status: str) -> float:
        """``strength`` raised to the statement floor (decayed like any strength) when an
        explicit tag states ``polarity`` — the fitted estimate's direction — and the record
        is stable (an archived or contested record keeps its fitted strength)."""
        if status != "stable" or not stated(f, polarity):
            return strength
        floor = self.table.statement_floor * self.table.decay_factor**f.decay_steps
        return max(strength, floor)

    def record(
        self,
        bucket_id: str | None,
        key: FeatureKey,
        f: Feature,
        polarity: str,
        strength: float,
        status: str,
        scope: str | None = None,
    ) -> Preference:
        """Version 3's record of ``f``, with the statement floor applied."""
        strength = self.floored(f, polarity, strength, status)
        return super().record(bucket_id, key, f, polarity, strength, status, scope)

    def evidence_for(self, record: Preference) -> dict[str, Any]:
        """Version 3's evidence, plus ``injection``: how the record's strength came about
        (lower bound, provisional cap, decay, statement floor) and whether it crosses the
        injection threshold — and if not, what holds it back."""
        out = super().evidence_for(record)
        model = self.models[bucket_of_scope(record.scope)]
        f = model.features[(record.preference_type, record.pattern)]
        floor = stated(f, record.polarity) > 0 and record.polarity_status == "stable"
        out["injection"] = injection(self.table, out, f, record, floor=floor)
        return out


def injection(
    table: V4Table, evidence: dict[str, Any], f: Feature, record: Preference, *, floor: bool
) -> dict[str, Any]:
    """The injection decision of ``record`` from its version-3 ``evidence`` (estimate, sd,
    lower bound, provisional): the lower bound as a strength, after the provisional cap and
    decay, the statement floor (``floor``: it applies to the record), the final strength,
    whether it crosses the injection threshold and, in one sentence, why or what holds it
    back."""
    bound = min(max(evidence["lower_bound"] / table.full_effect, 0.0), 1.0)
    provisional = bool(evidence["provisional"])
    capped = min(bound, table.provisional_cap) if provisional else bound
    decayed = capped * table.decay_factor**f.decay_steps
    status = record.polarity_status
    crosses = record.signal_strength >= INJECTION_THRESHOLD and status == "stable"
    if status != "stable":
        why = f"not injected: the record is {status}"
    elif crosses and floor and decayed < INJECTION_THRESHOLD:
        why = "injected: an explicit tag states it (statement floor)"
    elif crosses:
        why = (
            f"injected: the lower bound {bound:.2f} of the effect, as a strength, "
            f"reaches the threshold {INJECTION_THRESHOLD:.2f}"
        )
    elif provisional and bound >= INJECTION_THRESHOLD > capped:
        why = "not injected: unary evidence only, capped"
    elif bound >= INJECTION_THRESHOLD:
        why = f"not injected: decayed by {f.decay_steps} step(s)"
    else:
        need = INJECTION_THRESHOLD * table.full_effect + table.z(record.polarity) * evidence["sd"]
        why = (
            f"not injected: the estimate {abs(evidence['estimate']):.3f} is under "
            f"{need:.3f}, the size it needs at its uncertainty "
            f"(z {table.z(record.polarity):.2f} · sd {evidence['sd']:.3f} + "
            f"{INJECTION_THRESHOLD:.2f} · full effect {table.full_effect:.2f})"
        )
    return {
        "threshold": INJECTION_THRESHOLD,
        "lower_bound_strength": bound,
        "after_provisional_cap": capped,
        "after_decay": decayed,
        "statement_floor": table.statement_floor if floor else None,
        "strength": record.signal_strength,
        "crosses": crosses,
        "why": why,
    }


__all__ = ["STATEMENT_KIND", "DerivedStateV4", "injection", "stated"]
