"""Databases for the dashboard tests: traces recorded by the real runtime (see traces.py),
ingested once per session by ``ember.analysis``; a small one for the connection tests."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from ember.analysis.ingest.database import ingest
from tests.dashboard.traces import record_runs


@pytest.fixture(scope="session")
def dashboard_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("dashboard")
    traces = record_runs(folder / "traces")
    db = folder / "ember.duckdb"
    summary = ingest(traces, db)
    bad = [f for f in summary.files if f.status != "ok" or f.rejected]
    assert not bad, f"ingest of the test traces was not clean: {bad}"
    return db


@pytest.fixture
def app_env(dashboard_db: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the app at the test database (what ``ember dashboard --db`` does)."""
    from ember.dashboard.db import DB_ENV

    monkeypatch.setenv(DB_ENV, str(dashboard_db))
    return dashboard_db


@pytest.fixture
def small_db(tmp_path: Path) -> Path:
    """A database with a ``runs`` table of three runs, r0, r1 and r2 (nothing else)."""
    path = tmp_path / "small.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE runs AS SELECT 'r' || i AS run_id FROM range(3) t(i)")
    return path
