"""What ``ember record`` finds in unmodified programs that use JAX's transformations:
``jax.lax.scan`` and ``jax.checkpoint`` inside ``jax.jit``, ``jax.pmap`` and ``jax.shard_map``
on four CPU devices (``XLA_FLAGS=--xla_force_host_platform_device_count=4``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from ember.analysis import connect
from ember.analysis.ingest.database import ingest

PROGRAM = textwrap.dedent(
    """
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    assert jax.device_count() == 4, jax.devices()

    @jax.jit
    def scanned(carry, xs):
        def body(c, x):
            return c + jnp.sin(x), c
        return jax.lax.scan(body, carry, xs)

    @jax.jit
    def remat_grad(x):
        return jax.grad(lambda x: jax.checkpoint(lambda y: jnp.sin(y).sum())(x))(x)

    def double(x):
        return x * 2

    pmapped = jax.pmap(double)
    mesh = jax.make_mesh((4,), ("d",))

    @jax.jit
    def sharded(x):
        return jax.shard_map(double, mesh=mesh, in_specs=P("d"), out_specs=P("d"))(x)

    for n in (8, 16):
        jax.block_until_ready(scanned(jnp.zeros(3), jnp.ones((n, 3))))
        jax.block_until_ready(remat_grad(jnp.ones(n)))
        jax.block_until_ready(pmapped(jnp.ones((4, n))))
        x = jax.device_put(jnp.ones(n * 4), NamedSharding(mesh, P("d")))
        jax.block_until_ready(sharded(x))
    """
)


def test_scan_checkpoint_pmap_and_shard_map_under_ember_record(tmp_path):
    (tmp_path / "program.py").write_text(PROGRAM)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    env["EMBER_TRACE"] = str(tmp_path / "out")  # the folder from the environment
    done = subprocess.run(
        [sys.executable, "-m", "ember.cli.main", "record", "--", "python", "program.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (trace,) = (tmp_path / "out").glob("program-*.jsonl")
    db = tmp_path / "t.duckdb"
    assert ingest([trace], db).rejected == 0
    with connect(db, read_only=True) as con:
        reasons = con.sql(
            "SELECT fun_name, reason FROM recompiles WHERE NOT outside_jit ORDER BY fun_name"
        ).rows()
        compiles = dict(con.sql("SELECT fun_name, count(*) FROM compiles GROUP BY fun_name").rows())
        devices = con.sql("SELECT devices FROM runs").item()
    assert reasons == [
        # JAX explains no pmap cache miss (pmap runs as a jit of its own `_fun`): the bridge
        # names the program's function and compares the call with the previous one
        ("double", "x shape: f32[4,8] -> f32[4,16]"),
        ("remat_grad", "x shape: f32[8] -> f32[16]"),
        ("scanned", "xs shape: f32[8,3] -> f32[16,3]"),
        ("sharded", "x shape: f32[32@d] -> f32[64@d]"),  # the sharding is in the type
    ]
    assert compiles["double"] == 2
    assert "_fun" not in compiles
    assert len(devices) == 4


def test_jit_nnx_jit_and_equinox_retraces_name_their_arguments(tmp_path):
    program = Path(__file__).parent / "programs" / "frameworks.py"
    done = subprocess.run(
        [sys.executable, "-m", "ember.cli.main", "record", "--out", str(tmp_path / "out")]
        + ["--", "python", str(program)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (trace,) = (tmp_path / "out").glob("frameworks-*.jsonl")
    db = tmp_path / "t.duckdb"
    assert ingest([trace], db).rejected == 0
    with connect(db, read_only=True) as con:
        reasons = con.sql(
            "SELECT fun_name, reason FROM recompiles WHERE NOT outside_jit "
            "AND fun_name NOT LIKE '\\_%' ESCAPE '\\' ORDER BY ts_ns"
        ).rows()
        sites = con.sql(
            "SELECT DISTINCT end_attrs.called_at, end_attrs.defined_at FROM spans "
            "WHERE span_kind = 'jit' AND start_attrs.fun_name = 'eqx_step'"
        ).rows()
        steps = dict(con.sql("SELECT step, steps FROM steps").rows())
    assert reasons == [
        ("jit_step", "batch['x'] shape: f32[4,3] -> f32[8,3]; batch['y'] shape: f32[4] -> f32[8]"),
        ("jit_step", "mode static: 'train' -> 'eval'"),
        ("jit_power", "k static: 2 -> 3"),  # static_argnums=1: the parameter's name
        ("jit_nested", "state[0][1] shape: f32[2] -> f32[5]"),
        ("nnx_scaled", "batch['x'] shape: f32[4,3] -> f32[8,3]"),
        ("nnx_scaled", "k static: 2 -> 3"),
        # equinox traces a wrapper of its own (dynamic_nodonate['rest'][0], one static
        # blob): the arguments are the program's, and so are the statics that changed
        ("eqx_step", "x shape: f32[4,3] -> f32[8,3]"),
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
