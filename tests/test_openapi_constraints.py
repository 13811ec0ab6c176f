"""The request schemas of the OpenAPI document state what the routes accept (docs/http.md,
"OpenAPI"): a project id's characters, length and reserved names, a type or pattern's
length, an ISO 8601 time, the enums of ``variant`` and ``version``, a reset's ``confirm``
and ``scope``, a repair's ``confirm``, the keys of ``project_ignore_global``.

Each case is a value for one parameter or body key of one operation: the document's schema
for it must admit it exactly when the daemon does (a refused value is a 422 naming the key;
the rest of the request is valid). The schema cannot say everything (a date that does not
exist, a pause end in the past): those values are not cases here. ``TS_PATTERN``, the
document's pattern for a time, is held to the parser by a property test.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from creative_memory.engine.timeutil import _TS_RE, TS_PATTERN, try_parse_ts
from creative_memory.http import DaemonConfig, DaemonFiles, create_app
from creative_memory.http.openapi import openapi_document
from creative_memory.http.routes import OPERATIONS
from tests.test_openapi_statuses import BASE, PORT, VALID
from tests.test_page_conditional import wire

with warnings.catch_warnings():  # Starlette 1.x prefers httpx2 for its TestClient
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

jsonschema_rs = pytest.importorskip("jsonschema_rs")  # schemathesis's validator

DOCUMENT = openapi_document()
BY_ID = {op.operation_id: op for op in OPERATIONS if op.operation_id}
LONG_ID, LONG_TEXT = "p" * 129, "y" * 1001
RESERVED = ("__proto__", "constructor", "prototype")
MANY = [f"p{i}" for i in range(1001)]  # one project more than a change may name

#: (operation, where, key, value, whether the daemon accepts it)
CASES: list[tuple[str, str, str, Any, bool]] = [
    *[("inspect", "query", "project_id", v, False) for v in (*RESERVED, LONG_ID, "a b", "é")],
    *[("inspect", "query", "project_id", v, True) for v in ("", "p1", "A-z_9")],
    ("prompt", "query", "project_id", "prototype", False),
    ("previewDerivation", "query", "project_id", "constructor", False),
    ("forget", "query", "project_id", LONG_ID, False),
    *[("inspect", "query", "as_of", v, False) for v in ("yesterday", "2026-03-01 10:00", "")],
    *[("inspect", "query", "as_of", v, True) for v in (" 2026-03-02 ", "2026", "+002026-01")],
    ("timeline", "query", "as_of", "2999-03-01T10:00:00.5+01:00", True),
    ("inspect", "query", "at_seq", -1, False),
    ("inspect", "query", "at_seq", 0, True),
    ("prompt", "query", "variant", "nope", False),
    ("prompt", "query", "format", "xml", False),
    ("previewDerivation", "query", "version", "99", False),
    ("import", "query", "mode", "upsert", False),
    *[("explain", "path", k, LONG_TEXT, False) for k in ("preference_type", "pattern")],
    ("timeline", "path", "pattern", LONG_TEXT, False),
    ("forget", "path", "preference_type", LONG_TEXT, False),
    ("forget", "path", "pattern", "y" * 1000, True),
    ("composePrompt", "body", "variant", "legacy", False),
    ("composePrompt", "body", "variant", "critique", True),
    *[("composePrompt", "body", "project_id", v, False) for v in ("__proto__", LONG_ID, "a/b")],
    *[("composePrompt", "body", "project_id", v, True) for v in ("", None, "p1")],
    ("reset", "body", "confirm", False, False),
    *[("reset", "body", "scope", v, False) for v in ("project:__proto__", "project:", "nope")],
    *[("reset", "body", "scope", v, False) for v in ("project:a:b", f"project:{LONG_ID}")],
    *[("reset", "body", "scope", v, True) for v in ("all", "global", "project:p1")],
    *[("repair", "body", "confirm", v, False) for v in (False, None, "true", 1)],
    ("repair", "body", "confirm", True, True),
    ("useDerivation", "body", "version", "0", False),
    *[("changeSettings", "body", "paused_until", v, False) for v in ("tomorrow", "")],
    *[("changeSettings", "body", "paused_until", v, True) for v in ("2999-01-01", None)],
    ("changeSettings", "body", "project_ignore_global", {"__proto__": True}, False),
    ("changeSettings", "body", "project_ignore_global", {LONG_ID: True}, False),
    ("changeSettings", "body", "project_ignore_global", {"": True}, False),
    ("changeSettings", "body", "project_ignore_global", dict.fromkeys(MANY, True), False),
    ("changeSettings", "body", "project_ignore_global", {"p1": True, "p2": False}, True),
]


def _schema(op_id: str, where: str, key: str) -> dict[str, Any]:
    """The document's schema for one parameter or body key of an operation."""
    op = BY_ID[op_id]
    entry = DOCUMENT["paths"][op.path][op.method.lower()]
    if where != "body":
        (param,) = [p for p in entry["parameters"] if p["name"] == key and p["in"] == where]
        schema: dict[str, Any] = param["schema"]
        return schema
    ref = entry["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    body = DOCUMENT["components"]["schemas"][ref.rsplit("/", 1)[1]]
    schema = body["properties"][key]
    return schema


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    root: Path = tmp_path_factory.mktemp("constraints") / "mem"
    token = DaemonFiles(root).token_for("default")
    app = create_app(DaemonConfig(root=root, port=PORT, log_level="critical"))
    with TestClient(app, base_url=BASE, headers={"Authorization": f"Bearer {token}"}) as c:
        r = c.post("/api/v1/events", json=[wire(f"a{i}", "neon_palette") for i in range(3)])
        assert r.json()["accepted"] == 3
        yield c


def _send(client: TestClient, op_id: str, where: str, key: str, value: Any) -> Any:
    method, path, kw = VALID[op_id]
    path, _, query = path.partition("?")
    params: dict[str, Any] = dict(parse_qsl(query))
    if op_id == "import":
        kw = {"content": client.get("/api/v1/export").content}
    if where == "query":
        params[key] = value
    elif where == "path":
        segments = path.split("/")
        segments[-1 if key == "pattern" else -2] = quote(value, safe="")
        path = "/".join(segments)
    else:
        kw = {"json": {**kw["json"], key: value}}
    return client.request(method, path, params=params, **kw)


@pytest.mark.parametrize(
    ("op_id", "where", "key", "value", "accepted"),
    CASES,
    ids=[f"{c[0]}-{c[2]}-{str(c[3])[:20]}" for c in CASES],
)
def test_the_schema_admits_a_value_exactly_when_the_daemon_does(
    client: TestClient, op_id: str, where: str, key: str, value: Any, accepted: bool
) -> None:
    schema = _schema(op_id, where, key)
    assert jsonschema_rs.validator_for(schema).is_valid(value) is accepted, schema
    r = _send(client, op_id, where, key, value)
    if accepted:
        assert r.status_code == 200, r.text
    else:
        assert r.status_code == 422, r.text
        assert r.json()["field"].startswith(key), r.json()


#: Strings around the grammar: its own shapes, with spaces, stray characters and digits.
_TIMES = st.one_of(
    st.from_regex(_TS_RE, fullmatch=True),
    st.tuples(
        st.sampled_from(["", " ", "\t", "\x1c", "\u3000", "x"]),
        st.from_regex(_TS_RE, fullmatch=True),
        st.sampled_from(["", " ", "\n", "\x85", "Z", "T"]),
    ).map("".join),
    st.text(alphabet="0123456789-+:.TZ \n", max_size=30),
)


@given(_TIMES)
def test_the_time_pattern_admits_what_the_parser_reads(text: str) -> None:
    """Whatever ``as_of`` / ``paused_until`` read (stripped, then ``try_parse_ts``) matches
    ``TS_PATTERN`` (Python's regex, as schemathesis reads it); what it does not match is
    refused. (A shape it admits may still be refused: 2026-02-30, a year -000000.)"""
    read = try_parse_ts(text.strip()) is not None
    matches = re.search(TS_PATTERN, text) is not None
    assert not read or matches
    if not matches:
        assert not read
