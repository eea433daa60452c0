"""The arrows between the packages (docs/design/architecture.md), read from the source by
.ci/import_graph.py: which package imports which, and who takes another module's _name."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("import_graph", ROOT / ".ci" / "import_graph.py")
assert _spec is not None
assert _spec.loader is not None
graph = importlib.util.module_from_spec(_spec)
sys.modules["import_graph"] = graph
_spec.loader.exec_module(graph)

KNOWN = graph.modules()

# Private names a module takes from another package today. Make them public (or move the
# helper to the package that owns it) and delete the line: this list only shrinks.
CROSS_PACKAGE_TODAY: set[tuple[str, str, str]] = set()
# Private names a module takes from a sibling in its own package (the flat families of
# analysis/ that are to become sub-packages: ingest*, lake*; runtime/ops helpers). The count
# only goes down.
SAME_PACKAGE_TODAY = 0


def _edges() -> set[tuple[str, str]]:
    return {
        (graph.package_of(i.importer), graph.package_of(i.module))
        for i in graph.imports(KNOWN)
        if graph.package_of(i.importer) != graph.package_of(i.module)
    }


def test_the_layers_point_one_way():
    edges = _edges()
    reads = {a: {b for x, b in edges if x == a} for a, _ in edges}
    assert not reads.get("ember.schemas")  # schemas imports nothing of ember
    assert reads["ember.recorder"] <= {"ember.schemas"}
    assert reads["ember.analysis"] <= {"ember.schemas"}
    assert reads["ember.dashboard"] <= {"ember.analysis", "ember.schemas"}
    assert reads["ember.runtime"] <= {"ember", "ember.schemas", "ember.recorder"}


def test_schemas_imports_pydantic_only():
    """DESIGN: schemas may import pydantic only (and the standard library): every reader of a
    trace, down to the recorder in a user's process, imports it. (msgspec's compiled line
    check is ingest's, in analysis.)"""
    allowed = {"pydantic", "pydantic_core", "annotated_types", "typing_extensions"}
    outside = set()
    for module, path in KNOWN.items():
        if graph.package_of(module) != "ember.schemas":
            continue
        tree = ast.parse(path.read_text("utf-8"))
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in allowed | {"ember"}:
                    outside.add((module, name))
    assert not outside, sorted(outside)


def test_no_new_private_import_across_packages():
    private = graph.private_imports(KNOWN)
    across = {(i.importer, i.module, i.name) for i in private if graph.crosses_packages(i, KNOWN)}
    assert across <= CROSS_PACKAGE_TODAY, sorted(across - CROSS_PACKAGE_TODAY)
    same = [i for i in private if not graph.crosses_packages(i, KNOWN)]
    assert len(same) <= SAME_PACKAGE_TODAY, "a new import of a sibling's _name"


def test_private_imports_are_found_as_a_reader_sees_them(tmp_path, monkeypatch):
    pkg = tmp_path / "analysis"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "db.py").write_text("def _cols(): ...\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "load.py").write_text(
        "from ..db import _cols\nfrom . import _model\n\n\n"
        "def f():\n    from ember.analysis.db import x\n"
    )
    (pkg / "sub" / "_model.py").write_text("")
    monkeypatch.setattr(graph, "ROOT", tmp_path)
    monkeypatch.setattr(graph, "FOLDERS", {"analysis": "ember.analysis"})
    known = graph.modules()
    found = {(i.importer, i.module, i.name) for i in graph.imports(known)}
    assert found == {
        ("ember.analysis.sub.load", "ember.analysis.db", "_cols"),
        ("ember.analysis.sub.load", "ember.analysis.sub._model", None),
        ("ember.analysis.sub.load", "ember.analysis.db", "x"),
    }
    crossing = {
        (i.module, i.name): graph.crosses_packages(i, known) for i in graph.private_imports(known)
    }
    # a sub-package taking its parent's _name crosses; its own private module does not
    assert crossing == {
        ("ember.analysis.db", "_cols"): True,
        ("ember.analysis.sub._model", None): False,
    }


def test_the_readme_draws_todays_package_graph():
    readme = (ROOT / "docs" / "design" / "layout.md").read_text("utf-8")
    assert f"```mermaid\n{graph.package_graph(KNOWN)}```" in readme, (
        "run `python .ci/import_graph.py` and paste its graph into docs/design/layout.md"
    )


def test_the_readme_module_table_lists_every_module():
    """Each product module has its row in docs/design/layout.md (a folder row for a package)."""
    readme = (ROOT / "docs" / "design" / "layout.md").read_text("utf-8")
    table = readme.split("| module | owns |", 1)[1].split("\n\n", 1)[0]
    rows = set(re.findall(r"^\| `([^`]+)` \|", table, flags=re.M))
    modules = set()
    for folder in ("ember_root", "schemas", "recorder", "runtime", "analysis", "dashboard", "cli"):
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            is_sub_init = path.name == "__init__.py" and path.parent.parent != ROOT
            modules.add(rel[: -len("__init__.py")] if is_sub_init else rel)
    assert modules - rows == set(), "modules without a row in docs/design/layout.md"
    named = {r for r in rows if r.endswith(".py") or (ROOT / r / "__init__.py").exists()}
    assert named - modules == set(), "rows of docs/design/layout.md that name no module"
    # the other rows (SQL, JSON schema folders, data files) must name a path that is there
    assert {r for r in rows if not (ROOT / r).exists()} == set(), "rows naming a missing path"
