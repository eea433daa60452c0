"""Fixtures: traces the real runtime recorded (checked in under tests/data, see its
make_traces.py) and one the real recorder writes per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from ember.analysis import connect, ingest
from tests.analysis.traces import checked_in, record_bus_trace


@pytest.fixture(scope="session")
def sweep_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # the token filter at lengths SWEEP with cache_size=2, run id 'sweep'
    return checked_in("sweep.jsonl", tmp_path_factory.mktemp("sweep"))


@pytest.fixture(scope="session")
def bus_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record_bus_trace(tmp_path_factory.mktemp("bus") / "bus.jsonl", run_id="bus-run")


@pytest.fixture(scope="session")
def views_db(tmp_path_factory: pytest.TempPathFactory, sweep_trace: Path, bus_trace: Path) -> Path:
    db = tmp_path_factory.mktemp("db") / "views.duckdb"
    summary = ingest([sweep_trace, bus_trace], db)
    assert summary.rejected == 0, [f.message for f in summary.files]
    return db


@pytest.fixture
def con(views_db: Path):
    with connect(views_db, read_only=True) as c:
        yield c
