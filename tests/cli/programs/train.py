"""An unmodified JAX training loop: ``train_step`` retraces once (the batch grows from 8 to
16 rows), ``evaluate`` is jitted outside any step. ``tests/cli/test_record.py`` runs it under
``ember record --``; ``--fail`` makes it raise at the end, ``--hang FILE`` write FILE and
sleep (to be sent SIGTERM)."""

import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp


@jax.jit
def train_step(w, x):
    return w - 0.1 * jax.grad(lambda w: ((x @ w) ** 2).mean())(w)


@jax.jit
def evaluate(w):  # compiled once, outside any step: still the user's jit
    return (w**2).sum()


def main() -> None:
    w = jnp.ones((4,))
    for n in [8, 8, 16, 16]:
        w = train_step(w, jnp.ones((n, 4)))
    w.block_until_ready()
    evaluate(w).block_until_ready()
    print("args", sys.argv[1:])
    if "--fail" in sys.argv:
        raise RuntimeError("the data loader broke")
    if "--hang" in sys.argv:
        Path(sys.argv[-1]).write_text("ready")
        time.sleep(120)


if __name__ == "__main__":
    main()
