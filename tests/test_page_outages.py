"""The Settings → Memory page when things change under it, in headless Chromium
(docs/daemon.md, "The Settings → Memory page"): when the daemon stops answering for a
while, a switch flipped meanwhile shows what the daemon holds once it answers again, the
error says what is wrong in words a person can act on and goes when the daemon is back,
and a failure never sits beside an older success; when a poll redraws the cards, the
Details the person opened stay open, with focus on them.

Uses the daemon and Chromium of tests/test_server_browser.py (skipped without them).
"""

from __future__ import annotations

import contextlib

import pytest

from tests import test_server_browser as base
from tests import test_server_browser_fixes as fixes
from tests.test_server_browser import row, settle, wire
from tests.test_server_browser_fixes import Site

with contextlib.suppress(ImportError):  # skipped without it (pytestmark)
    from playwright.sync_api import expect

pytestmark = [pytest.mark.slow, base.pytestmark]

daemon = base.daemon
browser = base.browser
site = fixes.site


def test_a_switch_flipped_while_the_daemon_is_away_shows_what_it_holds(site: Site) -> None:
    page = site.page
    expect(page.locator("#memory-enabled")).to_be_checked()
    page.click("#refresh")
    expect(page.locator("#status")).to_have_text("Refreshed.")
    page.route("**/api/v1/**", lambda route: route.abort())
    page.click("#memory-enabled")  # the request fails, and the refresh after it
    expect(page.locator("#error")).to_contain_text("The memory daemon is not answering")
    expect(page.locator("#status")).to_have_text("")  # not "Refreshed." beside the error
    page.unroute("**/api/v1/**")
    # the next poll (here: the tab shown again) finds the daemon back: the box shows what it
    # holds — memory on — though nothing changed there (a conditional poll would say 304)
    page.evaluate("document.dispatchEvent(new Event('visibilitychange'))")
    expect(page.locator("#memory-enabled")).to_be_checked()
    expect(page.locator("#error")).to_have_text("")
    settle(page)
    assert site.api("GET", "/api/v1/settings").json()["memory_enabled"] is True


def test_resume_clears_the_date_of_the_pause_it_ended(site: Site) -> None:
    page = site.page
    page.fill("#pause-until", "2099-01-01T10:00")
    page.click("#pause")
    expect(page.locator("#pause-state")).to_contain_text("Learning paused until")
    page.click("#resume")
    expect(page.locator("#status")).to_have_text("Learning resumed.")
    expect(page.locator("#pause-until")).to_have_value("")  # a next Pause does not reuse it
    page.click("#pause")
    expect(page.locator("#pause-state")).to_have_text("Learning paused until you resume.")


def test_a_redraw_keeps_the_details_open_and_the_focus_on_them(site: Site) -> None:
    page = site.page
    neon = row(page, "neon_palette")
    summary = neon.locator("summary")
    summary.click()
    expect(neon.locator("details")).to_have_attribute("open", "")
    summary.focus()
    # new feedback arrives elsewhere; the poll redraws every card
    site.daemon.post("/api/v1/events", [wire("n9", "neon_palette", tag_text="too noisy")])
    page.evaluate("document.dispatchEvent(new Event('visibilitychange'))")
    expect(neon.locator("h3")).to_contain_text("4 rejections")
    expect(neon.locator("details")).to_have_attribute("open", "")
    assert page.evaluate("document.activeElement.dataset.focus") == (
        f"details:{neon.get_attribute('data-key')}"
    )
