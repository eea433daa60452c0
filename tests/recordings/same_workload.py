"""The compare gate's baseline workload, run by two processes at once (tests/cli/
test_compare.py): each loads and compiles the model, then waits for the other, so that both
make their calls at the same time and see the same busy machine:
``python -m tests.recordings.same_workload MODEL TRACE READY OTHER CORES WIDTH CALLS``
(CORES: comma-separated cores to run on, or '' for any)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> None:
    model, trace, ready, other, cores, width, calls = argv
    if cores:  # before JAX starts its threads: they inherit the process's cores
        os.sched_setaffinity(0, {int(c) for c in cores.split(",")})
    import numpy as np

    from ember.recorder import record
    from ember.runtime import compile, load

    x = np.random.default_rng(0).standard_normal((4, 64, int(width))).astype(np.float32)
    with record(trace, model="stack", branch="main"):
        compiled = compile(load(model))
        compiled(x=x)  # compiles
        Path(ready).touch()
        deadline = time.monotonic() + 120
        while not Path(other).exists() and time.monotonic() < deadline:
            time.sleep(0.002)
        for _ in range(int(calls)):
            compiled(x=x)


if __name__ == "__main__":
    main(sys.argv[1:])
