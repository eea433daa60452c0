"""Calls: latency percentiles over time and by input shapes."""

from __future__ import annotations

import altair as alt
import streamlit as st

from ember.analysis.escape import md_text
from ember.dashboard import charts, db, state, summary, ui

st.title("Calls")
ui.require_relations("run_summary", "call_latency", "call_windows")
run = ui.pick_run(data="call_latency", what="calls")

overall = summary.run_row(run)
if not overall.get("calls"):
    st.info(f"Run {md_text(run)} made no model calls.")
    st.stop()

m = st.columns(6)
m[0].metric("Calls", f"{overall['calls']:,}")
m[1].metric("Errors", f"{overall['failed_calls']:,}")
m[2].metric("p50", ui.fmt_ms(overall["p50_ms"]))
m[3].metric("p90", ui.fmt_ms(overall["p90_ms"]))
m[4].metric("p99", ui.fmt_ms(overall["p99_ms"]))
m[5].metric(
    "Warm p50",
    ui.fmt_ms(overall["warm_p50_ms"]),
    help=f"the median of the calls that compiled nothing ({overall['compiling_calls']:,} compiled)",
)
if overall["latency_kind"] == "dispatch only":
    st.caption(
        "Latency is **dispatch only**: this run's call spans end when JAX dispatched the work, "
        "not when the results were ready (recorded with sync off, or by an older Ember)."
    )

# ---- percentiles over time: the run cut into a fixed number of windows (call_windows)
WINDOWS = [10, 25, 50, 100, 200]
DEFAULT_WINDOWS = 50
given = state.get_param("windows")
try:
    asked = int(given) if given else DEFAULT_WINDOWS
except ValueError:  # a hand-edited link: say so and show the default rather than a traceback
    st.warning(
        f"The link's windows={md_text(given)} is not a whole number; "
        f"showing {DEFAULT_WINDOWS} time windows."
    )
    asked = DEFAULT_WINDOWS
windows = st.select_slider(
    "Time windows",
    WINDOWS,
    min(WINDOWS, key=lambda n: abs(n - asked)),
    key="ember_calls_windows",
)
state.set_param("windows", str(windows))
over_time = db.query(
    """
    SELECT t_s, calls, p50_ns / 1e6 AS p50, p90_ns / 1e6 AS p90, p99_ns / 1e6 AS p99
    FROM call_windows WHERE run_id = ? AND windows = ? ORDER BY win
    """,
    run,
    windows,
)
charts.show(
    charts.line(
        over_time.unpivot(
            index=["t_s", "calls"],
            on=["p50", "p90", "p99"],
            variable_name="percentile",
            value_name="ms",
        ),
        x="t_s:Q",
        y="ms:Q",
        color="percentile",
        title="Call latency over time",
        x_title=charts.RUN_TIME,
        y_title="ms",
        points=True,
    ),
    key="ember_calls_over_time",
)

# ---- where each call's time went (call_breakdown), stacked per call
if not ui.lacks("call_breakdown"):
    shown_calls = 500
    parts = db.query(
        """
        SELECT call_index, part, part_kind, ns / 1e6 AS ms, share, call_ns / 1e6 AS call_ms
        FROM call_breakdown WHERE run_id = ? AND call_index <= ?
        ORDER BY call_index, start_ns
        """,
        run,
        shown_calls,
    )
    if not parts.is_empty():
        stacked = (
            alt.Chart(parts, title="Where each call's time went")
            .mark_bar()
            .encode(
                x=alt.X("call_index:O", title="call"),
                y=alt.Y("ms:Q", title="ms", stack="zero"),
                color=alt.Color("part:N", title="part"),
                tooltip=[
                    "call_index",
                    "part",
                    alt.Tooltip("ms", format=",.2f"),
                    alt.Tooltip("share", format=".0%"),
                    alt.Tooltip("call_ms", format=",.2f"),
                ],
            )
            .interactive()
        )
        charts.show(stacked, key="ember_calls_breakdown")
        note = f" (the first {shown_calls} calls)" if overall["calls"] > shown_calls else ""
        st.caption(
            f"Each call's parts{note}: compiled and eager segments, break nodes (their own "
            "time, moving inputs to the host, the subgraph they ran), compiles, and the rest, "
            "Ember's own work. The Runs page ranks them over the whole run."
        )

# ---- by input shapes
st.subheader("By input shapes")
by_shape = db.query(
    """
    SELECT shapes_text AS shapes, calls, errors, compiling_calls,
        p50_ns / 1e6 AS p50_ms, p90_ns / 1e6 AS p90_ms, p99_ns / 1e6 AS p99_ms,
        p50_warm_ns / 1e6 AS p50_warm_ms, first_ns / 1e6 AS first_ms,
        CAST(total_ns AS BIGINT) / 1e6 AS total_ms, source
    FROM call_latency WHERE run_id = ? ORDER BY total_ns DESC, shapes_text
    """,
    run,
)
percentiles = ["p50_ms", "p90_ms", "p99_ms"]
labels: charts.Labels = {"title": "Latency percentiles by input shapes", "y_title": None}
chart = charts.measure_bars(
    by_shape, "shapes", percentiles, what="percentile", value="ms", horizontal=True, **labels
)
charts.show(chart, key="ember_calls_by_shape_chart")
st.caption(
    "`p50_warm` leaves out the calls that compiled a segment; `first` is the first call "
    "with these shapes (it usually compiles)."
)
ui.table(by_shape, key="ember_calls_by_shape")
