"""Compare: two runs side by side (compiles, evictions, latency, peak memory) and what differs."""

from __future__ import annotations

import polars as pl
import streamlit as st

from ember.analysis.escape import md_text
from ember.dashboard import db, gate, state, summary, ui

st.title("Compare runs")
ids = summary.run_ids()
if len(ids) < 2:
    st.info(
        "Comparing needs two runs; this database has "
        f"{len(ids)}. Ingest another trace with `ember ingest`."
    )
    st.stop()

c1, c2 = st.columns(2)
labels = summary.run_labels()
a = state.select_param("Run A", "run", ids, where=c1, labels=labels)
# Run B defaults to the newest other run of the same model (ids are newest first).
models = dict(summary.run_summary().select("run_id", "model").iter_rows())
others = sorted((i for i in ids if i != a), key=lambda i: models.get(i) != models.get(a))
b = state.select_param("Run B", "other", others, where=c2, labels=labels)
# two runs or more (the page stopped otherwise): both selects have a choice
assert a is not None
assert b is not None

runs = summary.run_summary().filter(pl.col("run_id").is_in([a, b]))
row_a = runs.filter(pl.col("run_id") == a).row(0, named=True)
row_b = runs.filter(pl.col("run_id") == b).row(0, named=True)

# (label, column, formatter, lower is better)
MEASURES = [
    ("Calls", "calls", ui.fmt_count, None),
    ("Compiles", "compiles", ui.fmt_count, True),
    ("Evictions", "evictions", ui.fmt_count, True),
    ("Cache hit rate", "hit_rate", ui.fmt_percent, False),
    ("Recompiles", "recompiles", ui.fmt_count, True),
    ("Call p50", "p50_ms", ui.fmt_ms, True),
    ("Compile time", "compile_ms", ui.fmt_ms, True),
    ("Peak memory", "peak_bytes", ui.fmt_bytes, True),
]


def signed(diff: float | None, fmt) -> str:
    """B - A in the measure's unit, with its sign, as the tiles write it: ``+3``,
    ``-19 µs``, ``+1.5 MiB``; a hit rate's change in percentage points (``+25 pp``)."""
    if diff is None:
        return "–"
    if diff == 0:
        return "0"
    sign = "+" if diff > 0 else "-"
    if fmt is ui.fmt_percent:
        return f"{sign}{abs(diff) * 100:.1f} pp"
    return sign + fmt(abs(diff))


# two rows of four tiles: eight in a row cut their labels ("Compile ti…")
for start in range(0, len(MEASURES), 4):
    cols = st.columns(4)
    for col, (label, key, fmt, lower_better) in zip(
        cols, MEASURES[start : start + 4], strict=False
    ):
        va, vb = row_a[key], row_b[key]
        delta = signed(vb - va, fmt) if va is not None and vb is not None and va != vb else None
        col.metric(
            f"{label} (B)",
            fmt(vb) if vb is not None else "–",
            delta,
            delta_color="off"
            if lower_better is None
            else ("inverse" if lower_better else "normal"),
            help=f"{label} of run B; run A: {fmt(va) if va is not None else '–'}",
        )

table = pl.DataFrame(
    {
        "measure": [m[0] for m in MEASURES],
        "run A": [m[2](row_a[m[1]]) if row_a[m[1]] is not None else "–" for m in MEASURES],
        "run B": [m[2](row_b[m[1]]) if row_b[m[1]] is not None else "–" for m in MEASURES],
        "B - A": [
            None if row_a[m[1]] is None or row_b[m[1]] is None else float(row_b[m[1]] - row_a[m[1]])
            for m in MEASURES
        ],
    }
)
# B - A keeps its numbers (sorting sorts by value) and reads in each measure's unit
shown = table.to_pandas().style
for i, m in enumerate(MEASURES):
    shown = shown.format(
        lambda v, f=m[2]: signed(None if v != v else v, f), subset=([i], ["B - A"])
    )
st.dataframe(shown, hide_index=True, width="stretch", key="ember_compare_table")

tags_a, tags_b = row_a["tags"], row_b["tags"]
if tags_a != tags_b:
    st.caption(f"Tags differ. A: {md_text(tags_a)}  B: {md_text(tags_b)}")

st.subheader("Compiles per position")
if not ui.lacks("compiles_by_where"):
    per_position = db.query(
        """
        SELECT coalesce(x."where", y."where") AS "where",
            coalesce(x.compiles, 0) AS compiles_a, coalesce(y.compiles, 0) AS compiles_b,
            compiles_b - compiles_a AS difference
        FROM (SELECT * FROM compiles_by_where WHERE run_id = $1) x
        FULL JOIN (SELECT * FROM compiles_by_where WHERE run_id = $2) y
            ON x."where" IS NOT DISTINCT FROM y."where"
        ORDER BY abs(difference) DESC, "where"
        """,
        a,
        b,
    )
    ui.table(per_position, key="ember_compare_compiles")

st.subheader("Latency by input shapes")
if not ui.lacks("call_latency"):
    latency = db.query(
        """
        SELECT coalesce(x.shapes_text, y.shapes_text) AS shapes,
            x.calls AS calls_a, y.calls AS calls_b,
            x.p50_ns / 1e6 AS p50_ms_a, y.p50_ns / 1e6 AS p50_ms_b,
            (y.p50_ns - x.p50_ns) / 1e6 AS p50_ms_difference,
            x.p99_ns / 1e6 AS p99_ms_a, y.p99_ns / 1e6 AS p99_ms_b
        FROM (SELECT * FROM call_latency WHERE run_id = $1) x
        FULL JOIN (SELECT * FROM call_latency WHERE run_id = $2) y
            ON x.shapes_text = y.shapes_text AND x.source IS NOT DISTINCT FROM y.source
        ORDER BY shapes
        """,
        a,
        b,
    )
    ui.table(latency, key="ember_compare_latency")

gate.render(a, b)
