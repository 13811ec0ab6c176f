"""``creative-memory derivation`` (show, use, preview) and ``--at-seq`` / ``--as-of`` on
``inspect``, ``explain`` and ``prompt`` (docs/cli.md, docs/time-travel.md), in-process
through click's runner like tests/test_cli.py."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from creative_memory import DERIVATION_VERSION as D
from creative_memory import CaptureLayer, MemoryStore
from creative_memory.app.service import MemoryService
from creative_memory.engine.timeutil import try_parse_ts
from tests.test_cli import TEACH, Cli, one_line_error, tag

#: Three negative tags and one positive, each about one pattern alone: under the default
#: (version 5) both reach the block at the statement floor, under version 1 only
#: neon_palette does (a preview with an injection change and a block diff).
SWITCHY = [
    *(tag("neon_palette", "too noisy", artifact=f"n{i}", ts=f"2026-03-01T10:0{i}:00Z")
      for i in range(3)),
    tag("airy_spacing", "love this", "layout", artifact="b1", ts="2026-03-01T10:05:00Z"),
]  # fmt: skip


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


@pytest.fixture(autouse=True)
def zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The local time zone (UTC unless a test sets another)."""

    def use(name: str) -> None:
        monkeypatch.setenv("TZ", name)
        time.tzset()

    use("UTC")
    yield use
    monkeypatch.undo()
    time.tzset()


def teach_at_their_times(root: Path, events: list[dict[str, Any]] = TEACH) -> None:
    """Feed ``events`` through the library with the clock at each event's own timestamp,
    so each is recorded then (``--as-of`` looks at when events were recorded)."""
    now = [0]
    store = MemoryStore(root, clock=lambda: now[0])
    with CaptureLayer(store) as layer:
        for ev in events:
            at = try_parse_ts(ev["timestamp"])
            assert at is not None
            now[0] = at
            assert layer.submit(ev, at).accepted == 1
    store.close()


def tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` with the digest of its bytes."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


# -- derivation show / use ---------------------------------------------------------------------
def test_derivation_alone_shows_what_is_in_force(cli: Cli) -> None:
    alone, show = cli.ok("derivation"), cli.ok("derivation", "show")
    assert alone.out == show.out
    assert show.out.startswith(f"Derivation for alice: v{D} in force (the default).")
    assert "Known versions: 1, 2, 3, 4, 5" in show.out and "Switches: none" in show.out
    doc = cli.json("derivation")
    assert doc == cli.json("derivation", "show")
    assert doc == {
        "user_id": "alice",
        "in_force": D,
        "default": D,
        "chosen": False,
        "known": ["1", "2", "3", "4", "5"],
        "history": [],
    }
    # the global --derivation-version is the default for a user who has not chosen
    assert cli.json("--derivation-version", "2", "derivation")["in_force"] == "2"


def test_use_switches_records_the_switch_and_switches_back(cli: Cli) -> None:
    cli.teach()
    r = cli.ok("derivation", "use", "2")
    assert r.out.startswith(f"Derivation version 2 now in force for alice (was v{D})")
    assert f"`creative-memory derivation use {D}` switches back" in r.out
    assert cli.json("inspect")["derivation_version"] == "2"  # inspect shows the version
    again = cli.ok("derivation", "use", "2")
    assert again.out.startswith("Derivation version 2 is already in force for alice;")
    assert "nothing changed." in again.out
    assert cli.json("derivation", "use", "2")["changed"] is False
    back = cli.json("derivation", "use", D)
    assert back["changed"] is True and back["previous"] == "2"
    assert back["derivation_version"] == D and "settings" in back
    info = cli.json("derivation")
    assert info["in_force"] == D and info["chosen"] is True
    assert [(c["previous"], c["version"]) for c in info["history"]] == [(D, "2"), ("2", D)]
    assert f"v{D} -> v2" in cli.ok("derivation").out
    # the chosen version wins over the default of the store the CLI opens
    assert cli.json("--derivation-version", "1", "derivation")["in_force"] == D


def test_use_of_an_unknown_version_is_a_usage_error_and_writes_nothing(cli: Cli) -> None:
    cli.teach()
    before = tree(cli.root)
    one_line_error(cli("derivation", "use", "9"), 2, "VERSION", "derivation_version", "Known")
    one_line_error(cli("derivation", "use"), 2, "VERSION")
    assert tree(cli.root) == before


# -- derivation preview ------------------------------------------------------------------------
def test_preview_shows_records_the_injected_set_and_the_block_diff(cli: Cli) -> None:
    cli.teach(SWITCHY)
    out = cli.ok("derivation", "preview", "--to", "1").out
    lines = out.splitlines()
    assert lines[0] == (
        f"Derivation v{D} -> v1 for alice (global memory) · preview, nothing is written"
    )
    assert "Records: 2 differ, 0 unchanged" in out
    row = next(line for line in lines if "layout/airy_spacing" in line and "changed" in line)
    assert "signal_strength" in row and "prefer 0.50 medium" in row and "prefer 0.15 low" in row
    assert "Memory block: records in and out" in out
    inj = next(line for line in lines if line.startswith("  - prefer layout/airy_spacing"))
    assert "after: strength 0.15 below the injection threshold" in inj
    assert f"--- v{D}" in lines and "+++ v1" in lines
    assert "-Prefer (medium): airy_spacing" in lines and " Avoid (medium): neon_palette" in lines


def test_preview_json_is_the_services_answer_and_a_preview_writes_nothing(cli: Cli) -> None:
    cli.teach(SWITCHY)
    before = tree(cli.root)
    doc = cli.json("derivation", "preview", "--to", "1")
    assert tree(cli.root) == before
    expected = MemoryService(cli.store()).preview("alice", "1")
    assert doc == msgspec.to_builtins(expected)
    assert doc["from_version"] == D and doc["to_version"] == "1"
    assert [i["pattern"] for i in doc["change"]["injection"]] == ["airy_spacing"]
    assert doc["change"]["block_changed"] is True
    assert cli.json("derivation")["chosen"] is False  # previewing is not switching


def test_preview_to_the_version_in_force_and_for_a_project(cli: Cli) -> None:
    cli.teach()
    out = cli.ok("derivation", "preview", "--to", D, "--project", "landing").out
    assert "(project landing)" in out.splitlines()[0]
    assert "Records: 0 differ" in out and "Generation block: unchanged" in out
    assert "Memory block: the same records injected" in out
    doc = cli.json("derivation", "preview", "--to", D, "--project", "landing")
    assert doc["project_id"] == "landing" and doc["change"]["records"] == []


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--to", "9"], ["'--to'", "derivation_version"]),
        ([], ["--to"]),
        (["--to", "1", "--project", "a b"], ["'--project'"]),
    ],
)
def test_preview_refuses_bad_input_on_one_line(
    cli: Cli, args: list[str], needles: list[str]
) -> None:
    one_line_error(cli("derivation", "preview", *args), 2, *needles)


# -- --at-seq / --as-of --------------------------------------------------------------------------
def _strengths(doc: dict[str, Any]) -> list[tuple[str, str, str, float]]:
    return [
        (r["scope"], r["pattern"], r["polarity"], r["signal_strength"]) for r in doc["preferences"]
    ]


@pytest.mark.parametrize("n", [0, 2, 5, len(TEACH)])
def test_inspect_at_seq_is_a_store_fed_only_the_first_events(
    cli: Cli, tmp_path: Path, n: int
) -> None:
    cli.teach()
    doc = cli.json("inspect", "--at-seq", str(n))
    assert doc["as_of"]["at_seq"] == n and doc["as_of"]["events"] == n
    assert doc["event_count"] == n
    (tmp_path / "fresh").mkdir()
    fresh = Cli(tmp_path / "fresh")
    if n:
        fresh.teach(TEACH[:n])
    assert _strengths(doc) == _strengths(fresh.json("inspect"))
    assert doc["retrieval"] == fresh.json("inspect")["retrieval"]
    out = cli.ok("inspect", "--at-seq", str(n)).out
    first = out.splitlines()[0]
    if n:
        assert first.startswith(f"Right after event {n}, recorded ")
    else:
        assert first.startswith("Before the first event")
    assert f"· derivation v{D} · {n} event" in first
    assert "as_of" not in cli.json("inspect")  # the present has no point


def test_as_of_a_bare_date_is_the_end_of_that_local_day(cli: Cli, zone: Any) -> None:
    teach_at_their_times(cli.root)  # recorded 2026-03-01 09:00Z .. 11:00Z
    assert cli.json("inspect", "--as-of", "2026-03-01")["as_of"]["events"] == len(TEACH)
    zone("Pacific/Kiritimati")  # UTC+14: that day ends at 09:59:59.999Z
    doc = cli.json("inspect", "--as-of", "2026-03-01")
    assert doc["as_of"]["events"] == 3 and doc["as_of"]["at_seq"] == 3
    first = cli.ok("inspect", "--as-of", "2026-03-01").out.splitlines()[0]
    assert first.startswith("As of 2026-03-01 23:59 +14 (2026-03-01T09:59:59.999Z): right after")
    zone("UTC")
    assert cli.json("inspect", "--as-of", "2026-03-01T09:15:00Z")["as_of"]["events"] == 2
    assert cli.json("inspect", "--as-of", "2026-02-28")["preferences"] == []


def test_explain_at_seq_tells_the_story_up_to_that_event(cli: Cli) -> None:
    teach_at_their_times(cli.root)
    now = cli.json("explain", "color", "neon_palette")
    assert [s["seq"] for s in now["steps"]] == [4, 5, 6] and "as_of" not in now
    then = cli.json("explain", "color", "neon_palette", "--at-seq", "5")
    assert [s["seq"] for s in then["steps"]] == [4, 5]
    assert then["as_of"]["at_seq"] == 5 and then["as_of"]["events"] == 5
    out = cli.ok("explain", "color", "neon_palette", "--at-seq", "5").out
    assert out.splitlines()[0].startswith("Right after event 5, recorded 2026-03-01 10:10")
    one_line_error(cli("explain", "color", "neon_palette", "--at-seq", "3"), 1, "nothing to")


def test_prompt_as_of_prints_the_block_then_and_the_point_on_stderr(cli: Cli) -> None:
    teach_at_their_times(cli.root)
    now = cli.ok("prompt")
    assert "neon_palette" in now.out and "airy_spacing" in now.out
    then = cli.ok("prompt", "--at-seq", "3")
    assert "airy_spacing" in then.out and "neon_palette" not in then.out
    assert then.err.startswith("Right after event 3, recorded 2026-03-01 09:20")
    doc = cli.json("prompt", "--at-seq", "3")
    assert doc["block"] == then.out.rstrip("\n") and doc["as_of"]["events"] == 3
    assert "as_of" not in cli.json("prompt")
    before = cli.ok("prompt", "--as-of", "2026-02-01")
    assert before.out == "" and "before the first event" in before.err
    assert "no memory block" in before.err
    host = cli.tmp / "host.md"
    host.write_text("## Personal memory\n\nKeep it short.\n", encoding="utf-8")
    composed = cli.json("prompt", "--host-prompt", str(host), "--at-seq", "3")
    assert composed["block"] == doc["block"] and composed["as_of"]["at_seq"] == 3
    assert composed["prompt"].startswith("## Personal memory\n")
    assert doc["block"] in composed["prompt"] and "neon_palette" not in composed["prompt"]
    text = cli.ok("prompt", "--host-prompt", str(host), "--at-seq", "3")
    assert text.out == composed["prompt"] and text.err.startswith("Right after event 3")


@pytest.mark.parametrize("command", [["inspect"], ["explain", "color", "neon_palette"], ["prompt"]])
@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--at-seq", "-1"], ["'--at-seq'", ">= 0"]),
        (["--at-seq", "three"], ["'--at-seq'"]),
        (["--as-of", "last tuesday"], ["'--as-of'", "ISO 8601"]),
        (["--at-seq", "2", "--as-of", "2026-03-01"], ["'--at-seq'", "not both"]),
    ],
)
def test_a_bad_point_is_a_usage_error_naming_the_option(
    cli: Cli, command: list[str], args: list[str], needles: list[str]
) -> None:
    cli.teach()
    before = tree(cli.root)
    one_line_error(cli(*command, *args), 2, *needles)
    assert tree(cli.root) == before


def test_help_documents_the_new_options(cli: Cli) -> None:
    for cmd in (["inspect"], ["explain"], ["prompt"]):
        out = cli.ok(*cmd, "--help").out
        assert "--at-seq N" in out and "--as-of DATE" in out, cmd
    out = cli.ok("derivation", "--help").out
    assert all(name in out for name in ("show", "use", "preview")), out
    assert "--to VERSION" in cli.ok("derivation", "preview", "--help").out


def test_the_past_survives_a_switch_and_forgetting_stays_forgotten(cli: Cli) -> None:
    cli.teach()
    # times are kept to the millisecond, and a switch recorded in the millisecond of an
    # event counts as before it (docs/time-travel.md): the switch comes a millisecond later
    time.sleep(0.002)
    cli.ok("derivation", "use", "2")
    point = cli.json("inspect", "--at-seq", "3")["as_of"]
    assert point["derivation_version"] == D  # the version in force when event 3 came
    assert cli.json("inspect", "--at-seq", str(len(TEACH)))["as_of"]["derivation_version"] == D
    cli.ok("derivation", "use", D)
    cli.ok("forget", "color", "neon_palette")
    for n in range(len(TEACH) + 1):
        doc = cli.json("inspect", "--at-seq", str(n))
        assert all(r["pattern"] != "neon_palette" for r in doc["preferences"]), n
