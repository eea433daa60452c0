"""Overhead of profile mode and of the JAX bridge, printed as ratios.

    .venv/bin/python benchmarks/bench_profile.py [--model light_squeezenet] [--repeat 20]

1. Profile mode (``ember.runtime.profile``: node by node, a block on each result, op /
   tensor / memory / edge records) against a normal compiled call of the same model
   (``ember.runtime.compile``, one ``jax.jit`` program) and against the eager interpreter
   (``ember.runtime.run``), with and without a recording open.
2. The JAX bridge on a jitted training step of a small MLP: a bare cached call against the
   same call with a ``CompileWatcher`` listening, inside a recorded ``step`` span, and with
   ``record_gradients`` after it; and the cost of a compile with and without the watcher
   (which switches on JAX's cache-miss explanations).

Medians of ``--repeat`` runs after a warm-up; the first (compiling) runs are not counted.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import onnx
import optax

import ember.runtime as rt
from ember.recorder import record
from ember.recorder.jax import CompileWatcher, ProfileSession

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def median_s(fn: Callable[[], object], repeat: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        jax.block_until_ready(fn())
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def row(label: str, seconds: float, reference: float) -> None:
    print(f"  {label:<44} {seconds * 1e3:10.3f} ms   x{seconds / reference:8.2f}")


def bench_profile_mode(model_name: str, repeat: int, tmp: Path) -> None:
    model = rt.load(LIGHT / f"{model_name}.onnx")
    spec = model.inputs[0]
    shape = [d if isinstance(d, int) else 1 for d in spec.shape]
    x = np.random.default_rng(0).random(shape, np.float32)
    inputs = {spec.name: x}
    compiled = rt.compile(model)
    print(f"profile mode: {model_name} ({model.node_count} nodes), input {shape}")
    t_compiled = median_s(lambda: compiled(inputs), repeat)
    t_run = median_s(lambda: rt.run(model, inputs), max(repeat // 4, 3))
    t_profile = median_s(lambda: rt.profile(model, inputs).outputs, max(repeat // 4, 3))
    with record(tmp / "profile.jsonl") as rec:
        t_profile_rec = median_s(lambda: rt.profile(model, inputs).outputs, max(repeat // 4, 3))
        lines = rec.lines
    row("compiled call (reference)", t_compiled, t_compiled)
    row("eager run (ember.runtime.run)", t_run, t_compiled)
    row("profile, no recording", t_profile, t_compiled)
    row("profile, recorded to JSONL", t_profile_rec, t_compiled)
    print(f"  profile vs eager run: x{t_profile_rec / t_run:.2f} (recorded), {lines} lines")


def _mlp(width: int = 256):
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    params = {
        "l1": {"w": jax.random.normal(k1, (64, width)) * 0.1, "b": jnp.zeros(width)},
        "l2": {"w": jax.random.normal(k2, (width, 1)) * 0.1, "b": jnp.zeros(1)},
    }
    opt = optax.sgd(0.01)

    def loss(p, x, y):
        h = jnp.tanh(x @ p["l1"]["w"] + p["l1"]["b"])
        return jnp.mean((h @ p["l2"]["w"] + p["l2"]["b"] - y) ** 2)

    @jax.jit
    def train_step(p, s, x, y):
        grads = jax.grad(loss)(p, x, y)
        updates, s = opt.update(grads, s, p)
        return optax.apply_updates(p, updates), s, grads

    return params, opt.init(params), train_step, loss


def bench_jax_bridge(repeat: int, tmp: Path) -> None:
    params, state, train_step, loss = _mlp()
    x = jnp.ones((128, 64))
    y = jnp.zeros((128, 1))
    print("JAX bridge: jitted MLP train step (64 -> 256 -> 1, batch 128)")
    t_bare = median_s(lambda: train_step(params, state, x, y), repeat * 10)
    with CompileWatcher():
        t_watch = median_s(lambda: train_step(params, state, x, y), repeat * 10)
    with ProfileSession(tmp / "bridge.jsonl", phase="train") as session:

        def stepped():
            with session.step("forward", 0):
                return train_step(params, state, x, y)

        t_step = median_s(stepped, repeat * 10)

        def with_grads():
            with session.step("forward", 0):
                out = train_step(params, state, x, y)
            session.record_gradients(0, out[2])
            return out

        t_grads = median_s(with_grads, repeat * 10)
    row("bare jitted step (reference)", t_bare, t_bare)
    row("with CompileWatcher listening", t_watch, t_bare)
    row("in a recorded step span", t_step, t_bare)
    row("in a step span + record_gradients", t_grads, t_bare)

    def compile_fresh() -> float:
        def fresh(p, x, y):  # a new function object: always traced and compiled
            return jax.grad(loss)(p, x, y)

        t = time.perf_counter()
        jax.block_until_ready(jax.jit(fresh)(params, x, y))
        return time.perf_counter() - t

    compile_fresh()  # warm JAX's own caches of primitives
    plain = statistics.median(compile_fresh() for _ in range(5))
    with ProfileSession(tmp / "compiles.jsonl", phase="train"):
        watched = statistics.median(compile_fresh() for _ in range(5))
    row("compile, bare (reference)", plain, plain)
    row("compile, watched (explanations on)", watched, plain)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="light_squeezenet")
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    print(f"jax {jax.__version__}, backend {jax.default_backend()}, {jax.devices()[0]}")
    with tempfile.TemporaryDirectory() as tmp:
        bench_profile_mode(args.model, args.repeat, Path(tmp))
        bench_jax_bridge(args.repeat, Path(tmp))


if __name__ == "__main__":
    main()
