"""A recording on a disk that fills up mid-run: a file size limit makes writes past 20,000
bytes fail (EFBIG). Prints ``still running`` when the recording block ends, then ``lost``
and the ``TraceWriteError`` raised at its exit:
``python -m tests.recordings.filling_disk TRACE``."""

from __future__ import annotations

import resource
import signal
import sys

from ember.recorder import TraceWriteError, record


def main(argv: list[str]) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, resource.RLIM_INFINITY))
    try:
        with record(argv[0]) as rec:
            for i in range(2000):
                rec.edge("a", "b", i)
                if i % 100 == 0:
                    rec.flush()
            print("still running", flush=True)
    except TraceWriteError as exc:
        print("lost", exc)


if __name__ == "__main__":
    main(sys.argv[1:])
