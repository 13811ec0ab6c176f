"""The TypeScript client in clients/typescript (docs/typescript-client.md):

* the checked-in ``openapi.json`` is the daemon's document, byte for byte as the generator
  writes it (no Node needed);
* ``scripts/generate.mjs --check`` regenerates the types with openapi-typescript from a
  freshly dumped document and fails if ``src/openapi.ts`` drifted; with ``--url`` it reads
  the document from a live daemon, with its token, byte for byte as the dump writes it;
* the client's own tests (``node --test``) pass against a live daemon on loopback started
  here (``ThreadedDaemon`` on ``127.0.0.1:0``; URL, token and the user's log file passed in
  the environment);
* the example composes a host prompt through that daemon.

Node is needed for all but the first; without it these tests are skipped, except under CI,
where they fail. ``npm ci`` runs once into clients/typescript/node_modules (git-ignored)
when it is missing or older than package-lock.json.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from creative_memory.http import DaemonConfig, DaemonFiles, ThreadedDaemon, openapi_document

ROOT = Path(__file__).resolve().parent.parent
CLIENT = ROOT / "clients" / "typescript"
NODE = shutil.which("node")
NPM = shutil.which("npm")


def _document_text() -> str:
    """The daemon's document serialized as scripts/generate.mjs writes openapi.json."""
    return json.dumps(openapi_document(), indent=2) + "\n"


def _run(args: list[str], *, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    """Run a command in clients/typescript; fail with its output when it exits non-zero."""
    done = subprocess.run(
        args, cwd=CLIENT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"{' '.join(args)} exited {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done.stdout


@pytest.fixture(scope="module")
def built() -> None:
    """node_modules installed (``npm ci``) and the client compiled into dist/, once, under a
    lock: pytest-xdist workers share the directory."""
    if NODE is None or NPM is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set but node/npm are missing (.ci/run installs them)")
        pytest.skip("node and npm are needed for the TypeScript client tests")
    lock = CLIENT / "package-lock.json"
    with lock.open("rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            installed = CLIENT / "node_modules" / ".package-lock.json"
            if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
                _run([NPM, "ci", "--no-audit", "--no-fund"])
            _run([NPM, "run", "--silent", "build"])
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A live daemon on loopback; yields the environment that points the client at it."""
    config = DaemonConfig(root=tmp_path / "data", port=0, log_level="warning")
    with ThreadedDaemon(config) as d:
        token = DaemonFiles(config.root).token_for(config.user)
        assert token is not None
        yield dict(
            os.environ,
            CREATIVE_MEMORY_URL=d.url,
            CREATIVE_MEMORY_TOKEN=token,
            CREATIVE_MEMORY_USER=config.user,
            # the file store's log of that user, for the repair test to damage
            CREATIVE_MEMORY_EVENTS_FILE=str(config.root / config.user / "events.jsonl"),
        )


def test_the_checked_in_document_is_the_daemons() -> None:
    checked_in = (CLIENT / "openapi.json").read_text(encoding="utf-8")
    assert checked_in == _document_text(), (
        "clients/typescript/openapi.json differs from the daemon's OpenAPI document: "
        "run `npm run generate` in clients/typescript and commit openapi.json and src/openapi.ts"
    )


@pytest.mark.slow
def test_the_generated_types_match_a_fresh_regeneration(built: None, tmp_path: Path) -> None:
    fresh = tmp_path / "openapi.json"
    fresh.write_text(_document_text(), encoding="utf-8")
    out = _run(["node", "scripts/generate.mjs", "--check", "--document", str(fresh)])
    assert "match the daemon's OpenAPI document" in out


@pytest.mark.slow
def test_the_drift_check_fails_on_a_changed_document(built: None, tmp_path: Path) -> None:
    doc = openapi_document()
    doc["components"]["schemas"]["Health"]["properties"]["uptime"] = {"type": "number"}
    changed = tmp_path / "openapi.json"
    changed.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    done = subprocess.run(
        ["node", "scripts/generate.mjs", "--check", "--document", str(changed)],
        cwd=CLIENT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "openapi.json is out of date" in done.stderr
    assert "src/openapi.ts is out of date" in done.stderr


@pytest.mark.slow
def test_generate_from_a_running_daemon_needs_its_token(
    built: None, daemon: dict[str, str]
) -> None:
    """``--url``: GET /openapi.json needs credentials; without a token the script says how
    to give one (exit 2), with ``--token`` or ``$CREATIVE_MEMORY_TOKEN`` it reads the document
    and writes the bytes the in-process dump writes (``--check`` finds nothing stale)."""
    url = f"{daemon['CREATIVE_MEMORY_URL']}/openapi.json"
    token = daemon["CREATIVE_MEMORY_TOKEN"]
    anonymous = {k: v for k, v in daemon.items() if k != "CREATIVE_MEMORY_TOKEN"}
    script = ["node", "scripts/generate.mjs", "--check", "--url", url]
    done = subprocess.run(
        script, cwd=CLIENT, env=anonymous, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert all(word in done.stderr for word in ("401", "--token", "CREATIVE_MEMORY_TOKEN"))
    out = _run([*script, "--token", token], env=anonymous, timeout=120)
    assert "match the daemon's OpenAPI document" in out
    out = _run(script, env=daemon, timeout=120)
    assert "match the daemon's OpenAPI document" in out


@pytest.mark.slow
def test_the_client_passes_its_node_tests_against_a_live_daemon(
    built: None, daemon: dict[str, str]
) -> None:
    out = _run(["node", "--test", "dist/test/client.test.js"], env=daemon, timeout=180)
    assert "# fail 0" in out and "# pass 0" not in out, out
    assert "# skipped 0" in out, out  # the damaged-log test too: it has the log file


@pytest.mark.slow
def test_the_example_composes_a_host_prompt_through_the_daemon(
    built: None, daemon: dict[str, str]
) -> None:
    now = datetime.now(UTC).isoformat()
    events = [
        {
            "event": "explicit_tag_applied",
            "tag_text": "too noisy",
            "user_id": daemon["CREATIVE_MEMORY_USER"],
            "artifact_id": f"a{i}",
            "session_id": "s1",
            "project_id": None,
            "timestamp": now,
            "artifact_meta": {"signals": [{"preference_type": "color", "pattern": "neon_palette"}]},
        }
        for i in range(4)
    ]
    headers = {"Authorization": f"Bearer {daemon['CREATIVE_MEMORY_TOKEN']}"}
    r = httpx.post(f"{daemon['CREATIVE_MEMORY_URL']}/api/v1/events", json=events, headers=headers)
    assert r.status_code == 200 and r.json()["accepted"] == 4, r.text
    out = _run(["node", "dist/examples/compose-prompt.js"], env=daemon, timeout=60)
    assert out.startswith("You are Open Design's generation agent.")
    memory, skill = out.index("## Creative memory"), out.index("## Active skill")
    assert memory < skill
    assert "neon_palette" in out[memory:skill]
