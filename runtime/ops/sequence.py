"""Sequence and Optional ops.

A sequence value is a Python ``list`` of arrays; an optional value is ``None`` (empty) or
the value itself. Positions and split sizes pick elements or decide shapes, so they are
host inputs. Sequence lengths are static, so ``SequenceLength`` answers on the host.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import op, xp


def _position(seq: list, position: Any, *, insert: bool = False) -> int:
    n = len(seq)
    p = int(np.asarray(position).reshape(-1)[0])
    limit = n if insert else n - 1
    if not -n <= p <= limit:
        raise IndexError(f"sequence position {p} is out of range for a sequence of {n}")
    return p + n if p < 0 else p


@op("SequenceConstruct", since=11)
def sequence_construct(*inputs: Any) -> list:
    """A sequence (Python list) of the inputs; opset 11+."""
    return list(inputs)


@op("SequenceEmpty", since=11)
def sequence_empty(*, dtype: int | None = None) -> list:
    """An empty sequence; opset 11+."""
    return []


@op("SequenceAt", since=11, host_inputs=(1,))
def sequence_at(input_sequence: list, position: Any) -> Any:
    """The tensor at ``position`` (negatives count back); opset 11+."""
    return input_sequence[_position(input_sequence, position)]


@op("SequenceInsert", since=11, host_inputs=(2,))
def sequence_insert(input_sequence: list, tensor: Any, position: Any = None) -> list:
    """The sequence with ``tensor`` inserted at ``position`` (appended when absent); opset 11+."""
    out = list(input_sequence)
    if position is None:
        out.append(tensor)
    else:
        out.insert(_position(out, position, insert=True), tensor)
    return out


@op("SequenceErase", since=11, host_inputs=(1,))
def sequence_erase(input_sequence: list, position: Any = None) -> list:
    """The sequence without the tensor at ``position`` (the last when absent); opset 11+."""
    out = list(input_sequence)
    if not out:
        raise IndexError("SequenceErase on an empty sequence")
    del out[-1 if position is None else _position(out, position)]
    return out


@op("SequenceLength", since=11)
def sequence_length(input_sequence: list) -> np.ndarray:
    """The number of tensors in the sequence, as an int64 scalar; opset 11+."""
    return np.asarray(len(input_sequence), dtype=np.int64)


@op("SplitToSequence", since=11, host_inputs=(1,))
def split_to_sequence(input: Any, split: Any = None, *, axis: int = 0, keepdims: int = 1) -> list:
    """``input`` split along ``axis`` into a sequence (by ``split`` or in ones); opset 11+."""
    m = xp(input)
    axis = axis % np.ndim(input)
    size = np.shape(input)[axis]
    if split is None:
        parts = [m.take(input, np.array([i]), axis=axis) for i in range(size)]
        return [m.squeeze(p, axis=axis) for p in parts] if not keepdims else parts
    s = np.asarray(split)
    if s.ndim == 0:
        step = int(s)
        bounds = list(range(step, size, step))
    else:
        bounds = list(np.cumsum(s)[:-1])
    return list(m.split(input, bounds, axis=axis))


@op("ConcatFromSequence", since=11)
def concat_from_sequence(input_sequence: list, *, axis: int, new_axis: int = 0) -> Any:
    """The sequence's tensors joined along ``axis`` (stacked with new_axis); opset 11+."""
    m = xp(*input_sequence)
    if new_axis:
        return m.stack(input_sequence, axis=axis)
    return m.concatenate(input_sequence, axis=axis)


@op("SequenceMap", since=17, subgraphs=True)
def sequence_map(input_sequence: list, *additional_inputs: Any, body: Any) -> tuple[list, ...]:
    """The ``body`` subgraph applied to each item; one sequence per body output; opset 17+."""
    n_out = len(body.output_names)
    outs: list[list] = [[] for _ in range(n_out)]
    for i, item in enumerate(input_sequence):
        extra = [a[i] if isinstance(a, list) else a for a in additional_inputs]
        for k, v in enumerate(body(item, *extra)):
            outs[k].append(v)
    return tuple(outs)


@op("Optional", since=15)
def optional(input: Any = None, *, type: Any = None) -> Any:
    """An optional holding ``input`` (None for an empty one); opset 15+."""
    return input


@op("OptionalHasElement", since=15)
def optional_has_element(input: Any = None) -> np.ndarray:
    """True when the optional (or optional input) holds a value; opset 15+."""
    return np.asarray(input is not None)


@op("OptionalGetElement", since=15)
def optional_get_element(input: Any) -> Any:
    """The value an optional holds; an error for an empty one; opset 15+."""
    if input is None:
        raise ValueError("OptionalGetElement on an empty optional: check OptionalHasElement first")
    return input
