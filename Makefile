# The two commands of the README: `make demo` and `make test`. Both create .venv from
# pyproject.toml when it is missing or older than pyproject.toml.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.ember-installed

.PHONY: demo test lint typecheck conformance dashboard bench browser clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/ember demo

lint: $(STAMP) typecheck
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The packages mypy checks: all of them since issue 17.
TYPED := ember.schemas ember.recorder ember.runtime ember.analysis ember.cli ember.dashboard
# mypy cannot follow the editable install's import hook (pyproject's package-dir maps
# ember.schemas to schemas/ and so on), so it reads .mypy-tree/: links laid out like the
# installed package, ember/schemas -> schemas/ ... Errors name .mypy-tree/ember/X/f.py
# for X/f.py.
typecheck: $(STAMP)
	rm -rf .mypy-tree && mkdir -p .mypy-tree/ember
	ln -s ../../ember_root/__init__.py .mypy-tree/ember/__init__.py
	for d in schemas recorder runtime analysis dashboard cli; do ln -s ../../$$d .mypy-tree/ember/$$d; done
	$(BIN)/mypy $(addprefix -p ,$(TYPED))

browser:
	bash tests/dashboard/install_browser.sh

# The conformance count runs before pytest so that pytest's summary is the last line.
test: $(STAMP) lint browser
	$(BIN)/python -m ember.runtime.conformance
	$(BIN)/pytest

conformance: $(STAMP)
	$(BIN)/python -m ember.runtime.conformance

dashboard: $(STAMP)
	$(BIN)/ember dashboard --db ember-demo/ember.duckdb

bench: $(STAMP)
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) ember-demo .pytest_cache .ruff_cache .mypy_cache .mypy-tree
