"""Cache: hit rate, evictions, thrashing positions and what each compile paid back."""

from __future__ import annotations

import altair as alt
import streamlit as st

from ember.analysis.escape import md_text
from ember.dashboard import charts, db, summary, ui

st.title("Cache")
ui.require_relations("cache_positions", "cache_lookups", "evictions")
run = ui.pick_run(data="cache_lookups", what="cache lookups")

per_position = db.query(
    """
    SELECT position, hits, misses, hit_rate, evictions, evicted_then_recompiled, distinct_keys,
        cache_size
    FROM cache_positions WHERE run_id = ? ORDER BY position
    """,
    run,
)
if per_position.is_empty():
    st.info(f"Run {md_text(run)} looked nothing up in the segment cache.")
    st.stop()

headline = summary.run_row(run)
hits, misses, evictions = headline["hits"], headline["misses"], headline["evictions"]
thrash = (
    None
    if ui.lacks("cache_thrash")
    else db.query(
        """
    SELECT position, shapes_text, key, compiles, evictions, wasted_compiles,
        wasted_compile_ns / 1e6 AS wasted_compile_ms, cache_size, keys_at_position
    FROM cache_thrash WHERE run_id = ? ORDER BY wasted_compiles DESC, position, key
    """,
        run,
    )
)
m = st.columns(5)
m[0].metric("Hit rate", ui.fmt_percent(headline["hit_rate"]))
m[1].metric("Hits", f"{hits:,}")
m[2].metric("Misses", f"{misses:,}")
m[3].metric("Evictions", f"{evictions:,}")
m[4].metric(
    "Thrashing positions",
    "–" if thrash is None else f"{thrash['position'].n_unique():,}",
)

positions = per_position.with_columns(per_position["position"].cast(str))
title = "Lookups and evictions per position"
lookups = ["hits", "misses", "evictions"]
chart = charts.measure_bars(positions, "position", lookups, title=title, y_title="count")
charts.show(chart, key="ember_cache_positions_chart")
ui.table(per_position, key="ember_cache_positions")

st.subheader("Thrashing")
if thrash is not None and thrash.is_empty():
    st.success("No key was compiled again after an eviction.")
elif thrash is not None:
    # the worst position, with the smallest size the LRU replay (cache_what_if) says
    # compiles each key once
    worst = db.query(
        """
        SELECT position, wasted, coalesce(fixes, keys_at_position) AS fix
        FROM thrash_positions WHERE run_id = ? ORDER BY wasted DESC, position LIMIT 1
        """,
        run,
    ).row(0, named=True)
    st.warning(
        f"Position {worst['position']} compiled keys again after evicting them "
        f"({worst['wasted']} wasted compiles); a cache of {worst['fix']} per "
        "position would compile each key once (see Recompiles, 'What if the cache were "
        "bigger')."
    )
    ui.table(thrash, key="ember_cache_thrash")

st.subheader("Evictions")
ev = db.query(
    """
    SELECT position, round(ts_ns / 1e9, 3) AS t_s, shapes_text, cache_size,
        hits AS hits_before_eviction, lifetime_ns / 1e6 AS lifetime_ms, recompiled
    FROM evictions WHERE run_id = ? ORDER BY ts_ns LIMIT 5000
    """,
    run,
)
if ev.is_empty():
    st.caption("Nothing was evicted.")
else:
    ui.table(ev, key="ember_cache_evictions")

st.subheader("Compile payback")
if not ui.lacks("compile_payback"):
    payback = db.query(
        """
        SELECT CAST(position AS VARCHAR) AS position, shapes_text, compile_index,
            compile_ns / 1e6 AS compile_ms, reuses,
            compile_ns_per_reuse / 1e6 AS compile_ms_per_reuse, paid_back,
            evicted_ns IS NOT NULL AS evicted
        FROM compile_payback WHERE run_id = ? ORDER BY ts_ns LIMIT 5000
        """,
        run,
    )
    if payback.is_empty():
        st.caption("No segment compiles in this run.")
    else:
        never = payback.filter(~payback["paid_back"])
        st.caption(
            f"{never.height} of {payback.height} compiles were never reused before they "
            "were evicted or the run ended."
        )
        chart = (
            alt.Chart(payback, title="Compile time against reuses, per compile")
            .mark_circle(size=90)
            .encode(
                x=alt.X("reuses:Q", title="calls that reused the segment"),
                y=alt.Y("compile_ms:Q", title="compile (ms)"),
                color=alt.Color("position:N"),
                shape=alt.Shape("evicted:N"),
                tooltip=[
                    "position",
                    "shapes_text",
                    "compile_index",
                    alt.Tooltip("compile_ms", format=",.1f"),
                    "reuses",
                    "evicted",
                ],
            )
            .interactive()
        )
        charts.show(chart, key="ember_cache_payback_chart")
        ui.table(payback, key="ember_cache_payback")
