"""The import graph of Ember's packages, read from the source with ``ast`` (nothing is
imported or run), and the imports of private names across modules.

    python .ci/import_graph.py                  # mermaid: package -> package (the README's)
    python .ci/import_graph.py --modules analysis   # mermaid: the modules of one package
    python .ci/import_graph.py --private        # text: each import of another module's _name

Every import counts, also those inside functions (the lazy ones that keep jax out of the
analysis layer): an arrow says the code can reach that package, not when.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# folder -> package (pyproject's package-dir); ember_root is the `ember` package itself
FOLDERS = {
    "ember_root": "ember",
    "schemas": "ember.schemas",
    "recorder": "ember.recorder",
    "runtime": "ember.runtime",
    "analysis": "ember.analysis",
    "dashboard": "ember.dashboard",
    "cli": "ember.cli",
}
PACKAGES = tuple(FOLDERS.values())


@dataclass(frozen=True)
class Import:
    """One ``import`` or ``from ... import`` of an Ember module, by one module."""

    importer: str  # ember.analysis.findings
    module: str  # ember.analysis.format
    name: str | None  # the name taken from it (``from m import name``), None for ``import m``
    line: int


def modules() -> dict[str, Path]:
    """Every Ember module (dotted name -> file)."""
    found: dict[str, Path] = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _absolute(node: ast.ImportFrom, module: str, path: Path) -> str:
    """The module a ``from`` import names, relative ones resolved against ``module``."""
    if not node.level:
        return node.module or ""
    base = _package_of(module, path).split(".")
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def imports(known: dict[str, Path]) -> Iterator[Import]:
    """Every import of an Ember module by an Ember module."""
    for module, path in known.items():
        tree = ast.parse(path.read_text("utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("ember"):
                        yield Import(module, alias.name, None, node.lineno)
            elif isinstance(node, ast.ImportFrom):
                target = _absolute(node, module, path)
                if not target.startswith("ember"):
                    continue
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    if sub in known:  # `from . import format`: the module itself
                        yield Import(module, sub, None, node.lineno)
                    else:
                        yield Import(module, target, alias.name, node.lineno)


def package_of(module: str) -> str:
    """The top-level package a module belongs to (``ember.analysis.compare.load`` ->
    ``ember.analysis``)."""
    return max((p for p in PACKAGES if module == p or module.startswith(p + ".")), key=len)


def _parent(module: str, known: dict[str, Path]) -> str:
    """The package a module is in (``ember.analysis.compare`` for ``...compare.load``)."""
    return _package_of(module, known[module]) if module in known else module.rpartition(".")[0]


def private_imports(known: dict[str, Path]) -> list[Import]:
    """Imports of a private name (``_x``, not dunder) or module from another module."""
    out = []
    for imp in imports(known):
        last = imp.name if imp.name is not None else imp.module.rpartition(".")[2]
        private = last.startswith("_") and not last.startswith("__")
        if private and imp.module != imp.importer:
            out.append(imp)
    return out


def crosses_packages(imp: Import, known: dict[str, Path]) -> bool:
    """Whether ``imp`` reaches into another package (a sub-package counts as one): not a
    sibling module's name, which stays inside the package that owns both."""
    target = imp.module if imp.name is not None else imp.module.rpartition(".")[0]
    return _parent(imp.importer, known) != _parent(target, known) and not (
        imp.name is None and _parent(imp.importer, known) == target
    )


def _short(name: str) -> str:
    return name.removeprefix("ember.") or "ember"


def package_graph(known: dict[str, Path]) -> str:
    """Mermaid: an arrow from each package to each package it imports."""
    edges = sorted(
        {
            (package_of(i.importer), package_of(i.module))
            for i in imports(known)
            if package_of(i.importer) != package_of(i.module)
        }
    )
    lines = ["graph TD"] + [f"    {_short(a)} --> {_short(b)}" for a, b in edges]
    return "\n".join(lines) + "\n"


def module_graph(known: dict[str, Path], package: str) -> str:
    """Mermaid: the imports between the modules of one package."""
    inside = {m for m in known if package_of(m) == package}
    edges = sorted(
        {(i.importer, i.module) for i in imports(known) if {i.importer, i.module} <= inside}
        - {(m, m) for m in inside}
    )
    cut = len(package) + 1
    name = {m: (m[cut:] or "__init__").replace(".", "/") for m in inside}
    lines = ["graph LR"] + [f"    {name[a]} --> {name[b]}" for a, b in edges]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modules", metavar="PACKAGE", help="the graph of one package's modules")
    parser.add_argument("--private", action="store_true", help="list imports of _private names")
    args = parser.parse_args(argv)
    known = modules()
    if args.private:
        for imp in private_imports(known):
            where = "across packages" if crosses_packages(imp, known) else "same package"
            name = f" {imp.name}" if imp.name else ""
            print(f"{imp.importer}:{imp.line} <- {imp.module}{name} ({where})")
    elif args.modules:
        package = args.modules if args.modules.startswith("ember") else f"ember.{args.modules}"
        if package not in PACKAGES:
            parser.error(f"{args.modules}: not one of {', '.join(map(_short, PACKAGES))}")
        print(module_graph(known, package), end="")
    else:
        print(package_graph(known), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
