"""Records ops as fast as it can, flushing every 10 ms, until it is killed; prints ``ready``
once recording: ``python -m tests.recordings.record_until_killed TRACE``."""

from __future__ import annotations

import sys

from ember.recorder import record


def main(argv: list[str]) -> None:
    with record(argv[0], flush_interval=0.01) as rec:
        print("ready", flush=True)
        i = 0
        while True:
            rec.op("loop", dtype="float32", device="cpu", duration_ns=i, inputs=["t"] * 50)
            i += 1


if __name__ == "__main__":
    main(sys.argv[1:])
