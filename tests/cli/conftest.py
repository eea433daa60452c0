"""The analysis tests' recorded traces and their database (tests/analysis/conftest.py), for
the commands that read them (`ember ingest|query|report|export`)."""

from tests.analysis.conftest import bus_trace, sweep_trace, views_db

__all__ = ["bus_trace", "sweep_trace", "views_db"]
