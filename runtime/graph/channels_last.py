"""Channels-last values inside a traced segment: convolution outputs stay NHWC until an op
that needs ONNX's NCHW reads them.

XLA:CPU convolves NHWC: it transposes a Conv's NCHW input to NHWC and its output back,
and the elementwise ops between two convolutions fuse with those transposes. That works
for chains of Conv and activations, but XLA does not move a transpose through a Split,
Concat, Slice, pooling or Resize: in a YOLO-style C2f block (Conv, SiLU, Split, two Convs,
Concat) every SiLU output read by a Split was written NCHW and the halves transposed back
to NHWC for the next Conv, a full copy of each activation twice per block.

So while a segment is traced (``segment_trace.trace_segment``), ``run_node`` here keeps a
4-D Conv output as its NHWC array (``ChannelsLastEnv.nhwc``), and the ops that can compute
on it do so: elementwise ops (their other inputs broadcast to rank 4 and transposed),
Split/Concat/Slice with the channel axis moved, MaxPool over the middle axes,
Conv/AveragePool/Resize/BatchNormalization
(given the NCHW transpose of their input, their output transposed back: XLA folds both
into the op's own layout), GlobalAveragePool (a mean over the middle axes, which is
already NCHW's ``(N, C, 1, 1)`` after a reshape). Any other reader gets the NCHW value
(``ChannelsLastEnv.__missing__``: one transpose, once), as do the segment's outputs, so
what the segment computes is unchanged up to float rounding order.

Nodes of a load-time channels-last region (``layout.NHWC``) run as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember.runtime.graph.ir import Node, to_host
from ember.runtime.graph.ir import run_node as run_node_nchw
from ember.runtime.graph.layout import NHWC

_UNARY = frozenset(
    {
        "Relu",
        "Sigmoid",
        "HardSigmoid",
        "HardSwish",
        "Tanh",
        "LeakyRelu",
        "Elu",
        "Selu",
        "Softplus",
        "Mish",
        "Gelu",
        "Erf",
        "Exp",
        "Neg",
        "Abs",
        "Sqrt",
        "Identity",
        "Clip",
    }
)
_BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "PRelu"})
# Ops given the NCHW transpose of an NHWC input whose output is transposed back to NHWC.
_WRAPPED = frozenset({"Conv", "AveragePool", "Resize", "BatchNormalization"})
_TO_NHWC_AXIS = {0: 0, 1: 3, 2: 1, 3: 2}


def _to_last(x: Any) -> Any:
    import jax.numpy as jnp

    return jnp.transpose(x, (0, 2, 3, 1))


def _to_first(x: Any) -> Any:
    import jax.numpy as jnp

    return jnp.transpose(x, (0, 3, 1, 2))


class ChannelsLastEnv(dict[str, Any]):
    """A segment's values by name; those in ``nhwc`` are kept as their NHWC arrays and
    become NCHW (one transpose, kept) when something reads them by name."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.nhwc: dict[str, Any] = {}

    def __missing__(self, name: str) -> Any:
        if name in self.nhwc:
            value = _to_first(self.nhwc[name])
            self[name] = value
            return value
        raise KeyError(name)

    def __contains__(self, name: object) -> bool:
        return super().__contains__(name) or name in self.nhwc

    def get(self, name: str, default: Any = None) -> Any:
        # through __missing__: an NHWC value read with get() is given as NCHW too
        return self[name] if name in self else default  # noqa: SIM401


def _is_array(x: Any) -> bool:
    return hasattr(x, "ndim") and hasattr(x, "dtype") and not isinstance(x, np.ndarray)


def _as_nhwc(x: Any) -> Any:
    """A value broadcast against an NHWC one: its ONNX (NCHW) shape padded to rank 4 and
    transposed; scalars as they are."""
    if np.ndim(x) == 0:
        return x
    import jax.numpy as jnp

    x = jnp.asarray(x)
    return _to_last(x.reshape((1,) * (4 - x.ndim) + x.shape))


def _elementwise(node: Node, env: ChannelsLastEnv) -> tuple[Any, ...] | None:
    nhwc = env.nhwc
    if not any(n in nhwc for n in node.inputs if n):
        return None
    args: list[Any] = []
    for n in node.inputs:
        if not n:
            args.append(None)
        elif n in nhwc:
            args.append(nhwc[n])
        else:
            v = env[n]
            if isinstance(v, list) or np.ndim(v) > 4:
                return None
            args.append(_as_nhwc(v))
    out = node.opdef.fn(*args, **node.attrs)  # type: ignore[union-attr]
    return out if isinstance(out, tuple) else (out,)


def _split(node: Node, env: ChannelsLastEnv) -> tuple[Any, ...] | None:
    x = node.inputs[0]
    if x not in env.nhwc:
        return None
    args = [env.nhwc[x]] + [to_host(env[n]) if n else None for n in node.inputs[1:]]
    axis = int(node.attrs.get("axis", 0)) % 4
    out = node.opdef.fn(*args, **{**node.attrs, "axis": _TO_NHWC_AXIS[axis]})  # type: ignore[union-attr]
    return out if isinstance(out, tuple) else (out,)


def _concat(node: Node, env: ChannelsLastEnv) -> tuple[Any, ...] | None:
    names = [n for n in node.inputs if n]
    if not any(n in env.nhwc for n in names):
        return None
    args = []
    for n in names:
        if n in env.nhwc:
            args.append(env.nhwc[n])
        else:
            v = env[n]
            if not _is_array(v) or v.ndim != 4:
                return None
            args.append(_to_last(v))
    axis = int(node.attrs.get("axis", 1)) % 4
    return (node.opdef.fn(*args, axis=_TO_NHWC_AXIS[axis]),)  # type: ignore[union-attr]


def _slice(node: Node, env: ChannelsLastEnv) -> tuple[Any, ...] | None:
    x = node.inputs[0]
    if x not in env.nhwc or len(node.inputs) < 3 or node.attrs:
        return None  # Slice-1 (bounds as attributes) and readers of NCHW values: as they are
    starts, ends, axes, steps = (
        to_host(env[n]) if n else None for n in (list(node.inputs[1:]) + [""] * 4)[:4]
    )
    if starts is None:
        return None
    n_axes = int(np.size(starts))
    axes_ = range(n_axes) if axes is None else [int(a) % 4 for a in np.ravel(axes)]
    moved = np.asarray([_TO_NHWC_AXIS[int(a)] for a in axes_], np.int64)
    return (node.opdef.fn(env.nhwc[x], starts, ends, moved, steps),)  # type: ignore[union-attr]


def _wrapped(node: Node, env: ChannelsLastEnv) -> tuple[Any, ...] | None:
    x = node.inputs[0] if node.inputs else ""
    if node.op_type == "Conv":
        if (
            len(node.inputs) < 2
            or np.ndim(env[node.inputs[1]]) != 4
            or len([o for o in node.outputs if o]) != 1
        ):
            return None
    elif x not in env.nhwc or len([o for o in node.outputs if o]) != 1:
        return None
    if x in env.nhwc and not _is_array(env.nhwc[x]):
        return None
    outs = run_node_nchw(node, env)  # reads x as NCHW: a transpose XLA folds into the op
    y = outs[0]
    if not _is_array(y) or y.ndim != 4:
        return None if x in env.nhwc else outs
    return (_Nhwc(_to_last(y)),)


def _global_average_pool(node: Node, env: ChannelsLastEnv) -> tuple[Any, ...] | None:
    x = node.inputs[0]
    if x not in env.nhwc:
        return None
    import jax.numpy as jnp

    v = env.nhwc[x]
    n = int(v.shape[1] * v.shape[2])
    if not jnp.issubdtype(v.dtype, jnp.floating) or n == 0:
        return None
    # as ops.pool.global_average_pool: scaled, then summed
    pooled = jnp.sum(v * jnp.asarray(1.0 / n, v.dtype), axis=(1, 2))
    return (pooled.reshape(v.shape[0], v.shape[3], 1, 1),)


def _max_pool(node: Node, env: ChannelsLastEnv) -> tuple[Any, ...] | None:
    """MaxPool (2-D, no indices) as a window max over NHWC's middle axes: given the NCHW
    transpose, XLA:CPU wrote the pooled value NCHW and transposed it back."""
    x = node.inputs[0]
    if x not in env.nhwc or len([o for o in node.outputs if o]) != 1 or len(node.outputs) != 1:
        return None
    from ember.runtime.ops.pool import pool_geometry, window_max

    v = env.nhwc[x]
    a = node.attrs
    if int(a.get("storage_order", 0)) or len(a.get("kernel_shape", ())) != 2:
        return None
    kernel, strides, pad, extra, dil = pool_geometry(
        (v.shape[0], v.shape[3], v.shape[1], v.shape[2]),
        a["kernel_shape"],
        auto_pad=a.get("auto_pad", "NOTSET"),
        pads=a.get("pads"),
        strides=a.get("strides"),
        dilations=a.get("dilations"),
        ceil_mode=int(a.get("ceil_mode", 0)),
    )
    padding = [(lo, hi + e) for (lo, hi), e in zip(pad, extra, strict=True)]
    return (window_max(v, (1, 2), kernel, strides, padding, dil),)


class _Nhwc:
    """An output that ``run_node`` keeps as NHWC (not an ONNX value)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


_RULES: dict[str, Callable[[Node, ChannelsLastEnv], tuple[Any, ...] | None]] = {
    **dict.fromkeys(_UNARY | _BINARY, _elementwise),
    **dict.fromkeys(_WRAPPED, _wrapped),
    "Split": _split,
    "Concat": _concat,
    "Slice": _slice,
    "GlobalAveragePool": _global_average_pool,
    "MaxPool": _max_pool,
}


def run_node(node: Node, env: ChannelsLastEnv) -> None:
    """Run ``node`` on ``env`` and store its outputs there, NHWC where the rules above
    keep them so (Conv outputs, and what elementwise ops, Split, Concat, Slice, pools and
    Resize compute from NHWC values)."""
    rule = _RULES.get(node.op_type) if node.domain in ("", "ai.onnx") else None
    outs: tuple[Any, ...] | None = None
    if rule is not None and NHWC not in node.attrs and node.opdef is not None:
        try:
            outs = rule(node, env)
        except Exception:
            outs = None
    nhwc_rule = outs is not None and rule is not _wrapped and rule is not _global_average_pool
    if outs is None:
        outs = run_node_nchw(node, env)
    for name, value in zip(node.outputs, outs, strict=False):
        if not name:
            continue
        if isinstance(value, _Nhwc):
            env.nhwc[name] = value.value
        elif nhwc_rule and _is_array(value) and value.ndim == 4:
            env.nhwc[name] = value
        else:
            env[name] = value
