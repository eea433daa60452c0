"""Segment-path costs: call overhead, the cost of a cache hit per break, disk-cache compiles.

    .venv/bin/python benchmarks/bench_segments.py [--quick]

1. Call overhead of a compiled model without breaks against a bare ``jax.jit`` of the same
   function on a tiny graph (target ratio <= 1.2); and (1b) of a tiny graph whose ``If``
   specialises on a small int64 input (the direct call behind the conditions' memo).
2. The cost of one break on the segment path: a model with a break against the same model
   without it, per call, when every segment hits the cache.
3. Cold against disk-cache-warm compile time of a light model, each in a fresh process
   (target: warm >= 5x faster).
4. A ``Loop`` at a break (its trip count computed on the device, a scan output): 50
   iterations of a MatMul+Add body, hidden sizes 16 and 256, time to results (outputs as
   numpy) against onnxruntime (2 threads); then the same 50 steps with a trip count of
   100,000 that the body's condition ends. ``--only loop`` runs only this part.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_runtime import interleaved


def _best_per_call(fn, calls: int, repeats: int = 7) -> float:
    """Best mean seconds per call over ``repeats`` rounds of ``calls`` calls."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def tiny_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Add", ["x", "x"], ["t"]),
        helper.make_node("Relu", ["t"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def if_model() -> onnx.ModelProto:
    """y = Relu(x + x) when sr == 16000, else Neg(x): silero VAD's shape of control flow
    (the condition from a small int64 input, computed on the host; one program per value)."""
    sixteen = onnx.numpy_helper.from_array(np.array(16000, np.int64))
    then_branch = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["t"]), helper.make_node("Relu", ["t"], ["a"])],
        "then",
        [],
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [8])],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["b"])],
        "else",
        [],
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [8])],
    )
    nodes = [
        helper.make_node("Constant", [], ["sixteen"], value=sixteen),
        helper.make_node("Equal", ["sr", "sixteen"], ["cond"]),
        helper.make_node("If", ["cond"], ["y"], then_branch=then_branch, else_branch=else_branch),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_if",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [8]),
            helper.make_tensor_value_info("sr", TensorProto.INT64, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def break_model(with_break: bool) -> onnx.ModelProto:
    """y = Reshape(x * 2, shape) where shape is computed (a break) or constant."""
    shape_nodes = (
        [
            helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Cast", ["x"], ["xi"], to=TensorProto.INT64),
            helper.make_node("ReduceMax", ["xi"], ["m"], keepdims=1),
            helper.make_node("Concat", ["m", "minus_one"], ["shape"], axis=0),
        ]
        if with_break
        else [helper.make_node("Concat", ["two", "minus_one"], ["shape"], axis=0)]
    )
    nodes = [
        helper.make_node(
            "Constant", [], ["minus_one"], value=onnx.numpy_helper.from_array(np.array([-1]))
        ),
        helper.make_node(
            "Constant", [], ["two"], value=onnx.numpy_helper.from_array(np.array([2]))
        ),
        *shape_nodes,
        helper.make_node("Add", ["x", "x"], ["x2"]),
        helper.make_node("Reshape", ["x2", "shape"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "brk",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def bench_overhead(calls: int) -> float:
    import jax
    import jax.numpy as jnp

    import ember.runtime as rt
    from ember.runtime.graph.ir import interpret

    model = rt.load(tiny_model())
    compiled = rt.compile(model)
    graph = model.graph

    def fn(x):
        return interpret(graph, {"x": x})

    bare = jax.jit(fn)  # float32 only: the same program without x64
    x = jnp.asarray(np.linspace(-1, 1, 8, dtype=np.float32))
    bare(x)

    def call_bare():
        return bare(x)

    # the two alternate in rounds (medians), so that the machine's load weighs on both alike
    t_bare, t_ember = interleaved([call_bare, lambda: compiled(x=x)], calls)
    np.testing.assert_array_equal(np.asarray(compiled(x=x)["y"]), np.asarray(bare(x)["y"]))
    title = "1. call overhead, tiny graph without breaks (x: float32[8])"
    return _print_overhead(title, "bare jax.jit", t_bare, t_ember, "   (target <= 1.2)")


def _print_overhead(title: str, bare: str, t_bare: float, t_ember: float, note: str = "") -> float:
    """Print the bare and Ember seconds a call and their ratio (returned)."""
    ratio = t_ember / t_bare
    print(title)
    print(f"   {bare:25}{t_bare * 1e6:8.2f} us/call")
    print(f"   {'ember CompiledModel':25}{t_ember * 1e6:8.2f} us/call")
    print(f"   {'ratio ember/bare':25}{ratio:8.2f}{note}")
    return ratio


def bench_overhead_if(calls: int) -> float:
    import jax
    import jax.numpy as jnp

    import ember.runtime as rt
    from ember.runtime.graph.ir import interpret

    model = rt.load(if_model())
    compiled = rt.compile(model)
    graph = model.graph
    sr = np.array(16000, np.int64)

    def fn(x):
        return interpret(graph, {"x": x, "sr": sr})  # the condition a Python constant

    bare = jax.jit(fn)
    x = jnp.asarray(np.linspace(-1, 1, 8, dtype=np.float32))
    bare(x)
    feeds = {"x": x, "sr": sr}
    compiled(feeds)  # the checked call registers the program of sr == 16000

    def call_bare():
        return bare(x)

    t_bare, t_ember = interleaved([call_bare, lambda: compiled(feeds)], calls)
    np.testing.assert_array_equal(np.asarray(compiled(feeds)["y"]), np.asarray(bare(x)["y"]))
    title = "1b. call overhead, an If on a small int64 input (x: float32[8], sr: int64 scalar)"
    return _print_overhead(title, "bare jax.jit (sr const)", t_bare, t_ember)


def bench_break(calls: int) -> float:
    import ember.runtime as rt

    x = np.array([1, 2, 0, 0, 1, 0, 0, 1], np.float32)  # max 2 -> shape [2, -1]
    with_break = rt.compile(break_model(True))
    without = rt.compile(break_model(False))
    assert with_break.graph_break
    assert not without.graph_break
    np.testing.assert_array_equal(np.asarray(with_break(x=x)["y"]), np.asarray(without(x=x)["y"]))
    t_with = _best_per_call(lambda: with_break(x=x), calls)
    t_without = _best_per_call(lambda: without(x=x), calls)
    print("2. one break on the segment path (every segment a cache hit)")
    print(f"   without break            {t_without * 1e6:8.2f} us/call")
    print(f"   with 1 break             {t_with * 1e6:8.2f} us/call")
    print(f"   cost per break           {(t_with - t_without) * 1e6:8.2f} us")
    return t_with - t_without


_COMPILE_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    t0 = time.perf_counter()
    import ember.runtime as rt
    from ember.recorder import bus
    disk = []
    bus.attach("b", ["ember.segment.compile.stop"], lambda n, m, md: disk.append(md["disk_cache"]))
    model = rt.load(sys.argv[1])
    t1 = time.perf_counter()
    rt.compile(model, cache_dir=sys.argv[2])
    t2 = time.perf_counter()
    print(json.dumps({"compile_s": t2 - t1, "disk": disk}))
    """
)


def bench_disk_cache(model_path: str) -> float:
    with tempfile.TemporaryDirectory() as cache:
        runs = []
        for _ in range(2):
            proc = subprocess.run(
                [sys.executable, "-c", _COMPILE_SCRIPT, model_path, cache],
                capture_output=True,
                text=True,
                check=True,
            )
            runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    ratio = cold["compile_s"] / warm["compile_s"]
    print(f"3. compile of {os.path.basename(model_path)} in a fresh process")
    print(f"   cold (disk cache {cold['disk']})   {cold['compile_s']:8.2f} s")
    print(f"   warm (disk cache {warm['disk']})    {warm['compile_s']:8.2f} s")
    print(f"   speed-up cold/warm       {ratio:8.1f}x  (target >= 5x)")
    return ratio


def loop_model(hidden: int, stop_after: int | None = None) -> onnx.ModelProto:
    """h, hs = Loop(sum(n) times: h = h @ W + b, each h stacked): trip count on the device.
    With ``stop_after`` the body's condition ends the loop after that step (iter < it)."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
    b = (rng.standard_normal(hidden) * 0.1).astype(np.float32)

    def t(name: str, elem: int = TensorProto.FLOAT, shape: list | None = None):
        return helper.make_tensor_value_info(name, elem, shape)

    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["h_in", "W"], ["m"]),
            helper.make_node("Add", ["m", "b"], ["h_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"])
            if stop_after is None
            else helper.make_node("Less", ["iter", "stop"], ["cond_out"]),
            helper.make_node("Identity", ["h_out"], ["scan_out"]),
        ],
        "body",
        [
            t("iter", TensorProto.INT64, []),
            t("cond_in", TensorProto.BOOL, []),
            t("h_in", shape=[hidden]),
        ],
        [
            t("cond_out", TensorProto.BOOL, []),
            t("h_out", shape=[hidden]),
            t("scan_out", shape=[hidden]),
        ],
    )
    nodes = [
        helper.make_node("ReduceSum", ["n"], ["s"], keepdims=0),
        helper.make_node("Cast", ["s"], ["trips"], to=TensorProto.INT64),
        helper.make_node("Loop", ["trips", "true", "h0"], ["h", "hs"], body=body, name="Loop_0"),
    ]
    graph = helper.make_graph(
        nodes,
        "loop",
        [t("n", shape=[2]), t("h0", shape=[hidden])],
        [t("h", shape=[hidden]), t("hs", shape=["k", hidden])],
        initializer=[
            onnx.numpy_helper.from_array(w, "W"),
            onnx.numpy_helper.from_array(b, "b"),
            onnx.numpy_helper.from_array(np.array(True), "true"),
        ]
        + (
            []
            if stop_after is None
            else [onnx.numpy_helper.from_array(np.array(stop_after, np.int64), "stop")]
        ),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def bench_loop_break(calls: int) -> dict[str, float]:
    import onnxruntime as ort

    import ember.runtime as rt

    out: dict[str, float] = {}
    print("4. a Loop at a break: 50 iterations of MatMul+Add, time to results")
    cases = [(16, None, 20, 30), (256, None, 20, 30), (16, 49, 100000, 0), (256, 49, 100000, 0)]
    for hidden, stop_after, n0, n1 in cases:
        proto = loop_model(hidden, stop_after)
        compiled = rt.compile(proto)
        assert [b["op_type"] for b in compiled.breaks] == ["Loop"]
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 2
        sess = ort.InferenceSession(proto.SerializeToString(), opts, ["CPUExecutionProvider"])
        feeds = {
            "n": np.array([n0, n1], np.float32),
            "h0": np.ones(hidden, np.float32) / hidden,
        }
        got = compiled(feeds)
        want = sess.run(None, feeds)
        assert np.asarray(got["hs"]).shape == want[1].shape == (50, hidden)
        np.testing.assert_allclose(np.asarray(got["hs"]), want[1], rtol=1e-4, atol=1e-5)

        def ember(compiled=compiled, feeds=feeds) -> None:
            np.asarray(compiled(feeds)["hs"])

        def ort_run(sess=sess, feeds=feeds) -> None:
            sess.run(None, feeds)

        t_ember, t_ort = interleaved([ember, ort_run], calls)
        how = "trip count 50" if stop_after is None else "trip count 1e5, cond ends it"
        print(
            f"   hidden {hidden:3d}, {how:28s}: ember {t_ember * 1e3:7.3f} ms/call, "
            f"onnxruntime {t_ort * 1e3:7.3f} ms/call, ratio {t_ember / t_ort:6.2f}"
        )
        tag = f"{hidden}" if stop_after is None else f"{hidden}_cond"
        out[f"loop_break_ms_{tag}"] = t_ember * 1e3
        out[f"loop_break_ratio_ort_{tag}"] = t_ember / t_ort
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls")
    parser.add_argument(
        "--models",
        default="squeezenet,inception_v1,resnet50",
        help="light models for the disk-cache compile (comma-separated)",
    )
    parser.add_argument("--only", choices=["loop"], help="run one part only")
    args = parser.parse_args()
    calls = 2000 if args.quick else 20000
    if args.only == "loop":
        results = bench_loop_break(200 if args.quick else 1000)
        print(json.dumps({k: round(v, 3) for k, v in results.items()}))
        return
    results = {
        "overhead_ratio": bench_overhead(calls),
        "overhead_ratio_if": bench_overhead_if(calls),
        "break_cost_us": bench_break(calls // 4) * 1e6,
    }
    light = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    for name in args.models.split(","):
        path = os.path.join(light, f"light_{name}.onnx")
        results[f"disk_cache_speedup_{name}"] = bench_disk_cache(path)
    results.update(bench_loop_break(200 if args.quick else 1000))
    print(json.dumps({k: round(v, 3) for k, v in results.items()}))


if __name__ == "__main__":
    main()
