"""Ember's pytest plugin, run on sample test files by pytest's own ``pytester`` (issue 27)."""

from __future__ import annotations

import orjson
import pytest

pytest_plugins = ["pytester"]

SAMPLE = """
import jax
import jax.numpy as jnp
import pytest


@jax.jit
def step(x):
    return (x * 2).sum()


@pytest.mark.compile_budget(recompiles=0, warmup=1)
def test_shape_varies():
    for n in (32, 32, 16):
        step(jnp.ones((n, 4)))


@pytest.mark.compile_budget(recompiles=0, warmup=1)
def test_same_shape():
    for _ in range(3):
        step(jnp.ones((8, 4)))


@pytest.mark.compile_budget(compiles="<=1")
def test_no_compile_at_all():
    assert 1 + 1 == 2
"""

# the end-of-session table of SAMPLE's tests
SAMPLE_TABLE = [
    "*ember: the tests that compiled most*",
    "*compiles  recompiles  loaded  evictions  compile time  test",
    "       2           1       0          0  * test_sample.py::test_shape_varies",
    "       1           0       0          0  * test_sample.py::test_same_shape",
]


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    # a subprocess: the sample's jitted functions must not share this process's JAX caches
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def test_the_marker_fails_a_recompile_with_its_reason_and_passes_the_others(pytester):
    pytester.makepyfile(test_sample=SAMPLE)
    result = _run(pytester)
    result.assert_outcomes(passed=2, failed=1)
    # pytest's style: the reasons as E lines, the function, where it was called, and why
    result.stdout.fnmatch_lines(
        [
            "*_ test_shape_varies _*",
            "E   compile budget exceeded (after 1 warm-up compile(s) of each function):",
            "E     recompiles: 1, expected 0",
            "E       - step at *test_sample.py:14:* (test_shape_varies): compile 2: "
            "x dim 0: 32 -> 16",
            *SAMPLE_TABLE,
            "FAILED test_sample.py::test_shape_varies - E   compile budget exceeded*",
        ]
    )
    # no traceback through the plugin
    assert "pytest_plugin.py" not in result.stdout.str()


def test_the_fixture_gives_the_views_and_ember_record_keeps_a_trace_per_test(pytester):
    pytester.makepyfile(
        test_views="""
import jax
import numpy as np


def test_views(ember_trace):
    f = jax.jit(lambda x: x + 1)
    f(np.ones(3, np.float32))
    f(np.ones(4, np.float32))
    summary = ember_trace.run_summary()
    assert summary["recompiles"] == 1
    (row,) = ember_trace.recompiles().to_dicts()
    assert row["reason"] == "x dim 0: 3 -> 4", row
    assert [c.index for c in ember_trace.seen.compiles] == [1, 2]


def test_plain():
    assert True
"""
    )
    result = _run(pytester, f"--ember-record={pytester.path / 'traces'}")
    result.assert_outcomes(passed=2)
    names = sorted(p.name for p in (pytester.path / "traces").glob("*.jsonl"))
    assert names == ["test_views.py_test_plain.jsonl", "test_views.py_test_views.jsonl"]
    meta = orjson.loads((pytester.path / "traces" / names[1]).read_bytes().splitlines()[0])
    assert meta["tags"] == {"test": "test_views.py::test_views"}
    result.stdout.fnmatch_lines([f"traces: {pytester.path / 'traces'} (ember ingest *)"])


def test_a_bad_budget_is_a_usage_error_naming_the_test(pytester):
    pytester.makepyfile(
        test_bad="""
import pytest


@pytest.mark.compile_budget(recompiles="few")
def test_it():
    pass
"""
    )
    result = _run(pytester)
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*test_bad.py::test_it: compile_budget: recompiles='few'*"])


def test_a_peak_memory_budget_holds_with_the_fixture_too(pytester):
    pytester.makepyfile(
        test_peak="""
import jax
import numpy as np
import pytest


KEEP = []  # alive when the test ends, where the memory is read for certain


@pytest.mark.compile_budget(peak_memory="1KiB")
def test_big(ember_trace):
    KEEP.append(jax.jit(lambda x: x * 2)(np.ones((256, 256), np.float32)).block_until_ready())
    assert ember_trace.seen.compiles


@pytest.mark.compile_budget(peak_memory="1GiB")
def test_small():
    jax.jit(lambda x: x + 1)(np.ones(4, np.float32)).block_until_ready()
"""
    )
    result = _run(pytester)
    result.assert_outcomes(passed=1, failed=1)
    # at least the 256x256 float32 output (256 KiB), when the sampler caught it; the input
    # on the device too (512 KiB) when it caught both
    result.stdout.fnmatch_lines(["E     peak_memory: * KiB, expected <= 1.0 KiB"])


def test_a_fresh_budget_cannot_pass_because_an_earlier_test_compiled(pytester):
    # the first test compiles both batch sizes; the next two call them again: counted in
    # the test only, nothing compiles and the budget passes by accident; fresh=True clears
    # JAX's caches as the test starts, so the ragged batch is a recompile again
    pytester.makepyfile(
        test_order="""
import jax
import jax.numpy as jnp
import pytest


@jax.jit
def step(x):
    return x.sum()


def test_warms_both():
    for n in (32, 16):
        step(jnp.ones(n))


@pytest.mark.compile_budget(recompiles=0)
def test_counted_in_the_test():
    for n in (32, 16):
        step(jnp.ones(n))


@pytest.mark.compile_budget(recompiles=0, fresh=True)
def test_from_a_clean_cache():
    for n in (32, 16):
        step(jnp.ones(n))
"""
    )
    result = _run(pytester, "-p", "no:randomly")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*_ test_from_a_clean_cache _*",
            "E   compile budget exceeded:",
            "E     recompiles: 1, expected 0",
            "E       - step at *: compile 2: x dim 0: 32 -> 16",
            "E     (counted from a clean cache: fresh=True cleared JAX's caches first)",
        ]
    )


def test_ember_record_keeps_one_trace_per_parameter_id(pytester):
    # `a b`, `a_b` and `a/b` read alike as file names: each test keeps a trace of its own
    pytester.makepyfile(
        test_ids="""
import pytest


@pytest.mark.parametrize("x", [1, 2, 3], ids=["a b", "a_b", "a/b"])
def test_it(x):
    assert x
"""
    )
    result = _run(pytester, f"--ember-record={pytester.path / 'traces'}")
    result.assert_outcomes(passed=3)
    traces = sorted((pytester.path / "traces").glob("*.jsonl"))
    assert len(traces) == 3
    tests = {orjson.loads(t.read_bytes().splitlines()[0])["tags"]["test"] for t in traces}
    assert tests == {f"test_ids.py::test_it[{i}]" for i in ("a b", "a_b", "a/b")}


def test_the_summary_table_holds_the_tests_of_xdist_workers(pytester):
    # under pytest-xdist the tests run in workers, which print no summary: the table was gone
    pytester.makepyfile(test_sample=SAMPLE)
    result = _run(pytester, "-n", "2")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(SAMPLE_TABLE)
