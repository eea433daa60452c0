"""The generated reference (docs/gen_reference.py): current, and nothing in it undocumented."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import typer.main

from ember.analysis.views import VIEW_HEADERS
from ember.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "docs" / "gen_reference.py")
assert _spec
assert _spec.loader
gen = importlib.util.module_from_spec(_spec)
sys.modules["gen_reference"] = gen
_spec.loader.exec_module(gen)


def test_the_checked_in_reference_pages_are_what_the_sources_give():
    assert gen.stale_pages() == [], "run: python docs/gen_reference.py"


def test_a_changed_page_is_found_stale(tmp_path, monkeypatch):
    (tmp_path / "reference").mkdir()
    for name in gen.PAGES:
        (tmp_path / name).write_text((gen.DOCS / name).read_text())
    monkeypatch.setattr(gen, "DOCS", tmp_path)
    assert gen.stale_pages() == []
    views = tmp_path / "reference" / "views.md"
    views.write_text(views.read_text() + "\nedited\n")
    assert gen.stale_pages() == ["reference/views.md"]
    assert gen.main(["--check"]) == 1


def test_every_view_and_column_is_on_the_views_page_with_a_meaning():
    page = gen.views_page()
    for name, header in VIEW_HEADERS.items():
        assert f"## `{name}`" in page
        for column in header.columns:
            assert column.meaning, f"sql/{name}.sql: {column.name} has no meaning"
            assert f"| `{column.name}` |" in page


def test_every_command_and_option_is_on_the_cli_page_with_help():
    page = gen.cli_page()
    for path, command in gen._commands(typer.main.get_command(app), "ember"):
        assert f"## `{path}`" in page
        assert command.help, f"{path} has no help"
        for param in command.params:
            if param.name != "help":
                assert param.help, f"{path}: {param.name} has no help"


def test_the_benchmark_page_shows_each_result(tmp_path, monkeypatch):
    result = {
        "benchmark": "x",
        "what": "a | b",
        "reference": "c",
        "ratio": 1.25,
        "numbers": {"s": 2},
        "machine": "cpu, 2 cores, load 0.1",
        "date": "2026-01-02",
    }
    (tmp_path / "x.json").write_text(json.dumps(result))
    monkeypatch.setattr(gen, "BENCHMARK_RESULTS", tmp_path)
    row = "| `x` | a \\| b | c | 1.25x | s 2 | cpu, 2 cores, load 0.1 | 2026-01-02 |"
    assert row in gen.benchmarks_page().splitlines()


def test_every_record_field_is_on_the_trace_format_page_with_a_description():
    page = gen.trace_format_page()
    models = gen._models()
    # the walk reaches every record kind, every span kind's attrs and what they nest
    names = {m.__name__ for m in models}
    assert {"Meta", "Cache", "CallSpanStart", "JitSpanEnd", "JitEndAttrs", "DiskKey"} <= names
    for model in models:
        assert f"### {model.__name__}\n" in page
        for name, field in model.model_fields.items():
            where = f"schemas/records.py: {model.__name__}.{name}"
            assert field.description, f"{where} has no description"
            assert f"| `{field.alias or name}` |" in page


def test_every_package_on_the_api_page_is_found_in_the_docs_link_tree(tmp_path):
    griffe = pytest.importorskip("griffe")
    spec = importlib.util.spec_from_file_location("api_tree", ROOT / "docs/hooks/api_tree.py")
    assert spec
    assert spec.loader
    api_tree = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(api_tree)
    tree = api_tree.lay_out(tmp_path / "tree")
    page = (ROOT / "docs" / "reference" / "api.md").read_text()
    names = [line[4:].strip() for line in page.splitlines() if line.startswith("::: ")]
    assert {"ember", "ember.record", "ember.recorder", "ember.schemas", "ember.analysis"} <= set(
        names
    )
    loader = griffe.GriffeLoader(search_paths=[str(tree)])
    for name in names:
        module = loader.load(name)
        assert Path(module.filepath).is_relative_to(tree), name  # the tree's, not an install
        for public in module.exports or []:
            assert public in module.members, f"{name}.{public}: in __all__, not found"
