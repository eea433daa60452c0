"""A Flax NNX training loop as its authors wrote it, with nothing of Ember in it: one fused
``nnx.jit`` step (the loss, its gradients and the optax update), the batch size changing
twice (32, 16, 8). ``tests/cli/test_record_nnx.py`` runs it under ``ember record --``."""

import sys

import jax
import optax
from flax import nnx


class MLP(nnx.Module):
    def __init__(self, din: int, dhidden: int, dout: int, *, rngs: nnx.Rngs) -> None:
        self.fc1 = nnx.Linear(din, dhidden, rngs=rngs)
        self.fc2 = nnx.Linear(dhidden, dout, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.fc2(nnx.relu(self.fc1(x)))


def loss_fn(model: MLP, x: jax.Array, y: jax.Array) -> jax.Array:
    return optax.softmax_cross_entropy_with_integer_labels(model(x), y).mean()


@nnx.jit
def train_step(model: MLP, optimizer: nnx.Optimizer, x: jax.Array, y: jax.Array) -> jax.Array:
    loss, grads = nnx.value_and_grad(loss_fn)(model, x, y)
    optimizer.update(model, grads)
    return loss


def main(batch_sizes: list[int]) -> None:
    model = MLP(8, 16, 4, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
    key = jax.random.PRNGKey(0)
    for n in batch_sizes:
        kx, ky, key = jax.random.split(key, 3)
        x = jax.random.normal(kx, (n, 8))
        y = jax.random.randint(ky, (n,), 0, 4)
        loss = train_step(model, optimizer, x, y)
    print(f"final loss {float(loss):.4f}")


if __name__ == "__main__":
    main([int(n) for n in sys.argv[1:]] or [32, 32, 16, 16, 8])
