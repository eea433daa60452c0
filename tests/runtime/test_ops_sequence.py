"""Sequence and Optional ops: list semantics, positions, host/device values, errors."""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from ember.runtime.ops import lookup


def call(op_type: str, *args, opset: int = 17, **attrs):
    opdef = lookup(op_type, opset)
    assert opdef is not None, op_type
    with jax.enable_x64(True):
        return opdef.fn(*args, **attrs)


def test_construct_insert_at_erase_length() -> None:
    a, b, c = np.ones(2), np.zeros(3), np.arange(4.0)
    seq = call("SequenceConstruct", a, b)
    assert len(seq) == 2
    seq2 = call("SequenceInsert", seq, c, np.array(-1))
    assert [len(x) for x in seq2] == [2, 4, 3]
    assert len(seq) == 2, "insert must not modify its input sequence"
    assert [len(x) for x in call("SequenceInsert", seq, c)] == [2, 3, 4]
    np.testing.assert_array_equal(call("SequenceAt", seq2, np.array(1, np.int64)), c)
    np.testing.assert_array_equal(call("SequenceAt", seq2, np.array(-3)), a)
    erased = call("SequenceErase", seq2, np.array(0))
    assert [len(x) for x in erased] == [4, 3]
    assert [len(x) for x in call("SequenceErase", seq2)] == [2, 4]
    length = call("SequenceLength", erased)
    assert length.dtype == np.int64
    assert int(length) == 2
    assert call("SequenceEmpty", dtype=1) == []


def test_positions_out_of_range_are_errors() -> None:
    seq = [np.ones(1), np.ones(2)]
    with pytest.raises(IndexError, match="position 2"):
        call("SequenceAt", seq, np.array(2))
    with pytest.raises(IndexError, match="position -3"):
        call("SequenceInsert", seq, np.ones(1), np.array(-3))
    with pytest.raises(IndexError, match="empty"):
        call("SequenceErase", [])


@pytest.mark.parametrize(
    ("split", "attrs"),
    [
        (None, {"axis": 1}),
        (None, {"axis": 1, "keepdims": 0}),
        (np.array(2, np.int64), {"axis": 1}),
        (np.array([1, 3, 1], np.int64), {"axis": -1}),
    ],
)
def test_split_to_sequence_matches_reference(split, attrs) -> None:
    x = np.arange(15, dtype=np.float32).reshape(3, 5)
    got = call("SplitToSequence", jnp.asarray(x), split, **attrs)
    inputs = ["x"] + (["s"] if split is not None else [])
    node = helper.make_node("SplitToSequence", inputs, ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", 1, x.shape)]
        + ([helper.make_tensor_value_info("s", 7, split.shape)] if split is not None else []),
        [helper.make_tensor_sequence_value_info("y", 1, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": x} | ({"s": split} if split is not None else {})
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert isinstance(g, jax.Array)
        np.testing.assert_array_equal(np.asarray(g), w)


def test_split_to_sequence_keeps_host_values_on_the_host() -> None:
    parts = call("SplitToSequence", np.arange(6).reshape(2, 3), None, axis=0)
    assert all(isinstance(p, np.ndarray) for p in parts)


@pytest.mark.parametrize("new_axis", [0, 1])
def test_concat_from_sequence(new_axis: int) -> None:
    seq = [jnp.ones((2, 3)), jnp.zeros((2, 3))]
    out = call("ConcatFromSequence", seq, axis=1, new_axis=new_axis)
    want = (
        np.stack([np.ones((2, 3)), np.zeros((2, 3))], 1)
        if new_axis
        else np.concatenate([np.ones((2, 3)), np.zeros((2, 3))], 1)
    )
    np.testing.assert_array_equal(np.asarray(out), want)


def test_sequence_ops_work_under_jit() -> None:
    def f(a, b):
        seq = call("SequenceConstruct", a, b)
        seq = call("SequenceInsert", seq, a * 2, np.array(1))
        return call("ConcatFromSequence", seq, axis=0)

    with jax.enable_x64(True):
        out = jax.jit(f)(jnp.ones(2), jnp.zeros(1))
    np.testing.assert_array_equal(np.asarray(out), [1, 1, 2, 2, 0])


class _Body:
    """A stand-in for the interpreter's Subgraph: a callable with output names."""

    output_names: ClassVar[list[str]] = ["shape", "twice"]

    def __call__(self, x, k):
        return (np.asarray(np.shape(x), np.int64), x * k)


def test_sequence_map_runs_the_body_per_element() -> None:
    seq = [np.ones(2), np.ones(3)]
    shapes, twice = call("SequenceMap", seq, [np.array(2.0), np.array(3.0)], body=_Body())
    assert [s.tolist() for s in shapes] == [[2], [3]]
    np.testing.assert_array_equal(twice[1], np.full(3, 3.0))
    _, same_k = call("SequenceMap", seq, np.array(5.0), body=_Body())
    np.testing.assert_array_equal(same_k[0], [5.0, 5.0])


def test_optional_ops() -> None:
    x = jnp.arange(3)
    assert call("Optional", x, opset=18) is x
    assert call("Optional", opset=18) is None
    assert bool(call("OptionalHasElement", x, opset=18)) is True
    has = call("OptionalHasElement", None, opset=18)
    assert has.dtype == np.bool_
    assert not bool(has)
    seq = [np.ones(1)]
    assert call("OptionalGetElement", seq, opset=18) is seq
    with pytest.raises(ValueError, match="empty optional"):
        call("OptionalGetElement", None, opset=18)
