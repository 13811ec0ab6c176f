"""Engine constants (docs/engine.md, "Constants"). Values are part of the public contract."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final, Literal

NORMALIZER: Final = 2.0
DECAY_DAYS: Final = 90
ARCHIVE_DAYS: Final = 180
INJECTION_THRESHOLD: Final = 0.40
TOKEN_BUDGET: Final = 200
MAX_INJECTION_COUNT: Final = 20
NEGATIVE_PRIORITY_MULTIPLIER: Final = 1.2
NEGATIVE_BUDGET_RATIO: Final = 0.50
MIN_NEG_FLOOR: Final = 2
MAX_PER_CATEGORY: Final = 3
CHARS_PER_TOKEN: Final = 4
SCHEMA_VERSION: Final = "1.0"

#: Default derivation version used when a store is opened without one.
DERIVATION_VERSION: Final = "5"

# Constants the prototype used without naming them (docs/engine.md, "Constants").
HEADER_TOKEN_OVERHEAD: Final = 20
LINE_TOKEN_OVERHEAD: Final = 5
DECAY_FACTOR: Final = 0.70
REVERSAL_FACTOR_2: Final = 0.80
REVERSAL_FACTOR_3: Final = 0.60
REVERSAL_PENALTY_MULTIPLIER: Final = 2.0

#: The signal types, as the event type declares them: a log line naming another one does not
#: decode (the keys of :data:`SIGNAL_WEIGHTS`, in its order; a test keeps the two equal).
SignalType = Literal[
    "explicit_tag",
    "revert_after_edit",
    "manual_refinement",
    "repeated_acceptance",
    "thumbs_up",
    "thumbs_down",
    "single_rejection",
    "abandoned_generation",
]

SIGNAL_WEIGHTS: Final[Mapping[str, float]] = MappingProxyType(
    {
        "explicit_tag": 0.30,
        "revert_after_edit": 0.25,
        "manual_refinement": 0.20,
        "repeated_acceptance": 0.15,
        "thumbs_up": 0.10,
        "thumbs_down": -0.10,
        "single_rejection": -0.10,
        "abandoned_generation": -0.02,
    }
)

TAG_POLARITY: Final[Mapping[str, str]] = MappingProxyType(
    {
        "save this direction": "positive",
        "love this": "positive",
        "keep this style": "positive",
        "too noisy": "negative",
        "too crowded": "negative",
        "not this": "negative",
        "wrong direction": "negative",
        "too minimal": "negative",
        "too heavy": "negative",
    }
)
