"""One table of cases through the library, the CLI and the HTTP API (docs/architecture.md,
"One answer on every surface").

Every case names an operation and its input; each surface turns it into its own call (a
``MemoryStore`` method, a ``creative-memory`` command line run in-process, an HTTP request
to the ASGI app) and the outcomes are compared: the same acceptance, an error of the same
class naming the same field (each surface spells the field its own way: ``until`` /
``--until`` / ``paused_until``), the same counts, and nothing written when it fails.

The "lib" runner calls ``MemoryStore``; operations that only the application service
offers (docs/time-travel.md: ``derivation``, switching it, ``preview``, and ``inspect`` /
``explain`` / ``prompt`` at a point in the past) run through ``MemoryService`` over the
same store.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from creative_memory import CaptureLayer, MemoryStore
from creative_memory.app.service import MemoryService
from creative_memory.cli.main import main as cli_main
from creative_memory.http.app import create_app
from creative_memory.http.auth import DaemonFiles
from creative_memory.http.config import DaemonConfig

U = "alice"
PORT = 7744
FUTURE = "2999-01-01T00:00:00Z"
PAST = "2001-01-01T00:00:00Z"
JSON_TYPE = {"content-type": "application/json"}


def wire(kind: str, pattern: str, ptype: str = "color", **extra: Any) -> dict[str, Any]:
    """A wire-format event for ``U`` (explicit tags are delivered at once: no coalescing)."""
    ev: dict[str, Any] = {
        "event": kind,
        "user_id": U,
        "artifact_id": f"art-{pattern}",
        "session_id": "s1",
        "project_id": None,
        "timestamp": "2026-03-01T10:00:00Z",
        "artifact_meta": {"signals": [{"preference_type": ptype, "pattern": pattern}]},
    }
    ev.update(extra)
    return ev


def tag(pattern: str, text: str, ptype: str = "color", **extra: Any) -> dict[str, Any]:
    return wire("explicit_tag_applied", pattern, ptype, tag_text=text, **extra)


SEED = [
    tag("neon_palette", "too noisy"),
    tag("neon_palette", "not this"),
    tag("airy_spacing", "love this", "layout"),
    tag("condensed_display", "love this", "typography", project_id="landing"),
]


#: Three events, the second dated ``1e400`` (valid JSON, too large for a float).
OUT_OF_RANGE = (
    "["
    + ", ".join(
        json.dumps(e)
        for e in (
            tag("grid", "love this", "layout"),
            {**tag("mono", "not this", "typography"), "timestamp": "HUGE"},
            tag("serif", "love this", "typography"),
        )
    ).replace('"HUGE"', "1e400")
    + "]"
).encode()


def raw_batch(replace: bytes, second: dict[str, Any] | None = None) -> bytes:
    """Three events on one line, the second's ``"HOLE"`` string replaced by ``replace``
    (bytes that are not JSON, or a number no float holds): the same bytes are the HTTP
    body and the CLI's input (docs/capture.md, "One JSON rule")."""
    mono = second or {**tag("mono", "not this", "typography"), "timestamp": "HOLE"}
    events = (tag("grid", "love this", "layout"), mono, tag("serif", "love this", "typography"))
    text = "[" + ", ".join(json.dumps(e) for e in events) + "]"
    return text.encode().replace(b'"HOLE"', replace)


#: The second event's metadata nested 70 levels: the whole document is refused.
TOO_DEEP = raw_batch(
    b"[" * 70 + b"]" * 70,
    {**tag("mono", "not this", "typography"), "artifact_meta": {"w": "HOLE", "signals": []}},
)


def seed(root: Path) -> None:
    store = MemoryStore(root)
    with CaptureLayer(store) as layer:
        for i, ev in enumerate(SEED):
            report = layer.submit({**ev, "artifact_id": f"seed-{i}"}, store.now_ms())
            assert report.accepted == 1, report.to_dict()
    store.close()


# -- outcomes --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    """``kind`` is ok / invalid / not_found / not_json (an ingest document refused whole by
    the JSON rule: an HTTP 400/422 on ``body``, the CLI's only line rejected); ``field`` as
    the surface spelled it; ``data`` the numbers a case compares (events removed, accepted,
    rejected..., the JSON rule's reason)."""

    kind: str
    field: str | None = None
    data: tuple[tuple[str, Any], ...] = ()


def ok(**data: Any) -> Outcome:
    return Outcome("ok", None, tuple(sorted(data.items())))


def check_data(doc: dict[str, Any]) -> dict[str, Any]:
    """What a check or a repair found and did, to compare."""
    keys = ("healthy", "events", "repaired", "events_kept", "events_dropped")
    data = {k: doc[k] for k in keys if k in doc}
    data["problems"] = [(p["where"], p["kind"]) for p in doc["problems"]]
    return data


def point_of(args: dict[str, Any]) -> dict[str, Any]:
    """The ``at_seq`` / ``as_of`` a case asks for (both may be given: the service refuses)."""
    return {k: args[k] for k in ("at_seq", "as_of") if k in args}


def point_data(doc: dict[str, Any] | None) -> dict[str, Any]:
    """The numbers of the point a result shows (``as_of``), to compare across surfaces."""
    point = (doc or {}).get("as_of")
    return {} if point is None else {"at_seq": point["at_seq"], "events": point["events"]}


def preview_data(doc: dict[str, Any]) -> dict[str, Any]:
    """What a preview reports, to compare across surfaces."""
    change = doc["change"]
    return {
        "to": doc["to_version"],
        "records": len(change["records"]),
        "injection": len(change["injection"]),
        "block_changed": change["block_changed"],
    }


@dataclass
class Case:
    name: str
    op: str
    args: dict[str, Any] = field(default_factory=dict)
    expect: str = "ok"  # ok / invalid / not_found / not_json
    fields: dict[str, str] = field(default_factory=dict)  # surface -> field name, or "*"
    surfaces: tuple[str, ...] = ("lib", "cli", "http")

    def field_for(self, surface: str) -> str | None:
        return self.fields.get(surface, self.fields.get("*"))


# -- the library -----------------------------------------------------------------------------
def run_lib(root: Path, case: Case) -> Outcome:
    store = MemoryStore(root)
    a = case.args
    try:
        data: dict[str, Any] = {}
        op = case.op
        if op == "pause":
            store.pause(U, a.get("until"))
        elif op == "resume":
            store.resume(U)
        elif op == "enable":
            store.set_memory_enabled(U, a["on"])
        elif op == "project":
            store.set_project_disabled(U, a["project"], a["ignore"])
        elif op == "feed":
            store.set_diagnostics_feed(U, True)
        elif op == "inspect" and point_of(a):
            doc = MemoryService(store).inspect(U, a.get("project"), **point_of(a))
            data.update(point_data(doc))
        elif op == "inspect":
            store.inspect(U, a.get("project"))
        elif op == "list":
            store.list_preferences(U, scope=a["scope"])
        elif op == "explain" and point_of(a):
            exp = MemoryService(store).explain(
                U, a["type"], a["pattern"], a.get("project"), **point_of(a)
            )
            data["steps"] = len(exp.steps)
            data.update(point_data(exp.to_dict()))
        elif op == "explain":
            exp = store.explain(U, a["type"], a["pattern"], project_id=a.get("project"))
            if not exp.steps and not exp.records:
                return Outcome("not_found", "pattern")
            data["steps"] = len(exp.steps)
        elif op == "timeline":  # the service only (the page's evidence timelines)
            line = MemoryService(store).timeline(
                U, a["type"], a["pattern"], a.get("project"), **point_of(a)
            )
            data["events"] = len(line.events)
        elif op == "prompt":  # the block at a point in the past: the service only
            result = MemoryService(store).prompt(U, a.get("project"), **point_of(a))
            data.update(point_data(msgspec.to_builtins(result)))
        elif op == "derivation":
            data["in_force"] = MemoryService(store).derivation(U).in_force
        elif op == "use_derivation":
            update = MemoryService(store).set_derivation_version(U, a["version"])
            data["changed"] = update.changed
        elif op == "preview":
            preview = MemoryService(store).preview(U, a["version"], a.get("project"))
            data.update(preview_data(msgspec.to_builtins(preview)))
        elif op == "forget":
            n = store.forget(U, a["type"], a["pattern"], project_id=a.get("project"))
            data["removed"] = n
        elif op == "check":  # the service only (docs/storage.md, "Check and repair")
            data.update(check_data(msgspec.to_builtins(MemoryService(store).check(U))))
        elif op == "repair":
            repaired = MemoryService(store).repair(U, confirm=a.get("confirm", True))
            data.update(check_data(msgspec.to_builtins(repaired)))
        elif op == "reset":
            store.reset_memory(U, a["scope"])  # returns nothing: no count to compare
        elif op == "export":
            store.export_memory(U, root.parent / "out.json")
        elif op == "import":
            src = root.parent / "in.json"
            src.write_bytes(a["data"])
            data["added"] = store.import_memory(U, src, mode=a.get("mode", "merge"))
        elif op == "ingest":
            with CaptureLayer(store) as layer:
                report = layer.submit_many(a["events"], store.now_ms())
            data["accepted"], data["rejected"] = report.accepted, report.rejected
        elif op == "retrieve":
            store.retrieve_for_injection(U, {"project_id": a.get("project")})
        else:  # pragma: no cover - a case naming an unknown operation is a bug in the table
            raise AssertionError(op)
        return ok(**data)
    except ValueError as exc:
        return Outcome("invalid", getattr(exc, "field", None))
    except LookupError as exc:  # NotFound, from the service
        return Outcome("not_found", getattr(exc, "field", None))
    finally:
        store.close()


# -- the CLI ---------------------------------------------------------------------------------
def cli_args(root: Path, case: Case) -> tuple[list[str], bytes | None]:
    a, op = case.args, case.op
    project = ["--project", a["project"]] if a.get("project") is not None else []
    point = [
        *(["--at-seq", str(a["at_seq"])] if "at_seq" in a else []),
        *(["--as-of", a["as_of"]] if "as_of" in a else []),
    ]
    stdin = None
    if op == "pause":
        args = ["pause", *(["--until", a["until"]] if a.get("until") else [])]
    elif op == "resume":
        args = ["resume"]
    elif op == "enable":
        args = ["enable" if a["on"] else "disable"]
    elif op == "project":
        args = ["project-disable" if a["ignore"] else "project-enable", a["project"]]
    elif op == "feed":
        args = ["config", "diagnostics-feed", "on"]
    elif op == "inspect":
        args = ["inspect", *project, *point]
    elif op in ("explain", "timeline"):
        args = [op, a["type"], a["pattern"], *project, *point]
    elif op == "forget":
        args = ["forget", a["type"], a["pattern"], *project]
    elif op == "reset":
        args = ["reset", "--scope", a["scope"], *(["--confirm"] if a.get("confirm", True) else [])]
    elif op == "check":
        args = ["check"]
    elif op == "repair":
        args = ["repair", *(["--confirm"] if a.get("confirm", True) else [])]
    elif op == "export":
        args = ["export", "--to", str(root.parent / "out.json")]
    elif op == "import":
        src = root.parent / "in.json"
        src.write_bytes(a["data"])
        args = ["import", str(src), "--mode", a.get("mode", "merge")]
    elif op == "ingest" and "raw" in a:  # the same bytes as the HTTP body
        args, stdin = ["ingest", "-"], a["raw"]
    elif op == "ingest":
        args, stdin = ["ingest", "-"], "".join(json.dumps(e) + "\n" for e in a["events"]).encode()
    elif op == "prompt":
        args = ["prompt", *project, *point, *a.get("cli", [])]
    elif op == "derivation":
        args = ["derivation", "show"]
    elif op == "use_derivation":
        args = ["derivation", "use", a["version"]]
    elif op == "preview":
        args = ["derivation", "preview", "--to", a["version"], *project]
    elif op == "compose":
        host = root.parent / "host.md"
        host.write_text(a["host_prompt"], encoding="utf-8")
        args = ["prompt", "--host-prompt", str(host), *point, *a.get("cli", [])]
    else:  # pragma: no cover
        raise AssertionError(op)
    return ["--data-dir", str(root), "--user", U, "--json", *args], stdin


def doc_data(case: Case, doc: dict[str, Any]) -> dict[str, Any]:
    """The numbers a surface's JSON answer gives for ``case``, to compare (CLI and HTTP)."""
    data: dict[str, Any] = {}
    if case.op in ("forget", "reset"):
        data["removed"] = doc["events_removed"]
    elif case.op == "import":
        data["added"] = doc["events_added"]
    elif case.op == "ingest":
        data["accepted"], data["rejected"] = doc["accepted"], doc["rejected"]
        data["reasons"] = [r["reason"] for r in doc["results"] if r["status"] == "rejected"]
    elif case.op == "explain":
        data["steps"] = len(doc["steps"])
    elif case.op == "timeline":
        data["events"] = len(doc["events"])
    elif case.op == "derivation":
        data["in_force"] = doc["in_force"]
    elif case.op == "use_derivation":
        data["changed"] = doc["changed"]
    elif case.op == "preview":
        data.update(preview_data(doc))
    elif case.op in ("check", "repair"):
        data.update(check_data(doc))
    data.update(point_data(doc))
    return data


def run_cli(root: Path, case: Case) -> Outcome:
    args, stdin = cli_args(root, case)
    result = CliRunner().invoke(cli_main, args, input=stdin, catch_exceptions=False)
    err = result.stderr.strip()
    if result.exit_code == 2:
        assert len(err.splitlines()) == 1, err  # one line naming the field
        return Outcome("invalid", err)
    if result.exit_code == 1 and case.op != "ingest":
        assert len(err.splitlines()) == 1, err
        return Outcome("not_found", err)
    assert result.exit_code in (0, 1), (result.exit_code, err, result.output)
    doc = json.loads(result.stdout) if result.stdout.strip().startswith("{") else {}
    rows = doc.get("results", [])
    if case.op == "ingest" and [r["where"] for r in rows] == ["line 1"]:
        reason = rows[0]["reason"] or ""
        if reason.startswith(JSON_RULE):  # the document on its one line refused whole
            return Outcome("not_json", "line 1", (("reason", reason),))
    return ok(**doc_data(case, doc))


#: How the JSON rule's reasons begin (engine/jsontext.py), after a surface's location.
JSON_RULE = ("not valid JSON (", "not valid UTF-8", "nested deeper than ")
BODY_IS = "the request body is "


# -- the HTTP API ----------------------------------------------------------------------------
def http_request(case: Case) -> tuple[str, str, dict[str, Any]]:
    a, op = case.args, case.op
    q = {"project_id": a["project"]} if a.get("project") is not None else {}
    q.update({k: str(v) for k, v in point_of(a).items()})
    settings = "/api/v1/settings"
    if op == "pause":
        body: dict[str, Any] = {"paused": True}
        if a.get("until"):
            body["paused_until"] = a["until"]
        return "POST", settings, {"json": body}
    if op == "resume":
        return "POST", settings, {"json": {"paused": False}}
    if op == "enable":
        return "POST", settings, {"json": {"memory_enabled": a["on"]}}
    if op == "project":
        return "POST", settings, {"json": {"project_ignore_global": {a["project"]: a["ignore"]}}}
    if op == "feed":
        return "POST", settings, {"json": {"diagnostics_feed": True}}
    if op == "inspect":
        return "GET", "/api/v1/memory", {"params": q}
    if op in ("explain", "timeline"):
        return "GET", f"/api/v1/{op}/{a['type']}/{a['pattern']}", {"params": q}
    if op == "forget":
        return "DELETE", f"/api/v1/preferences/{a['type']}/{a['pattern']}", {"params": q}
    if op == "reset":
        body = {"confirm": a.get("confirm", True), "scope": a["scope"]}
        return "POST", "/api/v1/reset", {"json": body}
    if op == "check":
        return "GET", "/api/v1/check", {}
    if op == "repair":
        return "POST", "/api/v1/repair", {"json": {"confirm": a.get("confirm", True)}}
    if op == "export":
        return "GET", "/api/v1/export", {}
    if op == "import":
        return (
            "POST",
            "/api/v1/import",
            {
                "params": {"mode": a.get("mode", "merge")},
                "content": a["data"],
                "headers": JSON_TYPE,
            },
        )
    if op == "ingest" and "raw" in a:
        return "POST", "/api/v1/events", {"content": a["raw"], "headers": JSON_TYPE}
    if op == "ingest":
        return "POST", "/api/v1/events", {"json": a["events"]}
    if op == "derivation":
        return "GET", "/api/v1/derivation", {}
    if op == "use_derivation":
        return "POST", "/api/v1/derivation", {"json": {"version": a["version"]}}
    if op == "preview":
        return "GET", "/api/v1/derivation/preview", {"params": {**q, "version": a["version"]}}
    if op in ("prompt", "compose"):
        body = {k: v for k, v in a.items() if k in ("variant", "host_prompt", "project_id")}
        if op == "prompt":
            return "GET", "/api/v1/prompt", {"params": {**q, **body, "format": "json"}}
        return "POST", "/api/v1/prompt", {"params": q, "json": {**body, "format": "json"}}
    raise AssertionError(op)  # pragma: no cover


def run_http(root: Path, case: Case) -> Outcome:
    config = DaemonConfig(root=root, port=PORT, user=U, tick_seconds=3600)
    token = DaemonFiles(root).token_for(U)
    method, path, kw = http_request(case)
    with TestClient(
        create_app(config),
        base_url=f"http://127.0.0.1:{PORT}",
        headers={"Authorization": f"Bearer {token}"},
    ) as client:
        r: httpx.Response = client.request(method, path, **kw)
    if r.status_code in (400, 422) and case.op == "ingest":
        problem = r.json()
        reason = problem["detail"].removeprefix(BODY_IS)
        if problem["field"] == "body" and reason.startswith(JSON_RULE):
            return Outcome("not_json", "body", (("reason", reason),))
    if r.status_code == 422:
        return Outcome("invalid", r.json().get("field"))
    if r.status_code == 404:
        return Outcome("not_found", r.json().get("field"))
    assert r.status_code == 200, (r.status_code, r.text)
    doc = r.json() if r.headers["content-type"].startswith("application/json") else {}
    return ok(**doc_data(case, doc))


RUNNERS: dict[str, Callable[[Path, Case], Outcome]] = {
    "lib": run_lib,
    "cli": run_cli,
    "http": run_http,
}


# -- the table -------------------------------------------------------------------------------
def archive() -> bytes:
    """A valid archive of another user's memory (two events)."""
    from creative_memory.engine.portability.archive import encode_archive

    src = MemoryStore(_tmp_root("archive-src"))
    with CaptureLayer(src) as layer:
        layer.submit_many(
            [
                {**tag("grid_layout", "love this", "layout"), "user_id": "bob"},
                {**tag("serif_body", "love this", "typography"), "user_id": "bob"},
            ],
            src.now_ms(),
        )
    return encode_archive("bob", src.get_settings("bob"), src.events("bob"))


_ROOTS: list[Path] = []


def _tmp_root(name: str) -> Path:
    import tempfile

    path = Path(tempfile.mkdtemp(prefix=f"cm-parity-{name}-"))
    _ROOTS.append(path)
    return path


CASES: list[Case] = [
    # pause / resume / enable
    Case("pause until resumed", "pause"),
    Case("pause until a future date", "pause", {"until": FUTURE}),
    Case(
        "pause until a past date",
        "pause",
        {"until": PAST},
        "invalid",
        {"lib": "until", "cli": "until", "http": "paused_until"},
    ),
    Case(
        "pause until a non-date",
        "pause",
        {"until": "tomorrow"},
        "invalid",
        {"lib": "until", "cli": "until", "http": "paused_until"},
    ),
    Case("resume", "resume"),
    Case("disable", "enable", {"on": False}),
    Case("enable", "enable", {"on": True}),
    # project switches
    Case("project ignores global", "project", {"project": "landing", "ignore": True}),
    Case("project without memory", "project", {"project": "brand-new", "ignore": True}),
    Case("project uses global again", "project", {"project": "landing", "ignore": False}),
    Case(
        "project id unsafe",
        "project",
        {"project": "a b", "ignore": True},
        "invalid",
        {"lib": "project_id", "cli": "PROJECT", "http": "project_ignore_global.a b"},
    ),
    Case("diagnostics feed on", "feed"),
    # inspect
    Case("inspect", "inspect"),
    Case("inspect a project", "inspect", {"project": "landing"}),
    Case(
        "inspect an unsafe project id",
        "inspect",
        {"project": "__proto__"},
        "invalid",
        {"*": "project_id", "cli": "project"},
    ),
    # explain
    Case("explain a known pattern", "explain", {"type": "color", "pattern": "neon_palette"}),
    Case(
        "explain an unknown pattern",
        "explain",
        {"type": "color", "pattern": "nothing_here"},
        "not_found",
        {"*": "pattern", "cli": "nothing_here"},
    ),
    Case(
        "explain in an unknown project",
        "explain",
        {"type": "color", "pattern": "neon_palette", "project": "nowhere"},
        "not_found",
        {"*": "pattern", "cli": "nowhere"},
    ),
    # timeline
    Case("timeline of a known pattern", "timeline", {"type": "color", "pattern": "neon_palette"}),
    Case(
        "timeline of an unknown pattern",
        "timeline",
        {"type": "color", "pattern": "nothing_here"},
        "not_found",
        {"*": "pattern", "cli": "nothing_here"},
    ),
    Case(
        "timeline at an event",
        "timeline",
        {"type": "color", "pattern": "neon_palette", "at_seq": 1},
    ),
    Case(
        "timeline with a bad project id",
        "timeline",
        {"type": "color", "pattern": "neon_palette", "project": "bad id!"},
        "invalid",
        {"*": "project_id", "cli": "project"},
    ),
    # forget
    Case("forget a known pattern", "forget", {"type": "color", "pattern": "neon_palette"}),
    Case("forget an unknown pattern", "forget", {"type": "color", "pattern": "nothing_here"}),
    Case(
        "forget in a project without memory",
        "forget",
        {"type": "color", "pattern": "neon_palette", "project": "nowhere"},
    ),
    Case(
        "forget in a project",
        "forget",
        {"type": "typography", "pattern": "condensed_display", "project": "landing"},
    ),
    Case(
        "forget with an unsafe project id",
        "forget",
        {"type": "color", "pattern": "neon_palette", "project": "../x"},
        "invalid",
        {"*": "project_id", "cli": "project"},
    ),
    # reset
    Case("reset global", "reset", {"scope": "global"}),
    Case("reset a project", "reset", {"scope": "project:landing"}),
    Case("reset a project without memory", "reset", {"scope": "project:nowhere"}),
    Case("reset everything", "reset", {"scope": "all"}),
    Case("reset an unknown scope", "reset", {"scope": "bogus"}, "invalid", {"*": "scope"}),
    Case(
        "reset with an unsafe project id",
        "reset",
        {"scope": "project:a/b"},
        "invalid",
        {"*": "scope"},  # the key the caller sent (the CLI: --scope)
    ),
    Case(
        "reset with an empty project id", "reset", {"scope": "project:"}, "invalid", {"*": "scope"}
    ),
    Case(
        "reset without confirming",
        "reset",
        {"scope": "all", "confirm": False},
        "invalid",
        {"*": "confirm"},
        surfaces=("cli", "http"),
    ),
    # export / import
    Case("export", "export"),
    Case("import an archive (merge)", "import", {"data": b"ARCHIVE"}),
    Case("import an archive (replace)", "import", {"data": b"ARCHIVE", "mode": "replace"}),
    Case(
        "import an unknown mode",
        "import",
        {"data": b"ARCHIVE", "mode": "append"},
        "invalid",
        {"*": "mode"},
    ),
    Case(
        "import a corrupt archive",
        "import",
        {"data": b'{"format": "creative-memory-archive", "version": 1}'},
        "invalid",
        {"*": "*"},
    ),
    Case(
        "import an archive nested too deep",
        "import",
        {"data": b"[" * 1000 + b"]" * 1000},
        "invalid",
        {"*": "archive"},
    ),
    # check and repair (a "damage" case: that line of the seeded log is not an event)
    Case("check a healthy memory", "check"),
    Case("repair a healthy memory", "repair"),
    Case("repair a damaged memory", "repair", {"damage": 3}),
    Case(
        "repair without confirm",
        "repair",
        {"damage": 3, "confirm": False},
        "invalid",
        {"*": "confirm"},
    ),
    # ingest
    Case(
        "ingest two events",
        "ingest",
        {"events": [tag("grid", "love this", "layout"), tag("mono", "not this", "typography")]},
    ),
    Case(
        "ingest with one unknown event kind",
        "ingest",
        {"events": [tag("grid", "love this", "layout"), {**tag("x", "not this"), "event": "nope"}]},
    ),
    Case(
        "ingest an event without user_id",
        "ingest",
        {"events": [{k: v for k, v in tag("grid", "love this").items() if k != "user_id"}]},
    ),
    Case(
        "ingest with a number out of range",  # valid JSON: only its event is rejected
        "ingest",
        {"raw": OUT_OF_RANGE},
        surfaces=("cli", "http"),
    ),
    Case(
        "ingest an integer too long to convert",  # infinity, like 1e400: its event rejected
        "ingest",
        {"raw": raw_batch(b"9" * 5000)},
        surfaces=("cli", "http"),
    ),
    Case(
        "ingest a negative integer too long to convert",
        "ingest",
        {"raw": raw_batch(b"-" + b"1" * 4400)},
        surfaces=("cli", "http"),
    ),
    Case(
        "ingest NaN",  # not JSON (RFC 8259): the document is refused whole, on both
        "ingest",
        {"raw": raw_batch(b"NaN")},
        "not_json",
        surfaces=("cli", "http"),
    ),
    Case(
        "ingest Infinity",
        "ingest",
        {"raw": raw_batch(b"Infinity")},
        "not_json",
        surfaces=("cli", "http"),
    ),
    Case(
        "ingest -Infinity inside the metadata",
        "ingest",
        {
            "raw": raw_batch(
                b"-Infinity",
                {**tag("mono", "not this", "typography"), "artifact_meta": {"w": "HOLE"}},
            )
        },
        "not_json",
        surfaces=("cli", "http"),
    ),
    Case(
        "ingest a document nested too deep",
        "ingest",
        {"raw": TOO_DEEP},
        "not_json",
        surfaces=("cli", "http"),
    ),
    Case(
        "ingest a document after a byte order mark",
        "ingest",
        {"raw": b"\xef\xbb\xbf" + raw_batch(b'"2026-03-01T10:00:00Z"')},
        surfaces=("cli", "http"),
    ),
    # prompt / compose (the library's builders take no variant: CLI and HTTP only)
    Case("prompt", "prompt", {}, surfaces=("cli", "http")),
    Case(
        "prompt for an unsafe project id",
        "prompt",
        {"project": "a b", "project_id": "a b"},
        "invalid",
        {"*": "project_id", "cli": "project"},
        surfaces=("cli", "http"),
    ),
    Case(
        "compose into a host prompt",
        "compose",
        {"host_prompt": "## Personal memory\n\nlikes teal\n"},
        surfaces=("cli", "http"),
    ),
    Case(
        "compose the block at an event into a host prompt",
        "compose",
        {"host_prompt": "## Personal memory\n\nlikes teal\n", "at_seq": 3},
        surfaces=("cli", "http"),
    ),
    Case(
        "compose at a negative event",
        "compose",
        {"host_prompt": "## Personal memory\n", "at_seq": -1},
        "invalid",
        {"*": "at_seq", "cli": "--at-seq"},
        surfaces=("cli", "http"),
    ),
    Case(
        "compose the legacy block",
        "compose",
        {"host_prompt": "## Personal memory\n", "variant": "legacy", "cli": ["--legacy"]},
        "invalid",
        {"*": "variant", "cli": "legacy"},
        surfaces=("cli", "http"),
    ),
    # the derivation version: show, switch, preview (the service: docs/time-travel.md)
    Case("derivation show", "derivation"),
    Case("derivation use another version", "use_derivation", {"version": "2"}),
    Case("derivation use the version in force", "use_derivation", {"version": "3"}),
    Case(
        "derivation use an unknown version",
        "use_derivation",
        {"version": "9"},
        "invalid",
        {"*": "derivation_version", "http": "version"},
    ),
    Case("preview a switch", "preview", {"version": "1"}),
    Case("preview a switch for a project", "preview", {"version": "2", "project": "landing"}),
    Case("preview the version in force", "preview", {"version": "3"}),
    Case(
        "preview an unknown version",
        "preview",
        {"version": "nine"},
        "invalid",
        {"*": "derivation_version", "http": "version"},
    ),
    Case(
        "preview for an unsafe project id",
        "preview",
        {"version": "1", "project": "a b"},
        "invalid",
        {"*": "project_id", "cli": "project"},
    ),
    # as of an event or a time
    Case("inspect at an event", "inspect", {"at_seq": 2}),
    Case("inspect before the first event", "inspect", {"at_seq": 0}),
    Case("inspect a project at an event", "inspect", {"at_seq": 4, "project": "landing"}),
    Case("inspect as of a time", "inspect", {"as_of": FUTURE}),
    Case("inspect as of a time before the log", "inspect", {"as_of": PAST}),
    Case(
        "inspect at a negative event",
        "inspect",
        {"at_seq": -1},
        "invalid",
        {"*": "at_seq", "cli": "--at-seq"},
    ),
    Case(
        "inspect as of a non-date",
        "inspect",
        {"as_of": "last tuesday"},
        "invalid",
        {"*": "as_of", "cli": "--as-of"},
    ),
    Case(
        "inspect at an event and as of a time",
        "inspect",
        {"at_seq": 2, "as_of": FUTURE},
        "invalid",
        {"*": "at_seq", "cli": "--at-seq"},
    ),
    Case(
        "explain at an event",
        "explain",
        {"type": "color", "pattern": "neon_palette", "at_seq": 1},
    ),
    Case(
        "explain as of a time",
        "explain",
        {"type": "color", "pattern": "neon_palette", "as_of": FUTURE},
    ),
    Case(
        "explain before the pattern's first event",
        "explain",
        {"type": "color", "pattern": "neon_palette", "at_seq": 0},
        "not_found",
        {"*": "pattern", "cli": "neon_palette"},
    ),
    Case(
        "explain at a negative event",
        "explain",
        {"type": "color", "pattern": "neon_palette", "at_seq": -3},
        "invalid",
        {"*": "at_seq", "cli": "--at-seq"},
    ),
    Case(
        "explain as of a non-date",
        "explain",
        {"type": "color", "pattern": "neon_palette", "as_of": "soon"},
        "invalid",
        {"*": "as_of", "cli": "--as-of"},
    ),
    Case("prompt at an event", "prompt", {"at_seq": 3}),
    Case("prompt for a project as of a time", "prompt", {"as_of": FUTURE, "project": "landing"}),
    Case(
        "prompt at a negative event",
        "prompt",
        {"at_seq": -1},
        "invalid",
        {"*": "at_seq", "cli": "--at-seq"},
    ),
    Case(
        "prompt as of a non-date",
        "prompt",
        {"as_of": "2026-13-45"},
        "invalid",
        {"*": "as_of", "cli": "--as-of"},
    ),
]


def _materialise(case: Case) -> Case:
    if case.args.get("data") == b"ARCHIVE":
        args = {**case.args, "data": archive()}
        return Case(case.name, case.op, args, case.expect, case.fields, case.surfaces)
    return case


def stored(root: Path) -> tuple[bytes, bytes]:
    """What a surface must not change when it fails: the user's events and settings."""
    store = MemoryStore(root)
    try:
        events = msgspec.json.encode(store.events(U))
        settings = msgspec.json.encode(store.get_settings(U))
        return events, settings
    finally:
        store.close()


def log_bytes(root: Path) -> tuple[bytes, bytes]:
    """What a surface must not change when it fails, for a log that does not read: its
    bytes and the settings file's."""
    user = root / U
    settings = user / "settings.json"
    return (user / "events.jsonl").read_bytes(), (
        settings.read_bytes() if settings.exists() else b""
    )


@pytest.fixture(autouse=True, scope="module")
def _cleanup() -> Iterator[None]:
    import shutil

    yield
    for path in _ROOTS:
        shutil.rmtree(path, ignore_errors=True)


def test_the_table_is_big_enough() -> None:
    assert len(CASES) >= 25
    assert len({c.op for c in CASES}) >= 10
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_surface_gives_the_same_answer(tmp_path: Path, case: Case) -> None:
    case = _materialise(case)
    outcomes: dict[str, Outcome] = {}
    for surface in case.surfaces:
        root = tmp_path / surface / "mem"
        seed(root)
        if "damage" in case.args:
            log = root / U / "events.jsonl"
            lines = log.read_bytes().split(b"\n")
            lines[case.args["damage"]] = b'{"kind": "signal", "damaged": true}'
            log.write_bytes(b"\n".join(lines))
        before = log_bytes(root) if "damage" in case.args else stored(root)
        outcome = RUNNERS[surface](root, case)
        if outcome.kind != "ok":
            now = log_bytes(root) if "damage" in case.args else stored(root)
            assert now == before, f"{surface} wrote something on failure"
        outcomes[surface] = outcome
    kinds = {s: o.kind for s, o in outcomes.items()}
    assert set(kinds.values()) == {case.expect}, kinds
    for surface, outcome in outcomes.items():
        want = case.field_for(surface)
        if case.expect != "ok" and want not in (None, "*"):
            assert outcome.field is not None and want in outcome.field, (surface, outcome)
    datas = {s: dict(o.data) for s, o in outcomes.items() if o.kind in ("ok", "not_json")}
    if datas:  # the numbers every surface reports must agree
        common = set.intersection(*(set(d) for d in datas.values()))
        seen = {s: {k: d[k] for k in sorted(common)} for s, d in datas.items()}
        assert len({json.dumps(v) for v in seen.values()}) == 1, datas
