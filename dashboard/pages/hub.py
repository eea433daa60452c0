"""Hub: the files a run took from the Hugging Face Hub, hits against downloads, how the
cache was checked, and when Ember fell back to its saved metadata."""

from __future__ import annotations

import polars as pl
import streamlit as st

from ember.analysis.escape import md_text
from ember.dashboard import charts, db, ui

st.title("Hub")
ui.require_relations("hub_files", "hub_checks", "hub_totals")
run = ui.pick_run(data="hub_files", what="Hub files")

files = db.query(
    """
    SELECT repo, path, what, revision, hits, downloads, failures, info_fetched, info_saved,
        bytes, round(download_ns / 1e6, 1) AS download_ms,
        array_to_string(checks, ', ') AS checks, source
    FROM hub_files WHERE run_id = ? ORDER BY what, repo, path
    """,
    run,
)
if files.is_empty():
    st.info(f"Run {md_text(run)} used nothing from the Hub.")
    st.stop()

only_files = files.filter(pl.col("what") == "file")
info = files.filter(pl.col("what") == "repo_info")
totals = db.query(
    "SELECT files, bytes, hits, downloads, info_saved, failures FROM hub_totals WHERE run_id = ?",
    run,
).row(0, named=True)
m = st.columns(5)
m[0].metric("Files", f"{totals['files']:,}")
m[1].metric("Bytes", ui.fmt_bytes(totals["bytes"]))
m[2].metric("Cache hits", f"{totals['hits']:,}")
m[3].metric("Downloads", f"{totals['downloads']:,}")
m[4].metric("Saved-metadata fallbacks", f"{totals['info_saved']:,}")

if totals["info_saved"]:
    st.warning(
        "The Hub could not be reached (or answered with an error) for "
        f"{totals['info_saved']} metadata request(s): Ember used its saved copy. "
        "Files may be older than the Hub's current revision."
    )
failures = totals["failures"]
if failures:
    st.error(f"{failures} Hub request(s) failed in this run.")

if only_files.height:
    labels: charts.Labels = {
        "title": "Hits against downloads per file",
        "x_title": "times",
        "y_title": None,
    }
    measures = ["hits", "downloads"]
    chart = charts.measure_bars(only_files, "path", measures, horizontal=True, **labels)
    charts.show(chart, key="ember_hub_chart")

checks = db.query(
    """
    SELECT "check", hits, bytes FROM hub_checks WHERE run_id = ? ORDER BY hits DESC, "check"
    """,
    run,
)
c1, c2 = st.columns([1, 2])
with c1:
    st.subheader("Check kinds")
    st.caption("How each cache hit was found current: etag, hash, none, offline.")
    ui.table(checks, key="ember_hub_checks")
with c2:
    st.subheader("Repository metadata")
    ui.table(
        info.select("repo", "revision", "info_fetched", "info_saved", "failures"),
        key="ember_hub_info",
    )

st.subheader("Files")
ui.table(only_files.drop("what", "info_fetched", "info_saved"), key="ember_hub_files")
