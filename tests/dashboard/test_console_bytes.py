"""The SQL console caps a result by bytes as well as rows, and says so."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ember.dashboard.console import MAX_BYTES, MAX_ROWS, run_console_query
from ember.dashboard.db import DB_ENV, db_version

APP = Path(__file__).resolve().parents[2] / "dashboard" / "pages" / "app.py"


def test_a_wide_result_is_cut_off_by_bytes(small_db: Path) -> None:
    # 2,000 rows of 1 MB made a 1.9 GB frame: the row cap (100,000) never came into play
    # (that query now stops at the memory cap: test_console.py); 200 MB fits in memory
    sql = "SELECT i, repeat('x', 100000) AS s FROM range(2000) t(i)"
    result = run_console_query(db_version(small_db), sql)
    assert (result.truncated, result.cut_by) == (True, "bytes")
    assert 0 < result.frame.height < 2000
    assert result.frame.estimated_size() <= MAX_BYTES
    assert result.frame["i"].to_list() == list(range(result.frame.height))  # the first rows
    assert "cut off after" in result.note
    assert f"keeps {MAX_BYTES // 2**20} MB" in result.note


def test_the_byte_cap_keeps_the_rows_that_fit(small_db: Path) -> None:
    sql = "SELECT repeat('y', 100000) AS s FROM range(100)"  # about 10 MB
    cut = run_console_query(db_version(small_db), sql, max_bytes=1_000_000)
    assert cut.cut_by == "bytes"
    assert 5 <= cut.frame.height < 10
    whole = run_console_query(db_version(small_db), sql, max_bytes=20_000_000)
    assert (whole.truncated, whole.cut_by, whole.frame.height, whole.note) == (
        False,
        None,
        100,
        "",
    )
    rows = run_console_query(db_version(small_db), "SELECT * FROM range(50)", max_rows=10)
    assert (rows.cut_by, rows.frame.height) == ("rows", 10)
    assert rows.note == " (cut off at 10 rows; add a LIMIT or aggregate)"
    assert MAX_ROWS == 100_000


def test_the_sql_page_says_a_wide_result_was_cut_off(
    small_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DB_ENV, str(small_db))
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.query_params["sql"] = "SELECT repeat('x', 1000000) AS s FROM range(300)"
    at.run()
    at.switch_page("sql.py").run()
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    [caption] = [c.value for c in at.caption if "rows" in c.value and "cut off" in c.value]
    assert "cut off after" in caption
    [frame] = [d.value for d in at.dataframe if "s" in d.value.columns]
    assert 0 < len(frame) < 300
