"""A program that configures JAX itself after importing it, before using it: the platform
(``jax.config.update("jax_platforms", "cpu")``) and 3 host devices (``XLA_FLAGS``). Both only
take effect if nothing started JAX's backend first. Prints its device count and platform."""

import os

import jax

jax.config.update("jax_platforms", "cpu")
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=3"

import jax.numpy as jnp  # noqa: E402

print(len(jax.devices()), jax.default_backend(), float(jax.jit(lambda x: x + 1)(jnp.ones(2)).sum()))
