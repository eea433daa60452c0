"""The tiny JAX training loop (jit compiles, a retrace, JAX's own primitives):
``python -m tests.recordings.training TRACE``."""

from __future__ import annotations

import sys

from ember.runtime.examples import train_tiny_mlp


def main(argv: list[str]) -> None:
    train_tiny_mlp(argv[0])


if __name__ == "__main__":
    main(sys.argv[1:])
