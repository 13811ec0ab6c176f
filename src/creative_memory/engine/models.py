"""Public record shapes (docs/engine.md). msgspec Structs; ``to_dict()`` gives JSON-ready dicts."""

from __future__ import annotations

from typing import Any

import msgspec


class Preference(msgspec.Struct, kw_only=True):
    """A derived preference record (docs/engine.md, "Derivation": with its provenance)."""

    id: str
    preference_type: str
    pattern: str
    polarity: str
    signal_strength: float
    confidence: str
    sources: list[str]
    accept_count: int
    reject_count: int
    explicit_tags: list[str]
    last_seen: str
    decay_at: str
    scope: str
    reversal_signals: int
    reversal_first_seen: str | None
    polarity_status: str
    shadow_of: str | None
    derivation_version: str
    source_event_count: int
    last_derived_event_seq: int

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-ready data."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out

    def copy(self) -> Preference:
        """An independent copy (lists are copied too)."""
        return msgspec.structs.replace(
            self, sources=list(self.sources), explicit_tags=list(self.explicit_tags)
        )


class RetrievalResult(msgspec.Struct, kw_only=True):
    """What retrieval returns (docs/engine.md, "Retrieval")."""

    positives: list[Preference] = msgspec.field(default_factory=list)
    negatives: list[Preference] = msgspec.field(default_factory=list)
    project_overrides: list[Preference] = msgspec.field(default_factory=list)
    diagnostics: list[dict[str, Any]] = msgspec.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The retrieval as JSON-ready data."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out


class DecayResult(msgspec.Struct, kw_only=True):
    """How many records a decay pass weakens and archives."""

    decayed: int = 0
    archived: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The counts as JSON-ready data."""
        return {"decayed": self.decayed, "archived": self.archived}


class Refinement(msgspec.Struct, kw_only=True):
    """An entry of the refinement log (docs/engine.md, "Events")."""

    id: str
    artifact_id: str | None
    project_id: str | None
    timestamp: str
    diff: Any

    def to_dict(self) -> dict[str, Any]:
        """The entry as JSON-ready data."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out
