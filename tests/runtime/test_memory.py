"""Device memory probes: real readings on the CPU, GPU key mapping at the memory_stats() edge."""

from __future__ import annotations

import gc
import json
import threading

import jax
import jax.numpy as jnp
import numpy as np
import psutil
import pytest
from onnx import TensorProto, helper

import ember.runtime as rt
from ember.recorder import record
from ember.runtime import memory
from ember.runtime.errors import InputError
from ember.schemas import validate_file


def _records(path, kind):
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in lines if r["kind"] == kind]


class _StubGpu:
    """A device as JAX shows one, stubbed only at ``memory_stats()``."""

    platform = "gpu"

    def __init__(self, id: int, stats):
        self.id = id
        self._stats = stats

    def memory_stats(self):
        return self._stats


XLA_GPU_STATS = {
    "bytes_in_use": 3_000,
    "peak_bytes_in_use": 7_000,
    "bytes_reserved": 8_192,
    "bytes_limit": 10_000,
    "largest_alloc_size": 4_096,
    "num_allocs": 12,
}


def test_cpu_reading_is_live_array_bytes_and_rss(tmp_path):
    gc.collect()
    keep = jnp.ones((128, 256), jnp.float32)  # 128 KiB that must show up
    (cpu,) = [d for d in jax.local_devices() if d.platform == "cpu"][:1]
    assert cpu.memory_stats() is None  # the reason for the live_arrays source

    path = tmp_path / "mem.jsonl"
    with record(path):
        (reading,) = memory.sample_device_memory([cpu])
    expected = sum(a.nbytes for a in jax.live_arrays() if cpu in a.devices())
    assert reading["source"] == "live_arrays"
    assert reading["device"] == "cpu:0"
    assert reading["used_bytes"] == expected
    assert reading["used_bytes"] >= keep.nbytes
    rss = psutil.Process().memory_info().rss
    assert 0 < reading["rss_bytes"] <= rss * 2
    # nothing is invented: the fields the CPU cannot know stay absent
    assert "peak_bytes" not in reading
    assert "limit_bytes" not in reading

    (rec,) = _records(path, "device_memory")
    assert rec["source"] == "live_arrays"
    assert rec["used_bytes"] == expected
    assert validate_file(path).ok


def test_cpu_reading_grows_by_exactly_a_new_array():
    gc.collect()
    (cpu,) = jax.local_devices()[:1]
    before = memory.read_device_memory([cpu])[0]["used_bytes"]
    extra = jnp.zeros((1000,), jnp.float64 if jax.config.jax_enable_x64 else jnp.float32)
    after = memory.read_device_memory([cpu])[0]["used_bytes"]
    assert after - before == extra.nbytes
    del extra
    gc.collect()
    assert memory.read_device_memory([cpu])[0]["used_bytes"] == before


def test_gpu_memory_stats_keys_map_onto_fields(tmp_path):
    path = tmp_path / "gpu.jsonl"
    with record(path):
        (reading,) = memory.sample_device_memory([_StubGpu(1, XLA_GPU_STATS)])
    assert reading["source"] == "memory_stats"
    assert reading["device"] == "gpu:1"
    assert reading["used_bytes"] == 3_000
    assert reading["peak_bytes"] == 7_000
    assert reading["reserved_bytes"] == 8_192
    assert reading["limit_bytes"] == 10_000
    assert reading["free_bytes"] == 7_000
    (rec,) = _records(path, "device_memory")
    assert {k: rec[k] for k in ("used_bytes", "peak_bytes", "free_bytes")} == {
        "used_bytes": 3_000,
        "peak_bytes": 7_000,
        "free_bytes": 7_000,
    }
    assert validate_file(path).ok


def test_stats_mapping_falls_back_and_leaves_unknown_fields_absent():
    # older jaxlibs call the pool "pool_bytes"; without a limit there is no free figure
    fields = memory.stats_to_fields({"bytes_in_use": 5, "pool_bytes": 9})
    assert fields == {"used_bytes": 5, "reserved_bytes": 9}


def test_device_that_raises_in_memory_stats_falls_back_to_live_arrays():
    class Raising(_StubGpu):
        platform = "cpu"

        def memory_stats(self):
            raise RuntimeError("not implemented on this backend")

    (reading,) = memory.read_device_memory([Raising(0, None)])
    assert reading["source"] == "live_arrays"


def _relu_model():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])],
    )
    return rt.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))


def test_track_device_memory_reads_at_each_model_call(tmp_path):
    compiled = rt.compile(_relu_model())
    x = np.ones((64, 64), np.float32)
    path = tmp_path / "calls.jsonl"
    stub = _StubGpu(0, XLA_GPU_STATS)
    kept = []
    with record(path):
        with memory.track_device_memory(devices=[stub]) as tracker:
            for _ in range(3):
                kept.append(compiled({"x": x}))
            with pytest.raises(InputError):  # a failed call is read too
                compiled({"x": np.ones((2, 2), np.float32)})
        compiled({"x": x})  # after stop: no reading
        with memory.track_device_memory() as cpu_tracker:  # the real CPU device
            kept.append(compiled({"x": x}))
    assert tracker.readings == 4
    assert cpu_tracker.readings == 1
    records = _records(path, "device_memory")
    calls = [r["span_id"] for r in _records(path, "span_start") if r["span_kind"] == "call"]
    assert [r["span_id"] for r in records] == calls[:4] + calls[5:]
    assert [r["source"] for r in records] == ["memory_stats"] * 4 + ["live_arrays"]
    # the CPU reading counts the outputs the calls returned and that are still alive
    outputs = sum(out["y"].nbytes for out in kept)
    assert records[-1]["used_bytes"] >= outputs
    assert validate_file(path).ok


def test_memory_sampler_reads_at_an_interval(tmp_path):
    path = tmp_path / "sampler.jsonl"
    stub = _StubGpu(0, XLA_GPU_STATS)
    enough = threading.Event()
    with record(path), memory.MemorySampler(0.005, devices=[stub]) as sampler:
        for _ in range(2000):  # wait for readings without asserting on time
            if sampler.samples >= 4:
                enough.set()
                break
            enough.wait(0.005)
    assert enough.is_set()
    assert len(_records(path, "device_memory")) == sampler.samples >= 5  # + one at stop
    assert validate_file(path).ok


def test_memory_sampler_errors():
    with pytest.raises(ValueError, match="interval_s must be > 0"):
        memory.MemorySampler(0)
    sampler = memory.MemorySampler(1.0, devices=[_StubGpu(0, XLA_GPU_STATS)]).start()
    try:
        with pytest.raises(RuntimeError, match="already started"):
            sampler.start()
    finally:
        sampler.stop()
    sampler.stop()  # stopping twice is harmless
