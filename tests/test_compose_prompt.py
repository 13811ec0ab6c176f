"""Placement in Open Design's real composer output, as a list of parts and as one string.

The composer fixtures (tests/fixtures/composer, vendored byte for byte from the shared
fixtures) hold host prompts with the composer's real headings and synthetic bodies; every
case must come out exactly as expected in both shapes. The property tests build random
host prompts from the composer's section kinds — bodies with their own headings, code
fences with heading-like lines, headings deeper than ``##`` — and check the placement rule
against where the generator put each section (not against a parser).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import creative_memory
from creative_memory import (
    MemoryStore,
    ValidationError,
    build_critique_block,
    build_generation_block,
    insert_memory_block,
    insert_memory_block_into_prompt,
)
from creative_memory.engine.prompt import HOST_HEADINGS, HOST_KINDS, block_role, heading_kind
from tests.conftest import FIXTURES, tag

COMPOSER = FIXTURES / "composer"
CASES: list[dict[str, Any]] = json.loads((COMPOSER / "cases.json").read_text(encoding="utf-8"))
MEM = (
    "## Creative memory (preferences from generation feedback)\n\n"
    "Treat these as preferences.\n\nPrefer (high): airy_spacing\nAvoid (medium): neon_palette"
)
CRIT = (
    "## Creative memory (critique criteria from generation feedback)\n\n"
    "Critique against these.\n\nAvoid (high): neon_palette"
)


def ins(prompt: str, block: str = MEM) -> str:
    return insert_memory_block_into_prompt(prompt, block)


# -- the fixtures -----------------------------------------------------------------------------
def test_all_nine_cases_present() -> None:
    assert len(CASES) == 9
    names = {p.name.removesuffix(".host.md") for p in COMPOSER.glob("*.host.md")}
    assert names == {c["name"] for c in CASES}


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_fixture_case_as_a_string(case: dict[str, Any]) -> None:
    host = (COMPOSER / f"{case['name']}.host.md").read_bytes().decode("utf-8")
    expected = (COMPOSER / f"{case['name']}.expected.md").read_bytes().decode("utf-8")
    assert host == case["host_prompt"] == "".join(case["host_blocks"])
    assert expected == case["expected_prompt"]
    out = ins(host, case["block"])
    assert out.encode("utf-8") == expected.encode("utf-8")
    assert ins(out, case["block"]) == out  # idempotent
    assert ins(host, "") == host


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_fixture_case_as_a_list_of_blocks(case: dict[str, Any]) -> None:
    blocks = list(case["host_blocks"])
    out = insert_memory_block(blocks, case["block"])
    assert out == case["expected_blocks"]
    assert blocks == case["host_blocks"]  # not mutated
    assert insert_memory_block(out, case["block"]) == out


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_critique_block_lands_in_the_same_place(case: dict[str, Any]) -> None:
    gen = ins(case["host_prompt"], case["block"])
    crit = ins(case["host_prompt"], CRIT)
    assert crit == gen.replace(case["block"], CRIT)
    assert ins(gen, CRIT) == crit  # the critique block replaces the generation block
    blocks = insert_memory_block(case["host_blocks"], CRIT)
    assert blocks == [CRIT if b == case["block"] else b for b in case["expected_blocks"]]


def test_real_blocks_from_a_store(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "mem", derivation_version="1")
    store.ingest_signals("u", [tag("airy spacing")] * 5 + [tag("neon", "color", "negative")] * 3)
    r = store.retrieve_for_injection("u")
    host = CASES[0]["host_prompt"]
    for block in (build_generation_block(r), build_critique_block(r)):
        assert block
        out = ins(host, block)
        assert out.count(block) == 1
        assert out.index(block) < out.index("## Active design system — Acme")
        assert "\n\n" + block + "\n\n## Active design system — Acme" in out


# -- the worked examples in the docs ---------------------------------------------------------
ROOT = FIXTURES.parents[1]


def examples(path: Path) -> dict[str, str]:
    """The ``<!-- example: name -->`` text blocks of a document, exactly."""
    text = path.read_text(encoding="utf-8")
    out: dict[str, str] = {}
    for chunk in text.split("<!-- example: ")[1:]:
        name, _, rest = chunk.partition(" -->\n````text\n")
        out[name] = rest[: rest.index("\n````\n") + 1]
    return out


@pytest.mark.parametrize(
    ("doc", "project_record"), [("README.md", False), ("docs/prompt-composition.md", True)]
)
def test_worked_examples_in_the_docs(tmp_path: Path, doc: str, project_record: bool) -> None:
    ex = examples(ROOT / doc)
    assert set(ex) == {"host", "generation", "critique"}
    store = MemoryStore(tmp_path / "mem", derivation_version="1")
    signals = [tag("airy_spacing", "layout_density")] * 5 + [
        tag("neon_palette", "color", "negative")
    ] * 3
    if project_record:
        signals += [tag("serif_headings", "typography", scope="project", project_id="landing")] * 3
    store.ingest_signals("alice", signals)
    r = store.retrieve_for_injection("alice", {"project_id": "landing"})
    gen, crit = build_generation_block(r, "landing"), build_critique_block(r, "landing")
    assert ins(ex["host"], gen) == ex["generation"]
    assert ins(ex["host"], crit) == ex["critique"]
    assert ins(ex["generation"], crit) == ex["critique"]
    assert ins(ex["generation"], gen) == ex["generation"]
    # Right before the brand contract: where its heading was, the block is now.
    brand = ex["host"].index("## Active design system")
    assert ex["generation"].index(gen) == brand
    assert ex["generation"].index("## Active design system") == brand + len(gen) + 2


# -- the vocabulary ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("heading", "kind"),
    [
        ("Personal memory (auto-extracted from past chats)", "personal_memory"),
        ("Personal memory", "personal_memory"),
        ("personal   MEMORY", "personal_memory"),
        ("Creative memory (preferences from generation feedback)", "creative_memory"),
        ("Creative memory (critique criteria from generation feedback)", "creative_memory"),
        ("Custom instructions (user-level)", "custom_instructions"),
        ("Custom instructions (project-level)", "custom_instructions"),
        ("Active design system — Acme", "brand"),
        ("Active design system", "brand"),
        ("Active design system—Acme", "brand"),
        ("ACTIVE DESIGN SYSTEM – Acme", "brand"),
        ("Active design system - Acme", "brand"),
        ("Active design system tokens — Acme", "brand"),
        ("Active design system tokens", "brand"),
        ("Active design system visual direction", "brand"),
        ("Reference fixture — Acme", "brand"),
        ("Active craft references — typography, color", "craft"),
        ("Active craft references", "craft"),
        ("Active skill — landing-page", "skill"),
        ("Active skill", "skill"),
        ("Active stage: plan", "skill"),
        ("Project metadata", "project_metadata"),
        # A DESIGN.md's, a skill's or the charter's own headings.
        ("Colors", "other"),
        ("Brand", "other"),
        ("Acme", "other"),
        ("Typography", "other"),
        ("Identity and workflow charter (background)", "other"),
        ("Workflow", "other"),
        ("Brand contract", "other"),
        ("Skills", "other"),
        ("Design system tokens", "other"),
        ("Active design systems", "other"),
        ("Active skill-set", "other"),
        ("Project metadata-ish", "other"),
        ("", "other"),
    ],
)
def test_heading_kinds(heading: str, kind: str) -> None:
    assert heading_kind(heading) == kind
    assert kind in HOST_KINDS


def test_vocabulary_covers_every_kind_but_other() -> None:
    assert set(HOST_HEADINGS.values()) == set(HOST_KINDS) - {"other"}


@pytest.mark.parametrize(
    ("block", "role"),
    [
        ("\n\n## Active design system — Acme\n\nx", "brand"),
        ("\n\n## Active design system tokens\n\nx", "brand"),
        ("\n\n## Reference fixture\n\nx", "brand"),
        ("\n\n## Active craft references — typography\n\nx", "craft"),
        ("\n\n## Active stage: plan\n\nx", "skill"),
        ("\n\n## Project metadata\nx", "project_metadata"),
        ("\n\n---\n\n# Identity and workflow charter (background)\n\nx", "other"),
    ],
)
def test_block_roles_know_the_composer(block: str, role: str) -> None:
    assert block_role(block) == role


# -- sections, fences and joins ---------------------------------------------------------------
BRAND = "## Active design system — Acme\n\nbody\n"


def test_a_known_heading_in_a_fence_is_never_classified() -> None:
    pairs = [
        ("```", "```"),
        ("```md", "```"),
        ("~~~", "~~~"),
        ("~~~ text", "~~~"),
        ("````", "````"),
    ]
    for opening, closing in pairs:
        code = f"intro\n{opening}\n## Active skill — x\n# Project metadata\n{closing}\n\n"
        assert ins(code + BRAND) == code + MEM + "\n\n" + BRAND, opening


def test_fence_rules() -> None:
    # A longer closing run closes; a shorter one or another character does not.
    host = "````\n```\n~~~\n## Active skill\n`````\n\n" + BRAND
    assert ins(host).index(MEM) == host.index(BRAND)
    # A backtick fence's info string may not hold a backtick: that line is no fence.
    host = "``` a`b\n## Active skill\n```\n"
    assert ins(host) == "``` a`b\n\n" + MEM + "\n\n## Active skill\n```\n"
    # Indented four spaces: not a fence (and not a heading either).
    host = "    ```\n## Active skill\n    ```\n"
    assert ins(host) == "    ```\n\n" + MEM + "\n\n## Active skill\n    ```\n"


def test_an_unclosed_fence_hides_nothing() -> None:
    host = "# Charter\n\n```css\n:root {}\n\n## Active skill — landing\n\nsteps\n"
    assert ins(host) == host.replace("## Active skill", MEM + "\n\n## Active skill")
    assert ins(ins(host)) == ins(host)
    # At the end of a prompt too: the appended block is still found the next time.
    tail = "# Charter\n\n~~~~ never closed\n"
    assert ins(tail) == tail + "\n" + MEM + "\n"
    assert ins(ins(tail)) == ins(tail)


def test_only_atx_headings_of_level_one_or_two_are_sections() -> None:
    for line in ("### Active skill", "    ## Active skill", "##Active skill", "> ## Active skill"):
        host = f"# Charter\n\n{line}\n\nbody\n"
        assert ins(host) == host + "\n" + MEM + "\n", line
    for line in ("# Active skill", "   ## Active skill", "## Active skill ##", "##\tActive skill"):
        host = f"# Charter\n\n{line}\n\nbody\n"
        assert ins(host) == f"# Charter\n\n{MEM}\n\n{line}\n\nbody\n", line


def test_unknown_headings_never_end_a_section() -> None:
    host = (
        "# Charter\n\n## Personal memory\n\nfacts\n\n## Colors\n\n# Acme\n\n"
        "## Active skill — x\n\nsteps\n"
    )
    assert ins(host) == host.replace("## Active skill", MEM + "\n\n## Active skill")


def test_joins() -> None:
    # Before a heading at the very start: no line break before the block.
    assert ins(BRAND) == MEM + "\n\n" + BRAND
    assert ins("\n" + BRAND) == "\n" + MEM + "\n\n" + BRAND
    # One line break before the heading: one more, so a blank line precedes the block.
    assert ins("x\n" + BRAND) == "x\n\n" + MEM + "\n\n" + BRAND
    # Blank lines already there (any number) are kept as they are.
    assert ins("x\n\n\n\n" + BRAND) == "x\n\n\n\n" + MEM + "\n\n" + BRAND
    assert ins("x\n  \n" + BRAND) == "x\n  \n" + MEM + "\n\n" + BRAND
    # At the end.
    assert ins("") == MEM + "\n"
    assert ins("x") == "x\n\n" + MEM + "\n"
    assert ins("x\n") == "x\n\n" + MEM + "\n"
    assert ins("x\n\n") == "x\n\n" + MEM + "\n"
    # The block's own surrounding whitespace does not count.
    assert ins("x\n" + BRAND, "\n\n  " + MEM + "\n\n\n") == ins("x\n" + BRAND)


def test_crlf_prompts_are_recognised_and_kept() -> None:
    host = "# Charter\r\n\r\n## Personal memory\r\n\r\nfacts\r\n\r\n## Active skill — x\r\n"
    out = ins(host)
    crlf_mem = MEM.replace("\n", "\r\n")
    assert out == host.replace("## Active skill", crlf_mem + "\r\n\r\n## Active skill")
    assert "\n" not in out.replace("\r\n", "")  # CRLF in, CRLF out
    assert ins(out) == out
    assert ins("x\r\n") == "x\r\n\r\n" + crlf_mem + "\r\n"
    # mixed line ends: what is added uses \n
    mixed = "# Charter\n\n## Personal memory\r\nfacts\r\n\r\n## Active skill — x\r\n"
    assert ins(mixed) == mixed.replace("## Active skill", MEM + "\n\n## Active skill")


def test_replacement_and_idempotence() -> None:
    host = "# Charter\n\n## Personal memory\n\nfacts\n\n" + BRAND
    once = ins(host)
    assert once == "# Charter\n\n## Personal memory\n\nfacts\n\n" + MEM + "\n\n" + BRAND
    assert ins(once) == once
    assert ins(once, CRIT) == ins(host, CRIT)
    # A stale block elsewhere (up to the next known heading) moves to the right place.
    stale = host + "\n## Creative memory (old)\n\n## Notes\nstale\n\n## Project metadata\nm\n"
    assert ins(stale) == ins(host + "\n## Project metadata\nm\n")
    # Two stale blocks: both go, one comes back.
    two = "## Creative memory\nold\n" + host + "## creative MEMORY — v0\nolder\n"
    assert ins(two).count("## Creative memory") == 1
    # An empty block leaves the prompt alone — even one that holds an old block.
    assert ins(once, "") == once
    assert ins(once, " \n\t") == once


@pytest.mark.parametrize(
    ("prompt", "block", "field", "needle"),
    [
        (["x"], MEM, "prompt", "string"),
        (None, MEM, "prompt", "string"),
        ("x", None, "block", "string"),
        ("x", b"## Creative memory", "block", "string"),
        ("x", "[MEMORY CONTEXT]\nPrefer (high): x", "block", "Creative memory"),
        ("x", "### Creative memory\nx", "block", "Creative memory"),
        ("x", "## Personal memory\nx", "block", "Creative memory"),
        ("x", MEM + "\n\n## Active skill — x", "block", "host heading"),
        ("x", MEM + "\n```\n## Active skill\n```", "block", "fence"),
    ],
)
def test_bad_input_names_its_field(prompt: Any, block: Any, field: str, needle: str) -> None:
    with pytest.raises(ValidationError, match=needle) as info:
        insert_memory_block_into_prompt(prompt, block)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("blocks", "block", "field"),
    [
        ("## Personal memory\nx", MEM, "blocks"),
        (None, MEM, "blocks"),
        (["## Personal memory", 3], MEM, "blocks[1]"),
        (["x"], None, "block"),
        (["x"], "[MEMORY CONTEXT]\nPrefer (high): x", "block"),
        (["x"], "## Active skill\nx", "block"),
    ],
)
def test_list_bad_input_names_its_field(blocks: Any, block: Any, field: str) -> None:
    with pytest.raises(ValidationError) as info:
        insert_memory_block(blocks, block)
    assert info.value.field == field


def test_the_string_api_is_public() -> None:
    assert "insert_memory_block_into_prompt" in creative_memory.__all__
    assert creative_memory.insert_memory_block_into_prompt is insert_memory_block_into_prompt


# -- properties -------------------------------------------------------------------------------
WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8).filter(
    lambda w: w not in ("brand", "craft", "skill", "skills")
)
KNOWN_TEXT = st.sampled_from(
    [
        "Personal memory (auto-extracted from past chats)",
        "Custom instructions (user-level)",
        "Active design system — Acme",
        "Active skill — landing-page",
        "Active stage: plan",
        "Project metadata",
        "Creative memory (preferences from generation feedback)",
    ]
)


@st.composite
def body(draw: st.DrawFn) -> str:
    """Body text: plain lines, unknown headings, known headings deeper than ``##`` or
    inside fences, and unterminated fences (``~~~~`` runs nothing closes)."""
    lines: list[str] = []
    for _ in range(draw(st.integers(0, 6))):
        choice = draw(st.integers(0, 6))
        if choice == 0:
            lines.append(draw(st.sampled_from(["", "Plain text.", "- a bullet", "---", "#tag"])))
        elif choice == 1:  # an unknown heading of the body's own
            level = draw(st.sampled_from(["#", "##"]))
            lines.append(level + " " + draw(WORD).capitalize())
        elif choice == 2:
            lines.append(draw(st.sampled_from(["## Colors", "# Acme", "# Brand", "## Steps"])))
        elif choice == 3:  # a known name, but too deep to be a section
            lines.append(draw(st.sampled_from(["###", "####"])) + " " + draw(KNOWN_TEXT))
        elif choice == 4:  # a fence with heading-like lines inside
            fence = draw(st.sampled_from(["```", "~~~", "````"]))
            info = draw(st.sampled_from(["", "md", "css"]))
            inner = draw(st.lists(st.sampled_from(["", "x = 1"]) | KNOWN_TEXT.map("## ".__add__)))
            lines += [fence + info, *inner, fence]
        elif choice == 5:
            lines.append("~~~~ " + draw(WORD))
        else:
            lines.append("    ## Active skill — indented code")
    return "\n".join(lines)


@dataclass(frozen=True)
class Part:
    kind: str
    sep: str  # what precedes the heading line
    text: str  # sep + heading + body


HEADINGS: dict[str, list[str]] = {
    "personal_memory": ["Personal memory (auto-extracted from past chats)", "Personal memory"],
    "custom_instructions": [
        "Custom instructions (user-level)",
        "Custom instructions (project-level)",
    ],
    "brand": [
        "Active design system — {t}",
        "Active design system",
        "Active design system tokens — {t}",
        "Reference fixture — {t}",
        "Active design system visual direction",
    ],
    "craft": ["Active craft references — typography, {t}", "Active craft references"],
    "skill": ["Active skill — {t}", "Active skill", "Active stage: {t}"],
    "project_metadata": ["Project metadata"],
    "other": ["Clarifying questions mid-conversation", "CRITICAL: Never fabricate turns"],
}


@st.composite
def part(draw: st.DrawFn, kind: str) -> Part:
    heading = draw(st.sampled_from(HEADINGS[kind])).format(t=draw(WORD))
    heading = draw(
        st.sampled_from([heading, heading.upper(), heading.lower(), heading.replace(" ", "   ", 1)])
    )
    marks = draw(st.sampled_from(["##", "#"]))
    sep = draw(st.sampled_from(["\n\n", "\n\n---\n\n", "\n", "\n\n\n"]))
    gap = draw(st.sampled_from(["\n\n", "\n"]))
    return Part(kind, sep, f"{sep}{marks} {heading}{gap}{draw(body())}")


OPTIONAL = [
    "personal_memory",
    "custom_instructions",
    "custom_instructions",
    "brand",
    "brand",
    "craft",
    "skill",
    "skill",
    "project_metadata",
    "other",
]
ANCHORS = ("custom_instructions", "brand", "craft", "skill", "project_metadata")
LATER = ("brand", "craft", "skill", "project_metadata")


@st.composite
def host(draw: st.DrawFn, shuffled: bool) -> list[Part]:
    """A composer-shaped host: a preamble (discovery layer, charter) and optional parts,
    in Open Design's order or shuffled."""
    head: list[Part] = []
    if draw(st.booleans()):
        head.append(Part("other", "", "# Discovery and planning layer\n\n" + draw(body())))
    if draw(st.booleans()):
        charter = "\n\n---\n\n# Identity and workflow charter (background)\n\n"
        head.append(Part("other", "\n\n---\n\n", charter + draw(body())))
    picked = [k for k in OPTIONAL if draw(st.booleans())]
    if shuffled:
        picked = draw(st.permutations(picked))
    parts = head + [draw(part(k)) for k in picked]
    if parts and parts[0].sep:  # the prompt may start right at a section heading
        first = parts[0]
        if draw(st.booleans()):
            parts[0] = Part(first.kind, "", first.text[len(first.sep) :])
    # `len(parts) > 0`, not `parts`: mypy would infer draw()'s type from the list
    if len(parts) > 0 and draw(st.booleans()):
        last = parts[-1]
        parts[-1] = Part(last.kind, last.sep, last.text + "\n")
    return parts


def offsets(parts: list[Part]) -> list[int]:
    """Where each part's heading line starts in the joined prompt."""
    out, pos = [], 0
    for p in parts:
        out.append(pos + len(p.sep))
        pos += len(p.text)
    return out


def expected_point(parts: list[Part]) -> int:
    """Where the generator's ground truth says the block goes (decision B1)."""
    kinds = [p.kind for p in parts]
    heads = offsets(parts)
    end = sum(len(p.text) for p in parts)
    if "personal_memory" in kinds:
        last = max(i for i, k in enumerate(kinds) if k == "personal_memory")
        after = [heads[i] for i in range(last + 1, len(parts)) if kinds[i] != "other"]
        return after[0] if after else end
    return next((heads[i] for i, k in enumerate(kinds) if k in ANCHORS), end)


def join_before(before: str) -> str:
    if not before or before.endswith("\n\n") or before == "\n":
        return ""
    return "\n" if before.endswith("\n") else "\n\n"


BLOCKS = st.builds(
    lambda heading, marker: f"## {heading}\n\nmarker {marker}\n\nAvoid (high): {marker}",
    st.sampled_from(
        [
            "Creative memory (preferences from generation feedback)",
            "Creative memory (critique criteria from generation feedback)",
            "creative memory",
        ]
    ),
    st.uuids().map(str),
)
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check_string(parts: list[Part], block: str) -> str:
    prompt = "".join(p.text for p in parts)
    out = ins(prompt, block)
    k = expected_point(parts)
    lead, trail = join_before(prompt[:k]), "\n\n" if k < len(prompt) else "\n"
    assert out == prompt[:k] + lead + block + trail + prompt[k:]
    # Exactly once; removing it (with the joins) gives the input back byte for byte.
    assert out.count(block) == 1
    at = out.index(block)
    assert at == k + len(lead)
    assert out[:k] + out[at + len(block) + len(trail) :] == prompt
    # After every personal-memory section; before every later section it should precede.
    shifted = [h if h < k else h + len(lead + block + trail) for h in offsets(parts)]
    kinds = [p.kind for p in parts]
    for h, kind in zip(shifted, kinds, strict=True):
        if kind == "personal_memory":
            assert h < at
    if "personal_memory" not in kinds or all(
        i > max(j for j, k2 in enumerate(kinds) if k2 == "personal_memory")
        for i, kind in enumerate(kinds)
        if kind in LATER
    ):
        for h, kind in zip(shifted, kinds, strict=True):
            if kind in LATER:
                assert h > at
    # Idempotent, and a second block replaces the first.
    assert ins(out, block) == out
    return out


@PROPERTY
@given(host(shuffled=False), BLOCKS, BLOCKS)
def test_property_composer_order(parts: list[Part], block: str, other: str) -> None:
    out = check_string(parts, block)
    prompt = "".join(p.text for p in parts)
    assert ins(out, other) == ins(prompt, other)


@PROPERTY
@given(host(shuffled=True), BLOCKS)
def test_property_any_order(parts: list[Part], block: str) -> None:
    check_string(parts, block)


@PROPERTY
@given(host(shuffled=True), BLOCKS, st.data())
def test_property_stale_block_is_replaced(parts: list[Part], block: str, data: Any) -> None:
    prompt = "".join(p.text for p in parts)
    # A stale block right before a known section (or at the end) is its own section.
    points = [h for h, p in zip(offsets(parts), parts, strict=True) if p.kind != "other"]
    k = data.draw(st.sampled_from([*points, len(prompt)]))
    if k == len(prompt) and prompt and not prompt.endswith("\n"):
        prompt += "\n"
        k += 1
    stale = data.draw(
        st.sampled_from(["## Creative memory (old)\n\nstale\n\n", "# creative memory\n"])
    )
    assert ins(prompt[:k] + stale + prompt[k:], block) == ins(prompt, block)


@PROPERTY
@given(host(shuffled=True), BLOCKS)
def test_property_list_of_blocks(parts: list[Part], block: str) -> None:
    blocks = [p.text for p in parts]
    out = insert_memory_block(blocks, block)
    kinds = [p.kind for p in parts]
    if "personal_memory" in kinds:
        at = max(i for i, k in enumerate(kinds) if k == "personal_memory") + 1
    else:
        at = next((i for i, k in enumerate(kinds) if k in ANCHORS), len(kinds))
    assert out == [*blocks[:at], block, *blocks[at:]]
    assert insert_memory_block(out, block) == out
    # The string shape puts it at the same part boundary whenever a known section follows.
    string_point = expected_point(parts)
    if at < len(parts) and kinds[at] != "other":
        assert string_point == offsets(parts)[at]


def test_remove_memory_block() -> None:
    from creative_memory.engine.prompt import remove_memory_block

    host = "# Charter\n\n## Personal memory\n\nfacts\n\n" + BRAND
    assert remove_memory_block(host) == host
    assert remove_memory_block(ins(host)) == host
    assert remove_memory_block(ins(host, CRIT)) == host
    assert remove_memory_block(ins("x")) == "x\n\n"  # at the end: the joins added stay
    with pytest.raises(ValidationError) as info:
        remove_memory_block(None)  # type: ignore[arg-type]
    assert info.value.field == "prompt"
