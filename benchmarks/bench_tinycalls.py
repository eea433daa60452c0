"""Where the microseconds of one steady-state call of a tiny model go (issue 14 item 3).

    .venv/bin/python benchmarks/bench_tinycalls.py [--models op15,op18] [--calls 3000]

The silero-vad models of ``bench_realmodels.py`` (wheels cached in ``~/.cache/ember-bench``)
run in 50-100 us a call in onnxruntime, called per 512-sample chunk with their recurrent
state fed back. For each, in one process and timed in alternating rounds (median per call),
one layer added at a time:

1. ``onnxruntime``: ``sess.run`` on numpy, numpy out (two intra-op threads);
2. ``bare jax.jit``: ``jax.jit`` of the interpreted graph (the sample rate a Python
   constant, the weights baked in), called with device arrays, ``block_until_ready``;
3. ``program``: the XLA program Ember runs for these inputs, called straight through
   jax's C++ call with device arrays (the state fed back from its own outputs);
4. ``+ numpy chunk``: the same, given the audio chunk (and the sample rate) as numpy, as a
   caller has them: jax's C++ call puts them on the device;
5. ``ember call``: ``compiled({...})`` as a user calls it, outputs waited for on the device:
   adds Ember's Python (the checks of the direct call, the If conditions' memo, the
   x64 context of a program with 64-bit arguments, the output dict);
6. ``+ np.asarray``: the probability read back as numpy (what ``bench_realmodels`` times).

Each row prints the median microseconds per call, its ratio to onnxruntime and to bare
jax.jit, and the step from the row above; then the fastest call and its step, which the
machine's load moves least (the steps of the medians move by a few microseconds from run
to run on a loaded machine). The load (``os.getloadavg``) is printed with them: on a
shared machine compare rows of one run, not runs.
"""

from __future__ import annotations

import os
import statistics
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_realmodels import MODELS, RealModel, model_bytes, models_parser, pick_models
from bench_runtime import interleaved_times

VAD = [m for m in MODELS if m.kind == "vad"]


def _program(compiled: Any, feeds: dict[str, Any]) -> tuple[Callable[..., Any], list[str], bool]:
    """The program the steady-state call of ``compiled`` runs for ``feeds``: jax's C++ call
    with the parameters bound, its argument names, and whether it runs with x64."""
    program = compiled.program_for(feeds)
    if program is None:
        raise SystemExit(f"{compiled!r}: no direct call for these inputs")
    return program.call, list(program.arg_names), program.x64


def layers(m: RealModel) -> dict[str, Callable[[], Any]]:
    """The six callables of the module docstring, each feeding its own state back."""
    import jax
    import onnxruntime as ort

    import ember.runtime as rt
    from ember.runtime.graph.ir import interpret

    data = model_bytes(m)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
    model = rt.load(data)
    compiled = rt.compile(model)
    chunk = (np.random.default_rng(0).standard_normal((1, 512)) * 0.1).astype(np.float32)
    sr = np.array(16000, np.int64)
    state0 = np.zeros((2, 1, 128), np.float32)
    feeds = {"input": chunk, "state": state0, "sr": sr}
    for _ in range(2):  # the checked call, then the direct one is in place
        feeds["state"] = compiled(feeds)["stateN"]
    call, arg_names, x64 = _program(compiled, feeds)
    with jax.enable_x64(x64):
        device = {n: jax.device_put(v) for n, v in feeds.items()}
    state_at = arg_names.index("state")
    graph = model.graph

    def fn(x: Any, state: Any) -> Any:
        return interpret(graph, {"input": x, "state": state, "sr": sr})

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # x32: the int64 constants narrow to int32
        bare = jax.jit(fn)
        bare(device["input"], device["state"])
    box: dict[str, Any] = {
        "ort": state0,
        "bare": device["state"],
        "program": device["state"],
        "numpy": device["state"],
        "ember": device["state"],
        "read": device["state"],
    }

    def run_ort() -> Any:
        prob, box["ort"] = sess.run(
            ["output", "stateN"], {"input": chunk, "state": box["ort"], "sr": sr}
        )
        return prob

    def run_bare() -> Any:
        out = bare(device["input"], box["bare"])
        box["bare"] = out["stateN"]
        return jax.block_until_ready(out)

    def run_program(key: str, given: dict[str, Any]) -> Callable[[], Any]:
        args = [given[n] for n in arg_names]

        def run() -> Any:
            args[state_at] = box[key]
            if x64:
                with jax.enable_x64(True):
                    outs = call(*args)
            else:
                outs = call(*args)
            box[key] = outs[1]
            return jax.block_until_ready(outs)

        return run

    def run_ember() -> Any:
        out = compiled({"input": chunk, "state": box["ember"], "sr": sr})
        box["ember"] = out["stateN"]
        return jax.block_until_ready(out)

    def run_read() -> Any:
        out = compiled({"input": chunk, "state": box["read"], "sr": sr})
        box["read"] = out["stateN"]
        return np.asarray(out["output"])

    return {
        "onnxruntime": run_ort,
        "bare jax.jit": run_bare,
        "program": run_program("program", device),
        "+ numpy chunk": run_program("numpy", {**device, "input": chunk, "sr": sr}),
        "ember call": run_ember,
        "+ np.asarray": run_read,
    }


def bench(m: RealModel, calls: int) -> dict[str, tuple[float, float]]:
    """Per layer: (median, fastest) microseconds per call."""
    fns = layers(m)
    times = interleaved_times(list(fns.values()), calls, rounds=40)
    return {
        name: (statistics.median(t) * 1e6, min(t) * 1e6) for name, t in zip(fns, times, strict=True)
    }


def main(argv: list[str] | None = None) -> int:
    parser = models_parser(__doc__)
    parser.add_argument("--calls", type=int, default=3000, help="timed calls per layer")
    args = parser.parse_args(argv)
    for m in pick_models(VAD, args.models):
        load = os.getloadavg()
        us = bench(m, args.calls)
        load_after = os.getloadavg()
        print(f"{m.name}  (load {load[0]:.1f} -> {load_after[0]:.1f}, {args.calls} calls a layer)")
        print(
            f"  {'layer':16} {'us/call':>8} {'/ ort':>6} {'/ jit':>6} {'step us':>8}"
            f" {'fastest':>8} {'step':>6}"
        )
        ort, jit = us["onnxruntime"][0], us["bare jax.jit"][0]
        previous: tuple[float, float] | None = None
        for name, (t, fastest) in us.items():
            steps = ("", "")
            if previous is not None:
                steps = (f"{t - previous[0]:+8.1f}", f"{fastest - previous[1]:+6.1f}")
            print(
                f"  {name:16} {t:8.1f} {t / ort:6.2f} {t / jit:6.2f} {steps[0]:>8}"
                f" {fastest:8.1f} {steps[1]:>6}"
            )
            if name != "onnxruntime":
                previous = (t, fastest)
        print(flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
