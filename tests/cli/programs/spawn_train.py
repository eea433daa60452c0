"""A JAX program that starts a ``multiprocessing`` spawn child doing JAX work of its own,
and a plain ``subprocess`` that never imports JAX; nothing of Ember in it.
``tests/cli/test_record_hook.py`` runs it with ``EMBER_TRACE=DIR`` and the ``.pth`` hook."""

import multiprocessing
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp


@jax.jit
def parent_step(x):
    return (x * 2).sum()


def child_work(n: int) -> None:
    @jax.jit
    def child_step(x):
        return jnp.sin(x).sum()

    for size in (n, n, 2 * n):
        child_step(jnp.ones(size)).block_until_ready()


def main() -> None:
    for size in (4, 8):
        parent_step(jnp.ones(size)).block_until_ready()
    if "--hang" in sys.argv:  # wait for SIGTERM, having said so in the file named last
        Path(sys.argv[-1]).write_text("ready")
        time.sleep(120)
    child = multiprocessing.get_context("spawn").Process(target=child_work, args=(3,))
    child.start()
    child.join()
    assert child.exitcode == 0, child.exitcode
    subprocess.run([sys.executable, "-c", "print('no jax here')"], check=True)
    if "--fail" in sys.argv:
        raise RuntimeError("the parent failed after its child")


if __name__ == "__main__":
    main()
