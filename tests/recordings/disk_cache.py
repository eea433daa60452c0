"""The token filter with a disk cache, every length a compile; a second run with the same
cache loads them all: ``python -m tests.recordings.disk_cache TRACE RUN_ID CACHE_DIR``."""

from __future__ import annotations

import sys

import numpy as np

from ember.recorder import record
from ember.runtime import compile, load
from ember.runtime.examples import token_filter_model
from tests.recordings import DISK_LENGTHS


def main(argv: list[str]) -> None:
    path, run_id, cache_dir = argv
    model = load(token_filter_model())
    with record(path, run_id=run_id, model="token_filter", scenario=run_id):
        compiled = compile(model, cache_size=4, cache_dir=cache_dir)
        rng = np.random.default_rng(0)
        for n in DISK_LENGTHS:
            compiled({"input_ids": rng.integers(0, 64, size=(1, n)).astype(np.int64)})


if __name__ == "__main__":
    main(sys.argv[1:])
