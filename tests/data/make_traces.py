"""Record the traces checked in here, with the real runtime (each in a fresh process).

    .venv/bin/python -m tests.data.make_traces      # from the checkout; rewrites tests/data/*.jsonl

Run it again when the trace format or what the runtime records changes (the tests that
read these files say what they expect of them). The files:

- ``sweep.jsonl``: the token-filter model (a ``NonZero`` graph break) called at lengths
  ``SWEEP`` (17, 23, 31, 17, 23, 23) with a cache of 2: recompiles, evictions, thrash,
  device memory (run id ``sweep``).
- ``disk-cold.jsonl``, ``disk-warm.jsonl``: the token filter at
  ``tests.recordings.DISK_LENGTHS`` twice
  with one disk cache, first empty (misses), then filled (hits).
- ``train.jsonl``: the tiny JAX training loop (jit compiles, one retrace, JAX compiling
  its own primitives run outside jit, steps, gradients).
- ``ahead.jsonl``: a segment compiled ahead of time with the model (no cache lookup),
  three calls at that shape, one call at a new shape that compiles.

The tests that must see what the runtime records today record their own traces
(``tests/analysis/traces.py``); these serve the view and report tests.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from tests.analysis.traces import (
    DATA,
    REPO,
    record_ahead_of_time,
    record_disk_cache_run,
    record_runtime_sweep,
    record_training,
)
from tests.recordings import SWEEP


def main() -> None:
    record_runtime_sweep(DATA / "sweep.jsonl", SWEEP, cache_size=2, run_id="sweep")
    with tempfile.TemporaryDirectory(prefix="ember-disk-cache-") as cache:
        for run_id in ("disk-cold", "disk-warm"):
            record_disk_cache_run(DATA / f"{run_id}.jsonl", run_id, Path(cache))
    record_training(DATA / "train.jsonl")
    record_ahead_of_time(DATA / "ahead.jsonl")
    for path in sorted(DATA.glob("*.jsonl")):
        print(f"{path.relative_to(REPO)}: {path.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
