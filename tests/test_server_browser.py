"""The Settings → Memory page in real headless Chromium (docs/daemon.md, "The Settings →
Memory page").

``creative-memory serve`` runs as a subprocess; the page is opened through the one-time link
printed by ``creative-memory ui``; events arrive through the HTTP API; then, on the page:
see them in the inspector (a sentence per record, its strength bar, confidence, polarity in
colour and words, the injected set, an evidence timeline, times in the viewer's zone),
search, "Why?", forget one, pause, toggle a project, the master and diagnostics switches,
the prompt preview, export, reset, import the export back — each asserted on the page and
on the store, and after each action where keyboard focus landed (never the page body).
Polling is conditional: with nothing changed, the page's poll is a 304 and nothing else is
fetched. No request of the page is a 404 (the favicon included).

Needs the ``playwright`` package and Debian's ``chromium`` (``/usr/bin/chromium``; override
with ``CHROMIUM``). Skipped when either is missing, except under CI, where it fails. The
layout at four widths, axe-core and the screenshots are in tests/test_page_layout.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from creative_memory import MemoryStore
from creative_memory.http import DaemonFiles

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

try:
    from playwright.sync_api import Browser, Page, expect, sync_playwright
except ImportError:  # pragma: no cover - depends on the environment
    sync_playwright = None  # type: ignore[assignment]

_missing = sync_playwright is None or not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM))
if _missing and os.environ.get("CI"):
    raise RuntimeError(f"the browser test needs playwright and Chromium at {CHROMIUM} in CI")
pytestmark = pytest.mark.skipif(_missing, reason=f"playwright or {CHROMIUM} not available")


def wire(artifact: str, pattern: str, ptype: str = "color", **over: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "event": "explicit_tag_applied",
        "user_id": "default",
        "artifact_id": artifact,
        "session_id": "s1",
        "project_id": None,
        "timestamp": "2026-03-01T10:00:00Z",
        "tag_text": "love this",
        "artifact_meta": {"signals": [{"preference_type": ptype, "pattern": pattern}]},
    }
    ev.update(over)
    return ev


class Daemon:
    def __init__(self, root: Path, url: str, token: str, proc: subprocess.Popen[bytes]) -> None:
        self.root, self.url, self.token, self.proc = root, url, token, proc

    def post(self, path: str, body: Any) -> dict[str, Any]:
        r = httpx.post(
            f"{self.url}{path}", json=body, headers={"Authorization": f"Bearer {self.token}"}
        )
        assert r.status_code == 200, r.text
        out: dict[str, Any] = r.json()
        return out

    def login_link(self) -> str:
        env = {**os.environ, "CREATIVE_MEMORY_USER": "default"}
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "creative_memory.cli.daemon",
                "ui",
                "--no-browser",
                "--data-dir",
                str(self.root),
            ],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        return out.stdout.strip()

    def store(self) -> MemoryStore:
        return MemoryStore(self.root)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    root = tmp_path / "data"
    env = {**os.environ, "CREATIVE_MEMORY_USER": "default", "HOME": str(tmp_path)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "creative_memory.cli.daemon",
            "serve",
            "--data-dir",
            str(root),
            "--port",
            "0",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        files = DaemonFiles(root)
        deadline = time.monotonic() + 30
        info = files.read_server_info()
        while info is None or info.get("pid") != proc.pid:
            assert proc.poll() is None, proc.stderr.read().decode()  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the daemon did not start"
            time.sleep(0.05)
            info = files.read_server_info()
        url = str(info["url"]).rstrip("/")
        while True:
            try:
                httpx.get(f"{url}/healthz")
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        token = files.token_for("default", create=False)
        assert token is not None
        yield Daemon(root, url, token, proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


RECORDS = "#records li.record"


def rows(page: Page) -> list[tuple[str, str, str]]:
    """(type, pattern, scope) of every inspector record."""
    out: list[tuple[str, str, str]] = page.eval_on_selector_all(
        RECORDS,
        "trs => trs.map(tr => [tr.dataset.type, tr.dataset.pattern, tr.dataset.scope])",
    )
    return [tuple(r) for r in out]  # type: ignore[misc]


def row(page: Page, pattern: str, scope: str = "global") -> Any:
    return page.locator(f'{RECORDS}[data-pattern="{pattern}"][data-scope="{scope}"]')


FOCUSED = """() => {
  const e = document.activeElement;
  if (!e || e === document.body) return null;
  const card = e.closest("li.record");
  return { id: e.id, focus: e.dataset.focus || "", text: e.textContent.trim().slice(0, 40),
           pattern: card ? card.dataset.pattern : null, scope: card ? card.dataset.scope : null };
}"""


def focused(page: Page) -> dict[str, Any]:
    """What has keyboard focus (waits until it is not the page body)."""
    page.wait_for_function(
        "() => document.activeElement && document.activeElement !== document.body"
    )
    out: dict[str, Any] = page.evaluate(FOCUSED)
    return out


def settle(page: Page) -> None:
    """Wait until the queued actions and the refresh after them are done."""
    page.wait_for_load_state("networkidle")


def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def desktop_page(browser: Browser, *, downloads: bool = True) -> Page:
    """A new page in a new context: a desktop window, New York time, English (the
    browser tests' setting, so times and wording are the same on every machine)."""
    context = browser.new_context(
        accept_downloads=downloads,
        viewport={"width": 1280, "height": 900},
        timezone_id="America/New_York",
        locale="en-US",
    )
    return context.new_page()


@pytest.mark.slow
def test_settings_memory_page_end_to_end(daemon: Daemon, browser: Browser, tmp_path: Path) -> None:
    page = desktop_page(browser)
    context = page.context
    page.on("dialog", lambda d: d.accept())
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    responses: list[tuple[str, int, str]] = []
    page.on(
        "response",
        lambda r: responses.append((r.url, r.status, r.request.headers.get("if-none-match", ""))),
    )

    # -- signed out, then the one-time login link -------------------------------------------
    r = page.goto(daemon.url + "/")
    assert r is not None and r.status == 401
    expect(page.locator("body")).to_contain_text("creative-memory ui")
    link = daemon.login_link()
    r = page.goto(link)
    assert r is not None and r.status == 200 and page.url == daemon.url + "/"
    expect(page.locator("h1")).to_have_text("Settings → Memory")
    expect(page.locator("#whoami")).to_contain_text("Signed in as default")
    assert page.get_attribute('link[rel="icon"]', "href") == "/favicon.ico"
    assert page.request.get(daemon.url + "/favicon.ico").status == 200
    cookie = next(c for c in context.cookies() if c["name"].startswith("cm_session_"))
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    # the link is used up
    other = browser.new_context().new_page()
    r = other.goto(link)
    assert r is not None and r.status == 401
    other.context.close()

    # every form control has a label
    unlabeled = page.eval_on_selector_all(
        "input, select, textarea",
        "els => els.filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label'))"
        ".map(e => e.id)",
    )
    assert unlabeled == []

    # -- ingest through the API, see it in the inspector --------------------------------------
    report = daemon.post(
        "/api/v1/events",
        [
            *(wire(f"n{i}", "neon_palette", tag_text="too noisy") for i in range(3)),
            *(wire(f"s{i}", "serif_headings", "typography") for i in range(2)),
            *(
                wire(f"f{i}", "neon_palette", project_id="festival", tag_text="save this direction")
                for i in range(3)
            ),
        ],
    )
    assert report["accepted"] == 8
    page.click("#refresh")
    expect(row(page, "neon_palette")).to_have_count(1)
    expect(row(page, "serif_headings")).to_have_count(1)
    expect(row(page, "neon_palette", "project:festival")).to_have_count(1)
    expect(page.locator("#refresh")).to_be_focused()
    neon = row(page, "neon_palette")
    # a plain sentence, polarity in words and colour, strength as a bar, confidence
    expect(neon.locator("h3")).to_contain_text("Avoid neon palette — ")
    expect(neon.locator("h3")).to_contain_text("3 rejections, last ")
    expect(neon).to_contain_text("avoid (−)")
    assert "neg" in (neon.get_attribute("class") or "")
    neon_colour = neon.evaluate("e => getComputedStyle(e).borderLeftColor")
    serif = row(page, "serif_headings")
    expect(serif.locator("h3")).to_contain_text("Prefer serif headings — ")
    expect(serif).to_contain_text("prefer (+)")
    assert serif.evaluate("e => getComputedStyle(e).borderLeftColor") != neon_colour
    meter = neon.locator("meter")
    strength = daemon.store().inspect("default")["preferences"]
    expected = next(
        r for r in strength if r["pattern"] == "neon_palette" and r["scope"] == "global"
    )
    assert float(meter.get_attribute("value") or "nan") == pytest.approx(
        expected["signal_strength"]
    )
    expect(neon).to_contain_text(f"{expected['confidence']} confidence")
    expect(neon).to_contain_text("explicit_tag")
    expect(neon).to_contain_text("3 events")
    # the injected set: what the global prompt carries is marked, the project record is not
    expect(neon.locator(".badge.injected")).to_have_text("In prompts")
    expect(row(page, "neon_palette", "project:festival").locator(".badge.injected")).to_have_count(
        0
    )
    expect(page.locator("#counts")).to_contain_text("3 shown of 3 records; 2 in prompts")
    # the evidence timeline, one mark per event (fetched when the card is on screen)
    neon.scroll_into_view_if_needed()
    expect(neon.locator(".timeline li.tick.against")).to_have_count(3)
    expect(neon.locator(".timeline")).to_contain_text("Mar 1, 2026, 05:00 AM EST")  # local zone
    expect(page.locator("#preview")).to_contain_text("neon_palette")

    # -- search -----------------------------------------------------------------------------
    page.fill("#search", "festival")
    expect(page.locator(RECORDS)).to_have_count(1)
    expect(row(page, "neon_palette", "project:festival")).to_have_count(1)
    page.fill("#search", "typography serif")
    expect(page.locator(RECORDS)).to_have_count(1)
    expect(page.locator("#counts")).to_contain_text("1 shown of 3 records")
    page.fill("#search", "")
    expect(page.locator(RECORDS)).to_have_count(3)

    # -- polling is conditional: nothing changed, a 304 and nothing else fetched -------------
    settle(page)
    mark = len(responses)
    page.wait_for_timeout(5600)
    polled = responses[mark:]
    polls = [(s, bool(tag)) for u, s, tag in polled if "/api/v1/memory" in u]
    assert polls and set(polls) == {(304, True)}, polls  # one or two polls in 5.6 s
    assert [u for u, _, _ in polled if "/api/v1/memory" not in u] == []

    # -- Why? ------------------------------------------------------------------------------------
    neon.get_by_role("button", name="Why").click()
    expect(page.locator("#why")).to_be_visible()
    # three events about neon_palette, and one about another pattern that moved it through
    # the joint fit (a step of its own, so the story has no holes)
    expect(page.locator("#why-steps li")).to_have_count(4)
    expect(page.locator("#why-steps")).to_contain_text("moved by the joint fit")
    expect(page.locator("#h-why")).to_be_focused()
    expect(page.locator("#why-steps")).to_contain_text("EST")  # the viewer's zone
    # the daemon derives with the default version: what the estimate rests on, and whether
    # it reaches the prompt
    evidence = page.locator("#why-evidence li")
    expect(evidence.first).to_contain_text("Estimate -")
    expect(evidence.first).to_contain_text("slab probability")
    expect(page.locator("#why-evidence")).to_contain_text(
        "explicit_tag: 0 for, 3 against, weight 6, contribution -"
    )
    expect(evidence.last).to_contain_text("Prompt: injected:")
    page.click("#why-close")
    expect(page.locator("#why")).to_be_hidden()
    at = focused(page)  # back on the Why? button that opened it
    assert at["focus"].startswith("why:") and (at["pattern"], at["scope"]) == (
        "neon_palette",
        "global",
    )
    neon.get_by_role("button", name="Why").click()
    expect(page.locator("#h-why")).to_be_focused()
    page.keyboard.press("Escape")  # Escape closes it too
    expect(page.locator("#why")).to_be_hidden()
    wait_for(lambda: focused(page).get("pattern") == "neon_palette")

    # -- forget one: focus goes to the next record ------------------------------------------
    order = [p for _, p, _ in rows(page)]
    row(page, "serif_headings").get_by_role("button", name="Forget").click()
    expect(row(page, "serif_headings")).to_have_count(0)
    expect(page.locator("#status")).to_contain_text("Forgot serif_headings")
    at = focused(page)
    assert at["focus"].startswith("why:") and at["pattern"] is not None, at
    after = order.index("serif_headings") + 1
    assert at["pattern"] == (order[after] if after < len(order) else order[after - 2])
    store = daemon.store()
    assert all(getattr(e, "pattern", None) != "serif_headings" for e in store.events("default"))
    assert len(store.events("default")) == 6

    # -- pause until a date, then resume ---------------------------------------------------------
    page.fill("#pause-until", "2030-01-02T03:04")
    page.click("#pause")
    expect(page.locator("#pause-state")).to_contain_text("paused until")
    expect(page.locator("#pause-state")).to_contain_text("Jan 2, 2030, 03:04 AM EST")
    expect(page.locator("#resume")).to_be_focused()
    assert store.is_paused("default")
    assert store.get_settings("default").paused_until is not None
    assert daemon.post("/api/v1/events", wire("late", "pastel"))["learning"] is False
    assert len(store.events("default")) == 6  # dropped while paused
    page.click("#resume")
    expect(page.locator("#pause-state")).to_have_text("Learning is on.")
    expect(page.locator("#pause")).to_be_focused()  # Resume is disabled now
    assert not store.is_paused("default")

    # -- per-project toggle, seen in the preview -------------------------------------------------
    page.select_option("#preview-project", "festival")
    page.select_option("#preview-variant", "legacy")
    expect(page.locator("#preview")).to_contain_text("Project override: neon_palette active")
    page.check("#ignore-festival")
    expect(page.locator("#status")).to_contain_text("festival now ignores global memory")
    assert store.get_settings("default").disabled_projects == ["festival"]
    expect(page.locator("#ignore-festival")).to_be_checked()
    settle(page)
    expect(page.locator("#ignore-festival")).to_be_focused()  # the list was redrawn; focus stayed
    page.keyboard.press("Space")
    expect(page.locator("#status")).to_contain_text("festival uses global memory")
    expect(page.locator("#ignore-festival")).not_to_be_checked()
    assert store.get_settings("default").disabled_projects == []
    settle(page)
    expect(page.locator("#ignore-festival")).to_be_focused()
    page.keyboard.press("Space")
    expect(page.locator("#status")).to_contain_text("festival now ignores global memory")
    assert store.get_settings("default").disabled_projects == ["festival"]

    # -- keyboard: the diagnostics switch with Space; master switch off and on -------------------
    page.focus("#diagnostics-feed")
    page.keyboard.press("Space")
    expect(page.locator("#status")).to_contain_text("Diagnostics feed on")
    assert store.get_settings("default").diagnostics_feed is True
    expect(page.locator("#diagnostics-feed")).to_be_focused()
    page.uncheck("#memory-enabled")
    expect(page.locator("#pause-state")).to_contain_text("Memory is off")
    assert store.get_settings("default").memory_enabled is False
    expect(page.locator("#preview")).to_contain_text("(empty")
    page.check("#memory-enabled")
    expect(page.locator("#pause-state")).to_have_text("Learning is on.")
    assert store.get_settings("default").memory_enabled is True
    expect(page.locator("#memory-enabled")).to_be_focused()

    # -- export ----------------------------------------------------------------------------------
    before = store.events("default")
    with page.expect_download() as dl:
        page.click("#export")
    download = dl.value
    assert download.suggested_filename.startswith("creative-memory-default-")
    archive_path = tmp_path / "export.json"
    download.save_as(archive_path)
    archive = json.loads(archive_path.read_text())
    assert archive["format"] == "creative-memory-archive"
    assert len(archive["events"]) == len(before) == 6

    # -- reset with confirmation (Escape cancels first) ------------------------------------------
    page.click("#reset")
    expect(page.locator("#reset-dialog")).to_be_visible()
    expect(page.locator("#reset-cancel")).to_be_focused()
    page.keyboard.press("Escape")
    expect(page.locator("#reset-dialog")).to_be_hidden()
    expect(page.locator("#reset")).to_be_focused()
    assert len(store.events("default")) == 6
    page.click("#reset")
    page.click("#reset-confirm")
    expect(page.locator("#status")).to_contain_text("Memory erased")
    expect(page.locator(RECORDS)).to_have_count(0)
    expect(page.locator("#empty")).to_be_visible()
    expect(page.locator("#reset")).to_be_focused()
    assert store.events("default") == []
    assert store.get_settings("default").disabled_projects == []

    # -- import the export back ------------------------------------------------------------------
    page.set_input_files("#import-file", str(archive_path))
    page.select_option("#import-mode", "replace")
    page.click("#import")
    expect(page.locator("#status")).to_contain_text(
        "Replaced your memory with export.json: 6 events"
    )
    expect(page.locator("#import")).to_be_focused()
    expect(row(page, "neon_palette")).to_have_count(1)
    expect(row(page, "neon_palette", "project:festival")).to_have_count(1)
    back = store.events("default")  # the same events, numbered on after the erased ones
    assert [e.seq for e in back] == [before[-1].seq + i for i in range(1, len(before) + 1)]
    assert [msgspec.structs.replace(e, seq=0, h="") for e in back] == [
        msgspec.structs.replace(e, seq=0, h="") for e in before
    ]
    assert store.get_settings("default").disabled_projects == ["festival"]
    expect(page.locator("#ignore-festival")).to_be_checked()

    assert errors == []
    assert [(u, s) for u, s, _ in responses if s == 404] == []
    context.close()
