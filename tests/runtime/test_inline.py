"""Ember's programs run in the calling thread on JAX's CPU client (``xla_cpu.run_inline``).

JAX hands every program of 1,000 flops or more to its CPU client's own threads, and the
caller waits for them; Ember asks JAX to run them inline instead, when Ember is the first to
start JAX's backends. Each case runs in a fresh Python, where nothing has started JAX yet:
20 calls of a 256x256 MatMul (33 Mflop) on an input already on the device, each looked at
right after it returned. Run inline, every result is ready then; handed to JAX's threads,
a call returns before its program has run (a raw jit of it: 4 of 50 ready).
"""

from __future__ import annotations

import json

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tests.runtime.fresh_python import run_probe

_PROBE = """
import json, sys
import numpy as np
order = sys.argv[2]
if order == "jax first":  # the program started JAX itself before Ember
    import jax
    jax.devices()
import ember.runtime as rt
from ember.recorder import record
model = rt.load(sys.argv[1])
if order == "recording first":  # the README's order: load, then record around compile
    recording = record(sys.argv[3])
    recording.__enter__()
import jax
from jax._src import xla_bridge
x = {"x": jax.device_put(np.ones((256, 256), np.float32))}
call = (lambda x: rt.run(model, x)) if order == "eager" else rt.compile(model)
call(x)
ready = 0
for _ in range(20):
    (y,) = call(x).values()
    ready += bool(y.is_ready())  # right after the call returned: run inline, or not
value = float(np.asarray(y)[0, 0])
if order == "recording first":
    recording.__exit__(None, None, None)
print(json.dumps({"async": xla_bridge._CPU_ENABLE_ASYNC_DISPATCH.value, "ready": ready,
                  "value": value}))
"""


def _matmul_model(path) -> str:
    w = numpy_helper.from_array(np.full((256, 256), 0.5, np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256, 256])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return str(path)


def _probe(tmp_path, order: str, **env: str) -> dict:
    # the caller's own opt-out is not the case's
    model, trace = _matmul_model(tmp_path / "m.onnx"), str(tmp_path / "t.jsonl")
    return run_probe(
        _PROBE, model, order, trace, leave_out=lambda k: k == "EMBER_CPU_ASYNC_DISPATCH", **env
    )


def test_a_compiled_call_returns_with_its_results_ready(tmp_path):
    assert _probe(tmp_path, "ember") == {"async": False, "ready": 20, "value": 128.0}


def test_an_eager_run_asks_for_inline_programs_too(tmp_path):
    # (its MatMul reads the weight as numpy: copied in on JAX's threads each call, so the
    # op waits there; only the client's setting is the eager run's to make)
    got = _probe(tmp_path, "eager")
    assert got["async"] is False
    assert got["value"] == 128.0


def test_a_recording_opened_after_load_keeps_programs_inline(tmp_path):
    # record() never starts JAX's backend (the program's own settings must come first): the
    # meta line leaves the backend out, and the process record names it once the first call
    # started it, with load()'s inline setting already made
    got = _probe(tmp_path, "recording first")
    assert got == {"async": False, "ready": 20, "value": 128.0}
    records = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert records[0]["backend"] is None
    [process] = [r for r in records if r["kind"] == "process"]
    assert process["backend"] == "cpu"


def test_a_backend_the_program_started_first_is_left_as_it_is(tmp_path):
    # JAX's client reads the setting when it starts: Ember changes nothing after that
    got = _probe(tmp_path, "jax first")
    assert got["async"] is True
    assert got["ready"] < 20
    assert got["value"] == 128.0


def test_the_environment_keeps_jax_s_own_threads(tmp_path):
    got = _probe(tmp_path, "ember", EMBER_CPU_ASYNC_DISPATCH="true")
    assert got["async"] is True
    assert got["ready"] < 20
    assert got["value"] == 128.0
