"""Memory: the timeline stacked by category (per device), peaks marked, each compiled
segment's static memory, and the device's own readings."""

from __future__ import annotations

import altair as alt
import polars as pl
import streamlit as st

from ember.analysis import format as fmt
from ember.analysis.escape import md_text
from ember.dashboard import charts, db, ui

st.title("Memory")
ui.require_relations("memory_timeline", "peak_memory")
run = ui.pick_run(data="memory_timeline", what="memory records")

peaks = db.query(
    """
    SELECT device, series, CAST(peak_bytes AS BIGINT) AS peak_bytes,
        round(peak_ts_ns / 1e9, 3) AS peak_t_s, span_id,
        map_entries(by_category) AS by_category, samples
    FROM peak_memory WHERE run_id = ? ORDER BY device, series
    """,
    run,
)
if peaks.is_empty():
    st.info(f"Run {md_text(run)} recorded no memory (no alloc/free records, no device readings).")
    st.stop()

devices = sorted(peaks["device"].unique().to_list())
device = (
    st.selectbox("Device", devices, key="ember_memory_device") if len(devices) > 1 else devices[0]
)
here = peaks.filter(pl.col("device") == device)


def _by_category(peak: dict) -> str:
    """'activation 6.0 MiB, weight 1.2 MiB' from the peak's ``by_category`` map."""
    return fmt.breakdown((e["key"], e["value"]) for e in peak["by_category"] or [])


def _peak(series: str) -> dict | None:
    rows = here.filter(pl.col("series") == series)
    return rows.row(0, named=True) if rows.height else None


tensors, used, rss = _peak("tensors"), _peak("used") or _peak("peak"), _peak("rss")
m = st.columns(3)
m[0].metric("Peak of live tensors", ui.fmt_bytes(tensors["peak_bytes"] if tensors else None))
m[1].metric("Peak device memory used", ui.fmt_bytes(used["peak_bytes"] if used else None))
m[2].metric("Peak process RSS", ui.fmt_bytes(rss["peak_bytes"] if rss else None))
if tensors:
    st.caption(
        f"Live tensors peaked at {ui.fmt_bytes(tensors['peak_bytes'])}, "
        f"{fmt.duration(tensors['peak_t_s'] * 1e9)} into the run"
        + (f" (span {tensors['span_id']})" if tensors["span_id"] is not None else "")
        + (f": {parts}" if (parts := _by_category(tensors)) else "")
    )

# ---- tensors by category, sampled on a time grid common to the categories (tensor_samples)
if tensors and db.has_relation("tensor_samples"):
    stacked = db.query(
        """
        SELECT t_s, category, bytes FROM tensor_samples
        WHERE run_id = ? AND device = ? ORDER BY t_s, category
        """,
        run,
        device,
    )
    top = charts.largest(stacked.group_by("t_s").agg(pl.col("bytes").sum())["bytes"])
    title = f"Live tensor bytes by category on {device}"
    area = charts.bytes_over_time(charts.area, stacked, color="category", title=title, top=top)
    peak_rule = (
        alt.Chart(pl.DataFrame({"t_s": [tensors["peak_t_s"]], "peak": ["peak"]}))
        .mark_rule(color="red", strokeDash=[4, 3], size=2)
        .encode(x="t_s:Q", tooltip=["peak", alt.Tooltip("t_s", format=",.3f")])
    )
    charts.show(area + peak_rule, key="ember_memory_stacked")

# ---- device readings (memory_stats, or live arrays and RSS on the CPU), peaks kept
readings = db.query(
    f"""
    SELECT ts_ns / 1e9 AS t_s, series, bytes FROM {
        charts.downsample_sql(
            '''(SELECT series, ts_ns, CAST(bytes AS BIGINT) AS bytes FROM memory_timeline
            WHERE run_id = $1 AND device = $2 AND series <> 'tensors')''',
            x="ts_ns",
            values=["bytes"],
            groups=["series"],
        )
    }
    """,
    run,
    device,
)
if readings.is_empty():
    st.caption("No device memory readings in this run.")
else:
    series = sorted(readings["series"].unique().to_list())
    pick = st.multiselect(
        "Device readings",
        series,
        default=[s for s in series if s != "rss"] or series,
        key="ember_memory_series",
    )
    shown = readings.filter(pl.col("series").is_in(pick))
    title = f"Device memory readings on {device}"
    points = readings.height < 200
    chart = charts.bytes_over_time(charts.line, shown, color="series", title=title, points=points)
    charts.show(chart, key="ember_memory_readings")

# ---- static memory of each compiled segment (memory_analysis of the executable)
st.subheader("Static memory per compiled segment")
if not ui.lacks("segment_memory"):
    static = db.query(
        """
        SELECT position, key, argument_bytes, output_bytes, temp_bytes, code_bytes,
            compile_ns / 1e6 AS compile_ms
        FROM segment_memory WHERE run_id = ?
        ORDER BY start_ns LIMIT 5000
        """,
        run,
    )
    if static.is_empty():
        st.caption("No compiled segment reported its memory in this run.")
    else:
        ui.table(static, key="ember_memory_static")

with st.expander("Peaks per series"):
    ui.table(
        here.with_columns(
            pl.Series(
                "by_category", [_by_category(r) for r in here.iter_rows(named=True)], pl.String
            )
        ),
        key="ember_memory_peaks",
    )
