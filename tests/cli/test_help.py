"""Every command's --help reads as written: rich takes `[...]` for markup and keeps a
paragraph's line breaks, so help text is checked as a user sees it."""

from __future__ import annotations

import itertools
import re

import pytest
from typer.testing import CliRunner

from ember.cli.main import app

runner = CliRunner()
COMMANDS = ["ingest", "query", "report", "export", "views", "compare", "dashboard", "demo"]
COMMANDS += ["run", "validate", "import", "import candle"]


def _help(command: str, columns: int = 100) -> str:
    result = runner.invoke(app, [*command.split(), "--help"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.output


def test_the_hub_revision_is_shown():
    # rich took "[@REVISION]" for a tag and printed hf://owner/repo/file.onnx
    assert "hf://owner/repo[@REVISION]/file.onnx" in " ".join(_help("run").split())


@pytest.mark.parametrize("command", COMMANDS)
def test_help_paragraphs_are_wrapped_to_the_terminal(command):
    # a paragraph whose docstring lines ended before the terminal's width came out as
    # ragged lines ("latency compared" alone on one): every line of the description
    # before the panels is filled to within a word of the width, but a paragraph's last
    text = _help(command, columns=80).split("╭")[0]
    paragraphs = [p.splitlines() for p in re.split(r"\n\s*\n", text) if p.strip()][1:]
    for lines in paragraphs:
        for line, after in itertools.pairwise(lines):
            next_word = after.split()[0]
            assert len(line.rstrip()) + 1 + len(next_word) > 78, (line, after)
