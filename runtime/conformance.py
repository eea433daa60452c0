"""The ONNX backend conformance suite against Ember: ``python -m ember.runtime.conformance``.

Runs the test cases that the installed ``onnx`` package ships: the node cases it builds in
memory (``onnx.backend.test.case.node``) and the model cases of ``simple``,
``pytorch-converted`` and ``pytorch-operator`` from its data folder. Each case goes through
``EmberBackend`` (compiled by default; ``--mode eager`` interprets on JAX, ``--mode numpy`` on
numpy, as short segments and subgraphs run on the CPU) and is compared the
way ONNX's own runner compares (``Runner.assert_similar_outputs``).

Prints ``N passed, M failed`` per kind and the failures grouped by op, and writes nothing
else. Exits 1 when the node cases that pass fall below the floor kept in
``conformance_floor.txt`` next to this module (``--floor`` overrides), so CI keeps the count
from falling. The file is package data, found through ``importlib.resources``: the same in a
source checkout and in an installed package.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import glob
import importlib.resources
import multiprocessing
import os
import signal
import sys
import time
import warnings
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

KINDS = ("node", "simple", "pytorch-converted", "pytorch-operator")
FLOOR_RESOURCE = "conformance_floor.txt"


@dataclass
class Result:
    kind: str
    name: str
    ok: bool
    group: str
    message: str
    seconds: float
    # Elements left out of the comparison because the spec leaves their value undefined.
    undefined: int = 0


class _Timeout(Exception):
    pass


def _on_alarm(signum: int, frame: Any) -> None:
    raise _Timeout()


def _data_dir() -> str:
    import onnx

    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")


def _load_cases(kinds: tuple[str, ...]) -> list[tuple[str, Any]]:
    """``(kind, TestCase)`` pairs, in a stable order."""
    out: list[tuple[str, Any]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import numpy as np

        with np.errstate(all="ignore"):
            if "node" in kinds:
                from onnx.backend.test.case import node

                for case in sorted(node.collect_testcases(None), key=lambda c: c.name):
                    out.append(("node", case))
            from onnx.backend.test.loader import load_model_tests

            for kind in kinds:
                if kind == "node":
                    continue
                for case in sorted(load_model_tests(kind=kind), key=lambda c: c.name):
                    out.append((kind, case))
    return out


def _read_proto(path: str, type_proto: Any) -> Any:
    import onnx
    from onnx import numpy_helper

    with open(path, "rb") as f:
        data = f.read()
    if type_proto.HasField("sequence_type"):
        seq = onnx.SequenceProto()
        seq.ParseFromString(data)
        return numpy_helper.to_list(seq)
    if type_proto.HasField("optional_type"):
        opt = onnx.OptionalProto()
        opt.ParseFromString(data)
        return numpy_helper.to_optional(opt)
    t = onnx.TensorProto()
    t.ParseFromString(data)
    return numpy_helper.to_array(t)


def _model_and_data(case: Any) -> tuple[Any, list[tuple[list[Any], list[Any]]]]:
    import onnx
    from onnx.backend.test.runner import _normalize_tensor

    if case.model is not None:
        sets = [
            ([_normalize_tensor(x) for x in ins], [_normalize_tensor(x) for x in outs])
            for ins, outs in case.data_sets
        ]
        return case.model, sets
    model = onnx.load(os.path.join(case.model_dir, "model.onnx"))
    inits = {i.name for i in model.graph.initializer}
    graph_inputs = [i for i in model.graph.input if i.name not in inits]
    sets = []
    for d in sorted(glob.glob(os.path.join(case.model_dir, "test_data_set*"))):
        n_in = len(glob.glob(os.path.join(d, "input_*.pb")))
        n_out = len(glob.glob(os.path.join(d, "output_*.pb")))
        ins = [
            _read_proto(os.path.join(d, f"input_{i}.pb"), graph_inputs[i].type) for i in range(n_in)
        ]
        outs = [
            _read_proto(os.path.join(d, f"output_{i}.pb"), model.graph.output[i].type)
            for i in range(n_out)
        ]
        sets.append((ins, outs))
    return model, sets


def _group(kind: str, name: str, model: Any) -> str:
    if model is None:
        return "?"
    ops = [n.op_type for n in model.graph.node]
    if not ops:
        return "(no nodes)"
    base = name[len("test_") :].lower().replace("_", "")
    for op_type in sorted(set(ops), key=len, reverse=True):
        if base.startswith(op_type.lower()):
            return op_type
    return ops[0] if len(set(ops)) == 1 or kind == "node" else f"{kind} model"


def _compare(
    runner: Any, expected: list[Any], outputs: list[Any], rtol: float, atol: float
) -> None:
    # Runner.assert_similar_outputs recurses into sequences with bare arrays, which it
    # cannot take; compare sequence elements one by one instead.
    if len(expected) != len(outputs):
        raise AssertionError(f"{len(outputs)} outputs, expected {len(expected)}")
    for ref, out in zip(expected, outputs, strict=True):
        if isinstance(ref, list):
            if not isinstance(out, list) or len(out) != len(ref):
                raise AssertionError(f"expected a sequence of {len(ref)}, got {type(out)}")
            for r, o in zip(ref, out, strict=True):
                runner.assert_similar_outputs([r], [o], rtol=rtol, atol=atol)
        else:
            runner.assert_similar_outputs([ref], [out], rtol=rtol, atol=atol)


def _fixed_point_range(dtype: Any) -> tuple[int, int] | None:
    import ml_dtypes
    import numpy as np

    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return int(info.min), int(info.max)
    if dtype.name in ("int4", "uint4", "int2", "uint2"):
        sub = ml_dtypes.iinfo(dtype)
        return int(sub.min), int(sub.max)
    return None


def _defined_only(
    model: Any, inputs: list[Any], expected: list[Any], outputs: list[Any]
) -> tuple[list[Any], int]:
    """``expected`` with the elements the ONNX spec leaves undefined replaced by Ember's.

    A Cast (or CastLike) from floating point to fixed point is undefined where the value is
    out of the target's range (the spec's Cast rules); onnx's expected outputs there are
    whatever the installed ml_dtypes or numpy did (ml_dtypes 0.6 wrapped int4, 0.7 gives 0).
    Such elements are not compared; the count comes back so that the report can say so.
    Every other case, and every defined element, is compared as given.
    """
    import numpy as np

    nodes = list(model.graph.node)
    if len(nodes) != 1 or nodes[0].op_type not in ("Cast", "CastLike") or not inputs:
        return expected, 0
    source = np.asarray(inputs[0])
    if source.dtype.kind != "f" and "float" not in source.dtype.name:
        return expected, 0
    if not expected or not isinstance(expected[0], np.ndarray) or not outputs:
        return expected, 0
    bounds = _fixed_point_range(expected[0].dtype)
    if bounds is None or np.shape(outputs[0]) != expected[0].shape:
        return expected, 0
    whole = np.trunc(source.astype(np.float64))
    undefined = ~np.isfinite(whole) | (whole < bounds[0]) | (whole > bounds[1])
    if not undefined.any():
        return expected, 0
    mine = np.asarray(outputs[0]).astype(expected[0].dtype)
    return [np.where(undefined, mine, expected[0]), *expected[1:]], int(undefined.sum())


def run_case(kind: str, case: Any, mode: str, timeout_s: int) -> Result:
    import numpy as np
    from onnx.backend.test.runner import Runner

    from .backend import EmberBackend
    from .errors import UnsupportedOpsError
    from .ops import RANDOM_OPS

    start = time.perf_counter()
    model = None
    undefined = 0
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(timeout_s)
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            model, data_sets = _model_and_data(case)
            rep = EmberBackend.prepare(model, "CPU", mode=mode)
            for inputs, expected in data_sets:
                outputs = list(rep.run(inputs))
                expected, skipped = _defined_only(model, inputs, expected, outputs)
                undefined += skipped
                _compare(Runner, expected, outputs, case.rtol, case.atol)
        ok, message = True, ""
    except _Timeout:
        ok, message = False, f"timed out after {timeout_s}s"
    except UnsupportedOpsError as exc:
        ok = False
        missing = sorted({op for (_, op, _) in exc.ops})
        message = "unsupported: " + ", ".join(missing)
    except BaseException as exc:  # a failing case must never stop the suite
        if isinstance(exc, KeyboardInterrupt):
            raise
        ok = False
        text = str(exc).strip().splitlines()
        message = f"{type(exc).__name__}: {text[0] if text else ''}"[:200]
    finally:
        signal.alarm(0)
    if not ok and model is not None and message.startswith("AssertionError"):
        # a case whose graph draws random numbers (Bernoulli, or its expansion into
        # RandomUniformLike) expects the draws of onnx's numpy reference, which no other
        # generator reproduces, even with a seed: such failures stay counted but say so
        random_ops = sorted({n.op_type for n in model.graph.node} & RANDOM_OPS)
        if random_ops:
            message = (
                f"expected outputs are random draws of {', '.join(random_ops)} (onnx's numpy "
                f"generator), which JAX's cannot reproduce: {message}"
            )[:200]
    group = _group(kind, case.name, model)
    return Result(kind, case.name, ok, group, message, time.perf_counter() - start, undefined)


def _worker(index: int, jobs: int, kinds: tuple[str, ...], mode: str, timeout_s: int) -> list:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    cases = _load_cases(kinds)
    return [
        run_case(kind, case, mode, timeout_s)
        for i, (kind, case) in enumerate(cases)
        if i % jobs == index
    ]


def run_suite(
    kinds: tuple[str, ...] = KINDS, *, mode: str = "compile", jobs: int = 1, timeout_s: int = 60
) -> list[Result]:
    """Run the cases of ``kinds``; ``jobs`` worker processes share them."""
    if jobs <= 1:
        return _worker(0, 1, kinds, mode, timeout_s)
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
        futures = [pool.submit(_worker, i, jobs, kinds, mode, timeout_s) for i in range(jobs)]
        results: list[Result] = []
        for f in futures:
            results.extend(f.result())
    return sorted(results, key=lambda r: (KINDS.index(r.kind), r.name))


def floor_file() -> Traversable:
    """The floor file shipped with ``ember.runtime`` (package data, wherever it is installed)."""
    return importlib.resources.files("ember.runtime").joinpath(FLOOR_RESOURCE)


def read_floor(path: Path | Traversable | None = None) -> int | None:
    """The integer floor of node passes (from ``floor_file()`` unless ``path`` is given), or
    None when the file does not exist."""
    path = floor_file() if path is None else path
    if not path.is_file():
        return None
    return int(path.read_text().split()[0])


def report(results: list[Result], out: Any = None) -> dict[str, tuple[int, int]]:
    """Print the counts and the failures grouped by op; returns {kind: (passed, failed)}."""
    out = out if out is not None else sys.stdout
    counts: dict[str, tuple[int, int]] = {}
    for kind in KINDS:
        rs = [r for r in results if r.kind == kind]
        if not rs:
            continue
        passed = sum(r.ok for r in rs)
        counts[kind] = (passed, len(rs) - passed)
    failures: dict[str, list[Result]] = collections.defaultdict(list)
    for r in results:
        if not r.ok:
            failures[r.group].append(r)
    if failures:
        print("Failures by op:", file=out)
        for group in sorted(failures, key=lambda g: (-len(failures[g]), g)):
            rs = failures[group]
            names = ", ".join(r.name for r in rs[:6]) + (" ..." if len(rs) > 6 else "")
            print(f"  {group} ({len(rs)}): {names}", file=out)
            print(f"      {rs[0].message}", file=out)
    undefined = [r for r in results if r.ok and r.undefined]
    if undefined:
        names = ", ".join(r.name for r in undefined[:4]) + (" ..." if len(undefined) > 4 else "")
        print(
            f"Compared on the elements the spec defines ({len(undefined)} cases, "
            f"{sum(r.undefined for r in undefined)} elements left out: a float cast to fixed "
            f"point out of its range is undefined): {names}",
            file=out,
        )
    for kind, (p, f) in counts.items():
        print(f"{kind}: {p} passed, {f} failed", file=out)
    total_p = sum(p for p, _ in counts.values())
    total_f = sum(f for _, f in counts.values())
    print(f"{total_p} passed, {total_f} failed", file=out)
    return counts


def main(argv: list[str] | None = None) -> int:
    from .backend import MODES

    parser = argparse.ArgumentParser(
        prog="python -m ember.runtime.conformance", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated case kinds")
    parser.add_argument("--mode", choices=MODES, default="compile")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--timeout", type=int, default=60, help="seconds per case")
    parser.add_argument("--floor", type=int, default=None, help="minimum node passes")
    parser.add_argument("-k", default=None, help="only cases whose name contains this")
    args = parser.parse_args(argv)
    kinds = tuple(k for k in args.kinds.split(",") if k)
    started = time.perf_counter()
    if args.k:
        results = [
            run_case(kind, case, args.mode, args.timeout)
            for kind, case in _load_cases(kinds)
            if args.k in case.name
        ]
    else:
        results = run_suite(kinds, mode=args.mode, jobs=args.jobs, timeout_s=args.timeout)
    counts = report(results)
    print(f"({time.perf_counter() - started:.0f}s, mode={args.mode}, jobs={args.jobs})")
    floor = args.floor if args.floor is not None else read_floor()
    node_passed = counts.get("node", (0, 0))[0]
    if floor is not None and "node" in kinds and not args.k and node_passed < floor:
        print(f"FAIL: {node_passed} node cases passed, below the floor of {floor}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
