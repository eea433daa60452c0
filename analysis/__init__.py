"""Ember's analysis: JSONL traces -> DuckDB tables and SQL views, reports, exports.

``connect(db)`` opens a database (``.sql(query) -> polars.DataFrame``); ``ingest(paths,
db)`` brings traces in. Never imports jax.
"""

from .db import DEFAULT_DB, RECORD_TABLES, VIEW_NAMES, Connection, DatabaseBusyError, connect
from .ingest import FileResult, IngestSummary, expand_paths, ingest

__all__ = [
    "DEFAULT_DB",
    "RECORD_TABLES",
    "VIEW_NAMES",
    "Connection",
    "DatabaseBusyError",
    "FileResult",
    "IngestSummary",
    "connect",
    "expand_paths",
    "ingest",
]
