"""What a call gives a model: checked against the model's inputs, then put on the device.

Shared by the compiled path (``compile``), the eager interpreter (``run``) and profile mode,
so a bad input gets the same error, naming the input and what the model expects, whichever
way the model is called.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .errors import InputError
from .model import Model, load

__all__ = ["as_model", "check_inputs", "expected", "to_device"]


def as_model(model: Any) -> Model:
    """``model`` itself when it is a loaded ``Model``, else ``load(model)``."""
    return model if isinstance(model, Model) else load(model)


def expected(model: Model) -> str:
    """The end of an input error: what the model expects, e.g. ``x: float32[batch, 3]``."""
    return "the model expects: " + "; ".join(str(s) for s in model.inputs)


def check_inputs(model: Model, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Validate names, ranks, static dims and dtypes; arrays as given (lists -> numpy)."""
    specs = {s.name: s for s in model.inputs}
    unknown = [n for n in inputs if n not in specs]
    missing = [n for n in specs if n not in inputs]
    if unknown or missing:
        parts = []
        if missing:
            parts.append(f"missing input(s) {missing}")
        if unknown:
            parts.append(f"unknown input(s) {unknown}")
        raise InputError(f"{', '.join(parts)}; {expected(model)}")
    out: dict[str, Any] = {}
    for name, value in inputs.items():
        spec = specs[name]
        if spec.kind in ("sequence", "optional", "unknown"):
            out[name] = value
            continue
        if value is None:
            raise InputError(f"input {name!r} is None; {expected(model)}")
        if isinstance(value, str) and value in model.output_names and not _takes_text(spec):
            raise InputError(_unpacked_output(name, value, model))
        if not hasattr(value, "shape") or not hasattr(value, "dtype"):
            value = np.asarray(value)
        shape = tuple(value.shape)
        if spec.dtype is not None and np.dtype(value.dtype) != spec.dtype:
            raise InputError(
                f"input {name!r} has dtype {np.dtype(value.dtype).name}, expected "
                f"{spec.dtype.name}; {expected(model)}"
            )
        if spec.shape is not None:
            if len(shape) != len(spec.shape):
                raise InputError(
                    f"input {name!r} has rank {len(shape)} (shape {list(shape)}), expected "
                    f"rank {len(spec.shape)}; {expected(model)}"
                )
            for axis, (got, want) in enumerate(zip(shape, spec.shape, strict=True)):
                if isinstance(want, int) and got != want:
                    raise InputError(
                        f"input {name!r} has shape {list(shape)}, but dim {axis} must be "
                        f"{want}; {expected(model)}"
                    )
        out[name] = value
    return out


def _takes_text(spec: Any) -> bool:
    return spec.dtype is not None and spec.dtype.kind in "OSU"


def _unpacked_output(name: str, value: str, model: Model) -> str:
    """The error for an input that is an output's *name*: ``a, b = cm(...)`` unpacked the
    keys of the dict a call returns, and one of them came back as an input."""
    return (
        f"input {name!r} is the string {value!r}, the name of one of the model's outputs: a "
        "call returns a dict of outputs by name, so `a, b = cm(...)` unpacks the names, not "
        f"the arrays. Take the array with cm(...)[{value!r}], or unpack the arrays in order "
        f"with `a, b = cm(...).values()` (outputs: {', '.join(model.output_names)}); "
        f"{expected(model)}"
    )


def to_device(value: Any) -> Any:
    """An input as a JAX array (sequences element by element; None and strings as given)."""
    if isinstance(value, list):
        return [to_device(v) for v in value]
    if value is None or (isinstance(value, np.ndarray) and value.dtype == object):
        return value
    import jax

    if isinstance(value, np.ndarray):
        return jax.device_put(value)  # no conversion program to compile, unlike asarray
    return jax.numpy.asarray(value)
