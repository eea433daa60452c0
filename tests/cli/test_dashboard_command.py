"""`ember dashboard`: what it checks before serving, and how it starts Streamlit."""

from __future__ import annotations

from pathlib import Path

import duckdb
from typer.testing import CliRunner

from ember.cli.dashboard import streamlit_command
from ember.cli.main import app

runner = CliRunner()


def _run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["dashboard", *args])
    return result.exit_code, " ".join(result.output.split())


def test_missing_database_is_refused_with_what_to_do(tmp_path: Path) -> None:
    code, out = _run("--db", str(tmp_path / "nope.duckdb"))
    assert code == 1
    assert "no such database" in out
    assert "ember ingest TRACES --db" in out


def test_a_file_that_is_not_duckdb_is_refused(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    trace.write_text('{"kind": "meta"}\n')
    code, out = _run("--db", str(trace))
    assert code == 1
    assert "not a DuckDB database or Parquet export" in out


def test_a_duckdb_file_without_runs_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.duckdb"
    duckdb.connect(str(other)).close()
    code, out = _run("--db", str(other))
    assert code == 1
    assert "not an Ember database (it has no `runs` table)" in out


def test_a_folder_without_parquet_is_refused(tmp_path: Path) -> None:
    code, out = _run("--db", str(tmp_path))
    assert code == 1
    assert "a folder without Parquet files" in out


def test_port_out_of_range_is_refused(tmp_path: Path) -> None:
    code, out = _run("--db", str(tmp_path), "--port", "70000")
    assert code == 2
    assert "65535" in out


def test_streamlit_serves_the_app_headless_on_the_given_address() -> None:
    cmd = streamlit_command("127.0.0.1", 8600)
    assert cmd[1:4] == ["-m", "streamlit", "run"]
    assert Path(cmd[4]).name == "app.py"
    assert Path(cmd[4]).parent.name == "pages"
    opts = dict(zip(cmd[5::2], cmd[6::2], strict=True))
    assert opts["--server.address"] == "127.0.0.1"
    assert opts["--server.port"] == "8600"
    assert opts["--server.headless"] == "true"
    assert opts["--browser.gatherUsageStats"] == "false"
