"""The token filter (its ``NonZero`` is a graph break) over a sequence-length sweep:
``python -m tests.recordings.sweep TRACE RUN_ID LENGTHS_JSON CACHE_SIZE``."""

from __future__ import annotations

import json
import sys

import numpy as np

from ember.recorder import record
from ember.runtime import compile, load
from ember.runtime.examples import token_filter_model
from ember.runtime.memory import track_device_memory


def main(argv: list[str]) -> None:
    path, run_id, lengths, cache_size = argv[0], argv[1], json.loads(argv[2]), int(argv[3])
    model = load(token_filter_model())
    with record(path, run_id=run_id, model="token_filter"):
        compiled = compile(model, cache_size=cache_size)
        rng = np.random.default_rng(0)
        with track_device_memory():
            for n in lengths:
                ids = rng.integers(0, 64, size=(1, n)).astype(np.int64)
                compiled({"input_ids": ids})


if __name__ == "__main__":
    main(sys.argv[1:])
