"""``cached_fn`` compiled twice in one process with JAX's persistent compilation cache on
(the caches cleared in between), under a ``ProfileSession``: a miss, then a hit. A fresh
process, since JAX decides once per process whether the disk cache is used:
``python -m tests.recordings.persistent_cache CACHE_DIR TRACE``."""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp

from ember.recorder.jax import ProfileSession


def cached_fn(x: jax.Array) -> jax.Array:
    return jnp.sin(x) * 2


def main(argv: list[str]) -> None:
    cache_dir, trace = argv
    jax.config.update("jax_compilation_cache_dir", cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    with ProfileSession(trace, phase="infer"):
        jax.jit(cached_fn)(jnp.ones(4)).block_until_ready()
        jax.clear_caches()
        jax.jit(cached_fn)(jnp.ones(4)).block_until_ready()


if __name__ == "__main__":
    main(sys.argv[1:])
