"""The CLI at its edges: files that are not plain files, empty option values, a second
daemon, another user's prototype file, the past on every view, suggestions across scopes,
escaped error lines, broken pipes (docs/cli.md). In-process through click's runner unless
a real process is the point."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path
from typing import Any, ClassVar

import pytest

from creative_memory.storage.files.fsutil import atomic_write
from tests.test_cli import PROTO, TEACH, Cli, one_line_error


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


def _archive(data: bytes) -> dict[str, object]:
    doc = json.loads(data)
    assert isinstance(doc, dict) and doc["user_id"] == "alice", doc
    return doc


class Reader(threading.Thread):
    """Reads a FIFO (or a pipe's read end) to its end in the background."""

    def __init__(self, path: Path | None = None, fd: int | None = None) -> None:
        super().__init__(daemon=True)
        self.path, self.fd, self.data = path, fd, b""

    def run(self) -> None:
        if self.path is not None:
            self.data = self.path.read_bytes()
            return
        assert self.fd is not None
        with os.fdopen(self.fd, "rb") as f:
            self.data = f.read()


# -- export into what is not a plain file ------------------------------------------------------
def test_export_writes_into_a_fifo_and_keeps_it(cli: Cli, tmp_path: Path) -> None:
    cli.teach(TEACH[:2])
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    reader = Reader(fifo)
    reader.start()
    cli.ok("export", str(fifo))
    reader.join(30)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert len(_archive(reader.data)["events"]) == 2  # type: ignore[arg-type]


def test_export_through_a_symlink_replaces_its_target_and_keeps_the_link(
    cli: Cli, tmp_path: Path
) -> None:
    cli.teach(TEACH[:1])
    (tmp_path / "b").mkdir()
    real = tmp_path / "b" / "real.json"
    real.write_text("keep\n")
    link = tmp_path / "link.json"
    link.symlink_to(Path("b") / "real.json")  # relative, as `ln -s` makes it
    r = cli.ok("export", str(link))
    assert str(link) in r.out
    assert link.is_symlink() and os.readlink(link) == str(Path("b") / "real.json")
    _archive(real.read_bytes())
    assert not list(tmp_path.glob(".*.tmp")) and not list((tmp_path / "b").glob(".*.tmp"))
    # a link to a file not there yet: the file is created where the link points
    dangling = tmp_path / "later.json"
    dangling.symlink_to(tmp_path / "b" / "new.json")
    cli.ok("export", str(dangling))
    assert dangling.is_symlink()
    _archive((tmp_path / "b" / "new.json").read_bytes())


def test_export_into_a_descriptor(cli: Cli, tmp_path: Path) -> None:
    """``export /dev/fd/N`` (what a shell's ``>(gzip > x.gz)`` passes) writes into the
    descriptor: a pipe, or a file opened for appending."""
    cli.teach(TEACH[:1])
    r_fd, w_fd = os.pipe()
    reader = Reader(fd=r_fd)
    reader.start()
    try:
        cli.ok("export", f"/dev/fd/{w_fd}")
    finally:
        os.close(w_fd)
    reader.join(30)
    _archive(reader.data)
    log = tmp_path / "log.txt"
    log.write_bytes(b"HEAD\n")
    inode = log.stat().st_ino
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    try:
        cli.ok("export", f"/dev/fd/{fd}")
    finally:
        os.close(fd)
    assert log.stat().st_ino == inode  # the very file the descriptor holds
    data = log.read_bytes()
    assert data.startswith(b"HEAD\n")
    _archive(data[5:])


def test_export_errors_name_the_file_never_a_temp_file(cli: Cli, tmp_path: Path) -> None:
    cli.teach(TEACH[:1])
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "gone" / "x.json")
    r = cli("export", str(link))
    one_line_error(r, 1, f"cannot use {link}")
    assert ".tmp" not in r.err and link.is_symlink()


def test_atomic_write_keeps_a_regular_file_atomic(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_bytes(b"old")
    inode = path.stat().st_ino
    atomic_write(path, b"new")
    assert path.read_bytes() == b"new" and path.stat().st_ino != inode  # renamed over
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_export_to_the_file_stdout_writes_to_keeps_the_summary_out(
    cli: Cli, tmp_path: Path
) -> None:
    """``export /dev/stdout > out.json`` (here ``/proc/self/fd/1``): the archive goes
    through stdout, as with ``-``, and the summary to stderr, so neither overwrites the
    other."""
    import subprocess
    import sys

    cli.teach(TEACH[:1])
    out = tmp_path / "out.json"
    with out.open("wb") as f:
        proc = subprocess.run(
            [sys.executable, "-m", "creative_memory.cli", "export", "/proc/self/fd/1"],
            stdout=f, stderr=subprocess.PIPE, env=cli.env, cwd=cli.cwd, timeout=120,
            check=False,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    _archive(out.read_bytes())
    assert b"Exported 1 event" in proc.stderr


# -- an empty --data-dir --------------------------------------------------------------------
@pytest.mark.parametrize("where", ["before", "after"])
@pytest.mark.parametrize("command", [["whoami"], ["reset", "--confirm"], ["token"]])
def test_an_empty_data_dir_is_refused(cli: Cli, where: str, command: list[str]) -> None:
    cli.teach(TEACH[:1])
    args = ["--data-dir", "", *command] if where == "before" else [*command, "--data-dir", ""]
    one_line_error(cli(*args), 2, "Invalid value for '--data-dir'", "empty")
    assert cli.store().events("alice")  # the default store was not touched


def test_an_empty_environment_root_counts_as_unset(cli: Cli) -> None:
    doc = cli.json("whoami", env={"OD_DATA_DIR": ""})
    assert doc["data_dir_source"] == "MEMORY_STORAGE_ROOT"


# -- one daemon per data dir ----------------------------------------------------------------
class StubServer:
    """Stands in for uvicorn: records what ``server.json`` said while it "served"."""

    seen: ClassVar[list[dict[str, Any] | None]] = []

    def __init__(self, root: Path) -> None:
        self.root = root

    def run(self, sockets: Any = None) -> None:
        from creative_memory.http import DaemonFiles

        StubServer.seen.append(DaemonFiles(self.root).read_server_info())


@pytest.fixture
def stub_uvicorn(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any] | None]:
    from creative_memory.http import run as run_module

    StubServer.seen = []
    monkeypatch.setattr(run_module, "_uvicorn_server", lambda app: StubServer(cli.root))
    return StubServer.seen


def test_a_second_daemon_on_the_same_data_dir_is_refused(
    cli: Cli, stub_uvicorn: list[dict[str, Any] | None]
) -> None:
    import socket

    from creative_memory.http import DaemonFiles

    files = DaemonFiles(cli.root)
    with socket.socket() as listening:  # the first daemon: this process, its port open
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        url = f"http://127.0.0.1:{port}/"
        first = {"pid": os.getpid(), "host": "127.0.0.1", "port": port, "url": url}
        files.write_server_info(first)
        r = cli("serve", "--port", "0")
        one_line_error(r, 1, "already serving", url, f"pid {os.getpid()}")
        assert files.read_server_info() == first and stub_uvicorn == []
    # the first one is gone (nothing listens on its port): its server.json is replaced
    cli.ok("serve", "--port", "0")
    assert stub_uvicorn[0] is not None and stub_uvicorn[0]["port"] != port
    assert files.read_server_info() is None  # removed when this one stopped


def test_a_stale_server_file_of_a_dead_process_is_replaced(
    cli: Cli, stub_uvicorn: list[dict[str, Any] | None]
) -> None:
    from creative_memory.http import DaemonFiles

    DaemonFiles(cli.root).write_server_info(
        {"pid": 2**22 + 12345, "host": "127.0.0.1", "port": 1, "url": "http://127.0.0.1:1/"}
    )
    cli.ok("serve", "--port", "0")
    assert stub_uvicorn[0] is not None and stub_uvicorn[0]["pid"] == os.getpid()


# -- migrate: whose file, and what it switched --------------------------------------------
def test_migrate_refuses_another_users_file_unless_named(cli: Cli, tmp_path: Path) -> None:
    paused = PROTO / "paused_user"
    r = cli("--user", "designer", "migrate", str(paused))
    one_line_error(r, 2, "holds the preferences of 'paused_user', not of 'designer'",
                   "--from-user paused_user")  # fmt: skip
    assert not (cli.root / "designer").exists()  # nothing written
    r = cli("--user", "designer", "migrate", "--from-user", "bob", str(paused))
    one_line_error(r, 2, "Invalid value for '--from-user'", "not of 'bob'")
    assert not (cli.root / "designer").exists()
    r = cli.ok("--user", "designer", "migrate", "--from-user", "paused_user", str(paused))
    assert r.out.splitlines() == [
        f"Imported 1 prototype record from {paused} (paused_user's file) into designer.",
        "The file's master switch turned memory OFF for designer: nothing is learned or "
        "injected until `creative-memory enable`.",
        "Settings: memory OFF (nothing learned or injected) · learning active · "
        "diagnostics feed off",
        "Note: derivation v5 reads each record as a statement about that feature: a "
        "prototype hint can weigh more than the prototype gave it. `creative-memory "
        "derivation preview --to 1` shows the prototype's reading (docs/storage.md, "
        '"Prototype import").',
    ]
    # under a prototype root, --from-user picks <root>/<from-user>/preferences.json
    doc = cli.json("--user", "ann", "migrate", "--from-user", "paused_user", str(PROTO))
    assert doc["file"] == str(paused / "preferences.json")
    assert doc["file_user_id"] == "paused_user" and doc["settings_changed"] is True
    assert doc["settings"]["memory_enabled"] is False
    # the owner's own file: no option needed; a re-import that changes nothing says nothing
    cli.ok("--user", "paused_user", "migrate", str(paused))
    r = cli.ok("--user", "paused_user", "migrate", str(paused))
    assert r.out.startswith("Nothing new to import") and "Settings:" not in r.out


# -- derivation use: a default is not a choice ------------------------------------------------
def test_use_of_the_version_in_force_only_by_default_records_the_choice(cli: Cli) -> None:
    r = cli.ok("--derivation-version", "3", "derivation", "use", "3")
    assert r.out.startswith("Derivation version 3 is now alice's own choice")
    info = cli.json("derivation")  # a plain run: the store's default is the library's again
    assert (info["in_force"], info["chosen"], info["history"]) == ("3", True, [])
    again = cli.json("--derivation-version", "3", "derivation", "use", "3")
    assert again["changed"] is False  # now it is the choice: nothing changed
    assert cli.json("derivation", "use", "2")["changed"] is True
    assert [(c["previous"], c["version"]) for c in cli.json("derivation")["history"]] == [
        ("3", "2")
    ]


# -- whoami and --database ---------------------------------------------------------------------
def test_whoami_reports_the_database_with_its_password_hidden(cli: Cli) -> None:
    url = "postgresql://bob:s3cret@db.example:5432/mem?sslmode=require&password=zz"
    r = cli.ok("--database", url, "whoami")
    assert r.out.splitlines()[1] == (
        "database  postgresql://bob:***@db.example:5432/mem?sslmode=require&password=***"
        "  (--database)"
    )
    assert "s3cret" not in r.out and "zz" not in r.out and "data dir" not in r.out
    doc = cli.json("whoami", env={"CREATIVE_MEMORY_DATABASE_URL": "postgres://db.example/m"})
    assert doc["storage"] == "postgresql" and "data_dir" not in doc
    assert doc["database"] == "postgres://db.example/m"
    assert doc["database_source"] == "CREATIVE_MEMORY_DATABASE_URL"
    assert cli.json("whoami")["storage"] == "files"


def test_a_data_dir_given_beats_the_environments_database(cli: Cli, tmp_path: Path) -> None:
    """A --data-dir on the command line says where memory is this time: the environment's
    database is not used behind it (a reset there erased the database's memory), and
    beside --database it is refused — which store a command acts on is never a guess."""
    env = {"CREATIVE_MEMORY_DATABASE_URL": "postgresql://u:pw@127.0.0.1:1/never-reached"}
    here = str(tmp_path / "here")
    doc = cli.json("--data-dir", here, "whoami", env=env)
    assert doc["storage"] == "files" and doc["data_dir"] == here
    cli.ok("--data-dir", here, "enable", env=env)  # on files: the database is never asked
    assert (tmp_path / "here" / "alice" / "settings.json").exists()
    r = cli("--data-dir", here, "--database", env["CREATIVE_MEMORY_DATABASE_URL"], "reset",
            "--confirm")  # fmt: skip
    one_line_error(r, 2, "give --data-dir or --database, not both")


def test_a_database_url_that_is_not_postgresql_is_a_usage_error(cli: Cli) -> None:
    one_line_error(cli("--database", "mysql://x", "inspect"), 2,
                   "Invalid value for '--database'", "postgresql://")  # fmt: skip
    one_line_error(cli("inspect", "--database", "mysql://u:pw@x"), 2, "'--database'")
    r = cli("inspect", env={"CREATIVE_MEMORY_DATABASE_URL": "mysql://u:pw@x"})
    one_line_error(r, 2, "CREATIVE_MEMORY_DATABASE_URL", "postgresql://")
    assert "pw" not in r.err


# -- groups ------------------------------------------------------------------------------------
@pytest.mark.parametrize("args", [[], ["config"]])
def test_a_group_without_a_command_shows_its_help(cli: Cli, args: list[str]) -> None:
    r = cli(*args)
    assert r.code == 2 and r.out == ""
    assert r.err.startswith("Usage: creative-memory") and "Error:" not in r.err
    assert "\nCommands:\n" in r.err and len(r.err.splitlines()) > 10


def test_global_options_work_after_the_config_group_too(cli: Cli) -> None:
    doc = cli.json("config", "--user", "bob", "diagnostics-feed", "on")
    assert doc["user_id"] == "bob" and doc["settings"]["diagnostics_feed"] is True
    r = cli.ok("config", "--json", "diagnostics-feed", "--user", "bob")
    assert json.loads(r.out)["settings"]["diagnostics_feed"] is True


# -- the past: timeline says which point, a point past the end is the last event -------------
def test_timeline_at_a_point_says_which_point_like_explain(cli: Cli) -> None:
    cli.teach(TEACH)
    r = cli.ok("timeline", "color", "neon_palette", "--at-seq", "5")
    first = r.out.splitlines()[0]
    assert first.startswith("Right after event 5, recorded ")
    assert first.endswith("· 5 events of today's log")
    assert first == cli.ok("explain", "color", "neon_palette", "--at-seq", "5").out.splitlines()[0]
    doc = cli.json("timeline", "color", "neon_palette", "--at-seq", "5")
    assert doc["as_of"]["at_seq"] == 5 and doc["as_of"]["events"] == 5
    assert [e["seq"] for e in doc["events"]] == [4, 5]
    assert "as_of" not in cli.json("timeline", "color", "neon_palette")
    assert not cli.ok("timeline", "color", "neon_palette").out.startswith("Right after")


def test_a_point_past_the_end_is_named_as_the_last_event(cli: Cli) -> None:
    cli.teach(TEACH)  # 7 events
    r = cli.ok("inspect", "--at-seq", "50")
    assert r.out.startswith("Right after event 7, recorded ")
    for args in (["inspect"], ["explain", "color", "neon_palette"],
                 ["timeline", "color", "neon_palette"]):  # fmt: skip
        doc = cli.json(*args, "--at-seq", "50")
        assert (doc["as_of"]["at_seq"], doc["as_of"]["events"]) == (7, 7), args


# -- suggestions look in the other scopes, and in time -------------------------------------------
def test_a_pattern_in_another_scope_is_pointed_to_not_a_close_name(cli: Cli) -> None:
    cli.teach(TEACH)  # serif_headings only in project landing; airy_spacing only global
    r = cli.ok("forget", "typography", "serif_headings")
    assert r.out == (
        "Nothing to forget: alice has no events about typography/serif_headings in global "
        "memory. It is in project landing (--project landing).\n"
    )
    doc = cli.json("forget", "layout_density", "airy_spacing", "--project", "landing")
    assert doc["elsewhere"] == ["global"] and doc["suggestions"] == []
    r = cli.ok("forget", "layout_density", "airy_spacing", "--project", "landing")
    assert r.out.endswith("It is in global memory (without --project).\n")
    one_line_error(cli("explain", "typography", "serif_headings"), 1,
                   "no memory of typography/serif_headings in global memory; "
                   "it is in project landing")  # fmt: skip
    one_line_error(cli("timeline", "typography", "serif_headings"), 1, "it is in project landing")
    assert cli.json("inspect")["event_count"] == 7  # nothing was erased


def test_nothing_at_a_point_in_the_past_says_so(cli: Cli) -> None:
    cli.teach(TEACH)  # neon_palette from event 4 on
    r = cli("explain", "color", "neon_palette", "--at-seq", "2")
    one_line_error(r, 1, "alice had no memory of color/neon_palette in global memory at that "
                   "point (right after event 2); it was learned later")  # fmt: skip
    r = cli("timeline", "color", "neon_palette", "--at-seq", "0")
    one_line_error(r, 1, "at that point (before the first event)")


# -- error lines are escaped like every other line -------------------------------------------
@pytest.mark.parametrize("text", ["a\x1b[31mRED", "x\u202ey", "q\x07\u2066z"])
def test_error_lines_escape_what_the_person_typed(cli: Cli, text: str) -> None:
    cli.teach(TEACH[:1])
    shown = text.encode("unicode_escape").decode("ascii")
    for args, code in ((["explain", "color", text], 1), (["timeline", text, "x"], 1),
                       (["pause", "--until", text], 2), (["inspect", "--project", text], 2),
                       (["--user", text, "whoami"], 2)):  # fmt: skip
        r = cli(*args)
        one_line_error(r, code)
        assert not any(c in r.err for c in "\x1b\u202e\x07\u2066"), (args, r.err)
        assert shown in r.err or shown.replace("\\\\", "\\") in r.err, (args, r.err)


def test_pause_while_memory_is_off_does_not_promise_injection(cli: Cli) -> None:
    cli.ok("disable")
    r = cli.ok("pause")
    assert r.out.splitlines()[0] == (
        "Learning paused for alice until you run `creative-memory resume`; memory is off, so "
        "nothing is injected either (`creative-memory enable`)."
    )
    cli.ok("resume")
    cli.ok("enable")
    assert "; injection continues." in cli.ok("pause").out


# -- a reader that goes away ---------------------------------------------------------------------
@pytest.mark.parametrize("args", [["inspect"], ["--json", "inspect"], ["export", "-"], ["--help"]])
def test_a_closed_stdout_pipe_exits_141_quietly(cli: Cli, args: list[str]) -> None:
    """``creative-memory inspect | head -1``: the reader is gone before the output is
    written; the command exits 141 (128 + SIGPIPE) with nothing on stderr."""
    import subprocess
    import sys

    cli.teach(TEACH)
    r_fd, w_fd = os.pipe()
    os.close(r_fd)  # the reader went away before anything was written
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "creative_memory.cli", *args],
            stdout=w_fd, stderr=subprocess.PIPE, env=cli.env, cwd=cli.cwd, timeout=120,
            check=False,
        )  # fmt: skip
    finally:
        os.close(w_fd)
    assert (proc.returncode, proc.stderr) == (141, b""), (args, proc.stderr.decode())


# -- wording -------------------------------------------------------------------------------------
def test_reset_without_confirm_names_the_flag_not_the_http_field(cli: Cli) -> None:
    r = cli("reset")
    one_line_error(r, 2, "a reset erases memory for real: confirm it with --confirm")
    assert "confirm=true" not in r.err


def test_ingest_names_its_argument_alike_for_every_bad_path(cli: Cli, tmp_path: Path) -> None:
    one_line_error(cli("ingest", str(tmp_path / "nope")), 2, "Invalid value for '[FILE|-]'")
    one_line_error(cli("ingest", str(tmp_path)), 2, "Invalid value for '[FILE|-]'", "directory")
