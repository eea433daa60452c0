"""Trends and their change points: the detector on histories with known steps, the views on
an ingested CI history (analysis/synthetic.write_history), and `ember trends` /
`ember report --since` as a person reads them."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from ember.analysis import connect, ingest
from ember.analysis.synthetic import write_history
from ember.analysis.trends import (
    METRICS,
    change_points,
    describe,
    find_steps,
    series_points,
)
from ember.cli.main import app

runner = CliRunner()
T0 = datetime(2026, 11, 1)


def _points(series: str, metric: str, values: np.ndarray) -> pl.DataFrame:
    n = len(values)
    return pl.DataFrame(
        {
            "series": [series] * n,
            "metric": [metric] * n,
            "run_id": [f"run-{i:04d}" for i in range(n)],
            "started_at": [T0 + timedelta(hours=i) for i in range(n)],
            "value": values.astype(np.float64),
        }
    )


def test_a_recompile_count_that_jumps_at_run_300_is_one_change_at_that_run():
    rng = np.random.default_rng(7)
    # 2 recompiles a run, now and then 3; from run 300 on 5, now and then 4 or 6
    values = np.r_[
        2 + (rng.random(300) < 0.1), 5 + rng.integers(-1, 2, 300) * (rng.random(300) < 0.2)
    ]
    found = change_points(_points("bert", "recompiles", values))
    assert len(found) == 1
    c = found[0]
    assert (c.index, c.run_id, c.before_run_id) == (300, "run-0300", "run-0299")
    assert (c.before, c.after, c.change) == (2.0, 5.0, 3.0)
    assert (c.runs_before, c.runs_after, c.runs) == (300, 300, 600)
    assert c.started_at == T0 + timedelta(hours=300)
    assert c.p_value < 1e-6
    assert c.confidence > 0.999999
    assert c.change_interval is None  # counts: no bootstrap


def test_a_constant_count_that_steps_once_is_certain():
    values = np.r_[np.full(300, 2.0), np.full(300, 5.0)]
    assert find_steps(values, exact=True) == [(300, 0.0, None)]
    assert find_steps(np.full(600, 2.0), exact=True) == []


@pytest.mark.parametrize("seed", range(8))
def test_a_p50_that_varies_by_noise_only_has_no_change_point(seed):
    rng = np.random.default_rng(seed)
    p50 = 400_000 * np.exp(rng.normal(0, 0.2, 600))  # ns, 20 % noise
    busy = rng.random(600) < 0.03  # a busy machine makes a few runs 2-4x slower
    p50[busy] *= rng.uniform(2, 4, busy.sum())
    assert change_points(_points("bert", "warm_p50_ns", p50)) == []


def test_a_p50_that_steps_by_a_quarter_is_found_near_its_run_with_an_interval():
    rng = np.random.default_rng(3)
    p50 = 400_000 * np.exp(rng.normal(0, 0.1, 600))
    p50[400:] *= 1.25
    (c,) = change_points(_points("bert", "warm_p50_ns", p50))
    assert abs(c.index - 400) <= 5
    lo, hi = c.change_interval
    assert 0 < lo < c.change < hi  # the bootstrap interval of the median's change
    assert 0.15 < c.relative < 0.35
    assert "warm p50" in describe(c)
    assert "95 % interval" in describe(c)


def test_short_histories_have_no_change_points():
    assert find_steps(np.r_[np.zeros(4), np.full(4, 9.0)], exact=True) == []


@pytest.fixture(scope="module")
def history_db(tmp_path_factory) -> Path:
    """60 runs of bert-tiny on main whose recompiles jump at run 30 (0-based), 15 runs on
    a feature branch, one run of another model."""
    work = tmp_path_factory.mktemp("history")
    main = {"model": "bert-tiny", "branch": "main"}
    paths = write_history(work / "t", 60, recompile_step_at=30, tags=main)
    feat = {"model": "bert-tiny", "branch": "feat-[x]"}
    paths += write_history(work / "t", 15, tags=feat, run_prefix="feat", seed=5)
    paths += write_history(work / "t", 1, tags={"model": "resnet"}, run_prefix="other")
    db = work / "h.duckdb"
    ingest(paths, db)
    for p in paths:
        p.unlink()
    return db


def test_the_trends_view_orders_each_models_runs(history_db: Path):
    with connect(history_db, read_only=True) as con:
        rows = con.sql(
            "SELECT * FROM trends WHERE metric = 'recompiles' AND series = 'bert-tiny' "
            "ORDER BY run_index"
        )
        assert rows["run_index"].to_list() == list(range(1, 76))
        assert set(rows["runs"].to_list()) == {75}
        assert rows["started_at"].is_sorted()
        assert rows["previous"].to_list()[1:] == rows["value"].to_list()[:-1]
        assert rows["exact"].all()
        assert set(rows["unit"]) == {"count"}
        summary = con.sql("SELECT run_id, recompiles FROM run_summary")
        assert dict(rows.select("run_id", "value").iter_rows()) == {
            r: float(v) for r, v in summary.iter_rows() if r != "00000000-other"
        }
        metrics = con.sql("SELECT DISTINCT metric FROM trend_points")["metric"].to_list()
        assert sorted(metrics) == sorted(METRICS)
        other = con.sql("SELECT series, runs FROM trends WHERE run_id = '00000000-other'")
        assert set(other.iter_rows()) == {("resnet", 1)}


def test_change_points_of_an_ingested_history_by_branch(history_db: Path):
    with connect(history_db, read_only=True) as con:
        points = series_points(con.sql, by="branch", metrics=["recompiles", "warm_p50_ns"])
        assert sorted(set(points["series"])) == ["feat-[x]", "main"]  # resnet has no branch
        found = change_points(points)
        main = series_points(con.sql, tags={"branch": "main"}, metrics=["recompiles"])
    recompiles = [c for c in found if c.metric == "recompiles"]
    assert [(c.series, c.run_id, c.before_run_id, c.before) for c in recompiles] == [
        ("main", "00000030-hist", "00000029-hist", 0.0)
    ]
    assert recompiles[0].after >= 8
    assert set(main["series"]) == {"bert-tiny"}
    assert main.height == 60
    with pytest.raises(ValueError, match="unknown metric p50"):
        series_points(con.sql, metrics=["p50"])


def test_ember_trends_fits_80_columns(history_db: Path):
    result = runner.invoke(
        app, ["trends", "--db", str(history_db), "--by", "branch"], env={"COLUMNS": "80"}
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    text = " ".join(lines)
    assert "main · 60 runs" in text
    assert "recompiles 0 ->" in text
    assert "from run 00000030 (2026" not in text
    assert "from run 00000030" in text
    assert "run 31 of 60" in text
    assert "feat-[x] · 15 runs" in text  # a tag value is text, never markup
    one = runner.invoke(
        app, ["trends", "--db", str(history_db), "--model", "resnet"], env={"COLUMNS": "80"}
    )
    assert "resnet · 1 run," in one.output
    assert "no change: compiles" in one.output


def test_ember_trends_refuses_bad_options(history_db: Path):
    bad_tag = runner.invoke(app, ["trends", "--db", str(history_db), "--tag", "main"])
    assert bad_tag.exit_code == 2
    assert "KEY=VALUE" in bad_tag.output
    bad_metric = runner.invoke(app, ["trends", "--db", str(history_db), "--metric", "p50"])
    assert bad_metric.exit_code == 2
    assert "unknown metric p50" in bad_metric.output
    bad_since = runner.invoke(app, ["report", "--db", str(history_db), "--since", "May"])
    assert bad_since.exit_code == 2
    assert "write a date" in bad_since.output


def test_ember_report_since_mentions_the_change_points_in_range(history_db: Path):
    with connect(history_db, read_only=True) as con:
        step = con.sql("SELECT started_at FROM runs WHERE run_id = '00000030-hist'").item()
    before = (step - timedelta(hours=2)).isoformat()
    result = runner.invoke(
        app, ["report", "--db", str(history_db), "--since", before], env={"COLUMNS": "80"}
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "Change points since" in text
    assert "bert-tiny: recompiles 0 ->" in text
    assert "00000027-hist" not in text  # runs before --since are not reported
    after = (step + timedelta(hours=1)).isoformat()
    later = runner.invoke(app, ["report", "--db", str(history_db), "--since", after])
    assert "No change points since" in later.output


def test_ember_trends_reads_a_lake_as_it_reads_a_database(tmp_path: Path):
    from ember.analysis.lake.ingest import ingest_lake

    paths = write_history(tmp_path / "t", 30, recompile_step_at=15)
    ingest_lake(paths, tmp_path / "lake")
    ingest(paths, tmp_path / "h.duckdb")
    outputs = [
        runner.invoke(app, ["trends", "--db", str(where), "--metric", "recompiles"])
        for where in (tmp_path / "lake", tmp_path / "h.duckdb")
    ]
    assert outputs[0].exit_code == 0, outputs[0].output
    assert outputs[0].output == outputs[1].output
    assert "recompiles 0 -> 14 (+14) from run 00000015" in outputs[0].output


def test_a_run_without_model_or_name_gets_a_label_never_none():
    # torch.compile imports have no model tag and no name: their series read "None"
    rows = pl.DataFrame(
        {
            "run_id": ["a", "b"],
            "started_at": [T0, T0 + timedelta(hours=1)],
            "model": [None, None],
            "name": [None, "torch-log"],
            "tags": ["{}", "{}"],
            "metric": ["recompiles", "recompiles"],
            "value": [1.0, 2.0],
        },
        schema_overrides={"model": pl.String, "name": pl.String},
    )
    points = series_points(lambda _sql: rows)
    assert points["series"].to_list() == ["(no model)", "torch-log"]
