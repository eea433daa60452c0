"""The wheel and sdist work outside the checkout.

``python -m build`` makes both; the wheel goes into a new virtual environment in a
temporary folder (its dependencies from uv.lock, through uv's cache), and the commands a
new user runs first run there, in another temporary folder: ``ember --version``,
``ember demo`` and ``ember views``. So the package data (SQL views, JSON schemas, the
conformance floor, ``py.typed``) and the entry point are proven, not assumed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UV = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.skipif(UV is None, reason="needs uv (the test extra installs it)"),
]


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, f"{' '.join(args)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # build's isolated environment, made by uv (fast, from its cache), not by pip.
    _run([sys.executable, "-m", "build", "--installer", "uv", "--outdir", str(out)], REPO)
    return out


@pytest.fixture(scope="module")
def installed(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("venv") / "v"
    assert UV is not None
    _run([UV, "venv", "-q", "--python", sys.executable, str(venv)], REPO)
    locked = venv.parent / "locked.txt"
    exported = _run([UV, "export", "--frozen", "--no-emit-project", "--no-hashes", "-q"], REPO)
    locked.write_text(exported)
    python = str(venv / "bin" / "python")
    _run([UV, "pip", "install", "-q", "--python", python, "-r", str(locked)], REPO)
    (wheel,) = dist.glob("ember-*.whl")
    _run([UV, "pip", "install", "-q", "--python", python, "--no-deps", str(wheel)], REPO)
    return venv


def test_the_wheel_holds_the_package_data_and_the_sdist_the_sources(dist: Path) -> None:
    (wheel,) = dist.glob("ember-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in (
        "ember/py.typed",
        "ember/runtime/conformance_floor.txt",
        "ember/analysis/sql/run_summary.sql",
        "ember/cli/main.py",
    ):
        assert required in names, f"{required} is not in {wheel.name}"
    assert any(n.startswith("ember/schemas/json/") and n.endswith(".json") for n in names)
    assert not any(n.startswith(("tests/", "benchmarks/")) for n in names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "ember = ember.cli.main:app" in zipfile.ZipFile(wheel).read(entry_points).decode()
    (sdist,) = dist.glob("ember-*.tar.gz")
    with tarfile.open(sdist) as tar:
        members = tar.getnames()
    assert any(m.endswith("/pyproject.toml") for m in members)
    assert any(m.endswith("/analysis/sql/run_summary.sql") for m in members)


def test_the_installed_wheel_runs_the_first_commands_outside_the_checkout(
    installed: Path, tmp_path: Path
) -> None:
    bin_dir = installed / "bin"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert _run([str(bin_dir / "ember"), "--version"], tmp_path, env).strip() == f"ember {version}"
    where = _run(
        [
            str(bin_dir / "python"),
            "-c",
            "import ember, ember.runtime.conformance as c;"
            "print(ember.__file__); print(c.read_floor())",
        ],
        tmp_path,
        env,
    ).split()
    assert Path(where[0]).is_relative_to(installed), f"ember imported from {where[0]}"
    assert int(where[1]) >= 1450
    report = _run([str(bin_dir / "ember"), "demo"], tmp_path, env)
    assert (tmp_path / "ember-demo" / "ember.duckdb").is_file()
    assert "recompile" in report.lower()
    views = _run([str(bin_dir / "ember"), "views"], tmp_path, env)
    assert "CREATE" in views.upper()
    assert "run_summary" in views
