"""Small pieces every page uses: the run picker, number formats, a missing-view notice."""

from __future__ import annotations

import streamlit as st

from ember.analysis.report import mib

from . import db, state, summary

__all__ = ["fmt_bytes", "fmt_ms", "pick_run", "require_relations", "lacks"]


def fmt_bytes(n: float | int | None) -> str:
    """Bytes as the text report writes them (``mib``: ``1.5 MiB``, ``615 MiB``); ``–`` if none."""
    return "–" if n is None else mib(n)


def fmt_ms(ms: float | None) -> str:
    """Milliseconds with a precision that suits their size."""
    if ms is None:
        return "–"
    if ms >= 1000:
        return f"{ms / 1000:,.2f} s"
    return f"{ms:,.2f} ms" if ms < 10 else f"{ms:,.1f} ms"


def pick_run(label: str = "Run", name: str = "run", *, where: object = None) -> str | None:
    """The run selected in the sidebar (``?run=``), newest by default; None if no runs."""
    ids = summary.run_ids()
    if not ids:
        st.info("This database has no runs yet. Add traces with `ember ingest TRACES --db DB`.")
        st.stop()
    return state.select_param(
        label, name, ids, where=where or st.sidebar, labels=summary.run_labels()
    )


def require_relations(*names: str) -> None:
    """Stop the page with a notice when the database lacks one of these tables/views."""
    missing = [n for n in names if not db.has_relation(n)]
    if missing:
        st.info(
            f"This database has no {', '.join(missing)}: it was written by an older "
            "`ember ingest`. Run `ember ingest` on it again to add the views."
        )
        st.stop()


def lacks(name: str) -> bool:
    """True (with a note on the page) when the database has no table/view ``name``, so a
    page section can be skipped instead of failing the whole page."""
    if db.has_relation(name):
        return False
    st.caption(f"This database has no `{name}` view; run `ember ingest` on it again to add it.")
    return True
