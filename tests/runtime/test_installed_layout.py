"""Paths the runtime names or reads are right outside a source checkout too.

A checkout maps the packages to top-level folders (``runtime/``, ``runtime/ops/``); an
installed package has them under ``ember/``. The test lays the packages out as a wheel
would, from pyproject.toml's ``package-dir`` and ``package-data`` (only ``.py`` files and the
listed data), and imports them from there in a new process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from ember.runtime import conformance, errors

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import json
import ember.runtime
from ember.runtime import conformance, errors
print(json.dumps({
    "runtime": ember.runtime.__file__,
    "ops": str(errors.op_library_folder()),
    "floor": conformance.read_floor(),
    "message": str(errors.UnsupportedOpsError({("", "NoSuchOp", 17): ["n"]})),
}))
"""


def _install_like_a_wheel(target: Path) -> None:
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    data = setuptools.get("package-data", {})
    for package, folder in setuptools["package-dir"].items():
        source = REPO / folder
        dest = target.joinpath(*package.split("."))
        dest.mkdir(parents=True, exist_ok=True)
        for path in source.glob("*.py"):
            shutil.copy2(path, dest / path.name)
        for pattern in data.get(package, []):
            for path in source.glob(pattern):
                (dest / path.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, dest / path.relative_to(source))


def test_the_checkout_finds_the_op_library_and_the_floor():
    folder = errors.op_library_folder()
    assert folder == REPO / "runtime" / "ops"
    assert (folder / "__init__.py").is_file()
    assert conformance.read_floor() == int((REPO / "runtime" / "conformance_floor.txt").read_text())
    assert f"ember.runtime.ops, {folder};" in str(errors.UnsupportedOpsError({("", "X", 1): []}))


def test_an_installed_package_finds_the_op_library_and_the_floor(tmp_path):
    site = tmp_path / "site"
    _install_like_a_wheel(site)
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    got = json.loads(out.strip().splitlines()[-1])
    # The probe imported the laid-out copy, not the checkout.
    assert Path(got["runtime"]) == site / "ember" / "runtime" / "__init__.py"
    ops = site / "ember" / "runtime" / "ops"
    assert Path(got["ops"]) == ops
    assert (ops / "nn.py").is_file()
    assert f"package ember.runtime.ops, {ops};" in got["message"]
    assert got["floor"] == conformance.read_floor()
    assert got["floor"] >= 1450
