"""The batch-then-each-file driver shared by the DuckDB ingest and the lake ingest.

Many small files go in as one batch (one transaction, one commit); when a batch fails,
each of its files is tried alone, so that one file's failure is not its batch-mates'.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from ember.analysis.ingest.plan import FileResult

Plan = TypeVar("Plan")
Done = TypeVar("Done")


def batch_then_each(
    plans: list[Plan],
    attempt: Callable[[list[Plan]], Done],
    finish: Callable[[list[Plan], Done], list[FileResult]],
) -> list[FileResult]:
    """The results of ``plans``, in order: ``attempt`` on all of them, then ``finish`` on
    what it did. If ``attempt`` raises an ``Exception`` (not an interrupt), each plan is
    tried alone; a plan alone that fails raises. ``finish`` is not retried (what it does,
    a commit, is not undone by trying again). Each result's ``seconds`` is its share of
    its attempt and finish."""
    t0 = time.perf_counter()
    try:
        done = attempt(plans)
    except Exception:
        if len(plans) == 1:
            raise
        return [r for plan in plans for r in batch_then_each([plan], attempt, finish)]
    results = finish(plans, done)
    seconds = (time.perf_counter() - t0) / len(plans)
    for r in results:
        r.seconds = seconds
    return results
