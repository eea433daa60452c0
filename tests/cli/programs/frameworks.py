"""Retraces in the frameworks JAX programs are written with, as their authors would write
them: ``jax.jit`` with a pytree batch and static arguments (by name and by position),
Flax's ``nnx.jit`` with a static argument, ``equinox.filter_jit`` with an array, a Python
number and a Module's static field changing. ``tests/cli/test_record_frameworks.py`` runs
it under ``ember record --`` and reads the reasons."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
from flax import nnx


@functools.partial(jax.jit, static_argnames=("mode",))
def jit_step(params, batch, mode="train"):
    return params["w"] * batch["x"].sum() + (1.0 if mode == "train" else 2.0)


@functools.partial(jax.jit, static_argnums=(1,))
def jit_power(x, k):
    return x**k


@jax.jit
def jit_nested(state, xs):
    (a, b), c = state
    return a + b.sum() + c + xs[0].sum()


class Dense(nnx.Module):
    def __init__(self, rngs):
        self.lin = nnx.Linear(3, 2, rngs=rngs)

    def __call__(self, x):
        return self.lin(x)


@functools.partial(nnx.jit, static_argnums=(2,))
def nnx_scaled(model, batch, k):
    return model(batch["x"]) * k


class Net(eqx.Module):
    lin: eqx.nn.Linear
    act: str = eqx.field(static=True)

    def __call__(self, x):
        y = jax.vmap(self.lin)(x)
        return jax.nn.relu(y) if self.act == "relu" else jax.nn.gelu(y)


@eqx.filter_jit
def eqx_step(model, x, scale):
    return model(x) * scale


def main():
    params = {"w": jnp.ones(3)}
    for n, mode in [(4, "train"), (8, "train"), (8, "eval")]:
        jit_step(params, {"x": jnp.ones((n, 3)), "y": jnp.ones(n)}, mode=mode)
    jit_power(jnp.ones(3), 2)
    jit_power(jnp.ones(3), 3)
    jit_nested(((jnp.ones(2), jnp.ones(2)), 1.0), [jnp.ones(2)])
    jit_nested(((jnp.ones(2), jnp.ones(5)), 1.0), [jnp.ones(2)])

    dense = Dense(nnx.Rngs(0))
    nnx_scaled(dense, {"x": jnp.ones((4, 3))}, 2)
    nnx_scaled(dense, {"x": jnp.ones((8, 3))}, 2)
    nnx_scaled(dense, {"x": jnp.ones((8, 3))}, 3)

    net = Net(eqx.nn.Linear(3, 2, key=jax.random.PRNGKey(0)), "relu")
    eqx_step(net, jnp.ones((4, 3)), 2.0)
    eqx_step(net, jnp.ones((8, 3)), 2.0)
    eqx_step(net, jnp.ones((8, 3)), 3)  # a Python number: filter_jit holds it static
    eqx_step(Net(net.lin, "gelu"), jnp.ones((8, 3)), 3)
    jax.block_until_ready(eqx_step(net, jnp.ones((8, 3)), 3))


if __name__ == "__main__":
    main()
