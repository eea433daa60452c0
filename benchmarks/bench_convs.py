"""Single convolutions (+ SiLU) of the CNNs in ``bench_realmodels.py``, Ember against
onnxruntime, on one core and on all of them.

    .venv/bin/python benchmarks/bench_convs.py [--calls 200]

Each shape is an ONNX model of Conv -> Sigmoid -> Mul (as YOLOv8's exports write SiLU), one
or a chain of four, built with ``onnx.helper``: a stem convolution of 3 channels, the 3x3
convolutions of YOLOv8n's stages at 320x320 (the same ~118 MFLOP each), 1x1 and depthwise
ones of PP-LCNet, and one large convolution. Every shape runs in two fresh processes: one pinned
to a single core (``os.sched_setaffinity`` before JAX and onnxruntime start their threads;
onnxruntime with one intra-op thread) and one with every core (onnxruntime with two
threads, as ``bench_realmodels.py`` runs it). Printed per shape: the median time to results
of each (Ember's outputs read back as numpy, like onnxruntime's; the two interleaved in
rounds), Ember / onnxruntime on each, and how much each gains from the cores beyond the
first: the question this answers is whether a model's gap is XLA's convolution itself or
how it shares a convolution between cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

# (label, channels in, height = width, channels out, kernel, stride, group, convolutions):
# a shape whose output can feed it again is a chain of 4, so that the NCHW <-> NHWC
# transposes at a one-Conv model's ends (which a whole model pays once) weigh less
SHAPES = [
    ("stem 3->16 s2 @320", 3, 320, 16, 3, 2, 1, 1),
    ("3x3 16->32 s2 @160", 16, 160, 32, 3, 2, 1, 1),
    ("4 x 3x3 32->32 @80", 32, 80, 32, 3, 1, 1, 4),
    ("4 x 3x3 64->64 @40", 64, 40, 64, 3, 1, 1, 4),
    ("4 x 3x3 128->128 @20", 128, 20, 128, 3, 1, 1, 4),
    ("4 x 1x1 128->128 @56", 128, 56, 128, 1, 1, 1, 4),
    ("4 x dw 3x3 128 @56", 128, 56, 128, 3, 1, 128, 4),
    ("3x3 256->256 @80 (large)", 256, 80, 256, 3, 1, 1, 1),
]


def conv_model(c: int, h: int, o: int, k: int, stride: int, group: int, n: int) -> bytes:
    """``n`` Conv -> Sigmoid -> Mul blocks of this shape in a chain (``n`` > 1 only where
    ``c == o`` and ``stride == 1``), their weights random (seed 0)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    pad = k // 2
    nodes, weights, x = [], [], "x"
    for i in range(n):
        w = rng.standard_normal((o, c // group, k, k), dtype=np.float32) * (1 / k / c**0.5)
        weights.append(numpy_helper.from_array(w, f"w{i}"))
        y, z = f"y{i}", "z" if i == n - 1 else f"z{i}"
        nodes += [
            helper.make_node(
                "Conv", [x, f"w{i}"], [y], pads=[pad] * 4, strides=[stride] * 2, group=group
            ),
            helper.make_node("Sigmoid", [y], [f"s{i}"]),
            helper.make_node("Mul", [y, f"s{i}"], [z]),
        ]
        x = z
    graph = helper.make_graph(
        nodes,
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, h])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        initializer=weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


def measure(cores: int, calls: int) -> list[dict[str, float]]:
    """Median ms of Ember and onnxruntime per shape, in this process on ``cores`` cores."""
    if cores == 1:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    import numpy as np
    import onnxruntime as ort
    from bench_runtime import interleaved_times

    import ember.runtime as rt

    rows = []
    for _, c, h, o, k, stride, group, n in SHAPES:
        model = conv_model(c, h, o, k, stride, group, n)
        x = np.random.default_rng(1).random((1, c, h, h), dtype=np.float32)
        compiled = rt.compile(rt.load(model))
        options = ort.SessionOptions()
        options.intra_op_num_threads = min(cores, 2)
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])

        def ember(compiled=compiled, x=x) -> None:
            np.asarray(compiled({"x": x})["z"])

        def onnxruntime(session=session, x=x) -> None:
            session.run(None, {"x": x})

        want = session.run(None, {"x": x})[0]
        got = np.asarray(compiled({"x": x})["z"])
        e, r = interleaved_times([ember, onnxruntime], calls)
        rows.append(
            {
                "ember": statistics.median(e) * 1e3,
                "ort": statistics.median(r) * 1e3,
                "error": float(np.max(np.abs(got - want))),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--cores", type=int, default=0, help=argparse.SUPPRESS)  # a worker
    args = parser.parse_args()
    if args.cores:
        print(json.dumps(measure(args.cores, args.calls)))
        return
    results = {}
    for cores in (1, len(os.sched_getaffinity(0))):
        out = subprocess.run(
            [sys.executable, __file__, "--cores", str(cores), "--calls", str(args.calls)],
            capture_output=True,
            text=True,
            check=True,
        )
        results[cores] = json.loads(out.stdout.strip().splitlines()[-1])
    one, many = results[1], results[max(results)]
    n = max(results)
    load = os.getloadavg()[0]
    print(
        f"ms per call (median), 1 core and {n} cores; ratio Ember / onnxruntime; gain = time on "
        f"1 core / time on {n}  [load average {load:.1f}]"
    )
    print(
        f"{'convolution + SiLU':<26}{'ember 1':>9}{'ort 1':>8}{'ratio':>7}"
        f"{f'ember {n}':>9}{f'ort {n}':>8}{'ratio':>7}{'ember gain':>12}{'ort gain':>10}"
        f"{'max err':>10}"
    )
    for (label, *_), a, b in zip(SHAPES, one, many, strict=True):
        print(
            f"{label:<26}{a['ember']:9.3f}{a['ort']:8.3f}{a['ember'] / a['ort']:7.2f}"
            f"{b['ember']:9.3f}{b['ort']:8.3f}{b['ember'] / b['ort']:7.2f}"
            f"{a['ember'] / b['ember']:11.2f}x{a['ort'] / b['ort']:9.2f}x{b['error']:10.1e}"
        )


if __name__ == "__main__":
    main()
