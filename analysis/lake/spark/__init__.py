"""Spark over the lake: ``job`` (the Spark ingest: executors stage Parquet, delta-rs
commits), ``schema`` (DuckDB types as Spark types) and ``sql`` (the views in Spark SQL,
translated with sqlglot). PySpark is imported only when a function here runs.
"""
