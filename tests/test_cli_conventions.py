"""The CLI conventions of docs/cli.md ("Conventions"), one test (or a few) per convention,
in-process through click's runner: ``-`` for stdout/stdin, ``--json`` and the global
options on every command, no-ops that say so, dates as the end of a local day, printed
times with their zone, "did you mean …?", real erasure counts, progress only when it
helps, ``NO_COLOR``, and stored strings printed safely."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import click
import pytest
from rich.console import Console

from creative_memory.app.lookup import close_names
from creative_memory.app.service import MemoryService
from creative_memory.cli import render
from creative_memory.cli.commands.inspect import render_inspect
from creative_memory.cli.context import GLOBAL_NAMES
from creative_memory.cli.main import main
from tests.test_cli import TEACH, Cli, event, jsonl, one_line_error, tag


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


@pytest.fixture
def local_tz(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Set the local time zone for one test (``local_tz("Asia/Tokyo")``)."""

    def use(name: str) -> None:
        monkeypatch.setenv("TZ", name)
        time.tzset()

    yield use
    monkeypatch.undo()
    time.tzset()


def all_commands() -> Iterator[tuple[list[str], click.Command]]:
    """Every leaf command of the CLI, with its path."""

    def walk(group: click.Group, path: list[str]) -> Iterator[tuple[list[str], click.Command]]:
        for name, cmd in sorted(group.commands.items()):
            if isinstance(cmd, click.Group):
                yield from walk(cmd, [*path, name])
            else:
                yield [*path, name], cmd

    yield from walk(main, [])


# -- '-' means stdout / stdin -----------------------------------------------------------------
def test_export_dash_writes_only_the_archive_to_stdout_and_import_dash_reads_it(
    cli: Cli, tmp_path: Path
) -> None:
    cli.teach()
    r = cli.ok("export", "-")
    archive = json.loads(r.out)  # stdout is exactly the archive
    assert archive["user_id"] == "alice"
    assert r.err.startswith("Exported 7 events and settings of alice to stdout.")
    assert not (cli.cwd / "-").exists()  # never a file literally named '-'
    # symmetric: import - reads it back (into another store)
    other = tmp_path / "other"
    r2 = cli.ok("--data-dir", str(other), "import", "-", input=r.out.encode())
    assert r2.out == "Imported stdin into alice: 7 events added, 7 in memory.\n"
    assert cli.json("--data-dir", str(other), "inspect")["event_count"] == 7
    # --quiet: not even the summary on stderr
    assert cli.ok("export", "-", "--quiet").err == ""


def test_export_file_positional_and_the_to_alias_write_the_same_archive(cli: Cli) -> None:
    cli.teach()
    a, b = cli.cwd / "a.json", cli.cwd / "b.json"
    assert cli.ok("export", str(a)).out == f"Exported 7 events and settings of alice to {a}.\n"
    cli.ok("export", "--to", str(b))
    assert json.loads(a.read_text())["events"] == json.loads(b.read_text())["events"]
    doc = cli.json("export", str(a))
    assert doc["path"] == str(a) and doc["events"] == 7
    one_line_error(cli("export", str(a), "--to", str(b)), 2, "not both")
    one_line_error(cli("export"), 2, "FILE", "'-'", "--to")


def test_import_dash_validates_like_a_file(cli: Cli) -> None:
    one_line_error(cli("import", "-", input=b"{not json"), 2, "cannot import stdin")
    one_line_error(cli("import", "-", input=b""), 2, "cannot import stdin", "empty")
    assert cli.json("inspect")["event_count"] == 0


def test_ingest_and_host_prompt_read_stdin_with_dash(cli: Cli) -> None:
    assert "accepted 7" in cli.ok("ingest", "-", input=jsonl(TEACH)).out
    out = cli.ok("prompt", "--host-prompt", "-", input=b"# Host\n").out
    assert out.startswith("# Host")


# -- --json and the global options everywhere ---------------------------------------------------
def test_every_command_takes_json_and_every_global_option() -> None:
    seen = []
    for path, cmd in all_commands():
        names = {p.name for p in cmd.params}
        assert names >= GLOBAL_NAMES, (path, GLOBAL_NAMES - names)
        seen.append(" ".join(path))
        # declared once: no command re-declares --data-dir, --user, --database or --json
        for param in cmd.params:
            if param.name in GLOBAL_NAMES:
                continue
            assert not {"--data-dir", "--user", "--database", "--json"} & set(param.opts), path
    assert {"serve", "token", "ui", "demo", "config diagnostics-feed"} <= set(seen)


def test_help_lists_own_options_then_the_global_ones(cli: Cli) -> None:
    for cmd in ("serve", "token", "ui", "inspect"):
        out = cli.ok(cmd, "--help").out
        own, _, shared = out.partition("Global options (also accepted before the command):")
        assert "--data-dir" in shared and "--user" in shared and "--json" in shared, cmd
        assert "--quiet" in shared and "--data-dir" not in own, cmd


def test_global_options_mean_the_same_before_and_after_the_command(
    cli: Cli, tmp_path: Path
) -> None:
    elsewhere = str(tmp_path / "elsewhere")
    before = cli.json("--user", "bob", "--data-dir", elsewhere, "whoami")
    after = cli.json("whoami", "--user", "bob", "--data-dir", elsewhere)
    assert before == after and before["user_id"] == "bob" and before["data_dir"] == elsewhere
    # the value given last wins
    assert cli.json("--user", "bob", "whoami", "--user", "carol")["user_id"] == "carol"
    one_line_error(cli("whoami", "--user", "../x"), 2, "--user")


def test_token_and_ui_json_and_the_shared_options(cli: Cli, tmp_path: Path) -> None:
    import os

    from creative_memory.http import DaemonFiles

    root = tmp_path / "d"
    a = cli.json("token", "--data-dir", str(root), "--user", "alice")
    assert a == {"user_id": "alice", "token": a["token"], "rotated": False}
    same = cli.ok("--data-dir", str(root), "--user", "alice", "token").out.strip()
    assert same == a["token"]
    rotated = cli.json("--data-dir", str(root), "token", "--user", "alice", "--rotate")
    assert rotated["rotated"] is True and rotated["token"] != a["token"]
    DaemonFiles(root).write_server_info(
        {"pid": os.getpid(), "port": 7999, "multi_user": True, "host": "127.0.0.1"}
    )
    doc = cli.json("ui", "--no-browser", "--data-dir", str(root), "--user", "alice")
    assert doc["url"].startswith("http://127.0.0.1:7999/login?once=")
    assert doc["data_dir"] == str(root)
    one_line_error(cli("ui", "--no-browser", "--data-dir", str(tmp_path / "none")), 1, "serve")


def test_serve_json_prints_one_document_once_listening(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import creative_memory.http as http

    configs: list[Any] = []

    def fake_run(config: Any, ready: Any) -> None:
        configs.append(config)
        ready("http://127.0.0.1:4321")

    monkeypatch.setattr(http, "run_daemon", fake_run)
    root = tmp_path / "srv"
    r = cli.ok("serve", "--json", "--data-dir", str(root), "--user", "bob", "--port", "0")
    assert json.loads(r.out) == {
        "url": "http://127.0.0.1:4321",
        "data_dir": str(root),
        "user_id": "bob",
        "multi_user": False,
    }
    assert "daemon on http://127.0.0.1:4321" in r.err
    (config,) = configs
    assert config.root == root and config.user == "bob" and config.port == 0
    configs.clear()
    cli.ok("--derivation-version", "1", "serve", "--multi-user", "--data-dir", str(root))
    assert configs[0].derivation_version == "1" and configs[0].multi_user


@pytest.mark.parametrize(
    ("args", "warned", "hinted"),
    [
        ([], False, False),
        (["--host", "localhost"], False, False),
        (["--host", "0.0.0.0"], True, True),
        # --allow-host does not silence it (docs/daemon.md: anything but loopback warns).
        (["--host", "0.0.0.0", "--allow-host", "box.lan"], True, False),
    ],
)
def test_serve_warns_about_any_bind_but_loopback(
    cli: Cli,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    warned: bool,
    hinted: bool,
) -> None:
    import creative_memory.http as http

    monkeypatch.setattr(http, "run_daemon", lambda config, ready: None)
    r = cli.ok("serve", "--data-dir", str(tmp_path / "srv"), "--user", "bob", *args)
    assert ("warning: binding to 0.0.0.0, not loopback" in r.err) is warned
    assert ("Pass --allow-host NAME" in r.err) is hinted


# -- no-ops say so, exit 0 -------------------------------------------------------------------------
NO_OPS = [
    # (set up, the repeated command, what the no-op says)
    ([], ["enable"], "Memory is already enabled for alice; nothing changed."),  # on by default
    (["disable"], ["disable"], "Memory is already disabled for alice; nothing changed."),
    ([], ["resume"], "Learning was not paused for alice; nothing changed."),
    (["pause"], ["pause"], "Learning is already paused for alice until you run"),
    (["pause", "--until", "2099-01-01T10:00:00Z"], ["pause", "--until", "2099-01-01T10:00:00Z"],
     "Learning is already paused for alice until"),
    (["project-disable", "p1"], ["project-disable", "p1"],
     "Project p1 already ignores alice's global memory; nothing changed."),
    ([], ["project-enable", "p1"], "Project p1 was not disabled; nothing changed."),
    (["config", "diagnostics-feed", "on"], ["config", "diagnostics-feed", "on"],
     "Diagnostics feed is already on for alice; nothing changed."),
]  # fmt: skip


@pytest.mark.parametrize(("setup", "again", "says"), NO_OPS)
def test_a_no_op_says_nothing_changed_and_exits_0(
    cli: Cli, setup: list[str], again: list[str], says: str
) -> None:
    if setup:
        first = cli.json(*setup)
        assert first["changed"] is True, setup
    r = cli.ok(*again)
    assert r.out.splitlines()[0].startswith(says) and "nothing changed." in r.out, r.out
    doc = cli.json(*again)
    assert doc["changed"] is False and "settings" in doc


def test_a_real_change_is_not_reported_as_a_no_op(cli: Cli) -> None:
    assert cli.ok("pause").out.startswith("Learning paused for alice until you run")
    assert cli.ok("resume").out.startswith("Learning resumed for alice.")
    assert cli.json("pause", "--until", "2099-01-01T10:00:00Z")["changed"] is True
    assert cli.json("pause", "--until", "2099-01-02T10:00:00Z")["changed"] is True  # new end


# -- dates: the end of the day, local time; printed times show the zone ---------------------------
@pytest.mark.parametrize(
    ("zone", "date", "stored"),
    [
        ("UTC", "2099-01-01", "2099-01-01T23:59:59.999Z"),
        ("America/New_York", "2099-01-01", "2099-01-02T04:59:59.999Z"),
        ("Asia/Tokyo", "2099-01-01", "2099-01-01T14:59:59.999Z"),
        ("Asia/Tokyo", "2099-02", "2099-02-28T14:59:59.999Z"),  # the end of that month
        ("UTC", "2099", "2099-12-31T23:59:59.999Z"),
        ("Asia/Tokyo", "2099-01-01T10:00:00Z", "2099-01-01T10:00:00.000Z"),  # a time: as given
    ],
)
def test_a_date_without_a_time_is_the_end_of_that_local_day(
    cli: Cli, local_tz: Any, zone: str, date: str, stored: str
) -> None:
    local_tz(zone)
    doc = cli.json("pause", "--until", date)
    assert doc["settings"]["paused_until"] == stored


def test_printed_times_show_their_zone(cli: Cli, local_tz: Any) -> None:
    local_tz("America/New_York")
    r = cli.ok("pause", "--until", "2099-07-04")
    assert "until 2099-07-04 23:59 EDT (2099-07-05T03:59:59.999Z)" in r.out
    assert "learning paused until 2099-07-05T03:59:59.999Z" in r.out  # the settings line
    cli.ok("resume")
    cli.teach()
    rows = [line for line in cli.ok("explain", "color", "neon_palette").out.splitlines()
            if line[:1].isdigit()]  # fmt: skip
    assert rows and all(" 2026-03-01 10:" in row and "Z " in row for row in rows), rows
    assert cli.ok("decay", "--now", "2026-03-02").out.startswith(
        "Decay pass at 2026-03-03T04:59:59.999Z:"
    )


# -- did you mean …? ---------------------------------------------------------------------------
def test_forget_of_an_unknown_name_suggests_close_names_from_my_records(cli: Cli) -> None:
    cli.teach()
    r = cli.ok("forget", "colour", "neon")
    assert r.out == (
        "Nothing to forget: alice has no events about colour/neon in global memory. "
        "Did you mean color/neon_palette?\n"
    )
    assert cli.json("forget", "color", "neon_palete")["suggestions"] == ["color/neon_palette"]
    assert cli.json("forget", "colr", "neon_palette")["suggestions"] == ["color/neon_palette"]
    typo = cli.json("forget", "layout_density", "airy")
    assert typo["suggestions"] == ["layout_density/airy_spacing"]
    assert cli.json("forget", "motion", "parallax")["suggestions"] == []  # nothing close
    assert cli.json("inspect")["event_count"] == 7  # nothing was erased


def test_explain_of_an_unknown_name_suggests_too(cli: Cli) -> None:
    cli.teach()
    one_line_error(
        cli("explain", "colour", "neon_palette"),
        1,
        "nothing to explain",
        "did you mean color/neon_palette?",
    )
    one_line_error(cli("explain", "motion", "parallax"), 1, "nothing to explain")
    assert "did you mean" not in cli("explain", "motion", "parallax").err


def test_suggestions_come_from_the_service_so_http_gets_them(cli: Cli) -> None:
    cli.teach()
    service = MemoryService(cli.store())
    result = service.forget("alice", "colour", "neon")
    assert result.events_removed == 0 and result.suggestions == ["color/neon_palette"]
    assert close_names(service.store, "bob", "color", "neon") == []  # only the user's own


# -- erasure counts are the real counts -----------------------------------------------------------
def test_erasure_messages_count_what_was_erased(cli: Cli) -> None:
    cli.teach()
    cli.ok("ingest", "-", input=jsonl([tag("serif_headings", "keep this style", "typography",
                                           artifact="a8", project="landing",
                                           ts="2026-03-01T12:00:00Z")]))  # fmt: skip
    in_landing = [e for e in cli.store().events("alice") if getattr(e, "project_id", None)]
    assert len(in_landing) == 2
    r = cli.ok("reset", "--confirm", "--scope", "project:landing")
    after = cli.json("inspect")
    assert r.out.startswith("Reset alice's memory (scope project:landing): 2 events erased")
    assert cli.json("reset", "--confirm", "--scope", "project:landing")["events_removed"] == 0
    assert not [p for p in after["preferences"] if p["scope"] != "global"]
    before = after["event_count"]
    r = cli.ok("forget", "color", "neon_palette")
    erased = before - cli.json("inspect")["event_count"]
    assert erased == 3
    assert r.out == f"Forgot color/neon_palette in global memory: {erased} events erased.\n"


# -- progress: rich on stderr, only on a terminal, only after a second, never with --quiet ----
class FakeProgress:
    """Records what the CLI does with rich's Progress."""

    made: ClassVar[list[FakeProgress]] = []

    def __init__(self, *columns: Any, **kw: Any) -> None:
        self.started = False
        self.advanced = 0
        self.total: float | None = None
        FakeProgress.made.append(self)

    def add_task(self, description: str, total: float | None = None) -> int:
        self.description, self.total = description, total
        return 1

    def start(self) -> None:
        self.started = True

    def stop(self) -> None:
        pass

    def advance(self, task: int, n: float) -> None:
        self.advanced += int(n)


@pytest.fixture
def fake_progress(monkeypatch: pytest.MonkeyPatch) -> type[FakeProgress]:
    import rich.progress

    FakeProgress.made = []
    monkeypatch.setattr(rich.progress, "Progress", FakeProgress)
    monkeypatch.setattr(render, "_stderr_is_terminal", lambda: True)
    return FakeProgress


def _many(n: int = 150) -> str:
    return jsonl([
        event("thumbs_rated", f"p{i % 5}", artifact=f"a{i}", rating="up",
              ts=f"2026-03-01T10:{i // 60:02d}:{i % 60:02d}Z")
        for i in range(n)
    ])  # fmt: skip


def test_progress_bar_for_a_long_ingest_on_a_terminal(
    cli: Cli, fake_progress: type[FakeProgress]
) -> None:
    cli.ok("ingest", "-", input=_many(), env={"CREATIVE_MEMORY_PROGRESS_DELAY": "0"})
    (bar,) = fake_progress.made
    assert bar.description == "Ingesting 150 events" and bar.total == 150
    assert bar.started and bar.advanced == 150


def test_no_progress_with_quiet_or_off_a_terminal(
    cli: Cli, fake_progress: type[FakeProgress], monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {"CREATIVE_MEMORY_PROGRESS_DELAY": "0"}
    cli.ok("--quiet", "ingest", "-", input=_many(), env=env)
    cli.ok("export", "-q", str(cli.cwd / "x.json"), env=env)
    assert fake_progress.made == []
    monkeypatch.setattr(render, "_stderr_is_terminal", lambda: False)
    cli.ok("import", str(cli.cwd / "x.json"), env=env)
    assert fake_progress.made == []


def test_progress_waits_a_second_before_showing(
    cli: Cli, fake_progress: type[FakeProgress]
) -> None:
    cli.ok("ingest", "-", input=_many(), env={"CREATIVE_MEMORY_PROGRESS_DELAY": "30"})
    (bar,) = fake_progress.made
    assert not bar.started  # done before the delay: nothing was shown
    assert render.PROGRESS_DELAY_S == 1.0


# -- colour -----------------------------------------------------------------------------------
def test_no_color_is_honoured_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Console, "is_terminal", property(lambda self: True))
    monkeypatch.setenv("NO_COLOR", "1")
    assert render.console().no_color and render.no_color()
    monkeypatch.setenv("NO_COLOR", "")
    assert not render.console().no_color
    monkeypatch.delenv("NO_COLOR")
    assert not render.no_color()


def test_piped_output_has_no_escape_sequences(cli: Cli) -> None:
    cli.teach()
    for args in (["inspect"], ["explain", "color", "neon_palette"], ["whoami"]):
        assert "\x1b" not in cli.ok(*args).out, args


# -- stored strings are printed safely -------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("neon_palette", "neon_palette"),
        ("a\nb", "a\\nb"),
        ("x\x1b[31mred", "x\\x1b[31mred"),
        ("tab\there", "tab\\there"),
        ("cr\rlf", "cr\\rlf"),
        ("\u202eevil", "\\u202eevil"),  # a bidi override
        ("line\u2028sep", "line\\u2028sep"),
        ("caf\u00e9 \u2014 \u00fc", "caf\u00e9 \u2014 \u00fc"),  # printable text stays as it is
        ("\x9b31m", "\\x9b31m"),  # the C1 control sequence introducer
    ],
)
def test_safe_escapes_what_could_break_a_line_or_the_terminal(raw: str, shown: str) -> None:
    assert render.safe(raw) == shown
    assert "\n" not in render.safe(raw) and "\x1b" not in render.safe(raw)


def test_renderers_escape_stored_strings_and_never_interpret_markup(cli: Cli) -> None:
    cli.teach()
    doc = MemoryService(cli.store()).inspect("alice")
    evil = "neon\x1b[2J\n[bold red]boom[/]"
    for rec in doc["preferences"]:
        rec["pattern"] = evil
    doc["retrieval"]["negatives"][0]["pattern"] = evil
    out = io.StringIO()
    render_inspect(doc, Console(file=out, width=200, color_system=None, markup=False))
    text = out.getvalue()
    assert "\x1b" not in text and "neon\\x1b[2J\\n[bold red]boom[/]" in text
    # the same through the real console factory (markup off there too)
    assert render.console().__dict__["_markup"] is False


def test_a_hostile_event_kind_is_reported_on_one_line(cli: Cli) -> None:
    bad = event("thumbs_rated", "p", rating="up")
    bad["event"] = "evil\x1b]0;pwned\x07\nline 9: accepted"
    r = cli("ingest", "-", input=jsonl([bad]))
    assert r.code == 1
    report = r.out.splitlines()
    assert len(report) == 2 and "\x1b" not in r.out and "\x07" not in r.out, report
    assert "evil\\x1b]0;pwned\\x07\\nline 9: accepted" in report[1]


def test_a_spinner_for_explain_check_and_repair_on_a_terminal(
    cli: Cli, fake_progress: type[FakeProgress]
) -> None:
    """The calls that read the whole log (explain fits the memory again at each event of the
    pattern: seconds on a long history) show an activity spinner after a second."""
    env = {"CREATIVE_MEMORY_PROGRESS_DELAY": "0"}
    cli.ok("ingest", "-", input=_many(10), env=env)
    FakeProgress.made = []
    cli.ok("explain", "color", "p1", env=env)
    cli.ok("check", env=env)
    cli.ok("repair", "--confirm", env=env)
    assert [(b.description, b.total, b.started) for b in fake_progress.made] == [
        ("Explaining color/p1", None, True),
        ("Checking alice's memory", None, True),
        ("Repairing alice's memory", None, True),
    ]
