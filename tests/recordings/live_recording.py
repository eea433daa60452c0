"""A run still being recorded: steps with a memory alloc and free each, flushed every 50 ms,
for at least SECONDS and on until the file INGESTED exists (an ingest has run while it
recorded), at most a minute:
``python -m tests.recordings.live_recording TRACE SECONDS INGESTED``."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ember.recorder import record


def main(argv: list[str]) -> None:
    path, seconds, ingested = argv[0], float(argv[1]), Path(argv[2])
    with record(path, run_id="live", flush_interval=0.05) as rec:
        # importing the CLI alone can take seconds on a loaded machine: wait for the ingest
        start = time.monotonic()
        i = 0
        while time.monotonic() < start + seconds or (
            not ingested.exists() and time.monotonic() < start + 60
        ):
            with rec.step("forward", index=i):
                rec.memory("alloc", f"a{i}", 1000, dtype="float32", device="cpu:0")
                rec.memory("free", f"a{i}", 1000, dtype="float32", device="cpu:0")
            i += 1
            if i % 50 == 0:
                time.sleep(0.005)


if __name__ == "__main__":
    main(sys.argv[1:])
