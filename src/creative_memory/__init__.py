"""creative-memory: a local, deterministic preference memory for generative design tools.

The public API (api.md) is re-exported here and nowhere else.
"""

from __future__ import annotations

from . import adapter
from .capture import CaptureConfig, CaptureLayer, CaptureReport
from .constants import (
    ARCHIVE_DAYS,
    CHARS_PER_TOKEN,
    DECAY_DAYS,
    DERIVATION_VERSION,
    INJECTION_THRESHOLD,
    MAX_INJECTION_COUNT,
    MAX_PER_CATEGORY,
    MIN_NEG_FLOOR,
    NEGATIVE_BUDGET_RATIO,
    NEGATIVE_PRIORITY_MULTIPLIER,
    NORMALIZER,
    SCHEMA_VERSION,
    SIGNAL_WEIGHTS,
    TAG_POLARITY,
    TOKEN_BUDGET,
)
from .errors import CreativeMemoryError, StorageError, ValidationError
from .feed import diagnostics_feed_line
from .models import DecayResult, Preference, Refinement, RetrievalResult
from .prompt import (
    build_critique_block,
    build_generation_block,
    build_prompt_block,
    insert_memory_block,
    insert_memory_block_into_prompt,
    summarize_diagnostics,
)
from .redaction import RedactionPolicy
from .store import MemoryStore

__version__ = "0.1.0"

__all__ = [
    "ARCHIVE_DAYS",
    "CHARS_PER_TOKEN",
    "DECAY_DAYS",
    "DERIVATION_VERSION",
    "INJECTION_THRESHOLD",
    "MAX_INJECTION_COUNT",
    "MAX_PER_CATEGORY",
    "MIN_NEG_FLOOR",
    "NEGATIVE_BUDGET_RATIO",
    "NEGATIVE_PRIORITY_MULTIPLIER",
    "NORMALIZER",
    "SCHEMA_VERSION",
    "SIGNAL_WEIGHTS",
    "TAG_POLARITY",
    "TOKEN_BUDGET",
    "CaptureConfig",
    "CaptureLayer",
    "CaptureReport",
    "CreativeMemoryError",
    "DecayResult",
    "MemoryStore",
    "Preference",
    "RedactionPolicy",
    "Refinement",
    "RetrievalResult",
    "StorageError",
    "ValidationError",
    "__version__",
    "adapter",
    "build_critique_block",
    "build_generation_block",
    "build_prompt_block",
    "diagnostics_feed_line",
    "insert_memory_block",
    "insert_memory_block_into_prompt",
    "summarize_diagnostics",
]
