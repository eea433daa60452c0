"""SQL-side downsampling keeps charts small and their peaks intact."""

from __future__ import annotations

import duckdb

from ember.dashboard.charts import downsample_sql


def test_long_series_are_reduced_and_keep_their_peaks() -> None:
    con = duckdb.connect()
    source = "(SELECT i AS t, (i * 7919) % 1000 AS v, i % 3 AS g FROM range(200000) r(i))"
    out = con.sql(
        f"SELECT * FROM {downsample_sql(source, x='t', values=['v'], groups=['g'], max_points=100)}"
    ).pl()
    per_group = out.group_by("g").len()
    assert per_group["len"].max() <= 101
    assert set(per_group["g"]) == {0, 1, 2}
    assert out["v"].max() == 999  # the maximum survives bucketing
    assert out.sort("g", "t").equals(out)


def test_short_series_and_null_groups_pass_through_unchanged() -> None:
    con = duckdb.connect()
    source = (
        "(SELECT * FROM (VALUES (1, 5, NULL), (2, 7, NULL), (3, 1, 'f'), (4, 2, 'f')) v(t, y, fun))"
    )
    out = con.sql(
        f"SELECT * FROM {downsample_sql(source, x='t', values=['y'], groups=['fun'])}"
    ).pl()
    assert sorted(out.rows(), key=str) == sorted(
        [(None, 1, 5), (None, 2, 7), ("f", 3, 1), ("f", 4, 2)], key=str
    )
