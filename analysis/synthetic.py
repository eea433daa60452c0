"""Realistic synthetic traces, fast: for benchmarks and scale tests (not for view values).

A run calls a model with a graph break many times with drifting sequence lengths: each
call is a ``call`` span with two segment lookups (hits mostly, misses with a
``segment_compile`` span and an eviction when the length is new), a ``break`` span,
tensor ``memory`` alloc/free pairs and a ``device_memory`` reading. Lines are built from
string templates (not ``json.dumps`` of dicts) so millions of records take seconds.
Every line is a valid record (a test checks a sample with pydantic).
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ember.schemas import SCHEMA_ID

__all__ = ["write_compile_trace", "write_history", "write_memory_trace", "write_trace"]

HOUR_NS = 3_600_000_000_000
_WALL_NS = 1_764_403_200_000_000_000  # 2025-11-29 08:00 UTC
_BERT_TAGS = '{"model":"bert-tiny"}'

_META = (
    '{{"kind":"meta","schema":"{schema}","run_id":"{run}","wall_time_ns":{wall},"host":"bench",'
    '"pid":4242,"versions":{{"python":"3.11.9","jax":"0.10.2"}},"backend":"cpu",'
    '"devices":["TFRT_CPU_0"],"entrypoint":"bench_ingest","phase":"infer",'
    '"tags":{tags}}}\n'
)
_SRC = "hf://acme/bert-tiny/onnx/model.onnx"
_SHAPES = '[{{"name":"input_ids","shape":[1,{n}],"dtype":"int64"}}]'
_CALL_START = (
    '{{"kind":"span_start","ts_ns":{t},"span_id":{sid},"parent_id":null,"name":"ember.call",'
    '"span_kind":"call","attrs":{{"source":"' + _SRC + '","shapes":' + _SHAPES + "}}}}\n"
)
_CALL_END = (
    '{{"kind":"span_end","ts_ns":{t},"span_id":{sid},"duration_ns":{d},"status":"ok",'
    '"span_kind":"call","attrs":{{"source":"' + _SRC + '","shapes":' + _SHAPES + "}}}}\n"
)
_CACHE = (
    '{{"kind":"cache","ts_ns":{t},"action":"{a}","span_id":{sid},"source":"' + _SRC + '",'
    '"position":{p},"shapes":' + _SHAPES + ',"key":"{p}:{n}","statics":[]{extra}}}\n'
)
_SEG_START = (
    '{{"kind":"span_start","ts_ns":{t},"span_id":{sid},"parent_id":{parent},'
    '"name":"ember.segment.compile","span_kind":"segment_compile","attrs":{{"source":"'
    + _SRC
    + '","position":{p},"shapes":'
    + _SHAPES
    + ',"key":"{p}:{n}"}}}}\n'
)
_SEG_END = (
    '{{"kind":"span_end","ts_ns":{t},"span_id":{sid},"duration_ns":{d},"status":"ok",'
    '"span_kind":"segment_compile","attrs":{{"source":"' + _SRC + '","position":{p},'
    '"shapes":' + _SHAPES + ',"key":"{p}:{n}","stop":{stop},"compiled":true,'
    '"disk_cache":null,"reason":"the shape of a Reshape","host_values":[],'
    '"memory":{{"argument_bytes":{ab},"output_bytes":{ab},"temp_bytes":4096}}}}}}\n'
)
_BREAK_START = (
    '{{"kind":"span_start","ts_ns":{t},"span_id":{sid},"parent_id":{parent},'
    '"name":"ember.break","span_kind":"break","attrs":{{"source":"' + _SRC + '",'
    '"position":12,"node":"nonzero_0","op_type":"NonZero"}}}}\n'
)
_BREAK_END = (
    '{{"kind":"span_end","ts_ns":{t},"span_id":{sid},"duration_ns":{d},"status":"ok",'
    '"span_kind":"break","attrs":{{"source":"' + _SRC + '","position":12,"node":"nonzero_0",'
    '"op_type":"NonZero"}}}}\n'
)
_MEMORY = (
    '{{"kind":"memory","ts_ns":{t},"span_id":{sid},"tensor_id":"t{tid}","op_name":"MatMul",'
    '"device":"cpu:0","bytes":{b},"action":"{a}","shape":[1,{n},128],"dtype":"float32",'
    '"category":"activation"}}\n'
)
_DEVICE_MEMORY = (
    '{{"kind":"device_memory","ts_ns":{t},"span_id":null,"device":"cpu:0",'
    '"source":"live_arrays","used_bytes":{u},"rss_bytes":{r}}}\n'
)


def _meta(run_id: str, wall_ns: int = _WALL_NS, tags: str = _BERT_TAGS) -> str:
    """The meta line of a run (``tags`` as JSON text; default: a BERT model's)."""
    return _META.format(schema=SCHEMA_ID, run=run_id, wall=wall_ns, tags=tags)


def _write_calls(
    path: str | os.PathLike[str], meta: str, records: int, calls: Iterator[list[str]]
) -> int:
    """Write ``meta``, then the lines of one call after another until about ``records``
    lines (a call is never cut), buffered; returns the exact count."""
    out = [meta]
    written = 1
    with Path(path).open("w", encoding="utf-8") as f:
        while written < records:
            lines = next(calls)
            out.extend(lines)
            written += len(lines)
            if len(out) > 50_000:
                f.writelines(out)
                out.clear()
        f.writelines(out)
    return written


@dataclass
class _ServingRun:
    """The state of ``write_trace``'s run between calls: the clock, the last span and tensor
    ids, the bytes in use, and each position's LRU list of lengths."""

    rng: random.Random
    cache_size: int
    t: int = 1_000
    sid: int = 0
    tid: int = 0
    used: int = 0
    cached: dict[int, list[int]] = field(default_factory=lambda: {0: [], 13: []})

    def lookup(self, out: list[str], call: int, pos: int, n: int) -> None:
        """The cache lookup at ``pos``: a hit, or a miss (an evict when full) and a compile."""
        lru = self.cached[pos]
        if n in lru:
            lru.remove(n)
            lru.append(n)
            out.append(_CACHE.format(t=self.t, a="hit", sid=call, p=pos, n=n, extra=""))
            return
        out.append(_CACHE.format(t=self.t, a="miss", sid=call, p=pos, n=n, extra=""))
        if len(lru) >= self.cache_size:
            old = lru.pop(0)
            extra = f',"cache_size":{self.cache_size}'
            out.append(_CACHE.format(t=self.t, a="evict", sid=call, p=pos, n=old, extra=extra))
        lru.append(n)
        self.sid += 1
        d = self.rng.randrange(5_000_000, 40_000_000)
        out.append(_SEG_START.format(t=self.t, sid=self.sid, parent=call, p=pos, n=n))
        self.t += d
        stop = 12 if pos == 0 else '"end"'
        out.append(_SEG_END.format(t=self.t, sid=self.sid, d=d, p=pos, n=n, stop=stop, ab=n * 512))

    def call(self, n: int, call_ns: tuple[int, int]) -> list[str]:
        """One call at sequence length ``n``: lookups at both positions, the break between
        them, a tensor allocated and freed, and a device reading."""
        rng = self.rng
        out: list[str] = []
        self.sid += 1
        call = self.sid
        self.t += rng.randrange(2_000, 9_000)
        out.append(_CALL_START.format(t=self.t, sid=call, n=n))
        for pos in (0, 13):
            self.t += 500
            self.lookup(out, call, pos, n)
            if pos == 0:
                self.sid += 1
                d = rng.randrange(10_000, 50_000)
                out.append(_BREAK_START.format(t=self.t, sid=self.sid, parent=call))
                self.t += d
                out.append(_BREAK_END.format(t=self.t, sid=self.sid, d=d))
        for action in ("alloc", "free"):
            self.tid += action == "alloc"
            self.t += 300
            b = n * 512
            self.used += b if action == "alloc" else -b
            out.append(_MEMORY.format(t=self.t, sid=call, tid=self.tid, b=b, a=action, n=n))
        self.t += rng.randrange(10_000, 90_000)
        out.append(_CALL_END.format(t=self.t, sid=call, d=rng.randrange(*call_ns), n=n))
        used = self.used
        out.append(_DEVICE_MEMORY.format(t=self.t, u=used + 1_000_000, r=300_000_000 + used))
        return out


def write_trace(
    path: str | os.PathLike[str],
    records: int,
    *,
    run_id: str = "bench-run",
    seed: int = 0,
    cache_size: int = 4,
    lengths: int = 12,
    wall_ns: int = _WALL_NS,
    tags: dict[str, str] | None = None,
    call_ns: tuple[int, int] = (50_000, 900_000),
    rare: float = 0.1,
) -> int:
    """Write about ``records`` records (meta first) to ``path``; returns the exact count.

    ``wall_ns`` is the run's start (ns since the epoch), ``tags`` its tags (default
    ``model=bert-tiny``), ``call_ns`` the range of a call's duration (uniform), ``rare``
    the share of calls with a length other than the two common ones."""
    rng = random.Random(seed)
    popular = [8 * rng.randrange(1, lengths + 1) for _ in range(2)]
    tag_text = json.dumps(
        tags if tags is not None else {"model": "bert-tiny"}, separators=(",", ":")
    )
    meta = _meta(run_id, wall_ns, tag_text)
    run = _ServingRun(rng, cache_size)

    def calls() -> Iterator[list[str]]:
        while True:
            # most calls use a few common lengths; some use rarer ones, which thrash a
            # cache of ``cache_size`` now and then (as prompts of a service do)
            n = rng.choice(popular) if rng.random() >= rare else 8 * rng.randrange(1, lengths + 1)
            yield run.call(n, call_ns)

    return _write_calls(path, meta, records, calls())


# ---------------------------------------------------------------- compile-heavy

# The records of a recorded sweep of sequence lengths through ``token_filter_model`` (a
# NonZero break at position 26) with a segment cache of 2: each call misses, compiles and
# evicts at both positions. The lines are those the recorder writes (their keys in its order).
_C_SHAPES0 = '[{{"name":"input_ids","shape":[1,{n}],"dtype":"int64"}}]'
_C_SHAPES1 = (
    '[{{"name":"kept_idx","shape":[1,{k}],"dtype":"int64"}},'
    '{{"name":"tokens","shape":[{n},16],"dtype":"float32"}}]'
)
_C_CALL_START = (
    '{{"kind":"span_start","ts_ns":{t},"span_id":{sid},"parent_id":null,"name":"ember.call",'
    '"span_kind":"call","attrs":{{"source":"' + _SRC + '","shapes":' + _C_SHAPES0 + "}}}}\n"
)
_C_CALL_END = (
    '{{"kind":"span_end","ts_ns":{t},"span_id":{sid},"duration_ns":{d},"status":"ok",'
    '"span_kind":"call","attrs":{{"source":"' + _SRC + '","shapes":' + _C_SHAPES0 + ","
    '"dispatch_ns":{dd}}}}}\n'
)
_C_CACHE = (
    '{{"kind":"cache","ts_ns":{t},"action":"{a}","source":"' + _SRC + '","position":{p},'
    '"shapes":{shapes},"key":"{key}","statics":[]{extra},"span_id":{call}}}\n'
)
_C_COMPILE_START = (
    '{{"kind":"span_start","ts_ns":{t},"span_id":{sid},"parent_id":{call},'
    '"name":"ember.segment.compile","span_kind":"segment_compile","attrs":{{"source":"'
    + _SRC
    + '","position":{p},"shapes":{shapes},"key":"{key}"}}}}\n'
)
_C_COMPILE_END = (
    '{{"kind":"span_end","ts_ns":{t},"span_id":{sid},"duration_ns":{d},"status":"ok",'
    '"span_kind":"segment_compile","attrs":{{"source":"' + _SRC + '","position":{p},'
    '"shapes":{shapes},"key":"{key}","stop":{stop},"compiled":true,"disk_cache":null,'
    '"reason":{reason},"host_values":[],"memory":{{"argument_bytes":{ab},"output_bytes":{ob},'
    '"temp_bytes":{tb},"alias_bytes":0,"generated_code_bytes":0}},'
    '"cost":{{"flops":{flops}.0,"bytes_accessed":{bytes}.0}}}}}}\n'
)
_C_SEGMENT = (
    '{{"kind":"{rk}","ts_ns":{t},"span_id":{sid},{mid}"span_kind":"segment","attrs":{{'
    '"source":"' + _SRC + '","position":{p},"stop":{stop},"compiled":true,"key":"{key}"}}}}\n'
)
_C_BREAK_START = (
    '{{"kind":"span_start","ts_ns":{t},"span_id":{sid},"parent_id":{call},"name":"ember.break",'
    '"span_kind":"break","attrs":{{"source":"' + _SRC + '","position":26,'
    '"node":"kept_positions","op_type":"NonZero"}}}}\n'
)
_C_BREAK_END = (
    '{{"kind":"span_end","ts_ns":{t},"span_id":{sid},"duration_ns":{d},"status":"ok",'
    '"span_kind":"break","attrs":{{"source":"' + _SRC + '","position":26,'
    '"node":"kept_positions","op_type":"NonZero","host_transfer_ns":{h},"subgraph_ns":null}}}}\n'
)
_REASON = '"the values of NonZero\'s input (its output shape depends on them)"'


def _compile_sweep_call(
    out: list[str], rng: random.Random, t: int, sid: int, n: int, keys: dict[Any, str], lru: Any
) -> tuple[int, int]:
    """One call of the sweep at sequence length ``n``: its records appended to ``out``;
    returns the time and the last span id."""
    call = sid = sid + 1
    out.append(_C_CALL_START.format(t=t, sid=call, n=n))
    start = t
    for p, stop, shapes in ((0, "26", _C_SHAPES0), (27, '"end"', _C_SHAPES1)):
        k = rng.randrange(1, n + 1)
        sh = shapes.format(n=n, k=k)
        key = keys.setdefault((p, n, k), f"{rng.getrandbits(64):016x}")
        t += rng.randrange(20_000, 120_000)
        out.append(_C_CACHE.format(t=t, a="miss", p=p, shapes=sh, key=key, extra="", call=call))
        cached = lru[p]
        if len(cached) >= 2:
            old_sh, old_key = cached.pop(0)
            out.append(
                _C_CACHE.format(
                    t=t,
                    a="evict",
                    p=p,
                    shapes=old_sh,
                    key=old_key,
                    extra=',"cache_size":2',
                    call=call,
                )
            )
        cached.append((sh, key))
        sid += 1
        out.append(_C_COMPILE_START.format(t=t, sid=sid, call=call, p=p, shapes=sh, key=key))
        d = rng.randrange(300_000_000, 700_000_000)
        t += d
        ab = n * (8 if p == 0 else 72)
        out.append(
            _C_COMPILE_END.format(
                t=t,
                sid=sid,
                d=d,
                p=p,
                shapes=sh,
                key=key,
                stop=stop,
                reason=_REASON if p == 0 else "null",
                ab=ab,
                ob=ab * 8 if p == 0 else 64,
                tb=n * 64,
                flops=3722 * n,
                bytes=4861 * n,
            )
        )
        sid += 1
        seg = {"p": p, "stop": stop, "key": key}
        out.append(
            _C_SEGMENT.format(
                rk="span_start",
                t=t,
                sid=sid,
                mid=f'"parent_id":{call},"name":"ember.segment",',
                **seg,
            )
        )
        d = rng.randrange(2_000_000, 40_000_000)
        t += d
        out.append(
            _C_SEGMENT.format(
                rk="span_end", t=t, sid=sid, mid=f'"duration_ns":{d},"status":"ok",', **seg
            )
        )
        if p == 0:
            sid += 1
            out.append(_C_BREAK_START.format(t=t, sid=sid, call=call))
            d = rng.randrange(150_000, 300_000)
            t += d
            out.append(_C_BREAK_END.format(t=t, sid=sid, d=d, h=rng.randrange(40_000, 90_000)))
    t += rng.randrange(30_000, 90_000)
    out.append(_C_CALL_END.format(t=t, sid=call, d=t - start, dd=t - start - 20_000, n=n))
    return t + rng.randrange(100_000, 200_000), sid


def write_compile_trace(
    path: str | os.PathLike[str],
    records: int,
    *,
    run_id: str = "bench-compile",
    seed: int = 0,
    sizes: int = 512,
) -> int:
    """Write about ``records`` records of a compile-heavy run to ``path`` (see ``_C_*``):
    a sweep of ``sizes`` sequence lengths, each call compiling and evicting at both of its
    segments, repeated with later timestamps and fresh span ids. Returns the exact count."""
    rng = random.Random(seed)
    meta = _meta(run_id)

    def calls() -> Iterator[list[str]]:
        t, sid = 1_000, 0
        keys: dict[Any, str] = {}  # a sweep again compiles the same keys
        lru: dict[int, list[tuple[str, str]]] = {0: [], 27: []}
        while True:
            for n in range(4, 4 + sizes):
                out: list[str] = []
                t, sid = _compile_sweep_call(out, rng, t, sid, n, keys, lru)
                yield out

    return _write_calls(path, meta, records, calls())


# ---------------------------------------------------------------- memory-heavy

_M_OPS = ("MatMul", "Add", "Relu", "Softmax", "LayerNormalization", "Gather", "Reshape", "Mul")
_M_CATEGORIES = ("activation", "activation", "activation", "temporary", "output")


def write_memory_trace(
    path: str | os.PathLike[str],
    records: int,
    *,
    run_id: str = "bench-memory",
    seed: int = 0,
    per_call: int = 40,
) -> int:
    """Write about ``records`` records of a profiled run to ``path``: each call a ``call``
    span holding ``per_call`` tensors' ``memory`` alloc and free records (the profile mode's
    liveness: freed after the next op), one ``op`` record a tensor and a ``device_memory``
    reading. Returns the exact count."""
    rng = random.Random(seed)
    meta = _meta(run_id)
    state = {"t": 1_000, "sid": 0, "tid": 0, "used": 0}

    def calls() -> Iterator[list[str]]:
        while True:
            yield _profiled_call(rng, state, per_call)

    return _write_calls(path, meta, records, calls())


def _profiled_call(rng: random.Random, state: dict[str, int], per_call: int) -> list[str]:
    """One call of ``write_memory_trace``'s run; ``state`` holds the clock, the last span
    and tensor ids and the bytes in use between calls."""
    t, sid, tid, used = state["t"], state["sid"], state["tid"], state["used"]
    out: list[str] = []
    n = 8 * rng.randrange(1, 17)
    sid += 1
    call = sid
    t += rng.randrange(2_000, 9_000)
    out.append(_CALL_START.format(t=t, sid=call, n=n))
    live: list[tuple[int, int, str, str]] = []
    for i in range(per_call):
        op = _M_OPS[i % len(_M_OPS)]
        tid += 1
        b = n * 512 * (1 + i % 4)
        cat = _M_CATEGORIES[i % len(_M_CATEGORIES)]
        d = rng.randrange(1_000, 90_000)
        t += d
        out.append(_OP.format(t=t, sid=call, op=op, d=d, n=n, b=b))
        out.append(_M_MEMORY.format(t=t, sid=call, tid=tid, op=op, b=b, a="alloc", n=n, cat=cat))
        used += b
        live.append((tid, b, op, cat))
        if len(live) > 2:  # freed after the next op
            ftid, fb, fop, fcat = live.pop(0)
            t += 200
            out.append(
                _M_MEMORY.format(t=t, sid=call, tid=ftid, op=fop, b=fb, a="free", n=n, cat=fcat)
            )
            used -= fb
    for ftid, fb, fop, fcat in live:
        t += 200
        out.append(_M_MEMORY.format(t=t, sid=call, tid=ftid, op=fop, b=fb, a="free", n=n, cat=fcat))
        used -= fb
    t += rng.randrange(10_000, 90_000)
    out.append(_CALL_END.format(t=t, sid=call, d=rng.randrange(50_000, 900_000), n=n))
    out.append(_DEVICE_MEMORY.format(t=t, u=used + 1_000_000, r=300_000_000 + used))
    state.update(t=t, sid=sid, tid=tid, used=used)
    return out


_OP = (
    '{{"kind":"op","ts_ns":{t},"span_id":{sid},"op_name":"{op}","dtype":"float32",'
    '"device":"cpu:0","duration_ns":{d},"inputs":["x","w"],"output":"y","shape":[1,{n},128],'
    '"storage_bytes":{b}}}\n'
)
_M_MEMORY = (
    '{{"kind":"memory","ts_ns":{t},"span_id":{sid},"tensor_id":"t{tid}","op_name":"{op}",'
    '"device":"cpu:0","bytes":{b},"action":"{a}","shape":[1,{n},128],"dtype":"float32",'
    '"category":"{cat}"}}\n'
)


def write_history(
    folder: str | os.PathLike[str],
    runs: int,
    *,
    records: int = 120,
    recompile_step_at: int | None = None,
    latency_step_at: int | None = None,
    tags: dict[str, str] | None = None,
    run_prefix: str = "hist",
    seed: int = 0,
) -> list[Path]:
    """One trace per run in ``folder``, an hour apart: a CI history of one model whose
    levels shift at known runs (0-based indices), for the trends' tests and benchmark.

    Before ``recompile_step_at`` a run calls one sequence length (two compiles, no
    recompiles, no evictions); from it on, any of twelve lengths with room for two in the
    cache (a recompile and an eviction on most calls). From
    ``latency_step_at`` on, calls take twice as long. Otherwise the runs differ by noise
    only (each its own seed)."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(runs):
        thrash = recompile_step_at is not None and i >= recompile_step_at
        slow = latency_step_at is not None and i >= latency_step_at
        run_id = f"{i:08d}-{run_prefix}"  # its first 8 characters (a short id) tell runs apart
        write_trace(
            out / f"{run_id}.jsonl",
            records,
            run_id=run_id,
            seed=seed * 1_000_003 + i,
            cache_size=2 if thrash else 4,
            lengths=12 if thrash else 1,
            rare=1.0 if thrash else 0.0,
            wall_ns=_WALL_NS + i * HOUR_NS,
            tags=tags,
            call_ns=(100_000, 1_800_000) if slow else (50_000, 900_000),
        )
        paths.append(out / f"{run_id}.jsonl")
    return paths
