"""``.ci/lock_drift.py``: which installed packages differ from uv.lock (``make test-latest``)."""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _drift():
    spec = importlib.util.spec_from_file_location("lock_drift", REPO / ".ci" / "lock_drift.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LOCK = """
[[package]]
name = "app"
version = "1.0"
dependencies = [
    { name = "numpy", version = "2.4.6", marker = "python_full_version < '3.12'" },
    { name = "numpy", version = "2.5.5", marker = "python_full_version >= '3.12'" },
    { name = "colorama", marker = "sys_platform == 'never'" },
    { name = "rich" },
]

[[package]]
name = "numpy"
version = "2.4.6"

[[package]]
name = "numpy"
version = "2.5.5"

[[package]]
name = "colorama"
version = "0.4.6"

[[package]]
name = "Rich"
version = "15.0.0"
"""


def test_a_universal_lock_gives_the_versions_for_this_interpreter():
    locked = _drift().locked_versions(tomllib.loads(LOCK), None)
    here = "2.4.6" if sys.version_info < (3, 12) else "2.5.5"
    assert locked["numpy"] == {here}
    assert "colorama" not in locked  # its only edge's marker does not hold here
    assert locked["rich"] == {"15.0.0"}  # names are canonical


@pytest.mark.skipif(
    Path(sys.prefix).resolve() != (REPO / ".venv").resolve(),
    reason="only the .venv that `make test` syncs from uv.lock is the locked set",
)
def test_the_repository_lock_matches_the_test_environment(capsys):
    # the suite runs in the environment `make test` synced from uv.lock: nothing moved
    assert _drift().main([str(REPO / "uv.lock"), "--extra", "test"]) == 0
    assert "no package moved from uv.lock" in capsys.readouterr().out
