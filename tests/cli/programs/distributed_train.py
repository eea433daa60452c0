"""One rank of a 2-process ``jax.distributed`` job on this machine's CPUs, nothing of Ember
in it: ``python distributed_train.py PORT RANK [WORLD]`` (the coordinator is 127.0.0.1:PORT).

Each step jits ``train_step`` on a batch of 64 rows and gathers every rank's loss (a
collective: each rank waits there for the others). At step 2 the last rank's batch has 61
rows, so that rank alone retraces and recompiles ``train_step``.
``tests/cli/test_record_distributed.py`` runs it bare and under ``ember record --``.
"""

import sys

import jax

jax.config.update("jax_cpu_collectives_implementation", "gloo")

port, rank = sys.argv[1], int(sys.argv[2])
world = int(sys.argv[3]) if len(sys.argv) > 3 else 2
# must come before anything that starts JAX's backend
jax.distributed.initialize(
    coordinator_address=f"127.0.0.1:{port}", num_processes=world, process_id=rank
)

import jax.numpy as jnp  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402


@jax.jit
def train_step(x):
    return (x * 2.0).sum()


for step in range(4):
    rows = 61 if (rank == world - 1 and step == 2) else 64
    loss = train_step(jnp.ones((rows, 3)))
    losses = multihost_utils.process_allgather(loss)
    print(f"rank {jax.process_index()} of {jax.process_count()} step {step}: {losses.tolist()}")
