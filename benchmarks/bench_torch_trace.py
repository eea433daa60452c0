"""TORCH_TRACE import speed: Ember's importer against tlparse on the same big log.

    .venv/bin/python benchmarks/bench_torch_trace.py [--mb 100] [--repeat 3]

The big log is the checked-in logs (``tests/data/torch``) concatenated until it is ``--mb``
megabytes (one process's log in torch's own format: every entry whole, every md5 right).
Timed, in turn, ``--repeat`` times each: ``tlparse LOG -o DIR --no-browser --overwrite``
(the peer: it parses every entry and writes its HTML report) and ``import_torch_trace``
(parse, check each md5, map, write the Ember trace). Prints MB/s of each and the median
ratio Ember / tlparse (above 1: Ember is slower), with the machine's load average: numbers
measured at a load above the core count are noisy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ember.analysis.torch_trace import import_torch_trace

DATA = Path(__file__).parents[1] / "tests" / "data" / "torch"


def big_log(path: Path, mb: int) -> int:
    parts = [p.read_bytes() for p in sorted(DATA.glob("*.log"))]
    size = 0
    with path.open("wb") as f:
        while size < mb << 20:
            for part in parts:
                f.write(part if part.endswith(b"\n") else part + b"\n")
                size += len(part)
    return path.stat().st_size


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    tlparse = Path(sys.executable).parent / "tlparse"
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "big.log"
        size = big_log(log, args.mb)
        print(f"log: {size / 1e6:.1f} MB, load {os.getloadavg()[0]:.1f}")
        ember, peer = [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            cmd = [str(tlparse), str(log), "-o", f"{tmp}/tl", "--no-browser", "--overwrite"]
            subprocess.run(cmd, check=True, capture_output=True)
            peer.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            result = import_torch_trace(log, Path(tmp) / "big.ember.jsonl")
            ember.append(time.perf_counter() - t0)
            assert not result.rejected, result.rejected[:3]
        e, p = statistics.median(ember), statistics.median(peer)
        print(
            f"tlparse {size / 1e6 / p:.1f} MB/s ({p:.2f} s), ember {size / 1e6 / e:.1f} MB/s "
            f"({e:.2f} s, {result.compiles} compiles); ember/tlparse = {e / p:.2f}x; "
            f"load {os.getloadavg()[0]:.1f}"
        )


if __name__ == "__main__":
    main()
