"""``jax.lax.scan`` and ``jax.checkpoint`` inside ``jax.jit``, ``jax.pmap`` and
``jax.shard_map`` over four CPU devices, each called with two sizes (one retrace each).
``tests/cli/test_record_frameworks.py`` runs it under ``ember record --`` with
``XLA_FLAGS=--xla_force_host_platform_device_count=4``."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


@jax.jit
def scanned(carry, xs):
    def body(c, x):
        return c + jnp.sin(x), c

    return jax.lax.scan(body, carry, xs)


@jax.jit
def remat_grad(x):
    return jax.grad(lambda x: jax.checkpoint(lambda y: jnp.sin(y).sum())(x))(x)


def double(x):
    return x * 2


def main() -> None:
    assert jax.device_count() == 4, jax.devices()
    pmapped = jax.pmap(double)
    mesh = jax.make_mesh((4,), ("d",))

    @jax.jit
    def sharded(x):
        return jax.shard_map(double, mesh=mesh, in_specs=P("d"), out_specs=P("d"))(x)

    for n in (8, 16):
        jax.block_until_ready(scanned(jnp.zeros(3), jnp.ones((n, 3))))
        jax.block_until_ready(remat_grad(jnp.ones(n)))
        jax.block_until_ready(pmapped(jnp.ones((4, n))))
        x = jax.device_put(jnp.ones(n * 4), NamedSharding(mesh, P("d")))
        jax.block_until_ready(sharded(x))


if __name__ == "__main__":
    main()
