"""Ember's analysis: JSONL traces -> DuckDB tables and SQL views, reports, exports.

Never imports jax. The pieces:

- ``ingest(paths, db)`` (``ingest/``, ``ember ingest``): files, folders, globs into one
  DuckDB database; typed by ``schema_types`` (DuckDB types derived from the pydantic
  models), validated (``checks`` + pydantic), idempotent per file, one transaction a file.
- ``connect(db, read_only=...)`` (``db.py``): a ``Connection`` whose ``.sql(query)``
  returns a polars DataFrame. Tables: one per record kind (``span_start``, ``span_end``,
  ``cache``, ``hub``, ``op``, ``tensor``, ``memory``, ``device_memory``, ``gradient``,
  ``edge``) plus ``runs``, ``ingested_files``, ``rejected_lines``.
- Views (``sql/<name>.sql``, each headed by what one row is and every column; ``VIEW_NAMES``
  lists them, ``docs/reference/views.md`` documents them, generated from those headers);
  helpers start with ``_``. Macros shared by the views: ``sql/macros.sql``.
- ``resolve_run(con, "e57e")`` (``runs.py``): the run id that a unique start names, as
  every ``--run`` and the dashboard's links take it.
- ``report.findings`` (``ember report``), ``export.export_chrome`` / ``export_parquet``
  (``ember export``), ``candle.import_candle`` (``ember import candle``),
  ``synthetic.write_trace`` (large realistic traces for benchmarks).
- ``compare.compare_refs`` (``ember compare``, the CI gate): two runs metric by metric under
  rules from ``gate.py`` (``--fail-on``, ``[tool.ember.gate]``), latency as samples.
"""

from ember.analysis.ingest.database import FileResult, IngestSummary, expand_paths, ingest

from .db import DEFAULT_DB, RECORD_TABLES, VIEW_NAMES, Connection, DatabaseBusyError, connect
from .runs import resolve_run

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
    "resolve_run",
]
