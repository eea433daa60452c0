"""Ingests trace files into a database: ``python -m tests.recordings.ingest_files DB TRACE...``."""

from __future__ import annotations

import sys

from ember.analysis import ingest


def main(argv: list[str]) -> None:
    ingest(argv[1:], argv[0])


if __name__ == "__main__":
    main(sys.argv[1:])
