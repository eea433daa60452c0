"""Run any ONNX model on made-up inputs, the way ``ember run`` does, and sum up what happened.

A *workload* is: a model source (a path, an ``hf://`` source, or ``onnx:light/NAME`` for
the small models that the ``onnx`` package ships), input shapes (``--input
NAME=SHAPE[:DTYPE]``), an optional sweep of one dimension (``--sweep NAME:DIM=v1,v2``)
and a number of calls per shape. Symbolic dimensions shared by several inputs
(``[batch, seq]`` for both ``input_ids`` and ``attention_mask``) take one value.

Inputs are made to look real: integer ids are drawn below the vocabulary size (read from
the embedding table that a ``Gather`` reads them into), masks are ones, token type ids
zeros, position ids ``0..n-1``, floats are standard normal.

The run's numbers (calls, compiles, cache hits/misses/evictions, latency percentiles, peak
memory) are not counted here: they are in the trace the caller records, and ``ember run``
reads them from the ``run_summary`` view (one definition for every surface).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import EmberRuntimeError
from .inputs import expected
from .model import Model, TensorSpec

__all__ = [
    "InputOverride",
    "RunSummary",
    "Sweep",
    "WorkloadError",
    "make_inputs",
    "parse_input",
    "parse_sweep",
    "parse_tag",
    "plan_shapes",
    "resolve_source",
    "run_workload",
]


class WorkloadError(EmberRuntimeError, ValueError):
    """A workload that cannot run as given: the message says what is expected."""


LIGHT_PREFIX = "onnx:light/"


def light_models_dir() -> Path:
    import onnx

    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def resolve_source(source: str) -> str:
    """``onnx:light/NAME`` -> the path of that model in the ``onnx`` package; else as given."""
    if not source.startswith(LIGHT_PREFIX):
        return source
    name = source[len(LIGHT_PREFIX) :].removeprefix("light_").removesuffix(".onnx")
    path = light_models_dir() / f"light_{name}.onnx"
    if not path.is_file():
        known = sorted(p.stem.removeprefix("light_") for p in light_models_dir().glob("*.onnx"))
        raise WorkloadError(f"{source}: no such light model; the onnx package ships {known}")
    return str(path)


@dataclass(frozen=True)
class InputOverride:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype | None = None


@dataclass(frozen=True)
class Sweep:
    name: str
    dim: int
    values: tuple[int, ...]


_SHAPE = re.compile(r"^\d+(?:[x,]\d+)*$")


def parse_input(text: str) -> InputOverride:
    """``NAME=SHAPE[:DTYPE]``, e.g. ``input_ids=1x17:int64`` or ``x=2,3`` or ``scalar=``."""
    name, eq, rest = text.partition("=")
    shape_text, _, dtype_text = rest.partition(":")
    if not eq or not name or (shape_text and not _SHAPE.match(shape_text)):
        raise WorkloadError(
            f"--input {text!r}: expected NAME=SHAPE[:DTYPE] with SHAPE like 1x17 (or empty for "
            "a scalar), e.g. --input input_ids=1x17:int64"
        )
    shape = tuple(int(d) for d in re.split(r"[x,]", shape_text)) if shape_text else ()
    dtype = None
    if dtype_text:
        try:
            dtype = np.dtype(dtype_text)
        except TypeError as exc:
            raise WorkloadError(
                f"--input {text!r}: unknown dtype {dtype_text!r}; use a numpy name such as "
                "float32, int64, bool"
            ) from exc
    return InputOverride(name, shape, dtype)


def parse_sweep(text: str) -> Sweep:
    """``NAME:DIM=v1,v2,...``, e.g. ``input_ids:1=8,16,32`` (dimension 1 of input_ids)."""
    m = re.match(r"^([^:=]+):(\d+)=(\d+(?:,\d+)*)$", text)
    if not m:
        raise WorkloadError(
            f"--sweep {text!r}: expected NAME:DIM=v1,v2,... e.g. --sweep input_ids:1=8,16,32"
        )
    return Sweep(m[1], int(m[2]), tuple(int(v) for v in m[3].split(",")))


def parse_tag(text: str) -> tuple[str, str]:
    key, eq, value = text.partition("=")
    if not eq or not key:
        raise WorkloadError(f"--tag {text!r}: expected key=value, e.g. --tag team=search")
    return key, value


def plan_shapes(
    model: Model,
    overrides: Sequence[InputOverride] = (),
    sweep: Sweep | None = None,
) -> tuple[list[dict[str, tuple[tuple[int, ...], np.dtype]]], dict[str, int]]:
    """The input shapes and dtypes of each step of the sweep (one step without a sweep).

    Returns the steps and the symbolic dimensions that were given no value and took a
    default (1 for a leading dimension, 8 elsewhere), so the caller can say so.
    """
    specs = {s.name: s for s in model.inputs}
    for o in overrides:
        if o.name not in specs:
            raise WorkloadError(f"--input {o.name}: no such input; {expected(model)}")
        spec = specs[o.name]
        if spec.shape is not None and len(spec.shape) != len(o.shape):
            raise WorkloadError(
                f"--input {o.name}: {len(o.shape)} dims given, the model's input has "
                f"{len(spec.shape)} ({spec})"
            )
    if sweep is not None:
        if sweep.name not in specs:
            raise WorkloadError(f"--sweep {sweep.name}: no such input; {expected(model)}")
        shape = specs[sweep.name].shape
        if shape is None or not 0 <= sweep.dim < len(shape):
            raise WorkloadError(
                f"--sweep {sweep.name}:{sweep.dim}: the input has no dimension {sweep.dim} "
                f"({specs[sweep.name]})"
            )
    given = {o.name: o for o in overrides}
    # symbolic dim name -> value, from the overrides
    symbols: dict[str, int] = {}
    for o in overrides:
        for d, v in zip(specs[o.name].shape or (), o.shape, strict=False):
            if isinstance(d, str):
                symbols[d] = v
    defaults: dict[str, int] = {}
    steps = []
    for value in sweep.values if sweep else (None,):
        step_symbols = dict(symbols)
        swept_symbol = None
        if sweep is not None and value is not None:
            d = (specs[sweep.name].shape or ())[sweep.dim]
            if isinstance(d, str):
                step_symbols[d] = value
                swept_symbol = d
        step: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
        for spec in model.inputs:
            step[spec.name] = _shape_of(spec, given.get(spec.name), step_symbols, defaults)
            if (
                sweep is not None
                and value is not None
                and spec.name == sweep.name
                and swept_symbol is None
            ):
                dims = list(step[spec.name][0])
                dims[sweep.dim] = value
                step[spec.name] = (tuple(dims), step[spec.name][1])
        steps.append(step)
    return steps, defaults


def _shape_of(
    spec: TensorSpec,
    override: InputOverride | None,
    symbols: dict[str, int],
    defaults: dict[str, int],
) -> tuple[tuple[int, ...], np.dtype]:
    if spec.kind != "tensor":
        raise WorkloadError(
            f"input {spec}: ember run makes tensor inputs only; call the model from Python "
            "(ember.runtime.compile) to pass sequences or optionals"
        )
    dtype = (override.dtype if override and override.dtype is not None else None) or spec.dtype
    if dtype is None:
        raise WorkloadError(f"input {spec.name}: the model gives no dtype; add :DTYPE to --input")
    if spec.shape is None and override is None:
        raise WorkloadError(f"input {spec.name}: the model gives no shape; use --input NAME=SHAPE")
    # A symbolic dim takes its symbol's value (from --input, or the sweep, which wins),
    # then the --input value, then the model's fixed value, else a default.
    rank = len(override.shape) if override is not None else len(spec.shape or ())
    model_dims = list(spec.shape) if spec.shape is not None else [None] * rank
    out = []
    for i, d in enumerate(model_dims):
        if isinstance(d, str) and d in symbols:
            out.append(symbols[d])
        elif override is not None:
            out.append(override.shape[i])
        elif isinstance(d, int):
            out.append(d)
        else:
            label = d if isinstance(d, str) else f"{spec.name}[{i}]"
            value = defaults.setdefault(label, 1 if i == 0 else 8)
            if isinstance(d, str):
                symbols[d] = value
            out.append(value)
    return tuple(out), np.dtype(dtype)


def _vocab_size(model: Model, input_name: str) -> int | None:
    """Rows of the embedding table that a Gather reads ``input_name`` into, if any."""
    for node in model.graph.nodes:
        if node.op_type == "Gather" and len(node.inputs) > 1 and node.inputs[1] == input_name:
            table = model.graph.initializers.get(node.inputs[0])
            if table is not None and np.ndim(table) >= 1:
                return int(np.shape(table)[0])
    return None


def make_inputs(
    model: Model,
    shapes: dict[str, tuple[tuple[int, ...], np.dtype]],
    rng: np.random.Generator | None = None,
) -> dict[str, np.ndarray]:
    """Inputs of the given shapes with realistic values (see the module docstring)."""
    rng = rng or np.random.default_rng(0)
    out = {}
    for name, (shape, dtype) in shapes.items():
        _check_fits(name, shape, np.dtype(dtype))
        lname = name.lower()
        if dtype == np.bool_:
            out[name] = np.ones(shape, dtype=bool)
        elif np.issubdtype(dtype, np.integer):
            if "mask" in lname:
                out[name] = np.ones(shape, dtype=dtype)
            elif "type" in lname:
                out[name] = np.zeros(shape, dtype=dtype)
            elif "position" in lname and shape:
                out[name] = np.broadcast_to(np.arange(shape[-1], dtype=dtype), shape).copy()
            else:
                high = _vocab_size(model, name) or 100
                out[name] = rng.integers(0, high, size=shape).astype(dtype)
        elif np.issubdtype(dtype, np.floating):
            out[name] = rng.standard_normal(shape).astype(dtype)
        else:
            raise WorkloadError(f"input {name}: cannot make values of dtype {dtype}")
    return out


def _check_fits(name: str, shape: tuple[int, ...], dtype: np.dtype) -> None:
    """A ``WorkloadError`` for an input larger than this machine's memory (numpy's
    ``MemoryError`` says neither which input nor how big)."""
    need = math.prod(shape) * max(dtype.itemsize, 8)  # random values are made as 8-byte
    try:
        have = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return
    if need > have:
        dims = "x".join(map(str, shape))
        raise WorkloadError(
            f"input {name}: {dims} {dtype} needs {need / 2**30:,.0f} GiB, more than this "
            f"machine's {have / 2**30:,.0f} GiB of memory; give smaller dims with --input"
        )


@dataclass
class RunSummary:
    """What ``run_workload`` did: the model, the shapes it called with, the defaults it
    chose. The run's numbers (calls, compiles, cache, latency, peak memory) are in the trace;
    ``ember run`` reads them from the ``run_summary`` view, the one definition of each."""

    source: str
    calls: int
    graph_break: bool
    defaults: dict[str, int]
    shapes: list[dict[str, tuple[int, ...]]]
    trace: Path | None = None


def _free_swept_dim(model: Model, sweep: Sweep) -> None:
    """Make a swept dimension that the model fixes symbolic, so other sizes are accepted.

    Exported models often fix the batch size to 1; sweeping it is how one finds out
    whether the graph really depends on it (a fixed ``Reshape`` inside fails, naming
    the node).
    """
    for i, spec in enumerate(model.inputs):
        if spec.name == sweep.name and spec.shape is not None and sweep.dim < len(spec.shape):
            if isinstance(spec.shape[sweep.dim], int):
                shape = list(spec.shape)
                shape[sweep.dim] = f"{spec.name}_dim{sweep.dim}"
                model.inputs[i] = TensorSpec(spec.name, spec.dtype, tuple(shape), spec.kind)


def run_workload(
    source: str,
    *,
    inputs: Sequence[InputOverride] = (),
    sweep: Sweep | None = None,
    calls: int = 1,
    cache_size: int = 8,
    cache_dir: str | Path | None = None,
    profile: bool = False,
    seed: int = 0,
    on_call: Callable[[int, int], None] | None = None,
) -> RunSummary:
    """Load, compile and call a model on made-up inputs.

    ``on_call(done, total)`` is called after each call (for a progress bar). With
    ``profile`` the first shape is also run once node by node (``ember.runtime.profile``)
    for the memory timeline.
    """
    import jax

    from ember.runtime.jit.compiled import compile as compile_model

    from .memory import track_device_memory
    from .model import load
    from .profile import profile as profile_model

    if calls < 1:
        raise WorkloadError(f"--calls {calls}: give at least 1 call")
    if cache_size < 1:
        raise WorkloadError(f"--cache-size {cache_size}: the cache keeps at least 1 segment")
    model = load(resolve_source(source))
    if sweep is not None:
        _free_swept_dim(model, sweep)
    steps, defaults = plan_shapes(model, inputs, sweep)
    rng = np.random.default_rng(seed)
    done = 0
    total = calls * len(steps)
    with track_device_memory():
        compiled = compile_model(model, cache_size=cache_size, cache_dir=cache_dir)
        if profile:
            profile_model(model, make_inputs(model, steps[0], rng))
        for step in steps:
            values = make_inputs(model, step, rng)
            for _ in range(calls):
                outputs = compiled(values)
                jax.block_until_ready(list(outputs.values()))
                done += 1
                if on_call:
                    on_call(done, total)
    return RunSummary(
        source=source,
        calls=done,
        graph_break=compiled.graph_break,
        defaults=defaults,
        shapes=[{n: s for n, (s, _) in step.items()} for step in steps],
    )


def iter_light_models() -> Iterator[Path]:
    yield from sorted(light_models_dir().glob("light_*.onnx"))
