"""Records 400 step spans, then keeps the trace open for HOLD seconds; prints ``recording``
once it has the trace, or the error's type and message and exits 3 when it cannot record:
``python -m tests.recordings.hold_recording TRACE RUN_ID HOLD``."""

from __future__ import annotations

import sys
import time

from ember.recorder import record


def main(argv: list[str]) -> None:
    path, run_id, hold = argv[0], argv[1], float(argv[2])
    try:
        with record(path, run_id=run_id) as rec:
            print("recording", flush=True)
            for i in range(400):
                with rec.span("step", i=i):
                    pass
            time.sleep(hold)
    except Exception as exc:
        print(type(exc).__name__, exc, flush=True)
        sys.exit(3)


if __name__ == "__main__":
    main(sys.argv[1:])
