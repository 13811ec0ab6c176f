"""The docs are self-contained: every relative link in README.md and docs/*.md resolves to a
file in this repository (and an ``#anchor`` to a heading of it), nothing points outside the
repository, and docs/api.md describes every public name (docs/api.md, README.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import creative_memory as cm
from creative_memory import MemoryStore

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(`{3,}|~{3,})")


def prose(text: str, *, inline_code: bool = False) -> str:
    """``text`` without fenced code blocks and (unless ``inline_code``) inline code: links
    there are not links."""
    out, fence = [], None
    for line in text.splitlines():
        m = FENCE.match(line.strip())
        if m and (fence is None or m.group(1).startswith(fence)):
            fence = None if fence is not None else m.group(1)
            continue
        if fence is None:
            out.append(line if inline_code else re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file (duplicates get -1, -2, … as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    for line in prose(path.read_text(encoding="utf-8"), inline_code=True).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    return [m.group("target") for m in LINK.finditer(prose(path.read_text(encoding="utf-8")))]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_inside_the_repository(doc: Path) -> None:
    problems = []
    for target in links(doc):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, fragment = target.partition("#")
        dest = (doc.parent / file_part).resolve() if file_part else doc
        if ROOT not in dest.parents and dest != ROOT:
            problems.append(f"{target}: outside the repository")
            continue
        if not dest.exists():
            problems.append(f"{target}: no such file")
            continue
        if fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            problems.append(f"{target}: no heading #{fragment} in {dest.relative_to(ROOT)}")
    assert not problems, f"{doc.relative_to(ROOT)}: " + "; ".join(problems)


def test_the_readme_has_the_links_a_newcomer_needs() -> None:
    targets = {t.partition("#")[0] for t in links(ROOT / "README.md")}
    for needed in ("docs/api.md", "docs/engine.md", "docs/architecture.md", "docs/cli.md",
                   "docs/capture.md", "docs/daemon.md", "docs/storage.md"):  # fmt: skip
        assert needed in targets, needed
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for section in ("Install the command-line tool", "Quickstart: library",
                    "Quickstart: command line", "Quickstart: daemon",
                    "Quickstart: host integration", "Configuration", "Where your data lives",
                    "Privacy: what is stored, and how to erase it", "Troubleshooting",
                    "Why these dependencies"):  # fmt: skip
        assert f"\n## {section}\n" in text, section
    for install in ("pipx install .", "uv tool install .", "pip install ."):
        assert install in text, install


def test_no_doc_points_at_the_outside_spec() -> None:
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        assert "../shared" not in text, doc.name


def test_the_link_checker_catches_a_broken_link(tmp_path: Path) -> None:
    """The checker itself: a missing file, an escape and a missing anchor are all found."""
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[a](missing.md) [b](#title) [c](#nope)\n`[d](code.md)`\n")
    assert links(page) == ["missing.md", "#title", "#nope"]
    assert anchors(page) == {"title"}
    assert slug("Privacy: what is stored, and how to erase it") == (
        "privacy-what-is-stored-and-how-to-erase-it"
    )


# -- docs/api.md describes the whole public surface --------------------------------------------
API = ROOT / "docs" / "api.md"


def documented() -> set[str]:
    """The names docs/api.md gives a section: ``### `name` `` or ``### `MemoryStore.name` ``."""
    return set(re.findall(r"^### `([\w.]+)`\s*$", API.read_text(encoding="utf-8"), re.M))


def test_api_doc_describes_every_exported_name() -> None:
    missing = sorted(set(cm.__all__) - documented())
    assert not missing, f"docs/api.md has no section for {missing}"


def test_api_doc_describes_every_memory_store_method() -> None:
    public = {n for n in dir(MemoryStore) if not n.startswith("_")}
    missing = sorted(f"MemoryStore.{n}" for n in public if f"MemoryStore.{n}" not in documented())
    assert not missing, f"docs/api.md has no section for {missing}"


def test_api_doc_describes_nothing_that_is_not_public() -> None:
    public = set(cm.__all__) | {f"MemoryStore.{n}" for n in dir(MemoryStore) if n[0] != "_"}
    assert documented() - public == set()


def test_api_doc_matches_the_pinned_surface() -> None:
    """Every name in tests/fixtures/public_api.txt (the API guard) has its section."""
    pinned = (ROOT / "tests" / "fixtures" / "public_api.txt").read_text(encoding="utf-8")
    names: set[str] = set()
    current = ""
    for line in pinned.splitlines():
        top = re.match(r"^(?:class |def |module )?(\w+)", line)
        method = re.match(r"^  (?:def |property )(\w+)", line)
        if method and current == "MemoryStore":
            names.add(f"MemoryStore.{method.group(1)}")
        elif top and not line.startswith(" "):
            current = top.group(1)
            names.add(current)
    assert names - documented() == set()
