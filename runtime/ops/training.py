"""Optimizer ops of the ``ai.onnx.preview.training`` domain: Adagrad, Adam, Momentum.

Each takes the learning rate R and step count T, then one group of tensors per kind (all the
X, then all the G, then the state tensors) and returns the updated groups in the same order.
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp

from . import op

_DOMAIN = "ai.onnx.preview.training"


def _grouped(data: tuple, per: int, update: Callable) -> tuple:
    r, t, rest = jnp.asarray(data[0]), jnp.asarray(data[1]), data[2:]
    n = len(rest) // per
    results = [update(r, t, *(jnp.asarray(rest[k * n + i]) for k in range(per))) for i in range(n)]
    return tuple(res[j] for j in range(len(results[0])) for res in results)


@op("Adagrad", since=1, domain=_DOMAIN)
def adagrad(*data, decay_factor=0.0, epsilon=0.0, norm_coefficient=0.0):
    """One Adagrad step per (X, G, H) triple: new X and accumulated squared gradient; opset 1+."""

    def update(r, t, x, g, h):
        rate = r / (1 + t * decay_factor)
        g = norm_coefficient * x + g
        h_new = h + g * g
        x_new = x - rate * g / (jnp.sqrt(h_new) + epsilon)
        return x_new.astype(x.dtype), h_new.astype(h.dtype)

    return _grouped(data, 3, update)


@op("Adam", since=1, domain=_DOMAIN)
def adam(
    *data, alpha=0.9, beta=0.999, epsilon=0.0, norm_coefficient=0.0, norm_coefficient_post=0.0
):
    """One Adam step per (X, G, V, H) group: new X, first and second moments; opset 1+."""

    def update(r, t, x, g, v, h):
        g = norm_coefficient * x + g
        v_new = alpha * v + (1 - alpha) * g
        h_new = beta * h + (1 - beta) * g * g
        tf = t.astype(jnp.float64)
        rate = jnp.where(t > 0, r * jnp.sqrt(1 - beta**tf) / (1 - alpha**tf), r)
        x_new = (1 - norm_coefficient_post) * (x - rate * (v_new / (jnp.sqrt(h_new) + epsilon)))
        return x_new.astype(x.dtype), v_new.astype(v.dtype), h_new.astype(h.dtype)

    return _grouped(data, 4, update)


@op("Momentum", since=1, domain=_DOMAIN)
def momentum(*data, alpha, beta, mode, norm_coefficient):
    """One momentum step per (X, G, V) triple (standard or Nesterov): new X and V; opset 1+."""

    def update(r, t, x, g, v):
        g = norm_coefficient * x + g
        v_new = alpha * v + jnp.where(t > 0, beta, 1.0) * g
        step = v_new if mode == "standard" else g + alpha * v_new
        return (x - r * step).astype(x.dtype), v_new.astype(v.dtype)

    return _grouped(data, 3, update)
