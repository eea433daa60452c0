"""Which job a recorded process belongs to, and JAX's devices once the program started them.

A data-parallel job is many processes (ranks). Each trace names its job, its rank and the
job's world size, found without code changes:

- ``ember record --job NAME`` (``EMBER_JOB``) names the job;
- launchers' environment: torchrun (``RANK``, ``WORLD_SIZE``, ``TORCHELASTIC_RUN_ID``, else
  ``MASTER_ADDR``/``MASTER_PORT``), Slurm (``SLURM_JOB_ID``, ``SLURM_STEP_ID``,
  ``SLURM_PROCID``, ``SLURM_NTASKS``), Open MPI (``OMPI_COMM_WORLD_RANK``/``SIZE``) and
  MPICH / Intel MPI (``PMI_RANK``/``PMI_SIZE``);
- ``jax.distributed``: once the program has started JAX's backend, ``jax.process_index()``
  and ``jax.process_count()``, and the coordinator's address as the job when nothing else
  names it.

Nothing here imports JAX, and nothing starts its backend: JAX is read through
``sys.modules``, and only after ``backend_started()`` (``jax.distributed.initialize``, the
``jax_platforms`` option and ``XLA_FLAGS`` only work before the backend starts, so a recorder
that started it first broke the programs it recorded).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["JOB_ENV", "JobIdentity", "backend_started", "jax_process", "launcher_identity"]

JOB_ENV = "EMBER_JOB"
"""The environment variable ``ember record --job NAME`` sets: the job's name."""


@dataclass(frozen=True)
class JobIdentity:
    """A process's place in its job; a field is None when nothing said it."""

    job_id: str | None = None
    rank: int | None = None
    world_size: int | None = None
    source: str | None = None
    """What said the rank (or the job): ember, torchrun, slurm, openmpi, pmi, jax.distributed."""

    def fields(self) -> dict[str, Any]:
        """The ``meta`` / ``process`` record fields."""
        return {
            "job_id": self.job_id,
            "rank": self.rank,
            "world_size": self.world_size,
            "job_source": self.source,
        }


def _int(environ: Mapping[str, str], name: str) -> int | None:
    value = environ.get(name, "").strip()
    return int(value) if value.isdigit() else None


def launcher_identity(environ: Mapping[str, str] | None = None) -> JobIdentity:
    """The job, rank and world size the launcher's environment gives (``EMBER_JOB`` names
    the job whatever the launcher)."""
    env = os.environ if environ is None else environ
    named = env.get(JOB_ENV) or None
    job, rank, world, source = None, None, None, None
    if (slurm := env.get("SLURM_JOB_ID")) and _int(env, "SLURM_PROCID") is not None:
        step = env.get("SLURM_STEP_ID")
        job = f"slurm:{slurm}" + (f".{step}" if step else "")
        rank, world, source = _int(env, "SLURM_PROCID"), _int(env, "SLURM_NTASKS"), "slurm"
    elif _int(env, "RANK") is not None and _int(env, "WORLD_SIZE") is not None:
        run = env.get("TORCHELASTIC_RUN_ID")
        if run and run != "none":  # torchrun's default when no --rdzv-id was given
            job = f"torchrun:{run}"
        elif env.get("MASTER_ADDR") and env.get("MASTER_PORT"):
            job = f"torchrun:{env['MASTER_ADDR']}:{env['MASTER_PORT']}"
        rank, world, source = _int(env, "RANK"), _int(env, "WORLD_SIZE"), "torchrun"
    elif _int(env, "OMPI_COMM_WORLD_RANK") is not None:
        rank, world = _int(env, "OMPI_COMM_WORLD_RANK"), _int(env, "OMPI_COMM_WORLD_SIZE")
        source = "openmpi"
        if jobid := env.get("OMPI_MCA_ess_base_jobid"):
            job = f"openmpi:{jobid}"
    elif _int(env, "PMI_RANK") is not None:
        rank, world, source = _int(env, "PMI_RANK"), _int(env, "PMI_SIZE"), "pmi"
    if named is not None:
        job, source = named, source or "ember"
    return JobIdentity(job, rank, world, source)


def backend_started() -> bool:
    """Whether the program has started JAX's backend (never starts it)."""
    xla_bridge = sys.modules.get("jax._src.xla_bridge")
    if xla_bridge is None:
        return False
    started = getattr(xla_bridge, "backends_are_initialized", None)
    try:
        if started is not None:
            return bool(started())
        return bool(getattr(xla_bridge, "_backends", None))  # a JAX without the function
    except Exception:  # JAX half torn down at exit: say no rather than start anything
        return False


def jax_process(launcher: JobIdentity) -> dict[str, Any] | None:
    """The ``process`` record's fields (less kind and ts_ns) once the backend has started,
    else None: JAX's backend, devices and this process's device ids, and its job identity
    (``jax.distributed``'s process index and count when the job has more than one process,
    else the launcher's)."""
    jax = sys.modules.get("jax")
    if jax is None or not backend_started():
        return None
    try:
        backend = str(jax.default_backend())
        devices = [str(d) for d in jax.devices()]
        local = [int(d.id) for d in jax.local_devices()]
        index, count = int(jax.process_index()), int(jax.process_count())
    except Exception:  # the backend failed: nothing to say
        return None
    identity = launcher
    if count > 1:
        job = launcher.job_id
        if job is None:
            coordinator = _coordinator()
            job = f"jax:{coordinator}" if coordinator else None
        source = launcher.source if launcher.rank is not None else "jax.distributed"
        identity = JobIdentity(job, index, count, source)
    return {"backend": backend, "devices": devices, "local_device_ids": local, **identity.fields()}


def _coordinator() -> str | None:
    distributed = sys.modules.get("jax._src.distributed")
    state = getattr(distributed, "global_state", None)
    address = getattr(state, "coordinator_address", None)
    return str(address) if address else None
