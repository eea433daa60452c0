# The two commands of the README: `make demo` and `make test`. Both install the locked set of
# uv.lock into .venv (exactly: what the lock does not name is removed), with uv, itself pinned
# with hashes in requirements-uv.txt and installed by pip into .uv/. `make demo` installs the
# base set (the demo and the dashboard), `make test` adds the `test` extra (PySpark, pytest,
# onnxruntime, the linters). `make lock` refreshes uv.lock from pyproject.toml;
# `make test-latest` runs the suite on the newest releases pyproject.toml allows.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
UV_VERSION := 0.13.8
UV := .uv/bin/uv
DEMO_STAMP := $(VENV)/.ember-demo
TEST_STAMP := $(VENV)/.ember-test
# uv uses the machine's Python (never one it downloads) and the venv named here.
export UV_PYTHON_DOWNLOADS := never
export UV_PROJECT_ENVIRONMENT := $(VENV)

.PHONY: demo test test-latest lock lint typecheck conformance dashboard bench browser clean docs docs-serve check

$(UV): requirements-uv.txt
	rm -rf .uv
	$(PYTHON) -m pip install -q --disable-pip-version-check --require-hashes --no-deps --target .uv -r requirements-uv.txt
	touch $(UV)

# --locked: fail if pyproject.toml changed since uv.lock was made (run `make lock`).
$(DEMO_STAMP): uv.lock pyproject.toml | $(UV)
	$(UV) sync --locked --python $(PYTHON)
	rm -f $(TEST_STAMP)
	touch $@

# The test set holds the demo's, so it stamps both.
$(TEST_STAMP): uv.lock pyproject.toml | $(UV)
	$(UV) sync --locked --python $(PYTHON) --extra test
	touch $@ $(DEMO_STAMP)

lock: | $(UV)
	$(UV) lock --upgrade --python $(PYTHON)
	echo 'uv==$(UV_VERSION)' | $(UV) pip compile - --universal --python-version 3.11 \
	    --generate-hashes --no-header -q -o requirements-uv.txt
	sed -i '1i # uv itself, pinned with hashes: the Makefile installs it into .uv/ with pip, then uv installs\n# the locked set of uv.lock. Refreshed by `make lock` (uv pip compile of uv==VERSION).' requirements-uv.txt

# The newest releases pyproject.toml allows, in .venv-latest: which moved, and what broke.
test-latest: | $(UV)
	UV=$(UV) PYTHON=$(PYTHON) bash .ci/test-latest

demo: $(DEMO_STAMP)
	$(BIN)/ember demo

lint: $(TEST_STAMP) typecheck
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The packages mypy checks: all of them since issue 17.
TYPED := ember.schemas ember.recorder ember.runtime ember.analysis ember.cli ember.dashboard \
	ember.budget ember.pytest_plugin ember.record ember.autorecord tests.recordings
# mypy cannot follow the editable install's import hook (pyproject's package-dir maps
# ember.schemas to schemas/ and so on), so it reads .mypy-tree/: links laid out like the
# installed package, ember/schemas -> schemas/ ... Errors name .mypy-tree/ember/X/f.py
# for X/f.py.
typecheck: $(TEST_STAMP)
	rm -rf .mypy-tree && mkdir -p .mypy-tree/ember
	for f in __init__ budget pytest_plugin record autorecord; do ln -s ../../ember_root/$$f.py .mypy-tree/ember/$$f.py; done
	for d in schemas recorder runtime analysis dashboard cli; do ln -s ../../$$d .mypy-tree/ember/$$d; done
	$(BIN)/mypy $(addprefix -p ,$(TYPED))

browser:
	bash tests/dashboard/install_browser.sh

# The conformance count runs before pytest so that pytest's summary is the last line.
# pytest runs on every logical core (pytest-xdist; psutil counts them): 18 minutes one test
# at a time on a 2-core CI machine. `make test PYTEST_WORKERS=0` runs it in one process.
# --dist loadfile: a file's tests run in one worker, so that a module's fixtures (a Spark
# session, recorded runs) are made once, not once per worker. --no-loadscope-reorder: the
# files go to the workers in collection order; xdist's default order (most tests first)
# left the one-test files, the slowest of the suite (the Spark cluster, 5 min; the demo;
# the browsers), for the end, and one worker ran them while the other idled: 1854 s on
# 2 cores where collection order (tests/analysis, holding the Spark and lake files, first)
# balances the workers to ~1660 s.
PYTEST_WORKERS ?= logical
test: $(TEST_STAMP) lint docs browser
	$(BIN)/python -m ember.runtime.conformance
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The quick loop for every edit: lint, types and the tests not marked spark, browser or slow
# (tests/conftest.py registers the markers). `make test` runs everything, as CI does.
FAST_TESTS := not spark and not browser and not slow
check: lint
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile -m "$(FAST_TESTS)"

# The docs site (mkdocs.yml, docs/) into site/; --strict: a broken link or a missing page fails.
docs: $(TEST_STAMP)
	$(BIN)/mkdocs build --strict

docs-serve: $(TEST_STAMP)
	$(BIN)/mkdocs serve --dev-addr 127.0.0.1:8000

conformance: $(TEST_STAMP)
	$(BIN)/python -m ember.runtime.conformance

dashboard: $(DEMO_STAMP)
	$(BIN)/ember dashboard --db ember-demo/ember.duckdb

bench: $(TEST_STAMP)
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf site $(VENV) .venv-latest .uv ember-demo .pytest_cache .ruff_cache .mypy_cache .mypy-tree
