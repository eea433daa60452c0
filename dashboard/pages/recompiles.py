"""Recompiles: when each position compiled, why it compiled again, what a bigger cache or
shape buckets would save; for a torch.compile run, each frame compile and the recompile
limit."""

from __future__ import annotations

import altair as alt
import polars as pl
import streamlit as st

from ember.analysis import format as fmt
from ember.analysis.escape import md_text
from ember.analysis.report.builders import jit_advice
from ember.dashboard import charts, db, summary, ui

st.title("Recompiles")
ui.require_relations("compiles", "recompiles", "recompile_reasons")
run = ui.pick_run(data="compiles", what="compiles")

# This run's compiles and recompiles are sliced once (see db.query_set); the chart and the
# tables of the first sections read those slices, the counts come from views.
OVER_TIME = charts.downsample_sql(
    "(SELECT ts_ns, position, fun_name, compile_index, compile_ns / 1e6 AS compile_ms, "
    "shapes_text, compile_index = 1 AS first FROM c)",
    x="ts_ns",
    values=["compile_index", "compile_ms", "shapes_text", "first"],
    groups=["position", "fun_name"],
)
data = db.query_set(
    {
        "c": "SELECT ts_ns, position, fun_name, compile_index, key, compile_ns, shapes_text "
        "FROM compiles WHERE run_id = $1",
        # JAX's compiles of primitives run outside jit are grouped apart (below the metrics)
        "r": "SELECT * EXCLUDE (changes) FROM recompiles WHERE run_id = $1 AND NOT outside_jit",
    },
    {
        "over_time": f"""
            SELECT ts_ns / 1e9 AS t_s, coalesce(CAST(position AS VARCHAR), fun_name) AS "where",
                compile_index, compile_ms, shapes_text, first
            FROM {OVER_TIME}""",
        "detail": """
            SELECT position, fun_name, compile_index, round(ts_ns / 1e9, 3) AS t_s, reason,
                change, arg, dim, old_value, new_value, after_eviction,
                compile_ns / 1e6 AS compile_ms, shapes_text
            FROM r ORDER BY ts_ns LIMIT 5000""",
    },
    run,
)
headline = summary.run_row(run)

m = st.columns(5)
m[0].metric("Compiles", f"{headline.get('compiles', 0):,}")
m[1].metric("Recompiles", f"{headline.get('recompiles', 0):,}")
m[2].metric("After eviction", f"{headline.get('recompiled_after_eviction', 0):,}")
m[3].metric("Distinct keys", f"{headline.get('compiled_keys', 0):,}")
m[4].metric("Compile time", ui.fmt_ms(headline.get("compile_ms")))
if headline.get("eager_compiles"):
    st.caption(
        f"Not counted above: {headline['eager_compiles']} segments built to run eagerly "
        "(node by node)."
    )
if headline.get("jax_compiles"):
    primitives = db.query(
        "SELECT fun_name, compiles FROM jit_functions WHERE run_id = ? AND internal "
        "ORDER BY compile_ns DESC, fun_name",
        run,
    )
    names = ", ".join(
        md_text(name) + (f" ×{n}" if n > 1 else "") for name, n in primitives.iter_rows()
    )
    st.info(
        f"JAX compiled {headline['jax_primitives']} primitives run outside jit: {names} "
        f"({headline['jax_compiles']} compiles, {fmt.duration(headline['jax_compile_ns'])}); "
        "not counted above. Code that runs jax.numpy op by op compiles each op once per "
        "shape: move it into a jitted function."
    )

if not any(headline.get(k) for k in ("compiles", "eager_compiles", "jax_compiles")):
    st.info(f"Run {md_text(run)} compiled nothing (no segment or jit compiles were recorded).")
    st.stop()

# ---- compiles over time, one row of marks per position (or jitted function)
chart = (
    alt.Chart(data["over_time"], title="Compiles over time per position")
    .mark_point(filled=True, size=80)
    .encode(
        x=alt.X("t_s:Q", title=charts.RUN_TIME),
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
    SELECT change, arg, dim, recompiles, compile_ns / 1e6 AS compile_ms, example
    FROM recompile_reasons WHERE run_id = ? ORDER BY recompiles DESC, change, arg, dim
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
    ui.table(reasons)
    detail = data["detail"]
    with st.expander(f"Every recompile ({detail.height:,} shown)"):
        ui.table(detail)

# ---- what if the cache were bigger
st.subheader("What if the cache were bigger")
if not ui.lacks("cache_what_if"):
    what_if = summary.what_if(run)
    sizes = what_if["what_if"]
    if sizes.is_empty():
        st.caption("No segment cache lookups in this run.")
    else:
        base = alt.Chart(sizes, title="Compiles against cache size, per position")
        lines = base.mark_line(point=True).encode(
            x=alt.X(
                "cache_size:Q",
                title="cache size (segments per position)",
                axis=alt.Axis(tickMinStep=1),
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
        st.caption(
            "The diamond is the size the run used. Smallest cache size per position "
            "that compiles every key only once:"
        )
        ui.table(what_if["advice"])

# ---- shape buckets
st.subheader("Shape buckets")
if not ui.lacks("shape_buckets"):
    buckets = db.query(
        """
        SELECT position, arg, dim, distinct_sizes, sizes, pow2_buckets, pow2_sizes,
            saved_compiles, multiple_of_64_buckets
        FROM shape_buckets WHERE run_id = ? ORDER BY saved_compiles DESC, position, arg, dim
        """,
        run,
    )
    # a jitted function's dimensions (JAX, torch.compile): its recompiles' recorded changes
    jit_buckets = (
        db.query(
            """
            SELECT fun_name, arg, dim, sizes, min_size, max_size, compiles, pow2_sizes,
                saved_compiles, ragged
            FROM jit_shape_buckets WHERE run_id = ?
            ORDER BY saved_compiles DESC, fun_name, arg, dim
            """,
            run,
        )
        if db.has_relation("jit_shape_buckets")
        else None
    )
    if jit_buckets is not None and not jit_buckets.is_empty():
        # the report's sentence, for the function with the most to save
        top = jit_buckets.row(0, named=True)["fun_name"]
        advice = jit_advice(jit_buckets.filter(pl.col("fun_name") == top).to_dicts())
        if advice is not None:
            st.info(f"**{md_text(top)}**: {md_text(advice[0])}")
        ui.table(jit_buckets.drop("min_size", "max_size"))
    if buckets.is_empty():
        if jit_buckets is None or jit_buckets.is_empty():
            st.caption("No input dimension changed between compiles.")
    else:
        best = buckets.row(0, named=True)
        if best["saved_compiles"] > 0:
            st.info(
                f"Padding **{md_text(best['arg'])} dim {best['dim']}** "
                f"(position {best['position']}) "
                f"up to powers of two turns {best['distinct_sizes']} sizes into "
                f"{best['pow2_buckets']} buckets {best['pow2_sizes']}: "
                f"**{best['saved_compiles']} fewer compiles**."
            )
        ui.table(buckets)

# ---- graph breaks
if db.has_relation("breaks"):
    breaks = db.query(
        """
        SELECT position, node, op_type, reason, host_values, runs, errors,
            mean_ns / 1e6 AS mean_ms, total_ns / 1e6 AS total_ms,
            array_to_string(user_stack, ' > ') AS user_stack
        FROM breaks WHERE run_id = ? ORDER BY position
        """,
        run,
    )
    if not breaks.is_empty():
        st.subheader("Graph breaks")
        ui.table(breaks)

# ---- torch.compile: each frame compile (runs imported from TORCH_TRACE logs)
if db.has_relation("torch_compiles"):
    frames = db.query(
        """
        SELECT compile_id, fun_name, outcome, retrace_reason, fx_graph_cache,
            aot_autograd_cache, guard_count, cache_size, compile_ns / 1e6 AS compile_ms,
            dynamo_ns / 1e6 AS dynamo_ms, aot_ns / 1e6 AS aot_ms,
            inductor_ns / 1e6 AS inductor_ms, defined_at
        FROM torch_compiles WHERE run_id = ? ORDER BY ts_ns
        """,
        run,
    )
    if not frames.is_empty():
        st.subheader("torch.compile frames")
        for limited in frames.filter(frames["outcome"].str.starts_with("recompile limit")).rows(
            named=True
        ):
            guard = (limited["retrace_reason"] or "?").removeprefix("guard failed: ")
            st.warning(
                f"**{md_text(limited['fun_name'])}** hit torch's recompile limit: it runs "
                "eagerly from then on (torch's eviction: each new input runs uncompiled). "
                f"The last guard that failed: {md_text(guard)}"
            )
        ui.table(frames)
