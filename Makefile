# The two commands of the README: `make demo` and `make test`. Both create .venv from
# pyproject.toml when it is missing or older than pyproject.toml.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.ember-installed

.PHONY: demo test lint conformance dashboard bench browser clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/ember demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

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
	rm -rf $(VENV) ember-demo .pytest_cache .ruff_cache
