"""A second process compiling the same model with the same cache folder: each segment's
compile stop (position, compiled, disk cache hit or miss), the output ``y`` and how many
programs went to XLA's compiler through JAX's persistent cache, as one JSON line:
``python -m tests.recordings.segment_disk_cache MODEL CACHE_DIR``."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np
from jax import monitoring

import ember.runtime as rt
from ember.recorder import bus


def main(argv: list[str]) -> None:
    model, cache_dir = argv
    stops: list[dict[str, Any]] = []

    def on_stop(name: str, measurement: dict[str, Any], md: Mapping[str, Any]) -> None:
        keep = ("position", "compiled", "disk_cache")
        stops.append({k: md[k] for k in keep})

    bus.attach("t", ["ember.segment.compile.stop"], on_stop)
    # programs handed to XLA's compiler through the persistent cache
    xla: list[str] = []

    def on_event(event: str, **kwargs: Any) -> None:
        if event == "/jax/compilation_cache/compile_requests_use_cache":
            xla.append(event)

    monitoring.register_event_listener(on_event)
    compiled = rt.compile(model, cache_dir=cache_dir)
    data = np.arange(6, dtype=np.float32)
    out = compiled({"x": np.array([0, 1, 0, 0, 0, 0], np.float32), "data": data})
    print(json.dumps({"stops": stops, "y": np.asarray(out["y"]).tolist(), "xla": len(xla)}))


if __name__ == "__main__":
    main(sys.argv[1:])
