"""Traces for the analysis tests, recorded by the real recorder.

``record_runtime_sweep`` runs the real runtime (``ember.runtime.compile`` of the
token-filter model, whose ``NonZero`` is a graph break) over a sequence-length sweep:
the view tests read what Ember really records. It runs in a subprocess so the test
process never imports jax (the analysis layer must work without it).

``record_disk_cache_run``, ``record_training`` and ``record_ahead_of_time`` record the
other runs the report needs, each in a fresh process as a user's job would run; most
tests read the copies ``tests/data/make_traces.py`` checked in (``checked_in``).

``record_bus_trace`` drives the recorder through the bus exactly as the runtime and the
Hub client do, for what a CPU runtime run cannot show in a few seconds: memory alloc/free
records with categories, Hub hits and downloads, a failed call, a JAX re-trace.
"""

from __future__ import annotations

import json
from pathlib import Path

from ember.schemas import SCHEMA_ID
from tests.recordings import REPO, run


def record_runtime_sweep(
    path: Path, lengths: list[int], *, cache_size: int = 2, run_id: str = "sweep"
) -> Path:
    """Record the real runtime calling the token-filter model with these sequence lengths."""
    run("sweep", str(path), run_id, json.dumps(lengths), str(cache_size))
    return path


def record_disk_cache_run(path: Path, run_id: str, cache_dir: Path) -> Path:
    """Record the token filter over ``tests.recordings.DISK_LENGTHS`` with a disk cache in
    ``cache_dir``."""
    run("disk_cache", str(path), run_id, str(cache_dir))
    return path


def record_training(path: Path) -> Path:
    """Record the tiny JAX training loop (jit compiles, a retrace, JAX's own primitives)."""
    run("training", str(path))
    return path


def record_ahead_of_time(path: Path) -> Path:
    """Record a segment compiled ahead of time, its calls, and one compiled in a call."""
    run("ahead_of_time", str(path))
    return path


# Traces the real runtime recorded once, checked in by tests/data/make_traces.py (its doc
# says what each is): the view and report tests read them instead of starting jax again.
DATA = REPO / "tests" / "data"


def checked_in(name: str, folder: Path) -> Path:
    """A copy of the checked-in trace ``tests/data/<name>`` in ``folder``, under the file's
    own name (tests may write next to their traces)."""
    target = folder / Path(name).name
    target.write_bytes((DATA / name).read_bytes())
    return target


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
        activation = {"dtype": "float32", "device": "cpu:0", "category": "activation"}
        for step in range(3):
            with rec.step("forward", index=step):
                size = 1000 * (step + 1)
                rec.memory("alloc", f"a{step}", size, **activation, op_name="MatMul")
                rec.device_memory(
                    "cpu:0", "live_arrays", used_bytes=5000 + 1000 * step, rss_bytes=10_000_000
                )
                rec.memory("free", f"a{step}", size, **activation)
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
                # JAX's persistent cache missed it: another jaxlib filled the cache
                persistent_cache="miss",
                disk_key={"jax": "0.10.2", "jaxlib": "0.10.2", "backend": "cpu", "device": "cpu"},
                disk_miss="jaxlib 0.10.1 -> 0.10.2",
                called_at="train.py:12:8 (train)",
                defined_at="train.py:3",
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


def span_line(kind: str, span_id: int, ts: int) -> str:
    """A ``span_start`` or ``span_end`` of a user span, as a line."""
    rec = {"kind": kind, "ts_ns": ts, "span_id": span_id, "span_kind": "user", "attrs": {}}
    if kind == "span_start":
        rec["name"] = "work"
    else:
        rec["duration_ns"] = 1
    return json.dumps(rec)


def run_span(span_id: int = 1) -> tuple[dict, dict]:
    """A ``run`` span's start (ts 1) and end (ts 2) records, as dicts to vary."""
    start = {
        "kind": "span_start",
        "ts_ns": 1,
        "span_id": span_id,
        "name": "ember.run",
        "span_kind": "run",
        "attrs": {},
    }
    end = {
        "kind": "span_end",
        "ts_ns": 2,
        "span_id": span_id,
        "duration_ns": 1,
        "span_kind": "run",
        "attrs": {},
    }
    return start, end


def symbolic_matmul(path: Path, *, relu: bool = True) -> Path:
    """Save an ONNX model ``out = w @ x`` (``w`` the 3x3 identity, then a Relu when
    ``relu``) whose input ``x`` is float32[3, n], to ``path``: one segment, compiled again
    for each ``n`` (``ember run --sweep x:1=...``)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.eye(3, dtype=np.float32), "w")
    nodes = [helper.make_node("MatMul", ["w", "x"], ["y" if relu else "out"])]
    if relu:
        nodes.append(helper.make_node("Relu", ["y"], ["out"]))
    graph = helper.make_graph(
        nodes,
        "symbolic",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, "n"])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [3, "n"])],
        initializer=[w],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path
