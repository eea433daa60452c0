"""A run id or a unique start of it, the same everywhere a run is taken."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ember.analysis import connect, resolve_run
from ember.analysis.runs import matching, pick_run
from ember.cli.main import app

RUNS = [
    ("e57e161d9a", "growing-sequence"),
    ("e57e99aa00", "disk-cache-cold"),
    ("7bd0c2ff11", None),
]


def test_an_exact_id_or_a_unique_start_names_one_run():
    ids = [r for r, _ in RUNS]
    assert matching("7bd0c2ff11", ids) == ["7bd0c2ff11"]
    assert matching("7b", ids) == ["7bd0c2ff11"]
    assert matching("e57e", ids) == ["e57e161d9a", "e57e99aa00"]
    assert matching("zz", ids) == []
    assert matching("e57e", ["e57e", "e57e161d9a"]) == ["e57e"]  # an exact id wins
    assert pick_run("e57e1", RUNS) == "e57e161d9a"


def test_an_ambiguous_start_lists_the_matches_and_an_unknown_one_the_runs():
    with pytest.raises(ValueError, match="is ambiguous") as ambiguous:
        pick_run("e57e", RUNS, what="?run=")
    assert str(ambiguous.value) == (
        "?run= 'e57e' is ambiguous: it starts 2 run ids: e57e161d (growing-sequence), "
        "e57e99aa (disk-cache-cold); give more characters of the run id"
    )
    with pytest.raises(LookupError, match=r"no run 'x' .*runs: e57e161d, e57e99aa, 7bd0c2ff"):
        pick_run("x", RUNS)


def test_the_python_api_and_export_take_a_start(views_db, tmp_path):
    with connect(views_db, read_only=True) as con:
        assert resolve_run(con, "swe") == "sweep"
        assert resolve_run(con, "bus-run") == "bus-run"
        sql = "SELECT count(*) AS n FROM recompiles WHERE run_id = ?"
        rows = con.sql(sql, [resolve_run(con, "sw")])
        assert rows["n"][0] > 0
    out = tmp_path / "t.json"
    r = CliRunner().invoke(
        app, ["export", "--db", str(views_db), "--chrome", str(out), "--run", "swe"]
    )
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["otherData"]["run_id"] == "sweep"
