"""The one JSON rule for user-supplied text (engine/jsontext.py; docs/capture.md, "One JSON
rule"): the decoder itself, and the CLI's ``ingest`` applying it to each line of JSON lines
as the HTTP API applies it to a body (tests/test_parity.py compares the two on documents).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from creative_memory.cli.commands.ingest import parse_events
from creative_memory.cli.main import main as cli_main
from creative_memory.engine.jsontext import MAX_JSON_DEPTH, JsonTextError, decode_json

HUGE = b"7" * 5000  # more digits than Python converts (4,300 by default)


def reason(data: bytes) -> JsonTextError:
    with pytest.raises(JsonTextError) as err:
        decode_json(data)
    return err.value


# -- the decoder -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text", [b"NaN", b"[1, NaN]", b"Infinity", b'{"a": -Infinity}', b"[1,]", b"{} x", b"// c\n1"]
)
def test_what_rfc_8259_does_not_allow_is_not_json(text: bytes) -> None:
    err = reason(text)
    assert err.reason.startswith("not valid JSON (") and not err.too_deep, err.reason


def test_a_number_too_large_to_hold_is_infinity() -> None:
    assert decode_json(b"1e400") == math.inf
    assert decode_json(b"-1e400") == -math.inf
    assert decode_json(HUGE) == math.inf
    assert decode_json(b"-" + HUGE) == -math.inf
    doc = decode_json(b'{"a": [' + HUGE + b", 3, -" + HUGE + b'], "b": 12}')
    assert doc == {"a": [math.inf, 3, -math.inf], "b": 12}
    assert decode_json(b"1" * 4300) == int("1" * 4300)  # at the limit: an integer


def test_only_integer_tokens_are_read_as_infinity() -> None:
    """Digits inside strings, a fraction or an exponent are left as they are."""
    text = b'["' + HUGE + b'", "\\"' + HUGE + b'", ' + HUGE + b", 0." + HUGE + b", 1e-" + HUGE
    doc = decode_json(text + b", " + HUGE + b".5]")
    assert doc[:3] == [HUGE.decode(), '"' + HUGE.decode(), math.inf]
    assert 0.77 < doc[3] < 0.78 and doc[4] == 0.0 and doc[5] == math.inf


def test_an_error_after_a_long_integer_names_its_own_byte() -> None:
    """The integer is rewritten to a token of its own length: offsets stay the text's."""
    want = "not valid JSON (JSON is malformed: invalid character (byte {}))"
    assert reason(b"[" + HUGE + b", x]").reason == want.format(len(HUGE) + 3)


def test_the_rewrite_scans_each_byte_once() -> None:
    """An unterminated string of escaped quotes after a long integer: were each quote the
    start of a new scan to the end, 200 KB would take about a minute."""
    text = b"[" + HUGE + b', "' + b'\\"' * 100_000
    start = time.perf_counter()
    assert reason(text).reason.startswith("not valid JSON (JSON ends early")
    assert time.perf_counter() - start < 2.0


def test_the_integer_limit_is_pythons() -> None:
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(640)
    try:
        assert decode_json(b"[" + b"9" * 700 + b", " + b"9" * 640 + b"]") == [
            math.inf,
            int("9" * 640),
        ]
    finally:
        sys.set_int_max_str_digits(old)


def test_depth_utf8_bom_and_truncation() -> None:
    deep = b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH
    assert decode_json(deep) is not None
    err = reason(b"[" + deep + b"]")
    assert err.too_deep and err.reason == f"nested deeper than {MAX_JSON_DEPTH} levels"
    assert reason(b'["\xff"]').reason == "not valid UTF-8"
    assert decode_json(b'\xef\xbb\xbf{"a": 1}') == {"a": 1}
    assert "(byte 8)" in reason(b'\xef\xbb\xbf{"a" 1}').reason  # offsets count the BOM
    assert reason(b'{"a": ').reason == "not valid JSON (JSON ends early at byte 5)"


# -- the CLI, line by line -----------------------------------------------------------------------
def event(artifact: str, **extra: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "event": "explicit_tag_applied",
        "user_id": "alice",
        "artifact_id": artifact,
        "session_id": "s1",
        "project_id": None,
        "timestamp": "2026-03-01T10:00:00Z",
        "tag_text": "love this",
        "artifact_meta": {"signals": [{"preference_type": "color", "pattern": artifact}]},
    }
    ev.update(extra)
    return ev


def line(artifact: str, hole: bytes, key: str = "timestamp") -> bytes:
    return json.dumps(event(artifact, **{key: "HOLE"})).encode().replace(b'"HOLE"', hole)


def test_parse_events_applies_the_rule_to_each_line() -> None:
    deep = b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1)
    data = b"\n".join(
        [
            b"\xef\xbb\xbf" + json.dumps(event("good")).encode(),
            line("nan", b"NaN"),
            b"",
            line("inf", b"Infinity", "w"),
            line("huge", HUGE),
            line("deep", deep, "w"),
            b"\xef\xbb\xbf",  # blank once the mark is ignored
        ]
    )
    items = {i.where: i for i in parse_events(data)}
    assert list(items) == ["line 1", "line 2", "line 4", "line 5", "line 6"]
    assert items["line 1"].value == event("good")
    assert (items["line 2"].error or "").startswith("not valid JSON (")
    assert (items["line 4"].error or "").startswith("not valid JSON (")
    assert items["line 5"].error is None and items["line 5"].value["timestamp"] == math.inf
    assert items["line 6"].error == f"nested deeper than {MAX_JSON_DEPTH} levels"


def test_cli_ingest_judges_a_long_integer_with_its_event(tmp_path: Path) -> None:
    data = b"\n".join(
        [line("kept", b'"2026-03-01T10:00:00Z"'), line("huge", HUGE), line("nan", b"NaN")]
    )
    args = ["--data-dir", str(tmp_path / "mem"), "--user", "alice", "--json", "ingest", "-"]
    result = CliRunner().invoke(cli_main, args, input=data, catch_exceptions=False)
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    rows = {r["where"]: r for r in doc["results"]}
    assert (doc["accepted"], doc["rejected"]) == (1, 2)
    assert "timestamp" in rows["line 2"]["reason"] and "Infinity" in rows["line 2"]["reason"]
    assert rows["line 3"]["reason"].startswith("not valid JSON (")


def test_cli_ingest_refuses_a_pretty_printed_non_json_document_once() -> None:
    """A document spread over lines that is not JSON (no line decodes on its own) is one
    refusal where its decoder stopped, not one per fragment; JSON lines with one bad line
    keep the others, as above."""
    pretty = json.dumps([event("a"), event("b")], indent=2).replace('"love this"', "NaN").encode()
    items = parse_events(pretty)
    assert [i.where for i in items] == ["the document"]
    assert (items[0].error or "").startswith("not valid JSON (JSON is malformed")
    mixed = b"\n".join([json.dumps(event("good")).encode(), line("nan", b"NaN")])
    assert [(i.where, i.error is None) for i in parse_events(mixed)] == [
        ("line 1", True),
        ("line 2", False),
    ]


@pytest.mark.parametrize("text", [b'"\\ud800"', b'{"a": "x\\ud800y"}', b'["\\udbff"]'])
def test_a_lone_surrogate_escape_is_named_not_called_an_early_end(text: bytes) -> None:
    """msgspec reports a lone high surrogate escape as truncated input; the reason says
    what it is instead (Python's own reader takes the text whole)."""
    assert reason(text).reason == (
        "not valid JSON (a \\u escape names half of a surrogate pair, which is no character)"
    )
    assert reason(text[:-1]).reason.startswith("not valid JSON (JSON ends early")


def test_cli_ingest_keeps_a_reason_per_line_when_every_json_line_is_bad() -> None:
    data = b"\n".join([line("a", b"NaN"), line("b", b"Infinity"), b'{"event": '])
    items = parse_events(data)
    assert [i.where for i in items] == ["line 1", "line 2", "line 3"]
    assert all((i.error or "").startswith("not valid JSON (") for i in items)
