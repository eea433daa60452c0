"""The dashboard while an ingest writes the database: it says so and tries again."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
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


def test_a_dashboard_waiting_for_an_ingest_says_so_and_the_ingest_lets_it_in_first(
    dashboard_db: Path, tmp_path: Path
) -> None:
    # an ingest opens the database again at once for its next trace file: a reader that
    # only polled got in by luck. The dashboard leaves a marker while it waits, and an
    # ingest about to open the file lets such a reader in first.
    from ember.analysis import connect
    from ember.analysis.db import announce_waiting, other_side_waiting, withdraw_waiting
    from ember.dashboard import db as dash

    path = tmp_path / "turns.duckdb"
    shutil.copy(dashboard_db, path)
    writer = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path), "60"], stdout=subprocess.PIPE, text=True
    )
    seen = threading.Event()

    def watch() -> None:
        while writer.poll() is None and not seen.is_set():
            if other_side_waiting(str(path), read_only=False):  # a reader waits
                seen.set()
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        assert writer.stdout.readline().strip() == "open"
        with pytest.raises(dash.DatabaseBusy):
            dash.connect_readonly(dash.db_version(path), wait_s=1.5)
    finally:
        writer.kill()
        writer.wait()
        watcher.join()
    assert seen.is_set()
    assert not other_side_waiting(str(path), read_only=False)  # withdrawn when it gave up

    # an ingest about to write waits while a reader says it waits
    withdrawn = threading.Event()

    def reader_waits() -> None:
        for _ in range(10):
            announce_waiting(str(path), read_only=True)
            time.sleep(0.1)
        withdrawn.set()
        withdraw_waiting(str(path), read_only=True)

    announce_waiting(str(path), read_only=True)
    waiting = threading.Thread(target=reader_waits)
    waiting.start()
    with connect(path):
        assert withdrawn.is_set()
    waiting.join()
