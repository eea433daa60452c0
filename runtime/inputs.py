"""What a call gives a model: checked against the model's inputs, then put on the device.

Shared by the compiled path (``compile``), the eager interpreter (``run``) and profile mode,
so a bad input gets the same error, naming the input and what the model expects, whichever
way the model is called.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np

from .errors import InputError
from .model import Model, TensorSpec, load

__all__ = [
    "as_model",
    "check_inputs",
    "expected",
    "fits",
    "input_problem",
    "resolve_specs",
    "spec_value",
    "to_device",
]


def as_model(model: Any) -> Model:
    """``model`` itself when it is a loaded ``Model``, else ``load(model)``."""
    return model if isinstance(model, Model) else load(model)


def expected(model: Model) -> str:
    """The end of an input error: what the model expects, e.g. ``x: float32[batch, 3]``."""
    return "the model expects: " + "; ".join(str(s) for s in model.inputs)


def check_inputs(
    model: Model, inputs: Mapping[str, Any], accepted: set[Hashable] | None = None
) -> dict[str, Any]:
    """Validate names, ranks, static dims and dtypes; arrays as given (lists -> numpy).

    ``accepted`` (a compiled model's own set) remembers the names, types, shapes and dtypes
    of arrays that passed as they were: inputs like them pass again without the checks
    (a few us of a call on a model with graph breaks)."""
    signature = _signature(inputs) if accepted is not None else None
    if signature is not None and accepted is not None and signature in accepted:
        return dict(inputs)
    out = _checked(model, inputs)
    if (
        signature is not None
        and accepted is not None
        and len(accepted) < _ACCEPTED_MAX
        and all(out[n] is v for n, v in inputs.items())
    ):
        accepted.add(signature)
    return out


# signatures a model remembers; a caller of many shapes checks the rest each call
_ACCEPTED_MAX = 64


def _signature(inputs: Any) -> tuple[Any, ...] | None:
    """The names, types, shapes and dtypes of ``inputs``; None unless all are arrays."""
    try:
        signature = tuple([(n, type(v), v.shape, v.dtype) for n, v in inputs.items()])
        hash(signature)
    except (AttributeError, TypeError):  # not a mapping, or a value that is not an array
        return None
    return signature


def _checked(model: Model, inputs: Any) -> dict[str, Any]:
    if not isinstance(inputs, Mapping):
        raise InputError(
            f"the inputs are a {type(inputs).__name__}, not a dict of arrays by input name: "
            f"call with a dict or keyword arguments, e.g. ({{{model.input_names[0]!r}: ...}}) "
            f"or ({model.input_names[0]}=...); {expected(model)}"
            if model.input_names
            else f"the inputs are a {type(inputs).__name__}, not a dict; {expected(model)}"
        )
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
        if isinstance(value, np.ndarray) and not value.dtype.isnative:
            # big-endian data (read from a file, say): the same values in native order
            value = value.astype(value.dtype.newbyteorder("="))
        problem = input_problem(spec, name, value)
        if problem is not None:
            raise InputError(f"{problem}; {expected(model)}")
        out[name] = value
    return out


def input_problem(spec: TensorSpec, name: str, value: Any) -> str | None:
    """What is wrong with ``value`` (an array: it has ``shape`` and ``dtype``) as the tensor
    input ``spec``: its dtype, rank or a static dim; None when it fits."""
    shape = tuple(value.shape)
    dtype = np.dtype(value.dtype)
    if spec.dtype is not None and dtype.newbyteorder("=") != spec.dtype:  # any byte order
        return f"input {name!r} has dtype {dtype.name}, expected {spec.dtype.name}"
    if spec.shape is not None:
        if len(shape) != len(spec.shape):
            return (
                f"input {name!r} has rank {len(shape)} (shape {list(shape)}), expected "
                f"rank {len(spec.shape)}"
            )
        for axis, (got, want) in enumerate(zip(shape, spec.shape, strict=True)):
            if isinstance(want, int) and got != want:
                return f"input {name!r} has shape {list(shape)}, but dim {axis} must be {want}"
    return None


def fits(spec: TensorSpec, value: Any) -> bool:
    """``value`` is an array (or a scalar or list numpy reads as one) that ``check_inputs``
    accepts for the tensor input ``spec``; inputs of other kinds always fit."""
    if spec.kind in ("sequence", "optional", "unknown"):
        return True
    if value is None or isinstance(value, str):
        return False
    if not hasattr(value, "shape") or not hasattr(value, "dtype"):
        value = np.asarray(value)
    return input_problem(spec, spec.name, value) is None


def spec_value(spec: Any, tspec: TensorSpec) -> Any:
    """An input spec as something ``jax.jit(...).lower`` accepts (ShapeDtypeStruct)."""
    import jax

    if isinstance(spec, jax.ShapeDtypeStruct):
        return spec
    if hasattr(spec, "shape") and hasattr(spec, "dtype"):
        return jax.ShapeDtypeStruct(tuple(spec.shape), np.dtype(spec.dtype))
    if isinstance(spec, tuple) and len(spec) == 2 and not isinstance(spec[1], int):
        return jax.ShapeDtypeStruct(tuple(spec[0]), np.dtype(spec[1]))
    if isinstance(spec, (tuple, list)):
        if tspec.dtype is None:
            raise InputError(
                f"input_specs[{tspec.name!r}]: give (shape, dtype); the model "
                "does not say the dtype of this input"
            )
        return jax.ShapeDtypeStruct(tuple(int(d) for d in spec), tspec.dtype)
    raise InputError(
        f"input_specs[{tspec.name!r}] = {spec!r}: give a shape tuple, (shape, dtype), "
        "an array or a jax.ShapeDtypeStruct"
    )


def resolve_specs(model: Model, input_specs: Any) -> dict[str, Any] | None:
    """``compile``'s ``input_specs`` (a mapping or a list in input order; inputs not named
    take their static shapes) as ``jax.ShapeDtypeStruct`` by input name; None when some
    input has no static shape to compile for, or is not a tensor. A spec the model's input
    refuses (another dtype, rank or static dim) is an ``InputError``."""
    tensor_inputs = [s for s in model.inputs]
    if input_specs is None:
        if all(s.kind == "tensor" and s.static and s.dtype is not None for s in tensor_inputs):
            return {s.name: spec_value(s.shape, s) for s in tensor_inputs}
        return None
    if not isinstance(input_specs, Mapping):
        input_specs = dict(zip(model.input_names, input_specs, strict=False))
    unknown = [n for n in input_specs if n not in model.input_names]
    if unknown:
        raise InputError(f"input_specs names unknown input(s) {unknown}; {expected(model)}")
    specs = {}
    for s in tensor_inputs:
        if s.name not in input_specs:
            if s.kind == "tensor" and s.static and s.dtype is not None:
                specs[s.name] = spec_value(s.shape, s)
                continue
            return None
        if s.kind != "tensor":
            return None
        specs[s.name] = spec = spec_value(input_specs[s.name], s)
        # a call at these shapes goes straight to the program: they must be ones the
        # model accepts, as check_inputs would say of an input of these shapes
        problem = input_problem(s, s.name, spec)
        if problem is not None:
            raise InputError(f"input_specs: {problem}; {expected(model)}")
    return specs


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
