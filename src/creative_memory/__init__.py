"""creative-memory: a local, deterministic preference memory for generative design tools.

The public API (README.md, docs/architecture.md) is re-exported here and nowhere else; its
names and signatures are pinned by tests/test_public_surface.py.
"""

from __future__ import annotations

from creative_memory._version import __version__
from creative_memory.app.feed import diagnostics_feed_line
from creative_memory.app.store import MemoryStore
from creative_memory.capture import adapter
from creative_memory.capture.layer import CaptureConfig, CaptureLayer, CaptureReport
from creative_memory.capture.redaction import RedactionPolicy
from creative_memory.engine.constants import (
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
from creative_memory.engine.errors import (
    CreativeMemoryError,
    LogDamaged,
    StorageError,
    ValidationError,
)
from creative_memory.engine.models import DecayResult, Preference, Refinement, RetrievalResult
from creative_memory.engine.prompt import (
    build_critique_block,
    build_generation_block,
    build_prompt_block,
    insert_memory_block,
    insert_memory_block_into_prompt,
    summarize_diagnostics,
)

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
    "LogDamaged",
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
