"""The Trends page in a real browser (headless Debian Chromium) on a history of 1,000 runs
whose recompiles jump at run 600: one chart a metric, the change point marked, and its
link opens Compare on the run before and the run after."""

from __future__ import annotations

from pathlib import Path

import pytest

from ember.analysis import ingest
from ember.analysis.synthetic import write_history
from tests.dashboard.browser import CHROMIUM, chromium, dashboard_server
from tests.dashboard.test_browser import _wait_until_idle

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is missing"),
]

RUNS, STEP = 1000, 600


@pytest.fixture(scope="module")
def history_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("trends")
    tags = {"model": "bert-tiny", "branch": "main"}
    paths = write_history(work / "t", RUNS, records=60, recompile_step_at=STEP, tags=tags)
    db = work / "h.duckdb"
    ingest(paths, db)
    for p in paths:
        p.unlink()
    return db


def test_the_trends_page_marks_the_change_and_links_to_compare(history_db: Path, tmp_path: Path):
    from playwright.sync_api import expect

    with dashboard_server(history_db) as base, chromium() as browser:
        page = browser.new_page()
        page.goto(f"{base}/trends")
        expect(page.get_by_text("1,000 runs").first).to_be_visible(timeout=120_000)
        _wait_until_idle(page)
        assert not page.get_by_test_id("stException").count()
        charts = page.get_by_test_id("stVegaLiteChart")
        assert charts.count() == 1  # one chart, a panel a metric
        panels = charts.first.locator("canvas, svg")
        expect(panels.first).to_be_visible()
        before, after = f"{STEP - 1:08d}", f"{STEP:08d}"
        link = page.get_by_role("link", name=f"Compare {before} → {after}").first
        expect(link).to_be_visible()
        href = link.get_attribute("href") or ""
        assert f"run={before}-hist" in href
        assert f"other={after}-hist" in href
        page.screenshot(path=str(tmp_path / "trends.png"), full_page=True)
        nav = page.get_by_test_id("stSidebarNav")
        expect(nav.get_by_text("Trends", exact=True)).to_be_visible()

        link.click()
        page.wait_for_url(f"**/compare?run={before}-hist&other={after}-hist", timeout=60_000)
        expect(page.get_by_text("Compiles (B)").first).to_be_visible(timeout=60_000)
        _wait_until_idle(page)
        assert not page.get_by_test_id("stException").count()

        # a series per branch: the same change point, the series named by the tag's value
        page.goto(f"{base}/trends?by=branch")
        expect(page.get_by_text("1,000 runs").first).to_be_visible(timeout=120_000)
        _wait_until_idle(page)
        expect(page.get_by_role("link", name=f"Compare {before} → {after}").first).to_be_visible()
