"""Opens an Ember database (for writing, or with ``--read-only`` for reading), prints
``ready`` and holds it for SECONDS, as an ingest or a dashboard query holds it:
``python -m tests.recordings.hold_database DB SECONDS [--read-only]``."""

from __future__ import annotations

import sys
import time

from ember.analysis import connect


def main(argv: list[str]) -> None:
    db, seconds = argv[0], float(argv[1])
    con = connect(db, read_only="--read-only" in argv[2:])
    print("ready", flush=True)
    time.sleep(seconds)
    con.close()


if __name__ == "__main__":
    main(sys.argv[1:])
