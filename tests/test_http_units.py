"""Units of the HTTP layer (docs/http.md): the msgspec error → field mapping, the generated
OpenAPI document, and the one exception → problem mapping."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import msgspec
import pytest

from creative_memory.app.service import Conflict, NotFound, SettingsChange, ValidationError
from creative_memory.engine.errors import struct_error_field
from creative_memory.http.openapi import openapi_document
from creative_memory.http.problems import problem_for
from creative_memory.http.routes import OPERATIONS
from creative_memory.http.schemas import ComposeRequest


@pytest.mark.parametrize(
    ("body", "type_", "field"),
    [
        (b'{"extra": 1}', SettingsChange, "extra"),
        (b'{"paused": "yes"}', SettingsChange, "paused"),
        (b'{"project_ignore_global": {"p1": "on"}}', SettingsChange, "project_ignore_global"),
        (b"[]", SettingsChange, "body"),
        (b"{}", ComposeRequest, "host_prompt"),
        (b'{"host_prompt": "", "format": "xml"}', ComposeRequest, "format"),
    ],
)
def test_msgspec_errors_name_the_field(body: bytes, type_: type, field: str) -> None:
    with pytest.raises(msgspec.ValidationError) as err:
        msgspec.json.decode(body, type=type_)
    assert struct_error_field(str(err.value)) == field


def test_the_api_table_in_daemon_md_is_the_openapi_document() -> None:
    """docs/daemon.md's table of routes lists exactly the documented operations; the page's
    routes (``/``, static files, ``/login``, ``/logout``) are neither in the table nor in
    the document, and are all mounted."""
    text = (Path(__file__).parent.parent / "docs" / "daemon.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(GET|POST|PUT|DELETE) (/[^`?]*)[^`]*` \|", text, flags=re.M)
    doc = openapi_document()
    documented = {(m.lower(), p) for p, ms in doc["paths"].items() for m in ms}
    assert {(m.lower(), p) for m, p in rows} == documented
    page = {(op.method.lower(), op.path) for op in OPERATIONS if not op.operation_id}
    assert ("post", "/logout") in page and ("get", "/login") in page
    assert not page & documented


def test_openapi_is_generated_from_the_operation_table() -> None:
    doc = openapi_document()
    assert doc["openapi"] == "3.1.0"
    documented = {(op.path, op.method.lower()) for op in OPERATIONS if op.operation_id}
    assert {(p, m) for p, ms in doc["paths"].items() for m in ms} == documented
    schemas = doc["components"]["schemas"]
    assert schemas["SettingsChange"]["additionalProperties"] is False
    assert "events_removed" in schemas["ForgetResult"]["properties"]
    refs = msgspec.json.encode(doc).decode().count('"$ref":"#/components/schemas/')
    assert refs > 20
    for path in doc["paths"].values():
        for op in path.values():
            assert "500" in op["responses"]


def test_exceptions_map_to_one_problem_each(caplog: pytest.LogCaptureFixture) -> None:
    assert problem_for(ValidationError("until", "bad"), "GET", "/x").status == 422
    assert problem_for(NotFound("pattern", "none"), "GET", "/x").field == "pattern"
    assert problem_for(Conflict("mode", "busy"), "GET", "/x").status == 409
    with caplog.at_level(logging.ERROR, logger="creative_memory.http"):
        bare = problem_for(ValueError("secret internals"), "GET", "/x")
    assert bare.status == 500 and "secret" not in bare.detail
    cid = bare.extra["correlation_id"]
    assert any(getattr(r, "fields", {}).get("correlation_id") == cid for r in caplog.records)
