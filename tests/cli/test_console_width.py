"""The CLI's consoles take their width when they print, not when ``ember.cli.app`` is
imported: rich reads ``COLUMNS`` once, when a console is made, and the consoles are made at
import, so the first importer's width stuck to every later command in the process (a test
runner's worker that imported the CLI at 80 columns printed every table at 80)."""

from __future__ import annotations

import os
import subprocess
import sys

from ember.cli.app import _SizedConsole
from tests.analysis.traces import REPO

# imported at 40 columns; then the environment says 120, as a terminal resized since would
SIZES = """
import os
from ember.cli.app import console, err_console
os.environ["COLUMNS"] = "120"
print(console.width, err_console.width)
os.environ["COLUMNS"] = "70"
print(console.width, err_console.width)
"""


def test_the_consoles_read_columns_at_each_print_not_at_import() -> None:
    env = {**os.environ, "COLUMNS": "40"}
    out = subprocess.run(
        [sys.executable, "-c", SIZES], env=env, cwd=REPO, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["120", "120", "70", "70"]


def test_a_width_given_to_the_console_is_kept(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    assert _SizedConsole(width=50).width == 50
    monkeypatch.setenv("COLUMNS", "90")
    assert _SizedConsole().width == 90
