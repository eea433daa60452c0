"""A ``jax.pmap`` data-parallel loop with a ragged last batch, run unmodified under ``ember
record --`` on four host CPU devices: its pmapped calls are steps that name the function, carry
the program's call site, and count JAX's in-memory hits, in numbers that equal JAX's own
``JAX_LOG_COMPILES`` lines of the same run (``--log`` turns them on in the program)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.analysis.databases import query_rows
from tests.cli.conftest import record_and_ingest

RAGGED = Path(__file__).parent / "programs" / "ragged.py"
# JAX 0.10 compiles a pmap as a jit of its own function `_fun`
_COMPILING = re.compile(r"^Compiling (?:jit\(_fun\)|pmap\(pmapped_update\))", re.M)


@pytest.fixture(scope="module")
def pmap_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    tmp = tmp_path_factory.mktemp("pmap")
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    done, db = record_and_ingest(tmp, RAGGED, "--pmap", "--log", env=env)
    return done.stderr, db


def _line_of(start: str) -> int:
    """The number of the program's line that starts (after its indent) with ``start``."""
    lines = [line.strip() for line in RAGGED.read_text().splitlines()]
    return next(i for i, line in enumerate(lines, 1) if line.startswith(start))


def test_pmapped_calls_are_steps_with_hits_that_equal_jax_log(pmap_run) -> None:
    stderr, db = pmap_run
    logged = len(_COMPILING.findall(stderr))  # JAX's log is printed under ember record
    assert logged == 3  # 32 a device (twice: the host weights, then the devices'), 26
    assert query_rows(db, "SELECT step, steps FROM steps") == [("pmapped_update", 16)]
    assert query_rows(db, "SELECT fun_name, calls, hits, misses, compiles FROM jit_calls") == [
        ("pmapped_update", 16, 16 - logged, logged, logged)
    ]
    [(hits, misses, latency_of)] = query_rows(
        db, "SELECT hits, misses, latency_of FROM run_summary"
    )
    assert (hits, misses, latency_of) == (13, 3, "step")


def test_pmap_compiles_name_the_program_call_site_and_a_recorded_reason(pmap_run) -> None:
    _, db = pmap_run
    sites = query_rows(
        db,
        "SELECT DISTINCT end_attrs.called_at, end_attrs.defined_at FROM spans "
        "WHERE span_kind = 'jit' AND start_attrs.fun_name = 'pmapped_update'",
    )
    call, defined = _line_of("ws = step(ws, "), _line_of("def pmapped_update(")
    assert sites == [(f"{RAGGED}:{call} (main)", f"{RAGGED}:{defined}")]
    reasons = query_rows(
        db, "SELECT reason FROM recompiles WHERE fun_name = 'pmapped_update' ORDER BY ts_ns"
    )
    assert reasons == [
        # the same types in JAX's log: what differs is where the weights were
        ("w placement: host -> 4 devices",),
        ("x dim 1: 32 -> 26; y dim 1: 32 -> 26",),
    ]


def test_the_pmapped_ragged_batch_gets_the_same_advice(pmap_run) -> None:
    _, db = pmap_run
    rows = query_rows(
        db, "SELECT arg, dim, sizes, compiles, ragged FROM jit_shape_buckets ORDER BY arg"
    )
    # 26 examples a device in the last step, 32 in the others; the placement is no size
    assert rows == [("x", 1, [26, 32], 3, True), ("y", 1, [26, 32], 3, True)]
