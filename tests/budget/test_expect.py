"""``ember.expect``: compile budgets on a block, failing with the reasons (issue 27)."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ember
from ember import runtime as rt
from ember.budget import Budget, parse_size
from ember.runtime.examples import token_filter_model


def _ids(n: int) -> np.ndarray:
    return (np.arange(n, dtype=np.int64)[None, :] * 7) % 64


def test_a_shape_varying_argument_fails_recompiles_0_with_the_reason():
    @jax.jit
    def step(params, x):
        return (x @ params).sum()

    params = jnp.ones((4, 2))
    batches = [jnp.ones((n, 4)) for n in (32, 32, 16)]

    def steps():
        with ember.expect(recompiles=0):
            for x in batches:
                step(params, x)

    with pytest.raises(ember.CompileBudgetExceeded) as info:
        steps()
    message = str(info.value)
    assert message.splitlines()[:2] == ["compile budget exceeded:", "  recompiles: 1, expected 0"]
    # the function, where it was called (this file), and why: x's first dim 32 -> 16
    (line,) = [ln for ln in message.splitlines() if ln.startswith("    - ")]
    assert line.startswith("    - step at ")
    assert "test_expect.py:" in line
    assert line.endswith(": compile 2: x dim 0: 32 -> 16")
    assert info.value.broken == ["recompiles: 1, expected 0"]
    assert [c.index for c in info.value.seen.compiles] == [1, 2]


def test_a_passing_budget_passes_and_says_what_it_saw():
    @jax.jit
    def step(x):
        return x * 2

    xs = [jnp.ones((8, 4)) for _ in range(5)]
    with ember.expect(compiles=1, recompiles=0, evictions=0) as seen:
        for x in xs:
            step(x)
    assert [(c.kind, c.name, c.index, c.reason) for c in seen.compiles] == [
        ("jit", "step", 1, None)
    ]
    assert seen.evictions == []
    # warm-up: the first compile of each function is allowed, none after
    with ember.expect(compiles=0, recompiles=0, warmup=1) as seen:
        step(jnp.ones((3, 3)))
        step(jnp.ones((3, 3)))
    assert len(seen.compiles) == 1


def test_bounds_dtype_weak_type_and_static_values_are_named():
    @partial(jax.jit, static_argnums=1)
    def scale(x, k):
        return x * k

    def calls():
        with ember.expect(compiles="<=1", warmup=0):
            scale(jnp.ones(3, jnp.float32), 2)
            scale(jnp.ones(3, jnp.int32), 2)
            scale(jnp.ones(3, jnp.int32), 3)

    with pytest.raises(ember.CompileBudgetExceeded) as info:
        calls()
    message = str(info.value)
    assert "  compiles: 3, expected <= 1" in message
    assert "compile 2: x dtype: float32 -> int32" in message
    # the static argument is named as the function names it (was `static arg 1`); then
    # what the budget counted
    *_, last_compile, counted = message.splitlines()
    assert last_compile.endswith(": compile 3: static k: 2 -> 3")
    assert counted.startswith("  (counted in this block only: ")


def test_an_ember_model_that_evicts_fails_evictions_0(tmp_path):
    compiled = rt.compile(token_filter_model(), cache_size=1)

    def calls():
        with ember.expect(evictions=0):
            for n in (8, 9, 8):
                compiled(input_ids=_ids(n))

    with pytest.raises(ember.CompileBudgetExceeded) as info:
        calls()
    lines = str(info.value).splitlines()
    assert lines[1] == "  evictions: 4, expected 0"
    assert lines[2:] == [
        "    - model position 0: evicted input_ids[1,8]:int64 (cache of 1)",
        "    - model position 27: evicted kept_idx[1,3]:int64 tokens[8,16]:float32 (cache of 1)",
        "    - model position 0: evicted input_ids[1,9]:int64 (cache of 1)",
        "    - model position 27: evicted kept_idx[1,4]:int64 tokens[9,16]:float32 (cache of 1)",
    ]
    # the third call compiles length 8 again, because it was evicted
    again = [c for c in info.value.seen.compiles if c.name.endswith("position 0")][-1]
    assert again.after_eviction
    assert again.reason == "input_ids dim 1: 9 -> 8"
    assert again.line().endswith("input_ids dim 1: 9 -> 8 (its key had been evicted)")


def test_programs_loaded_from_a_disk_cache_are_not_compiles(tmp_path):
    model = token_filter_model()
    with ember.expect(compiles=2) as cold:
        rt.compile(model, cache_dir=tmp_path)(input_ids=_ids(8))
    assert [c.kind for c in cold.compiles] == ["segment", "segment"]
    with ember.expect(compiles=0, recompiles=0) as warm:
        rt.compile(model, cache_dir=tmp_path)(input_ids=_ids(8))
    assert [c.loaded for c in warm.loads] == [True, True]


def test_peak_memory_and_a_trace_on_request(tmp_path):
    from ember.schemas.validate import validate_file

    @jax.jit
    def grow(x):
        return jnp.tile(x, (64, 1))

    keep = []
    with pytest.raises(ember.CompileBudgetExceeded) as info:
        with ember.expect(peak_memory="1KiB", record=tmp_path / "t.jsonl") as seen:
            keep.append(grow(jnp.ones((16, 256))).block_until_ready())
    assert seen.peak_memory is not None
    assert seen.peak_memory >= 64 * 16 * 256 * 4
    assert "peak_memory: " in str(info.value)
    assert "expected <= 1.0 KiB" in str(info.value)
    assert f"trace: {tmp_path / 't.jsonl'}" in str(info.value)
    report = validate_file(tmp_path / "t.jsonl")
    assert report.ok, report.errors
    assert report.counts["span_end"] >= 1  # the jit compile


def test_bad_budgets_are_refused_with_what_is_accepted():
    with pytest.raises(ValueError, match="give a count"):
        Budget(recompiles="few")
    with pytest.raises(ValueError, match="cannot be negative"):
        Budget(compiles=-1)
    with pytest.raises(ValueError, match="'200MiB'"):
        Budget(peak_memory="lots")
    assert parse_size("200MiB") == 200 * 2**20
    assert parse_size("1.5GB") == 1_500_000_000
    assert parse_size(1024) == 1024


def test_an_error_in_the_block_is_the_error_seen():
    @jax.jit
    def f(x):
        return x + 1

    def fails():
        with ember.expect(recompiles=0):
            f(jnp.ones(2))
            f(jnp.ones(3))
            _ = 1 / 0

    with pytest.raises(ZeroDivisionError):
        fails()


def test_a_budget_can_count_from_a_clean_cache_and_says_which_it_counted():
    @jax.jit
    def step(x):
        return x * 2

    sizes = (8, 16)
    for n in sizes:  # an earlier test of the same process compiled both sizes
        step(jnp.ones(n))
    # counted in the block only: both programs come from JAX's memory, the budget passes
    with ember.expect(recompiles=0) as seen:
        for n in sizes:
            step(jnp.ones(n))
    assert seen.compiles == []

    # from a clean cache, the block's own code needs both: a recompile, and the message
    # says what was counted
    def from_a_clean_cache() -> None:
        with ember.expect(recompiles=0, fresh=True):
            for n in sizes:
                step(jnp.ones(n))

    with pytest.raises(ember.CompileBudgetExceeded) as info:
        from_a_clean_cache()
    message = str(info.value)
    assert "  recompiles: 1, expected 0" in message
    assert message.splitlines()[-1] == (
        "  (counted from a clean cache: fresh=True cleared JAX's caches first)"
    )

    def a_new_size() -> None:
        with ember.expect(compiles=0):
            step(jnp.ones(3))

    with pytest.raises(ember.CompileBudgetExceeded) as info:
        a_new_size()
    assert "programs this process compiled before it are not" in str(info.value)
    with pytest.raises(ValueError, match="fresh='yes'"):
        Budget(fresh="yes")  # type: ignore[arg-type]
