"""Query results for a terminal: a table that fits the width, one column per line, Markdown.

A table never wraps a value letter by letter: it shows the columns that fit (in the
query's order) and says how many it left out, and cuts long values with an ellipsis,
the way DuckDB's own CLI does. ``--format line`` shows every column of every row in full.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl
from rich.table import Table
from rich.text import Text

from ember.analysis.escape import md_text, terminal_text

__all__ = ["NULL", "FittedTable", "cell", "fit_table", "line_text", "markdown_text"]

NULL = "NULL"
MIN_CELL = 8
"""A column is never cut narrower than this (or its own width, if less)."""


def cell(value: object) -> str:
    """A value as one line of text for a terminal (``NULL`` for a missing one; newlines
    shown as ``↵``, other control characters as their escapes: ``terminal_text``)."""
    if value is None:
        return NULL
    if isinstance(value, pl.Series):
        value = value.to_list()
    return terminal_text(str(value).replace("\r\n", "↵").replace("\n", "↵"))


def _short_float(v: float | None) -> float | str | None:
    if v is None or v != v or v in (float("inf"), float("-inf")):
        return v
    return round(v, 3) if abs(v) >= 1 else f"{v:.4g}"


@dataclass
class FittedTable:
    table: Table
    shown: list[str]
    left_out: list[str]

    def note(self) -> str | None:
        """'15 columns, 7 shown; --format line or csv for all' and the columns left out,
        or None if all fit."""
        if not self.left_out:
            return None
        n = len(self.shown) + len(self.left_out)
        return (
            f"{n} columns, {len(self.shown)} shown; --format line or csv for all\n"
            f"left out: {', '.join(self.left_out)}"
        )


def _frame_width(widths: list[int]) -> int:
    # rich's default box: "│ a │ b │" is one edge plus each column's width and 3 more
    return 1 + sum(w + 3 for w in widths)


def fit_table(df: pl.DataFrame, width: int, title: str | None = None) -> FittedTable:
    """A rich table of ``df`` no wider than ``width`` characters.

    Each column first gets at most a quarter of the width (at least ``MIN_CELL``, at most
    40 characters; floats with 3 decimals, or 4 significant digits below 1); the
    columns that fit that way are shown in order, the rest left out; space that is left
    then goes back to the cut columns, left to right, so a narrow result shows its long
    values in full. Values longer than their column end in an ellipsis.
    """
    texts = {
        c: [cell(_short_float(v) if t.is_float() else v) for v in df[c].to_list()]
        for c, t in df.schema.items()
    }
    natural = {c: max([len(c), *map(len, texts[c])]) for c in df.columns}
    cap = max(MIN_CELL, min(40, width // 4))
    widths: dict[str, int] = {}
    for c in df.columns:
        w = min(natural[c], cap)
        if _frame_width([*widths.values(), w]) > width:
            break
        widths[c] = w
    if not widths and df.columns:  # even one column is too wide: cut it to the width
        first = df.columns[0]
        widths[first] = max(1, min(natural[first], width - 4))
    spare = width - _frame_width(list(widths.values()))
    for c in widths:
        grow = min(spare, natural[c] - widths[c])
        if grow > 0:
            widths[c] += grow
            spare -= grow
    table = Table(title=title, title_justify="left")
    for c, w in widths.items():
        numeric = df.schema[c].is_numeric()
        table.add_column(
            Text(c),
            width=w,
            no_wrap=True,
            overflow="ellipsis",
            justify="right" if numeric else "left",
        )
    for i in range(df.height):
        table.add_row(
            *(Text(texts[c][i], style="dim" if texts[c][i] == NULL else "") for c in widths)
        )
    return FittedTable(table, list(widths), [c for c in df.columns if c not in widths])


def line_text(df: pl.DataFrame) -> str:
    """Every column of every row in full, one ``name = value`` a line, a blank line
    between rows (DuckDB's ``.mode line``)."""
    pad = max((len(c) for c in df.columns), default=0)
    rows = []
    for row in df.iter_rows():
        pairs = zip(df.columns, row, strict=True)
        rows.append("\n".join(f"{c:>{pad}} = {cell(v)}" for c, v in pairs))
    return "\n\n".join(rows) + ("\n" if rows else "")


def markdown_text(df: pl.DataFrame) -> str:
    """A GitHub-flavoured Markdown table: numbers right-aligned, text escaped
    (``escape.md_text``: a value reads as its characters, never as markup or a new cell)."""

    def md(value: object) -> str:
        if isinstance(value, pl.Series):
            value = value.to_list()
        if value is None:
            return NULL
        if isinstance(value, int | float):
            return str(value)  # digits, '.', '-', 'e', 'inf': nothing Markdown reads
        return md_text(value)

    head = "| " + " | ".join(md(c) for c in df.columns) + " |"
    rule = "|" + "|".join("---:" if t.is_numeric() else "---" for t in df.schema.values()) + "|"
    body = ["| " + " | ".join(md(v) for v in row) + " |" for row in df.iter_rows()]
    return "\n".join([head, rule, *body]) + "\n"
