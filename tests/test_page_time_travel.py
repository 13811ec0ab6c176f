"""The Settings → Memory page's derivation section and history control in headless Chromium
(docs/daemon.md, "The Settings → Memory page"; docs/time-travel.md).

Derivation: the version in force and the default, the known versions, "What would change"
(record changes as sentences, the injected set in and out with the reasons, the two blocks)
— checked against ``GET /api/v1/derivation/preview`` and shown to write nothing — then the
switch behind a confirmation (Escape cancels and focus goes back), the switch back, and the
switches listed with their times in the viewer's zone.

History: the slider and the date picker set ``at_seq`` / ``as_of`` for the records, Why? and
the prompt preview; the page says it shows the past (the event, its time, the version in
force then), offers no Forget on past records, says Reset acts on today's memory, and "Back
to now" returns. The store's clock is injected, so events are recorded on distinct days.
In the past and with a preview open: no sideways scroll at 320/390/1280/1440 px, no CSP
violation, axe-core finds no serious or critical violation. Stored strings render as text.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from creative_memory import DERIVATION_VERSION, MemoryStore
from creative_memory.http import DaemonConfig, DaemonFiles, ThreadedDaemon
from tests.test_page_layout import OVERFLOWING, axe_violations
from tests.test_server_browser import ARGS, CHROMIUM, RECORDS, desktop_page, wire

try:
    from playwright.sync_api import Page, expect, sync_playwright
except ImportError:  # pragma: no cover - depends on the environment
    sync_playwright = None  # type: ignore[assignment]

_missing = sync_playwright is None or not Path(CHROMIUM).exists()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(_missing, reason=f"playwright or {CHROMIUM} not available"),
]

DAY_MS = 86_400_000
T0_MS = 1_772_359_200_000  # 2026-03-01T10:00:00Z
MARKUP = "<img src=x onerror=alert(1)>"
#: How the page names a changed field.
WORDS = {
    "signal_strength": "strength",
    "polarity_status": "status",
    "accept_count": "acceptances",
    "reject_count": "rejections",
}

#: Every past record's actions: exactly one button (Why?), inside the viewport and its card.
PAST_ACTIONS = """() => {
  const w = document.documentElement.clientWidth;
  const out = [];
  for (const card of document.querySelectorAll("#records li.record")) {
    const c = card.getBoundingClientRect();
    const buttons = card.querySelectorAll(".actions button");
    if (buttons.length !== 1 || buttons[0].textContent !== "Why?") {
      out.push(`${card.dataset.pattern}: ${buttons.length} buttons`);
    }
    for (const b of buttons) {
      const r = b.getBoundingClientRect();
      if (!(r.left >= Math.max(0, c.left) - 0.5 && r.right <= Math.min(w, c.right) + 0.5)) {
        out.push(`${card.dataset.pattern}: ${r.left}..${r.right}`);
      }
    }
  }
  return out;
}"""


class Site:
    """A daemon on a store with a settable clock, its token, and a signed-in page."""

    def __init__(self, page: Page, url: str, token: str, store: MemoryStore, clock: list[int],
                 errors: list[str]) -> None:  # fmt: skip
        self.page, self.url, self.token, self.store = page, url, token, store
        self.clock, self.errors = clock, errors

    def get(self, path: str) -> Any:
        r = httpx.get(f"{self.url}{path}", headers={"Authorization": f"Bearer {self.token}"})
        assert r.status_code == 200, r.text
        return r.json()

    def post_events(self, events: list[dict[str, Any]]) -> None:
        r = httpx.post(
            f"{self.url}/api/v1/events",
            json=events,
            headers={"Authorization": f"Bearer {self.token}"},
        )
        assert r.status_code == 200 and r.json()["accepted"] == len(events), r.text


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    root = tmp_path / "mem"
    clock = [T0_MS]
    store = MemoryStore(root, clock=lambda: clock[0])
    with ThreadedDaemon(DaemonConfig(root=root, port=0), store=store) as daemon:
        files = DaemonFiles(root)
        token = files.token_for("default")
        assert token is not None
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = desktop_page(browser, downloads=False)
            errors: list[str] = []
            page.on(
                "console",
                lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None,
            )
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on(
                "response",
                lambda r: errors.append(f"{r.status} {r.url}") if r.status == 404 else None,
            )
            s = Site(page, daemon.url, token, store, clock, errors)
            # events 1-3 on Mar 1, 4-5 on Mar 2, 6-11 on Mar 3 (recorded by the store's clock)
            s.post_events([wire(f"n{i}", "neon_palette", tag_text="too noisy") for i in range(3)])
            clock[0] += DAY_MS
            s.post_events([wire(f"s{i}", "serif_headings", "typography") for i in range(2)])
            clock[0] += DAY_MS
            s.post_events(
                [
                    *(
                        wire(f"g{i}", "grid_layout", "layout", tag_text="too crowded")
                        for i in range(5)
                    ),
                    wire("m1", MARKUP, "layout"),
                ]
            )
            page.goto(f"{daemon.url}/login?once={files.create_login('default')}")
            expect(page.locator(RECORDS)).to_have_count(4)
            yield s
            browser.close()


def patterns(page: Page) -> set[str]:
    """The patterns of the records on the page."""
    out: list[str] = page.eval_on_selector_all(RECORDS, "rs => rs.map(r => r.dataset.pattern)")
    return set(out)


def fits(page: Page, width: int, past: bool) -> None:
    """At ``width``: no sideways scroll, nothing outside the viewport, past actions in place."""
    page.set_viewport_size({"width": width, "height": 900})
    page.wait_for_function(f"() => document.documentElement.clientWidth === {width}")
    scroll = page.evaluate("() => document.documentElement.scrollWidth")
    assert scroll == width, (width, scroll)
    assert page.evaluate(OVERFLOWING) == [], width
    if past:
        assert page.evaluate(PAST_ACTIONS) == [], width
    for sel in ("#derivation-version", "#history-seq", "#history-date"):
        box = page.locator(sel).bounding_box()
        card = page.locator(sel).locator("xpath=ancestor::section[1]").bounding_box()
        assert box and card and box["x"] >= card["x"], sel
        assert box["x"] + box["width"] <= card["x"] + card["width"] + 0.5, (sel, width)


def test_history_slider_date_and_back_to_now(site: Site) -> None:
    page = site.page
    slider = page.locator("#history-seq")
    expect(slider).to_have_attribute("max", "11")
    expect(slider).to_have_value("11")
    expect(page.locator("#history-seq-value")).to_have_text("#11 (now)")
    expect(page.locator("#history-state")).to_have_text("Showing memory now.")
    expect(page.locator("#past-banner")).to_be_hidden()
    assert page.locator("body.past").count() == 0

    # -- the slider: right after event 3 ---------------------------------------------------
    slider.fill("3")
    banner = page.locator("#past-banner")
    expect(banner).to_be_visible()
    expect(page.locator(RECORDS)).to_have_count(1)
    assert patterns(page) == {"neon_palette"}
    expect(banner).to_contain_text("right after event #3")
    expect(banner).to_contain_text("3 events in")
    expect(banner).to_contain_text("Mar 1, 2026, 05:00 AM EST")  # the viewer's zone
    expect(banner).to_contain_text(f"derivation v{DERIVATION_VERSION}")
    expect(banner).to_contain_text("Forget is not offered here: it acts on today's memory")
    expect(page.locator("body")).to_have_class("past")
    expect(page.locator("#history-state")).to_contain_text("Showing the past")
    expect(page.locator("#whoami")).to_contain_text("looking at the past")
    # no Forget on a past record; Reset says it acts on today's memory
    expect(page.locator(f"{RECORDS} button", has_text="Forget")).to_have_count(0)
    expect(page.locator(f"{RECORDS} button", has_text="Why?")).to_have_count(1)
    expect(page.locator("#reset-past")).to_be_visible()
    expect(page.locator("#reset-past")).to_contain_text("Reset acts on today's memory")
    # the prompt preview is the block as it was then (the same as the API's)
    block = httpx.get(
        f"{site.url}/api/v1/prompt?at_seq=3", headers={"Authorization": f"Bearer {site.token}"}
    ).text
    if block:
        expect(page.locator("#preview")).to_have_text(block)
    else:
        expect(page.locator("#preview")).to_contain_text("(empty")
    assert "serif_headings" not in (page.locator("#preview").text_content() or "")
    expect(page.locator("#preview-past")).to_contain_text("right after event #3")
    doc = site.get("/api/v1/memory?at_seq=3")
    assert {r["pattern"] for r in doc["preferences"]} == patterns(page)
    expect(page.locator("#history-seq")).to_be_focused()  # focus stays on the slider

    # Why? in the past: the trace up to event 3
    page.locator(RECORDS).first.get_by_role("button", name="Why").click()
    expect(page.locator("#h-why")).to_be_focused()
    expect(page.locator("#why-steps li")).to_have_count(3)
    expect(page.locator("#why-past")).to_contain_text("right after event #3")
    expect(page.locator("#why-summary")).to_contain_text("right after event #3")
    page.click("#why-close")

    # -- the date picker: Mar 2, 07:00 local is after events 4-5, before 6-11 ---------------
    page.fill("#history-date", "2026-03-02T07:00")
    page.click("#history-go")
    expect(page.locator(RECORDS)).to_have_count(2)
    assert patterns(page) == {"neon_palette", "serif_headings"}
    expect(banner).to_contain_text("right after event #5")
    expect(banner).to_contain_text("Mar 2, 2026, 05:00 AM EST")
    expect(slider).to_have_value("5")  # the date resolved to event 5; the slider follows
    expect(page.locator("#history-seq-value")).to_have_text("#5")
    expect(page.locator("#history-go")).to_be_focused()
    # before the first event: nothing
    page.fill("#history-date", "2026-02-01T00:00")
    page.click("#history-go")
    expect(banner).to_contain_text("before the first event")
    expect(page.locator("#whoami")).to_contain_text("looking at the past: before the first event")
    expect(page.locator(RECORDS)).to_have_count(0)
    expect(page.locator("#empty")).to_be_visible()

    # -- in the past: reflow at four widths, no CSP violation, axe clean ----------------------
    slider.fill("7")
    expect(page.locator(RECORDS)).to_have_count(3)
    for width in (320, 390, 1280, 1440):
        fits(page, width, past=True)
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        assert axe_violations(page) == [], scheme
    page.emulate_media(color_scheme="light")
    page.set_viewport_size({"width": 1280, "height": 900})

    # -- back to now, from the inspector's banner: focus on the inspector's heading -----------
    page.click("#past-now")
    expect(page.locator("#past-banner")).to_be_hidden()
    expect(page.locator(RECORDS)).to_have_count(4)
    expect(page.locator(f"{RECORDS} button", has_text="Forget")).to_have_count(4)
    expect(page.locator("#reset-past")).to_be_hidden()
    expect(slider).to_have_value("11")
    assert page.locator("body.past").count() == 0
    expect(page.locator("#h-inspector")).to_be_focused()
    # ... and from the history card (which hides itself): focus on the slider
    slider.fill("4")
    expect(banner).to_contain_text("right after event #4")
    page.click("#history-now")
    expect(page.locator("#history-state")).to_have_text("Showing memory now.")
    expect(page.locator("#history-seq")).to_be_focused()
    # the slider's end is now
    slider.fill("2")
    expect(banner).to_contain_text("right after event #2")
    slider.fill("11")
    expect(page.locator("#past-banner")).to_be_hidden()
    expect(page.locator(RECORDS)).to_have_count(4)
    assert site.errors == []


def test_derivation_preview_switch_and_back(site: Site) -> None:
    page, store = site.page, site.store
    info = site.get("/api/v1/derivation")
    state = page.locator("#derivation-state")
    expect(state).to_contain_text(f"Version {info['in_force']} is in force")
    expect(state).to_contain_text("you have not chosen one")
    options = page.eval_on_selector_all("#derivation-version option", "os => os.map(o => o.value)")
    assert options == info["known"]
    expect(page.locator("#derivation-history")).to_have_text("No switches yet.")
    assert info["in_force"] != "2"
    before_events = store.events("default")

    # -- what would change ---------------------------------------------------------------------
    page.select_option("#derivation-version", "2")
    page.click("#derivation-preview")
    result = page.locator("#derivation-result")
    expect(result).to_be_visible()
    expect(page.locator("#h-derivation-result")).to_be_focused()
    expect(page.locator("#h-derivation-result")).to_have_text(
        f"From version {info['in_force']} to version 2 (global memory)"
    )
    preview = site.get("/api/v1/derivation/preview?version=2")
    change = preview["change"]
    items = page.locator("#derivation-records li")
    expect(items).to_have_count(max(1, len(change["records"])))
    texts = items.all_text_contents()
    for rec, text in zip(change["records"], texts, strict=False):
        kind = {"added": "Added:", "removed": "Removed:", "changed": "Changed:"}[rec["change"]]
        assert text.startswith(kind), text
        for f in rec["fields"]:
            word = WORDS.get(f, f)
            assert f"{word} " in text and " → " in text, (f, text)
    assert any(MARKUP in t for t in texts) or not any(
        r["pattern"] == MARKUP for r in change["records"]
    )
    assert page.locator("#derivation-result img").count() == 0  # stored strings as text
    inj = page.locator("#derivation-injection li")
    expect(inj).to_have_count(max(1, len(change["injection"])))
    for x, text in zip(change["injection"], inj.all_text_contents(), strict=False):
        assert text.startswith("In:" if x["change"] == "in" else "Out:"), text
        for reason in x["reasons"]:
            assert reason in text
    # the two blocks, line by line (a line only on one side is marked)
    for sel, key in (("#block-before", "block_before"), ("#block-after", "block_after")):
        lines = [t[2:] for t in page.locator(f"{sel} .line").all_text_contents()]
        assert lines == (change[key].split("\n") if change[key] else []), sel
    marked = page.locator("#block-before .line.del, #block-after .line.add").count()
    assert (marked > 0) == change["block_changed"]
    expect(page.locator("#h-block-before")).to_have_text(f"Now (version {info['in_force']})")
    # a preview writes nothing
    assert store.events("default") == before_events
    assert site.get("/api/v1/derivation") == info
    # reflow and axe with the preview open
    for width in (320, 390, 1280, 1440):
        fits(page, width, past=False)
    page.set_viewport_size({"width": 1280, "height": 900})
    assert axe_violations(page) == []

    # -- the switch asks first; Escape cancels and focus goes back ------------------------------
    switch = page.locator("#derivation-switch")
    expect(switch).to_have_text("Switch to version 2")
    switch.click()
    expect(page.locator("#derivation-dialog")).to_be_visible()
    expect(page.locator("#derivation-cancel")).to_be_focused()
    expect(page.locator("#derivation-dialog-text")).to_contain_text("switch back at any time")
    page.keyboard.press("Escape")
    expect(page.locator("#derivation-dialog")).to_be_hidden()
    expect(page.locator("#derivation-switch")).to_be_focused()
    assert site.get("/api/v1/derivation")["in_force"] == info["in_force"]

    # -- switch for real (the clock a day later) --------------------------------------------------
    site.clock[0] += DAY_MS
    switch.click()
    page.click("#derivation-confirm")
    expect(page.locator("#status")).to_contain_text("Switched to derivation version 2")
    expect(state).to_contain_text("Version 2 is in force (you chose it")
    back = page.locator("#derivation-back")
    expect(back).to_have_text(f"Switch back to version {info['in_force']}")
    expect(page.locator("#derivation-back")).to_be_focused()
    expect(result).to_be_hidden()  # the preview was for the old version
    expect(page.locator("#whoami")).to_contain_text("derivation v2")
    now = site.get("/api/v1/derivation")
    assert now["in_force"] == "2" and len(now["history"]) == 1
    history = page.locator("#derivation-history li")
    expect(history).to_have_count(1)
    expect(history.first).to_contain_text("Mar 4, 2026, 05:00 AM EST")
    expect(history.first).to_contain_text(f"from version {info['in_force']} to version 2")
    assert store.events("default") == before_events  # the log is untouched

    # the past knows which version was in force then
    site.post_events([wire("late", "pastel_tones")])
    page.click("#refresh")
    expect(page.locator("#history-seq")).to_have_attribute("max", "12")
    page.locator("#history-seq").fill("11")
    expect(page.locator("#past-banner")).to_contain_text(f"derivation v{info['in_force']}")
    page.click("#past-now")
    expect(page.locator("#past-banner")).to_be_hidden()

    # -- switch back ------------------------------------------------------------------------
    back.click()
    expect(page.locator("#derivation-dialog-title")).to_have_text(
        f"Switch to version {info['in_force']}?"
    )
    page.click("#derivation-confirm")
    expect(state).to_contain_text(f"Version {info['in_force']} is in force")
    expect(history).to_have_count(2)
    expect(back).to_have_text("Switch back to version 2")
    expect(page.locator("#derivation-back")).to_be_focused()
    assert site.get("/api/v1/derivation")["in_force"] == info["in_force"]
    assert site.errors == []
