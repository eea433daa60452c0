"""Ember's trace schema: pydantic models of every record, versions and migrations.

Imports nothing of Ember; other packages build on it.
"""

from .records import RECORD_KINDS, SCHEMA_ID, SCHEMA_NAME, SCHEMA_VERSION, SPAN_KINDS, Meta, Record
from .validate import RECORD, FileReport, LineError, explain, validate_file, validate_lines
from .versions import MIGRATIONS, Migrations, TraceVersionError, check_version, parse_schema_id

__all__ = [
    "MIGRATIONS",
    "RECORD",
    "RECORD_KINDS",
    "SCHEMA_ID",
    "SCHEMA_NAME",
    "SCHEMA_VERSION",
    "SPAN_KINDS",
    "FileReport",
    "LineError",
    "Meta",
    "Migrations",
    "Record",
    "TraceVersionError",
    "check_version",
    "explain",
    "parse_schema_id",
    "validate_file",
    "validate_lines",
]
