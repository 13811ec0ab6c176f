"""Redaction before disk (docs/capture.md, "Redaction")."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from creative_memory import MemoryStore
from creative_memory.capture.layer import CaptureLayer
from creative_memory.capture.redaction import RedactionPolicy, redact_text

P = RedactionPolicy()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mail jane.doe+work@example.co.uk now", "mail [email] now"),
        ("Contact: a_b@sub.domain.io.", "Contact: [email]."),
        (
            "repo https://alice:s3cr3t@git.example.com/x.git ok",
            "repo [url-with-credentials] ok",
        ),
        ("db postgres://admin:pw@db:5432/app", "db [url-with-credentials]"),
        ("call +1 (555) 123-4567 today", "call [phone] today"),
        ("call 555-123-4567 or (555) 123 4567", "call [phone] or [phone]"),
        ("ring +44 20 7946 0958", "ring [phone]"),
        ("Festnetz 030 1234567", "Festnetz [phone]"),
        ("key sk-proj-abcDEF1234567890ghijKLMN", "key [secret]"),
        ("ghp_abcdefghijklmnopqrstuvwxyz0123456789 leaked", "[secret] leaked"),
        ("aws AKIAIOSFODNN7EXAMPLE", "aws [secret]"),
        ("password=hunter22 and api_key: 'abc123xyz'", "password=[secret] and api_key: '[secret]'"),
        ("Authorization: Bearer abc.def-ghi_jkl123", "Authorization: Bearer [secret]"),
        (
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3",
            "jwt [secret]",
        ),
        ("opaque Zx8Qm2Lp9Rt4Vw7Ky3Nb6Hc1Jd5F end", "opaque [secret] end"),
        (
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
            "[secret]",
        ),
    ],
)
def test_sensitive_text_becomes_typed_placeholder(text: str, expected: str) -> None:
    assert P.redact_text(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "padding: 10px 20px; color: #ff00ff; width: 1200px",
        "updated 2024-01-01 10:00 by the bridge",
        "grid 12 24 36 48 and ip 192.168.100.200",
        "MyLongComponentName2WithCamelCase",
        "font-family: 'Inter', sans-serif",
        "https://example.com/path?q=1",
        "v1.2.3 and 3 of 4",
    ],
)
def test_ordinary_design_text_is_left_alone(text: str) -> None:
    assert P.redact_text(text) == text


def test_counts_by_kind_and_extra_patterns() -> None:
    policy = RedactionPolicy(extra_patterns={"customer-id": r"CUST-\d{6}"})
    counts: Counter[str] = Counter()
    out = policy.redact_text("CUST-123456 wrote a@b.io and c@d.io", counts)
    assert out == "[customer-id] wrote [email] and [email]"
    assert counts == Counter({"email": 2, "customer-id": 1})
    assert redact_text("x CUST-000001", [("customer-id", r"CUST-\d{6}")]) == "x [customer-id]"


def test_bad_extra_pattern_name_is_refused() -> None:
    with pytest.raises(ValueError, match="placeholder name"):
        RedactionPolicy(extra_patterns={"Bad Name": "x"})


def test_redact_value_walks_diffs_including_keys() -> None:
    diff = {
        "before": {"text": "email me: bob@example.com"},
        "after": ["call 555-123-4567", 3, None, {"bob@example.com": True}],
    }
    assert P.redact_value(diff) == {
        "before": {"text": "email me: [email]"},
        "after": ["call [phone]", 3, None, {"[email]": True}],
    }


def test_known_tags_are_kept_verbatim_unknown_tag_text_is_redacted() -> None:
    assert P.redact_tag("  Love This ") == "  Love This "
    assert P.redact_tag("ping me at x@y.com") == "ping me at [email]"
    assert P.redact_tag(None) is None


def test_redact_event_drops_fields_not_needed() -> None:
    event = {
        "event": "artifact_edited_and_saved",
        "user_id": "u",
        "artifact_id": "a1",
        "session_id": "s",
        "project_id": None,
        "timestamp": "2025-01-01T00:00:00Z",
        "prompt": "make a landing page for jane@corp.com",
        "trigger": "manual_edit",
        "artifact_meta": {
            "signals": [{"preference_type": "color", "pattern": "neon", "why": "chat text"}],
            "html": "<p>jane@corp.com</p>",
        },
        "diff": {"text": "jane@corp.com"},
        "chose": {"artifact_id": "x", "artifact_meta": {"signals": []}, "html": "..."},
    }
    out = P.redact_event(event)
    assert set(out) == {
        "event",
        "user_id",
        "artifact_id",
        "session_id",
        "project_id",
        "timestamp",
        "artifact_meta",
        "diff",
        "chose",
    }
    assert out["artifact_meta"] == {"signals": [{"preference_type": "color", "pattern": "neon"}]}
    assert out["diff"] == {"text": "[email]"}
    assert out["chose"] == {"artifact_id": "x", "artifact_meta": {"signals": []}}
    assert "jane" not in json.dumps(out)


def test_store_diffs_off_keeps_only_the_fact_of_an_edit() -> None:
    out = RedactionPolicy(store_diffs=False).redact_event({"diff": {"a": "secret text"}})
    assert out == {"diff": {}}


def test_patterns_are_identifiers_unless_asked() -> None:
    ev = {"artifact_meta": {"signals": [{"preference_type": "t", "pattern": "a@b.io"}]}}
    assert P.redact_event(ev)["artifact_meta"]["signals"][0]["pattern"] == "a@b.io"
    strict = RedactionPolicy(redact_patterns=True)
    assert strict.redact_event(ev)["artifact_meta"]["signals"][0]["pattern"] == "[email]"


def test_nothing_sensitive_reaches_disk_through_capture(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "mem", derivation_version="1", clock=lambda: 1_735_689_600_000)
    cap = CaptureLayer(store)
    base = {
        "user_id": "alice",
        "session_id": "s1",
        "project_id": None,
        "timestamp": "2025-01-01T00:00:00Z",
        "artifact_meta": {"signals": [{"preference_type": "layout", "pattern": "airy"}]},
        "prompt": "landing page for jane@corp.com, call 555-123-4567",
    }
    report = cap.submit_many(
        [
            {
                **base,
                "event": "artifact_edited_and_saved",
                "artifact_id": "a1",
                "diff": {"copy": "reach jane@corp.com, token=abcd1234efgh"},
            },
            {**base, "event": "explicit_tag_applied", "artifact_id": "a2", "tag_text": "Love this"},
            {
                **base,
                "event": "explicit_tag_applied",
                "artifact_id": "a3",
                "tag_text": "mail jane@corp.com",
            },
        ],
        now="2025-01-01T00:00:00Z",
    )
    report.extend(cap.close())
    assert (report.accepted, report.rejected, report.flushed) == (2, 1, 1)
    rejected = next(r for r in report.results if r.status == "rejected")
    assert rejected.reason is not None and "[email]" in rejected.reason
    assert "jane" not in rejected.reason
    assert report.redactions["email"] >= 2
    blob = b""
    for path in (tmp_path / "mem").rglob("*"):
        if path.is_file():
            blob += path.read_bytes()
    assert b"Love this" in blob  # the tag itself is stored un-normalised
    assert re.search(rb"jane|555-123|abcd1234efgh|landing page", blob) is None
    assert b"[email]" in blob and b"[secret]" in blob
