"""Altair charts of the pages (zoomable, with tooltips) and SQL-side downsampling.

Charts never receive more than ``MAX_POINTS`` rows per series: long series are reduced
in DuckDB by ``downsample_sql`` before they reach Python, keeping each bucket's maximum
so peaks survive the reduction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict, cast

import altair as alt
import polars as pl
import streamlit as st
from typing_extensions import Unpack

from ember.analysis import format as fmt

__all__ = [
    "MAX_POINTS",
    "RUN_TIME",
    "area",
    "bars",
    "bytes_over_time",
    "downsample_sql",
    "in_size_unit",
    "line",
    "measure_bars",
    "scatter",
    "show",
]

MAX_POINTS = 1500
"""Points per series a chart gets at most (about one per screen pixel)."""


def downsample_sql(
    source: str,
    *,
    x: str,
    values: Sequence[str],
    groups: Sequence[str] = (),
    max_points: int = MAX_POINTS,
) -> str:
    """A subquery that reduces ``source`` (a relation or subquery) to at most ``max_points`` rows
    per group: rows are bucketed on numeric ``x``; each bucket keeps its first ``x`` and
    the maximum of every column in ``values``. Short series pass through unchanged.
    """
    g = ", ".join(groups)
    g_sel = f"{g}, " if g else ""
    # groups may hold NULLs (a segment has no fun_name): join with IS NOT DISTINCT FROM
    on = " AND ".join(f"src.{c} IS NOT DISTINCT FROM span.{c}" for c in groups) or "TRUE"
    part = "PARTITION BY " + ", ".join(f"src.{c}" for c in groups) if groups else ""
    src_g = "".join(f"src.{c}, " for c in groups)
    maxes = ", ".join(f"max({v}) AS {v}" for v in values)
    return f"""(
        WITH src AS (SELECT * FROM {source}),
        span AS (
            SELECT {g_sel}min({x}) AS lo, max({x}) AS hi, count(*) AS n
            FROM src {"GROUP BY " + g if g else ""}
        ),
        bucketed AS (
            SELECT {src_g}src.{x}, {", ".join(f"src.{v}" for v in values)}, CASE
                WHEN span.n <= {max_points} THEN row_number() OVER ({part} ORDER BY src.{x})
                ELSE floor((src.{x} - span.lo) * {max_points} / greatest(span.hi - span.lo, 1))
                END AS bucket
            FROM src JOIN span ON {on}
        )
        SELECT {g_sel}min({x}) AS {x}, {maxes}
        FROM bucketed GROUP BY {g_sel}bucket ORDER BY {g_sel}{x}
    )"""


def in_size_unit(
    frame: pl.DataFrame, column: str, top: float | None = None
) -> tuple[pl.DataFrame, str]:
    """``frame`` with byte counts in ``column`` scaled to the unit of ``top`` (default: the
    column's largest value) and renamed to that unit (``MiB``), so a chart's axis and
    tooltips read ``1.5`` under ``MiB`` instead of ``1,572,864``; returns the unit too."""
    unit, factor = fmt.size_unit(top if top is not None else largest(frame[column]))
    return frame.with_columns((pl.col(column) / factor).alias(column)).rename({column: unit}), unit


RUN_TIME = "seconds since the run started"
"""The x title of a chart over ``t_s``, the run's own clock."""


def bytes_over_time(
    mark: Any,
    frame: pl.DataFrame,
    *,
    color: str,
    title: str,
    top: float | None = None,
    **options: Any,
) -> alt.Chart:
    """``mark`` (``line``, ``area``) of a frame's ``bytes`` against ``t_s``, one series per
    ``color``, in the size unit of ``top`` (default: the largest value)."""
    scaled, unit = in_size_unit(frame, "bytes", top)
    return mark(
        scaled,
        x="t_s:Q",
        y=f"{unit}:Q",
        color=color,
        title=title,
        x_title=RUN_TIME,
        y_title=unit,
        **options,
    )


def largest(values: pl.Series) -> float | None:
    """The largest value of a numeric column (bytes, ns), None when it has none."""
    top = values.max()
    return None if top is None else float(cast("float", top))


def _tooltip(frame: pl.DataFrame, fields: Sequence[str] | None) -> list[alt.Tooltip | str]:
    names = fields or frame.columns
    return [alt.Tooltip(n, format=",") if frame[n].dtype.is_numeric() else n for n in names]


class Labels(TypedDict, total=False):
    """What every chart here takes besides its data: a title, the axes' titles, and the
    fields its tooltip shows (default: every column)."""

    title: str
    x_title: str | None
    y_title: str | None
    tooltip: Sequence[str] | None


class _Axes(TypedDict):
    x: str
    y: str


class Spec(_Axes, Labels, total=False):
    """A chart's fields, in Altair's shorthand (``t_s:Q``): ``x``, ``y`` and ``color`` (a
    colour per group; None: one colour), and its ``Labels``."""

    color: str | None


def _chart(frame: pl.DataFrame, spec: Spec, **y_options: Any) -> tuple[alt.Chart, dict[str, Any]]:
    """The chart and the encodings every chart here has: x, y, the tooltip, a colour per
    ``color`` group."""
    enc = {
        "x": alt.X(spec["x"], title=spec.get("x_title")),
        "y": alt.Y(spec["y"], title=spec.get("y_title"), **y_options),
        "tooltip": _tooltip(frame, spec.get("tooltip")),
    }
    if color := spec.get("color"):
        enc["color"] = alt.Color(f"{color}:N")
    return alt.Chart(frame, title=spec.get("title", "")), enc


def line(frame: pl.DataFrame, *, points: bool = False, **spec: Unpack[Spec]) -> alt.Chart:
    """A line per ``color`` group, zoomable on x."""
    chart, enc = _chart(frame, spec)
    return (
        chart.mark_line(point=points, interpolate="step-after")
        .encode(**enc)
        .interactive(bind_y=False)
    )


def area(frame: pl.DataFrame, **spec: Unpack[Spec]) -> alt.Chart:
    """Areas stacked by ``color`` (e.g. memory by category), zoomable on x."""
    chart, enc = _chart(frame, spec, stack="zero")
    return (
        chart.mark_area(interpolate="step-after", opacity=0.8)
        .encode(**enc)
        .interactive(bind_y=False)
    )


def bars(frame: pl.DataFrame, *, horizontal: bool = False, **spec: Unpack[Spec]) -> alt.Chart:
    """Bars, side by side per ``color`` group, zoomable."""
    chart, enc = _chart(frame, spec)
    if color := spec.get("color"):
        # side by side, not stacked: the groups are different measures
        if horizontal:
            enc["yOffset"] = alt.YOffset(f"{color}:N")
        else:
            enc["xOffset"] = alt.XOffset(f"{color}:N")
    return chart.mark_bar().encode(**enc).interactive()


def measure_bars(
    frame: pl.DataFrame,
    category: str,
    measures: Sequence[str],
    *,
    keep: Sequence[str] = (),
    what: str = "what",
    value: str = "value",
    horizontal: bool = False,
    **labels: Unpack[Labels],
) -> alt.Chart:
    """Bars of the columns ``measures`` per ``category``, side by side, a colour per measure
    (named in column ``what``, its number in ``value``); ``keep``: more columns for the tooltip."""
    index = [category, *keep]
    long = frame.select(*index, *measures).unpivot(
        index=index, on=list(measures), variable_name=what, value_name=value
    )
    along, across = f"{category}:N", f"{value}:Q"
    x, y = (across, along) if horizontal else (along, across)
    return bars(long, x=x, y=y, color=what, horizontal=horizontal, **labels)


def scatter(frame: pl.DataFrame, **spec: Unpack[Spec]) -> alt.Chart:
    """Points (one per event), zoomable."""
    chart, enc = _chart(frame, spec)
    return chart.mark_circle(size=60).encode(**enc).interactive()


def show(chart: alt.Chart | alt.LayerChart, *, key: str) -> None:
    """Render a chart across the page's width."""
    st.altair_chart(chart, width="stretch", key=key)
