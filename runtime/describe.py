"""What the runtime's events and cache keys say about values: shapes, dtypes, statics.

- ``describe_shapes`` / ``describe_value``: the ``shapes`` metadata of call, cache and
  compile events, ``{name, shape, dtype}`` per value (a sequence lists its elements);
- ``describe_statics``: the ``statics`` metadata, ``{name, value}`` per static value, an
  ``If`` condition named for its node (``If_0 condition``);
- ``segment_key``: a segment's cache key, of ``shape_key`` / ``static_key`` parts (a static
  value's key holds its bytes, so equal values give equal keys), ``key_hex`` its short name.

They run on every call that someone records, the keys on every call of a model with graph
breaks, and ``static_key`` on every direct call of a model whose control flow specialises
on an input: keep them cheap.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "describe_shapes",
    "describe_statics",
    "describe_value",
    "dtype_name",
    "key_hex",
    "segment_key",
    "shape_key",
    "static_key",
]


def describe_value(name: str, value: Any) -> dict[str, Any]:
    """``{name, shape, dtype}`` of one value; ``{name, sequence: [...]}`` of a sequence."""
    if isinstance(value, list):
        return {
            "name": name,
            "sequence": [
                {"shape": [int(d) for d in np.shape(v)], "dtype": dtype_name(v)} for v in value
            ],
        }
    if value is None:
        return {"name": name, "shape": None, "dtype": None}
    return {"name": name, "shape": [int(d) for d in np.shape(value)], "dtype": dtype_name(value)}


_DTYPE_NAMES: dict[Any, str] = {}
# dtype.str is computed on every read (0.3 us): memoised per dtype
_DTYPE_CODES: dict[np.dtype[Any], str] = {}
# types whose ``shape`` is a tuple and ``dtype`` a numpy dtype (jax's array type is learnt)
_ARRAY_TYPES: set[type] = {np.ndarray}


def dtype_name(value: Any) -> str:
    """numpy's name of ``value``'s dtype (memoised per dtype); its type's name without one."""
    dt = getattr(value, "dtype", None)
    if dt is None:
        return type(value).__name__
    name = _DTYPE_NAMES.get(dt)
    if name is None:
        name = _DTYPE_NAMES[dt] = np.dtype(dt).name
    return name


def describe_shapes(values: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``shapes`` metadata: sorted by name, ``{name, shape, dtype}`` or a sequence."""
    return [describe_value(n, values[n]) for n in sorted(values)]


def describe_statics(
    statics: Mapping[str, Any], labels: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """``{name, value}`` per static value; a condition is named for its node (``If_0
    condition``) and given as one bool."""
    out = []
    for name in sorted(statics):
        v = statics[name]
        label = labels.get(name) if labels else None
        if label is not None and not isinstance(v, list) and np.size(v) == 1:
            out.append({"name": label, "value": bool(np.asarray(v).reshape(-1)[0])})
            continue
        if isinstance(v, list):
            value: Any = [np.asarray(x).tolist() for x in v]
        else:
            value = np.asarray(v).tolist()
        out.append({"name": name, "value": value})
    return out


def shape_key(value: Any) -> Any:
    """The hashable shape and dtype of an argument (of each element of a sequence)."""
    if type(value) in _ARRAY_TYPES:  # most arguments: their shape is already a tuple of ints
        dt = value.dtype
        name = _DTYPE_NAMES.get(dt)
        return (value.shape, name if name is not None else dtype_name(value))
    if isinstance(value, list):
        return ("seq", tuple(shape_key(v) for v in value))
    if value is None:
        return None
    if type(getattr(value, "shape", None)) is tuple and hasattr(value, "dtype"):
        _ARRAY_TYPES.add(type(value))  # jax's arrays: the next one takes the path above
    return (tuple(np.shape(value)), dtype_name(value))


def static_key(value: Any) -> Any:
    """The hashable value of a static: shape, dtype and bytes (objects: their items)."""
    if isinstance(value, list):
        return ("seq", tuple(static_key(v) for v in value))
    if value is None:
        return None
    a = value if type(value) is np.ndarray else np.asarray(value)
    dt = a.dtype
    if dt.hasobject:
        return (a.shape, "object", tuple(a.reshape(-1).tolist()))
    code = _DTYPE_CODES.get(dt)
    if code is None:
        code = _DTYPE_CODES[dt] = dt.str
    return (a.shape, code, a.tobytes())


def segment_key(
    position: int | None,
    arg_names: Sequence[str],
    args: Sequence[Any],
    static_names: Sequence[str],
    statics: Mapping[str, Any],
    static_keys: Mapping[str, Any] | None = None,
) -> tuple[Any, ...]:
    """A segment's cache key: its position, its arguments' ``shape_key`` and its statics'
    ``static_key``, each by name (taken from ``static_keys`` where it has them: statics
    that stay the same over many calls, keyed once)."""
    keyed = static_keys or {}
    return (
        position,
        tuple([(n, shape_key(a)) for n, a in zip(arg_names, args, strict=True)]),
        tuple([(n, keyed[n] if n in keyed else static_key(statics[n])) for n in static_names]),
    )


def key_hex(key: tuple[Any, ...]) -> str:
    """A cache key's short name in events (16 hex digits)."""
    return hashlib.blake2b(repr(key).encode(), digest_size=8).hexdigest()
