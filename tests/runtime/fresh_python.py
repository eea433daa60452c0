"""Run a probe in a new Python, where nothing has started JAX or moved malloc's thresholds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable


def run_probe(script: str, *args: str, leave_out: Callable[[str], bool], **env: str) -> dict:
    """``python -c script *args`` with this process's environment less the variables
    ``leave_out`` names, plus ``env`` (JAX on the CPU, as the recordings run): the JSON
    object on its last line of output."""
    base = {k: v for k, v in os.environ.items() if not leave_out(k)}
    out = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        check=True,
        env={**base, "JAX_PLATFORMS": "cpu", **env},
        timeout=120,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])
