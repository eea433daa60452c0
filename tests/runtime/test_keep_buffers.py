"""A compiled program's per-call buffers stay in the process (``xla_cpu.keep_buffers``).

XLA:CPU mallocs a program's outputs and temporaries on every call. glibc hands a freed
block above its mmap threshold (at most 32 MiB by its own rule) back to the kernel, so the
next call faulted every page of it in again. Each case runs in a fresh Python (glibc's
thresholds move with what a process freed before): a model whose output is 40 MB, called
20 times to warm up, then 30 times with the page faults counted (``ru_minflt``). With
Ember's thresholds a call faults few of the output's pages (0 in most runs: the heap holds
the block; a run may grow the heap once or twice more); with glibc's it faults all of
them in every call.
"""

from __future__ import annotations

import platform
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ember.runtime.jit import xla_cpu
from tests.runtime.fresh_python import run_probe

N = 10_000_000  # float32 outputs: 40 MB, 9,766 pages of 4 KiB
PAGES = N * 4 // 4096

_PROBE = """
import json, resource, sys
import numpy as np
import ember.runtime as rt
from ember.runtime.jit import xla_cpu
call = rt.compile(rt.load(sys.argv[1]))
size = int(sys.argv[2])
x = {"x": np.full(size, 0.5, np.float32)}
for _ in range(20):
    call(x)["y"].block_until_ready()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(30):
    y = call(x)["y"]
    y.block_until_ready()
    del y
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 30
value = float(np.asarray(call(x)["y"])[-1])
print(json.dumps({"faults": faults, "kept": xla_cpu._kept, "value": value}))
"""

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="glibc's malloc thresholds",
)


def _save(graph, path) -> str:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return str(path)


def _model(path) -> str:
    """A model whose 40 MB output is a broadcast of its one-value input."""
    shape = numpy_helper.from_array(np.array([N], np.int64), "shape")
    graph = helper.make_graph(
        [
            helper.make_node("Expand", ["x", "shape"], ["e"]),
            helper.make_node("Add", ["e", "x"], ["y"]),
        ],
        "big_output",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [N])],
        [shape],
    )
    return _save(graph, path)


def _sum_model(path) -> str:
    """A model whose 40 MB input is summed: a numpy input is copied in on every call."""
    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["x"], ["y"], keepdims=1)],
        "big_input",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    return _save(graph, path)


def _probe(tmp_path, model=None, size: int = 1, **env: str) -> dict:
    # the caller's own malloc settings and opt-outs are not the case's
    path = model or _model(tmp_path / "m.onnx")
    return run_probe(_PROBE, path, str(size), leave_out=_malloc_setting, **env)


def _malloc_setting(name: str) -> bool:
    return name.startswith(("MALLOC_", "EMBER_CPU_")) or name == "GLIBC_TUNABLES"


def test_a_programs_large_output_is_not_faulted_in_again_on_every_call(tmp_path):
    got = _probe(tmp_path)
    assert got["value"] == 1.0
    # the mmap threshold sits above the 40 MB output (and at least glibc's 32 MiB ceiling)
    assert N * 4 < got["kept"] <= N * 4 + (2 << 20)
    assert got["faults"] < PAGES / 2


def test_with_the_opt_out_glibc_faults_the_whole_output_in_every_call(tmp_path):
    got = _probe(tmp_path, EMBER_CPU_KEEP_BUFFERS="0")
    assert got["value"] == 1.0
    assert got["kept"] == 0
    assert got["faults"] >= PAGES * 0.95


def test_a_large_numpy_input_copied_in_each_call_is_kept_too(tmp_path):
    got = _probe(tmp_path, _sum_model(tmp_path / "sum.onnx"), N)
    assert got["value"] == N / 2
    assert N * 4 < got["kept"] <= N * 4 + (2 << 20)
    assert got["faults"] < PAGES / 2


@pytest.mark.parametrize(
    "env",
    [
        {"MALLOC_MMAP_THRESHOLD_": "1048576"},
        {"MALLOC_TRIM_THRESHOLD_": "1048576"},
        {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=1048576"},
    ],
)
def test_a_users_own_malloc_thresholds_are_left_as_they_are(tmp_path, env):
    got = _probe(tmp_path, **env)
    assert got["value"] == 1.0
    assert got["kept"] == 0


def test_the_trim_threshold_given_to_mallopt_fits_a_c_int(monkeypatch):
    calls = []

    def mallopt(param: int, value: int) -> int:  # what the C function is given
        calls.append((param, value))
        return 1

    monkeypatch.setattr(xla_cpu, "_mallopt", lambda: mallopt)
    monkeypatch.setattr(xla_cpu, "_kept", 0)
    xla_cpu.keep_buffers({"temp_bytes": 3 << 30})
    assert calls == [(-1, 2**31 - 1), (-3, 1 << 30)]  # M_TRIM_THRESHOLD, M_MMAP_THRESHOLD
    xla_cpu.keep_buffers({"output_bytes": 100 << 20})  # never lowered
    assert len(calls) == 2
    assert xla_cpu._kept == 1 << 30
