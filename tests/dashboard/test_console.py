"""The SQL console refuses every statement that could write or reach outside the database."""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl
import pytest

from ember.dashboard.console import ConsoleRefused, check_statement, run_console_query, to_csv
from ember.dashboard.db import db_version, open_readonly


@pytest.fixture
def small_db(tmp_path: Path) -> Path:
    path = tmp_path / "small.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE runs AS SELECT 'run-' || i AS run_id, i AS calls FROM range(3) t(i)")
    con.execute("CREATE VIEW busy_runs AS SELECT run_id FROM runs WHERE calls > 0")
    con.execute(
        "CREATE TABLE nested AS SELECT [1, 2] AS dims, {'name': 'x', 'n': 3} AS arg, 'a,b' AS s"
    )
    con.close()
    return path


def refused(path: Path, sql: str) -> str:
    with pytest.raises(ConsoleRefused) as info:
        run_console_query(db_version(path), sql)
    return str(info.value)


def test_select_over_a_view_returns_its_rows(small_db: Path) -> None:
    result = run_console_query(db_version(small_db), "SELECT * FROM busy_runs ORDER BY run_id")
    assert result.frame["run_id"].to_list() == ["run-1", "run-2"]
    assert not result.truncated


def test_with_and_explain_are_allowed(small_db: Path) -> None:
    v = db_version(small_db)
    got = run_console_query(v, "WITH c AS (SELECT sum(calls) s FROM runs) SELECT s FROM c")
    assert got.frame["s"].to_list() == [3]
    plan = run_console_query(v, "EXPLAIN SELECT * FROM runs")
    assert plan.frame.height >= 1


def test_result_is_cut_at_max_rows(small_db: Path) -> None:
    result = run_console_query(db_version(small_db), "SELECT * FROM range(50)", max_rows=10)
    assert result.frame.height == 10
    assert result.truncated


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("INSERT INTO runs VALUES ('x', 1)", "read-only: INSERT"),
        ("UPDATE runs SET calls = 0", "read-only: UPDATE"),
        ("DELETE FROM runs", "read-only: DELETE"),
        ("DROP TABLE runs", "read-only: DROP"),
        ("CREATE TABLE t2 AS SELECT 1", "read-only: CREATE"),
        ("CREATE TEMP TABLE t2 AS SELECT 1", "read-only: CREATE"),
        ("ALTER TABLE runs ADD COLUMN z INT", "read-only: ALTER"),
        ("ATTACH '/tmp/other.duckdb' AS other", "ATTACH is refused"),
        ("ATTACH ':memory:' AS m", "ATTACH is refused"),
        ("DETACH small", "DETACH is refused"),
        ("COPY runs TO '/tmp/ember-leak.csv'", "COPY is refused"),
        ("COPY (SELECT 1) TO '/tmp/ember-leak.parquet' (FORMAT parquet)", "COPY is refused"),
        ("COPY runs FROM '/etc/passwd'", "COPY is refused"),
        ("EXPORT DATABASE '/tmp/ember-export'", "EXPORT DATABASE is refused"),
        ("INSTALL httpfs", "INSTALL and LOAD are refused"),
        ("LOAD httpfs", "INSTALL and LOAD are refused"),
        ("SET enable_external_access = true", "settings are locked"),
        ("SET lock_configuration = false", "settings are locked"),
        ("RESET enable_external_access", "settings are locked"),
        ("PRAGMA enable_profiling", "PRAGMA is refused"),
        ("CALL duckdb_views()", "CALL is refused"),
        ("BEGIN TRANSACTION", "transactions are refused"),
        ("SELECT 1; SELECT 2", "one statement at a time"),
        ("SELECT 1; DROP TABLE runs", "one statement at a time"),
        ("", "the query is empty"),
        ("SELEC 1", "does not parse"),
    ],
)
def test_forbidden_statements_are_refused_with_a_reason(
    small_db: Path, sql: str, expected: str
) -> None:
    assert expected in refused(small_db, sql)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM read_csv_auto('/etc/hostname')",
        "SELECT * FROM read_text('/etc/hostname')",
        "SELECT * FROM read_json('/etc/hostname')",
        "SELECT * FROM read_parquet('/tmp/x.parquet')",
        "SELECT * FROM glob('/etc/*')",
    ],
)
def test_select_reading_outside_files_is_refused_by_duckdb(small_db: Path, sql: str) -> None:
    # These are SELECTs, so the statement check lets them through: DuckDB's
    # enable_external_access=false must stop them, and the message must say so.
    check_statement(sql)
    assert "reading or writing files is disabled" in refused(small_db, sql)


def test_connection_settings_are_enforced_by_duckdb(small_db: Path) -> None:
    # The second layer on its own: the connection refuses writes and settings even when
    # a statement is sent to it directly, without the console's statement check.
    with open_readonly(db_version(small_db)) as con:
        settings = dict(
            con.execute(
                "SELECT name, value FROM duckdb_settings() "
                "WHERE name IN ('enable_external_access', 'lock_configuration')"
            ).fetchall()
        )
        assert settings == {"enable_external_access": "false", "lock_configuration": "true"}
        for sql, message in [
            ("INSERT INTO runs VALUES ('x', 1)", "read-only"),
            ("SET enable_external_access = true", "locked"),
            ("COPY runs TO '/tmp/ember-leak.csv'", "disabled by configuration"),
            ("ATTACH '/tmp/ember-other.duckdb' AS o", "disabled by configuration"),
            ("LOAD httpfs", "disabled"),
        ]:
            with pytest.raises(duckdb.Error, match=message):
                con.execute(sql)
    assert not Path("/tmp/ember-leak.csv").exists()
    with duckdb.connect(str(small_db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone() == (3,)


def test_csv_keeps_nested_cells_as_json(small_db: Path) -> None:
    frame = run_console_query(db_version(small_db), "SELECT * FROM nested").frame
    text = to_csv(frame)
    header, row = text.strip().splitlines()
    assert header == "dims,arg,s"
    assert row == '"[1, 2]","{""name"": ""x"", ""n"": 3}","a,b"'
    assert to_csv(pl.DataFrame({"a": [1]})) == "a\n1\n"


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT length(repeat('x', 1500000000)) AS n",  # not held by DuckDB's memory_limit
        "SELECT i, repeat('x', 1000000) AS s FROM range(2000) t(i)",  # a 2 GB vector
    ],
)
def test_a_query_over_the_memory_cap_fails_cleanly_and_the_server_keeps_its_memory(
    small_db: Path, sql: str
) -> None:
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
    with pytest.raises(ConsoleRefused, match=r"more than the console's 256 MiB of memory"):
        run_console_query(db_version(small_db), sql, memory_bytes=256 << 20)
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10) - before
    assert grown < 200 << 20  # the query ran in a child process (it built 1.5 GB there)
    # the next query runs as usual
    assert run_console_query(db_version(small_db), "SELECT 42 AS n").frame["n"].to_list() == [42]


def test_a_console_query_runs_with_the_threads_and_memory_limit_it_is_given(
    small_db: Path,
) -> None:
    sql = "SELECT current_setting('threads') AS threads, current_setting('memory_limit') AS memory"
    frame = run_console_query(db_version(small_db), sql, memory_bytes=512 << 20, threads=1).frame
    assert frame.row(0) == (1, "384.0 MiB")  # DuckDB's own cap: 3/4 of the process's
