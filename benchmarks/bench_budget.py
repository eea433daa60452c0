"""What ``ember.expect`` costs around a loop of a tiny jitted function (issue 27: <= 1.2x).

    .venv/bin/python benchmarks/bench_budget.py [--calls 2000] [--rounds 15]

A loop of ``--calls`` calls of a tiny ``jax.jit`` function (``x * 2 + 1`` on a 4x4 array,
each result waited for), timed bare and inside ``ember.expect(recompiles=0, warmup=1)``, in
alternating rounds (bare, expect, bare, ...) so that the machine's load falls on both alike.
Each round of ``expect`` includes entering and leaving it (attaching to the bus, starting
the JAX compile watcher, switching on JAX's cache-miss explanations, checking the budget).
Prints the median microseconds per call of each, their ratio, the median of the rounds'
ratios (each expect round against the bare round before it), and the load average
(``os.getloadavg``): on a shared machine compare the two rows of one run, not runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import jax
import jax.numpy as jnp
from results import write_result  # benchmarks/results.py: run from benchmarks/ or as a script

import ember


@jax.jit
def tiny(x: jax.Array) -> jax.Array:
    return x * 2 + 1


def _loop(x: jax.Array, calls: int) -> None:
    for _ in range(calls):
        x = tiny(x).block_until_ready()


def bare(x: jax.Array, calls: int) -> float:
    t0 = time.perf_counter_ns()
    _loop(x, calls)
    return (time.perf_counter_ns() - t0) / calls / 1e3


def with_expect(x: jax.Array, calls: int) -> float:
    t0 = time.perf_counter_ns()
    with ember.expect(recompiles=0, warmup=1):
        _loop(x, calls)
    return (time.perf_counter_ns() - t0) / calls / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    x = jnp.ones((4, 4), jnp.float32)
    _loop(x, 100)  # compiled and warm before either is timed
    with_expect(x, 100)
    times: dict[str, list[float]] = {"bare": [], "expect": []}
    for _ in range(args.rounds):
        times["bare"].append(bare(x, args.calls))
        times["expect"].append(with_expect(x, args.calls))
    load = os.getloadavg()
    b, e = statistics.median(times["bare"]), statistics.median(times["expect"])
    print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; {args.calls} calls a round")
    print(f"{'bare loop':<16} {b:8.2f} us/call")
    print(f"{'ember.expect':<16} {e:8.2f} us/call   {e / b:.3f}x the bare loop (goal <= 1.2x)")
    # each expect round against the bare round just before it: the load moves both alike
    ratios = [x / y for x, y in zip(times["expect"], times["bare"], strict=True)]
    print(f"median of the rounds' ratios {statistics.median(ratios):.3f}x")
    write_result(
        "budget",
        "a loop of tiny jitted calls inside ember.expect(recompiles=0, warmup=1)",
        "the same loop bare",
        statistics.median(ratios),
        {"bare_us_per_call": round(b, 3), "expect_us_per_call": round(e, 3), "calls": args.calls},
    )


if __name__ == "__main__":
    main()
