"""The ingest path's shortcuts give what the long way gives (docs/performance.md, "Daemon
CPU per ingest request")."""

from __future__ import annotations

import asyncio
import json
import logging
import random

import pytest
from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send

from creative_memory.engine.jsondepth import deeper_than, json_depth
from creative_memory.engine.jsontext import MAX_JSON_DEPTH
from creative_memory.engine.timeutil import _parse_grammar, try_parse_ts
from creative_memory.http.jsonlog import log
from creative_memory.http.middleware import RequestLog
from creative_memory.http.problems import Problem
from creative_memory.http.routes.common import read_json


def _common_shapes(rng: random.Random, n: int) -> list[str]:
    """Timestamps of the two common shapes with every field drawn around its limits."""
    out = []
    for _ in range(n):
        y = rng.choice([0, 1, 1600, 1900, 1970, 2000, 2024, 2100, 9999])
        mo, d = rng.randrange(0, 14), rng.randrange(0, 33)
        h, mi, s = rng.randrange(0, 26), rng.randrange(0, 61), rng.randrange(0, 61)
        text = f"{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}"
        if rng.random() < 0.5:
            text += f".{rng.choice([0, 0, 1, 500, 999]):03d}"
        out.append(text + "Z")
    return out


def test_the_common_shapes_parse_as_the_grammar_parses_them() -> None:
    rng = random.Random(11)
    texts = _common_shapes(rng, 30_000)
    # any Unicode decimal digit is a digit to both (\d and int())
    wide = str.maketrans("0123456789", "０１２３４５６７８９")
    texts += [t.translate(wide) for t in texts[:200]]
    texts += [
        "2024-02-29T24:00:00Z", "2023-02-29T10:00:00Z", "2024-12-31T24:00:00.000Z",
        "2024-12-31T24:00:00.001Z", "2024-12-31T24:01:00Z", "2024-12-31T25:00:00Z",
        "2024-01-01T00:00:00.12Z", "2024-01-01T00:00:00.1234Z", "2024-01-01T00:00:00+01:00",
        "2024-01-01T00:00:00", "2024-01-01T00:00Z", "2024-01-01", "x024-01-01T00:00:00Z",
    ]  # fmt: skip
    valid = 0
    for text in texts:
        expected = _parse_grammar(text)
        assert try_parse_ts(text) == expected, text
        valid += expected is not None
    assert 0 < valid < len(texts)  # both outcomes were exercised


# -- the request body's depth ----------------------------------------------------------------
def _request(body: bytes) -> Request:
    async def receive() -> Message:
        return {"type": "http.request", "body": body, "more_body": False}

    headers = [(b"content-type", b"application/json")]
    return Request({"type": "http", "method": "POST", "headers": headers}, receive)


def _read(body: bytes) -> object:
    return asyncio.run(read_json(_request(body)))


def test_the_depth_limit_holds_whether_or_not_the_body_is_scanned() -> None:
    deep = b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH
    assert _read(deep) is not None  # at the limit: accepted
    for too_deep in (b"[" + deep + b"]", b'{"a": ' + deep.replace(b"[]", b"[{}]") + b"}"):
        with pytest.raises(Problem) as err:
            _read(too_deep)
        assert (err.value.status, err.value.field) == (422, "body")
    # brackets inside strings are counted by the bound but are no levels: scanned, accepted
    value = {"event": "x", "notes": ["[{" * 100], "meta": {"signals": [{"a": "]}"}]}}
    assert _read(json.dumps(value).encode()) == value


def test_a_shallow_body_is_within_the_limit() -> None:
    rng = random.Random(3)

    def nested(depth: int) -> object:
        if depth == 0 or rng.random() < 0.2:
            return rng.choice([1, "[{", None, "x"])
        kids = [nested(depth - 1) for _ in range(rng.randrange(0, 3))]
        return kids if rng.random() < 0.5 else {str(i): k for i, k in enumerate(kids)}

    def levels(value: object) -> int:
        if isinstance(value, dict):
            return 1 + max(map(levels, value.values()), default=0)
        if isinstance(value, list):
            return 1 + max(map(levels, value), default=0)
        return 0

    shallow = 0
    for _ in range(3_000):
        value = nested(rng.randrange(0, 90))
        body = json.dumps(value).encode()
        shallow += body.count(b"[") + body.count(b"{") <= MAX_JSON_DEPTH  # not even scanned
        assert deeper_than(body, MAX_JSON_DEPTH) == (levels(value) > MAX_JSON_DEPTH), body
        assert json_depth(body) == levels(value)
    assert shallow > 100


# -- the access log --------------------------------------------------------------------------
class Recording(logging.Handler):
    """Keeps every record it is handed."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _logged(level: int, path: str) -> tuple[list[Message], list[logging.LogRecord]]:
    route = type("R", (), {"path": path})()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        scope["route"] = route
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    handler = Recording()
    old = log.level
    log.addHandler(handler)
    log.setLevel(level)
    try:
        asyncio.run(RequestLog(app)({"type": "http", "method": "GET"}, receive, send))
    finally:
        log.removeHandler(handler)
        log.setLevel(old)
    records = handler.records
    return sent, [r for r in records if getattr(r, "fields", {}).get("event") == "http_request"]


@pytest.mark.parametrize(
    ("level", "path", "lines"),
    [
        (logging.INFO, "/api/v1/events", 1),
        (logging.INFO, "/healthz", 0),  # /healthz is logged at DEBUG
        (logging.DEBUG, "/healthz", 1),
        (logging.WARNING, "/api/v1/events", 0),
    ],
)
def test_the_access_log_writes_a_line_exactly_when_its_level_is_on(
    level: int, path: str, lines: int
) -> None:
    sent, records = _logged(level, path)
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert len(records) == lines
    for r in records:
        fields = r.fields  # type: ignore[attr-defined]
        assert (fields["path"], fields["status"], fields["method"]) == (path, 201, "GET")
