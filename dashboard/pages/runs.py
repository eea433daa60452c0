"""Runs: every run with its tags, model, start, calls, compiles, evictions and peak memory
(the ``run_summary`` view)."""

from __future__ import annotations

import altair as alt
import polars as pl
import streamlit as st

from ember.analysis.escape import md_text
from ember.dashboard import charts, db, state, summary, ui

st.title("Runs")
ui.require_relations("run_summary")

runs = summary.run_summary()
if runs.is_empty():
    st.info("This database has no runs yet. Add traces with `ember ingest TRACES --db DB`.")
    st.stop()
labels = summary.run_labels()
runs = runs.with_columns(
    pl.col("run_id").replace_strict(labels, default=pl.col("run_id")).alias("name")
)

# Filters live in the URL (?model=a,b&phase=train&find=text) so a filtered view can be shared.
f1, f2, f3 = st.columns([2, 1, 2])
models = state.multiselect_param(
    "Model", "model", sorted(runs["model"].drop_nulls().unique().to_list()), where=f1
)
phases = state.multiselect_param(
    "Phase", "phase", sorted(runs["phase"].drop_nulls().unique().to_list()), where=f2
)
text = f3.text_input(
    "Run id or tag contains", value=state.get_param("find") or "", key="ember_runs_q"
)
state.set_param("find", text)

shown = runs
if models:
    shown = shown.filter(pl.col("model").is_in(models))
if phases:
    shown = shown.filter(pl.col("phase").is_in(phases))
if text:
    needle = text.lower()
    shown = shown.filter(
        pl.col("run_id").str.to_lowercase().str.contains(needle, literal=True)
        | pl.col("tags").str.to_lowercase().str.contains(needle, literal=True)
    )

# A load (a program read from the persistent cache) is not a compile: two tiles.
m = st.columns(6)
m[0].metric("Runs", f"{shown.height:,}")
m[1].metric("Calls", f"{int(shown['calls'].sum()):,}")
m[2].metric("Compiles", f"{int(shown['compiles'].sum()):,}")
m[3].metric("Loads", f"{int(shown['loads'].sum()):,}")
m[4].metric("Evictions", f"{int(shown['evictions'].sum()):,}")
m[5].metric("Largest peak memory", ui.fmt_bytes(charts.largest(shown["peak_bytes"])))

ui.table(
    shown,
    column_order=[
        "name",
        "started_at",
        "model",
        "phase",
        "calls",
        "compiles",
        "loads",
        "recompiles",
        "evictions",
        "hit_rate",
        "peak_bytes",
        "peak_source",
        "p50_ms",
        "p99_ms",
        "warm_p50_ms",
        "warm_p99_ms",
        "compiling_calls",
        "latency_kind",
        "compile_ms",
        "eager_compiles",
        "jax_compiles",
        "failed_calls",
        "peak_tensor_bytes",
        "peak_device_bytes",
        "peak_rss_bytes",
        "host",
        "backend",
        "tags",
        "entrypoint",
        "run_id",
        "file",
    ],
    column_config={
        "run_id": st.column_config.TextColumn("run"),
        "started_at": st.column_config.DatetimeColumn("started", format="YYYY-MM-DD HH:mm:ss"),
        "hit_rate": st.column_config.ProgressColumn("hit rate", min_value=0.0, max_value=1.0),
        "peak_bytes": st.column_config.Column("peak memory"),
        "peak_source": st.column_config.TextColumn("peak of"),
        "peak_tensor_bytes": st.column_config.Column("tensors peak"),
        "peak_device_bytes": st.column_config.Column("device peak"),
        "peak_rss_bytes": st.column_config.Column("RSS peak"),
        "p50_ms": st.column_config.Column("p50"),
        "p99_ms": st.column_config.Column("p99"),
        "warm_p50_ms": st.column_config.Column(
            "warm p50", help="over the calls (else steps) that compiled nothing"
        ),
        "warm_p99_ms": st.column_config.Column("warm p99"),
        "compiling_calls": st.column_config.Column("calls that compiled"),
        "latency_kind": st.column_config.TextColumn("latency"),
        "compile_ms": st.column_config.Column("compile"),
    },
    key="ember_runs_table",
)

if shown.height > 1:
    per_run: charts.Labels = {
        "title": "Compiles and evictions per run",
        "x_title": "run",
        "y_title": "count",
    }
    measures = ["compiles", "evictions"]
    chart = charts.measure_bars(shown, "name", measures, keep=["started_at"], **per_run)
    charts.show(chart, key="ember_runs_chart")

run = ui.pick_run()
st.caption(
    f"Selected run: **{md_text(labels.get(run, run))}** ({md_text(run)}; change it in the "
    "sidebar)."
    + (
        " Until you pick one, each page opens on the newest run that has data for it."
        if state.is_default("run")
        else " The other pages show it."
    )
)

# ---- where the selected run's time went (time_by_part), most expensive first
st.subheader("Where the time went")
if not ui.lacks("time_by_part"):
    parts = db.query(
        """
        SELECT rank, part, part_kind, total_ns, share_of_wall, share_of_calls, per_call_ns,
            p50_call_ns, p50_share_of_call, spans, calls_with, reason, host_transfer_ns,
            subgraph_ns, latency_kind
        FROM time_by_part WHERE run_id = ? ORDER BY rank
        """,
        run,
    )
    if parts.is_empty():
        st.caption("This run recorded no calls, compiles, loads or downloads.")
    else:
        if parts["latency_kind"][0] == "dispatch only":
            st.caption(
                "Times in calls are **dispatch only** (this run's spans end when JAX "
                "dispatched the work)."
            )
        ranked = (
            alt.Chart(
                parts.head(15).with_columns(total_ms=pl.col("total_ns") / 1e6),
                title="Time by part, most expensive first",
            )
            .mark_bar()
            .encode(
                x=alt.X("total_ms:Q", title="ms"),
                y=alt.Y("part:N", sort="-x", title=None),
                color=alt.Color("part_kind:N", title="kind"),
                tooltip=[
                    "part",
                    alt.Tooltip("total_ms", format=",.1f"),
                    alt.Tooltip("share_of_wall", format=".0%"),
                    alt.Tooltip("p50_share_of_call", format=".0%"),
                    "spans",
                ],
            )
        )
        charts.show(ranked, key="ember_runs_parts_chart")
        ui.table(parts.drop("latency_kind"), key="ember_runs_parts")
