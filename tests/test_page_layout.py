"""The Settings → Memory page's layout and accessibility in headless Chromium (docs/daemon.md,
"The Settings → Memory page").

At 320, 390, 1280 and 1440 px wide (WCAG 1.4.10 reflow): the page never scrolls sideways
(``scrollWidth`` of the document equals the viewport's width), no visible element sticks out
of the viewport, and every record's actions (Why?, Forget) are wholly inside the viewport and
inside their card — with a long unbroken pattern, markup-like stored text, long project ids
and the Why? panel open. The page runs under its real Content-Security-Policy: no violation
is reported. axe-core (vendored in tests/fixtures/axe-core) finds no serious or critical
violation, in the light and the dark colour scheme. Stored strings render as text.

``UPDATE_SCREENSHOT=1`` writes docs/settings-memory.png (1280 px, the whole page, Why? open)
and docs/settings-memory-phone.png (390 px, the inspector).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from creative_memory import MemoryStore
from creative_memory.http import DaemonConfig, DaemonFiles, ThreadedDaemon
from tests.test_server_browser import ARGS, CHROMIUM, RECORDS, wire

try:
    from playwright.sync_api import Page, expect, sync_playwright
except ImportError:  # pragma: no cover - depends on the environment
    sync_playwright = None  # type: ignore[assignment]

_missing = sync_playwright is None or not Path(CHROMIUM).exists()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(_missing, reason=f"playwright or {CHROMIUM} not available"),
]

WIDTHS = (320, 390, 1280, 1440)
ROOT = Path(__file__).resolve().parents[1]
AXE = ROOT / "tests" / "fixtures" / "axe-core" / "axe.min.js"
DOCS = ROOT / "docs"
LONG_PATTERN = "an_unbroken_pattern_" + "x" * 90
MARKUP = "<img src=x onerror=alert(1)>"
LONG_PROJECT = "a-project-with-a-rather-long-identifier-2026"

#: Visible elements whose box leaves the viewport horizontally (the skip link aside).
OVERFLOWING = """() => {
  const w = document.documentElement.clientWidth;
  const out = [];
  for (const e of document.body.querySelectorAll("*")) {
    if (e.closest(".visually-hidden, .skip, [hidden], dialog:not([open])")) continue;
    const r = e.getBoundingClientRect();
    if (r.width <= 1 || r.height <= 1) continue;
    if (r.left < -0.5 || r.right > w + 0.5) {
      out.push(`${e.tagName.toLowerCase()}#${e.id}.${e.className}: ${r.left}..${r.right} > ${w}`);
    }
  }
  return out;
}"""

#: Every record's action buttons that are not wholly inside the viewport and their card.
ACTIONS_OUTSIDE = """() => {
  const w = document.documentElement.clientWidth;
  const out = [];
  for (const card of document.querySelectorAll("#records li.record")) {
    const c = card.getBoundingClientRect();
    const buttons = card.querySelectorAll(".actions button");
    if (buttons.length !== 2) out.push(`${card.dataset.pattern}: ${buttons.length} buttons`);
    for (const b of buttons) {
      const r = b.getBoundingClientRect();
      const inside = r.width > 0 && r.left >= Math.max(0, c.left) - 0.5 &&
        r.right <= Math.min(w, c.right) + 0.5 && r.top >= c.top - 0.5 && r.bottom <= c.bottom + 0.5;
      if (!inside) out.push(`${card.dataset.pattern} ${b.textContent}: ${r.left}..${r.right}`);
    }
  }
  return out;
}"""


class Served:
    """A seeded daemon and a signed-in page on it."""

    def __init__(self, page: Page, url: str, csp: list[str]) -> None:
        self.page, self.url, self.csp = page, url, csp


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("layout") / "mem"
    config = DaemonConfig(root=root, port=0)
    with ThreadedDaemon(config, store=MemoryStore(root)) as daemon:
        files = DaemonFiles(root)
        token = files.token_for("default")
        events = [
            *(wire(f"n{i}", "neon_palette", tag_text="too noisy") for i in range(5)),
            *(wire(f"s{i}", "serif_headings", "typography") for i in range(2)),
            *(wire(f"f{i}", "neon_palette", project_id="festival") for i in range(3)),
            *(wire(f"l{i}", LONG_PATTERN, project_id=LONG_PROJECT) for i in range(2)),
            wire("m1", MARKUP, "layout"),
            *(wire(f"g{i}", "grid_layout", "layout", tag_text="too crowded") for i in range(14)),
        ]
        r = httpx.post(
            f"{daemon.url}/api/v1/events", json=events, headers={"Authorization": f"Bearer {token}"}
        )
        assert r.status_code == 200 and r.json()["accepted"] == len(events), r.text
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            page = context.new_page()
            csp: list[str] = []
            page.on(
                "console",
                lambda m: csp.append(m.text) if "Content Security Policy" in m.text else None,
            )
            page.on("pageerror", lambda e: csp.append(str(e)))
            page.goto(f"{daemon.url}/login?once={files.create_login('default')}")
            expect(page.locator(RECORDS)).to_have_count(6)
            yield Served(page, daemon.url, csp)
            browser.close()


def load_timelines(page: Page) -> None:
    """Scroll every card into view so its evidence timeline is fetched, and wait for them."""
    for card in page.locator(RECORDS).all():
        card.scroll_into_view_if_needed()
    page.wait_for_function(
        "() => [...document.querySelectorAll('#records .timeline-wrap')]"
        ".every(b => b.querySelector('.timeline'))"
    )
    page.evaluate("window.scrollTo(0, 0)")


def measure(page: Page, width: int) -> dict[str, Any]:
    """Resize to ``width`` and measure the page's horizontal extent and the actions."""
    page.set_viewport_size({"width": width, "height": 900})
    page.wait_for_function(f"() => document.documentElement.clientWidth === {width}")
    out: dict[str, Any] = page.evaluate(
        """() => ({
          scroll: document.documentElement.scrollWidth,
          body: document.body.scrollWidth,
          client: document.documentElement.clientWidth,
        })"""
    )
    out["overflowing"] = page.evaluate(OVERFLOWING)
    out["actions_outside"] = page.evaluate(ACTIONS_OUTSIDE)
    return out


@pytest.mark.parametrize("width", WIDTHS)
def test_no_sideways_scroll_and_every_action_visible(served: Served, width: int) -> None:
    page = served.page
    load_timelines(page)
    page.locator(f'{RECORDS}[data-pattern="{LONG_PATTERN}"] summary').click()  # details open
    for why_open in (False, True):
        if why_open:
            page.locator(f'{RECORDS}[data-pattern="{LONG_PATTERN}"]').get_by_role(
                "button", name="Why"
            ).click()
            expect(page.locator("#h-why")).to_be_focused()
        m = measure(page, width)
        assert m["scroll"] == m["client"] == width, m
        assert m["body"] <= width, m
        assert m["overflowing"] == [], m
        assert m["actions_outside"] == [], m
        # the selects and inputs fit their card
        for sel in (
            "#reset-scope",
            "#import-mode",
            "#scope-filter",
            "#preview-project",
            "#derivation-version",
            "#history-seq",
            "#history-date",
        ):
            box, card = (
                page.locator(sel).bounding_box(),
                page.locator(sel).locator("xpath=ancestor::section[1]").bounding_box(),
            )
            assert (
                box
                and card
                and box["x"] >= card["x"]
                and (box["x"] + box["width"] <= card["x"] + card["width"] + 0.5)
            ), (sel, box, card)
    page.click("#why-close")
    page.locator(f'{RECORDS}[data-pattern="{LONG_PATTERN}"] summary').click()
    assert served.csp == []


def test_stored_strings_render_as_text(served: Served) -> None:
    page = served.page
    card = page.locator(f'{RECORDS}[data-pattern="{MARKUP}"]')
    expect(card.locator("h3")).to_contain_text(MARKUP)
    assert page.locator("#records img").count() == 0


def axe_violations(page: Page) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations on the page as it is now."""
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(AXE.read_text(encoding="utf-8") + "\n;true")  # CDP: not subject to CSP
    result: dict[str, Any] = page.evaluate(
        """async () => {
          const r = await axe.run(document, { resultTypes: ["violations"] });
          return { version: axe.version, rules: r.passes.length + r.violations.length +
                     r.incomplete.length + r.inapplicable.length,
                   violations: r.violations.map(v => ({ id: v.id, impact: v.impact,
                     nodes: v.nodes.map(n => n.target.join(" ")).slice(0, 5) })) };
        }"""
    )
    assert result["version"] == "4.14.1" and result["rules"] > 50, result  # axe really ran
    found: list[dict[str, Any]] = result["violations"]
    return [v for v in found if v["impact"] in ("serious", "critical")]


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_axe_finds_no_serious_or_critical_violation(served: Served, scheme: str) -> None:
    page = served.page
    page.emulate_media(color_scheme=scheme)  # type: ignore[arg-type]
    try:
        load_timelines(page)
        for width in (390, 1280):
            page.set_viewport_size({"width": width, "height": 900})
            assert axe_violations(page) == [], (scheme, width)
        page.locator(RECORDS).first.get_by_role("button", name="Why").click()
        page.locator(RECORDS).first.locator("summary").click()
        expect(page.locator("#why")).to_be_visible()
        assert axe_violations(page) == [], (scheme, "why open")
        page.click("#why-close")
        page.locator(RECORDS).first.locator("summary").click()
    finally:
        page.emulate_media(color_scheme="light")


@pytest.mark.skipif(not os.environ.get("UPDATE_SCREENSHOT"), reason="UPDATE_SCREENSHOT=1 only")
def test_update_screenshots(served: Served) -> None:
    page = served.page
    page.set_viewport_size({"width": 1280, "height": 900})
    load_timelines(page)
    neon = page.locator(f'{RECORDS}[data-pattern="neon_palette"][data-scope="global"]')
    neon.get_by_role("button", name="Why").click()
    expect(page.locator("#why-steps li")).to_have_count(5)
    page.locator("#status").evaluate("e => e.textContent = ''")
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(DOCS / "settings-memory.png"), full_page=True)
    page.click("#why-close")
    page.set_viewport_size({"width": 390, "height": 844})
    load_timelines(page)
    page.locator("#inspector").screenshot(path=str(DOCS / "settings-memory-phone.png"))
