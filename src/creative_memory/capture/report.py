"""What a capture call did (docs/capture.md, "Reports, and one rule for every surface"): a
result per event with its reason, and the redaction counts."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["accepted", "coalesced", "rejected", "flushed", "failed", "inferred"]


@dataclass(frozen=True)
class CaptureResult:
    """What happened to one event. ``index`` is its position in the submitted batch
    (``None`` for flushed or inferred events)."""

    event: str
    status: Status
    reason: str | None = None
    artifact_id: str | None = None
    index: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "event": self.event,
            "status": self.status,
            "reason": self.reason,
            "artifact_id": self.artifact_id,
            "index": self.index,
        }


@dataclass
class CaptureReport:
    """What one capture call did: a result per event, and the redactions applied."""

    results: list[CaptureResult] = field(default_factory=list)
    redactions: Counter[str] = field(default_factory=Counter)

    def _count(self, *statuses: str) -> int:
        return sum(r.status in statuses for r in self.results)

    @property
    def accepted(self) -> int:
        """Submitted events taken (delivered now, or opening a coalescing window)."""
        return self._count("accepted")

    @property
    def coalesced(self) -> int:
        """Submitted events merged into a pending one (edit-saves, repeated thumbs)."""
        return self._count("coalesced")

    @property
    def rejected(self) -> int:
        """Submitted events refused by a capture rule or by validation."""
        return self._count("rejected")

    @property
    def flushed(self) -> int:
        """Pending coalesced events delivered during this call."""
        return self._count("flushed")

    @property
    def failed(self) -> int:
        """Pending coalesced events that the store refused when delivered."""
        return self._count("failed")

    @property
    def inferred(self) -> int:
        """Abandonments inferred from a new generation start."""
        return self._count("inferred")

    def extend(self, other: CaptureReport) -> None:
        """Add another report's results and redaction counts to this one."""
        self.results.extend(other.results)
        self.redactions.update(other.redactions)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, with the counts."""
        return {
            "accepted": self.accepted,
            "coalesced": self.coalesced,
            "rejected": self.rejected,
            "flushed": self.flushed,
            "failed": self.failed,
            "inferred": self.inferred,
            "redactions": dict(sorted(self.redactions.items())),
            "results": [r.to_dict() for r in self.results],
        }


def describe(report: CaptureReport) -> str:
    """One line for logs: ``accepted 3, coalesced 2, rejected 1 (...)``."""
    parts = [
        f"accepted {report.accepted}",
        f"coalesced {report.coalesced}",
        f"rejected {report.rejected}",
    ]
    if report.flushed or report.failed:
        parts.append(f"flushed {report.flushed}, failed {report.failed}")
    if report.inferred:
        parts.append(f"inferred {report.inferred}")
    return ", ".join(parts)
