"""A step is any label the program gives it: a fused JAX step records as ``train``, is a
valid trace, ingests, and shows in the ``steps`` view and the report's headline."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import pytest

from ember.analysis import connect
from ember.analysis.ingest.database import ingest
from ember.analysis.report import summaries
from ember.cli.analysis import _headline
from ember.recorder import record
from ember.recorder.jax import ProfileSession
from ember.schemas import validate_file


def _read(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _fused_training(path) -> None:
    @jax.jit
    def train_step(w, x):
        loss, grad = jax.value_and_grad(lambda w: ((x @ w) ** 2).mean())(w)
        return w - 0.1 * grad, loss

    w = jnp.ones((4,))
    with ProfileSession(path, phase="train") as session:
        for i in range(3):
            with session.step("train", i) as step:
                w, loss = train_step(w, jnp.ones((8, 4)))
                step.wait_for(w, loss)
        with session.step("eval", 0):
            train_step(w, jnp.ones((2, 4)))
        with session.step("forward", 1):  # candle-graph's names stay valid
            train_step(w, jnp.ones((2, 4)))


def test_a_fused_step_records_as_train_and_shows_in_views_and_report(tmp_path):
    path = tmp_path / "fused.jsonl"
    _fused_training(path)
    assert validate_file(path).ok
    steps = [r["attrs"]["step"] for r in _read(path) if r.get("span_kind") == "step"]
    assert steps == ["train"] * 6 + ["eval"] * 2 + ["forward"] * 2  # start and end each

    db = tmp_path / "t.duckdb"
    assert ingest([path], db).rejected == 0
    with connect(db, read_only=True) as con:
        rows = con.sql(
            "SELECT step, steps, failed, first_index, last_index FROM steps ORDER BY first_start_ns"
        ).rows()
        assert rows == [("train", 3, 0, 0, 2), ("eval", 1, 0, 0, 0), ("forward", 1, 0, 1, 1)]
        run_id = con.sql("SELECT run_id FROM runs").item()
        summary = summaries(con, [run_id])[run_id]
    assert summary.steps == 5
    assert summary.step_labels == [("train", 3), ("eval", 1), ("forward", 1)]
    assert _headline(summary).startswith("5 steps (train 3, eval 1, forward 1)")


def test_recorder_step_takes_any_label_and_refuses_an_empty_one(tmp_path):
    path = tmp_path / "plain.jsonl"
    with record(path) as rec:
        with rec.step("validate", 7):
            pass
        with pytest.raises(ValueError, match=r"Recorder\.step: step must be a non-empty label"):
            with rec.step("  "):
                pass
    assert validate_file(path).ok
    (start, end) = [r for r in _read(path) if r.get("span_kind") == "step"]
    assert (start["attrs"]["step"], start["attrs"]["index"]) == ("validate", 7)
    assert end["attrs"]["step"] == "validate"
