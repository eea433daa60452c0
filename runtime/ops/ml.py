"""The ``ai.onnx.ml`` ops: label encoding, binarizing and feature extraction (tree ensembles are
in ``ml_trees.py``).

String tensors live on the host as numpy object arrays, so a ``LabelEncoder`` whose keys or
values are strings maps with a dictionary there; numeric maps and the other ops are
jax.numpy/lax and trace under ``jax.jit``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import is_host, op, xp
from ._common import host as _host

ML = "ai.onnx.ml"

Array = Any


def is_strings(value: Array) -> bool:
    return np.dtype(value.dtype).kind in "OUS"


# ---------------------------------------------------------------------------------------------
# LabelEncoder


def one_of(op_type: str, kind: str, **candidates: Any) -> np.ndarray:
    """The one attribute of ``candidates`` that is set, as a 1-D array."""
    given = {name: v for name, v in candidates.items() if v is not None}
    names = ", ".join(candidates)
    if len(given) != 1:
        which = "none" if not given else " and ".join(sorted(given))
        raise ValueError(
            f"{op_type} sets {which} of its {kind} attributes; the spec needs exactly one of "
            f"{names}: fix the node's attributes in the model"
        )
    ((name, value),) = given.items()
    if name.endswith("_strings"):
        return np.asarray(list(value), dtype=object)
    if name.endswith("_int64s"):
        return np.asarray(value, dtype=np.int64)
    if name.endswith("_floats"):
        return np.asarray(value, dtype=np.float32)
    array = np.asarray(value).reshape(-1)
    return array.astype(object) if is_strings(array) else array


def _encode(X: Array, keys: np.ndarray, values: np.ndarray, default: Any, op_type: str) -> Array:
    """Each element of X replaced by the value of its key (the last one when keys repeat)."""
    if len(keys) != len(values):
        raise ValueError(
            f"{op_type} has {len(keys)} keys but {len(values)} values; the keys_* and "
            "values_* attributes must have the same length"
        )
    if is_strings(keys) != is_strings(X):
        raise ValueError(
            f"{op_type} keys are {'strings' if is_strings(keys) else 'numbers'} but its input "
            f"is {X.dtype}; the input's element type must be the keys' type"
        )
    if not is_strings(keys):
        keys = keys.astype(X.dtype)
    table: dict[Any, Any] = {}
    nan_value = None
    for k, v in zip(keys.tolist(), values.tolist(), strict=True):
        if isinstance(k, float) and k != k:
            nan_value = v  # a NaN key matches every NaN input
        else:
            table[k] = v
    if is_strings(keys) or is_strings(values):
        # strings only live on the host; a traced input stops the trace here (a graph break)
        x = np.asarray(X)
        flat = x.reshape(-1).tolist()
        out = [
            nan_value if nan_value is not None and k != k else table.get(k, default) for k in flat
        ]
        return np.asarray(out, dtype=values.dtype).reshape(x.shape)
    m = xp(X)
    out = m.full(X.shape, default, dtype=values.dtype)
    if table:
        sorted_keys = np.asarray(sorted(table), dtype=X.dtype)
        sorted_values = np.asarray([table[k] for k in sorted(table)], dtype=values.dtype)
        at = m.clip(m.searchsorted(sorted_keys, X), 0, len(sorted_keys) - 1)
        hit = m.take(sorted_keys, at) == X
        out = m.where(hit, m.take(sorted_values, at), out)
    if nan_value is not None:
        out = m.where(m.isnan(X), m.asarray(nan_value, dtype=values.dtype), out)
    return _host(out)


@op("LabelEncoder", domain=ML)
def label_encoder_v1(
    X: Array,
    *,
    classes_strings: list[str] | None = None,
    default_int64: int = -1,
    default_string: str = "_Unused",
) -> Array:
    """Strings to their index in ``classes_strings``, or indices to strings; opset 1."""
    classes = np.asarray(list(classes_strings or []), dtype=object)
    if is_strings(X):  # a string maps to its position among the classes
        positions = np.arange(len(classes), dtype=np.int64)
        return _encode(X, classes, positions, np.int64(default_int64), "LabelEncoder")
    positions = np.arange(len(classes), dtype=np.int64)
    return _encode(X, positions, classes, default_string, "LabelEncoder")


@op("LabelEncoder", since=2, domain=ML)
def label_encoder(
    X: Array,
    *,
    keys_floats: list[float] | None = None,
    keys_int64s: list[int] | None = None,
    keys_strings: list[str] | None = None,
    keys_tensor: np.ndarray | None = None,
    values_floats: list[float] | None = None,
    values_int64s: list[int] | None = None,
    values_strings: list[str] | None = None,
    values_tensor: np.ndarray | None = None,
    default_float: float = -0.0,
    default_int64: int = -1,
    default_string: str = "_Unused",
    default_tensor: np.ndarray | None = None,
) -> Array:
    """Each key of X mapped to its value (``keys_*`` -> ``values_*``), else default; opset 2+."""
    keys = one_of(
        "LabelEncoder",
        "keys_*",
        keys_floats=keys_floats,
        keys_int64s=keys_int64s,
        keys_strings=keys_strings,
        keys_tensor=keys_tensor,
    )
    values = one_of(
        "LabelEncoder",
        "values_*",
        values_floats=values_floats,
        values_int64s=values_int64s,
        values_strings=values_strings,
        values_tensor=values_tensor,
    )
    default: Any
    if default_tensor is not None:
        default = np.asarray(default_tensor).reshape(-1)
        if default.size != 1:
            raise ValueError(
                f"LabelEncoder's default_tensor has {default.size} elements; it must hold one"
            )
        default = default[0]
    elif is_strings(values):
        default = default_string
    elif values.dtype.kind in "iu":
        default = default_int64
    else:
        default = default_float
    default = np.asarray(default).astype(values.dtype)[()]
    return _encode(X, keys, values, default, "LabelEncoder")


# ---------------------------------------------------------------------------------------------
# Binarizer, ArrayFeatureExtractor


@op("Binarizer", domain=ML)
def binarizer(X: Array, *, threshold: float = 0.0) -> Array:
    # "values greater than this are mapped to 1, others to 0": NaN too
    """1 where X > ``threshold``, else 0 (NaN too), in X's type; opset 1+."""
    return _host(xp(X).where(threshold < X, 1, 0).astype(X.dtype))


@op("ArrayFeatureExtractor", domain=ML)
def array_feature_extractor(X: Array, Y: Array) -> Array:
    """``X[..., Y]`` with Y's indices flattened; a 1-D X gives one row ``[1, len(Y)]``; opset 1+."""
    n = X.shape[-1]
    if is_host(Y):
        indices = np.asarray(Y, dtype=np.int64).reshape(-1)
        bad = indices[(indices < 0) | (indices >= n)]
        if bad.size:
            raise ValueError(
                f"ArrayFeatureExtractor index {int(bad[0])} is outside the last axis of X "
                f"(size {n}); indices must be in [0, {n})"
            )
    m = np if is_strings(X) else xp(X, Y)
    if m is np:
        X, Y = np.asarray(X), np.asarray(Y)
    out = m.take(X, Y.reshape(-1), axis=-1)
    if X.ndim == 1:
        out = out.reshape(1, -1)
    return _host(out)
