"""Ember's pytest plugin (entry point ``pytest11``: installed with Ember, no conftest needed).

- ``@pytest.mark.compile_budget(recompiles=0, warmup=1)``: the test fails when it breaks the
  budget (the arguments of ``ember.expect``), with each extra compile and why.
- the fixture ``ember_trace``: records the test (a trace file) and gives its views:
  ``ember_trace.run_summary()``, ``ember_trace.recompiles()``, ``ember_trace.sql(...)``, and
  what ``ember.expect`` saw so far (``ember_trace.seen``).
- ``--ember-record DIR``: keep a trace per test in DIR (for ``ember ingest DIR``); every test
  is recorded then.
- at the end of the session, a short table of the tests that compiled most (of the tests
  Ember watched: those with the marker or the fixture, or every test with --ember-record),
  with pytest-xdist's workers' tests too (each worker hands its rows to the controller).

Importing this module imports neither JAX nor Ember's recorder: pytest loads it in every
session of an environment where Ember is installed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Generator

    import polars as pl

    from ember.budget import Budget, Seen

__all__ = ["EmberTrace"]

_MARKER = "compile_budget"
_TABLE_ROWS = 10


@dataclass
class _Row:
    """One watched test, for the end-of-session table."""

    nodeid: str
    compiles: int
    recompiles: int
    loads: int
    evictions: int
    compile_ns: int


_ROWS = pytest.StashKey[list[_Row]]()


class EmberTrace:
    """One test's recording: the trace file, and the views over it.

    ``seen`` is what ``ember.expect`` collects (compiles with their reasons, loads from a
    disk cache, evictions); the views read the trace as ``ember ingest`` would.
    """

    def __init__(self, path: Path, nodeid: str, warmup: int = 0, peak_memory: bool = False) -> None:
        from ember.budget import Watch
        from ember.recorder import record

        self.path = path
        self.nodeid = nodeid
        self._stack = ExitStack()
        self._db = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        self.recorder = self._stack.enter_context(record(path, test=nodeid, entrypoint=nodeid))
        try:
            self._watch = Watch(warmup=warmup, peak_memory=peak_memory).start()
        except BaseException:
            self._stack.close()
            raise
        self._stack.callback(self._watch.stop)
        self._closed = False

    @property
    def seen(self) -> Seen:
        return self._watch.seen

    def sample_memory(self) -> None:
        """Read the devices' memory now, into ``seen.peak_memory`` (with a budget on it)."""
        self._watch.sample_memory()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._stack.close()

    def sql(self, query: str, params: list[Any] | None = None) -> pl.DataFrame:
        """``query`` over the test's trace so far (ingested into a new DuckDB file)."""
        from ember.analysis import connect, ingest

        if not self._closed:
            self.recorder.flush()
        self._db += 1
        db = self.path.with_name(f"{self.path.stem}.{self._db}.duckdb")
        ingest([self.path], db)
        return connect(db).sql(query, params)

    def run_summary(self) -> dict[str, Any]:
        """The test's row of ``run_summary`` (calls, compiles, recompiles, latency...)."""
        return self.sql("SELECT * FROM run_summary").to_dicts()[0]

    def recompiles(self) -> pl.DataFrame:
        """The ``recompiles`` view's rows for the test, in order."""
        return self.sql("SELECT * FROM recompiles ORDER BY ts_ns")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ember", "Ember compile budgets")
    group.addoption(
        "--ember-record",
        metavar="DIR",
        default=None,
        help="record every test into DIR/<test>.jsonl (for `ember ingest DIR`).",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{_MARKER}(compiles=None, recompiles=None, evictions=None, peak_memory=None, "
        "warmup=0): fail the test when it compiles, recompiles or evicts more than this "
        "(the arguments of ember.expect).",
    )
    config.stash[_ROWS] = []


def _file_name(nodeid: str) -> str:
    # a node id holds '/', '::' and '[...]': one safe file name. Parameter ids (`a b`, `a_b`,
    # `a/b`) read alike once made safe, so a name made from one gets a hash of the whole id
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")
    if re.search(r"[^A-Za-z0-9_./:-]", nodeid):
        name += "-" + hashlib.sha1(nodeid.encode()).hexdigest()[:8]
    return name + ".jsonl"


def _record_dir(config: pytest.Config) -> Path | None:
    value = config.getoption("ember_record", None)
    return Path(value) if value else None


@pytest.fixture
def ember_trace(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Generator[EmberTrace, None, None]:
    """Record this test: ``ember_trace.run_summary()``, ``.recompiles()``, ``.sql(q)``."""
    folder = _record_dir(request.config) or tmp_path_factory.mktemp("ember")
    budget = _budget_of(request.node)
    trace = EmberTrace(
        folder / _file_name(request.node.nodeid),
        request.node.nodeid,
        warmup=budget.warmup if budget is not None else 0,
        peak_memory=budget is not None and budget.peak_memory is not None,
    )
    try:
        yield trace
    finally:
        trace.close()


def _budget_of(item: pytest.Item) -> Budget | None:
    marker = item.get_closest_marker(_MARKER)
    if marker is None:
        return None
    from ember.budget import Budget

    if marker.args:
        raise pytest.UsageError(
            f"{item.nodeid}: compile_budget takes keyword arguments only "
            "(compiles=, recompiles=, evictions=, peak_memory=, warmup=, fresh=)"
        )
    try:
        return Budget(**marker.kwargs)
    except (TypeError, ValueError) as exc:
        raise pytest.UsageError(f"{item.nodeid}: compile_budget: {exc}") from exc


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    # a budget that cannot be read stops the session before any test runs, naming the test
    for item in items:
        _budget_of(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    budget = _budget_of(item)
    record_dir = _record_dir(item.config)
    funcargs = getattr(item, "funcargs", {})
    trace: EmberTrace | None = funcargs.get("ember_trace")
    if budget is None and record_dir is None and trace is None:
        return (yield)
    own = ExitStack()  # what this hook started for the test, stopped after it
    if trace is None and record_dir is not None:
        trace = EmberTrace(
            record_dir / _file_name(item.nodeid),
            item.nodeid,
            warmup=budget.warmup if budget is not None else 0,
            peak_memory=budget is not None and budget.peak_memory is not None,
        )
        own.callback(trace.close)
    if trace is not None:
        seen = trace.seen
    else:
        from ember.budget import Watch

        assert budget is not None  # neither the fixture nor --ember-record: the marker
        watch = Watch(warmup=budget.warmup, peak_memory=budget.peak_memory is not None)
        seen = watch.start().seen
        own.callback(watch.stop)
    if budget is not None:
        budget.prepare()  # fresh=True: JAX's caches cleared as the test starts
    try:
        result = yield
    finally:
        if trace is not None:
            # the fixture's watch runs on until its teardown: read the memory at the test's
            # end here, before the budget is checked (else only the sampler's reads count)
            trace.sample_memory()
        own.close()
        _remember(item, seen)
    if budget is not None:
        budget.check(seen)
    return result


def _remember(item: pytest.Item, seen: Seen) -> None:
    item.config.stash[_ROWS].append(
        _Row(
            item.nodeid,
            len(seen.compiles),
            len(seen.recompiles),
            len(seen.loads),
            len(seen.evictions),
            sum(c.duration_ns for c in seen.compiles),
        )
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    exc = call.excinfo.value if call.excinfo is not None else None
    if report.failed and type(exc).__name__ == "CompileBudgetExceeded":
        # like a failed assert: the reasons, no traceback through the plugin
        lines = str(exc).splitlines()
        report.longrepr = "\n".join(f"E   {line}" for line in lines)
    return report


def _seconds(ns: int) -> str:
    s = ns / 1e9
    return f"{s:.2f} s" if s < 10 else f"{s:.0f} s"


_WORKER_ROWS = "ember_rows"  # the key of a pytest-xdist worker's rows in its workeroutput


def pytest_sessionfinish(session: pytest.Session) -> None:
    # a pytest-xdist worker prints no summary: its rows go to the controller, which does
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[_WORKER_ROWS] = [dataclasses.astuple(r) for r in session.config.stash[_ROWS]]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """pytest-xdist's controller: a worker finished; keep its rows for the summary."""
    rows = getattr(node, "workeroutput", {}).get(_WORKER_ROWS, [])
    node.config.stash[_ROWS].extend(_Row(*row) for row in rows)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    rows = [r for r in config.stash.get(_ROWS, []) if r.compiles or r.loads or r.evictions]
    if not rows:
        return
    rows.sort(key=lambda r: (-r.compiles, -r.compile_ns, r.nodeid))
    tr = terminalreporter
    tr.write_sep("=", "ember: the tests that compiled most")
    tr.write_line(
        f"{'compiles':>8}  {'recompiles':>10}  {'loaded':>6}  {'evictions':>9}  "
        f"{'compile time':>12}  test"
    )
    for r in rows[:_TABLE_ROWS]:
        tr.write_line(
            f"{r.compiles:>8}  {r.recompiles:>10}  {r.loads:>6}  {r.evictions:>9}  "
            f"{_seconds(r.compile_ns):>12}  {r.nodeid}"
        )
    if len(rows) > _TABLE_ROWS:
        tr.write_line(f"({len(rows) - _TABLE_ROWS} more tests compiled)")
    folder = _record_dir(config)
    if folder is not None:
        tr.write_line(f"traces: {folder} (ember ingest {folder})")
