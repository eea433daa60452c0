"""Ember's programs run in the calling thread on JAX's CPU client (``xla_cpu.run_inline``).

JAX hands every program of 1,000 flops or more to its CPU client's own threads, and the
caller waits for them; Ember asks JAX to run them inline instead, when Ember is the first to
start JAX's backends. Each case runs in a fresh Python, where nothing has started JAX yet.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

# a 64x64 MatMul: 524,288 flops, which JAX's client would run on its own threads
_PROBE = """
import json, sys
import numpy as np
import ember.runtime as rt
from jax._src import xla_bridge
first = sys.argv[2]
if first == "jax":  # the program started JAX itself before Ember
    import jax
    jax.devices()
model = rt.load(sys.argv[1])
x = {"x": np.ones((64, 64), np.float32)}
if first == "eager":
    out = rt.run(model, x)
else:
    out = rt.compile(model)(x)
(y,) = out.values()
print(json.dumps({
    "async": xla_bridge._CPU_ENABLE_ASYNC_DISPATCH.value,
    "ready": bool(y.is_ready()),  # right after the call returned: inline, or not
    "value": float(np.asarray(y)[0, 0]),
}))
"""


def _matmul_model(path) -> str:
    w = numpy_helper.from_array(np.full((64, 64), 0.5, np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return str(path)


def _probe(tmp_path, first: str, **env: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, _matmul_model(tmp_path / "m.onnx"), first],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **env},
        timeout=120,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_compiled_call_returns_with_its_results_ready(tmp_path):
    got = _probe(tmp_path, "ember")
    assert got == {"async": False, "ready": True, "value": 32.0}


def test_an_eager_run_also_runs_inline(tmp_path):
    got = _probe(tmp_path, "eager")
    assert got == {"async": False, "ready": True, "value": 32.0}


def test_a_backend_the_program_started_first_is_left_as_it_is(tmp_path):
    # JAX's client reads the setting when it starts: Ember changes nothing after that
    got = _probe(tmp_path, "jax")
    assert got["async"] is True
    assert got["value"] == 32.0


def test_the_environment_keeps_jax_s_own_threads(tmp_path):
    got = _probe(tmp_path, "ember", EMBER_CPU_ASYNC_DISPATCH="1")
    assert got["async"] is True
    assert got["value"] == 32.0
