"""The direct call (``ember.runtime.jit.fastpath``) against what the checked call does: every input
checked the same way on both, events exactly while someone listens, several threads at once.

Models are built with onnx.helper; the If model is ``vad_like_model`` of test_control_flow
(the network inside an If on ``sr == 16000``, the sample rate read only by the prelude).
"""

from __future__ import annotations

import threading
import time
import weakref

import jax
import numpy as np
import pytest
from onnx import TensorProto, helper

import ember.runtime as rt
from ember.recorder import bus
from tests.runtime.conftest import no_cycle_collector
from tests.runtime.models import make_model, one_relu, reference, tensor
from tests.runtime.test_control_flow import CHUNK, HIDDEN, vad_like_model


def _with_unused_input(rows: object) -> rt.CompiledModel:
    """y = Relu(x); the model also declares ``unused``: float32[2], which no node reads."""
    proto = make_model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [tensor("x", shape=[rows]), tensor("unused", shape=[2])],
        [tensor("y", shape=[rows])],
    )
    return rt.compile(proto)


@pytest.mark.parametrize("rows", [3, "n"], ids=["compiled-ahead", "registered-per-call"])
def test_an_input_no_program_reads_is_checked_like_the_others(rows):
    compiled = _with_unused_input(rows)
    x = np.array([-1.0, 0.5, 2.0], np.float32)
    unused = np.ones(2, np.float32)
    for _ in range(3):  # the checked call, then the direct one
        out = compiled(x=x, unused=unused)
        np.testing.assert_array_equal(np.asarray(out["y"]), np.maximum(x, 0))
    # what the checked call refuses, the direct call refuses too
    with pytest.raises(rt.InputError, match="input 'unused' has dtype float64, expected float32"):
        compiled(x=x, unused=unused.astype(np.float64))
    with pytest.raises(
        rt.InputError, match="input 'unused' has shape \\[7\\], but dim 0 must be 2"
    ):
        compiled(x=x, unused=np.ones(7, np.float32))
    with pytest.raises(rt.InputError, match=r"missing input\(s\) \['unused'\], unknown input"):
        compiled({"x": x, "other": unused})
    # and the good inputs still give their values
    np.testing.assert_array_equal(np.asarray(compiled(x=x, unused=unused)["y"]), np.maximum(x, 0))


def _vad_feeds(sr: object) -> dict[str, object]:
    rng = np.random.default_rng(5)
    return {
        "x": rng.standard_normal((1, CHUNK)).astype(np.float32),
        "state": np.zeros((2, 1, HIDDEN), np.float32),
        "sr": sr,
    }


def test_the_sample_rate_read_only_by_the_prelude_is_checked_after_the_direct_call_is_registered():
    proto = vad_like_model()
    compiled = rt.compile(proto)
    feeds = _vad_feeds(np.array(16000, np.int64))
    want = reference(proto, feeds)
    for _ in range(3):  # the checked call registers the program; then the direct call
        np.testing.assert_allclose(np.asarray(compiled(feeds)["output"]), want["output"], atol=1e-5)
    assert compiled.program_for(feeds) is not None
    with jax.enable_x64(False):
        int32_on_device = jax.numpy.asarray(16000)  # jax's default int without x64
    for bad, dtype in [
        (np.array(16000, np.int32), "int32"),
        (np.array(16000.0), "float64"),
        (int32_on_device, "int32"),
    ]:
        for _ in range(2):  # refused each time, not remembered as good by the memo
            with pytest.raises(
                rt.InputError, match=f"input 'sr' has dtype {dtype}, expected int64"
            ):
                compiled({**feeds, "sr": bad})
    with pytest.raises(rt.InputError, match="input 'sr' has rank 1"):
        compiled({**feeds, "sr": np.array([16000], np.int64)})
    # what numpy reads as int64 is accepted on both paths, with the same outputs
    for good in (16000, np.int64(16000), np.array(16000, np.int64)):
        for _ in range(2):
            out = compiled({**feeds, "sr": good})
            np.testing.assert_allclose(np.asarray(out["output"]), want["output"], atol=1e-5)


def test_a_sample_rate_given_as_a_python_int_takes_the_direct_call():
    # silero's VAD called with sr=16000: the memo's key and the prelude read the int as
    # check_inputs does (int64); before, each such call took the checked path (2x a call)
    proto = vad_like_model()
    compiled = rt.compile(proto)
    feeds = _vad_feeds(16000)
    want = reference(proto, {**feeds, "sr": np.array(16000, np.int64)})
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(compiled(feeds)["output"]), want["output"], atol=1e-5)
    assert compiled.program_for(feeds) is not None
    assert compiled._fast.try_call(feeds) is not None


def _scaled_by_input(dtype: int) -> object:
    """y = x * Cast(k) with k a scalar input the program reads (an argument, not a condition)."""
    return make_model(
        [
            helper.make_node("Cast", ["k"], ["kf"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["x", "kf"], ["y"]),
        ],
        [tensor("x", shape=["n"]), tensor("k", dtype, [])],
        [tensor("y", shape=["n"])],
    )


def test_a_python_scalar_argument_is_read_as_numpy_reads_it_on_the_direct_call():
    x = np.array([1.0, -2.0, 0.5], np.float32)
    compiled = rt.compile(_scaled_by_input(TensorProto.INT64))
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(compiled(x=x, k=3)["y"]), x * 3)
    assert compiled._fast.try_call({"x": x, "k": 3}) is not None
    # an int for a float32 argument: the direct call declines, the checked path refuses it
    compiled = rt.compile(_scaled_by_input(TensorProto.FLOAT))
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(compiled(x=x, k=np.float32(2))["y"]), x * 2)
    assert compiled._fast.try_call({"x": x, "k": 2}) is None
    with pytest.raises(rt.InputError, match="input 'k' has dtype int64, expected float32"):
        compiled(x=x, k=2)


CALLS = ("ember.call.start", "ember.call.stop")


@pytest.mark.parametrize("which", ["compiled-ahead", "if-per-condition"])
def test_calls_emit_events_exactly_while_someone_listens(which):
    if which == "compiled-ahead":
        proto = one_relu([3])
        feeds_of = [{"x": np.array([-1.0, 0.0, 1.0], np.float32)}] * 2
    else:
        proto = vad_like_model()
        feeds_of = [_vad_feeds(np.array(sr, np.int64)) for sr in (16000, 8000)]
    compiled = rt.compile(proto)
    wants = [reference(proto, f) for f in feeds_of]
    seen: list[str] = []
    listened = 0
    for round_ in range(4):
        listening = round_ % 2 == 1
        if listening:
            bus.attach("test-fastpath-rounds", CALLS, lambda n, m, md: seen.append(n))
        try:
            for i in range(6):
                k = i % 2
                out = compiled(feeds_of[k])
                for name, value in wants[k].items():
                    np.testing.assert_allclose(np.asarray(out[name]), value, atol=1e-5)
                listened += listening
        finally:
            if listening:
                bus.detach("test-fastpath-rounds")
        assert seen == list(CALLS) * listened, f"round {round_}"


@pytest.mark.parametrize("rows", [3, "n"], ids=["compiled-ahead", "registered-per-call"])
def test_a_handler_attached_while_a_checked_call_decides_sees_the_next_calls(monkeypatch, rows):
    # Another thread attaches a handler right after the checked call asked
    # ``bus.listening`` for the last time: the direct call it then installs (or registers)
    # must not outlive that attach. The interleaving is made here by attaching from inside
    # that ``bus.listening`` question.
    proto = one_relu([rows])
    compiled = rt.compile(proto)
    x = np.array([-1.0, 0.0, 1.0], np.float32)
    seen: list[str] = []
    real = bus.listening
    # the question before the direct call: of the call span (compiled ahead), of all the
    # events a checked call emits at a cache hit (registered per call)
    last = {"ember.call.start"} if rows == 3 else {"ember.call.start", "ember.cache.hit"}

    def listening(*names: str) -> bool:
        answer = real(*names)
        if last <= set(names) and not bus.list_handlers().get("test-fastpath-race"):
            bus.attach("test-fastpath-race", CALLS, lambda n, m, md: seen.append(n))
        return answer

    if rows == "n":
        compiled(x=x)  # the segment is compiled and cached; the next call is a cache hit
        bus.attach("test-fastpath-stale", ["ember.cache.evict"], lambda n, m, md: None)
        bus.detach("test-fastpath-stale")  # a new generation: the next call is checked
    monkeypatch.setattr(bus, "listening", listening)
    try:
        compiled(x=x)  # checked: the handler is attached right after its last question
        monkeypatch.setattr(bus, "listening", real)
        compiled(x=x)
        compiled(x=x)
    finally:
        monkeypatch.setattr(bus, "listening", real)
        bus.detach("test-fastpath-race")
    # the two calls after the attach are checked calls, with their spans
    assert seen[-4:] == list(CALLS) * 2, seen


def test_threads_calling_one_model_at_once_get_their_own_outputs_while_recording_flips():
    proto = vad_like_model()
    compiled = rt.compile(proto)
    rates = (16000, 8000)
    feeds = {}
    wants = {}
    for t in range(6):
        rng = np.random.default_rng(100 + t)
        f = {
            "x": rng.standard_normal((1, CHUNK)).astype(np.float32),
            "state": (rng.standard_normal((2, 1, HIDDEN)) * 0.1).astype(np.float32),
            "sr": np.array(rates[t % 2], np.int64),
        }
        feeds[t], wants[t] = f, reference(proto, f)
    errors: list[BaseException] = []
    seen: list[tuple[int, str]] = []
    lock = threading.Lock()
    start = threading.Barrier(len(feeds) + 1)
    done = threading.Event()

    def worker(t: int) -> None:
        try:
            start.wait()
            calls = 0
            while calls < 40 or not done.is_set():  # calls until the handlers stop coming
                calls += 1
                out = compiled(feeds[t])
                for name, value in wants[t].items():
                    np.testing.assert_allclose(np.asarray(out[name]), value, atol=1e-5)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    def record(n: str, m: object, md: object) -> None:
        with lock:
            seen.append((threading.get_ident(), n))

    for t in range(2):  # compiled before (the compile holds the segment cache's lock)
        compiled(feeds[t])
    threads = [threading.Thread(target=worker, args=(t,)) for t in feeds]
    for th in threads:
        th.start()
    start.wait()
    try:
        for _ in range(10):  # handlers come and go while the threads call
            bus.attach("test-fastpath-threads", CALLS, record)
            time.sleep(0.01)  # the threads call while it listens
            bus.detach("test-fastpath-threads")
            time.sleep(0.002)
    finally:
        done.set()
        for th in threads:
            th.join()
    assert errors == []
    assert "ember.call.stop" in {n for _, n in seen}, "no call recorded while listening"
    # per thread, a call's stop only ever follows its start (a span that started while a
    # handler listened may end after it left, so a start may have no stop)
    for ident in {i for i, _ in seen}:
        names = [n for i, n in seen if i == ident]
        started = False
        for n in names:
            if n == "ember.call.stop":
                assert started, names
            started = n == "ember.call.start"
    # and afterwards the model is back on its direct calls, one program per rate
    for t in range(2):
        assert compiled.program_for(feeds[t]) is not None


def test_a_dropped_model_with_an_if_frees_its_programs_and_memo_at_once():
    compiled = rt.compile(vad_like_model())
    for sr in (16000, 8000, 16000, 8000):
        compiled(_vad_feeds(np.array(sr, np.int64)))
    assert len(compiled._fast.programs) == 2
    model_ref = weakref.ref(compiled)
    with no_cycle_collector():
        del compiled
        assert model_ref() is None


def test_an_int64_input_of_a_32_bit_program_is_refused_on_every_path():
    # a dynamic dim: the program is registered per call; its argument is int32
    proto = make_model(
        [helper.make_node("Neg", ["x"], ["y"])],
        [tensor("x", TensorProto.INT32, ["n"])],
        [tensor("y", TensorProto.INT32, ["n"])],
    )
    compiled = rt.compile(proto)
    good = np.array([1, 2, 3], np.int32)
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(compiled(x=good)["y"]), -good)
    bad = np.array([2**40, 1, 2], np.int64)
    for value in (bad, bad.tolist(), jax.device_put(good.astype(np.float32))):
        with pytest.raises(rt.InputError, match="input 'x' has dtype"):
            compiled(x=value)
    np.testing.assert_array_equal(np.asarray(compiled(x=good[:2])["y"]), -good[:2])


@pytest.mark.parametrize("rows", [3, "n"], ids=["compiled-ahead", "registered-per-call"])
def test_big_endian_inputs_are_read_as_their_values(rows):
    # data read from a file may be big-endian: the same dtype in another byte order, which
    # the error said as "has dtype float32, expected float32"
    proto = make_model(
        [helper.make_node("Neg", ["x"], ["y"])],
        [tensor("x", shape=[rows])],
        [tensor("y", shape=[rows])],
    )
    compiled = rt.compile(proto)
    x = np.array([1.5, -2.0, 3.25], np.float32)
    swapped = x.astype(">f4")
    for value in (x, x, swapped, swapped, x):  # after the direct call, and back to it
        np.testing.assert_array_equal(np.asarray(compiled(x=value)["y"]), -x)
    np.testing.assert_array_equal(np.asarray(rt.run(proto, x=swapped)["y"]), -x)
    with pytest.raises(rt.InputError, match="input 'x' has dtype float64, expected float32"):
        compiled(x=x.astype(">f8"))


def test_a_big_endian_sample_rate_picks_the_program_of_its_value():
    proto = vad_like_model()
    compiled = rt.compile(proto)
    for sr in (16000, 8000):
        feeds = _vad_feeds(np.array(sr, np.int64))
        want = reference(proto, feeds)
        for value in (feeds["sr"], feeds["sr"].astype(">i8"), feeds["sr"].astype(">i8")):
            out = compiled({**feeds, "sr": value})
            np.testing.assert_allclose(np.asarray(out["output"]), want["output"], atol=1e-5)


@pytest.mark.parametrize("rows", [3, "n"], ids=["compiled-ahead", "registered-per-call"])
def test_an_output_known_on_the_host_cannot_be_changed_for_the_next_call(rows):
    # Shape(x) is computed when the program is traced and returned by every call as the
    # same numpy array: changed in place by a caller, it came back changed on the next call
    proto = make_model(
        [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Relu", ["x"], ["y"])],
        [tensor("x", shape=[rows])],
        [tensor("s", TensorProto.INT64, [1]), tensor("y", shape=[rows])],
    )
    compiled = rt.compile(proto)
    x = np.array([-1.0, 2.0, 3.0], np.float32)
    for _ in range(3):  # the checked call, then the direct one
        out = compiled(x=x)
        np.testing.assert_array_equal(out["s"], [3])
        np.testing.assert_array_equal(np.asarray(out["y"]), [0, 2, 3])
        with pytest.raises(ValueError, match="read-only"):
            out["s"][0] = 99


def test_a_recording_between_direct_calls_holds_exactly_its_own_calls(tmp_path):
    import json

    from ember.recorder import record

    compiled = rt.compile(vad_like_model())
    feeds = [_vad_feeds(np.array(sr, np.int64)) for sr in (16000, 8000)]
    for i in range(4):  # checked calls register a program per rate; then direct calls
        compiled(feeds[i % 2])
    for name, calls in (("a", 5), ("b", 3)):
        with record(tmp_path / f"{name}.jsonl", run_id=name):
            for i in range(calls):
                compiled(feeds[i % 2])
        for i in range(4):  # direct again: nothing more in the file
            compiled(feeds[i % 2])
        lines = [json.loads(line) for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
        ends = [r["span_kind"] for r in lines if r["kind"] == "span_end"]
        assert ends.count("call") == calls, name
        assert ends.count("segment") == calls, name
        assert sum(r["kind"] == "cache" for r in lines) == calls, name


@pytest.mark.parametrize("sync", [True, False])
def test_a_recorded_whole_graph_call_holds_its_segment_and_ends_at_its_results(tmp_path, sync):
    # the segment's records are written after the call ran (``bus.emit_span``), with the
    # times of the run: inside the call span, and, synced, ending with it at the results
    import json

    from ember.recorder import record

    model = one_relu([4, 8])
    compiled = rt.compile(model)
    x = np.full((4, 8), -1.0, np.float32)
    compiled(x=x)
    with record(tmp_path / "run.jsonl", sync=sync):
        for _ in range(3):
            np.testing.assert_array_equal(np.asarray(compiled(x=x)["y"]), np.zeros((4, 8)))
    recs = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()[1:]]
    assert [(r["kind"], r["span_kind"]) for r in recs] == [
        ("span_start", "call"),
        ("span_start", "segment"),
        ("span_end", "segment"),
        ("span_end", "call"),
    ] * 3
    for call_start, seg_start, seg_end, call_end in zip(*[iter(recs)] * 4, strict=True):
        assert seg_start["parent_id"] == call_start["span_id"] == call_end["span_id"]
        assert seg_start["span_id"] == seg_end["span_id"] != call_start["span_id"]
        assert call_start["ts_ns"] <= seg_start["ts_ns"] <= seg_end["ts_ns"] <= call_end["ts_ns"]
        assert seg_end["duration_ns"] == seg_end["ts_ns"] - seg_start["ts_ns"]
        assert call_end["duration_ns"] == call_end["ts_ns"] - call_start["ts_ns"]
        assert seg_end["attrs"] == {
            "source": None,
            "position": 0,
            "stop": "end",
            "compiled": True,
            "key": seg_end["attrs"]["key"],
        }
        if sync:  # both end when the results were ready; the dispatch came before
            assert seg_end["ts_ns"] == call_end["ts_ns"]
            assert 0 < call_end["attrs"]["dispatch_ns"] <= call_end["duration_ns"]
        else:
            assert "dispatch_ns" not in call_end["attrs"]


def test_a_recorded_direct_call_that_fails_ends_its_call_span_with_the_error(tmp_path):
    # recorded calls stay on the direct call (their spans sent once they ran): a call whose
    # program raises (a deleted input array) still leaves its call span, ended in error
    import json

    import jax.numpy as jnp

    from ember.recorder import record

    model = one_relu([4, 8])
    compiled = rt.compile(model)
    x = jnp.ones((4, 8), jnp.float32)
    compiled(x=x)
    with record(tmp_path / "run.jsonl"):
        compiled(x=x)
        compiled(x=x)  # the direct call, recorded
        gone = jnp.ones((4, 8), jnp.float32)
        gone.delete()
        with pytest.raises(RuntimeError, match="deleted"):
            compiled(x=gone)
        compiled(x=x)
    recs = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()[1:]]
    calls = [r for r in recs if r["span_kind"] == "call"]
    assert [(r["kind"], r.get("status")) for r in calls] == [
        ("span_start", None),
        ("span_end", "ok"),
    ] * 2 + [("span_start", None), ("span_end", "error"), ("span_start", None), ("span_end", "ok")]
    failed = calls[5]
    assert failed["span_id"] == calls[4]["span_id"]
    assert failed["error"]["reason"].startswith("RuntimeError: Array has been deleted")
    assert calls[4]["attrs"]["shapes"] == [{"name": "x", "shape": [4, 8], "dtype": "float32"}]


def test_a_program_evicted_while_its_call_runs_is_not_registered_by_it(monkeypatch):
    # a call runs the program for 16 kHz; before it registers it, another call (8 kHz)
    # evicts it (cache_size=1): the direct call must not keep it, out of the cache and alive
    from ember.runtime.jit.fastpath import SpecializedCalls

    compiled = rt.compile(vad_like_model(), cache_size=1)
    register = SpecializedCalls.register

    def evict_then_register(self: SpecializedCalls, *args: object, **kwargs: object) -> None:
        monkeypatch.setattr(SpecializedCalls, "register", register)
        compiled(_vad_feeds(np.array(8000, np.int64)))  # checked: evicts 16 kHz's program
        register(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(SpecializedCalls, "register", evict_then_register)
    compiled(_vad_feeds(np.array(16000, np.int64)))
    cached = {id(e) for pos in compiled._builder.segments._positions.values() for e in pos.values()}
    kept = [entry for entry, _, _ in compiled._fast.programs.values()]
    assert kept
    assert all(id(e) in cached for e in kept)
