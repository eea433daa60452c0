"""One-hot products run as row lookups (runtime/graph/one_hot.py, OneHotMatMul in
ops/linalg.py): when the rewrite happens, when it must not, and that the values stay those
of onnx's reference evaluator, for ids inside and outside the table."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import ember.runtime as rt
from tests.runtime.models import make_model, tensor

K, N, L = 11, 5, 7


def _init(name: str, value: np.ndarray) -> TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def _embedding(
    *,
    table: np.ndarray | None = None,
    ids_shape: tuple[int, ...] = (2, L, 1),
    range_shape: tuple[int, ...] = (1, 1, K),
    range_first: bool = False,
    extra_read: bool = False,
    dtype: int = TensorProto.INT32,
) -> object:
    """magika's byte embedding: ``y = MatMul(Cast(Equal(ids, 0..K-1)), table)`` (+ the
    one-hot itself as a second output with ``extra_read``)."""
    if table is None:
        table = np.random.default_rng(0).standard_normal((K, N)).astype(np.float32)
    np_dtype = np.int32 if dtype == TensorProto.INT32 else np.int64
    pair = ["range", "ids"] if range_first else ["ids", "range"]
    nodes = [
        helper.make_node("Equal", pair, ["hot"]),
        helper.make_node("Cast", ["hot"], ["hot_f"], to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["hot_f", "table"], ["y"]),
    ]
    outputs = [tensor("y", shape=["a", "b", "c"][: len(ids_shape)])]
    if extra_read:
        outputs.append(tensor("hot_f", shape=["a", "b", "c"][: len(ids_shape)]))
    inits = [
        _init("range", np.arange(K, dtype=np_dtype).reshape(range_shape)),
        _init("table", table),
    ]
    return make_model(nodes, [tensor("ids", dtype, list(ids_shape))], outputs, inits)


def _ids(shape: tuple[int, ...], dtype: type = np.int32) -> np.ndarray:
    # ids inside the table, at its ends, and outside it on both sides (zero rows)
    values = np.array([0, K - 1, 3, -1, K, 1000, -1000, 5], dtype)
    return np.resize(values, shape).astype(dtype)


def _op_types(model: object) -> list[str]:
    return [n.op_type for n in rt.load(model.SerializeToString()).graph.nodes]


@pytest.mark.parametrize("range_first", [False, True])
@pytest.mark.parametrize("dtype", [TensorProto.INT32, TensorProto.INT64])
def test_a_one_hot_product_is_one_lookup_with_the_reference_values(range_first, dtype):
    model = _embedding(range_first=range_first, dtype=dtype)
    assert _op_types(model) == ["OneHotMatMul"]
    ids = _ids((2, L, 1), np.int32 if dtype == TensorProto.INT32 else np.int64)
    (want,) = ReferenceEvaluator(model).run(None, {"ids": ids})
    compiled = rt.compile(model)
    got = np.asarray(compiled({"ids": ids})["y"])
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.float32
    # ids outside 0..K-1 pick no row: zeros, as the one-hot of them is all zeros
    assert not got[ids[..., 0] >= K].any()
    assert not got[ids[..., 0] < 0].any()
    np.testing.assert_array_equal(np.asarray(rt.run(model, {"ids": ids})["y"]), want)


@pytest.mark.parametrize(
    ("dtype", "k"), [(TensorProto.UINT8, 256), (TensorProto.INT8, 128), (TensorProto.INT16, 300)]
)
def test_a_table_as_long_as_the_ids_type_can_count_keeps_every_row(dtype, k):
    # uint8 ids of a 256-row table (a byte embedding): compared in uint8, ids < 256 wrapped
    # to ids < 0, and every row came out zero (found by review)
    np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
    table = np.arange(k * 2, dtype=np.float32).reshape(k, 2) + 1
    model = make_model(
        [
            helper.make_node("Equal", ["ids", "range"], ["hot"]),
            helper.make_node("Cast", ["hot"], ["hot_f"], to=TensorProto.FLOAT),
            helper.make_node("MatMul", ["hot_f", "table"], ["y"]),
        ],
        [tensor("ids", dtype, [4, 1])],
        [tensor("y", shape=[4, 2])],
        [_init("range", np.arange(k).astype(np_dtype)), _init("table", table)],
    )
    assert _op_types(model) == ["OneHotMatMul"]
    info = np.iinfo(np_dtype)
    ids = np.array([[0], [min(k - 1, info.max)], [7], [max(info.min, -1)]], np_dtype)
    (want,) = ReferenceEvaluator(model).run(None, {"ids": ids})
    np.testing.assert_array_equal(np.asarray(rt.compile(model)({"ids": ids})["y"]), want)
    np.testing.assert_array_equal(np.asarray(rt.run(model, {"ids": ids})["y"]), want)


def test_a_cast_of_opset_one_names_its_type_and_is_left_alone():
    # Cast-1's ``to`` is a string ("FLOAT"): the rewrite raised ValueError at load (review)
    model = _embedding()
    model.opset_import[0].version = 5
    cast = model.graph.node[1]
    del cast.attribute[:]
    cast.attribute.append(helper.make_attribute("to", "FLOAT"))
    assert _op_types(model) == ["Equal", "Cast", "MatMul"]


def test_ids_whose_last_axis_is_not_one_are_computed_as_written():
    # Equal(ids [2, K], range [1, K]) is no one-hot of ids: the op runs the three ops
    model = _embedding(ids_shape=(2, K), range_shape=(1, K))
    assert _op_types(model) == ["OneHotMatMul"]
    ids = np.tile(np.arange(K, dtype=np.int32), (2, 1))
    ids[1, ::2] = -3
    (want,) = ReferenceEvaluator(model).run(None, {"ids": ids})
    np.testing.assert_allclose(np.asarray(rt.compile(model)({"ids": ids})["y"]), want, rtol=1e-6)


def test_a_one_hot_that_is_read_elsewhere_or_a_table_with_infinities_is_left_alone():
    shared = _embedding(extra_read=True)
    assert _op_types(shared) == ["Equal", "Cast", "MatMul"]
    ids = _ids((2, L, 1))
    want = ReferenceEvaluator(shared).run(None, {"ids": ids})
    got = rt.compile(shared)({"ids": ids})
    np.testing.assert_array_equal(np.asarray(got["y"]), want[0])
    np.testing.assert_array_equal(np.asarray(got["hot_f"]), want[1])
    # 0 * inf is NaN in the product; the rows would not say so
    table = np.ones((K, N), np.float32)
    table[2, 1] = np.inf
    model = _embedding(table=table)
    assert _op_types(model) == ["Equal", "Cast", "MatMul"]
    with np.errstate(invalid="ignore"):  # the reference's own 0 * inf
        (want_inf,) = ReferenceEvaluator(model).run(None, {"ids": ids})
    got_inf = np.asarray(rt.compile(model)({"ids": ids})["y"])
    np.testing.assert_array_equal(np.isnan(got_inf), np.isnan(want_inf))


def test_a_range_that_is_not_zero_to_k_is_left_alone():
    model = _embedding()
    shifted = np.arange(1, K + 1, dtype=np.int32).reshape(1, 1, K)
    model.graph.initializer[0].CopyFrom(_init("range", shifted))
    assert _op_types(model) == ["Equal", "Cast", "MatMul"]
    ids = _ids((2, L, 1))
    (want,) = ReferenceEvaluator(model).run(None, {"ids": ids})
    np.testing.assert_array_equal(np.asarray(rt.compile(model)({"ids": ids})["y"]), want)
