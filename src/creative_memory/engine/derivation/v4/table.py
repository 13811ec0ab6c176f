"""The version-4 table: version 2's weighting table with a calibrated noise prior and a
floor for explicit statements (docs/quality.md, "Version 4")."""

from __future__ import annotations

from typing import Final

from creative_memory.engine.derivation.v2.table import V2_TABLE, V2Table


class V4Table(V2Table, frozen=True, kw_only=True):
    """Version 2's table plus the statement floor (field order = explain's)."""

    #: a feature with an explicit tag in the direction of its fitted estimate, stable and
    #: not contested, has at least this strength (before decay): the user said so
    statement_floor: float


#: The table of version 4: version 2's, with the prior guess of a noise class's residual
#: variance per row at 1.0 instead of 2.0 (tuned on seeds 1001–1100, docs/quality.md) and
#: the statement floor at 0.50 (a medium record: injected).
V4_TABLE: Final = V4Table(
    **{
        **{f: getattr(V2_TABLE, f) for f in V2_TABLE.__struct_fields__},
        "sigma_prior": 1.0,
        "statement_floor": 0.50,
    }
)
