"""Shapes a subgraph's program speculates on: a ``Slice``, ``Range`` or ``If`` whose output
shape depends on a value computed on the device, compiled for the shape a run has seen.

A decoder's ``Loop`` body reads its step counter to cut one row of a buffer
(``Slice(buf, starts=i, ends=min(rows, i + 1))``), to index the row it writes
(``Range(i, i + 1)``) and to end (an ``If`` whose branches give a scalar and a ``[1]``).
Each output's *values* move with the counter, but its *shape* does not. Traced as they are,
such nodes read the counter on the host and the body stays eager (node by node, every step).

Here the body runs eagerly once while its shapes are noted (``observe``): each candidate
node's output shapes become a static value of the program's key (``"Slice_0 shape seen"``),
and the trace computes the node for those shapes (``run``): a ``lax.dynamic_slice`` of the
seen length, ``start + arange(n) * delta``, an ``If``'s branches reshaped to the seen
shapes. Each also computes whether its real shape (the ONNX one, from the values) is the
seen shape: the program returns all of those as one bool, ``GUARDS``. A step whose guard
fails is run again eagerly by the caller (``breaks.subgraphs``): what the program gave for
it is dropped, so no step's result ever comes from a wrong speculation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ember.runtime.breaks.plan import computed_from
from ember.runtime.graph.ir import Graph, Node, Subgraph, run_node

__all__ = ["GUARDS", "OPS", "candidates", "observe", "run", "seen_name"]

GUARDS = "ember: speculated shapes hold"
"""The output of a program with speculated shapes: true when every one held."""

# a Slice before opset 10 takes its bounds as attributes: never traced
OPS = frozenset({"Slice", "Range", "If"})


def seen_name(node: Node) -> str:
    """The static value that holds the shapes ``node``'s outputs were seen with."""
    return f"{node.name} shape seen"


def candidates(graph: Graph, traced: Iterable[str]) -> tuple[Node, ...]:
    """The nodes of ``graph`` that would read a value computed from ``traced`` (a program's
    arguments) on the host and that ``run`` can compute for a seen shape."""
    device = computed_from(graph, set(traced))
    return tuple(
        node
        for node in graph.nodes
        if node.op_type in OPS
        and node.opdef is not None
        and any(node.inputs[i] in device for i in node.opdef.host_inputs if i < len(node.inputs))
    )


def observe(nodes: Sequence[Node], env: Mapping[str, Any]) -> dict[str, list[np.ndarray]]:
    """The static values of ``nodes`` from ``env``, the values of an eager run: per node, one
    int64 array of shape per output."""
    return {
        seen_name(node): [np.array(np.shape(env[o]), np.int64) for o in node.outputs if o]
        for node in nodes
    }


def run(node: Node, env: Mapping[str, Any], seen: list[np.ndarray]) -> tuple[tuple[Any, ...], Any]:
    """``node``'s outputs computed for the ``seen`` shapes under a trace, and whether its
    real shapes are those (a traced bool; ``True`` where nothing was speculated)."""
    import jax

    opdef = node.opdef
    assert opdef is not None  # a candidate has its op
    host = [
        env[node.inputs[i]] for i in opdef.host_inputs if i < len(node.inputs) and node.inputs[i]
    ]
    if not any(isinstance(v, jax.core.Tracer) for v in host):
        return run_node(node, env), True  # its host inputs are known after all
    shapes = [tuple(int(d) for d in s) for s in seen]
    args = [env[n] if n else None for n in node.inputs]
    if node.op_type == "Slice":
        out, ok = _slice(*args, shape=shapes[0])
        return (out,), ok
    if node.op_type == "Range":
        out, ok = _range(*args, shape=shapes[0])
        return (out,), ok
    then_branch = Subgraph(node.attrs["then_branch"], env)
    else_branch = Subgraph(node.attrs["else_branch"], env)
    return _if(args[0], then_branch, else_branch, shapes)


def _host_ints(value: Any) -> list[int]:
    # a traced value raises jax's TracerArrayConversionError: the subgraph stays eager
    return [int(v) for v in np.asarray(value).reshape(-1)]


def _slice(
    data: Any,
    starts: Any,
    ends: Any,
    axes: Any = None,
    steps: Any = None,
    *,
    shape: tuple[int, ...],
) -> tuple[Any, Any]:
    """``data[starts:ends:steps]`` of ``shape``: one ``lax.dynamic_slice`` (positive steps;
    axes and steps known on the host)."""
    import jax.numpy as jnp
    from jax import lax

    starts, ends = jnp.reshape(starts, (-1,)), jnp.reshape(ends, (-1,))
    count = starts.shape[0]
    axes_ = list(range(count)) if axes is None else _host_ints(axes)
    steps_ = [1] * count if steps is None else _host_ints(steps)
    if any(s <= 0 for s in steps_) or len(shape) != data.ndim:
        raise _unsupported(f"Slice with steps {steps_} or rank {len(shape)} != {data.ndim}")
    begin = [jnp.zeros((), starts.dtype)] * data.ndim
    spans = list(data.shape)
    strided: list[tuple[int, int, int]] = []
    ok = jnp.asarray(True)
    for k, (axis, step) in enumerate(zip(axes_, steps_, strict=True)):
        axis = axis + data.ndim if axis < 0 else axis
        dim, length = data.shape[axis], shape[axis]
        start = jnp.clip(jnp.where(starts[k] < 0, starts[k] + dim, starts[k]), 0, dim)
        end = jnp.clip(jnp.where(ends[k] < 0, ends[k] + dim, ends[k]), 0, dim)
        real = jnp.maximum((end - start + step - 1) // step, 0)
        span = (length - 1) * step + 1 if length else 0
        # dynamic_slice moves a start past dim - span back: the guard refuses that case
        ok = ok & (real == length) & (start + span <= dim)
        begin[axis], spans[axis] = start, span
        if step > 1:
            strided.append((axis, span, step))
    out = lax.dynamic_slice(data, begin, spans)
    for axis, span, step in strided:
        out = lax.slice_in_dim(out, 0, span, step, axis)
    if tuple(out.shape) != shape:
        raise _unsupported(f"Slice to {shape} gave {tuple(out.shape)}")
    return out, ok


def _range(start: Any, limit: Any, delta: Any, *, shape: tuple[int, ...]) -> tuple[Any, Any]:
    """``start, start + delta, ...`` (below ``limit``) of ``shape``: ``arange`` times delta.
    Floats count and step in double, as the eager op (``ops.tensor.range_``) and
    onnxruntime do: in float32, ``ceil((1.3 - 0.1) / 0.3)`` is 4 where double gives 5."""
    import jax.numpy as jnp

    s, lim, d = (jnp.reshape(v, ()) for v in (start, limit, delta))
    (length,) = shape
    dtype = s.dtype
    if jnp.issubdtype(dtype, jnp.integer):
        up = (lim - s + d - 1) // jnp.where(d == 0, 1, d)
        down = (s - lim - d - 1) // jnp.where(d == 0, 1, -d)
        real = jnp.where(d > 0, up, down)
        values = s + jnp.arange(length, dtype=dtype) * d
    else:
        s, lim, d = (v.astype(jnp.float64) for v in (s, lim, d))
        real = jnp.ceil((lim - s) / d)
        values = s + jnp.arange(length, dtype=jnp.float64) * d
    ok = (jnp.maximum(real, 0) == length) & (d != 0)
    return values.astype(dtype), ok


def _if(cond: Any, then_branch: Any, else_branch: Any, shapes: list[tuple[int, ...]]) -> Any:
    """An ``If``'s outputs of ``shapes`` from ``lax.cond``: each branch's outputs reshaped to
    them (zeros, and the guard false, where a branch's sizes differ)."""
    import jax.numpy as jnp
    from jax import lax

    def fitted(branch: Any) -> Any:
        def fn(_: Any) -> tuple[tuple[Any, ...], Any]:
            outs = [jnp.asarray(v) for v in branch()]
            if len(outs) != len(shapes):
                raise _unsupported(f"If with {len(outs)} outputs, {len(shapes)} seen")
            fixed, ok = [], True
            for v, shape in zip(outs, shapes, strict=True):
                if v.size == int(np.prod(shape)):
                    fixed.append(jnp.reshape(v, shape))
                    ok = ok and tuple(v.shape) == shape
                else:
                    fixed.append(jnp.zeros(shape, v.dtype))
                    ok = False
            return tuple(fixed), jnp.asarray(ok)

        return fn

    pred = jnp.reshape(cond, (-1,))[0].astype(bool)
    outs, ok = lax.cond(pred, fitted(then_branch), fitted(else_branch), None)
    return tuple(outs), ok


def _unsupported(what: str) -> Exception:
    """Raised while tracing: the subgraph stays eager, its compile span saying ``what``."""
    return TypeError(f"cannot speculate on the shape of a {what}")
