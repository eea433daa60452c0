"""The dashboard's database access: one connection per page run, a busy database, versions."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from ember.dashboard import db


def test_a_page_run_shares_one_connection_and_closes_it(small_db: Path) -> None:
    version = db.db_version(small_db)
    with db.page_connection(), db._borrow(version) as first, db._borrow(version) as second:
        assert first is second
        assert first.execute("SELECT count(*) FROM runs").fetchone() == (3,)
    with pytest.raises(duckdb.ConnectionException):
        first.execute("SELECT 1")
    # outside a page run each use opens and closes its own
    with db._borrow(version) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone() == (3,)


def test_query_set_aggregates_slices_of_one_connection(small_db: Path, monkeypatch) -> None:
    monkeypatch.setenv(db.DB_ENV, str(small_db))
    got = db.query_set(
        {"s": "SELECT * FROM runs WHERE run_id <> $1"},
        {"n": "SELECT count(*) AS n FROM s", "ids": "SELECT run_id FROM s ORDER BY 1"},
        "r0",
    )
    assert got["n"]["n"].to_list() == [2]
    assert got["ids"]["run_id"].to_list() == ["r1", "r2"]


def test_a_database_being_written_is_reported_as_busy(small_db: Path) -> None:
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb, time; c = duckdb.connect({str(small_db)!r}); "
            "print('open', flush=True); time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout.readline().strip() == "open"
        with pytest.raises(db.DatabaseBusy, match="The database is being updated") as busy:
            db.connect_readonly(db.db_version(small_db), wait_s=0.5)
        assert (busy.value.pid, busy.value.holder) == (str(writer.pid), "writer")
    finally:
        writer.kill()
        writer.wait()
    db.connect_readonly(db.db_version(small_db)).close()  # free again


def test_the_version_changes_when_the_database_is_written(small_db: Path) -> None:
    before = db.db_version(small_db)
    time.sleep(0.01)
    with duckdb.connect(str(small_db)) as con:
        con.execute("INSERT INTO runs SELECT 'r9'")
        con.execute("CHECKPOINT")
    assert db.db_version(small_db) != before
