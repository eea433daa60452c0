"""MkDocs hook: lay out the source tree as the installed ``ember`` package for mkdocstrings.

pyproject maps ``ember`` to ``ember_root/``, ``ember.schemas`` to ``schemas/`` and so on
(setuptools' package-dir), which griffe cannot follow: it finds ``ember`` but none of the
packages mapped beside it. Before the build this hook makes ``build/api-tree/ember``, links
laid out like the installed package, and mkdocstrings reads the sources from there
(``paths: [build/api-tree]`` in mkdocs.yml). The docs build makes its own tree: it does not
depend on ``make typecheck``'s ``.mypy-tree``.
"""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TREE = ROOT / "build" / "api-tree"


def package_dirs() -> dict[str, str]:
    """pyproject's package-dir: the package's dotted name -> its folder in the repository."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    mapping: dict[str, str] = project["tool"]["setuptools"]["package-dir"]
    return mapping


def lay_out(tree: Path = TREE) -> Path:
    """Make ``tree/ember``: one link a mapped package (or module), nested as installed."""
    if tree.exists():
        shutil.rmtree(tree)
    for name, folder in sorted(package_dirs().items(), key=lambda kv: kv[0].count(".")):
        if not re.fullmatch(r"[A-Za-z_][\w.]*", name):
            raise ValueError(f"pyproject.toml package-dir: {name!r} is not a package name")
        target = ROOT / folder
        place = tree.joinpath(*name.split("."))
        if place.exists():  # a sub-package already reached through its parent's link
            continue
        if name == "ember":
            # the top package: its modules one by one, so the mapped packages fit beside them
            place.mkdir(parents=True)
            for module in target.glob("*.py"):
                (place / module.name).symlink_to(module)
            for extra in ("py.typed",):
                if (target / extra).exists():
                    (place / extra).symlink_to(target / extra)
        else:
            place.parent.mkdir(parents=True, exist_ok=True)
            place.symlink_to(target, target_is_directory=True)
    return tree


def on_startup(**kwargs: Any) -> None:
    # on_startup, not on_config: mkdocstrings reads its paths in its own on_config, which
    # runs before a hook's (a path that is not there yet is left out of griffe's search).
    lay_out()
