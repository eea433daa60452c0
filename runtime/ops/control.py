"""Control flow: ``If``, ``Loop`` and ``Scan``.

Their graph attributes arrive as ``Subgraph`` callables from the interpreter
(``body(*inputs) -> tuple(outputs)``), bound to the enclosing scope.

- ``If`` with a host-known condition runs the chosen branch in Python, so the branches may
  give different shapes; with a traced condition it is ``lax.cond`` (same shapes needed).
  Fed by a computed value outside a trace, the condition is a graph break (``host_inputs``).
- ``Loop`` with a host-known trip count and condition, inside a trace, is one ``lax.scan``
  over the iterations (the body traced once) when the body keeps its shapes and its
  condition stays true; otherwise (the body reads ``iter_num`` on the host, say) it unrolls
  in Python, each iteration seeing a host ``iter_num`` so shape arithmetic on it folds.
  When the condition becomes a traced value it continues as ``lax.while_loop`` (no scan
  outputs possible then). A traced trip count or condition (a Loop without scan outputs,
  which the graph analysis does not break on) is ``lax.while_loop`` from the start; a body
  that changes shapes then raises ``LoopNeedsHost``, which makes the node a graph break; so
  does a Loop with scan outputs whose condition turns out traced (their length is data).
- ``Scan`` is ``lax.scan`` over the scan axis.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import each_tensor, is_host, op

__all__ = ["LoopNeedsHost", "if_", "loop", "loop_bounded", "loop_scan_outputs", "scan"]


class LoopNeedsHost(TypeError):
    """A Loop on a traced trip count whose body changes shapes: it must run on the host."""

    needs_host = True


def loop_scan_outputs(n_inputs: int, n_body_outputs: int) -> int:
    """The number of scan outputs of a Loop node with these input and body output counts."""
    return n_body_outputs - 1 - max(0, n_inputs - 2)


def _is_concrete(v: Any) -> bool:
    if v is None or is_host(v):
        return True
    import jax

    return not isinstance(v, jax.core.Tracer)


def _truth(v: Any) -> bool:
    return bool(np.asarray(v).reshape(-1)[0])


@op("If", host_inputs=(0,), subgraphs=True)
def if_(cond: Any, *, then_branch: Any, else_branch: Any) -> tuple[Any, ...]:
    """The outputs of then_branch or else_branch (lax.cond for a traced condition); opset 1+."""
    if _is_concrete(cond):
        return tuple((then_branch if _truth(cond) else else_branch)())
    import jax.numpy as jnp
    from jax import lax

    pred = jnp.reshape(cond, (-1,))[0].astype(bool)
    then_out = None

    def then_fn(_: Any) -> tuple[Any, ...]:
        nonlocal then_out
        then_out = tuple(_as_jax(v) for v in then_branch())
        return then_out

    def else_fn(_: Any) -> tuple[Any, ...]:
        return tuple(_as_jax(v) for v in else_branch())

    try:
        return tuple(lax.cond(pred, then_fn, else_fn, None))
    except TypeError as exc:
        raise TypeError(
            "If on a traced condition needs branches with the same output shapes and dtypes "
            f"(lax.cond): {exc}"
        ) from exc


def _as_jax(v: Any) -> Any:
    import jax.numpy as jnp

    return each_tensor(v, jnp.asarray)


def _stack(values: list[Any]) -> Any:
    if not values:
        return np.zeros((0,), np.float32)
    if all(is_host(v) for v in values):
        return np.stack([np.asarray(v) for v in values])
    import jax
    import jax.numpy as jnp

    if all(isinstance(v, jax.Array) and not isinstance(v, jax.core.Tracer) for v in values):
        if all(d.platform == "cpu" for d in values[0].devices()):
            # concrete arrays in host memory (a compiled Loop body's scan outputs): numpy
            # stacks 50 of them in a tenth of jnp.stack's time (one eager op per element)
            return np.stack([np.asarray(v) for v in values])
        return jnp.stack(values)
    return jnp.stack([jnp.asarray(v) for v in values])


@op("Loop", host_inputs=(0, 1), subgraphs=True)
def loop(M: Any, cond: Any, *v_initial: Any, body: Any) -> tuple[Any, ...]:
    """``body`` up to M times while cond holds; final carried values and scan outputs; opset 1+."""
    n_carried = len(v_initial)
    n_scan = len(body.output_names) - 1 - n_carried
    values = list(v_initial)
    scans: list[list[Any]] = [[] for _ in range(n_scan)]
    max_iter = None if M is None else int(np.asarray(M).reshape(-1)[0]) if _is_concrete(M) else M
    if not isinstance(max_iter, (int, type(None))) or not _is_concrete(cond):
        return _while_loop(M, cond, values, body, n_scan)
    keep_going = True if cond is None else _truth(cond)
    c_value = np.array(keep_going) if cond is None else np.asarray(cond).astype(bool)
    if keep_going and max_iter is not None and max_iter >= 2 and _traced(values):
        scanned = _scan_loop(max_iter, c_value, values, body, n_carried)
        if scanned is not None:
            return scanned
    i = 0
    while keep_going and (max_iter is None or i < max_iter):
        outs = body(np.array(i, np.int64), c_value, *values)
        c_out = outs[0]
        values = [_keep_dtype(o, v) for o, v in zip(outs[1 : 1 + n_carried], values, strict=True)]
        for k, s in enumerate(outs[1 + n_carried :]):
            scans[k].append(s)
        i += 1
        if not _is_concrete(c_out):
            if n_scan:
                raise LoopNeedsHost(
                    "Loop with scan outputs needs a condition known on the host; its body "
                    "computes the condition from traced values"
                )
            remaining = None if max_iter is None else max_iter
            return _while_loop(remaining, c_out, values, body, 0, start=i)
        c_value = np.asarray(c_out).astype(bool)
        keep_going = _truth(c_out)
    return (*values, *(_stack(s) for s in scans))


def _traced(values: list[Any]) -> bool:
    import jax

    return any(isinstance(v, jax.core.Tracer) for v in values)


class _NotAFor(Exception):
    """The body's condition does not stay true on the host: not a plain for loop."""


def _scan_loop(
    trips: int, c_value: Any, values: list[Any], body: Any, n_carried: int
) -> tuple[Any, ...] | None:
    """``trips`` iterations as one ``lax.scan`` (the body traced once), or None when the body
    needs its iteration number on the host, changes shapes or may stop early."""
    import jax.numpy as jnp
    from jax import lax

    if any(v is None or isinstance(v, list) for v in values):
        return None
    init = tuple(jnp.asarray(v) for v in values)

    def step(carry: tuple[Any, ...], i: Any) -> tuple[Any, Any]:
        outs = body(i, c_value, *carry)
        c_out = outs[0]
        if not (_is_concrete(c_out) and _truth(c_out)):
            raise _NotAFor
        carried = zip(outs[1 : 1 + n_carried], carry, strict=True)
        new = tuple(jnp.asarray(o).astype(c.dtype) for o, c in carried)
        return new, tuple(jnp.asarray(o) for o in outs[1 + n_carried :])

    try:
        final, ys = lax.scan(step, init, jnp.arange(trips, dtype=jnp.int64))
    except Exception:
        return None  # unrolled instead, where a real error shows again
    return (*final, *ys)


def _keep_dtype(new: Any, old: Any) -> Any:
    # Loop-carried values keep their dtype (ONNX requires it; numpy may widen).
    if new is old:  # passed through the step (a decoder's weights): ~30 a step
        return new
    if isinstance(new, list) or new is None or old is None or isinstance(old, list):
        return new
    dt = getattr(old, "dtype", None)
    if dt is not None and getattr(new, "dtype", dt) != dt and is_host(new):
        return np.asarray(new).astype(dt)
    return new


def _while_loop(
    M: Any, cond: Any, values: list[Any], body: Any, n_scan: int, start: int = 0
) -> tuple[Any, ...]:
    import jax.numpy as jnp
    from jax import lax

    if n_scan:
        raise LoopNeedsHost(
            "Loop with scan outputs needs a trip count and condition known on the host "
            "(the output length would depend on traced values)"
        )
    init_vals = tuple(jnp.asarray(v) for v in values)
    c0 = jnp.asarray(True) if cond is None else jnp.reshape(jnp.asarray(cond), ()).astype(bool)
    state0 = (jnp.asarray(start, jnp.int64), c0, init_vals)

    def cond_fn(state: Any) -> Any:
        i, c, _ = state
        ok = c
        if M is not None:
            ok = jnp.logical_and(ok, i < jnp.reshape(jnp.asarray(M), ()).astype(jnp.int64))
        return ok

    def body_fn(state: Any) -> Any:
        i, c, vs = state
        outs = body(i, c, *vs)
        new_c = jnp.reshape(jnp.asarray(outs[0]), ()).astype(bool)
        new_vs = tuple(
            jnp.asarray(o).astype(v.dtype) for o, v in zip(outs[1 : 1 + len(vs)], vs, strict=True)
        )
        return (i + 1, new_c, new_vs)

    try:
        _, _, final = lax.while_loop(cond_fn, body_fn, state0)
    except TypeError as exc:
        raise LoopNeedsHost(
            f"Loop on a traced trip count or condition needs a body that keeps its shapes "
            f"and dtypes (lax.while_loop): {exc}"
        ) from exc
    return tuple(final)


def loop_bounded(
    M: Any, cond: Any, rows: Any, start: Any, *v_initial: Any, body: Any
) -> tuple[Any, ...]:
    """Up to ``rows`` (a host int) steps of a ``Loop`` with scan outputs under a trace, as one
    ``lax.while_loop`` that writes each step's scan outputs into buffers of ``rows`` rows: at
    most ``M`` steps (traced; None: no limit) while the condition holds, numbered from
    ``start`` (traced). Returns the final carried values, the buffers, the number of steps
    run (the rows that are scan outputs) and the last condition; a caller on the host runs
    it again from there while all rows were used and the condition holds. Not registered: a
    break runs a Loop with it (see ``ember.runtime.breaks.subgraphs``). A body that changes
    shapes raises ``TypeError``."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    n_rows = int(np.asarray(rows).reshape(-1)[0])
    n_carried = len(v_initial)
    init = tuple(jnp.asarray(v) for v in v_initial)
    first = jnp.reshape(jnp.asarray(start), ()).astype(jnp.int64)
    c0 = jnp.asarray(True) if cond is None else jnp.reshape(jnp.asarray(cond), ()).astype(bool)
    limit = jnp.asarray(n_rows, jnp.int64)
    if M is not None:
        limit = jnp.minimum(jnp.reshape(jnp.asarray(M), ()).astype(jnp.int64), limit)
    # the scan outputs' shapes: the body traced once for them
    shapes = jax.eval_shape(lambda i, c, *vs: tuple(body(i, c, *vs)), first, c0, *init)
    bufs0 = tuple(jnp.zeros((n_rows, *a.shape), a.dtype) for a in shapes[1 + n_carried :])

    def cond_fn(state: Any) -> Any:
        i, c, _, _ = state
        return jnp.logical_and(c, i < limit)

    def body_fn(state: Any) -> Any:
        i, c, vs, bufs = state
        outs = body(first + i, c, *vs)
        new_c = jnp.reshape(jnp.asarray(outs[0]), ()).astype(bool)
        new_vs = tuple(
            jnp.asarray(o).astype(v.dtype) for o, v in zip(outs[1 : 1 + n_carried], vs, strict=True)
        )
        new_bufs = tuple(
            lax.dynamic_update_index_in_dim(b, jnp.asarray(o).astype(b.dtype), i, 0)
            for b, o in zip(bufs, outs[1 + n_carried :], strict=True)
        )
        return (i + 1, new_c, new_vs, new_bufs)

    i0 = jnp.asarray(0, jnp.int64)
    count, c, final, bufs = lax.while_loop(cond_fn, body_fn, (i0, c0, init, bufs0))
    return (*final, *bufs, count, c)


@op("Scan", since=9, subgraphs=True)
def scan(
    *inputs: Any,
    body: Any,
    num_scan_inputs: int,
    scan_input_axes: list[int] | None = None,
    scan_input_directions: list[int] | None = None,
    scan_output_axes: list[int] | None = None,
    scan_output_directions: list[int] | None = None,
) -> tuple[Any, ...]:
    """``body`` over the scan inputs' slices (axes, directions): final states, outputs; opset 9+."""
    import jax.numpy as jnp
    from jax import lax

    n_state = len(inputs) - num_scan_inputs
    states = tuple(jnp.asarray(s) for s in inputs[:n_state])
    xs_in = inputs[n_state:]
    axes = scan_input_axes or [0] * num_scan_inputs
    dirs = scan_input_directions or [0] * num_scan_inputs
    xs = []
    for x, axis, d in zip(xs_in, axes, dirs, strict=True):
        x = jnp.asarray(x)
        x = jnp.moveaxis(x, axis % x.ndim, 0)
        xs.append(jnp.flip(x, 0) if d else x)

    def step(carry: tuple[Any, ...], x_t: tuple[Any, ...]) -> tuple[Any, Any]:
        outs = body(*carry, *x_t)
        new_carry = tuple(
            jnp.asarray(o).astype(c.dtype) for o, c in zip(outs[:n_state], carry, strict=True)
        )
        return new_carry, tuple(jnp.asarray(o) for o in outs[n_state:])

    final, ys = lax.scan(step, states, tuple(xs))
    n_out = len(ys)
    out_axes = scan_output_axes or [0] * n_out
    out_dirs = scan_output_directions or [0] * n_out
    outs = []
    for y, axis, d in zip(ys, out_axes, out_dirs, strict=True):
        if d:
            y = jnp.flip(y, 0)
        outs.append(jnp.moveaxis(y, 0, axis % y.ndim))
    return (*final, *outs)


@op("Scan", since=8, subgraphs=True)
def scan_8(
    sequence_lens: Any,
    *inputs: Any,
    body: Any,
    num_scan_inputs: int,
    directions: list[int] | None = None,
) -> tuple[Any, ...]:
    # Opset 8 has a batch axis 0 and scans axis 1; sequence_lens shorter than the axis are
    # not supported (rarely used).
    """The first Scan: each batch entry (axis 0) scanned on axis 1 by ``directions``; opset 8."""
    import jax

    n_state = len(inputs) - num_scan_inputs
    batch = np.shape(inputs[0])[0] if inputs else 0
    results = []
    for b in range(batch):
        per = [x[b] for x in inputs]
        results.append(
            scan(
                *per,
                body=body,
                num_scan_inputs=num_scan_inputs,
                scan_input_directions=directions,
            )
        )
    import jax.numpy as jnp

    del jax, n_state
    return tuple(jnp.stack([r[k] for r in results]) for k in range(len(results[0])))
