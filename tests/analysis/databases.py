"""The databases tests build from their traces, and the rows they read back: one place
for "ingest these, nothing rejected" and "the rows of this query, read-only"."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ember.analysis import connect, ingest


def ingested(tmp_path: Path, traces: Iterable[Path]) -> Path:
    """``tmp_path/t.duckdb`` with ``traces`` ingested, none of them rejected."""
    db = tmp_path / "t.duckdb"
    assert ingest(list(traces), db).rejected == 0
    return db


def query_rows(db: Path, sql: str, *params: object) -> list[tuple[Any, ...]]:
    """The rows of one query (``?`` bound to ``params``) on a read-only connection to ``db``."""
    with connect(db, read_only=True) as con:
        return con.execute(sql, list(params)).fetchall()
