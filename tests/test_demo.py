"""``creative-memory demo``: the walkthrough, its CLI, and the installed entry points."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from creative_memory import DERIVATION_VERSION as D
from creative_memory import __version__
from creative_memory.cli.demo import EMPTY_BLOCK, DemoStep, demo_document, render_text, run_demo
from creative_memory.cli.main import main

PREFERENCE_FIELDS = {
    "id", "preference_type", "pattern", "polarity", "signal_strength", "confidence",
    "sources", "accept_count", "reject_count", "explicit_tags", "last_seen", "decay_at",
    "scope", "reversal_signals", "reversal_first_seen", "polarity_status", "shadow_of",
    "derivation_version", "source_event_count", "last_derived_event_seq",
}  # fmt: skip
CHAPTERS = ["fresh", "ladder", "negative", "reversal", "decay", "profile", "project", "pairwise"]
SUPPRESSION_TRACE = (
    "neon-nights override color/neon_palette active — global color/neon_palette "
    "(negative, 0.80) suppressed for this generation"
)
OVERRIDE_LINE = "Project override: neon_palette, condensed_display active (neon-nights)"
KEPT = re.compile(r"Scratch store kept at (\S+)")


# -- helpers ---------------------------------------------------------------------------------
def _script(name: str) -> str | None:
    """The installed console script ``name`` next to this interpreter (or on PATH)."""
    return shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)


def _run(
    args: list[str], tmpdir: Path, *, script: str | None = None
) -> subprocess.CompletedProcess[bytes]:
    """Run the real CLI in a child process whose temp dir is ``tmpdir``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONIOENCODING"}
    env["TMPDIR"] = str(tmpdir)
    cmd = [script] if script else [sys.executable, "-m", "creative_memory.cli"]
    return subprocess.run(cmd + args, capture_output=True, env=env, timeout=120, check=False)


@pytest.fixture
def scratch_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Point ``tempfile`` (used by the demo command in-process) at an empty directory."""
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    yield d


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    """The ``--json`` document, produced through click's runner."""
    result = CliRunner().invoke(main, ["demo", "--json"])
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def _steps(doc: dict[str, Any], chapter: str) -> list[dict[str, Any]]:
    return [s for s in doc["steps"] if s["chapter"] == chapter]


# -- the document --------------------------------------------------------------------------
def test_json_document_shape(doc: dict[str, Any]) -> None:
    assert doc["derivation_version"] == "1"
    assert doc["clock_start"] == "2026-01-05T09:00:00.000Z"
    assert doc["users"] == ["kai", "maya", "rin", "theo"]
    chapters = [s["chapter"] for s in doc["steps"]]
    assert sorted(set(chapters), key=chapters.index) == CHAPTERS  # every chapter, in order
    assert [s["index"] for s in doc["steps"]] == list(range(1, len(doc["steps"]) + 1))
    for step in doc["steps"]:
        for key in ("title", "narration", "records", "retrieval", "diagnostics", "prompt_block"):
            assert key in step, (step["index"], key)
        assert step["title"] and step["narration"]
        assert set(step["retrieval"]) == {
            "positives",
            "negatives",
            "project_overrides",
            "diagnostics",
        }
        assert step["diagnostics"] == [d["trace"] for d in step["retrieval"]["diagnostics"]]
        # every chapter runs on version 1 but the last, which re-derives with version 2
        assert step["derivation_version"] == (D if step is doc["steps"][-1] else "1")
        for rec in step["records"]:
            assert set(rec) == PREFERENCE_FIELDS
            assert rec["derivation_version"] == step["derivation_version"]
            assert step["injection"][rec["id"]]
        for action in step["actions"]:
            if action["kind"] == "event":  # the wire format of api.md
                assert action["payload"]["event"] and action["payload"]["timestamp"]
                payload = action["payload"]
                sides = [payload["chose"], payload["over"]] if "chose" in payload else [payload]
                for side in sides:
                    assert side["artifact_meta"]["signals"]


def test_pairwise_chapter_shows_version_2_explaining_a_rider_away(doc: dict[str, Any]) -> None:
    v1, v2 = _steps(doc, "pairwise")
    assert (v1["derivation_version"], v2["derivation_version"]) == ("1", D)
    kinds = [a["payload"]["event"] for a in v1["actions"]]
    assert kinds == ["explicit_tag_applied"] * 3 + ["pairwise_comparison"] * 3
    for a in v1["actions"][3:]:  # the wire format of api.md's on_pairwise_comparison
        assert a["payload"]["chose"]["artifact_meta"]["signals"]
        assert a["payload"]["over"]["artifact_meta"]["signals"]
    # version 1 blames both listed features: a phantom avoidance of the font
    assert v1["facts"]["avoid"] == ["bold_sans", "neon_palette"]
    assert v1["prompt_block"] == "[MEMORY CONTEXT]\nAvoid (medium):   neon_palette · bold_sans"
    # version 2, on the same events, avoids only the palette
    assert v2["actions"] == []
    assert v2["facts"]["avoid"] == ["neon_palette"]
    # the rider's estimate is within its uncertainty (the Avoid bound is 2.25 sd)
    assert abs(v2["facts"]["bold_sans_estimate"]) < 2 * v2["facts"]["bold_sans_sd"]
    assert v2["facts"]["neon_palette_strength"] >= 0.4
    assert v2["prompt_block"].splitlines()[1].endswith("neon_palette")
    assert len(v2["prompt_block"].splitlines()) == 2
    assert f"{v2['facts']['bold_sans_estimate']:+.2f}" in v2["narration"]


def test_fresh_user_has_nothing_injectable(doc: dict[str, Any]) -> None:
    (step,) = _steps(doc, "fresh")
    assert step["records"] == []
    assert step["prompt_block"] == ""
    assert step["retrieval"] == {
        "positives": [],
        "negatives": [],
        "project_overrides": [],
        "diagnostics": [],
    }


def test_confidence_ladder_climbs_to_injection(doc: dict[str, Any]) -> None:
    ladder = _steps(doc, "ladder")
    assert [s["facts"]["signal_strength"] for s in ladder] == [0.15, 0.3, 0.44999999999999996, 0.6]
    assert [s["facts"]["confidence"] for s in ladder] == ["low", "low", "medium", "medium"]
    assert [s["facts"]["injectable"] for s in ladder] == [False, False, True, True]
    assert [s["facts"]["became_injectable"] for s in ladder] == [False, False, True, False]
    block = "[MEMORY CONTEXT]\nPrefer (medium):  airy_spacing"
    assert [s["prompt_block"] for s in ladder] == ["", "", block, block]
    for s in ladder:
        (action,) = s["actions"]
        assert action["payload"]["event"] == "explicit_tag_applied"
        assert action["result"][0]["sources"] == ["explicit_tag"]


def test_negative_preference(doc: dict[str, Any]) -> None:
    below, injected = _steps(doc, "negative")
    assert below["facts"]["polarity"] == "negative"
    assert below["facts"]["confidence"] == "medium"
    assert below["facts"]["injectable"] is False  # medium but below 0.40
    assert injected["facts"]["signal_strength"] == pytest.approx(0.5)
    assert injected["facts"]["injectable"] is True
    assert injected["prompt_block"] == (
        "[MEMORY CONTEXT]\nPrefer (medium):  airy_spacing\nAvoid (medium):   neon_palette"
    )
    kinds = [a["payload"]["event"] for a in below["actions"]]
    assert "thumbs_rated" in kinds and "explicit_tag_applied" in kinds


def test_reversal_ladder_shadow_and_promotion(doc: dict[str, Any]) -> None:
    steps = _steps(doc, "reversal")
    ladder, (accumulating, promoted) = steps[:4], steps[4:]
    assert [s["facts"]["reversal_signals"] for s in ladder] == [1, 2, 3, 4]
    originals = [s["facts"]["original"] for s in ladder]
    assert [o["signal_strength"] for o in originals] == pytest.approx([0.6, 0.48, 0.288, 0.0])
    assert [o["confidence"] for o in originals] == ["medium", "medium", "low", "low"]
    assert [o["polarity_status"] for o in originals] == ["stable"] * 3 + ["under_review"]
    assert [s["facts"]["original_injected"] for s in ladder] == [True, True, False, False]
    assert [s["facts"]["shadow"] for s in ladder[:3]] == [None, None, None]
    shadow = ladder[3]["facts"]["shadow"]
    original_id = originals[0]["id"]
    assert shadow["polarity"] == "negative"
    assert shadow["shadow_of"] == original_id
    assert (shadow["signal_strength"], shadow["confidence"]) == (0.15, "low")
    # the shadow accumulates, then is promoted and the original archived
    assert accumulating["facts"]["promoted"] is False
    assert accumulating["facts"]["shadow"]["signal_strength"] == pytest.approx(0.3)
    assert accumulating["facts"]["shadow"]["shadow_of"] == original_id
    assert promoted["facts"]["promoted"] is True
    assert promoted["facts"]["shadow"]["shadow_of"] is None
    assert promoted["facts"]["shadow"]["confidence"] == "medium"
    assert promoted["facts"]["original"]["polarity_status"] == "archived"
    assert promoted["facts"]["shadow_injected"] is True
    # the prompt block at each step: Prefer while rs < 3, gone, then Avoid
    blocks = [s["prompt_block"] for s in steps]
    assert all("Prefer (medium):  airy_spacing" in b for b in blocks[:2])
    assert all("airy_spacing" not in b for b in blocks[2:5])
    assert blocks[5] == "[MEMORY CONTEXT]\nAvoid (medium):   neon_palette · airy_spacing"


def test_decay_and_archive(doc: dict[str, Any]) -> None:
    setup, early, decay, archive = _steps(doc, "decay")
    assert setup["facts"]["record"]["signal_strength"] == 0.6
    assert setup["facts"]["decay_at"] == "2026-04-08T09:00:00.000Z"
    assert "Prefer (medium):  duotone_photos" in setup["prompt_block"]
    assert early["facts"]["decay_result"] == {"decayed": 0, "archived": 0}
    assert early["facts"]["events_written"] == 0  # a no-op pass writes nothing
    assert decay["facts"]["decay_result"] == {"decayed": 1, "archived": 0}
    assert decay["facts"]["events_written"] == 1  # decay is an event
    assert decay["facts"]["record"]["signal_strength"] == pytest.approx(0.42)
    assert decay["facts"]["record"]["confidence"] == "low"  # one rung, not recomputed
    assert decay["actions"][0]["payload"] == {"now": "2026-04-08T09:00:00.000Z"}
    assert decay["prompt_block"] == ""
    assert archive["facts"]["decay_result"] == {"decayed": 0, "archived": 1}
    assert archive["facts"]["record"]["polarity_status"] == "archived"
    assert archive["facts"]["record"]["signal_strength"] == pytest.approx(0.42)
    assert archive["actions"][0]["payload"] == {"now": "2026-07-07T09:00:00.000Z"}


def test_realistic_profile_through_full_retrieval(doc: dict[str, Any]) -> None:
    (step,) = _steps(doc, "profile")
    assert len(step["facts"]["preference_types"]) >= 5
    assert len(step["actions"]) >= 20
    kinds = {a["payload"]["event"] for a in step["actions"]}
    assert kinds >= {
        "generation_accepted",
        "artifact_edited_and_saved",
        "explicit_tag_applied",
        "thumbs_rated",
        "generation_abandoned",
        "revert_after_edit",
    }
    types = [d["type"] for d in step["retrieval"]["diagnostics"]]
    assert "diversity_ceiling_applied" in types
    assert "category_ceiling_applied" in types
    assert "Diversity ceiling: 9 negatives capped to 7 (50% of 14 slots)" in step["diagnostics"]
    assert "Category ceiling: 2 pattern(s) trimmed from color (max 3/type)" in step["diagnostics"]
    block = step["prompt_block"].split("\n")
    assert block[0] == "[MEMORY CONTEXT]"
    assert [line[:18] for line in block[1:]] == [
        "Prefer (high):    ",
        "Prefer (medium):  ",
        "Avoid (high):     ",
        "Avoid (medium):   ",
    ]
    statuses = set(step["injection"].values())
    assert {"injected", "trimmed (polarity)", "trimmed (category)"} <= statuses


def test_project_override_and_suppression(doc: dict[str, Any]) -> None:
    festival, other = _steps(doc, "project")
    assert festival["context"] == {"project_id": "neon-nights"}
    supp = [
        d
        for d in festival["retrieval"]["diagnostics"]
        if d["type"] == "project_override_suppression"
    ]
    assert [d["trace"] for d in supp] == [SUPPRESSION_TRACE]
    assert supp[0]["suppressed_polarity"] == "negative"
    assert supp[0]["override_polarity"] == "positive"
    lines = festival["prompt_block"].split("\n")
    assert lines[-1] == OVERRIDE_LINE
    assert "neon_palette" in lines[1] and lines[1].startswith("Prefer (high):")
    assert all("neon_palette" not in line for line in lines if line.startswith("Avoid"))
    assert [r["pattern"] for r in festival["retrieval"]["project_overrides"]] == [
        "neon_palette",
        "condensed_display",
    ]
    # another project gets the global memory unchanged
    assert other["context"] == {"project_id": "quarterly-report"}
    assert other["facts"] == {
        "project_id": "quarterly-report",
        "neon_avoided": True,
        "suppressions": 0,
    }
    assert "Project override" not in other["prompt_block"]
    assert "neon_palette" in other["prompt_block"].split("\n")[3]  # Avoid (high)


def test_every_non_empty_block_is_a_memory_context(doc: dict[str, Any]) -> None:
    blocks = [s["prompt_block"] for s in doc["steps"]]
    assert sum(1 for b in blocks if b) >= 12
    assert all(b == "" or b.startswith("[MEMORY CONTEXT]\n") for b in blocks)


# -- determinism and the scratch directory -----------------------------------------------------
def test_two_runs_are_byte_identical(tmp_path: Path) -> None:
    first = _run(["demo", "--json"], tmp_path)
    second = _run(["demo", "--json"], tmp_path)
    assert first.returncode == 0, first.stderr.decode()
    assert second.returncode == 0, second.stderr.decode()
    assert first.stdout == second.stdout
    assert first.stderr == b"" and second.stderr == b""
    json.loads(first.stdout.decode("utf-8"))
    text1 = _run(["demo"], tmp_path)
    text2 = _run(["demo"], tmp_path)
    assert text1.returncode == 0 and text1.stdout == text2.stdout


def test_run_demo_is_deterministic_across_roots(tmp_path: Path) -> None:
    a: list[DemoStep] = run_demo(tmp_path / "a")
    b: list[DemoStep] = run_demo(tmp_path / "b")
    assert demo_document(a) == demo_document(b)
    assert render_text(a) == render_text(b)
    assert (tmp_path / "a" / "maya" / "events.jsonl").is_file()


def test_scratch_dir_is_removed_without_keep(tmp_path: Path) -> None:
    result = _run(["demo", "--json"], tmp_path)
    assert result.returncode == 0, result.stderr.decode()
    assert list(tmp_path.iterdir()) == []


def test_keep_keeps_the_store(tmp_path: Path) -> None:
    result = _run(["demo", "--json", "--keep"], tmp_path)
    assert result.returncode == 0, result.stderr.decode()
    json.loads(result.stdout.decode("utf-8"))  # stdout stays pure JSON
    match = KEPT.search(result.stderr.decode())
    assert match, result.stderr
    kept = Path(match.group(1))
    try:
        assert kept.parent == tmp_path
        for user in ("maya", "theo", "rin"):
            assert (kept / user / "events.jsonl").is_file()
        log = (kept / "maya" / "events.jsonl").read_text(encoding="utf-8")
        assert "airy_spacing" in log
    finally:
        shutil.rmtree(kept, ignore_errors=True)


def test_keep_in_text_mode_prints_path_on_stdout(scratch_tmp: Path) -> None:
    result = CliRunner().invoke(main, ["demo", "--keep"])
    assert result.exit_code == 0, result.output
    match = KEPT.search(result.stdout)
    assert match
    kept = Path(match.group(1))
    assert kept.parent == scratch_tmp
    assert (kept / "theo" / "events.jsonl").is_file()


def test_cli_runner_removes_scratch_dir(scratch_tmp: Path) -> None:
    result = CliRunner().invoke(main, ["demo"])
    assert result.exit_code == 0, result.output
    assert list(scratch_tmp.iterdir()) == []


# -- human output ------------------------------------------------------------------------------
def test_human_output(scratch_tmp: Path) -> None:
    result = CliRunner().invoke(main, ["demo"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    for n, title in enumerate(
        [
            "A fresh user",
            "The confidence ladder",
            "A negative preference",
            "The reversal ladder",
            "Decay and archive",
            "A realistic profile",
            "A project override",
        ],
        start=1,
    ):
        assert f"Chapter {n} · {title}" in out
    assert EMPTY_BLOCK in out
    assert "Prefer (medium):  airy_spacing" in out
    assert OVERRIDE_LINE in out  # the block is printed verbatim, never re-wrapped
    assert "project_override_suppression" in out
    assert "decayed 1, archived 0" in out and "decayed 0, archived 1" in out
    assert all(line == line.rstrip() for line in out.splitlines())
    assert "\x1b[" not in out  # no colour codes when not a terminal


# -- the CLI itself ----------------------------------------------------------------------------
def test_version_and_help() -> None:
    runner = CliRunner()
    version = runner.invoke(main, ["--version"])
    assert version.exit_code == 0 and __version__ in version.output
    helptext = runner.invoke(main, ["demo", "--help"])
    assert helptext.exit_code == 0
    assert "creative-memory demo --json" in helptext.output and "--keep" in helptext.output
    assert "demo" in runner.invoke(main, ["--help"]).output


def test_usage_errors_exit_2() -> None:
    runner = CliRunner()
    assert runner.invoke(main, ["demo", "--bogus"]).exit_code == 2
    assert runner.invoke(main, ["no-such-command"]).exit_code == 2


def test_library_errors_are_one_line() -> None:
    """A ValidationError is exit 2, any other failure exit 1; one line, no traceback."""
    from creative_memory import MemoryStore

    @main.command("boom-for-test")
    def boom() -> None:
        MemoryStore(tempfile.gettempdir()).ingest_signal("bad user!", {})

    @main.command("crash-for-test")
    def crash() -> None:
        raise RuntimeError("disk on fire")

    try:
        invalid = CliRunner().invoke(main, ["boom-for-test"])
        failed = CliRunner().invoke(main, ["crash-for-test"])
    finally:
        main.commands.pop("boom-for-test", None)
        main.commands.pop("crash-for-test", None)
    for result, code, needle in ((invalid, 2, "user_id"), (failed, 1, "disk on fire")):
        assert result.exit_code == code
        assert result.stdout == ""
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: ") and needle in lines[0]
        assert "Traceback" not in result.output


def test_click_exceptions_pass_through() -> None:
    @main.command("usage-for-test")
    def usage() -> None:
        raise click.UsageError("wrong")

    try:
        assert CliRunner().invoke(main, ["usage-for-test"]).exit_code == 2
    finally:
        main.commands.pop("usage-for-test", None)


# -- installed entry points ----------------------------------------------------------------------
@pytest.mark.parametrize("name", ["creative-memory", "od-memory"])
def test_console_scripts(name: str, tmp_path: Path) -> None:
    script = _script(name)
    if script is None:
        pytest.skip(f"console script {name!r} is not installed in this environment")
    result = _run(["demo", "--json"], tmp_path, script=script)
    assert result.returncode == 0, result.stderr.decode()
    module = _run(["demo", "--json"], tmp_path)
    assert result.stdout == module.stdout
    version = _run(["--version"], tmp_path, script=script)
    assert version.returncode == 0 and __version__.encode() in version.stdout
