"""insert_memory_block: where the creative-memory block lands in a list of host blocks.

HOST is the seed's order (soft -> instructions -> brand -> craft -> skill, positions 0-13
and a tail) with headings the seed does not name filled in by assumption, so these tests
exercise the tolerant recogniser of docs/prompt-composition.md ("A list of parts"); Open
Design's real composer headings are covered by tests/test_compose_prompt.py.
"""

from __future__ import annotations

import pytest

from creative_memory.engine.prompt import block_heading, block_role, insert_memory_block

HOST = [
    "## Identity\nYou are the design assistant.",  # 0
    "## Operating rules\nWork in artifacts.",  # 1
    "## User profile\nName: Sam.",  # 2
    "## Personal memory\n- prefers short answers",  # 3
    "## Custom instructions (user-level)\nAlways explain choices.",  # 4
    "## Custom instructions (project-level)\nUse British spelling.",  # 5
    "## Project context\nA landing page for Acme.",  # 6
    "## Attachments\n(none)",  # 7
    "## Design system tokens\n--accent: #f60;",  # 8
    "## Brand contract\nThe brand wins on tokens.",  # 9
    "## Craft: layout\nUse an 8px grid.",  # 10
    "## Craft: typography\nTwo typefaces at most.",  # 11
    "## Craft: color\nContrast AA.",  # 12
    "## Skill: landing-page\nFollow the workflow.",  # 13
    "## Tools\nrender, export",  # tail
    "## Output format\nOne HTML file.",  # tail
]

MEM = "## Creative memory (preferences from generation feedback)\n\nPrefer (high): airy layouts"


def without(*positions: int) -> list[str]:
    return [b for i, b in enumerate(HOST) if i not in positions]


def check(blocks: list[str], block: str, expected_index: int) -> list[str]:
    snapshot = list(blocks)
    out = insert_memory_block(blocks, block)
    assert blocks == snapshot  # input never mutated
    assert out is not blocks
    assert out.index(block) == expected_index
    assert out.count(block) == 1
    rest = out[:expected_index] + out[expected_index + 1 :]
    assert rest == blocks  # every other block keeps its order
    return out


def test_full_host_order_lands_right_after_personal_memory() -> None:
    out = check(HOST, MEM, 4)
    assert out[3].startswith("## Personal memory")
    assert out[5].startswith("## Custom instructions (user-level)")


@pytest.mark.parametrize(
    ("missing", "expected_index", "next_heading"),
    [
        # No personal memory: same place in the soft cluster, before custom instructions.
        ((3,), 3, "## Custom instructions (user-level)"),
        # No user-level instructions but project-level ones: still before the instructions.
        ((3, 4), 3, "## Custom instructions (project-level)"),
        # No instructions at all: before the first brand block.
        ((3, 4, 5), 5, "## Design system tokens"),
        ((3, 4, 5, 8), 5, "## Brand contract"),
        # No brand: before the first craft block.
        ((3, 4, 5, 8, 9), 5, "## Craft: layout"),
        # No craft: before the skill.
        ((3, 4, 5, 8, 9, 10, 11, 12), 5, "## Skill: landing-page"),
        # A skill but no brand/craft/instructions, and nothing of the soft cluster.
        ((0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12), 0, "## Skill: landing-page"),
    ],
)
def test_without_personal_memory(
    missing: tuple[int, ...], expected_index: int, next_heading: str
) -> None:
    blocks = without(*missing)
    out = check(blocks, MEM, expected_index)
    assert out[expected_index + 1].startswith(next_heading)


def test_without_any_anchor_the_block_goes_last() -> None:
    blocks = without(3, 4, 5, 8, 9, 10, 11, 12, 13)
    check(blocks, MEM, len(blocks))
    check([], MEM, 0)
    check(["## Identity\nx"], MEM, 1)


@pytest.mark.parametrize(
    "missing",
    [
        (4,),  # no user-level instructions
        (4, 5),  # no custom instructions at all
        (8, 9),  # no brand
        (10, 11, 12),  # no craft
        (13,),  # no skill
        (4, 5, 8, 9, 10, 11, 12, 13, 14, 15),  # nothing after personal memory
        (0, 1, 2),  # personal memory first
    ],
)
def test_personal_memory_wins_whatever_else_is_there(missing: tuple[int, ...]) -> None:
    blocks = without(*missing)
    pm = next(i for i, b in enumerate(blocks) if b.startswith("## Personal memory"))
    check(blocks, MEM, pm + 1)


def test_personal_memory_after_the_anchors_is_still_followed() -> None:
    blocks = [HOST[4], HOST[13], HOST[3], HOST[14]]
    check(blocks, MEM, 3)


def test_two_personal_memory_blocks_land_after_the_last() -> None:
    blocks = [HOST[0], HOST[3], "## Personal memory (project)\n- x", HOST[4]]
    check(blocks, MEM, 3)


@pytest.mark.parametrize("empty", ["", "   ", "\n\n", " \n\t"])
@pytest.mark.parametrize("blocks", [HOST, without(3), [], ["## Identity\nx"]])
def test_empty_block_leaves_the_list_untouched(empty: str, blocks: list[str]) -> None:
    snapshot = list(blocks)
    out = insert_memory_block(blocks, empty)
    assert out == snapshot
    assert out is not blocks
    assert blocks == snapshot
    out.append("x")  # the copy is independent
    assert blocks == snapshot


def test_existing_creative_memory_block_is_replaced() -> None:
    once = insert_memory_block(HOST, MEM)
    assert insert_memory_block(once, MEM) == once  # idempotent
    newer = MEM + " · muted palette"
    twice = insert_memory_block(once, newer)
    assert newer in twice and MEM not in twice
    assert twice.index(newer) == 4
    assert [b for b in twice if b != newer] == HOST
    # A stale block in the wrong place is moved to the right one.
    stale = [*HOST[:10], "## Creative memory (old)\nPrefer: x", *HOST[10:]]
    out = insert_memory_block(stale, MEM)
    assert out == [*HOST[:4], MEM, *HOST[4:]]
    # The critique block is a creative-memory block too.
    crit = "## Creative memory (critique criteria from generation feedback)\n\nAvoid (high): x"
    assert insert_memory_block(once, crit) == [*HOST[:4], crit, *HOST[4:]]


def test_accepts_any_sequence_and_returns_a_list() -> None:
    out = insert_memory_block(tuple(HOST), MEM)
    assert isinstance(out, list)
    assert out == [*HOST[:4], MEM, *HOST[4:]]


@pytest.mark.parametrize(
    ("block", "role"),
    [
        ("## Personal memory\nx", "personal_memory"),
        ("##Personal memory", "personal_memory"),
        ("\n\n  ### PERSONAL   MEMORY (from chat)\nx", "personal_memory"),
        ("## Creative memory (preferences from generation feedback)", "creative_memory"),
        ("## Custom instructions (user-level)", "custom_instructions"),
        ("## custom instructions", "custom_instructions"),
        ("## Custom instructions (project-level)", "custom_instructions"),
        ("## Brand contract", "brand"),
        ("## Active brand: Acme", "brand"),
        ("## Design system tokens", "brand"),
        ("## Design System", "brand"),
        ("## Craft: typography", "craft"),
        ("## Craft guidelines", "craft"),
        ("## Layout craft", "craft"),
        ("## Skill: landing-page", "skill"),
        ("## Active skill", "skill"),
        ("## Skills", "skill"),
        ("## Brandon's notes", "other"),
        ("## Handcrafted examples", "other"),
        ("## Skillet recipes", "other"),
        ("## Identity", "other"),
        ("Personal memory without a heading", "other"),
        ("", "other"),
    ],
)
def test_block_roles(block: str, role: str) -> None:
    assert block_role(block) == role


def test_block_heading() -> None:
    assert block_heading("## Custom instructions (user-level)\nbody") == (
        "custom instructions (user-level)"
    )
    assert block_heading("  \n###   Brand   Contract  \n") == "brand contract"
    assert block_heading("no heading\n## later") == ""
    assert block_heading("") == ""


def test_tolerant_recogniser_in_a_differently_named_host() -> None:
    host = [
        "# System",
        "##personal memory (chat)\n- x",
        "## Custom Instructions — user level\ny",
        "### Active Brand: Acme\nz",
        "## Craft notes\nw",
        "## Current skill — critique theater\nv",
    ]
    check(host, MEM, 2)
    no_pm = [b for b in host if "personal" not in b]
    check(no_pm, MEM, 1)
