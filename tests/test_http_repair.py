"""Checking and repairing a damaged log over HTTP (docs/http.md, docs/daemon.md; what a check
finds and what a repair keeps: docs/storage.md, "Check and repair"): ``GET /api/v1/check``
and ``POST /api/v1/repair``, in process (Starlette's TestClient), on both storage backends.

A log is damaged as a hand edit or a bad disk would: one stored event replaced by bytes
that are not an event (a line of ``events.jsonl``; a row of ``cm_events``). Until it is
repaired, anything that reads the whole log fails (a forget: ``500``); a check lists the
damage and writes nothing; a repair without ``confirm`` is the ``422`` naming it, and with
it drops the line, after which the log is healthy and a forget works.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from creative_memory.http import DaemonFiles
from tests.conftest import ManualClock
from tests.test_server_api import Api, InProcess, assert_problem, signals, wire

if TYPE_CHECKING:
    from tests.backends import Backend

pytest_plugins = ["tests.pg_fixtures", "tests.backends"]

USER = "default"
PATTERNS = ("neon_palette", "teal", "bento_grid")


@dataclass
class Site:
    """A daemon in process over one backend; ``api`` holds the token, ``anon`` nothing."""

    api: Api
    anon: Api
    backend: Backend


@pytest.fixture
def site(backend: Backend, tmp_path: Path, clock: ManualClock) -> Iterator[Site]:
    clock.set("2026-03-01T12:00:00Z")  # the wire refuses events dated over a day ahead
    store = backend.store(clock=clock)
    # the daemon's own files (.daemon/: tokens) beside the memory on the file store
    root = Path(backend.root) if backend.kind == "files" else tmp_path / "daemon"
    daemon = InProcess(root, store)
    token = DaemonFiles(root).token_for(USER)
    assert token is not None
    yield Site(Api(daemon, token), Api(daemon, None), backend)
    daemon.close()


def seed(api: Api) -> None:
    """One thumbs-down per pattern: three events, in the order of ``PATTERNS``."""
    events = [wire(artifact_id=f"a{i}", artifact_meta=signals(p)) for i, p in enumerate(PATTERNS)]
    r = api.post("/api/v1/events", json=events)
    assert r.status_code == 200 and r.json()["accepted"] == 3, r.text


def damage(backend: Backend, nth: int) -> str:
    """Replace the ``nth`` event (1-based) of the user's log with bytes that are not an
    event, as a hand edit would; what a check calls the place (``line N`` / ``seq N``)."""
    if backend.kind == "files":
        log = Path(backend.root) / USER / "events.jsonl"
        lines = log.read_bytes().split(b"\n")  # line 1 is the header
        lines[nth] = b'{"garbage"'
        log.write_bytes(b"\n".join(lines))
        return f"line {nth + 1}"
    import psycopg

    with psycopg.connect(backend.root, autocommit=True) as conn:
        row = conn.execute(
            "SELECT seq FROM cm_events WHERE user_id = %s ORDER BY seq OFFSET %s LIMIT 1",
            (USER, nth - 1),
        ).fetchone()
        assert row is not None
        conn.execute(
            "UPDATE cm_events SET line = 'garbage'::bytea WHERE user_id = %s AND seq = %s",
            (USER, row[0]),
        )
    return f"seq {row[0]}"


def check(api: Api) -> dict[str, Any]:
    r = api.get("/api/v1/check")
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def test_a_user_without_memory_is_healthy(site: Site) -> None:
    assert check(site.api) == {
        "user_id": USER,
        "healthy": True,
        "events": 0,
        "problems": [],
        "problems_total": 0,
    }
    r = site.api.post("/api/v1/repair", json={"confirm": True})
    assert r.status_code == 200, r.text
    assert r.json()["repaired"] is False and r.json()["events_kept"] == 0


def test_a_healthy_log_checks_healthy_and_a_repair_leaves_it_as_it_is(site: Site) -> None:
    seed(site.api)
    assert check(site.api) == {
        "user_id": USER,
        "healthy": True,
        "events": 3,
        "problems": [],
        "problems_total": 0,
    }
    before = site.backend.dump()
    r = site.api.post("/api/v1/repair", json={"confirm": True})
    assert r.status_code == 200, r.text
    assert r.json() == {
        "user_id": USER,
        "repaired": False,
        "events_kept": 3,
        "events_dropped": 0,
        "events_renumbered": 0,
        "dropped_saved_to": None,
        "settings_rewritten": False,
        "problems_total": 0,
        "problems": [],
    }
    assert site.backend.dump() == before


def test_a_damaged_log_is_listed_refused_and_repaired(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    api, backend = site.api, site.backend
    seed(api)
    where = damage(backend, 2)  # the event about "teal"
    damaged = backend.dump()

    found = check(api)
    assert found["healthy"] is False and found["events"] == 2
    assert [(p["where"], p["kind"]) for p in found["problems"]] == [(where, "unreadable")]
    assert found["problems"][0]["detail"]
    assert backend.dump() == damaged  # a check writes nothing

    # anything that reads the whole log fails until the repair
    problem = assert_problem(api.delete("/api/v1/preferences/color/neon_palette"), 500)
    assert problem["correlation_id"]
    # a 500 of its own type, saying how to mend it — and nothing internal (no path, no URL)
    assert problem["type"] == "urn:creative-memory:problem:log-damaged"
    assert "GET /api/v1/check" in problem["detail"] and "POST /api/v1/repair" in problem["detail"]
    assert "events.jsonl" not in problem["detail"] and "postgres" not in problem["detail"]

    for body in ({}, {"confirm": False}):
        assert_problem(api.post("/api/v1/repair", json=body), 422, "confirm")
    assert backend.dump() == damaged  # a refused repair writes nothing

    with caplog.at_level(logging.INFO, logger="creative_memory.http"):
        r = api.post("/api/v1/repair", json={"confirm": True})
    assert r.status_code == 200, r.text
    assert r.json() == {
        "user_id": USER,
        "repaired": True,
        "events_kept": 2,
        "events_dropped": 1,
        "events_renumbered": 0,
        "dropped_saved_to": None,  # HTTP saves nothing: the body cannot name a file
        "settings_rewritten": False,
        "problems_total": 1,
        "problems": found["problems"],
    }
    logged = [getattr(rec, "fields", {}) for rec in caplog.records]
    (line,) = [f for f in logged if f.get("event") == "repaired"]
    assert line["user"] == USER and line["events_dropped"] == 1 and line["repaired"] is True

    assert check(api) == {
        "user_id": USER,
        "healthy": True,
        "events": 2,
        "problems": [],
        "problems_total": 0,
    }
    gone = api.delete("/api/v1/preferences/color/neon_palette")
    assert gone.status_code == 200 and gone.json()["events_removed"] == 1, gone.text
    dropped = api.delete("/api/v1/preferences/color/teal")
    assert dropped.status_code == 200 and dropped.json()["events_removed"] == 0, dropped.text
    view = api.get("/api/v1/memory").json()
    assert [r["pattern"] for r in view["preferences"]] == ["bento_grid"]


@pytest.mark.parametrize("extra", ["save_dropped", "scope"])
def test_a_repair_takes_confirm_and_nothing_else(site: Site, tmp_path: Path, extra: str) -> None:
    """``save_dropped`` is the library's and the CLI's: over HTTP it would be a path on the
    daemon's disk chosen by the caller, so it is an unknown key like any other."""
    seed(site.api)
    damage(site.backend, 2)
    target = tmp_path / "dropped.jsonl"
    body = {"confirm": True, extra: str(target)}
    assert_problem(site.api.post("/api/v1/repair", json=body), 422, extra)
    assert not target.exists()
    assert check(site.api)["healthy"] is False  # nothing was repaired


def test_check_and_repair_need_credentials(site: Site) -> None:
    seed(site.api)
    damage(site.backend, 2)
    damaged = site.backend.dump()
    for headers in ({}, {"Authorization": "Bearer wrong-token"}):
        assert_problem(site.anon.get("/api/v1/check", headers=headers), 401)
        r = site.anon.post("/api/v1/repair", json={"confirm": True}, headers=headers)
        assert_problem(r, 401)
    assert site.backend.dump() == damaged
    assert check(site.api)["healthy"] is False
