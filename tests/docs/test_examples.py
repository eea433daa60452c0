"""Every `bash` and `python` fence of the README and of docs/ runs (mktestdocs), so the docs cannot
drift from the code. A `console` or `python {.no-test}` fence is shown, not run (mktestdocs runs a
fence only when its info string is exactly the language). The fences run in a folder that holds
`traces/` with two recorded runs of tests/data, with the venv's `ember` first on PATH; the fences of
one file share it, in order (a page's `ember ingest` makes the database its `ember query` reads)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from mktestdocs import check_md_file

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _runnable(page: Path) -> bool:
    text = page.read_text(encoding="utf-8")
    return "```bash\n" in text or "```python\n" in text


@pytest.mark.parametrize(
    "page", [p for p in PAGES if _runnable(p)], ids=lambda p: str(p.relative_to(ROOT))
)
def test_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "traces").mkdir()
    for name in ("sweep.jsonl", "train.jsonl"):
        shutil.copy(DATA / name, tmp_path / "traces" / name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    check_md_file(page, lang="bash", memory=True)
    check_md_file(page, lang="python", memory=True)


def test_some_examples_run() -> None:
    """The convention is in use: a page whose fences all became `console` would test nothing."""
    assert any(_runnable(p) for p in PAGES)
