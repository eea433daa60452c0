"""Helpers of the dashboard tests: open a page of the app with Streamlit's AppTest and read
what it shows."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from streamlit.testing.v1 import AppTest

APP = Path(__file__).resolve().parents[2] / "dashboard" / "pages" / "app.py"


def open_page(page: str | None = None, **params: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60)
    for name, value in params.items():
        at.query_params[name] = value
    at.run()
    if page:
        at.switch_page(page).run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def table(at: AppTest, *columns: str) -> pd.DataFrame:
    """The first table on the page that has these columns (plain st.dataframe has no key)."""
    for frame in at.dataframe:
        value = frame.value
        if set(columns) <= set(value.columns):
            return value
    raise AssertionError(
        f"no table with columns {columns}: {[list(f.value.columns) for f in at.dataframe]}"
    )


def shown_table(at: AppTest, *columns: str) -> pd.DataFrame:
    """Like ``table``, but the text a person sees in each cell (the formatted values)."""
    from streamlit import dataframe_util

    for frame in at.dataframe:
        if set(columns) <= set(frame.value.columns):
            styler = frame.proto.arrow_data.styler
            assert styler.display_values, f"the table with {columns} is not formatted"
            return dataframe_util.convert_arrow_bytes_to_pandas_df(styler.display_values)
    raise AssertionError(f"no table with columns {columns}")


def texts(elements) -> str:
    return " | ".join(str(e.value) for e in elements)


def as_text(md: str) -> str:
    """Markdown as a reader sees it (escapes resolved, markup dropped), by markdown-it-py."""
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").parse(md)
    return "".join(c.content for t in tokens for c in t.children or () if c.type == "text")
