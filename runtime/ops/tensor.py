"""Shape, layout, broadcasting and construction ops.

Shape, Size, EyeLike and ConstantOfShape read only static shapes or host values, so
they always return numpy: ``Shape -> Gather -> Concat -> Reshape`` chains stay on the
host and become static values inside ``jax.jit``. Inputs that decide an output shape are
declared in ``host_inputs`` and read with ``np.asarray``. Indexing (gather/scatter) and the
value-shaped ops are in ``indexing.py``.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ember.runtime.ops import op, xp

from ._common import as_str as _str
from ._common import flat_ints as ints_or_default
from ._common import host as _host

Array = Any


def normalized_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _tensor_attr(value: Any) -> np.ndarray:
    """A tensor attribute, given by the interpreter as numpy or as a ``TensorProto``."""
    if hasattr(value, "dims") and hasattr(value, "data_type"):
        import onnx.numpy_helper

        return onnx.numpy_helper.to_array(value)
    return np.asarray(value)


# ----------------------------------------------------------------------- shapes


@op("Shape")
def shape(data: Array, *, start: int = 0, end: int | None = None) -> np.ndarray:
    """The dims of ``data`` as int64, from ``start`` to ``end`` (negatives count back); opset 1+."""
    dims = np.asarray(np.shape(data), np.int64)
    rank = len(dims)
    lo = min(max(normalized_axis(start, rank), 0), rank)
    hi = rank if end is None else min(max(normalized_axis(end, rank), 0), rank)
    return dims[lo:hi].copy()


@op("Size")
def size(data: Array) -> np.ndarray:
    """The number of elements of ``data`` as an int64 scalar; opset 1+."""
    return np.asarray(int(np.prod(data.shape, dtype=np.int64)), dtype=np.int64)


def _reshape(data: Array, shape: Any, allowzero: int) -> Array:
    target = ints_or_default(shape)
    if not allowzero:
        target = [data.shape[i] if d == 0 else d for i, d in enumerate(target)]
    return _host(xp(data).reshape(data, target))


@op("Reshape")
def reshape_v1(data: Array, *, shape: Any = (), consumed_inputs: Any = None) -> Array:
    """``data`` reshaped to the ``shape`` attribute (0 copies a dim, -1 infers one); opsets 1-4."""
    return _reshape(data, shape, 0)


@op("Reshape", since=5, host_inputs=(1,))
def reshape(data: Array, shape: Array, *, allowzero: int = 0) -> Array:
    """``data`` reshaped to the ``shape`` input (0 copies a dim unless ``allowzero``); opset 5+."""
    return _reshape(data, shape, allowzero)


@op("Flatten")
def flatten(input: Array, *, axis: int = 1) -> Array:
    """``input`` as 2-D: the dims before ``axis`` make the rows, the rest the columns; opset 1+."""
    axis = normalized_axis(axis, input.ndim)
    rows = int(np.prod(input.shape[:axis], dtype=np.int64))
    cols = int(np.prod(input.shape[axis:], dtype=np.int64))
    return _host(xp(input).reshape(input, (rows, cols)))


def _squeeze(data: Array, axes: list[int] | None) -> Array:
    m = xp(data)
    if not axes:  # absent or empty: every dim of size 1 (as onnxruntime does)
        axes = [i for i, d in enumerate(data.shape) if d == 1]
    return _host(m.squeeze(data, axis=tuple(normalized_axis(a, data.ndim) for a in axes)))


@op("Squeeze")
def squeeze_v1(data: Array, *, axes: Any = None) -> Array:
    """``data`` without the size-1 dims in ``axes`` (attribute; all when absent); opsets 1-12."""
    return _squeeze(data, None if axes is None else ints_or_default(axes))


@op("Squeeze", since=13, host_inputs=(1,))
def squeeze(data: Array, axes: Array | None = None) -> Array:
    """``data`` without the size-1 dims in ``axes`` (input; all when absent); opset 13+."""
    return _squeeze(data, None if axes is None else ints_or_default(axes))


def _unsqueeze(data: Array, axes: list[int]) -> Array:
    rank = data.ndim + len(axes)
    shape = list(data.shape)
    for a in sorted(normalized_axis(a, rank) for a in axes):
        shape.insert(a, 1)
    return _host(xp(data).reshape(data, shape))


@op("Unsqueeze")
def unsqueeze_v1(data: Array, *, axes: Any = ()) -> Array:
    """``data`` with size-1 dims inserted at ``axes`` (attribute); opsets 1-12."""
    return _unsqueeze(data, ints_or_default(axes))


@op("Unsqueeze", since=13, host_inputs=(1,))
def unsqueeze(data: Array, axes: Array) -> Array:
    """``data`` with size-1 dims inserted at ``axes`` (input); opset 13+."""
    return _unsqueeze(data, ints_or_default(axes))


@op("Transpose")
def transpose(data: Array, *, perm: Any = None) -> Array:
    """``data`` with its dims permuted by ``perm`` (reversed when absent); opset 1+."""
    axes = None if perm is None else ints_or_default(perm)
    return _host(xp(data).transpose(data, axes))


@op("Concat")
def concat(*inputs: Array, axis: int = 1) -> Array:
    """The inputs joined along ``axis``; opset 1+."""
    m = xp(*inputs)
    if m is np and any(x.dtype.kind == "O" for x in inputs):
        return np.concatenate([np.asarray(x, dtype=object) for x in inputs], axis=axis)
    return _host(m.concatenate(inputs, axis=axis))


def _split(input: Array, split: Any, axis: int, num_outputs: int | None) -> tuple[Array, ...]:
    m = xp(input)
    axis = normalized_axis(axis, input.ndim)
    dim = input.shape[axis]
    if split is not None and len(ints_or_default(split)) > 0:
        sizes = ints_or_default(split)
    else:
        if not num_outputs:
            raise ValueError(
                "Split without 'split' sizes needs num_outputs (the interpreter passes "
                "the node's output count)"
            )
        chunk = -(-dim // num_outputs)
        sizes = [min(chunk, dim - i * chunk) for i in range(num_outputs)]
    bounds = np.cumsum([0] + sizes)
    index = [slice(None)] * input.ndim
    outputs = []
    for lo, hi in itertools.pairwise(bounds):
        index[axis] = slice(int(lo), int(hi))
        outputs.append(_host(m.asarray(input[tuple(index)])))
    return tuple(outputs)


@op("Split")
def split_v1(
    input: Array,
    split: Array | None = None,
    *,
    axis: int = 0,
    num_outputs: int | None = None,
) -> tuple[Array, ...]:
    # opsets 2-12 give ``split`` as an attribute; it binds to the same parameter
    """``input`` cut along ``axis`` by the ``split`` attribute, or in equal parts; opsets 1-12."""
    return _split(input, split, axis, num_outputs)


@op("Split", since=13, host_inputs=(1,))
def split(
    input: Array, split: Array | None = None, *, axis: int = 0, num_outputs: int | None = None
) -> tuple[Array, ...]:
    """``input`` cut along ``axis`` by the ``split`` input, or into ``num_outputs``; opset 13+."""
    return _split(input, split, axis, num_outputs)


def _slice(data: Array, starts: Any, ends: Any, axes: Any = None, steps: Any = None) -> Array:
    starts, ends = ints_or_default(starts), ints_or_default(ends)
    axes = list(range(len(starts))) if axes is None else ints_or_default(axes)
    steps = [1] * len(starts) if steps is None else ints_or_default(steps)
    index = [slice(None)] * data.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        axis = normalized_axis(axis, data.ndim)
        dim = data.shape[axis]
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        else:
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
        index[axis] = slice(start, None if end < 0 else end, step)
    return _host(data[tuple(index)])


@op("Slice")
def slice_v1(data: Array, *, starts: Any, ends: Any, axes: Any = None) -> Array:
    """``data[starts:ends]`` on ``axes``, bounds as attributes; opsets 1-9."""
    return _slice(data, starts, ends, axes)


@op("Slice", since=10, host_inputs=(1, 2, 3, 4))
def slice_(
    data: Array,
    starts: Array,
    ends: Array,
    axes: Array | None = None,
    steps: Array | None = None,
) -> Array:
    """``data[starts:ends:steps]`` on ``axes``, bounds as inputs; opset 10+."""
    return _slice(data, starts, ends, axes, steps)


# ------------------------------------------------------------------ broadcasting


@op("Expand", since=8, host_inputs=(1,))
def expand(input: Array, shape: Array) -> Array:
    """``input`` broadcast to ``shape`` (numpy rules, so dims may also grow); opset 8+."""
    target = np.broadcast_shapes(tuple(input.shape), tuple(ints_or_default(shape)))
    m = xp(input)
    out = m.broadcast_to(input, target)
    return np.array(out) if m is np else out


@op("Tile", since=6, host_inputs=(1,))
def tile(input: Array, repeats: Array) -> Array:
    """``input`` repeated ``repeats[i]`` times along each dim i; opset 6+."""
    return _host(xp(input).tile(input, ints_or_default(repeats)))


def _pad(
    data: Array, pads: list[int], mode: str, value: Any, axes: list[int] | None = None
) -> Array:
    m = xp(data)
    rank = data.ndim
    axes = list(range(rank)) if axes is None else [normalized_axis(a, rank) for a in axes]
    n = len(axes)
    before, after = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        before[a], after[a] = pads[i], pads[i + n]
    # Negative pads crop; crop first, then pad with the non-negative amounts.
    crop = tuple(
        slice(max(-b, 0), dim - max(-e, 0))
        for dim, b, e in zip(data.shape, before, after, strict=True)
    )
    data = data[crop]
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(before, after, strict=True)]
    mode = _str(mode)
    if mode == "constant":
        fill = 0 if value is None else value
        m = xp(data, fill)  # a computed pad value makes a host tensor a jax one
        if m is np:
            fill = np.asarray(fill).reshape(()).astype(data.dtype).item()
        else:
            fill = m.asarray(fill).reshape(()).astype(data.dtype)
        return _host(m.pad(data, widths, mode="constant", constant_values=fill))
    return _host(m.pad(data, widths, mode=mode))


@op("Pad")
def pad_v1(
    data: Array,
    *,
    pads: Any = None,
    paddings: Any = None,
    mode: str = "constant",
    value: float = 0.0,
) -> Array:
    """``data`` padded by ``pads`` (attribute): constant, reflect or edge; opsets 1-10."""
    return _pad(data, ints_or_default(pads if pads is not None else paddings), mode, value)


@op("Pad", since=11, host_inputs=(1, 3))
def pad(
    data: Array,
    pads: Array,
    constant_value: Array | None = None,
    axes: Array | None = None,
    *,
    mode: str = "constant",
) -> Array:
    """``data`` padded (or cropped, negative pads) by the ``pads`` input on ``axes``; opset 11+."""
    return _pad(
        data,
        ints_or_default(pads),
        mode,
        constant_value,
        None if axes is None else ints_or_default(axes),
    )


# ------------------------------------------------------------------- construction


@op("ConstantOfShape", since=9, host_inputs=(0,))
def constant_of_shape(input: Array, *, value: Any = None) -> np.ndarray:
    """A tensor of the given shape filled with ``value`` (float32 zero); opset 9+."""
    fill = np.zeros(1, np.float32) if value is None else _tensor_attr(value)
    return np.full(tuple(ints_or_default(input)), fill.reshape(-1)[0], dtype=fill.dtype)


@op("Constant")
def constant(
    *,
    value: Any = None,
    value_float: float | None = None,
    value_floats: Any = None,
    value_int: int | None = None,
    value_ints: Any = None,
    value_string: Any = None,
    value_strings: Any = None,
    sparse_value: Any = None,
) -> np.ndarray:
    """The value of its one ``value*`` attribute (tensor, scalar, list or sparse); opset 1+."""
    if value is not None:
        return _tensor_attr(value)
    if value_float is not None:
        return np.asarray(value_float, dtype=np.float32)
    if value_floats is not None:
        return np.asarray(list(value_floats), dtype=np.float32)
    if value_int is not None:
        return np.asarray(value_int, dtype=np.int64)
    if value_ints is not None:
        return np.asarray(list(value_ints), dtype=np.int64)
    if value_string is not None:
        return np.asarray(_str(value_string), dtype=object)
    if value_strings is not None:
        return np.asarray([_str(s) for s in value_strings], dtype=object)
    if sparse_value is not None:
        return _sparse_to_dense(sparse_value)
    raise ValueError("Constant node has none of the value attributes")


def _sparse_to_dense(sparse: Any) -> np.ndarray:
    import onnx.numpy_helper

    values = onnx.numpy_helper.to_array(sparse.values)
    indices = onnx.numpy_helper.to_array(sparse.indices)
    dims = tuple(sparse.dims)
    dense = np.zeros(int(np.prod(dims, dtype=np.int64)), dtype=values.dtype)
    if indices.ndim == 2:
        indices = np.ravel_multi_index(tuple(indices.T), dims)
    dense[indices.reshape(-1)] = values.reshape(-1)
    return dense.reshape(dims)


@op("Identity")
def identity(input: Array) -> Array:
    """``input`` unchanged; opset 1+."""
    return input


@op("Range", since=11, host_inputs=(0, 1, 2))
def range_(start: Array, limit: Array, delta: Array) -> np.ndarray:
    """start, start + delta, ... up to ``limit`` (exclusive), in start's type; opset 11+."""
    dtype = np.asarray(start).dtype
    s, lim, d = (np.asarray(v).reshape(()).item() for v in (start, limit, delta))
    count = max(int(np.ceil((lim - s) / d)), 0)
    return (s + np.arange(count) * d).astype(dtype) if count else np.zeros(0, dtype)


@op("OneHot", since=9, host_inputs=(1,))
def one_hot(indices: Array, depth: Array, values: Array, *, axis: int = -1) -> Array:
    """One-hot on a new ``axis`` of length ``depth``: values[1] on, values[0] off; opset 9+."""
    m = xp(indices, values)
    depth_ = int(np.asarray(depth).reshape(-1)[0])
    rank = indices.ndim + 1
    axis = normalized_axis(axis, rank)
    idx = indices.astype(np.int64) if m is np else indices.astype("int64")
    idx = m.where(idx < 0, idx + depth_, idx)
    positions = np.arange(depth_).reshape([-1] + [1] * (rank - axis - 1))
    hot = m.expand_dims(idx, axis) == positions
    return _host(m.where(hot, values[1], values[0]))


@op("Trilu", since=14, host_inputs=(1,))
def trilu(input: Array, k: Array | None = None, *, upper: int = 1) -> Array:
    """The upper (or lower) triangle of the last two dims from diagonal k, the rest 0; opset 14+."""
    m = xp(input)
    offset = 0 if k is None else int(np.asarray(k).reshape(-1)[0])
    return _host(m.triu(input, offset) if upper else m.tril(input, offset))


@op("EyeLike", since=9)
def eye_like(input: Array, *, dtype: int | None = None, k: int = 0) -> np.ndarray:
    """A 2-D tensor of ``input``'s shape with ones on diagonal ``k``; opset 9+."""
    if dtype is None:
        out_dtype = np.dtype(input.dtype)
    else:
        from ember.runtime.ops.cast import onnx_dtype

        out_dtype = onnx_dtype(dtype)
    rows, cols = input.shape
    return np.eye(rows, cols, k=k, dtype=out_dtype)


# ------------------------------------------------------------------------ layout


@op("DepthToSpace")
def depth_to_space(input: Array, *, blocksize: int, mode: str = "DCR") -> Array:
    """Channels moved into ``blocksize`` x ``blocksize`` spatial blocks (DCR/CRD); opset 1+."""
    m = xp(input)
    b, c, h, w = input.shape
    bs = blocksize
    if _str(mode) == "DCR":
        tmp = m.reshape(input, (b, bs, bs, c // (bs * bs), h, w))
        tmp = m.transpose(tmp, (0, 3, 4, 1, 5, 2))
    else:
        tmp = m.reshape(input, (b, c // (bs * bs), bs, bs, h, w))
        tmp = m.transpose(tmp, (0, 1, 4, 2, 5, 3))
    return _host(m.reshape(tmp, (b, c // (bs * bs), h * bs, w * bs)))


@op("SpaceToDepth")
def space_to_depth(input: Array, *, blocksize: int, mode: str = "DCR") -> Array:
    """Spatial ``blocksize`` x ``blocksize`` blocks moved into channels; opset 1+."""
    m = xp(input)
    b, c, h, w = input.shape
    bs = blocksize
    tmp = m.reshape(input, (b, c, h // bs, bs, w // bs, bs))
    order = (0, 3, 5, 1, 2, 4) if _str(mode) == "DCR" else (0, 1, 3, 5, 2, 4)
    tmp = m.transpose(tmp, order)
    return _host(m.reshape(tmp, (b, c * bs * bs, h // bs, w // bs)))


@op("ReverseSequence", since=10)
def reverse_sequence(
    input: Array, sequence_lens: Array, *, batch_axis: int = 1, time_axis: int = 0
) -> Array:
    """The first ``sequence_lens[b]`` steps of each batch entry reversed in time; opset 10+."""
    m = xp(input, sequence_lens)
    steps = input.shape[time_axis]
    time = np.arange(steps).reshape([-1 if i == time_axis else 1 for i in range(input.ndim)])
    lens = m.reshape(sequence_lens, [-1 if i == batch_axis else 1 for i in range(input.ndim)])
    source = m.where(time < lens, lens - 1 - time, time)
    source = m.broadcast_to(source, input.shape)
    return _host(m.take_along_axis(input, source.astype(np.int64), axis=time_axis))


@op("Dropout")
def dropout_v1(
    data: Array, *, ratio: float = 0.5, is_test: int = 0, consumed_inputs: Any = None
) -> tuple:
    # Before opset 10 the mask has the input's type.
    """Inference dropout: ``data`` and an all-kept mask of data's type; opsets 1-9."""
    return data, _all_kept(data).astype(data.dtype)


@op("Dropout", since=10)
def dropout_v10(data: Array, *, ratio: float = 0.5) -> tuple[Array, Array]:
    """Inference dropout: ``data`` and an all-kept bool mask; opsets 10-11."""
    return data, _all_kept(data)


@op("Dropout", since=12, host_inputs=(1, 2))
def dropout(
    data: Array,
    ratio: Array | None = None,
    training_mode: Array | None = None,
    *,
    seed: int | None = None,
) -> tuple[Array, Array]:
    """``data`` and an all-kept mask; in training mode a seeded mask and 1/(1-ratio); opset 12+."""
    rate = 0.5 if ratio is None else float(np.asarray(ratio))
    if training_mode is None or not bool(np.asarray(training_mode)) or rate == 0.0:
        return data, _all_kept(data)
    # Training mode draws the mask on the host the way the ONNX reference does, so a
    # given seed reproduces its result.
    keep = np.random.RandomState(seed).uniform(0, 1.0, data.shape) >= rate
    m = xp(data)
    scaled = m.where(keep, data * (1.0 / (1.0 - rate)), 0).astype(data.dtype)
    return _host(scaled), keep


def _all_kept(data: Array) -> Array:
    return np.ones(data.shape, dtype=bool)


@op("CenterCropPad", since=18, host_inputs=(1,))
def center_crop_pad(input_data: Array, shape: Array, *, axes: Any = None) -> Array:
    """``input_data`` center-cropped or zero-padded to ``shape`` on ``axes``; opset 18+."""
    m = xp(input_data)
    rank = input_data.ndim
    axes_ = (
        list(range(rank))
        if axes is None
        else [normalized_axis(a, rank) for a in ints_or_default(axes)]
    )
    out = input_data
    for a, target in zip(axes_, ints_or_default(shape), strict=True):
        dim = out.shape[a]
        if target < dim:
            lo = (dim - target) // 2
            index = [slice(None)] * rank
            index[a] = slice(lo, lo + target)
            out = out[tuple(index)]
        elif target > dim:
            lo = (target - dim) // 2
            widths = [(0, 0)] * rank
            widths[a] = (lo, target - dim - lo)
            out = m.pad(out, widths)
    return _host(out)
