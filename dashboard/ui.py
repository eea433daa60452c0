"""Small pieces every page uses: the run picker, number formats, tables, a missing-view notice."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import polars as pl
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from ember.analysis import format as fmt
from ember.analysis.escape import md_text

from . import db, state, summary

__all__ = [
    "fmt_bytes",
    "fmt_count",
    "fmt_ms",
    "fmt_percent",
    "lacks",
    "pick_run",
    "require_relations",
    "styled",
    "table",
]


def fmt_bytes(n: float | int | None) -> str:
    """Bytes as the text report writes them (``1.5 MiB``, ``615 MiB``); ``–`` if none."""
    return fmt.size(n)


def fmt_ms(ms: float | None) -> str:
    """Milliseconds as the text report writes durations (``4.5 ms``, ``1.1 s``)."""
    return fmt.duration_ms(ms)


def fmt_percent(fraction: float | None) -> str:
    """A fraction as a rounded percentage (``87%``)."""
    return fmt.percent(fraction)


def fmt_count(n: int | None) -> str:
    """A count with thousands separators (``1,234``)."""
    return fmt.count(n)


MAX_STYLED_CELLS = 100_000
"""A table with more cells than this shows its raw numbers (a Styler formats cell by cell)."""

# Columns are formatted by their name: the unit is its last word (or the word before
# a qualifier, as in p50_ms_a or compile_ms_per_reuse).
_FORMATS: list[tuple[re.Pattern[str], Callable[[float | None], str]]] = [
    (re.compile(r"(^|_)ms(_|$)"), fmt.duration_ms),
    (re.compile(r"(^|_)ns(_|$)"), fmt.duration),
    (re.compile(r"(^|_)bytes(_|$)"), fmt.size),
    (re.compile(r"(^|_)(rate|share|fraction)(_|$)"), fmt.percent),
]


def _formatter(name: str, dtype: pl.DataType) -> Callable[[float | None], str] | None:
    if not dtype.is_numeric():
        return None
    for pattern, f in _FORMATS:
        if pattern.search(name):
            return f
    return fmt.number


def styled(frame: pl.DataFrame) -> object:
    """``frame`` as a pandas Styler whose durations, bytes and rates read like the report's
    (``1.1 s``, ``6.0 MiB``, ``87%``), chosen by column name (``*_ms``, ``*_ns``,
    ``*_bytes``, ``*_rate``), other numbers as ``fmt.number``; the values stay numbers,
    so sorting a column still sorts by value. A frame without numbers, or with more than
    ``MAX_STYLED_CELLS`` cells, is returned as it is."""
    formats = {c: f for c, t in frame.schema.items() if (f := _formatter(c, t)) is not None}
    if frame.height * frame.width > MAX_STYLED_CELLS:
        return frame  # pandas' Styler refuses big frames (and formats cell by cell)
    if not formats:
        return frame  # nothing to format: Streamlit shows text, dates and lists well
    return frame.to_pandas().style.format(formats, na_rep=fmt.MISSING)


def table(frame: pl.DataFrame, **kwargs: Any) -> None:
    """``st.dataframe`` of ``frame`` with readable numbers (``styled``), full width, no index."""
    kwargs.setdefault("hide_index", True)
    kwargs.setdefault("width", "stretch")
    st.dataframe(styled(frame), **kwargs)


def pick_run(
    label: str = "Run",
    name: str = "run",
    *,
    where: DeltaGenerator | None = None,
    data: str | None = None,
    what: str | None = None,
) -> str:
    """The run selected in the sidebar (``?run=``); with no runs, the page stops with a note.

    ``data`` names the view a page shows (``memory_timeline``): then the picker marks the
    runs without rows there ("(no memory records)", ``what`` says what they lack), and
    until a link or a person picks a run, the page opens on the newest run that has rows,
    with a note when newer runs have none. Without ``data``: the newest run.
    """
    ids = summary.run_ids()
    if not ids:
        st.info("This database has no runs yet. Add traces with `ember ingest TRACES --db DB`.")
        st.stop()
    names = summary.run_labels()
    labels, have = names, None
    if data is not None and db.has_relation(data):
        have = set(db.query(f"SELECT DISTINCT run_id FROM {data}")["run_id"].to_list())
        labels = {r: n if r in have else f"{n} (no {what or data})" for r, n in names.items()}
    run = state.select_param(
        label, name, ids, where=where or st.sidebar, labels=labels, prefer=have
    )
    assert run is not None  # ids is not empty
    if have and run in have and run != ids[0] and state.is_default(name):
        newer = [md_text(names.get(r, r)) for r in ids[: ids.index(run)]]  # none in ``have``
        st.caption(
            f":material/info: Showing **{md_text(names.get(run, run))}**, the newest run with "
            f"{what or data}; {len(newer)} newer run(s) have none ({'; '.join(newer)}). "
            "Pick a run in the sidebar."
        )
    return run


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
