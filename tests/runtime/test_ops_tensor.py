"""Values of the tensor ops (ember.runtime.ops.tensor) against onnx's reference.

Besides values, these tests pin down what the graph analysis relies on: shape arithmetic
on host values returns numpy (static inside ``jax.jit``), and every input that decides an
output shape is declared in ``host_inputs``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ember.runtime.ops import lookup
from tests.runtime.op_check import assert_matches, reference_op, run_op

rng = np.random.default_rng(2)
I64 = np.int64


def randn(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def ints(*values: int) -> np.ndarray:
    return np.array(values, I64)


def host(op_type: str, *inputs: Any, opset: int = 22, **attrs: Any) -> Any:
    opdef = lookup(op_type, opset)
    assert opdef is not None
    return opdef.fn(*inputs, **attrs)


def onnxruntime_op(
    op_type: str, inputs: list[Any], attrs: dict[str, Any], out_types: list[int], opset: int = 17
) -> list[np.ndarray]:
    """Outputs of onnxruntime for one node (where onnx's reference evaluator is wrong)."""
    import onnxruntime as ort

    names = [f"in{i}" for i in range(len(inputs))]
    outs = [f"out{i}" for i in range(len(out_types))]
    node = helper.make_node(op_type, names, outs, **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for n, v in zip(names, inputs, strict=True)
        ],
        [helper.make_tensor_value_info(n, t, None) for n, t in zip(outs, out_types, strict=True)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, dict(zip(names, inputs, strict=True)))


# ------------------------------------------------------------------ shape arithmetic


def test_shape_arithmetic_stays_static_inside_jit() -> None:
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape of a traced tensor: every
    intermediate is numpy, so the final Reshape gets a static shape."""
    seen: list[type] = []

    def model(x: Any) -> Any:
        dims = host("Shape", x)
        batch = host("Gather", dims, np.array(0, I64), axis=0)
        rest = host("ReduceProd", host("Slice", dims, ints(1), ints(99)), ints(0), keepdims=0)
        target = host(
            "Concat",
            host("Unsqueeze", batch, ints(0)),
            host("Unsqueeze", host("Cast", rest, to=TensorProto.INT64), ints(0)),
            axis=0,
        )
        seen.extend(type(v) for v in (dims, batch, rest, target))
        return host("Reshape", x, target)

    with jax.enable_x64(True):
        y = jax.jit(model)(jnp.ones((2, 3, 4), jnp.float32))
    assert y.shape == (2, 12)
    assert seen == [np.ndarray] * 4


def test_shape_start_end_and_size() -> None:
    x = jnp.zeros((2, 3, 4, 5))
    assert host("Shape", x).tolist() == [2, 3, 4, 5]
    assert host("Shape", x, start=1, end=-1).tolist() == [3, 4]
    assert host("Shape", x, start=-10, end=10).tolist() == [2, 3, 4, 5]
    assert host("Shape", x, start=3, end=1).tolist() == []
    size = host("Size", x)
    assert type(size) is np.ndarray
    assert size.dtype == I64
    assert int(size) == 120


@pytest.mark.parametrize(
    ("op_type", "opset", "expected"),
    [("Reshape", 14, (1,)), ("Expand", 13, (1,)), ("Tile", 13, (1,)),
     ("Slice", 13, (1, 2, 3, 4)), ("Squeeze", 13, (1,)), ("Unsqueeze", 13, (1,)),
     ("Split", 13, (1,)), ("ConstantOfShape", 20, (0,)), ("Range", 11, (0, 1, 2)),
     ("OneHot", 11, (1,)), ("Trilu", 14, (1,)), ("Pad", 18, (1, 3)),
     ("CenterCropPad", 18, (1,))],
)  # fmt: skip
def test_shape_deciding_inputs_are_host_inputs(op_type: str, opset: int, expected: tuple) -> None:
    assert set(expected) <= set(lookup(op_type, opset).host_inputs)


@pytest.mark.parametrize("op_type", ["NonZero", "Unique", "Compress"])
def test_value_shaped_ops_are_marked(op_type: str) -> None:
    assert lookup(op_type, 22).value_shaped


# ------------------------------------------------------------------------- reshaping


@pytest.mark.parametrize(
    ("shape", "allowzero"),
    [(ints(4, 0, -1), 0), (ints(0, 6), 0), (ints(-1), 0), (ints(2, 3, 4, 0), 1)],
)
def test_reshape_zero_copies_a_dim_unless_allowzero(shape: np.ndarray, allowzero: int) -> None:
    x = randn(4, 6) if not allowzero else np.zeros((0, 24), np.float32)
    assert_matches("Reshape", [x, shape], {"allowzero": allowzero}, opset=14)


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_flatten(axis: int) -> None:
    assert_matches("Flatten", [randn(2, 3, 4)], {"axis": axis})


def test_squeeze_and_unsqueeze_axes_as_input_and_as_attribute() -> None:
    x = randn(1, 3, 1, 2)
    assert_matches("Squeeze", [x, ints(0, -2)], opset=13)
    assert_matches("Squeeze", [x], opset=13)
    assert_matches("Squeeze", [x], {"axes": [2]}, opset=11)
    assert host("Squeeze", x, np.zeros(0, I64), opset=13).shape == (3, 2)
    (y,) = assert_matches("Unsqueeze", [randn(3, 2), ints(-1, 0)], opset=13)
    assert y.shape == (1, 3, 2, 1)
    (y,) = assert_matches("Unsqueeze", [randn(3, 2)], {"axes": [1, 3]}, opset=11)
    assert y.shape == (3, 1, 2, 1)


def test_transpose_default_reverses() -> None:
    assert_matches("Transpose", [randn(2, 3, 4)])
    assert_matches("Transpose", [randn(2, 3, 4)], {"perm": [1, 0, 2]})


def test_concat_negative_axis_and_empty_inputs() -> None:
    assert_matches("Concat", [randn(2, 3), randn(2, 0), randn(2, 1)], {"axis": -1})


def test_split_sizes_as_attribute_input_and_num_outputs() -> None:
    x = randn(7, 2)
    assert_matches("Split", [x], {"axis": 0, "split": [3, 4]}, n_outputs=2, opset=11)
    assert_matches("Split", [x, ints(2, 5)], {"axis": 0}, n_outputs=2, opset=13)
    # num_outputs not dividing the dim: the last chunk is smaller
    outs = assert_matches("Split", [x], {"axis": 0, "num_outputs": 3}, n_outputs=3, opset=18)
    assert [o.shape[0] for o in outs] == [3, 3, 1]


def test_split_without_sizes_needs_the_output_count() -> None:
    with pytest.raises(ValueError, match="num_outputs"):
        host("Split", randn(4), opset=13)
    outs = host("Split", randn(4, 2), axis=-1, num_outputs=2, opset=13)
    assert [o.shape for o in outs] == [(4, 1), (4, 1)]


@pytest.mark.parametrize(
    ("starts", "ends", "axes", "steps"),
    [
        (ints(1, 0), ints(3, 10), ints(0, 1), ints(1, 2)),
        (ints(-1), ints(-1000), ints(1), ints(-1)),  # reverse all of axis 1
        (ints(2**62), ints(-(2**62)), ints(0), ints(-2)),  # clamped huge bounds
        (ints(0, 1), ints(-1, 2**62), None, None),
        (ints(5), ints(1), ints(-1), None),  # empty
    ],
)
def test_slice_clamps_and_steps(starts: Any, ends: Any, axes: Any, steps: Any) -> None:
    x = randn(4, 6)
    inputs = [x, starts, ends, axes, steps]
    while inputs[-1] is None:
        inputs.pop()
    assert_matches("Slice", inputs, opset=13)


def test_slice_opset_1_attributes() -> None:
    x = randn(4, 6)
    (y,) = run_op("Slice", [x], {"starts": [1], "ends": [-1], "axes": [1]}, opset=1)
    np.testing.assert_array_equal(y, x[:, 1:-1])


def test_slice_of_a_host_shape_stays_numpy() -> None:
    out = host("Slice", ints(2, 3, 4), ints(-2), ints(2**62))
    assert type(out) is np.ndarray
    assert out.tolist() == [3, 4]


# ------------------------------------------------------------------ gather / scatter


def test_gather_negative_indices_traced() -> None:
    assert_matches("Gather", [randn(5, 3), ints(-1, 0, 4, -5).reshape(2, 2)], {"axis": 0})
    assert_matches("Gather", [randn(2, 5), np.array(-2, I64)], {"axis": 1})


def test_gather_elements_and_gather_nd_batch_dims() -> None:
    assert_matches(
        "GatherElements", [randn(3, 4), ints(0, -1, 2, 3, 1, 0).reshape(3, 2)], {"axis": 1}
    )
    data = randn(2, 3, 4)
    assert_matches("GatherND", [data, ints(1, 2, 0, -1).reshape(2, 2)])
    idx = ints(1, 2, 2, 3).reshape(2, 1, 2)
    (y,) = assert_matches("GatherND", [data, idx], {"batch_dims": 1})
    assert y.tolist() == [[data[0, 1, 2]], [data[1, 2, 3]]]


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements_reductions_with_duplicate_indices(reduction: str) -> None:
    data = randn(3, 4)
    indices = (
        ints(1, 1, -1, 0, 2, 2).reshape(3, 2)
        if reduction != "none"
        else ints(0, 2, 1, 3, 3, 0).reshape(3, 2)
    )
    attrs = {"axis": 1, "reduction": reduction}
    updates = randn(3, 2)
    (got,) = assert_matches("ScatterElements", [data, indices, updates], attrs, opset=18)
    on_host = host("ScatterElements", data, indices, updates, opset=18, **attrs)
    np.testing.assert_allclose(on_host, got, rtol=1e-6)
    assert not np.shares_memory(on_host, data)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd_reductions(reduction: str) -> None:
    data = randn(4, 3)
    indices = ints(1, 3, 1).reshape(3, 1) if reduction != "none" else ints(1, -1).reshape(2, 1)
    updates = randn(indices.shape[0], 3)
    assert_matches("ScatterND", [data, indices, updates], {"reduction": reduction}, opset=18)


def test_deprecated_scatter_is_scatter_elements() -> None:
    data, idx, upd = np.zeros((2, 3), np.float32), ints(2, 0).reshape(1, 2), randn(1, 2)
    (y,) = run_op("Scatter", [data, idx, upd], {"axis": 1}, opset=10)
    assert y[0].tolist() == [upd[0, 1], 0.0, upd[0, 0]]


# -------------------------------------------------------------------- broadcasting


def test_expand_is_bidirectional() -> None:
    (y,) = assert_matches("Expand", [randn(3, 1), ints(2, 1, 4)])
    assert y.shape == (2, 3, 4)
    assert_matches("Expand", [randn(2, 3), ints(3, 1, 1)])


def test_tile() -> None:
    assert_matches("Tile", [randn(2, 3), ints(2, 1)])


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_modes(mode: str) -> None:
    inputs: list[Any] = [randn(3, 5), ints(1, 0, 2, 2)]
    if mode == "constant":
        inputs.append(np.array(1.5, np.float32))
    assert_matches("Pad", inputs, {"mode": mode}, opset=19)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_negative_pads_crop(mode: str) -> None:
    # onnx's reference evaluator rejects negative pads; onnxruntime crops
    x = randn(3, 5)
    pads = ints(1, -1, -1, 2)
    (got,) = run_op("Pad", [x, pads], {"mode": mode}, opset=19)
    (want,) = onnxruntime_op("Pad", [x, pads], {"mode": mode}, [TensorProto.FLOAT], opset=19)
    np.testing.assert_array_equal(got, want)
    assert got.shape == (3, 6)


def test_pad_with_axes_and_integer_value() -> None:
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    (y,) = assert_matches("Pad", [x, ints(1, 2), np.array(-7, np.int32), ints(-1)], opset=18)
    assert y[0].tolist() == [-7, 0, 1, 2, -7, -7]


def test_pad_opset_2_attributes() -> None:
    (y,) = run_op(
        "Pad", [np.ones((1, 2), np.float32)], {"pads": [0, 1, 0, 0], "value": 3.0}, opset=2
    )
    assert y.tolist() == [[3.0, 1.0, 1.0]]


# ------------------------------------------------------------------- construction


def test_constant_all_value_attributes() -> None:
    t = numpy_helper.from_array(np.array([1.5, 2.0], np.float16))
    assert host("Constant", value=t).dtype == np.float16
    assert host("Constant", value=np.array([1, 2], np.int8)).dtype == np.int8
    assert host("Constant", value_float=1.5).dtype == np.float32
    assert host("Constant", value_floats=[1.0, 2.0]).shape == (2,)
    v = host("Constant", value_int=3)
    assert v.dtype == I64
    assert v.shape == ()
    assert int(v) == 3
    assert host("Constant", value_ints=[1, 2]).tolist() == [1, 2]
    assert host("Constant", value_string="ab").item() == "ab"
    assert host("Constant", value_strings=[b"a", "b"]).tolist() == ["a", "b"]
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([5.0], np.float32)),
        numpy_helper.from_array(ints(3)),
        [2, 2],
    )
    assert host("Constant", sparse_value=sparse).tolist() == [[0, 0], [0, 5]]
    with pytest.raises(ValueError, match="none of the value"):
        host("Constant")


def test_constant_of_shape_defaults_and_value() -> None:
    z = host("ConstantOfShape", ints(2, 3))
    assert type(z) is np.ndarray
    assert z.dtype == np.float32
    assert z.shape == (2, 3)
    assert not z.any()
    v = host("ConstantOfShape", ints(2), value=numpy_helper.from_array(ints(7)))
    assert v.dtype == I64
    assert v.tolist() == [7, 7]
    assert host("ConstantOfShape", ints(0)).shape == (0,)


@pytest.mark.parametrize(
    ("start", "limit", "delta"),
    [(3, 9, 2), (10, 4, -3), (1.0, 2.0, 0.3), (5, 5, 1), (5, 1, 1)],
)
def test_range(start: Any, limit: Any, delta: Any) -> None:
    dtype = np.float32 if isinstance(start, float) else I64
    args = [np.array(v, dtype) for v in (start, limit, delta)]
    (want,) = reference_op("Range", args, opset=11)
    got = host("Range", *args, opset=11)
    assert type(got) is np.ndarray
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot_negative_indices_and_axis(axis: int) -> None:
    indices = ints(0, -1, 2, 5, 1, -4).reshape(2, 3)
    values = np.array([-1.0, 2.0], np.float32)
    assert_matches("OneHot", [indices, np.array(4, I64), values], {"axis": axis}, opset=11)


@pytest.mark.parametrize(("upper", "k"), [(1, None), (0, None), (1, -1), (0, 2)])
def test_trilu(upper: int, k: Any) -> None:
    inputs = [randn(2, 3, 4)] + ([] if k is None else [np.array(k, I64)])
    assert_matches("Trilu", inputs, {"upper": upper}, opset=14)


def test_eye_like_dtype_and_offset() -> None:
    y = host("EyeLike", jnp.zeros((3, 4), jnp.float32), dtype=TensorProto.INT32, k=1)
    assert type(y) is np.ndarray
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, np.eye(3, 4, 1, dtype=np.int32))


# ---------------------------------------------------------------- value-shaped ops


def test_compress_with_and_without_axis() -> None:
    x = randn(3, 4)
    assert_matches("Compress", [x, np.array([True, False, True])], {"axis": 0})
    assert_matches("Compress", [x, np.array([False, True])], {"axis": -1})
    assert_matches("Compress", [x, np.array([0, 1, 1, 0, 1], bool)])


def test_non_zero() -> None:
    (y,) = assert_matches("NonZero", [np.array([[1, 0, 3], [0, 0, 2]], np.int32)])
    assert y.dtype == I64
    assert y.tolist() == [[0, 0, 1], [0, 2, 2]]


@pytest.mark.parametrize(("axis", "sorted_"), [(None, 1), (None, 0), (0, 1), (1, 0)])
def test_unique_sorted_and_in_first_occurrence_order(axis: Any, sorted_: int) -> None:
    x = np.array([[2, 1, 2], [0, 1, 0], [2, 1, 2]], np.float32)
    attrs: dict[str, Any] = {"sorted": sorted_}
    if axis is not None:
        attrs["axis"] = axis
    # onnx's reference evaluator gets sorted=0 wrong; onnxruntime is the reference here
    got = run_op("Unique", [x], attrs, opset=17)
    want = onnxruntime_op("Unique", [x], attrs, [TensorProto.FLOAT] + [TensorProto.INT64] * 3)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


# -------------------------------------------------------------------------- layout


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_and_back(mode: str) -> None:
    x = randn(1, 8, 2, 3)
    (y,) = assert_matches("DepthToSpace", [x], {"blocksize": 2, "mode": mode})
    assert y.shape == (1, 2, 4, 6)
    (back,) = run_op("SpaceToDepth", [y], {"blocksize": 2, "mode": mode}, opset=28)
    np.testing.assert_array_equal(back, x)
    assert_matches("SpaceToDepth", [x[:, :, :, :2]], {"blocksize": 2})


def test_reverse_sequence_batch_and_time_axes() -> None:
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    lens = ints(4, 3, 2, 1)
    assert_matches("ReverseSequence", [x, lens], {"batch_axis": 1, "time_axis": 0})
    assert_matches("ReverseSequence", [x, lens], {"batch_axis": 0, "time_axis": 1})


def test_dropout_inference_and_seeded_training() -> None:
    x = randn(3, 4)
    y, mask = run_op("Dropout", [x], opset=13)
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == np.bool_
    assert mask.all()
    inputs = [x, np.array(0.5, np.float32), np.array(True)]
    y, mask = host("Dropout", *inputs, seed=0, opset=13)
    want = reference_op("Dropout", inputs, {"seed": 0}, n_outputs=2, opset=13)
    np.testing.assert_allclose(y, want[0], rtol=1e-6)
    np.testing.assert_array_equal(mask, want[1])
    _, old_mask = run_op("Dropout", [x], {"ratio": 0.3}, opset=7)
    assert old_mask.dtype == np.float32
    assert (old_mask == 1).all()


def test_center_crop_pad() -> None:
    x = randn(5, 2, 3)
    assert_matches("CenterCropPad", [x, ints(3, 4)], {"axes": [0, 1]}, opset=18)


def test_identity_passes_the_value_through() -> None:
    x = jnp.ones(3)
    assert host("Identity", x) is x


def test_host_data_with_traced_indices_or_values() -> None:
    """An initializer (numpy) read through computed indices or padded with a computed
    value: the op must switch to jax rather than hand a tracer to numpy."""
    data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    idx = ints(1, 2, 0, -1).reshape(2, 2)
    with jax.enable_x64(True):
        got = jax.jit(lambda i: host("GatherND", data, i))(idx)
        padded = jax.jit(lambda v: host("Pad", data[0], ints(0, 1, 0, 1), v))(np.float32(7))
        taken = jax.jit(lambda i: host("Gather", data, i, axis=1))(ints(-1))
    np.testing.assert_array_equal(got, data[[1, 0], [2, -1]])
    assert np.asarray(padded)[:, 0].tolist() == [7.0] * 3
    np.testing.assert_array_equal(taken, data[:, [-1]])
