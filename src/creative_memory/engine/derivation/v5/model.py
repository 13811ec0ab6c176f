"""The version-5 model: version 3's statistics and fit, a prior guess of the residual
variance per noise class, and which explicit tags were about one feature alone
(docs/quality.md, "Version 5")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from creative_memory.engine.derivation.v2.features import Feature
from creative_memory.engine.derivation.v3.model import ModelV3
from creative_memory.engine.derivation.v4.state import STATEMENT_KIND
from creative_memory.engine.derivation.v5.table import V5Table


class ModelV5(ModelV3):
    """Version 3's model, with per-class noise priors and the shared-tag bookkeeping.

    A host forwards a tag ("not this") to every feature its extractor listed for the
    artifact: one signal event per feature, folded into one row. A tag is *about one
    feature alone* when its row has that feature only. The fold opens rows without calling
    the model (:func:`~creative_memory.engine.derivation.v2.bulk.fold_inline` inlines
    ``add_row``), but every second and later column of a row comes through
    :meth:`extend_row`; so the model counts, per feature and direction, the tag rows it
    *shares* with other features, and a feature's lone tags are its tags minus those.
    """

    def __init__(self, table: Any) -> None:
        super().__init__(table)
        # column → [shared tags for, shared tags against]
        self.shared: dict[int, list[int]] = {}

    def extend_row(self, kind: str, row: list[tuple[int, int]], col: int, y: int) -> None:
        """Version 2's row extension; a tag row that gains a second feature is no longer
        about its first one alone, nor about the new one."""
        if kind == STATEMENT_KIND:
            side = 0 if y > 0 else 1
            if len(row) == 1:
                self.shared.setdefault(row[0][0], [0, 0])[side] += 1
            self.shared.setdefault(col, [0, 0])[side] += 1
        super().extend_row(kind, row, col, y)

    def lone_tags(self, f: Feature, polarity: str) -> int:
        """How many explicit tags stated ``polarity`` about ``f`` and nothing else."""
        side = 0 if polarity == "positive" else 1
        total = f.counts.get(STATEMENT_KIND, [0, 0])[side]
        return total - self.shared.get(f.col, [0, 0])[side]

    def noise_prior(self, noise_class: str) -> float:
        """The prior guess of ``noise_class``'s residual variance per row, by class
        (:meth:`~.table.V5Table.noise_prior`)."""
        table = self.table
        assert isinstance(table, V5Table)
        return table.noise_prior(noise_class)

    # -- persistence ---------------------------------------------------------------------
    def dump(self) -> dict[str, Any]:
        """Version 2's statistics and bookkeeping, and the shared-tag counts."""
        out = super().dump()
        out["shared"] = [[c, v[0], v[1]] for c, v in self.shared.items()]
        return out

    @classmethod
    def load(cls, d: Mapping[str, Any], table: Any) -> ModelV5:
        """Inverse of :meth:`dump`."""
        m = super().load(d, table)
        assert isinstance(m, ModelV5)
        m.shared = {int(c): [int(a), int(b)] for c, a, b in d["shared"]}
        return m


def events_against(f: Feature, polarity: str) -> int:
    """How many events of any kind count against ``polarity`` for ``f`` (its record's
    ``reject_count`` for a positive record, ``accept_count`` for a negative one)."""
    _, accepts, rejects, _, _ = f.summary()
    return rejects if polarity == "positive" else accepts
