"""The daemon's derivation-version and as-of endpoints (docs/http.md, docs/daemon.md,
docs/time-travel.md): ``GET``/``POST /api/v1/derivation``, ``GET /api/v1/derivation/preview``
and ``at_seq`` / ``as_of`` on ``/api/v1/memory``, ``/api/v1/explain`` and ``/api/v1/prompt``,
in process (Starlette's TestClient) with a manual clock, so each event is recorded when the
test says."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from creative_memory import DERIVATION_VERSION as D
from creative_memory import MemoryStore
from creative_memory.app.service import MemoryService
from creative_memory.engine.derivation.registry import known_versions
from creative_memory.http import DaemonFiles, openapi_document
from tests.conftest import ManualClock
from tests.test_server_api import Api, InProcess, assert_problem, signals, wire

#: (recorded at, pattern, type, tag): three negative tags and one positive one, ten minutes
#: apart. Under version 3 nothing reaches the block; under version 1 neon_palette does.
HISTORY = [
    ("2026-03-01T10:00:00Z", "neon_palette", "color", "too noisy"),
    ("2026-03-01T10:10:00Z", "neon_palette", "color", "not this"),
    ("2026-03-01T10:20:00Z", "airy_spacing", "layout", "love this"),
    ("2026-03-01T10:30:00Z", "neon_palette", "color", "wrong direction"),
]


def tag_event(i: int, at: str, pattern: str, ptype: str, text: str) -> dict[str, Any]:
    return wire(
        "explicit_tag_applied",
        artifact_id=f"t{i}",
        timestamp=at,
        tag_text=text,
        artifact_meta=signals(pattern, ptype),
    )


def feed(api: Api, clock: ManualClock, history: list[tuple[str, str, str, str]]) -> None:
    """POST each event with the clock at its time (the daemon records it then)."""
    for i, (at, pattern, ptype, text) in enumerate(history):
        clock.set(at)
        r = api.post("/api/v1/events", json=tag_event(i, at, pattern, ptype, text))
        assert r.status_code == 200 and r.json()["accepted"] == 1, r.text
    clock.set("2026-03-02T09:00:00Z")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "mem"


@pytest.fixture
def store(root: Path, clock: ManualClock) -> MemoryStore:
    clock.set("2026-03-01T09:00:00Z")
    return MemoryStore(root, clock=clock)  # the library's default version


@pytest.fixture
def api(root: Path, store: MemoryStore, clock: ManualClock) -> Iterator[Api]:
    daemon = InProcess(root, store)
    token = DaemonFiles(root).token_for("default")
    a = Api(daemon, token)
    feed(a, clock, HISTORY)
    yield a
    daemon.close()


def tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".daemon" not in p.parts
    }


def strengths(doc: dict[str, Any]) -> list[tuple[str, str, str, float]]:
    return [(r["scope"], r["pattern"], r["polarity"], r["signal_strength"])
            for r in doc["preferences"]]  # fmt: skip


# -- the derivation version ----------------------------------------------------------------------
def test_derivation_shows_switches_and_switches_back(api: Api, store: MemoryStore) -> None:
    info = api.get("/api/v1/derivation").json()
    assert info == {
        "user_id": "default",
        "in_force": D,
        "default": D,
        "chosen": False,
        "known": list(known_versions()),
        "history": [],
    }
    r = api.post("/api/v1/derivation", json={"version": "1"})
    assert r.status_code == 200
    assert r.json()["changed"] is True and "memory_enabled" in r.json()["settings"]
    assert api.post("/api/v1/derivation", json={"version": "1"}).json()["changed"] is False
    info = api.get("/api/v1/derivation").json()
    assert info["in_force"] == "1" and info["chosen"] is True
    assert info["history"] == [{"at": "2026-03-02T09:00:00.000Z", "version": "1", "previous": D}]
    assert api.get("/api/v1/memory").json()["derivation_version"] == "1"
    assert api.post("/api/v1/derivation", json={"version": D}).json()["changed"] is True
    assert api.get("/api/v1/derivation").json()["in_force"] == D
    # the library sees the same switch: one setting, every surface
    assert MemoryService(store).derivation("default").history[-1].previous == "1"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"version": "9"}, "version"),
        ({"version": 3}, "version"),
        ({}, "version"),
        ({"derivation_version": "2"}, "derivation_version"),  # the body key is `version`
    ],
)
def test_a_bad_switch_is_a_422_naming_the_key_and_changes_nothing(
    api: Api, root: Path, body: dict[str, Any], field: str
) -> None:
    before = tree(root)
    assert_problem(api.post("/api/v1/derivation", json=body), 422, field)
    assert tree(root) == before
    assert api.get("/api/v1/derivation").json()["in_force"] == D


def test_preview_is_the_services_answer_and_writes_nothing(
    api: Api, root: Path, store: MemoryStore
) -> None:
    before = tree(root)
    r = api.get("/api/v1/derivation/preview", params={"version": "1"})
    assert r.status_code == 200, r.text
    assert tree(root) == before
    doc = r.json()
    assert doc == msgspec.to_builtins(MemoryService(store).preview("default", "1"))
    assert (doc["from_version"], doc["to_version"], doc["project_id"]) == (D, "1", None)
    change = doc["change"]
    # the default takes the one "love this" about airy_spacing alone at its word; version 1
    # needs three tags
    assert [(i["pattern"], i["change"]) for i in change["injection"]] == [("airy_spacing", "out")]
    assert any("below the injection threshold" in x for x in change["injection"][0]["reasons"])
    assert change["block_changed"] is True and "airy_spacing" in change["block_before"]
    assert "neon_palette" in change["block_after"] and "airy_spacing" not in change["block_after"]
    # switching then gives exactly the previewed block
    api.post("/api/v1/derivation", json={"version": "1"})
    assert api.get("/api/v1/prompt").text == change["block_after"]


def test_preview_to_the_version_in_force_changes_nothing(api: Api) -> None:
    doc = api.get("/api/v1/derivation/preview", params={"version": D, "project_id": "p"}).json()
    assert doc["project_id"] == "p"
    assert doc["change"]["records"] == [] and doc["change"]["injection"] == []
    assert doc["change"]["block_changed"] is False and doc["change"]["unchanged"] == 2


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({}, "version"),
        ({"version": "9"}, "version"),
        ({"version": ""}, "version"),
        ({"version": ["1", "2"]}, "version"),
        ({"version": "1", "project_id": "a b"}, "project_id"),
        ({"version": "1", "project_id": "__proto__"}, "project_id"),
    ],
)
def test_bad_preview_input_is_a_422_naming_it(api: Api, params: dict[str, Any], field: str) -> None:
    assert_problem(api.get("/api/v1/derivation/preview", params=params), 422, field)


# -- at_seq / as_of ------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [0, 1, 3, 4])
def test_memory_at_seq_is_a_store_fed_only_the_first_events(
    api: Api, tmp_path: Path, clock: ManualClock, n: int
) -> None:
    doc = api.get("/api/v1/memory", params={"at_seq": n}).json()
    assert doc["as_of"]["at_seq"] == n and doc["as_of"]["events"] == n
    assert doc["event_count"] == n and doc["derivation_version"] == D
    assert doc["as_of"]["recorded_at"] == ("" if n == 0 else HISTORY[n - 1][0][:-1] + ".000Z")
    fresh_root = tmp_path / "fresh"
    fresh = InProcess(fresh_root, MemoryStore(fresh_root, clock=clock))
    try:
        other = Api(fresh, DaemonFiles(fresh_root).token_for("default"))
        feed(other, clock, HISTORY[:n])
        now = other.get("/api/v1/memory").json()
    finally:
        fresh.close()
    assert strengths(doc) == strengths(now)
    assert doc["retrieval"] == now["retrieval"]
    assert api.get("/api/v1/memory").json().get("as_of") is None  # the present


@pytest.mark.parametrize(
    ("as_of", "events"),
    [
        ("2026-02-28T00:00:00Z", 0),
        ("2026-03-01T10:15:00Z", 2),
        ("2026-03-01T11:15:00+01:00", 2),  # the same instant
        ("2026-03-01T10:20:00Z", 3),  # an event recorded at that instant is in
        ("2026-03-01", 0),  # a bare date is its midnight UTC (the CLI means the day's end)
        ("2026-03-02", 4),
    ],
)
def test_memory_as_of_a_time(api: Api, as_of: str, events: int) -> None:
    doc = api.get("/api/v1/memory", params={"as_of": as_of}).json()
    assert doc["as_of"]["events"] == events, doc["as_of"]


def test_a_past_view_is_conditional_like_the_present(api: Api) -> None:
    first = api.get("/api/v1/memory", params={"at_seq": 2})
    tag = first.headers["etag"]
    again = api.get("/api/v1/memory", params={"at_seq": 2}, headers={"If-None-Match": tag})
    assert again.status_code == 304
    other = api.get("/api/v1/memory", params={"at_seq": 3}, headers={"If-None-Match": tag})
    assert other.status_code == 200 and other.headers["etag"] != tag


def test_explain_and_prompt_at_a_point(api: Api) -> None:
    now = api.get("/api/v1/explain/color/neon_palette").json()
    assert [s["seq"] for s in now["steps"]] == [1, 2, 4]
    then = api.get("/api/v1/explain/color/neon_palette", params={"at_seq": 2}).json()
    assert [s["seq"] for s in then["steps"]] == [1, 2]
    assert then["as_of"]["at_seq"] == 2 and then["as_of"]["events"] == 2
    assert now["as_of"] is None  # the present has no point
    assert_problem(
        api.get("/api/v1/explain/layout/airy_spacing", params={"at_seq": 2}), 404, "pattern"
    )
    api.post("/api/v1/derivation", json={"version": "1"})
    block = api.get("/api/v1/prompt").text
    assert "neon_palette" in block
    earlier = api.get("/api/v1/prompt", params={"at_seq": 1, "format": "json"}).json()
    assert earlier["as_of"] == {
        "at_seq": 1,
        "recorded_at": "2026-03-01T10:00:00.000Z",
        "derivation_version": D,  # the version in force then, not the one chosen since
        "events": 1,
        "next_seq": 2,
    }
    # under the version in force then, the first "too noisy" (about neon alone) was taken at
    # its word; under version 1, chosen since, one tag is not enough
    assert "Avoid (medium): neon_palette" in earlier["block"]
    assert api.get("/api/v1/prompt", params={"as_of": "2026-02-01"}).text == ""
    assert api.get("/api/v1/prompt", params={"format": "json"}).json()["as_of"] is None
    # composing into a host prompt takes the same point
    host = {"host_prompt": "## Personal memory\n\nShort answers.\n", "format": "json"}
    past = api.post("/api/v1/prompt", params={"at_seq": 1}, json=host).json()
    assert past["as_of"]["at_seq"] == 1 and past["prompt"].startswith("## Personal memory")
    assert earlier["block"].strip() in past["prompt"] and "Short answers." in past["prompt"]
    present = api.post("/api/v1/prompt", json=host).json()
    assert present["as_of"] is None and "neon_palette" in present["prompt"]
    assert_problem(api.post("/api/v1/prompt", params={"at_seq": -1}, json=host), 422, "at_seq")


def test_forgotten_stays_forgotten_in_every_past_view(api: Api) -> None:
    r = api.delete("/api/v1/preferences/color/neon_palette")
    assert r.json()["events_removed"] == 3
    for n in range(len(HISTORY) + 1):
        doc = api.get("/api/v1/memory", params={"at_seq": n}).json()
        assert all(p["pattern"] != "neon_palette" for p in doc["preferences"]), n
    assert_problem(
        api.get("/api/v1/explain/color/neon_palette", params={"at_seq": 4}), 404, "pattern"
    )


PATHS = ["/api/v1/memory", "/api/v1/explain/color/neon_palette", "/api/v1/prompt"]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"at_seq": "-1"}, "at_seq"),
        ({"at_seq": "two"}, "at_seq"),
        ({"at_seq": "1.5"}, "at_seq"),
        ({"at_seq": ""}, "at_seq"),
        ({"at_seq": "9" * 40}, "at_seq"),
        ({"at_seq": ["1", "2"]}, "at_seq"),
        ({"as_of": "last tuesday"}, "as_of"),
        ({"as_of": ""}, "as_of"),
        ({"as_of": "2026-02-30"}, "as_of"),
        ({"at_seq": "1", "as_of": "2026-03-01"}, "at_seq"),
    ],
)
def test_a_bad_point_is_a_422_naming_it(
    api: Api, path: str, params: dict[str, Any], field: str
) -> None:
    assert_problem(api.get(path, params=params), 422, field)


def test_a_point_past_the_end_is_the_present(api: Api) -> None:
    doc = api.get("/api/v1/memory", params={"at_seq": 10**12}).json()
    last = api.get("/api/v1/memory", params={"at_seq": len(HISTORY)}).json()["as_of"]
    assert doc["as_of"]["events"] == len(HISTORY) and doc["as_of"] == last  # the last event
    assert strengths(doc) == strengths(api.get("/api/v1/memory").json())


# -- the OpenAPI document ------------------------------------------------------------------------
def test_the_document_declares_the_new_operations_and_parameters() -> None:
    doc = openapi_document()
    paths = doc["paths"]
    assert paths["/api/v1/derivation"]["get"]["operationId"] == "derivation"
    assert paths["/api/v1/derivation"]["post"]["operationId"] == "useDerivation"
    preview = paths["/api/v1/derivation/preview"]["get"]
    assert preview["operationId"] == "previewDerivation"
    version = next(p for p in preview["parameters"] if p["name"] == "version")
    assert version["required"] is True and version["schema"]["enum"] == list(known_versions())
    for path in ("/api/v1/memory", "/api/v1/explain/{preference_type}/{pattern}",
                 "/api/v1/prompt"):  # fmt: skip
        params = {p["name"]: p for p in paths[path]["get"]["parameters"]}
        assert params["at_seq"]["schema"] == {
            "type": "integer",
            "minimum": 0,
            "description": params["at_seq"]["schema"]["description"],
        }
        assert params["as_of"]["schema"]["type"] == "string", path
    schemas = doc["components"]["schemas"]
    assert {"DerivationInfo", "PreviewResult", "SettingsUpdate", "AsOf"} <= set(schemas)
    assert "as_of" in schemas["MemoryView"]["properties"]
