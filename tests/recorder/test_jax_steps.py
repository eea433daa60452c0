"""Automatic steps (``ember.recorder.jax_steps``): while ``jit_steps()`` is open, the
top-level calls of ``jax.jit`` functions are ``step`` spans; calls made while JAX traces,
or inside another step, are not; the jitted function's own API is untouched."""

from __future__ import annotations

import functools
import json

import jax
import jax.numpy as jnp
import pytest

from ember.recorder import record
from ember.recorder.jax_steps import JitStep, jit_steps


def _steps(path) -> list[tuple[str, int]]:
    out = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if rec["kind"] == "span_start" and rec["span_kind"] == "step":
            out.append((rec["attrs"]["step"], rec["attrs"]["index"]))
    return out


def test_top_level_calls_are_steps_and_nested_ones_are_not(tmp_path):
    original = jax.jit
    with record(tmp_path / "t.jsonl"), jit_steps({"train_step": "train"}):

        @jax.jit
        def inner(x):
            return x * 2

        @jax.jit
        def train_step(x):
            return inner(x) + 1  # traced inside train_step: not a step

        def loss(x):
            return inner(x).sum()  # called while jax.grad traces: not a step

        for _ in range(3):
            train_step(jnp.ones(3))
        inner(jnp.ones(3))
        jax.grad(loss)(jnp.ones(3))
        assert isinstance(train_step, JitStep)
        # the jitted function's own API, through the wrapper
        assert train_step.lower(jnp.ones(3)).as_text()
        assert train_step.__name__ == "train_step"
    assert jax.jit is original  # put back
    assert _steps(tmp_path / "t.jsonl") == [("train", 0), ("train", 1), ("train", 2), ("inner", 0)]


def test_jit_as_a_decorator_factory_and_on_a_method(tmp_path):
    with record(tmp_path / "t.jsonl"), jit_steps():

        class Model:
            scale = 3.0

            @functools.partial(jax.jit, static_argnums=0)
            def apply(self, x):
                return x * self.scale

        power = jax.jit(static_argnums=1)(lambda x, k: x**k)
        assert float(Model().apply(jnp.ones(()))) == 3.0  # bound like the jitted method
        assert float(power(jnp.full((), 2.0), 3)) == 8.0
    assert _steps(tmp_path / "t.jsonl") == [("apply", 0), ("<lambda>", 0)]


def test_a_label_must_be_a_label():
    with pytest.raises(ValueError, match="jit_steps"), jit_steps({"f": ""}):
        pass


def _step_functions(path) -> list[tuple[str, str | None]]:
    return [
        (rec["attrs"]["step"], rec["attrs"].get("fun_name"))
        for rec in map(json.loads, path.read_text().splitlines())
        if rec["kind"] == "span_start" and rec["span_kind"] == "step"
    ]


def test_pmapped_calls_are_steps_and_steps_name_their_function(tmp_path):
    original_pmap = jax.pmap
    with record(tmp_path / "t.jsonl"), jit_steps({"train_step": "train"}):

        def train_step(x):
            return x * 2

        def evaluate(x):
            return x.sum()

        step = jax.pmap(train_step, axis_name="d")
        ev = functools.partial(jax.pmap, axis_name="d")(evaluate)  # as a decorator
        n = jax.local_device_count()
        for _ in range(2):
            out = step(jnp.ones((n, 3)))
        assert float(ev(out).sum()) == 6.0 * n
        assert isinstance(step, JitStep)
        assert step.lower(jnp.ones((n, 3))).as_text()  # pmap's own API, through the wrapper
    assert jax.pmap is original_pmap  # put back
    # the label `labels` gave, and the function the step calls
    assert _step_functions(tmp_path / "t.jsonl") == [
        ("train", "train_step"),
        ("train", "train_step"),
        ("evaluate", "evaluate"),
    ]
