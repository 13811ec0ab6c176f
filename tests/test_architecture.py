"""The layers are the architecture (docs/architecture.md): this test keeps them honest.

* the import-linter contracts in ``pyproject.toml`` hold on the real package — ``cli`` →
  ``http`` → ``app`` → ``capture``/``storage`` → ``engine``, and the engine imports no I/O,
  clock, environment or framework module;
* the contracts are not vacuous: the same check on a copy of the package with one upward
  import, and with one I/O import in the engine, fails;
* no module in ``src/`` is over 600 lines, the page's scripts (``http/web/*.js``) included;
* every public function and class has a docstring, and the sources point to docs/ in this
  repository (which exist), never to files outside it or to issue numbers.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from creative_memory.http.state import WEB_FILES

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
def test_a_violation_breaks_a_contract(tmp_path: Path, module: str, line: str, broken: str) -> None:
    copy = tmp_path / "src"
    shutil.copytree(PACKAGE, copy / "creative_memory", ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / "creative_memory" / module
    target.write_text(target.read_text(encoding="utf-8") + "\n" + line + "\n", encoding="utf-8")
    done = _lint(copy, ROOT / "pyproject.toml")
    assert done.returncode != 0, done.stdout
    assert f"{broken}" in done.stdout and "BROKEN" in done.stdout


def test_no_module_is_over_the_line_limit() -> None:
    scripts = sorted((PACKAGE / "http" / "web").glob("*.js"))
    assert scripts, "the page's scripts moved: point this test at them"
    long = {
        str(p.relative_to(SRC)): n
        for p in [*sorted(PACKAGE.rglob("*.py")), *scripts]
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_every_page_script_is_served() -> None:
    """Each ES module of the page is in ``WEB_FILES`` (served, packaged, typed as JavaScript)
    and nothing listed is missing."""
    web = PACKAGE / "http" / "web"
    scripts = {p.name for p in web.glob("*.js")}
    listed = {n for n in WEB_FILES if n.endswith(".js")}
    assert scripts == listed
    assert all(WEB_FILES[n].startswith("text/javascript") for n in listed)
    assert all((web / n).is_file() for n in WEB_FILES)


def _public_definitions() -> Iterator[tuple[str, ast.AST]]:
    """Every public function and class (methods included) of every module in ``src/``."""
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        stack: list[tuple[str, ast.AST]] = [("", tree)]
        while stack:
            prefix, node = stack.pop()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    if child.name.startswith("_"):
                        continue
                    name = f"{path.relative_to(SRC)}:{child.lineno} {prefix}{child.name}"
                    yield name, child
                    if isinstance(child, ast.ClassDef):
                        stack.append((f"{prefix}{child.name}.", child))


def test_every_public_function_and_class_has_a_docstring() -> None:
    missing = [
        name
        for name, node in _public_definitions()
        if ast.get_docstring(node) is None  # type: ignore[arg-type]
    ]
    assert not missing, f"{len(missing)} without a docstring:\n" + "\n".join(missing)


#: A file outside this repository (the shared spec, the seeds) or an issue number.
OUTSIDE = re.compile(r"(?<!docs/)\b(?:design|api|engine)\.md\b|\bissues? #?\d+|\.\./shared|seeds/")


def test_sources_point_to_docs_in_this_repository() -> None:
    cited = [
        f"{path.relative_to(SRC)}:{n}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not cited, f"{len(cited)} references outside the repository:\n" + "\n".join(cited)


def test_the_docs_the_sources_point_to_exist() -> None:
    named = {
        m.group(1)
        for path in PACKAGE.rglob("*.py")
        for m in re.finditer(r"\bdocs/([\w.-]+\.(?:md|json))", path.read_text(encoding="utf-8"))
    }
    assert named, "no source points to docs/"
    missing = sorted(n for n in named if not (ROOT / "docs" / n).is_file())
    assert not missing, missing
