"""The Settings → Memory page on a damaged log, in headless Chromium (docs/daemon.md, "The
Settings → Memory page"; docs/storage.md, "Check and repair"): an action that fails on the
damage shows the Repair card with what a check finds; its dialog says what a repair drops;
the repair mends the log, the card goes, and the action works again. "Check the stored
memory" asks at any time: healthy, or the same card.

Uses the daemon and Chromium of tests/test_server_browser.py (skipped without them).
"""

from __future__ import annotations

import contextlib
import re

import pytest

from tests import test_server_browser as base
from tests.test_page_layout import axe_violations
from tests.test_server_browser import row
from tests.test_server_browser_fixes import Site, site

with contextlib.suppress(ImportError):  # skipped without it (pytestmark)
    from playwright.sync_api import expect

pytestmark = [pytest.mark.slow, base.pytestmark]

daemon = base.daemon
browser = base.browser
__all__ = ["site"]  # the fixture, shared


def damage(site: Site, lineno: int, line: bytes) -> bytes:
    """Replace line ``lineno`` (1: the header) of the user's log by ``line``; the log."""
    log = site.daemon.root / "default" / "events.jsonl"
    lines = log.read_bytes().split(b"\n")
    lines[lineno - 1] = line
    log.write_bytes(b"\n".join(lines))
    return log.read_bytes()


def test_a_damaged_log_shows_the_repair_card_and_a_repair_mends_it(site: Site) -> None:
    page = site.page
    expect(page.locator("#repair-card")).to_be_hidden()
    # the second event, as text that would be markup if the page made HTML of it
    damaged = damage(site, 3, b'{"kind":"signal","<b>oops</b>"')
    page.on("dialog", lambda d: d.accept())  # Forget asks first
    row(page, "serif_headings").get_by_role("button", name="Forget").click()
    expect(page.locator("#error")).to_contain_text("GET /api/v1/check")
    expect(page.locator("#repair-card")).to_be_visible()
    items = page.locator("#repair-problems li")
    expect(items).to_have_count(1)
    expect(items).to_contain_text("line 3: not an event")
    expect(page.locator("#repair-problems b")).to_have_count(0)
    expect(page.locator("#repair-summary")).to_contain_text("7 events still read")
    expect(page.locator("#h-repair")).to_be_focused()
    assert (site.daemon.root / "default" / "events.jsonl").read_bytes() == damaged  # a check

    page.click("#repair")
    expect(page.locator("#repair-text")).to_contain_text("drops 1 line that is not an event")
    page.click("#repair-cancel")
    assert not site.api("GET", "/api/v1/check").json()["healthy"]  # cancelled: nothing done

    page.click("#repair")
    page.click("#repair-confirm")
    expect(page.locator("#status")).to_contain_text(
        "Repaired the log: 1 line dropped, 0 edited events kept as read, 0 events numbered "
        "anew; 7 events kept."
    )
    expect(page.locator("#repair-card")).to_be_hidden()
    assert site.bodies("/api/v1/repair") == [{"confirm": True}]
    assert site.api("GET", "/api/v1/check").json()["healthy"] is True
    row(page, "serif_headings").get_by_role("button", name="Forget").click()
    expect(page.locator("#status")).to_contain_text("Forgot")
    expect(page.locator("#error")).to_be_empty()


def test_check_says_healthy_or_shows_the_card(site: Site) -> None:
    page = site.page
    page.click("#check")
    expect(page.locator("#status")).to_have_text("The stored memory is healthy: 8 events.")
    expect(page.locator("#repair-card")).to_be_hidden()
    log = site.daemon.root / "default" / "events.jsonl"
    lines = log.read_bytes().split(b"\n")
    lines[4] = lines[4].replace(b'"serif_headings"', b'"sans_headings"')  # edited: an event
    log.write_bytes(b"\n".join(lines))
    page.click("#check")
    expect(page.locator("#status")).to_have_text("The stored memory has 1 problem: see above.")
    expect(page.locator("#repair-problems li")).to_have_text(
        [re.compile(r"^line 5: edited outside creative-memory — ")]
    )
    expect(page.locator("#h-repair")).to_be_focused()
    for scheme in ("light", "dark"):  # the card as accessible as the rest of the page
        page.emulate_media(color_scheme=scheme)
        assert axe_violations(page) == [], scheme
    page.emulate_media(color_scheme="light")
    page.click("#repair")
    assert axe_violations(page) == [], "dialog open"
    expect(page.locator("#repair-text")).to_have_text(
        "Edited events are kept as they read now, and the log is chained again."
    )
    page.click("#repair-confirm")
    expect(page.locator("#status")).to_contain_text("1 edited event kept as read")
    expect(page.locator("#repair-card")).to_be_hidden()
    assert site.api("GET", "/api/v1/export").status_code == 200  # the chain verifies again


def test_settings_that_do_not_load_are_written_anew_with_memory_off(site: Site) -> None:
    page = site.page
    (site.daemon.root / "default" / "settings.json").write_bytes(b"{not json")
    page.click("#refresh")  # every read needs the settings: the card comes up
    expect(page.locator("#repair-problems li")).to_have_text(
        [re.compile(r"^settings: settings do not load — ")]
    )
    expect(page.locator("#repair-summary")).to_have_text(
        "8 events still read as they should. Repair writes the settings anew; no event is touched."
    )
    # the polls keep failing the same way: the card is up, no check is asked again
    for _ in range(3):
        page.evaluate("document.dispatchEvent(new Event('visibilitychange'))")
        page.wait_for_timeout(200)
    checks = [u for m, u, _ in site.sent if m == "GET" and "/api/v1/check" in u]
    assert len(checks) == 1, checks
    page.click("#repair")
    expect(page.locator("#repair-text")).to_have_text(
        "The settings are written anew with memory off: turn it on again under Controls (a "
        "pause, project switches and the derivation version are back to their defaults)."
    )
    page.click("#repair-confirm")
    expect(page.locator("#status")).to_have_text("Settings written anew: memory is off.")
    expect(page.locator("#repair-card")).to_be_hidden()
    expect(page.locator("#memory-enabled")).not_to_be_checked()
    assert site.events() == 8  # nothing of the memory went with them
