"""The file store on file systems unlike a developer's ext4.

A store this process cannot write — a read-only mount such as a backup or a file system
snapshot — is read as it is (docs/storage.md, "A store you cannot write"): every read
answers as on the writable store, nothing under the root changes, and a change fails with
one line naming what could not be written. On a file system that does not tell upper from
lower case, a user id never opens another user's directory."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.test_cli import TEACH, Cli, jsonl, one_line_error

#: what a read-only file system refuses
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class ReadOnly:
    """Makes the file system refuse every write under ``root`` (EROFS), as a read-only
    mount does; ``on`` switches it."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = os.path.realpath(root)
        self.on = False
        self.refused: list[str] = []

        def under_root(path: Any) -> bool:
            if not self.on or not isinstance(path, (str, bytes, os.PathLike)):
                return False  # a descriptor: what it names was opened through open_
            p = os.path.realpath(os.fsdecode(path))
            return p == self.root or p.startswith(self.root + os.sep)

        def refuse(path: Any) -> None:
            self.refused.append(os.fsdecode(path))
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fsdecode(path))

        def guard(real: Callable[..., Any], paths: int, flags: bool = False) -> Callable[..., Any]:
            def guarded(*args: Any, **kw: Any) -> Any:
                wants_write = not flags or args[1] & _WRITE_FLAGS
                for path in args[:paths]:
                    if wants_write and under_root(path):
                        refuse(args[paths - 1])
                return real(*args, **kw)

            return guarded

        monkeypatch.setattr(os, "open", guard(os.open, 1, flags=True))
        for name in ("mkdir", "unlink", "rmdir", "utime", "chmod", "truncate"):
            monkeypatch.setattr(os, name, guard(getattr(os, name), 1))
        for name in ("replace", "rename"):
            monkeypatch.setattr(os, name, guard(getattr(os, name), 2))


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


READS = [
    ("--json", "inspect"),
    ("--json", "inspect", "--project", "landing"),
    ("--json", "inspect", "--at-seq", "4"),
    ("--json", "explain", "color", "neon_palette"),
    ("--json", "timeline", "color", "neon_palette"),
    ("prompt", "--project", "landing"),
    ("--json", "check"),
    ("--json", "derivation"),
    ("--json", "derivation", "preview", "--to", "1"),
]


@pytest.fixture
def taught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Cli, ReadOnly]]:
    cli = Cli(tmp_path)
    cli.teach(TEACH)
    yield cli, ReadOnly(cli.root, monkeypatch)


def test_every_read_answers_as_on_the_writable_store_and_writes_nothing(
    taught: tuple[Cli, ReadOnly],
) -> None:
    cli, read_only = taught
    expected = {args: cli.ok(*args).out for args in READS}
    export = cli.tmp / "before.json"
    cli.ok("export", str(export))
    # a store copied without its derived files: the first read would write them back
    user = cli.root / "alice"
    for derived in [user / "snapshot.json", *(user / "cache").glob("*")]:
        derived.unlink()
    before = tree(cli.root)
    assert set(before) == {"alice/.lock", "alice/events.jsonl"}

    read_only.on = True
    for args in READS:
        assert cli.ok(*args).out == expected[args], args
    after_export = cli.tmp / "after.json"
    cli.ok("export", str(after_export))
    assert after_export.read_bytes() == export.read_bytes()
    assert read_only.refused, "the reads tried no write: the test would not see a change"
    assert tree(cli.root) == before


def test_a_change_fails_in_one_line_and_writes_nothing(taught: tuple[Cli, ReadOnly]) -> None:
    cli, read_only = taught
    before = tree(cli.root)
    read_only.on = True
    for args in (
        ("disable",),
        ("pause",),
        ("ingest", "-"),
        ("forget", "color", "neon_palette"),
        ("reset", "--confirm"),
        ("repair", "--confirm"),
        ("derivation", "use", "1"),
        ("decay",),
    ):
        r = cli(*args, input=jsonl(TEACH[:1]) if args[0] == "ingest" else None)
        one_line_error(r, 1, "Read-only file system")
        assert tree(cli.root) == before, args
    read_only.on = False
    assert cli.json("check")["healthy"] is True
    assert cli.ok("--json", "inspect").out == cli.ok("--json", "inspect").out


def test_a_user_id_that_names_another_users_directory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a file system that does not tell upper from lower case (macOS, Windows), ``ALICE``
    would open ``alice``'s directory (docs/storage.md, "On-disk layout"): simulated here by a
    link ``ALICE`` → ``alice`` that the root does not list, as such a file system lists only
    the name the directory was made with."""
    cli = Cli(tmp_path)
    cli.teach(TEACH)
    (cli.root / "ALICE").symlink_to(cli.root / "alice")
    real_listdir = os.listdir

    def listdir(path: Any = ".") -> list[str]:
        names = real_listdir(path)
        if os.path.realpath(path) == os.path.realpath(cli.root):
            return [n for n in names if n != "ALICE"]
        return names

    monkeypatch.setattr(os, "listdir", listdir)
    log = (cli.root / "alice" / "events.jsonl").read_bytes()
    for args in (("inspect",), ("forget", "color", "neon_palette"), ("ingest", "-")):
        r = cli("--user", "ALICE", *args, input=jsonl([]))
        assert r.code in (1, 2), (args, r)
        assert "names the directory of user 'alice'" in r.err and "upper from lower" in r.err
    assert (cli.root / "alice" / "events.jsonl").read_bytes() == log
    assert cli.json("inspect")["user_id"] == "alice"  # the directory's own user
    cli.ok("--user", "Bob", "enable")  # an id no other directory is spelled like
    assert cli.json("--user", "Bob", "inspect")["settings"]["memory_enabled"] is True
