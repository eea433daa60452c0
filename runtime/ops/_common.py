"""Helpers the op modules share for attributes and host values (onnx's reference ops keep
theirs in ``_op.py`` the same way). Not an op module: the registry skips ``_`` modules."""

from __future__ import annotations

from typing import Any

import numpy as np

Array = Any

__all__ = ["as_str", "flat_ints", "host"]


def host(value: Array) -> Array:
    """numpy ufuncs on 0-d arrays return scalars; keep host values ndarrays."""
    return np.asarray(value) if isinstance(value, np.generic) else value


def as_str(value: Any) -> str:
    """A string attribute, given as ``bytes`` by onnx or as ``str``."""
    return value.decode() if isinstance(value, bytes) else str(value)


def flat_ints(value: Any) -> list[int]:
    """A host tensor or list (any shape) as a flat list of ints."""
    return [int(v) for v in np.asarray(value).reshape(-1)]
