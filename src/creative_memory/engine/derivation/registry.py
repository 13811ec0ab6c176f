"""The derivation versions, in one table (docs/engine.md, "Derivation").

A version string names one fixed fold: any change to any output of a listed version is a
new version, added here beside the old ones (``tests/test_golden_versions.py`` pins each).
Nothing registers itself: this table is the whole list.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Final

from creative_memory.engine.derivation.base import DerivedState as DerivedState
from creative_memory.engine.derivation.v1 import DerivedStateV1
from creative_memory.engine.derivation.v2 import DerivedStateV2
from creative_memory.engine.derivation.v3 import DerivedStateV3
from creative_memory.engine.derivation.v4 import DerivedStateV4
from creative_memory.engine.derivation.v5 import DerivedStateV5
from creative_memory.engine.errors import ValidationError
from creative_memory.engine.events import Event

#: Version string → the state class implementing its fold, in release order.
VERSIONS: Final[Mapping[str, type[DerivedState]]] = MappingProxyType(
    {
        "1": DerivedStateV1,
        "2": DerivedStateV2,
        "3": DerivedStateV3,
        "4": DerivedStateV4,
        "5": DerivedStateV5,
    }
)


def known_versions() -> tuple[str, ...]:
    """Every derivation version, in release order."""
    return tuple(VERSIONS)


def check_version(version: object) -> str:
    """``version`` if it names a derivation version, else a :class:`ValidationError`."""
    if not isinstance(version, str) or version not in VERSIONS:
        raise ValidationError(
            "derivation_version",
            f"Unknown derivation_version {version!r}. Known: {', '.join(VERSIONS)}.",
        )
    return version


def state_class(version: str) -> type[DerivedState]:
    """The state class of ``version`` (checked)."""
    return VERSIONS[check_version(version)]


def new_state(version: str) -> DerivedState:
    """A fresh, empty state for ``version``."""
    return state_class(version)(version)


def derive(events: Iterable[Event], version: str) -> DerivedState:
    """Fold ``events`` (in ``seq`` order) into a fresh state of ``version``. Pure."""
    state = new_state(version)
    for ev in events:
        state.apply(ev)
    return state
