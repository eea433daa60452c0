"""An unmodified Flax NNX training script (``programs/nnx_train.py``: one fused ``nnx.jit``
step, the batch size changing twice) run by ``ember record --``: its retraces are in
``recompiles`` with their reasons, each argument named as the script names it, and its
top-level jitted calls are its steps, named after the function or as ``--step`` says."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.analysis.databases import query_rows
from tests.cli.conftest import record_and_ingest

SCRIPT = Path(__file__).parent / "programs" / "nnx_train.py"


def _record(tmp_path: Path, *options: str) -> Path:
    """Run the script under ``ember record``; the database its one trace was ingested into."""
    done, db = record_and_ingest(tmp_path, SCRIPT, options=options)
    assert "final loss" in done.stdout  # the script ran to its end, as written
    return db


@pytest.fixture(scope="module")
def labelled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _record(tmp_path_factory.mktemp("nnx"), "--step", "train=train_step")


def test_the_retraces_are_in_recompiles_with_their_reasons(labelled):
    rows = query_rows(
        labelled,
        "SELECT arg, old_value, new_value, reason FROM recompiles "
        "WHERE fun_name = 'train_step' AND NOT outside_jit ORDER BY compile_index",
    )
    said = query_rows(
        labelled,
        "SELECT retrace_reason FROM compiles WHERE fun_name = 'train_step' "
        "AND compile_index > 1 ORDER BY compile_index",
    )
    # x and y as train_step names them (not args[0][2]); the model and the optimizer, the
    # same graph state each time, are not a reason
    # (the changed dimension named, its sizes as old and new)
    assert rows == [
        ("x", "32", "16", "x dim 0: 32 -> 16; y dim 0: 32 -> 16"),
        ("x", "16", "8", "x dim 0: 16 -> 8; y dim 0: 16 -> 8"),
    ]
    assert said == [
        ("x dim 0: 32 -> 16; y dim 0: 32 -> 16",),
        ("x dim 0: 16 -> 8; y dim 0: 16 -> 8",),
    ]


def test_the_fused_step_records_as_train_when_labelled(labelled):
    steps = query_rows(labelled, "SELECT step, steps, failed, first_index, last_index FROM steps")
    # the compiles happen inside the step that needed them
    parents = query_rows(
        labelled,
        "SELECT count(*) FROM spans j JOIN spans s ON j.parent_id = s.span_id "
        "AND j.run_id = s.run_id WHERE j.span_kind = 'jit' "
        "AND j.start_attrs.fun_name = 'train_step' AND s.span_kind = 'step'",
    )
    assert steps == [("train", 5, 0, 0, 4)]
    assert parents == [(3,)]


def test_without_labels_the_top_level_jitted_calls_are_the_steps(tmp_path):
    db = _record(tmp_path)
    steps = query_rows(db, "SELECT step, steps, first_index, last_index FROM steps")
    # jax.random's own jitted helpers are JAX's, not the program's steps
    assert steps == [("train_step", 5, 0, 4)]
