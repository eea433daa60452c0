"""Profile mode: op timings, tensor liveness, memory categories and edges, from real runs."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import ember.runtime as rt
from ember.recorder import record
from ember.runtime.errors import InputError, NodeError
from ember.schemas import validate_file

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def _read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _kind(records, kind):
    return [r for r in records if r["kind"] == kind]


def _hand_model() -> onnx.ModelProto:
    """X -> MatMul W -> Add B -> Relu -> Split (s2 unused) -> Mul const = y, Sigmoid = z.

    Also an input nothing reads (U) and an initializer nothing reads (Z).
    """
    f32 = np.float32
    inits = [
        numpy_helper.from_array(np.arange(24, dtype=f32).reshape(4, 6) / 24, "W"),
        numpy_helper.from_array(np.full(6, -0.25, f32), "B"),
        numpy_helper.from_array(np.zeros(5, f32), "Z"),
        numpy_helper.from_array(np.array([3, 3], np.int64), "split_sizes"),
    ]
    nodes = [
        helper.make_node("MatMul", ["X", "W"], ["mm"], name="matmul"),
        helper.make_node("Add", ["mm", "B"], ["pre"], name="add"),
        helper.make_node("Relu", ["pre"], ["act"], name="relu"),
        helper.make_node("Split", ["act", "split_sizes"], ["s1", "s2"], name="split", axis=1),
        helper.make_node(
            "Constant",
            [],
            ["c"],
            name="const",
            value=numpy_helper.from_array(np.array([1.0, 2.0, 3.0], f32)),
        ),
        helper.make_node("Mul", ["s1", "c"], ["y"], name="mul"),
        helper.make_node("Sigmoid", ["s1"], ["z"], name="sigmoid"),
    ]
    graph = helper.make_graph(
        nodes,
        "hand",
        [
            helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 4]),
            helper.make_tensor_value_info("U", TensorProto.FLOAT, [3]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3]),
        ],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


HAND_INPUTS = {
    "X": np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4),
    "U": np.ones(3, np.float32),
}


def _replay(memory_records):
    """Live bytes after each record, in file order: (peak, end)."""
    live = peak = 0
    for r in memory_records:
        live += r["bytes"] if r["action"] == "alloc" else -r["bytes"]
        peak = max(peak, live)
    return peak, live


@pytest.fixture(scope="module")
def hand_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("hand") / "profile.jsonl"
    with record(path):
        result = rt.profile(rt.load(_hand_model()), HAND_INPUTS)
    return path, _read(path), result


def test_hand_model_outputs_are_right(hand_trace):
    _, _, result = hand_trace
    w = np.arange(24, dtype=np.float32).reshape(4, 6) / 24
    act = np.maximum(HAND_INPUTS["X"] @ w - 0.25, 0)
    np.testing.assert_allclose(result.outputs["y"], act[:, :3] * [1, 2, 3], rtol=1e-6)
    np.testing.assert_allclose(result.outputs["z"], 1 / (1 + np.exp(-act[:, :3])), rtol=1e-6)


def test_hand_model_memory_by_hand(hand_trace):
    # bytes: X 32, U 12, W 96, B 24, Z 20, split_sizes 16, mm/pre/act 48, s1/s2 24,
    # c 12, y/z 24. Worked through node by node, the most alive at once is 252 bytes
    # (params 156 + act 48 + s1 24 + s2 24, while Split runs).
    path, records, result = hand_trace
    assert validate_file(path).ok
    memory = _kind(records, "memory")
    params = 96 + 24 + 20 + 16
    assert result.peak_bytes == 252
    assert result.end_bytes == params + 24 + 24
    assert _replay(memory) == (252, params + 48)
    freed = {r["tensor_id"] for r in memory if r["action"] == "free"}
    assert freed == {"X", "U", "mm", "pre", "act", "s1", "s2", "c"}


def test_hand_model_categories(hand_trace):
    _, records, result = hand_trace
    cats = {r["tensor_id"]: r["category"] for r in _kind(records, "tensor")}
    assert cats == result.categories
    assert cats == {
        "X": "input",
        "U": "input",
        "W": "parameter",
        "B": "parameter",
        "Z": "parameter",
        "split_sizes": "parameter",
        "mm": "activation",
        "pre": "activation",
        "act": "activation",
        "s1": "activation",
        "s2": "temporary",
        "c": "activation",
        "y": "output",
        "z": "output",
    }
    # a free is recorded right after the value's last reader, by that reader's op
    frees = {
        r["tensor_id"]: r["op_name"] for r in _kind(records, "memory") if r["action"] == "free"
    }
    assert frees["s1"] == "Sigmoid"
    assert frees["act"] == "Split"
    assert frees["s2"] == "Split"
    assert frees["U"] is None  # nothing reads it: freed at the start


def test_hand_model_op_records(hand_trace):
    _, records, _ = hand_trace
    ops = _kind(records, "op")
    assert [o["op_name"] for o in ops] == [
        "MatMul",
        "Add",
        "Relu",
        "Split",
        "Constant",
        "Mul",
        "Sigmoid",
    ]
    split = ops[3]
    assert split["inputs"] == ["act", "split_sizes"]
    assert split["output"] == "s1"
    assert split["shape"] == [2, 3]
    assert split["dtype"] == "float32"
    assert split["storage_bytes"] == 48  # both outputs
    assert split["input_storage_bytes"] == 48 + 16
    assert all(o["duration_ns"] > 0 for o in ops)
    assert ops[0]["device"] == "cpu:0"
    # ops run one after the other: each starts after the previous one ended
    for a, b in itertools.pairwise(ops):
        assert b["ts_ns"] >= a["ts_ns"] + a["duration_ns"]
    (run_start,) = [r for r in records if r["kind"] == "span_start" and r["span_kind"] == "run"]
    assert {r["span_id"] for r in ops + _kind(records, "memory")} == {run_start["span_id"]}


def test_hand_model_edges(hand_trace):
    _, records, _ = hand_trace
    edges = {(e["from_span"], e["to_span"]): e for e in _kind(records, "edge")}
    assert set(edges) == {
        ("matmul", "add"),
        ("add", "relu"),
        ("relu", "split"),
        ("split", "mul"),
        ("const", "mul"),
        ("split", "sigmoid"),
    }
    ops = {o["output"]: o for o in _kind(records, "op")}
    # split -> sigmoid waited for const and mul to run in between
    split_end = ops["s1"]["ts_ns"] + ops["s1"]["duration_ns"]
    assert edges[("split", "sigmoid")]["duration_ns"] >= ops["y"]["ts_ns"] - split_end


def _independent_live_sets(proto: onnx.ModelProto, order: list[str], sizes: dict[str, int]):
    """Largest live set, from the ONNX proto and the executed order alone.

    At the end of step k the live values are the parameters, the graph outputs produced
    so far, and every other value that exists by step k and is read at step k or later
    (the values step k produced count too, even if nothing reads them).
    """
    g = proto.graph
    params = {t.name for t in g.initializer}
    outputs = {o.name for o in g.output}
    by_output = {n.output[0]: n for n in g.node}
    nodes = [by_output[o] for o in order]
    # the step that makes each value (-1: a graph input) and the last step that reads it
    born = {i.name: -1 for i in g.input if i.name not in params}
    born |= {o: k for k, n in enumerate(nodes) for o in n.output if o}
    last_read = {i: k for k, n in enumerate(nodes) for i in n.input if i}
    best = sum(sizes[p] for p in params)
    for k in range(len(nodes)):
        live = set(params)
        for v, b in born.items():
            if b > k:
                continue
            if v in outputs or b == k or last_read.get(v, -1) >= k:
                live.add(v)
        best = max(best, sum(sizes[v] for v in live))
    end = sum(sizes[v] for v in params | outputs)
    return best, end


def test_light_squeezenet_memory_nets_to_params_plus_outputs(tmp_path):
    proto = onnx.load(str(LIGHT / "light_squeezenet.onnx"))
    model = rt.load(proto)
    x = np.random.default_rng(0).random((1, 3, 224, 224), np.float32)
    path = tmp_path / "squeezenet.jsonl"
    with record(path, model="light_squeezenet"):
        result = rt.profile(model, {"data_0": x})
    assert validate_file(path).ok
    records = _read(path)
    memory = _kind(records, "memory")
    sizes = {r["tensor_id"]: r["storage_bytes"] for r in _kind(records, "tensor")}
    param_bytes = sum(np.asarray(v).nbytes for v in model.graph.initializers.values())
    out_bytes = sum(np.asarray(v).nbytes for v in result.outputs.values())
    peak, end = _replay(memory)
    assert end == result.end_bytes == param_bytes + out_bytes
    order = [o["output"] for o in _kind(records, "op")]
    assert len(order) == len(proto.graph.node)
    expected_peak, expected_end = _independent_live_sets(proto, order, sizes)
    assert (peak, end) == (expected_peak, expected_end)
    assert result.peak_bytes == expected_peak
    # every value but the parameters and the outputs was freed
    alive = {r["tensor_id"] for r in memory if r["action"] == "alloc"} - {
        r["tensor_id"] for r in memory if r["action"] == "free"
    }
    assert alive == set(model.graph.initializers) | set(model.output_names)
    # and the numbers are those of a plain run
    reference = rt.run(model, {"data_0": x})
    np.testing.assert_allclose(
        np.asarray(result.outputs["softmaxout_1"]),
        np.asarray(reference["softmaxout_1"]),
        rtol=1e-5,
        atol=1e-7,
    )


def test_profile_takes_a_compiled_model_and_labels_the_step(tmp_path):
    compiled = rt.compile(rt.load(_hand_model()))
    path = tmp_path / "step.jsonl"
    with record(path, phase="train"):
        result = rt.profile(compiled, HAND_INPUTS, step="forward")
    ops = _kind(_read(path), "op")
    assert len(ops) == result.node_count == 7
    assert {o["step"] for o in ops} == {"forward"}
    assert validate_file(path).ok


def test_profile_without_a_recording_still_measures():
    result = rt.profile(rt.load(_hand_model()), **HAND_INPUTS)
    assert (result.peak_bytes, result.end_bytes) == (252, 204)


def test_wrong_inputs_are_named():
    with pytest.raises(InputError, match=r"missing input\(s\) \['U'\]"):
        rt.profile(rt.load(_hand_model()), {"X": HAND_INPUTS["X"]})


def test_failing_node_is_named_and_the_run_span_ends_in_error(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["A", "B"], ["C"], name="bad_matmul")],
        "bad",
        [
            helper.make_tensor_value_info("A", TensorProto.FLOAT, ["n", "k"]),
            helper.make_tensor_value_info("B", TensorProto.FLOAT, ["k2", "m"]),
        ],
        [helper.make_tensor_value_info("C", TensorProto.FLOAT, None)],
    )
    model = rt.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    path = tmp_path / "err.jsonl"
    with record(path), pytest.raises(NodeError, match="bad_matmul"):
        rt.profile(model, {"A": np.ones((2, 3), np.float32), "B": np.ones((4, 5), np.float32)})
    (end,) = [r for r in _read(path) if r["kind"] == "span_end"]
    assert end["span_kind"] == "run"
    assert end["status"] == "error"
    assert "bad_matmul" in end["error"]["reason"]
    assert validate_file(path).ok
