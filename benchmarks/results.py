"""Write a benchmark's latest result as ``benchmarks/results/<name>.json``.

The format is in ``benchmarks/results/README.md``; ``docs/gen_reference.py`` builds the
docs' benchmark page from these files. Each benchmark calls ``write_result`` once at its end.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> str:
    """The CPU model (lscpu's 'Model name'), the core count and the load average."""
    model = platform.processor() or platform.machine()
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    load = os.getloadavg()[0]
    return f"{model}, {os.cpu_count()} cores, load {load:.1f}"


def write_result(
    name: str, what: str, reference: str, ratio: float, numbers: dict[str, Any]
) -> Path:
    """Write ``results/<name>.json``: what was measured, against what, the ratio
    (measured / reference), the raw numbers, the machine and today's date (UTC)."""
    result = {
        "benchmark": name,
        "what": what,
        "reference": reference,
        "ratio": round(ratio, 4),
        "numbers": numbers,
        "machine": machine(),
        "date": datetime.datetime.now(datetime.UTC).date().isoformat(),
    }
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path
