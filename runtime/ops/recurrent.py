"""Recurrent ops: RNN, GRU, LSTM as ``lax.scan`` over time, one scan per direction.

``sequence_lens`` is honoured by masking: past a sequence's end the state is carried
unchanged and the output is zero; the reverse direction reverses each sequence within its
own length, as ONNX Runtime does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from . import op

_DEFAULTS: dict[str, tuple[float, float]] = {
    "leakyrelu": (0.01, 0.0),
    "thresholdedrelu": (1.0, 0.0),
    "scaledtanh": (1.0, 1.0),
    "hardsigmoid": (0.2, 0.5),
    "elu": (1.0, 0.0),
    "affine": (1.0, 0.0),
}


_TAKES_ALPHA = {"leakyrelu", "thresholdedrelu", "scaledtanh", "hardsigmoid", "elu", "affine"}
_TAKES_BETA = {"scaledtanh", "hardsigmoid", "affine"}


def _activation(name: str, alpha: float | None, beta: float | None) -> Callable:
    key = name.lower()
    a0, b0 = _DEFAULTS.get(key, (0.0, 0.0))
    a = a0 if alpha is None else alpha
    b = b0 if beta is None else beta
    table: dict[str, Callable] = {
        "sigmoid": jax.nn.sigmoid,
        "tanh": jnp.tanh,
        "relu": jax.nn.relu,
        "leakyrelu": lambda x: jnp.where(x >= 0, x, a * x),
        "thresholdedrelu": lambda x: jnp.where(x > a, x, 0),
        "scaledtanh": lambda x: a * jnp.tanh(b * x),
        "hardsigmoid": lambda x: jnp.clip(a * x + b, 0, 1),
        "elu": lambda x: jnp.where(x >= 0, x, a * (jnp.exp(x) - 1)),
        "softsign": lambda x: x / (1 + jnp.abs(x)),
        "softplus": jax.nn.softplus,
        "affine": lambda x: a * x + b,
    }
    if key not in table:
        raise ValueError(f"unsupported recurrent activation {name!r}")
    return table[key]


def _activations(
    names: Sequence[str] | None,
    alphas: Sequence[float] | None,
    betas: Sequence[float] | None,
    defaults: Sequence[str],
    num_dir: int,
) -> list[list[Callable]]:
    """Activation functions per direction (forward first)."""
    per_dir = len(defaults)
    if not names:
        names = list(defaults) * num_dir
    elif len(names) == per_dir and num_dir == 2:
        names = list(names) * 2
    # The alpha/beta lists are consumed in order by the functions that take them (as ONNX
    # Runtime reads them), not indexed by the function's position.
    alpha_left = list(alphas or [])
    beta_left = list(betas or [])
    fns = []
    for n in names:
        key = n.lower()
        alpha = alpha_left.pop(0) if key in _TAKES_ALPHA and alpha_left else None
        beta = beta_left.pop(0) if key in _TAKES_BETA and beta_left else None
        fns.append(_activation(n, alpha, beta))
    return [fns[d * per_dir : (d + 1) * per_dir] for d in range(num_dir)]


def _time_index(seq_len: int, lens, reverse: bool):
    """(seq, batch) gather index into time for each direction, or None for identity."""
    if not reverse:
        return None
    t = jnp.arange(seq_len)[:, None]
    if lens is None:
        return jnp.broadcast_to(seq_len - 1 - t, (seq_len, 1))
    lens = jnp.asarray(lens)[None, :]
    return jnp.where(t < lens, lens - 1 - t, t)


def _gather_time(x, idx):
    if idx is None:
        return x
    if idx.shape[1] == 1:
        return x[idx[:, 0]]
    return jnp.take_along_axis(x, idx[..., None], axis=0)


def _run(
    cell: Callable,
    x,
    states: tuple,
    lens,
    reverse: bool,
):
    """Scan ``cell(x_t, states) -> (h_t, states)`` over time with masking (``x``: the
    projected input terms, one per step)."""
    seq_len, batch = x.shape[0], x.shape[1]
    idx = _time_index(seq_len, lens, reverse)
    xs = _gather_time(x, idx)
    if lens is None:
        mask = jnp.ones((seq_len, batch, 1), bool)
    else:
        mask = (jnp.arange(seq_len)[:, None] < jnp.asarray(lens)[None, :])[..., None]

    def step(carry, inp):
        xt, m = inp
        h, new = cell(xt, carry)
        new = tuple(jnp.where(m, n, c) for n, c in zip(new, carry, strict=True))
        return new, jnp.where(m, h, jnp.zeros_like(h))

    final, ys = lax.scan(step, states, (xs, mask))
    return _gather_time(ys, idx), final


def _prepare(X, layout: int):
    x = jnp.asarray(X)
    return jnp.swapaxes(x, 0, 1) if layout == 1 else x


def _finish(ys: list, finals: list[list], layout: int):
    y = jnp.stack(ys, axis=1)  # (seq, dir, batch, hidden)
    outs = [jnp.stack(f, axis=0) for f in finals]  # (dir, batch, hidden)
    if layout == 1:
        y = jnp.transpose(y, (2, 0, 1, 3))
        outs = [jnp.swapaxes(o, 0, 1) for o in outs]
    return (y, *outs)


def _initial(value, d: int, batch: int, hidden: int, dtype, layout: int):
    if value is None:
        return jnp.zeros((batch, hidden), dtype)
    v = jnp.asarray(value)
    return v[:, d] if layout == 1 else v[d]


def _times_t(a, b):
    """``a @ b.T`` as one dot over ``b``'s last axis, without a transposed copy of ``b``."""
    return lax.dot_general(a, b, (((a.ndim - 1,), (1,)), ((), ())))


def _clip(v, clip):
    return v if clip is None else jnp.clip(v, -clip, clip)


def _directions(direction: str) -> list[bool]:
    return {"forward": [False], "reverse": [True], "bidirectional": [False, True]}[direction]


def _recurrence(
    X,
    R,
    sequence_lens,
    initials: list,
    cell_for: Callable[[int, Any, int, list[Callable]], tuple[Callable, Callable]],
    *,
    layout: int,
    direction: str,
    activations,
    alpha,
    beta,
    default: list[str],
):
    """The loop RNN, GRU and LSTM share: for each direction ``d``, ``cell_for(d, dtype, hidden,
    that direction's activations)`` builds ``(project, cell)``: ``project`` maps the whole
    input sequence to its input terms, one matmul over all steps (``X W^T + b``, as
    onnxruntime does), and ``cell`` is the step on one of them, which runs over the sequence
    from the states in ``initials`` (``initial_h``, and ``initial_c`` for LSTM; None: zeros);
    returns every hidden state and each state's last value, in ``layout``.

    The input term was computed inside the step: a (batch, input) x (input, 4 hidden) matmul
    per step, and XLA:CPU copied each weight into its transposed layout on every step (the
    ``W.T`` of a loop-invariant value is not hoisted out of the while loop). ddddocr's CRNN
    (a bidirectional LSTM over 64 columns): the two while loops took ~186 ms of a ~190 ms
    call at load ~12. Weights are read through ``_times_t``: no transpose to copy."""
    x = _prepare(X, layout)
    hidden = jnp.asarray(R).shape[-1]
    dirs = _directions(direction)
    acts = _activations(activations, alpha, beta, default, len(dirs))
    ys: list[Any] = []
    finals: list[list[Any]] = [[] for _ in initials]
    for d, reverse in enumerate(dirs):
        project, cell = cell_for(d, x.dtype, hidden, acts[d])
        starts = tuple(_initial(v, d, x.shape[1], hidden, x.dtype, layout) for v in initials)
        y, last = _run(cell, project(x), starts, sequence_lens, reverse)
        ys.append(y)
        for final, state in zip(finals, last, strict=True):
            final.append(state)
    return _finish(ys, finals, layout)


@op("RNN", since=1)
def rnn(
    X,
    W,
    R,
    B=None,
    sequence_lens=None,
    initial_h=None,
    *,
    activation_alpha=None,
    activation_beta=None,
    activations=None,
    clip=None,
    direction="forward",
    hidden_size=None,
    layout=0,
    output_sequence=0,
):
    """A simple RNN over the sequence (one or both ways): every hidden state, the last; opset 1+."""
    w, r = jnp.asarray(W), jnp.asarray(R)

    def cell_for(d: int, dtype, hidden: int, acts: list[Callable]) -> tuple[Callable, Callable]:
        bias = 0 if B is None else jnp.asarray(B)[d, :hidden] + jnp.asarray(B)[d, hidden:]
        wd, rd, f = w[d], r[d], acts[0]

        def project(x):
            return _times_t(x, wd) + bias

        def cell(xw, carry):
            h = f(_clip(xw + _times_t(carry[0], rd), clip))
            return h, (h,)

        return project, cell

    return _recurrence(
        X,
        R,
        sequence_lens,
        [initial_h],
        cell_for,
        layout=layout,
        direction=direction,
        activations=activations,
        alpha=activation_alpha,
        beta=activation_beta,
        default=["Tanh"],
    )


@op("GRU", since=1)
def gru(
    X,
    W,
    R,
    B=None,
    sequence_lens=None,
    initial_h=None,
    *,
    activation_alpha=None,
    activation_beta=None,
    activations=None,
    clip=None,
    direction="forward",
    hidden_size=None,
    layout=0,
    linear_before_reset=0,
    output_sequence=0,
):
    """A GRU over the sequence (one or both ways): every hidden state and the last; opset 1+."""
    w, r = jnp.asarray(W), jnp.asarray(R)

    def cell_for(d: int, dtype, hidden: int, acts: list[Callable]) -> tuple[Callable, Callable]:
        if B is None:
            wb = rb = jnp.zeros((3 * hidden,), dtype)
        else:
            wb, rb = jnp.asarray(B)[d, : 3 * hidden], jnp.asarray(B)[d, 3 * hidden :]
        wd, rd = w[d], r[d]
        f, g = acts

        rz, rr, rh = jnp.split(rd, 3, axis=0)
        bz, br, bh = jnp.split(rb, 3)

        def project(x):
            return _times_t(x, wd) + wb

        def cell(xw, carry):
            h_prev = carry[0]
            xz, xr, xh = jnp.split(xw, 3, axis=-1)
            z = f(_clip(xz + _times_t(h_prev, rz) + bz, clip))
            rg = f(_clip(xr + _times_t(h_prev, rr) + br, clip))
            if linear_before_reset:
                cand = g(_clip(xh + rg * (_times_t(h_prev, rh) + bh), clip))
            else:
                cand = g(_clip(xh + _times_t(rg * h_prev, rh) + bh, clip))
            h = (1 - z) * cand + z * h_prev
            return h, (h,)

        return project, cell

    return _recurrence(
        X,
        R,
        sequence_lens,
        [initial_h],
        cell_for,
        layout=layout,
        direction=direction,
        activations=activations,
        alpha=activation_alpha,
        beta=activation_beta,
        default=["Sigmoid", "Tanh"],
    )


@op("LSTM", since=1)
def lstm(
    X,
    W,
    R,
    B=None,
    sequence_lens=None,
    initial_h=None,
    initial_c=None,
    P=None,
    *,
    activation_alpha=None,
    activation_beta=None,
    activations=None,
    clip=None,
    direction="forward",
    hidden_size=None,
    input_forget=0,
    layout=0,
    output_sequence=0,
):
    """An LSTM over the sequence (one or both ways): all hidden states, last h and c; opset 1+."""
    w, r = jnp.asarray(W), jnp.asarray(R)

    def cell_for(d: int, dtype, hidden: int, acts: list[Callable]) -> tuple[Callable, Callable]:
        bias = (
            jnp.zeros((4 * hidden,), dtype)
            if B is None
            else jnp.asarray(B)[d, : 4 * hidden] + jnp.asarray(B)[d, 4 * hidden :]
        )
        peep = jnp.zeros((3 * hidden,), dtype) if P is None else jnp.asarray(P)[d]
        pi, po, pf = jnp.split(peep, 3)
        wd, rd = w[d], r[d]
        f, g, hact = acts

        def project(x):
            return _times_t(x, wd) + bias

        def cell(xw, carry):
            h_prev, c_prev = carry
            gates = xw + _times_t(h_prev, rd)
            gi, go, gf, gc = jnp.split(gates, 4, axis=-1)
            i = f(_clip(gi + pi * c_prev, clip))
            fg = 1 - i if input_forget else f(_clip(gf + pf * c_prev, clip))
            c = fg * c_prev + i * g(_clip(gc, clip))
            o = f(_clip(go + po * c, clip))
            h = o * hact(c)
            return h, (h, c)

        return project, cell

    return _recurrence(
        X,
        R,
        sequence_lens,
        [initial_h, initial_c],
        cell_for,
        layout=layout,
        direction=direction,
        activations=activations,
        alpha=activation_alpha,
        beta=activation_beta,
        default=["Sigmoid", "Tanh", "Tanh"],
    )
