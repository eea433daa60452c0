"""``ember ingest TRACE --db DB`` over and over (touching STOP's ``.ingested`` sibling after
each), one last time once the file STOP exists; prints how many ingests ran. An ingest that
fails raises: ``python -m tests.recordings.ingest_loop TRACE DB STOP``."""

from __future__ import annotations

import sys
from pathlib import Path

import typer.main

from ember.cli.main import app


def main(argv: list[str]) -> None:
    path, db, stop = argv[0], argv[1], Path(argv[2])
    command = typer.main.get_command(app)
    runs = 0
    while True:
        last = stop.exists()
        command(["ingest", path, "--db", db], standalone_mode=False)
        runs += 1
        stop.with_suffix(".ingested").touch()
        if last:
            break
    print(runs, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
