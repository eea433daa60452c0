"""Ember against onnxruntime on the nine light models of the ONNX test data.

    .venv/bin/python benchmarks/bench_runtime.py [--calls N] [--models squeezenet,resnet50]

For each model, in one process: the first-call compile time of Ember (``ember.runtime.compile``:
trace, lower, XLA compile), then the steady-state latency of the compiled model and of an
onnxruntime CPU session on the same numpy inputs (median of ``--calls`` calls after warm-up,
the two interleaved in rounds so machine noise hits both), and the ratio Ember/onnxruntime.
Ember's outputs are checked against onnxruntime's before timing.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.test.runner import Runner

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def _inputs(proto: onnx.ModelProto) -> dict[str, np.ndarray]:
    inits = {i.name for i in proto.graph.initializer}
    return {
        i.name: Runner.generate_dummy_data(i, seed=0, random=False)
        for i in proto.graph.input
        if i.name not in inits
    }


def bench_model(path: str, calls: int, threads: int | None) -> dict[str, float]:
    import jax
    import onnxruntime as ort

    import ember.runtime as rt

    proto = onnx.load(path)
    feeds = _inputs(proto)
    start = time.perf_counter()
    compiled = rt.compile(path)
    compile_s = time.perf_counter() - start
    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    out_name = sess.get_outputs()[0].name

    def ember_call():
        return jax.block_until_ready(compiled(feeds))

    def ort_call():
        return sess.run([out_name], feeds)

    got = np.asarray(ember_call()[out_name])
    ref = ort_call()[0]
    # The light models' weights are constant, so activations reach ~1e10 where float32 steps
    # are ~1e3; a different summation order can then change the softmax: report, go on.
    matches = bool(np.allclose(got, ref, rtol=1e-3, atol=1e-5))
    e, o = interleaved_medians(ember_call, ort_call, calls)
    return {
        "compile_s": compile_s,
        "ember_ms": e * 1e3,
        "ort_ms": o * 1e3,
        "ratio": e / o,
        "matches": matches,
    }


def interleaved_medians(
    a: Callable[[], Any], b: Callable[[], Any], calls: int, rounds: int = 5
) -> tuple[float, float]:
    """Median seconds per call of ``a`` and of ``b`` (``interleaved`` of the two).
    ``bench_realmodels.py`` times the same way."""
    e, o = interleaved([a, b], calls, rounds)
    return e, o


def interleaved(fns: Sequence[Callable[[], Any]], calls: int, rounds: int = 5) -> list[float]:
    """Median seconds per call of each of ``fns`` (``interleaved_times``)."""
    return [statistics.median(t) for t in interleaved_times(fns, calls, rounds)]


def interleaved_times(
    fns: Sequence[Callable[[], Any]], calls: int, rounds: int = 5
) -> list[list[float]]:
    """Seconds of each call of each of ``fns``, after 3 warm-up calls of each, timed in
    ``rounds`` alternating rounds of ``calls // rounds`` calls, so that a change of the
    machine's load weighs on all alike."""
    for _ in range(3):
        for fn in fns:
            fn()
    times: list[list[float]] = [[] for _ in fns]
    per_round = max(1, calls // rounds)
    for _ in range(rounds):
        for fn, sink in zip(fns, times, strict=True):
            for _ in range(per_round):
                t0 = time.perf_counter()
                fn()
                sink.append(time.perf_counter() - t0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--models", default="", help="comma-separated names, e.g. resnet50")
    parser.add_argument("--ort-threads", type=int, default=None, help="onnxruntime threads")
    args = parser.parse_args()
    paths = sorted(glob.glob(os.path.join(LIGHT, "light_*.onnx")))
    if args.models:
        wanted = set(args.models.split(","))
        paths = [p for p in paths if os.path.basename(p)[6:-5] in wanted]
    print(f"{'model':<16}{'compile s':>10}{'ember ms':>10}{'ort ms':>10}{'ember/ort':>11}")
    ratios = []
    for path in paths:
        r = bench_model(path, args.calls, args.ort_threads)
        ratios.append(r["ratio"])
        name = os.path.basename(path)[6:-5]
        print(
            f"{name:<16}{r['compile_s']:>10.2f}{r['ember_ms']:>10.3f}{r['ort_ms']:>10.3f}"
            f"{r['ratio']:>11.2f}"
            + ("" if r["matches"] else "  (outputs differ from onnxruntime)"),
            flush=True,
        )
    if ratios:
        print(f"median ratio ember/onnxruntime: {statistics.median(ratios):.2f} (goal <= 1.0)")


if __name__ == "__main__":
    main()
