"""Traces for the analysis tests, recorded by the real recorder.

``record_runtime_sweep`` runs the real runtime (``ember.runtime.compile`` of the
token-filter model, whose ``NonZero`` is a graph break) over a sequence-length sweep:
the view tests read what Ember really records. It runs in a subprocess so the test
process never imports jax (the analysis layer must work without it).

``record_bus_trace`` drives the recorder through the bus exactly as the runtime and the
Hub client do, for what a CPU runtime run cannot show in a few seconds: memory alloc/free
records with categories, Hub hits and downloads, a failed call, a JAX re-trace.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from ember.schemas import SCHEMA_ID

REPO = Path(__file__).resolve().parents[2]

# The lengths of the session's sweep trace (conftest's sweep_trace): each new length
# compiles position 0 again; with cache_size=2 the third length evicts the first, so 17
# and 23 come back as re-compiles after eviction; the last call hits.
SWEEP = [17, 23, 31, 17, 23, 23]

SWEEP_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from ember.recorder import record
    from ember.runtime import load, compile
    from ember.runtime.examples import token_filter_model
    from ember.runtime.memory import track_device_memory

    path, run_id = sys.argv[1], sys.argv[2]
    lengths, cache_size = json.loads(sys.argv[3]), int(sys.argv[4])
    model = load(token_filter_model())
    with record(path, run_id=run_id, model="token_filter"):
        compiled = compile(model, cache_size=cache_size)
        rng = np.random.default_rng(0)
        with track_device_memory():
            for n in lengths:
                ids = rng.integers(0, 64, size=(1, n)).astype(np.int64)
                compiled({"input_ids": ids})
    """
)


def record_runtime_sweep(
    path: Path, lengths: list[int], *, cache_size: int = 2, run_id: str = "sweep"
) -> Path:
    """Record the real runtime calling the token-filter model with these sequence lengths."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    subprocess.run(
        [
            sys.executable,
            "-c",
            SWEEP_SCRIPT,
            str(path),
            run_id,
            json.dumps(lengths),
            str(cache_size),
        ],
        check=True,
        cwd=REPO,
        env=env,
        timeout=600,
    )
    return path


def _shapes(n: int) -> list[dict]:
    return [{"name": "input_ids", "shape": [1, n], "dtype": "int64"}]


def record_bus_trace(path: Path, *, run_id: str = "bus-run") -> Path:
    """Record memory, Hub, an error and a JAX re-trace through the bus (see module doc)."""
    from ember.recorder import bus, record

    src = "hf://acme/tiny/onnx/model.onnx"
    with record(path, run_id=run_id, phase="train", model="tiny") as rec:
        with bus.span("ember.hub.info", {"source": "hf://acme/tiny", "revision": "main"}) as s:
            s.set(result="fetched")
        bus.emit(
            "ember.hub.hit",
            {"count": 1, "bytes": 1234},
            {"source": "hf://acme/tiny/config.json", "revision": "main", "check": "etag"},
        )
        with bus.span("ember.hub.download", {"source": src, "revision": "main"}) as s:
            s.measure(bytes=5_000_000)
        with bus.span("ember.load", {"source": src}) as s:
            s.set(node_count=12, opset=17)
        # memory: a parameter, then per step an activation alloc/free pair
        rec.memory("alloc", "w0", 4000, dtype="float32", device="cpu:0", category="parameter")
        for step in range(3):
            with rec.step("forward", index=step):
                rec.memory(
                    "alloc",
                    f"a{step}",
                    1000 * (step + 1),
                    dtype="float32",
                    device="cpu:0",
                    category="activation",
                    op_name="MatMul",
                )
                rec.device_memory(
                    "cpu:0", "live_arrays", used_bytes=5000 + 1000 * step, rss_bytes=10_000_000
                )
                rec.memory(
                    "free",
                    f"a{step}",
                    1000 * (step + 1),
                    dtype="float32",
                    device="cpu:0",
                    category="activation",
                )
        # a call that fails
        try:
            with bus.span("ember.call", {"source": src, "shapes": _shapes(5)}):
                raise ValueError("input_ids: expected int64, got float32")
        except ValueError:
            pass
        # the JAX bridge: a function traced twice, the second time for a new shape
        with bus.span("ember.jit", {"fun_name": "loss_fn"}) as s:
            s.set(tracing_ns=1000)
        with bus.span("ember.jit", {"fun_name": "loss_fn"}) as s:
            s.set(
                retrace_reason="different argument shapes",
                changes=[{"arg": "x", "what": "shape", "old": "f32[8,3]", "new": "f32[16,3]"}],
            )
    return path


def write_lines(path: Path, lines: list[str | bytes], *, newline_at_end: bool = True) -> Path:
    """Write raw lines (for the bad-input corpus)."""
    data = b"\n".join(x if isinstance(x, bytes) else x.encode() for x in lines)
    if newline_at_end:
        data += b"\n"
    path.write_bytes(data)
    return path


def meta_line(run_id: str = "r1", schema: str = SCHEMA_ID) -> str:
    return json.dumps(
        {
            "kind": "meta",
            "schema": schema,
            "run_id": run_id,
            "wall_time_ns": 1_764_403_200_000_000_000,
            "host": "test",
            "pid": 1,
        }
    )


def cache_line(ts: int, action: str = "hit", position: int = 0, n: int = 17, **extra) -> str:
    rec = {
        "kind": "cache",
        "ts_ns": ts,
        "action": action,
        "position": position,
        "shapes": _shapes(n),
        **extra,
    }
    return json.dumps(rec)
