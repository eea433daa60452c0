"""The dashboard in a real browser: ``ember dashboard`` as a subprocess on a free port,
every page opened in headless Debian Chromium (Playwright), values read off the screen.

Screenshots go to ``$EMBER_SCREENSHOTS`` (kept, e.g. as CI artifacts) or the test's tmp dir.
Chromium comes from ``tests/dashboard/install_browser.sh`` (``make browser``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.dashboard.browser import CHROMIUM, chromium, dashboard_server

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(),
        reason=f"{CHROMIUM} is missing: run `bash tests/dashboard/install_browser.sh` "
        "(Debian's chromium package) to run the browser test",
    ),
]

# page path -> (query string, texts that must be visible)
PAGES: dict[str, tuple[str, list[str]]] = {
    "": ("", ["Runs", "Largest peak memory", "Compiles", "20"]),  # the peak is an RSS: varies
    "recompiles": (
        "?run=small-cache",
        ["Why it compiled again", "What if the cache were bigger", "1 fewer compiles"],
    ),
    "cache": ("?run=small-cache", ["Hit rate", "25%", "Thrashing positions", "Compile payback"]),
    "memory": ("?run=small-cache", ["Peak of live tensors", "1.5 MiB", "Static memory"]),
    "hub": ("?run=hub", ["Saved-metadata fallbacks", "Ember used its saved copy", "Check kinds"]),
    "calls": ("?run=small-cache", ["By input shapes", "p99"]),
    "compare": (
        "?run=small-cache&other=big-cache",
        ["Compiles (B)", "Latency by input shapes", "Regression gate", "Run A is the base"],
    ),
    "sql": ("?sql=SELECT%20count(*)%20AS%20n%20FROM%20evictions", ["SQL console", "1 rows"]),
}


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = os.environ.get("EMBER_SCREENSHOTS")
    folder = Path(where) if where else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _wait_until_idle(page) -> None:
    # Done when the script has finished (no status widget, no skeleton placeholders) and
    # every chart and table has drawn (vega-lite and the data grid draw on a canvas/svg).
    page.wait_for_function(
        """() => !document.querySelector('[data-testid="stStatusWidget"]')
            && !document.querySelector('[data-testid="stSkeleton"]')
            && [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')]
                .every(c => c.querySelector('canvas, svg'))
            && [...document.querySelectorAll('[data-testid="stDataFrame"]')]
                .filter(d => d.checkVisibility())  // tables in closed expanders wait
                .every(d => d.querySelector('canvas'))""",
        timeout=60_000,
    )
    page.wait_for_timeout(300)  # let the last chart finish its first paint


def test_every_page_renders_its_values_in_chromium(dashboard_db: Path, screenshots: Path) -> None:
    from playwright.sync_api import expect

    with dashboard_server(dashboard_db) as base, chromium() as browser:
        page = browser.new_page()
        for path, (query, expected) in PAGES.items():
            page.goto(f"{base}/{path}{query}")
            for text in expected:
                expect(page.get_by_text(text, exact=False).first).to_be_visible(timeout=60_000)
            _wait_until_idle(page)
            assert not page.get_by_test_id("stException").count(), f"exception on /{path}"
            page.screenshot(path=str(screenshots / f"{path or 'runs'}.png"), full_page=True)

        # the sidebar navigation lists every page, and the selected run survives a click
        page.goto(f"{base}/cache?run=big-cache")
        expect(page.get_by_text("50%").first).to_be_visible(timeout=60_000)
        nav = page.get_by_test_id("stSidebarNav")
        for title in ("Runs", "Recompiles", "Cache", "Memory", "Hub", "Calls", "Compare", "SQL"):
            expect(nav.get_by_text(title, exact=True)).to_be_visible()
        nav.get_by_text("Recompiles", exact=True).click()
        expect(page.get_by_text("Why it compiled again")).to_be_visible(timeout=60_000)
        page.wait_for_url("**/recompiles?run=big-cache", timeout=30_000)

        # a first visit (no run in the link): the newest run (hub) has no memory and no
        # cache lookups, like the demo's training run; Memory and Cache open on the newest
        # run that has them, say so, and draw their charts
        fresh = browser.new_page()
        fresh.goto(base)
        expect(fresh.get_by_text("Largest peak memory")).to_be_visible(timeout=60_000)
        for title, what in (("Memory", "memory records"), ("Cache", "cache lookups")):
            fresh.get_by_test_id("stSidebarNav").get_by_text(title, exact=True).click()
            expect(fresh.get_by_text(f"the newest run with {what}")).to_be_visible(timeout=60_000)
            _wait_until_idle(fresh)
            charts = fresh.get_by_test_id("stVegaLiteChart")
            assert charts.count() >= 1, f"no chart on {title}"
            expect(charts.first.locator("canvas, svg").first).to_be_visible()
            assert not fresh.get_by_text("recorded no memory").count()
            assert not fresh.get_by_text("looked nothing up").count()
            fresh.screenshot(path=str(screenshots / f"first-{title.lower()}.png"), full_page=True)
        fresh.close()

        # a link with the start of a run id (as the pages show ids) opens that run
        page.goto(f"{base}/memory?run=small")
        expect(page.get_by_text("Peak of live tensors")).to_be_visible(timeout=60_000)
        expect(page.get_by_text("1.5 MiB").first).to_be_visible(timeout=60_000)
        assert not page.get_by_text("from the link").count()
        page.wait_for_url("**/memory?run=small-cache", timeout=30_000)

        # the SQL console refuses a write typed into the browser
        page.goto(f"{base}/sql")
        expect(page.get_by_text("SQL console").first).to_be_visible(timeout=60_000)
        box = page.get_by_role("textbox", name="Query")
        box.fill("DROP TABLE runs")
        page.get_by_role("button", name="Run", exact=True).click()
        expect(page.get_by_text("Refused: the SQL console is read-only: DROP")).to_be_visible(
            timeout=60_000
        )
        page.screenshot(path=str(screenshots / "sql-refused.png"), full_page=True)

    assert sorted(p.name for p in screenshots.glob("*.png")) == sorted(
        [f"{p or 'runs'}.png" for p in PAGES]
        + ["sql-refused.png", "first-memory.png", "first-cache.png"]
    )
