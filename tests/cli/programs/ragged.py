"""A plain ``jax.jit`` training loop over 1000 examples in batches of 128: the last batch
has 104, so ``update`` is traced, and compiled, twice. With ``--pmap`` the step is a
``jax.pmap`` over every device (run with
``XLA_FLAGS=--xla_force_host_platform_device_count=4``): 128 examples a step, 32 a device,
the last step 104 (26 a device). With ``--log`` it turns on JAX's ``JAX_LOG_COMPILES``
lines (and the persistent cache's hits) on stderr itself, so a test can count them beside
Ember's record."""

from __future__ import annotations

import logging
import sys

import jax
import jax.numpy as jnp
import numpy as np

N, BATCH, FEATURES = 1000, 128, 784


def loss(w: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((x @ w - y) ** 2)


def update(w: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
    return w - 0.01 * jax.grad(loss)(w, x, y)


def pmapped_update(w: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
    g = jax.lax.pmean(jax.grad(loss)(w, x, y), "d")
    return w - 0.01 * g


def main(argv: list[str]) -> None:
    if "--log" in argv:
        logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(message)s")
        jax.config.update("jax_log_compiles", True)
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((N, FEATURES), dtype=np.float32)
    ys = rng.standard_normal((N, 1), dtype=np.float32)
    w = np.zeros((FEATURES, 1), np.float32)
    epochs = 2
    if "--pmap" in argv:
        n = jax.device_count()
        step = jax.pmap(pmapped_update, axis_name="d")
        ws = np.broadcast_to(w, (n, *w.shape))
        for _ in range(epochs):
            for i in range(0, N, BATCH):
                x, y = xs[i : i + BATCH], ys[i : i + BATCH]
                ws = step(ws, x.reshape(n, -1, FEATURES), y.reshape(n, -1, 1))
        print("done", float(np.asarray(ws).sum()))
        return
    step = jax.jit(update)
    wj = jnp.asarray(w)
    for _ in range(epochs):
        for i in range(0, N, BATCH):
            wj = step(wj, xs[i : i + BATCH], ys[i : i + BATCH])
    print("done", float(wj.sum()))


if __name__ == "__main__":
    main(sys.argv[1:])
