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
) -> list[Callable]:
    """The step's activations, each applied to values with a leading direction axis (the
    same function for every direction unless the model gives each its own)."""
    per_dir = len(defaults)
    if not names:
        names = list(defaults) * num_dir
    elif len(names) == per_dir and num_dir == 2:
        names = list(names) * 2
    # The alpha/beta lists are consumed in order by the functions that take them (as ONNX
    # Runtime reads them), not indexed by the function's position.
    alpha_left = list(alphas or [])
    beta_left = list(betas or [])
    specs = []
    for n in names:
        key = n.lower()
        alpha = alpha_left.pop(0) if key in _TAKES_ALPHA and alpha_left else None
        beta = beta_left.pop(0) if key in _TAKES_BETA and beta_left else None
        specs.append((n, alpha, beta))
    by_dir = [specs[d * per_dir : (d + 1) * per_dir] for d in range(num_dir)]
    return [_across_directions([s[k] for s in by_dir]) for k in range(per_dir)]


def _across_directions(specs: list[tuple[str, float | None, float | None]]) -> Callable:
    fns = [_activation(*spec) for spec in specs]
    keys = [(name.lower(), alpha, beta) for name, alpha, beta in specs]
    if all(k == keys[0] for k in keys):
        return fns[0]
    return lambda v: jnp.stack([f(v[d]) for d, f in enumerate(fns)])


def _time_index(seq_len: int, lens):
    """(seq, batch) gather index into time that reverses each sequence within its length (an
    involution: it also puts the reversed outputs back)."""
    t = jnp.arange(seq_len)[:, None]
    if lens is None:
        return jnp.broadcast_to(seq_len - 1 - t, (seq_len, 1))
    lens = jnp.asarray(lens)[None, :]
    return jnp.where(t < lens, lens - 1 - t, t)


def _gather_time(x, idx):
    if idx.shape[1] == 1:
        return x[idx[:, 0]]
    return jnp.take_along_axis(x, idx[..., None], axis=0)


def _orient(x, lens, dirs: list[bool]):
    """``x`` (seq, dir, batch, ...) with each reverse direction's steps in the order it runs."""
    if not any(dirs):
        return x
    idx = _time_index(x.shape[0], lens)
    return jnp.stack(
        [_gather_time(x[:, d], idx) if rev else x[:, d] for d, rev in enumerate(dirs)], axis=1
    )


def _run(cell: Callable, x, states: tuple, lens, dirs: list[bool]):
    """Scan ``cell(x_t, states) -> (h_t, states)`` over time with masking, every direction
    in the same step (``x``: the projected input terms, (seq, dir, batch, gates))."""
    seq_len, batch = x.shape[0], x.shape[2]
    if lens is None:
        mask = jnp.ones((seq_len, 1, batch, 1), bool)
    else:
        mask = (jnp.arange(seq_len)[:, None] < jnp.asarray(lens)[None, :])[:, None, :, None]

    def step(carry, inp):
        xt, m = inp
        h, new = cell(xt, carry)
        new = tuple(jnp.where(m, n, c) for n, c in zip(new, carry, strict=True))
        return new, jnp.where(m, h, jnp.zeros_like(h))

    final, ys = lax.scan(step, states, (_orient(x, lens, dirs), mask))
    return _orient(ys, lens, dirs), final


def _prepare(X, layout: int):
    x = jnp.asarray(X)
    return jnp.swapaxes(x, 0, 1) if layout == 1 else x


def _finish(y, finals: tuple, layout: int):
    """``y`` (seq, dir, batch, hidden) and the final states (dir, batch, hidden), in ``layout``."""
    outs = list(finals)
    if layout == 1:
        y = jnp.transpose(y, (2, 0, 1, 3))
        outs = [jnp.swapaxes(o, 0, 1) for o in outs]
    return (y, *outs)


def _initial(value, num_dir: int, batch: int, hidden: int, dtype, layout: int):
    if value is None:
        return jnp.zeros((num_dir, batch, hidden), dtype)
    v = jnp.asarray(value)
    return jnp.swapaxes(v, 0, 1) if layout == 1 else v


def _project(x, w):
    """The input terms of every step and direction, one matmul: ``x`` (seq, batch, input),
    ``w`` (dir, gates, input) -> (seq, dir, batch, gates). ``w`` is read whole (a reshape,
    no per-direction slice to copy)."""
    num_dir, gates, width = w.shape
    xw = lax.dot_general(x, w.reshape(num_dir * gates, width), (((2,), (1,)), ((), ())))
    return jnp.transpose(xw.reshape(x.shape[0], x.shape[1], num_dir, gates), (0, 2, 1, 3))


def _recur(h, r):
    """``h`` (dir, batch, hidden) times each direction's ``r`` (dir, gates, hidden)
    transposed: one batched dot, no transposed or per-direction copy of ``r``."""
    return lax.dot_general(h, r, (((2,), (2,)), ((0,), (0,))))


def _bias(B, gates: int, dtype):
    """Each direction's summed input and recurrent bias, (dir, 1, gates), or 0."""
    if B is None:
        return jnp.zeros((), dtype)
    b = jnp.asarray(B)
    return (b[:, :gates] + b[:, gates:])[:, None, :]


def _clip(v, clip):
    return v if clip is None else jnp.clip(v, -clip, clip)


def _directions(direction: str) -> list[bool]:
    return {"forward": [False], "reverse": [True], "bidirectional": [False, True]}[direction]


def _recurrence(
    X,
    R,
    sequence_lens,
    initials: list,
    cell_for: Callable[[Any, int, list[Callable]], tuple[Callable, Callable]],
    *,
    layout: int,
    direction: str,
    activations,
    alpha,
    beta,
    default: list[str],
):
    """The loop RNN, GRU and LSTM share: ``cell_for(dtype, hidden, activations)`` builds
    ``(project, cell)``: ``project`` maps the whole input sequence to its input terms, one
    matmul over all steps and directions (``X W^T + b``, as onnxruntime does), and ``cell``
    is the step on one of them, every direction at once (values lead with the direction
    axis), from the states in ``initials`` (``initial_h``, and ``initial_c`` for LSTM;
    None: zeros); returns every hidden state and each state's last value, in ``layout``.

    Why one loop for both directions: with a scan per direction, each direction's weights
    were sliced out of W and R (``W[d]``), and XLA:CPU copied those slices on every call
    (4 x 4 MB for ddddocr's CRNN, a bidirectional LSTM of hidden 512), and ran twice the
    loop steps. The input term was once computed inside the step, where XLA:CPU copied
    ``W.T`` on every step (186 of 190 ms of that CRNN's call at load ~12)."""
    x = _prepare(X, layout)
    hidden = jnp.asarray(R).shape[-1]
    dirs = _directions(direction)
    acts = _activations(activations, alpha, beta, default, len(dirs))
    project, cell = cell_for(x.dtype, hidden, acts)
    starts = tuple(_initial(v, len(dirs), x.shape[1], hidden, x.dtype, layout) for v in initials)
    y, last = _run(cell, project(x), starts, sequence_lens, dirs)
    return _finish(y, last, layout)


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

    def cell_for(dtype, hidden: int, acts: list[Callable]) -> tuple[Callable, Callable]:
        bias, f = _bias(B, hidden, dtype), acts[0]

        def project(x):
            return _project(x, w) + bias

        def cell(xw, carry):
            h = f(_clip(xw + _recur(carry[0], r), clip))
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

    def cell_for(dtype, hidden: int, acts: list[Callable]) -> tuple[Callable, Callable]:
        if B is None:
            wb = rb = jnp.zeros((1, 1, 3 * hidden), dtype)
        else:
            b = jnp.asarray(B)[:, None, :]
            wb, rb = b[..., : 3 * hidden], b[..., 3 * hidden :]
        f, g = acts
        # z and r read h through one dot; the candidate's weights apart (the default form
        # multiplies h by r first).
        r_zr, r_h = r[:, : 2 * hidden], r[:, 2 * hidden :]
        b_zr, b_h = rb[..., : 2 * hidden], rb[..., 2 * hidden :]

        def project(x):
            return _project(x, w) + wb

        def cell(xw, carry):
            h_prev = carry[0]
            x_zr, xh = xw[..., : 2 * hidden], xw[..., 2 * hidden :]
            if linear_before_reset:
                hr = _recur(h_prev, r)
                hr_zr, hh = hr[..., : 2 * hidden], hr[..., 2 * hidden :] + b_h
            else:
                hr_zr = _recur(h_prev, r_zr)
            zr = f(_clip(x_zr + hr_zr + b_zr, clip))
            z, rg = zr[..., :hidden], zr[..., hidden:]
            if linear_before_reset:
                cand = g(_clip(xh + rg * hh, clip))
            else:
                cand = g(_clip(xh + _recur(rg * h_prev, r_h) + b_h, clip))
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

    def cell_for(dtype, hidden: int, acts: list[Callable]) -> tuple[Callable, Callable]:
        bias = _bias(B, 4 * hidden, dtype)
        peep = jnp.zeros((1, 1, 3 * hidden), dtype) if P is None else jnp.asarray(P)[:, None, :]
        pi, po, pf = jnp.split(peep, 3, axis=-1)
        f, g, hact = acts

        def project(x):
            return _project(x, w) + bias

        def cell(xw, carry):
            h_prev, c_prev = carry
            gates = xw + _recur(h_prev, r)
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
