"""Programs the tests run in a fresh process, as a user's job would run (recordings, and
the processes that hold a trace or a database while a test looks on):
``python -m tests.recordings.<name> ARGS`` from the checkout (``run`` does that on the CPU
and waits; ``start`` starts it and returns the process).

Each is a module with a ``main(argv)`` so that ruff and mypy read it like any code. The test
process itself never imports jax (the analysis layer must work without it); these do.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["DISK_LENGTHS", "REPO", "SWEEP", "command", "run", "start"]

REPO = Path(__file__).resolve().parents[2]

# The lengths of the analysis tests' sweep trace (``sweep``, tests/data/sweep.jsonl): each
# new length compiles position 0 again; with cache_size=2 the third length evicts the first,
# so 17 and 23 come back as re-compiles after eviction; the last call hits.
SWEEP = [17, 23, 31, 17, 23, 23]

# The token filter's lengths with a disk cache (``disk_cache``): every length is a compile;
# the warm run loads them from the cold run's disk cache.
DISK_LENGTHS = [8, 12, 16, 8]


def command(module: str, *args: str) -> list[str]:
    """``python -m tests.recordings.<module> ARGS``, to be run in ``REPO``."""
    return [sys.executable, "-m", f"tests.recordings.{module}", *args]


def run(
    module: str,
    *args: str,
    timeout: float = 600,
    check: bool = True,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``python -m tests.recordings.<module> ARGS`` in a fresh process on the CPU, its output
    captured; with ``check``, raises ``CalledProcessError`` (with its output) when it fails.
    ``env``: more environment variables for it."""
    return subprocess.run(
        command(module, *args),
        check=check,
        cwd=REPO,
        env={**os.environ, "JAX_PLATFORMS": "cpu", **(env or {})},
        timeout=timeout,
        capture_output=True,
        text=True,
    )


def start(module: str, *args: str, **popen: Any) -> subprocess.Popen[Any]:
    """``python -m tests.recordings.<module> ARGS`` started in a fresh process; ``popen`` are
    ``subprocess.Popen``'s options (``stdout``, ``text``, ``env`` ...)."""
    return subprocess.Popen(command(module, *args), cwd=REPO, **popen)
