"""Trends: a series' compiles, recompiles, evictions, graph breaks, warm latency, compile time
and peak memory across its runs, one small chart a metric, the change points marked, each
with a link that opens Compare on the runs before and after it (``analysis/trends.py``)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import cast

import altair as alt
import polars as pl
import streamlit as st

from ember.analysis import format as fmt
from ember.analysis.escape import md_text
from ember.analysis.trends import METRICS, ChangePoint, change_points, describe, series_points
from ember.dashboard import charts, db, state, summary, ui

_COMPARE = Path(__file__).resolve().parent / "compare.py"


@st.cache_data(show_spinner=False, max_entries=32)
def _points(version: db.DbVersion, by: str | None) -> pl.DataFrame:
    """Every series' points, once per database version and series key."""
    return series_points(db.query, by=by)


@st.cache_data(show_spinner=False, max_entries=128)
def _changes(version: db.DbVersion, by: str | None, series: str) -> list[ChangePoint]:
    """One series' change points (only the series shown is tested)."""
    return change_points(_points(version, by).filter(pl.col("series") == series))


def _in_unit(frame: pl.DataFrame, unit: str) -> tuple[pl.DataFrame, str]:
    """``value`` in a unit a person reads on an axis (ms, MiB), and that unit's name."""
    if unit == "ns":
        return frame.with_columns(pl.col("value") / 1e6), "ms"
    if unit == "bytes":
        scaled, name = charts.in_size_unit(frame, "value")
        return scaled.rename({name: "value"}), name
    return frame, "count"


def _levels(rows: pl.DataFrame, found: list[ChangePoint]) -> pl.DataFrame:
    """One row per level between change points: its first and last run's start, its median."""
    edges = [0, *(c.index for c in found), rows.height]
    return pl.DataFrame(
        [
            {
                "from": rows["started_at"][lo],
                "to": rows["started_at"][hi - 1],
                "level": rows["value"][lo:hi].median(),
            }
            for lo, hi in itertools.pairwise(edges)
            if hi > lo
        ],
        schema={"from": pl.Datetime, "to": pl.Datetime, "level": pl.Float64},
    )


def _chart(rows: pl.DataFrame, found: list[ChangePoint], metric: str) -> alt.LayerChart:
    """The metric over time: a point a run (hover: the run; points without a line: half the
    marks to draw), each level a dashed line, each change point a red rule."""
    m = METRICS[metric]
    rows, unit = _in_unit(rows, m.unit)
    title = f"{m.label} ({unit})"
    x = alt.X("started_at:T", title=None)
    runs = (
        alt.Chart(rows)
        .mark_circle(size=14, opacity=0.7)
        .encode(
            x=x,
            y=alt.Y("value:Q", title=unit),
            tooltip=[
                alt.Tooltip("run:N", title="run"),
                alt.Tooltip("started_at:T", title="started", format="%Y-%m-%d %H:%M"),
                alt.Tooltip("value:Q", title=unit, format=",.4~r"),
            ],
        )
    )
    levels = (
        alt.Chart(_levels(rows, found))
        .mark_rule(strokeDash=[6, 3], color="#444", strokeWidth=2)
        .encode(x="from:T", x2="to:T", y="level:Q")
    )
    changes = pl.DataFrame(
        {"started_at": [c.started_at for c in found], "change": [describe(c) for c in found]},
        schema={"started_at": pl.Datetime, "change": pl.String},
    )
    rules = (
        alt.Chart(changes)
        .mark_rule(color="#d62728", strokeWidth=2)
        .encode(x="started_at:T", tooltip=alt.Tooltip("change:N", title="change point"))
    )
    layered = alt.layer(runs, levels, rules, title=title).properties(height=180)
    return cast("alt.LayerChart", layered)


def _links(found: list[ChangePoint]) -> None:
    """A link per change point: Compare with the last run before it (A) and the first at
    the new level (B)."""
    for c in found:
        label = METRICS[c.metric].label
        text = f"{label}: Compare {md_text(c.before_run_id[:8])} → {md_text(c.run_id[:8])}"
        st.page_link(
            _COMPARE,
            label=text,
            icon=":material/compare_arrows:",
            query_params={"run": c.before_run_id, "other": c.run_id},
            help=describe(c),
        )


def main() -> None:
    st.title("Trends")
    ui.require_relations("trend_points")
    keys = ["model", *(k for k in summary.tag_keys() if k != "model")]
    left, right = st.columns(2)
    by = state.select_param(
        "Series by", "by", keys, where=left, help="One series per model, or per value of a tag"
    )
    version, key = db.db_version(), None if by in (None, "model") else by
    points = _points(version, key)
    if points.is_empty():
        st.info("No runs have this tag. Pick another in *Series by*.")
        st.stop()
    sizes = points.group_by("series").agg(pl.col("run_id").n_unique().alias("n"))
    names = sizes.sort(["n", "series"], descending=[True, False])["series"].to_list()
    series = state.select_param("Series", "series", names, where=right)
    rows = points.filter(pl.col("series") == series)
    assert series is not None  # the page stopped when there are none
    mine = _changes(version, key, series)
    labels = summary.run_labels()
    rows = rows.with_columns(run=pl.col("run_id").replace_strict(labels, default=pl.col("run_id")))
    st.caption(
        f"{fmt.count(rows['run_id'].n_unique())} runs, "
        f"{fmt.plural(len(mine), 'change point')} (PELT, each tested as `ember compare` "
        "tests two runs; a red rule marks the first run at a new level, a dashed line each "
        "level). Hover a point for its run."
    )
    metrics = [m for m in METRICS if m in set(rows["metric"].to_list())]
    layers = [
        _chart(
            rows.filter(pl.col("metric") == metric).sort("started_at", "run_id"),
            [c for c in mine if c.metric == metric],
            metric,
        ).properties(width=380)
        for metric in metrics
    ]
    # one chart of eight panels: the browser draws one Vega view, not eight (8.3 -> 0.6-1.2 s
    # a warm render of 1,000 runs under load 18)
    st.altair_chart(alt.concat(*layers, columns=2), key="ember_trends")
    if mine:
        st.subheader("Change points")
        _links(mine)


main()
