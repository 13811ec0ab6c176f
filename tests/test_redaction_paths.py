"""Redaction at the one door into the log (docs/capture.md, "Redaction"): every path that
appends events — capture, adapter, direct library calls, archive import, prototype migration —
passes the store's redaction policy, with the same corpus of personal data in every free-text
field. Turning it off is explicit (``MemoryStore(redaction=False)``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from creative_memory import CaptureLayer, MemoryStore, adapter
from creative_memory.app.service import MemoryService
from creative_memory.engine.events import CHAIN_GENESIS, RefinementEvent, sequenced
from creative_memory.engine.portability.archive import encode_archive
from creative_memory.engine.settings import UserSettings
from tests.conftest import ManualClock

U = "alice"
NOW = "2026-03-01T10:00:00Z"
#: One of each kind the default policy knows (docs/capture.md, "Redaction").
PII = {
    "email": "jane.doe@example.com",
    "phone": "+1 415 555 0134",
    "url-with-credentials": "https://admin:hunter2@internal.example.com/x",
    "secret": "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
}
TEXT = "contact " + " / ".join(PII.values())


def event(**over: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "user_id": U,
        "artifact_id": "a1",
        "session_id": "s1",
        "project_id": None,
        "timestamp": NOW,
        "artifact_meta": {"signals": [{"preference_type": "color", "pattern": "calm"}]},
    }
    ev.update(over)
    return ev


def leaks(root: Path) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path.name}: {kind}" for kind, v in PII.items() if v.encode() in data]
    return found


def archive_with_pii() -> bytes:
    at = "2026-03-01T10:00:00.000Z"  # NOW as the store writes it (archives hold that)
    ref = RefinementEvent(at=at, recorded_at=at, artifact_id="a1", diff={"note": TEXT})
    return encode_archive(U, UserSettings(), sequenced([ref], 0, CHAIN_GENESIS))


def prototype_with_pii(tmp: Path) -> Path:
    src = Path(__file__).parent / "fixtures" / "prototype" / "designer" / "preferences.json"
    doc = json.loads(src.read_text())
    doc["refinement_log"] = [
        {"id": "ref_pii", "artifact_id": "a1", "project_id": None,
         "timestamp": NOW, "diff": {"note": TEXT}},
    ]  # fmt: skip
    doc["global_preferences"][0]["explicit_tags"] = [TEXT]
    path = tmp / "preferences.json"
    path.write_text(json.dumps(doc))
    return path


Path_ = Callable[[MemoryStore, Path], object]
PATHS: dict[str, Path_] = {
    "log_refinement": lambda s, t: s.log_refinement(U, artifact_id="a1", diff={"n": TEXT}),
    "adapter edit-save diff": lambda s, t: adapter.on_artifact_edited_and_saved(
        s, event(diff={"before": TEXT, "after": [TEXT]})
    ),
    "ingest_signal tag_text": lambda s, t: s.ingest_signal(
        U,
        {
            "signal_type": "explicit_tag",
            "polarity": "positive",
            "pattern": "calm",
            "preference_type": "color",
            "scope": "global",
            "tag_text": TEXT,
        },
    ),
    "adapter comparison dimensions": lambda s, t: adapter.on_pairwise_comparison(
        s,
        event(
            chose={"artifact_id": "a1", "artifact_meta": {"signals": []}},
            over={"artifact_id": "a2", "artifact_meta": {"signals": []}},
            dimensions=[TEXT],
        ),
    ),
    "archive import (new log)": lambda s, t: MemoryService(s).import_archive(U, archive_with_pii()),
    "archive import (merge)": lambda s, t: (
        s.log_refinement(U, diff={"x": 1}),
        MemoryService(s).import_archive(U, archive_with_pii(), "merge"),
    ),
    "archive import (replace)": lambda s, t: MemoryService(s).import_archive(
        U, archive_with_pii(), "replace"
    ),
    "prototype migration": lambda s, t: s.import_prototype(U, prototype_with_pii(t)),
}


@pytest.mark.parametrize("name", list(PATHS))
def test_every_path_into_the_log_is_redacted(tmp_path: Path, name: str) -> None:
    root = tmp_path / "mem"
    store = MemoryStore(root, clock=ManualClock(NOW))
    PATHS[name](store, tmp_path)
    store.list_preferences(U)
    assert store.events(U), "something was stored"
    store.close()
    assert leaks(root) == []


def test_the_capture_layer_redacts_once_and_counts_once(tmp_path: Path) -> None:
    root = tmp_path / "mem"
    store = MemoryStore(root, clock=ManualClock(NOW))
    layer = CaptureLayer(store)
    report = layer.submit(dict(event(diff={"note": TEXT}), event="artifact_edited_and_saved"), NOW)
    report.extend(layer.close())
    assert dict(report.redactions) == {k: 1 for k in PII}
    store.close()
    assert leaks(root) == []


def test_redaction_is_idempotent() -> None:
    from creative_memory import RedactionPolicy

    policy = RedactionPolicy()
    once = policy.redact_text(TEXT)
    assert policy.redact_text(once) == once
    assert all(v not in once for v in PII.values())


def test_turning_redaction_off_is_explicit(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "mem", clock=ManualClock(NOW), redaction=False)
    store.log_refinement(U, diff={"n": TEXT})
    assert store.refinement_log(U)[0].diff == {"n": TEXT}
