"""What ``ember record`` finds in unmodified programs that use JAX's transformations:
``jax.lax.scan`` and ``jax.checkpoint`` inside ``jax.jit``, ``jax.pmap`` and ``jax.shard_map``
on four CPU devices (``XLA_FLAGS=--xla_force_host_platform_device_count=4``)."""

from __future__ import annotations

from pathlib import Path

from tests.analysis.databases import query_rows
from tests.cli.conftest import record_and_ingest

PROGRAMS = Path(__file__).parent / "programs"


def test_scan_checkpoint_pmap_and_shard_map_under_ember_record(tmp_path):
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    # the trace folder from the environment
    _, db = record_and_ingest(tmp_path, PROGRAMS / "transforms.py", env=env, out_from_env=True)
    reasons = query_rows(
        db, "SELECT fun_name, reason FROM recompiles WHERE NOT outside_jit ORDER BY fun_name"
    )
    compiles = dict(query_rows(db, "SELECT fun_name, count(*) FROM compiles GROUP BY fun_name"))
    # the meta is written before the program starts JAX (ember record never starts it): the
    # process record names the devices the program made
    assert query_rows(db, "SELECT devices FROM runs") == [([],)]
    [(devices,)] = query_rows(db, "SELECT devices FROM process")
    assert reasons == [
        # JAX explains no pmap cache miss (pmap runs as a jit of its own `_fun`): the bridge
        # names the program's function and compares the call with the previous one
        ("double", "x dim 1: 8 -> 16"),
        ("remat_grad", "x dim 0: 8 -> 16"),
        ("scanned", "xs dim 0: 8 -> 16"),
        ("sharded", "x shape: f32[32@d] -> f32[64@d]"),  # the sharding is in the type
    ]
    assert compiles["double"] == 2
    assert "_fun" not in compiles
    # the pmapped calls are steps: each compiled its program (two sizes); the helper JAX
    # compiled for them (`_multi_slice`) is JAX's own, not a miss of `double`
    calls = query_rows(db, "SELECT fun_name, calls, hits, misses FROM jit_calls ORDER BY 1")
    assert ("double", 2, 0, 2) in calls
    [(multi_slice_internal,)] = query_rows(
        db, "SELECT internal FROM jit_functions WHERE fun_name = '_multi_slice'"
    )
    assert multi_slice_internal
    assert len(devices) == 4


def test_jit_nnx_jit_and_equinox_retraces_name_their_arguments(tmp_path):
    program = PROGRAMS / "frameworks.py"
    _, db = record_and_ingest(tmp_path, program)
    reasons = query_rows(
        db,
        "SELECT fun_name, reason FROM recompiles WHERE NOT outside_jit "
        "AND fun_name NOT LIKE '\\_%' ESCAPE '\\' ORDER BY ts_ns",
    )
    sites = query_rows(
        db,
        "SELECT DISTINCT end_attrs.called_at, end_attrs.defined_at FROM spans "
        "WHERE span_kind = 'jit' AND start_attrs.fun_name = 'eqx_step'",
    )
    steps = dict(query_rows(db, "SELECT step, steps FROM steps"))
    assert reasons == [
        ("jit_step", "batch['x'] dim 0: 4 -> 8; batch['y'] dim 0: 4 -> 8"),
        ("jit_step", "mode static: 'train' -> 'eval'"),
        ("jit_power", "k static: 2 -> 3"),  # static_argnums=1: the parameter's name
        ("jit_nested", "state[0][1] dim 0: 2 -> 5"),
        ("nnx_scaled", "batch['x'] dim 0: 4 -> 8"),
        ("nnx_scaled", "k static: 2 -> 3"),
        # equinox traces a wrapper of its own (dynamic_nodonate['rest'][0], one static
        # blob): the arguments are the program's, and so are the statics that changed
        ("eqx_step", "x dim 0: 4 -> 8"),
        ("eqx_step", "scale static: 2.0 -> 3"),
        ("eqx_step", "model.act static: 'relu' -> 'gelu'"),
    ]
    # the program's call and its function, not equinox's _jit.py
    assert all(c.startswith(str(program)) for c, _ in sites), sites
    assert all(d.startswith(str(program)) for _, d in sites), sites
    # each framework's top-level calls are steps, named after the program's function
    assert steps == {
        "jit_step": 3,
        "jit_power": 2,
        "jit_nested": 2,
        "nnx_scaled": 3,
        "eqx_step": 5,
    }
