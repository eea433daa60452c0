"""Write real torch.compile TORCH_TRACE logs for Ember's importer tests (CPU, any torch 2.x).

Run: ``TORCH_TRACE=/tmp/tt python tests/data/torch/make_logs.py SCENARIO`` for each scenario
(one process, one log each), or ``python make_logs.py all OUTDIR`` to run them all, each in
its own process with its own TORCH_TRACE folder ``OUTDIR/SCENARIO``.

Scenarios:
  recompile  shapes 8, 16, 32, 64: a recompile (x dim 0: 8 -> 16), then automatic dynamic
  break      a data-dependent ``if x.sum() > 0``: a graph break and resume frames
  limit      a Python int argument changing each call: the recompile limit, then eager
  train      a linear model, loss.backward() and an SGD step under torch.compile
  cached     ``recompile`` again in a second process: the FX graph cache on disk hits
  ranks      two ranks (torch.distributed, gloo on 127.0.0.1), one log each, an all_reduce
"""

from __future__ import annotations

import os
import subprocess
import sys


def recompile() -> None:
    import torch

    @torch.compile
    def scale(x):
        return torch.sin(x) * 2 + 1

    for n in (8, 16, 32, 64):
        scale(torch.ones(n))


def graph_break() -> None:
    import torch

    @torch.compile
    def f(x):
        y = x * 2
        if y.sum() > 0:
            return torch.cos(y)
        return torch.sin(y)

    f(torch.ones(4))
    f(-torch.ones(4))


def limit() -> None:
    import torch

    torch._dynamo.config.recompile_limit = 2

    @torch.compile(dynamic=False)
    def g(x, k):
        return x * k

    for k in range(5):
        g(torch.ones(3), k)


def train() -> None:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    @torch.compile
    def loss_fn(x, y):
        return torch.nn.functional.mse_loss(model(x), y)

    for _ in range(2):
        opt.zero_grad()
        loss = loss_fn(torch.randn(8, 4), torch.randn(8, 2))
        loss.backward()
        opt.step()


def _rank(rank: int, port: int) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)

    @torch.compile
    def step(x):
        return torch.relu(x) + rank

    x = step(torch.ones(4 + rank))
    dist.all_reduce(x[:4])
    dist.destroy_process_group()


def ranks() -> None:
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_rank, args=(port,), nprocs=2)


SCENARIOS = {
    "recompile": recompile,
    "break": graph_break,
    "limit": limit,
    "train": train,
    "cached": recompile,
    "ranks": ranks,
}


KEEP = (
    "compilation_metrics",
    "recompile_reasons",
    "dynamo_graph_break_reason",
    "torch_version",
    "fx_graph_cache_",  # hit, miss, bypass (the checked-in trimmed logs kept only the hits)
    "aotautograd_cache_",
)


def trim(src: str, dst: str, limit: int = 2000) -> None:
    """Copy a log without its entries whose payload is over ``limit`` characters (generated
    code, graphs), keeping what the importer reads. Whole entries go, so every md5 left
    still matches its payload."""
    entries: list[list[str]] = []
    with open(src, encoding="utf-8") as f:
        for line in f:
            if line.startswith("\t") and entries:
                entries[-1].append(line)
            else:
                entries.append([line])
    with open(dst, "w", encoding="utf-8") as out:
        for entry in entries:
            size = sum(len(x) for x in entry[1:])
            if size <= limit or any(k in entry[0] for k in KEEP):
                out.writelines(entry)


def main() -> None:
    if sys.argv[1] == "trim":
        trim(sys.argv[2], sys.argv[3])
        return
    if sys.argv[1] == "all":
        out = sys.argv[2]
        for name in SCENARIOS:
            env = {**os.environ, "TORCH_TRACE": os.path.join(out, name)}
            subprocess.run([sys.executable, __file__, name], env=env, check=True)
        return
    SCENARIOS[sys.argv[1]]()


if __name__ == "__main__":
    main()
