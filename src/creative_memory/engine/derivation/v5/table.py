"""The version-5 table: version 4's, with the prior guess of a noise class's residual
variance set per class (docs/quality.md, "Version 5")."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

import msgspec

from creative_memory.engine.derivation.v4.table import V4_TABLE, V4Table


class V5Table(V4Table, frozen=True, kw_only=True):
    """Version 4's table plus a prior guess of the residual variance per noise class (field
    order = explain's)."""

    #: the prior guess of a noise class's residual variance per row, for the classes that
    #: do not take ``sigma_prior`` (which stays the guess of the unweighted first pass)
    noise_priors: Mapping[str, float]

    def noise_prior(self, noise_class: str) -> float:
        """The prior guess of ``noise_class``'s residual variance per row."""
        return self.noise_priors.get(noise_class, self.sigma_prior)

    def as_dict(self) -> dict[str, Any]:
        """The table as plain JSON-ready data (what explain shows)."""
        plain = msgspec.structs.replace(self, noise_priors=dict(self.noise_priors))
        out: dict[str, Any] = V4Table.as_dict(plain)
        return out


#: The table of version 5: version 4's, except that comparisons and statements keep
#: version 3's prior guess of 2.0 per row — only the verdicts (thumbs, rejections,
#: acceptances), the commonest rows of a sparse history, are guessed at 1.0. Chosen on
#: seeds 1001–1100 with and without tags (docs/quality.md).
V5_TABLE: Final = V5Table(
    **{
        **{f: getattr(V4_TABLE, f) for f in V4_TABLE.__struct_fields__},
        "noise_priors": MappingProxyType({"comparison": 2.0, "statement": 2.0}),
    }
)
