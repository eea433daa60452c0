"""What ``ember record`` finds in unmodified programs that use JAX's transformations:
``jax.lax.scan`` and ``jax.checkpoint`` inside ``jax.jit``, ``jax.pmap`` and ``jax.shard_map``
on four CPU devices (``XLA_FLAGS=--xla_force_host_platform_device_count=4``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from ember.analysis import connect
from ember.analysis.ingest import ingest

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
        ("remat_grad", "x shape: f32[8] -> f32[16]"),
        ("scanned", "xs shape: f32[8,3] -> f32[16,3]"),
        ("sharded", "x shape: f32[32@d] -> f32[64@d]"),  # the sharding is in the type
    ]
    # pmap compiles its function again for the new shape, but JAX explains no pmap cache
    # miss: the compile is recorded (under pmap's inner name) without a reason
    assert compiles["_fun"] == 2
    assert len(devices) == 4
