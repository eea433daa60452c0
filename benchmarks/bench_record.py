"""Overhead of ``ember record`` on an unmodified training loop (issue 31: target <= 1.05x).

The same small training script (an MLP, optax Adam, one jitted fused step, the batch size
changing once so that there is a retrace to record) runs as ``python loop.py`` and as
``python -m ember.record loop.py`` (what ``ember record -- python loop.py`` runs), alternated,
``REPEATS`` times each. The script times its own steady state: the steps after the warm-up,
ended by ``block_until_ready`` on the parameters, so interpreter start and imports are not in
the steps/s. Printed: the median steps/s of each and their ratio (plain / recorded), and the
median wall time of the whole process.

On a loaded shared machine two processes differ by more than the effect, so a second
measurement alternates in one process: rounds of ``STEPS`` steady-state steps of the same
jitted step, bare, and recorded as ``ember record`` records it (a ``ProfileSession`` with
JAX's cache-miss explanations on, the memory sampler every 0.1 s, and each call a ``step``
span through ``JitStep``, the automatic steps' wrapper), the recording opened and closed
around each recorded round. Printed: the median steps/s of each, the ratio, each pair's.

Run: ``.venv/bin/python benchmarks/bench_record.py [REPEATS] [ROUNDS]`` (``REPEATS 0``: the
in-process rounds only); quote it with ``uptime``. The result (``results/record.json``) is the
end-to-end ratio, recorded process wall over plain, with the per-step ratios beside it.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from results import write_result  # benchmarks/results.py: run from benchmarks/ or as a script

LOOP = textwrap.dedent(
    """
    import time
    import jax
    import jax.numpy as jnp
    import optax

    STEPS = 400
    key = jax.random.PRNGKey(0)
    k1, k2 = jax.random.split(key)
    params = {"w1": jax.random.normal(k1, (64, 256)) * 0.05, "b1": jnp.zeros(256),
              "w2": jax.random.normal(k2, (256, 10)) * 0.05, "b2": jnp.zeros(10)}
    opt = optax.adam(1e-3)
    opt_state = opt.init(params)

    def loss_fn(p, x, y):
        h = jax.nn.relu(x @ p["w1"] + p["b1"])
        logits = h @ p["w2"] + p["b2"]
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    @jax.jit
    def train_step(p, s, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        updates, s = opt.update(g, s, p)
        return optax.apply_updates(p, updates), s, loss

    def batch(i, n):
        kx, ky = jax.random.split(jax.random.PRNGKey(i))
        return jax.random.normal(kx, (n, 64)), jax.random.randint(ky, (n,), 0, 10)

    for n in (128, 64):  # warm-up: compile both batch sizes (one retrace)
        params, opt_state, loss = train_step(params, opt_state, *batch(0, n))
    data = [batch(i, 128) for i in range(8)]
    jax.block_until_ready((params, data))
    t0 = time.perf_counter()
    for i in range(STEPS):
        params, opt_state, loss = train_step(params, opt_state, *data[i % 8])
    jax.block_until_ready(params)
    print(f"STEPS_PER_S {STEPS / (time.perf_counter() - t0):.1f}")
    """
)


def run_once(cmd: list[str], cwd: Path) -> tuple[float, float]:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=True).stdout
    wall = time.perf_counter() - t0
    (line,) = [x for x in out.splitlines() if x.startswith("STEPS_PER_S")]
    return float(line.split()[1]), wall


def in_process(rounds: int, steps: int = 500) -> dict[str, float]:
    """Bare and recorded rounds of the same jitted step, alternated in this process."""
    import jax

    from ember.recorder.jax import ProfileSession
    from ember.recorder.jax_steps import JitStep
    from ember.runtime.memory import MemorySampler

    namespace: dict[str, object] = {}
    head = LOOP.split("for n in (128, 64)")[0]  # the model, the optimiser, train_step
    exec(compile(head, "loop.py", "exec"), namespace)
    train_step, batch = namespace["train_step"], namespace["batch"]
    state = [namespace["params"], namespace["opt_state"]]
    data = [batch(i, 128) for i in range(8)]  # type: ignore[operator]

    def run(step: object) -> float:
        jax.block_until_ready(state)
        t0 = time.perf_counter()
        for i in range(steps):
            state[0], state[1], _ = step(state[0], state[1], *data[i % 8])  # type: ignore[operator]
        jax.block_until_ready(state)
        return steps / (time.perf_counter() - t0)

    run(train_step)  # compile
    bare, recorded = [], []
    with tempfile.TemporaryDirectory(prefix="ember-bench-record-") as tmp:
        for r in range(rounds):
            bare.append(run(train_step))
            with ProfileSession(Path(tmp) / f"r{r}.jsonl", sync=False), MemorySampler(0.1):
                recorded.append(run(JitStep(train_step, "train_step", sync=False)))
    b, rec = statistics.median(bare), statistics.median(recorded)
    pairs = sorted(x / y for x, y in zip(bare, recorded, strict=True))
    print(f"in one process, {rounds} alternating rounds of {steps} steps each, medians")
    print(f"  bare      {b:8.1f} steps/s")
    print(f"  recorded  {rec:8.1f} steps/s")
    print(f"  overhead  {b / rec:.3f}x steps/s (target <= 1.05x)")
    shown = ", ".join(f"{x:.2f}" for x in pairs)
    print(f"  per pair  {shown} (median {statistics.median(pairs):.3f}x)")
    return {
        "in_process_bare_steps_per_s": round(b, 1),
        "in_process_recorded_steps_per_s": round(rec, 1),
        "in_process_step_ratio": round(b / rec, 4),
    }


def main(repeats: int = 5) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="ember-bench-record-") as tmp:
        cwd = Path(tmp)
        (cwd / "loop.py").write_text(LOOP)
        plain_cmd = [sys.executable, "loop.py"]
        rec_cmd = [sys.executable, "-m", "ember.record", "--out", str(cwd / "out"), "loop.py"]
        plain, recorded = [], []
        for _ in range(repeats):  # alternated, so load drifts hit both alike
            plain.append(run_once(plain_cmd, cwd))
            recorded.append(run_once(rec_cmd, cwd))
        p = statistics.median(s for s, _ in plain)
        r = statistics.median(s for s, _ in recorded)
        pw = statistics.median(w for _, w in plain)
        rw = statistics.median(w for _, w in recorded)
        traces = list((cwd / "out").glob("*.jsonl"))
        pairs = sorted(a[0] / b[0] for a, b in zip(plain, recorded, strict=True))
    print(f"unmodified loop, {repeats} runs each, medians")
    print(f"  plain     {p:8.1f} steps/s   process {pw:5.1f} s")
    print(f"  recorded  {r:8.1f} steps/s   process {rw:5.1f} s   ({len(traces)} traces)")
    print(f"  overhead  {p / r:.3f}x steps/s (target <= 1.05x), {rw / pw:.2f}x process wall")
    shown = ", ".join(f"{x:.2f}" for x in pairs)
    print(f"  per pair  {shown} (median {statistics.median(pairs):.3f}x)")
    return {
        "plain_steps_per_s": round(p, 1),
        "recorded_steps_per_s": round(r, 1),
        "step_ratio": round(p / r, 4),
        "plain_process_s": round(pw, 3),
        "recorded_process_s": round(rw, 3),
        "runs_each": repeats,
    }


if __name__ == "__main__":
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    numbers: dict[str, Any] = main(repeats) if repeats else {}
    numbers |= in_process(int(sys.argv[2]) if len(sys.argv) > 2 else 10)
    if repeats:
        write_result(
            "record",
            "an unmodified jitted training loop run under `ember record --`: the whole process "
            "(start to exit) and its steady-state steps",
            "the same loop run bare (`python loop.py`)",
            numbers["recorded_process_s"] / numbers["plain_process_s"],
            numbers,
        )
