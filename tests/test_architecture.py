"""The layers are the architecture (docs/architecture.md): this test keeps them honest.

* the import-linter contracts in ``pyproject.toml`` hold on the real package — ``cli`` →
  ``http`` → ``app`` → ``capture``/``storage`` → ``engine``, and the engine imports no I/O,
  clock, environment or framework module;
* the contracts are not vacuous: the same check on a copy of the package with one upward
  import, and with one I/O import in the engine, fails;
* no module in ``src/`` is over 600 lines.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
PACKAGE = SRC / "creative_memory"
MAX_LINES = 600
LAYERS = ("cli", "http", "app", "capture", "storage", "engine")


def _lint(src: Path, config: Path) -> subprocess.CompletedProcess[str]:
    """Run ``lint-imports`` against the package found under ``src``."""
    script = (
        "import sys; from importlinter.cli import lint_imports_command; "
        "sys.exit(lint_imports_command())"
    )
    return subprocess.run(
        [sys.executable, "-c", script, "--no-cache", "--no-logo", str(config)],
        cwd=src,
        env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_every_layer_is_a_package() -> None:
    for layer in LAYERS:
        assert (PACKAGE / layer / "__init__.py").is_file(), layer


def test_the_contracts_hold() -> None:
    done = _lint(SRC, ROOT / "pyproject.toml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 kept, 0 broken" in done.stdout


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        (
            "engine/models.py",
            "from creative_memory.app import store as _upward  # noqa",
            "Layers",
        ),
        ("storage/base.py", "from creative_memory.capture import adapter as _up  # noqa", "Layers"),
        ("engine/prompt.py", "import os as _io  # noqa", "The engine is pure"),
    ],
)
def test_a_violation_breaks_a_contract(
    tmp_path: Path, module: str, line: str, broken: str
) -> None:
    copy = tmp_path / "src"
    shutil.copytree(PACKAGE, copy / "creative_memory", ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / "creative_memory" / module
    target.write_text(target.read_text(encoding="utf-8") + "\n" + line + "\n", encoding="utf-8")
    done = _lint(copy, ROOT / "pyproject.toml")
    assert done.returncode != 0, done.stdout
    assert f"{broken}" in done.stdout and "BROKEN" in done.stdout


def test_no_module_is_over_the_line_limit() -> None:
    long = {
        str(p.relative_to(SRC)): n
        for p in sorted(PACKAGE.rglob("*.py"))
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"
