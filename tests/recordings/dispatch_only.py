"""Records squeezenet's calls alternately synced and dispatch-only (``sync=False``), ten of
each, with JAX's own asynchronous dispatch (``EMBER_CPU_ASYNC_DISPATCH=1``: Ember would
otherwise run the program in the calling thread, where dispatch ends at the results); prints
``ok`` once no recording syncs any more:
``python -m tests.recordings.dispatch_only FOLDER`` (``synced{i}.jsonl``, ``dispatch{i}.jsonl``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import jax
import numpy as np

import ember.runtime as rt
from ember.recorder import bus, record
from ember.runtime.workload import resolve_source


def main(argv: list[str]) -> None:
    assert os.environ.get("EMBER_CPU_ASYNC_DISPATCH") == "1"
    folder = Path(argv[0])
    model = rt.compile(rt.load(resolve_source("onnx:light/squeezenet")))
    (spec,) = model.model.inputs
    shape = (1, 3, 224, 224)
    assert tuple(spec.shape or ()) == shape
    feeds = {spec.name: np.random.default_rng(0).random(shape, dtype=np.float32)}
    for _ in range(3):
        jax.block_until_ready(model(feeds))
    for i in range(10):  # alternating, so a change of the machine's load hits both alike
        for name, sync in ((f"synced{i}", True), (f"dispatch{i}", False)):
            with record(folder / f"{name}.jsonl", sync=sync):
                jax.block_until_ready(model(feeds))
    assert not bus.syncing()  # both kinds of recording closed: nothing syncs any more
    print("ok")


if __name__ == "__main__":
    main(sys.argv[1:])
