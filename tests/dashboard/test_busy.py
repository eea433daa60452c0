"""The dashboard while an ingest writes the database: it says so and tries again."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ember.dashboard.db import DB_ENV

APP = Path(__file__).resolve().parents[2] / "dashboard" / "pages" / "app.py"

HOLD = (
    "import sys, time, duckdb; c = duckdb.connect(sys.argv[1]); print('open', flush=True); "
    "time.sleep(float(sys.argv[2])); c.close()"
)


def test_the_sql_page_retries_while_an_ingest_writes_then_shows_the_result(
    dashboard_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "busy.duckdb"
    shutil.copy(dashboard_db, db)
    monkeypatch.setenv(DB_ENV, str(db))
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.run()
    at.switch_page("sql.py").run()
    assert not at.exception
    # a writer holds the file for 12 s: the page used to give up after 10 s with an
    # uncaught DatabaseError; now it says the database is being updated and runs again
    writer = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(db), "12"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert writer.stdout.readline().strip() == "open"
        at.text_area(key="ember_sql_text").input("SELECT count(*) AS n FROM runs")
        at.button(key="ember_sql_run").click().run()
    finally:
        writer.wait(timeout=60)
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error
    [frame] = [d.value for d in at.dataframe if "n" in d.value.columns]
    assert frame["n"].to_list()[0] > 0
