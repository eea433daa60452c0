"""Recording changes nothing the program sees: with ``JAX_LOG_COMPILES=1`` JAX's own log
lines, and the lines of a program that configures ``logging`` itself, are the same bare and
under ``ember record --`` (Ember's own lines are on stderr, prefixed ``ember``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TINY = """
import jax, jax.numpy as jnp
f = jax.jit(lambda x: x * 2 + 1)
for n in (4, 4, 8):
    print(float(f(jnp.ones(n)).sum()))
"""

OWN_LOGGING = """
import logging, sys
logging.basicConfig(level=logging.INFO, format="%(levelname)s|%(name)s|%(message)s",
                    stream=sys.stdout)
mine = logging.getLogger("mine")
mine.setLevel(logging.DEBUG)
import jax, jax.numpy as jnp
f = jax.jit(lambda x: x + 1)
mine.debug("before")
print(float(f(jnp.ones(3)).sum()))
mine.info("after")
print(logging.getLogger().level, len(logging.getLogger().handlers), mine.level)
"""


def _run(tmp_path: Path, code: str, recorded: bool) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "prog.py"
    script.write_text(code)
    env = {**os.environ, "JAX_LOG_COMPILES": "1", "JAX_PLATFORMS": "cpu"}
    env.pop("EMBER_TRACE", None)
    cmd = [sys.executable, str(script)]
    if recorded:
        cmd = [
            sys.executable,
            "-m",
            "ember.cli.main",
            "record",
            "--out",
            str(tmp_path / "t"),
            "--",
            "python",
            str(script),
        ]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def _jax_lines(text: str) -> list[str]:
    # durations differ from run to run; the lines themselves must not
    return [line.split(" in ")[0] for line in text.splitlines() if not line.startswith("ember")]


@pytest.mark.parametrize("code", [TINY, OWN_LOGGING], ids=["jax_log_compiles", "own_logging"])
def test_output_is_the_same_bare_and_recorded(tmp_path: Path, code: str) -> None:
    bare = _run(tmp_path, code, recorded=False)
    recorded = _run(tmp_path, code, recorded=True)
    assert bare.returncode == recorded.returncode == 0, recorded.stderr
    assert (
        sum("Compiling" in line for line in bare.stderr.splitlines() + bare.stdout.splitlines())
        >= 1
    )
    assert _jax_lines(recorded.stdout) == _jax_lines(bare.stdout)
    assert _jax_lines(recorded.stderr) == _jax_lines(bare.stderr)
    assert any(line.startswith("ember") for line in recorded.stderr.splitlines())
    assert list((tmp_path / "t").glob("*.jsonl"))
