"""A bounded schemathesis run against the daemon's published OpenAPI document (docs/http.md).

The daemon runs for real on a loopback port (seeded with a little memory, so the schema's
examples reach records that exist). ``schemathesis run`` loads the document from the
daemon's own ``/openapi.json`` and runs its phases (examples, coverage, fuzzing, stateful)
with every built-in check but ``positive_data_acceptance`` (a schema cannot express that an
archive's checksum must match or that a date must exist, so schema-valid input may be
refused with a 422 — which the other checks still hold to the documented problem format).
Zero failures are allowed, server errors included.

The operations run in two halves (two tests, so both cores work). Bounded:
``SCHEMATHESIS_EXAMPLES`` cases per operation (default 80), one worker (parallel
workers trip a schemathesis-internal race), a fixed seed (``SCHEMATHESIS_SEED`` overrides)
and a hard timeout.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from creative_memory import MemoryStore
from creative_memory.http import DaemonConfig, DaemonFiles, ThreadedDaemon

EXAMPLES = os.environ.get("SCHEMATHESIS_EXAMPLES", "80")
SEED = os.environ.get("SCHEMATHESIS_SEED", "20260301")
RUNNER = "import sys; from schemathesis.cli import schemathesis; sys.exit(schemathesis())"


#: The operations in two halves, run as two tests (xdist spreads them over both cores).
READS = r"^/api/v1/(memory|prompt|explain|timeline|preferences)"
GROUPS = {"reading": ("--include-path-regex", READS), "the rest": ("--exclude-path-regex", READS)}


@pytest.mark.slow
@pytest.mark.parametrize("group", sorted(GROUPS))
def test_api_conforms_to_its_openapi_document(tmp_path: Path, group: str) -> None:
    root = tmp_path / "mem"
    store = MemoryStore(root)
    config = DaemonConfig(root=root, port=0, max_body_bytes=64 * 1024, max_import_bytes=256 * 1024)
    with ThreadedDaemon(config, store=store) as daemon:
        token = DaemonFiles(root).token_for("default")
        assert token is not None
        auth = {"Authorization": f"Bearer {token}"}
        seed = [
            {
                "event": "explicit_tag_applied",
                "user_id": "default",
                "artifact_id": f"a{i}",
                "session_id": "s1",
                "project_id": project,
                "timestamp": "2026-03-01T10:00:00Z",
                "tag_text": "too noisy",
                "artifact_meta": {
                    "signals": [{"preference_type": "color", "pattern": "neon_palette"}]
                },
            }
            for i, project in enumerate([None, None, "p1"])
        ]
        r = httpx.post(f"{daemon.url}/api/v1/events", json=seed, headers=auth)
        assert r.json()["accepted"] == 3
        cmd = [
            sys.executable,
            "-c",
            RUNNER,
            "run",
            f"{daemon.url}/openapi.json",
            "--header",
            f"Authorization: Bearer {token}",
            "--checks",
            "all",
            "--exclude-checks",
            "positive_data_acceptance",
            "--max-examples",
            EXAMPLES,
            "--seed",
            SEED,
            "--workers",
            "1",
            "--request-timeout",
            "30",
            "--generation-database",
            "none",
            "--no-color",
            *GROUPS[group],
        ]
        proc = subprocess.run(
            cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False
        )
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0, output[-20000:]
        generated = re.search(r"(\d+) generated, (\d+) passed", output)
        assert generated, output[-5000:]
        assert int(generated[1]) >= 150 and generated[1] == generated[2], generated[0]
        print(output[output.find("SUMMARY") :])
    assert token not in output  # schemathesis sanitises the Authorization header
