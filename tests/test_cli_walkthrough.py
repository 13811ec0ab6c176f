"""docs/cli.md's newcomer walkthrough, run verbatim through the CLI's ``main`` in-process.

Between ``<!-- walkthrough:start -->`` and ``<!-- walkthrough:end -->`` the doc holds
``console`` blocks and files. A fenced block right after ``<!-- file: NAME -->`` is written
to ``NAME`` in the working directory. In a ``console`` block every ``$ …`` line is a
command and the lines up to the next ``$`` are its output (stdout and stderr as a terminal
shows them). Supported commands: ``creative-memory …``, ``export NAME=VALUE`` and
``echo $?``. The storage root the doc exports is replaced by a temporary directory, and
that directory is shown under the doc's name in the outputs.
"""

from __future__ import annotations

import contextlib
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from creative_memory.cli.main import main

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
FENCE = re.compile(r"^(`{3,})(\S*)")
FILE_MARK = re.compile(r"^<!--\s*file:\s*(\S+)\s*-->\s*$")


@dataclass
class Step:
    """One command with its expected output, or a file to write."""

    line: int  # in the doc, for failure messages
    command: str | None = None
    expected: list[str] = field(default_factory=list)
    file: str | None = None
    content: str = ""


def parse_walkthrough(text: str) -> list[Step]:
    lines = text.splitlines()
    try:
        start = lines.index("<!-- walkthrough:start -->")
        end = lines.index("<!-- walkthrough:end -->")
    except ValueError as exc:  # pragma: no cover - the doc lost its markers
        raise AssertionError("docs/cli.md has no walkthrough markers") from exc
    steps: list[Step] = []
    i = start + 1
    pending_file: str | None = None
    while i < end:
        mark = FILE_MARK.match(lines[i])
        if mark:
            pending_file = mark.group(1)
            i += 1
            continue
        fence = FENCE.match(lines[i])
        if not fence:
            if lines[i].strip():
                pending_file = None
            i += 1
            continue
        ticks, info = fence.group(1), fence.group(2)
        j = i + 1
        while not lines[j].startswith(ticks):
            j += 1
        body = lines[i + 1 : j]
        if pending_file is not None:
            steps.append(Step(i + 1, file=pending_file, content="\n".join(body) + "\n"))
        elif info == "console":
            for k, row in enumerate(body):
                if row.startswith("$ "):
                    steps.append(Step(i + 2 + k, command=row[2:]))
                else:
                    assert steps and steps[-1].command is not None, f"output before $ at {i}"
                    steps[-1].expected.append(row)
        pending_file = None
        i = j + 1
    return steps


def _normalise(lines: list[str]) -> list[str]:
    out = [line.rstrip() for line in lines]
    while out and not out[-1]:
        out.pop()
    return out


def run_walkthrough(workdir: Path, steps: list[Step]) -> list[tuple[Step, list[str]]]:
    """Run every step; returns each command with its actual (normalised) output."""
    env: dict[str, str | None] = dict.fromkeys(
        ("OD_DATA_DIR", "MEMORY_STORAGE_ROOT", "CREATIVE_MEMORY_USER", "COLUMNS")
    )
    env.update(PYTHONUTF8="1", COLUMNS="120", NO_COLOR="1", TERM="dumb")
    store = workdir / "store"
    doc_roots: dict[str, str] = {}
    results: list[tuple[Step, list[str]]] = []
    last_rc = 0
    for step in steps:
        if step.file is not None:
            (workdir / step.file).write_text(step.content, encoding="utf-8")
            continue
        assert step.command is not None
        argv = shlex.split(step.command)
        if argv[0] == "export":
            name, _, value = argv[1].partition("=")
            if name in ("MEMORY_STORAGE_ROOT", "OD_DATA_DIR"):
                doc_roots[str(store)] = value
                value = str(store)
            env[name] = value
            output: list[str] = []
        elif argv == ["echo", "$?"]:
            output = [str(last_rc)]
        elif argv[0] in ("creative-memory", "od-memory"):
            with contextlib.chdir(workdir):
                r = CliRunner().invoke(main, argv[1:], env=env, prog_name=argv[0])
            if r.exception is not None and not isinstance(r.exception, SystemExit):
                raise r.exception
            last_rc = r.exit_code
            text = r.output  # stdout and stderr interleaved, as a terminal shows them
            for real, shown in doc_roots.items():
                text = text.replace(real, shown)
            output = text.splitlines()
        else:
            raise AssertionError(f"docs/cli.md line {step.line}: unsupported command {argv[0]!r}")
        results.append((step, _normalise(output)))
    return results


@pytest.fixture(scope="module")
def walkthrough(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Step, list[str]]]:
    steps = parse_walkthrough(DOC.read_text(encoding="utf-8"))
    return run_walkthrough(tmp_path_factory.mktemp("walkthrough"), steps)


def test_walkthrough_outputs_match_the_doc(walkthrough: list[tuple[Step, list[str]]]) -> None:
    for step, actual in walkthrough:
        expected = _normalise(step.expected)
        assert actual == expected, (
            f"docs/cli.md line {step.line}: `{step.command}` printed\n"
            + "\n".join(actual)
            + "\n--- but the doc shows ---\n"
            + "\n".join(expected)
        )


def test_walkthrough_covers_the_newcomer_path(walkthrough: list[tuple[Step, list[str]]]) -> None:
    commands = [s.command or "" for s, _ in walkthrough]
    for needed in ("ingest", "inspect", "pause", "resume", "forget", "explain", "prompt",
                   "export alice", "reset --confirm", "import"):  # fmt: skip
        assert any(c.startswith(f"creative-memory {needed}") for c in commands), needed
    # the walkthrough shows a refusal (reset without --confirm) and a rejected ingest line
    codes = [out for s, out in walkthrough if s.command == "echo $?"]
    assert ["2"] in codes and ["1"] in codes
