"""Ingest: JSONL trace files into the DuckDB file, typed, validated, once per file content.

The facade of the ingest family (import from here, not from its modules):
``plan`` decides which bytes of each file to read from what the store already holds
(``ingested_files``; the lake and the Spark ingest plan the same way), ``read`` stages a
planned range through DuckDB's JSON reader and checks it (``ember.analysis.checks``), and
``database`` writes a batch of files in one transaction with the derived columns.
"""

from .database import IngestInterrupted as IngestInterrupted
from .database import ingest as ingest
from .database import ingest_file as ingest_file
from .plan import FileResult as FileResult
from .plan import IngestSummary as IngestSummary
