"""Recompiles: when each position compiled, why it compiled again, what a bigger cache or
shape buckets would save."""

from __future__ import annotations

import altair as alt
import polars as pl
import streamlit as st

from ember.dashboard import charts, db, ui

st.title("Recompiles")
ui.require_relations("compiles", "recompiles")
run = ui.pick_run()

totals = db.query(
    """
    SELECT count(*) AS compiles,
        count(*) FILTER (WHERE compile_index > 1) AS recompiles,
        count(DISTINCT key) AS distinct_keys,
        coalesce(sum(compile_ns), 0) / 1e6 AS compile_ms
    FROM compiles WHERE run_id = ?
    """,
    run,
).row(0, named=True)
after_eviction = db.query(
    "SELECT count(*) AS n FROM recompiles WHERE run_id = ? AND after_eviction", run
)["n"][0]

m = st.columns(5)
m[0].metric("Compiles", f"{totals['compiles']:,}")
m[1].metric("Recompiles", f"{totals['recompiles']:,}")
m[2].metric("After eviction", f"{after_eviction:,}")
m[3].metric("Distinct keys", f"{totals['distinct_keys']:,}")
m[4].metric("Compile time", ui.fmt_ms(totals["compile_ms"]))

if totals["compiles"] == 0:
    st.info(f"Run {run} compiled nothing (no segment or jit compiles were recorded).")
    st.stop()

# ---- compiles over time, one row of marks per position (or jitted function)
over_time = db.query(
    f"""
    SELECT ts_ns / 1e9 AS t_s, coalesce(CAST(position AS VARCHAR), fun_name) AS "where",
        compile_index, compile_ms, shapes_text, first
    FROM {
        charts.downsample_sql(
            '''(SELECT ts_ns, position, fun_name, compile_index, compile_ns / 1e6 AS compile_ms,
                shapes_text, compile_index = 1 AS first
            FROM compiles WHERE run_id = $run)''',
            x="ts_ns",
            values=["compile_index", "compile_ms", "shapes_text", "first"],
            groups=["position", "fun_name"],
        )
    }
    """.replace("$run", "?"),
    run,
)
chart = (
    alt.Chart(over_time, title="Compiles over time per position")
    .mark_point(filled=True, size=80)
    .encode(
        x=alt.X("t_s:Q", title="seconds since the run started"),
        y=alt.Y("where:N", title="position"),
        color=alt.Color("first:N", title="first compile"),
        shape=alt.Shape("first:N", legend=None),
        tooltip=[
            "where",
            "compile_index",
            alt.Tooltip("compile_ms", format=",.1f"),
            "shapes_text",
            alt.Tooltip("t_s", format=",.3f"),
        ],
    )
    .interactive()
)
charts.show(chart, key="ember_recompiles_timeline")

# ---- why: the part of the key that changed
st.subheader("Why it compiled again")
reasons = db.query(
    """
    SELECT change, arg, dim, count(*) AS recompiles,
        coalesce(sum(compile_ns), 0) / 1e6 AS compile_ms,
        min(reason) AS example
    FROM recompiles WHERE run_id = ?
    GROUP BY ALL ORDER BY recompiles DESC, change, arg, dim
    """,
    run,
)
if reasons.is_empty():
    st.success("Nothing compiled twice at the same position.")
else:
    charts.show(
        charts.bars(
            reasons.with_columns(what=reasons["change"] + " " + reasons["arg"].fill_null("")),
            x="recompiles:Q",
            y="what:N",
            title="Recompiles by the part of the key that changed",
            y_title=None,
            horizontal=True,
        ),
        key="ember_recompiles_reasons_chart",
    )
    st.dataframe(reasons, hide_index=True, width="stretch", key="ember_recompiles_reasons")
    detail = db.query(
        """
        SELECT position, fun_name, compile_index, round(ts_ns / 1e9, 3) AS t_s, reason,
            change, arg, dim, old_value, new_value, after_eviction,
            compile_ns / 1e6 AS compile_ms, shapes_text
        FROM recompiles WHERE run_id = ? ORDER BY ts_ns LIMIT 5000
        """,
        run,
    )
    with st.expander(f"Every recompile ({detail.height:,} shown)"):
        st.dataframe(detail, hide_index=True, width="stretch", key="ember_recompiles_detail")

# ---- what if the cache were bigger
st.subheader("What if the cache were bigger")
what_if = (
    pl.DataFrame()
    if ui.lacks("cache_what_if")
    else db.query(
        """
    SELECT CAST(position AS VARCHAR) AS position, cache_size, compiles, recompiles,
        actual_cache_size, actual_compiles, is_actual, fixes_thrash, distinct_keys
    FROM cache_what_if WHERE run_id = ? ORDER BY position, cache_size
    """,
        run,
    )
)
if what_if is not None and what_if.is_empty():
    st.caption("No segment cache lookups in this run.")
elif what_if is not None:
    base = alt.Chart(what_if, title="Compiles against cache size, per position")
    lines = base.mark_line(point=True).encode(
        x=alt.X(
            "cache_size:Q", title="cache size (segments per position)", axis=alt.Axis(tickMinStep=1)
        ),
        y=alt.Y("compiles:Q", title="compiles"),
        color=alt.Color("position:N"),
        tooltip=["position", "cache_size", "compiles", "recompiles", "fixes_thrash"],
    )
    actual = (
        base.transform_filter("datum.is_actual")
        .mark_point(size=220, shape="diamond", filled=False, strokeWidth=2)
        .encode(
            x="cache_size:Q",
            y="compiles:Q",
            color=alt.Color("position:N"),
            tooltip=["position", "cache_size", "compiles"],
        )
    )
    charts.show((lines + actual).interactive(), key="ember_recompiles_what_if")
    advice = db.query(
        """
        SELECT CAST(position AS VARCHAR) AS position,
            any_value(actual_cache_size) AS cache_size_used,
            any_value(actual_compiles) AS compiles_recorded,
            min(cache_size) FILTER (WHERE fixes_thrash) AS smallest_size_without_recompiles,
            any_value(distinct_keys) AS compiles_at_that_size
        FROM cache_what_if WHERE run_id = ? GROUP BY position ORDER BY position
        """,
        run,
    )
    st.caption(
        "The diamond is the size the run used. Smallest cache size per position "
        "that compiles every key only once:"
    )
    st.dataframe(advice, hide_index=True, width="stretch", key="ember_recompiles_advice")

# ---- shape buckets
st.subheader("Shape buckets")
buckets = (
    pl.DataFrame()
    if ui.lacks("shape_buckets")
    else db.query(
        """
    SELECT position, arg, dim, distinct_sizes, sizes, pow2_buckets, pow2_sizes,
        saved_compiles, multiple_of_64_buckets
    FROM shape_buckets WHERE run_id = ? ORDER BY saved_compiles DESC, position, arg, dim
    """,
        run,
    )
)
if buckets.is_empty():
    st.caption("No input dimension changed between compiles.")
else:
    best = buckets.row(0, named=True)
    if best["saved_compiles"] > 0:
        st.info(
            f"Padding **{best['arg']} dim {best['dim']}** (position {best['position']}) up to "
            f"powers of two turns {best['distinct_sizes']} sizes into {best['pow2_buckets']} "
            f"buckets {best['pow2_sizes']}: **{best['saved_compiles']} fewer compiles**."
        )
    st.dataframe(buckets, hide_index=True, width="stretch", key="ember_recompiles_buckets")

# ---- graph breaks
breaks = (
    pl.DataFrame()
    if ui.lacks("breaks")
    else db.query(
        """
    SELECT position, node, op_type, reason, host_values, runs, errors,
        mean_ns / 1e6 AS mean_ms, total_ns / 1e6 AS total_ms
    FROM breaks WHERE run_id = ? ORDER BY position
    """,
        run,
    )
)
if not breaks.is_empty():
    st.subheader("Graph breaks")
    st.dataframe(breaks, hide_index=True, width="stretch", key="ember_recompiles_breaks")
