"""record(): bus events become a valid JSONL trace; crashes and threads leave valid files."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from ember.recorder import TraceWriteError, TraceWriteWarning, bus, record
from ember.schemas import SCHEMA_ID, validate_file
from tests import recordings


def lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_meta_first_then_one_record_per_event(tmp_path):
    path = tmp_path / "run.jsonl"
    with record(path, entrypoint="test", model="tiny", team="ml") as rec:
        with bus.span("ember.call", {"source": "m.onnx", "shapes": []}) as call:
            bus.emit(
                "ember.cache.miss",
                {"count": 1},
                {"source": "m.onnx", "position": 0, "shapes": [], "key": "k", "statics": []},
            )
            with bus.span(
                "ember.segment.compile", {"source": "m.onnx", "position": 0, "shapes": []}
            ) as seg:
                seg.set(stop="end", compiled=True, disk_cache=None, reason=None, host_values=[])
    recs = lines(path)
    meta = recs[0]
    assert meta["kind"] == "meta"
    assert meta["schema"] == SCHEMA_ID
    assert meta["run_id"] == rec.run_id
    assert meta["entrypoint"] == "test"
    assert meta["tags"] == {"model": "tiny", "team": "ml"}
    assert meta["pid"] == os.getpid()
    kinds = [(r["kind"], r.get("span_kind") or r.get("action")) for r in recs[1:]]
    assert kinds == [
        ("span_start", "call"),
        ("cache", "miss"),
        ("span_start", "segment_compile"),
        ("span_end", "segment_compile"),
        ("span_end", "call"),
    ]
    assert recs[2]["span_id"] == call.span_id  # the cache event knows its call
    assert recs[3]["parent_id"] == call.span_id
    assert recs[4]["attrs"]["stop"] == "end"
    assert recs[4]["attrs"]["compiled"] is True
    ts = [r["ts_ns"] for r in recs[1:]]
    assert ts == sorted(ts)
    assert validate_file(path).ok


def test_failed_span_is_recorded_with_its_error(tmp_path):
    path = tmp_path / "run.jsonl"
    with record(path), pytest.raises(FileNotFoundError):
        with bus.span("ember.load", {"source": "missing.onnx"}):
            raise FileNotFoundError("missing.onnx")
    end = lines(path)[-1]
    assert end["status"] == "error"
    assert end["span_kind"] == "load"
    assert end["error"]["reason"] == "FileNotFoundError: missing.onnx"
    assert "FileNotFoundError" in end["error"]["stack"]
    assert validate_file(path).ok


def test_instrumentation_api_without_the_runtime(tmp_path):
    path = tmp_path / "run.jsonl"
    with record(path, phase="train") as rec:
        with rec.step("forward", index=0):
            rec.op(
                "matmul",
                dtype="float32",
                device="cpu",
                duration_ns=50,
                shape=[2, 2],
                inputs=["a", "b"],
                output="c",
                storage_bytes=16,
            )
            rec.tensor("c", dtype="float32", device="cpu", shape=[2, 2], category="activation")
            rec.memory("alloc", "c", 16, dtype="float32", device="cpu", category="activation")
        with rec.span("eval", dataset="val"):
            rec.memory("free", "c", 16, dtype="float32", device="cpu")
        rec.gradient("params", "w", "present", 2.0, step=0)
        rec.device_memory("cpu", "live_arrays", used_bytes=16, rss_bytes=1 << 20)
        rec.edge("a", "b", 5)
    report = validate_file(path)
    assert report.ok, report.errors
    assert report.counts == {
        "meta": 1,
        "span_start": 2,
        "span_end": 2,
        "op": 1,
        "tensor": 1,
        "memory": 2,
        "gradient": 1,
        "device_memory": 1,
        "edge": 1,
    }
    recs = lines(path)
    user = [r for r in recs if r.get("span_kind") == "user"]
    assert user[0]["name"] == "eval"
    assert user[0]["attrs"] == {"attrs": {"dataset": "val"}}
    assert recs[0]["phase"] == "train"


def test_flushed_while_running(tmp_path):
    path = tmp_path / "run.jsonl"
    with record(path, flush_interval=0.05) as rec:
        rec.edge("a", "b", 1)
        deadline = time.monotonic() + 5
        while len(path.read_bytes().splitlines()) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(path.read_bytes().splitlines()) == 2  # without closing


def test_recording_stops_with_the_context(tmp_path):
    path = tmp_path / "run.jsonl"
    with record(path):
        pass
    bus.emit("ember.cache.hit", {"count": 1}, {"position": 0, "shapes": []})
    assert len(lines(path)) == 1


def test_lines_counts_what_was_written_and_a_closed_trace_refuses_writes(tmp_path):
    path = tmp_path / "run.jsonl"
    with record(path) as rec:
        for i in range(3):
            rec.edge("a", "b", i)
        assert rec.lines == 4  # meta + 3, buffered ones included
    with pytest.raises(ValueError, match=r"run\.jsonl is closed; open a new record\(\)"):
        rec.write_record({"kind": "edge"})
    assert len(lines(path)) == 4


def test_threads_never_interleave_lines(tmp_path):
    path = tmp_path / "run.jsonl"
    with record(path) as rec:

        def work(k):
            for i in range(500):
                rec.op(
                    f"op{k}", dtype="float32", device="cpu", duration_ns=i, inputs=["x" * 200]
                )  # long lines make interleaving likely if it happened

        threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    report = validate_file(path)
    assert report.ok, report.errors[:3]
    assert report.counts["op"] == 4000


def _call(i):
    with bus.span("ember.call", {"source": "m.onnx", "shapes": []}) as call:
        with bus.span(
            "ember.segment",
            {"source": "m.onnx", "position": 0, "stop": "end", "compiled": True, "key": "k"},
        ):
            pass
        call.set(dispatch_ns=i)


def test_call_records_written_later_keep_the_order_of_the_events(tmp_path):
    # a call's own records wait for a batch (``DRAIN_AT``); any other record, the end of
    # the recording and a flush write them first, so the file keeps the events' order
    path = tmp_path / "run.jsonl"
    with record(path) as rec:
        for i in range(300):  # over one batch
            _call(i)
            if i % 100 == 7:
                bus.emit("ember.cache.hit", None, {"source": "m.onnx", "position": 0, "shapes": []})
            if i == 150:
                with rec.span("between", n=i):
                    _call(-1)
    recs = lines(path)[1:]
    assert len(recs) == 301 * 4 + 3 + 2
    ts = [r["ts_ns"] for r in recs]
    assert ts == sorted(ts)
    one_call = [
        ("span_start", "call"),
        ("span_start", "segment"),
        ("span_end", "segment"),
        ("span_end", "call"),
    ]
    kinds = [(r["kind"], r.get("span_kind") or r.get("action")) for r in recs[:34]]
    assert kinds == one_call * 8 + [("cache", "hit")] + one_call[:1]  # after the call i = 7
    ends = [
        r["attrs"]["dispatch_ns"]
        for r in recs
        if r.get("span_kind") == "call" and r["kind"] == "span_end"
    ]
    assert ends[:152] == [*range(151), -1]
    user = [r for r in recs if r.get("span_kind") == "user"]
    assert [u["attrs"] for u in user] == [{"attrs": {"n": 150}}] * 2
    assert validate_file(path).ok


def test_an_open_call_is_in_the_file_after_a_flush(tmp_path):
    # a call that hangs is visible as its span_start, as any record is, at the next flush
    path = tmp_path / "run.jsonl"
    with record(path) as rec:
        with bus.span("ember.call", {"source": "m.onnx", "shapes": []}) as call:
            rec.flush()
            started = lines(path)[1:]
        assert started == [
            {
                "kind": "span_start",
                "ts_ns": started[0]["ts_ns"],
                "span_id": call.span_id,
                "parent_id": None,
                "name": "ember.call",
                "span_kind": "call",
                "attrs": {"source": "m.onnx", "shapes": []},
            }
        ]
    assert [r["kind"] for r in lines(path)[1:]] == ["span_start", "span_end"]


def test_calls_from_threads_write_each_record_once(tmp_path):
    path = tmp_path / "run.jsonl"
    with record(path, flush_interval=0.001):  # the flusher drains while calls run

        def work():
            for i in range(400):
                _call(i)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    recs = lines(path)[1:]
    starts = [r["span_id"] for r in recs if r["kind"] == "span_start"]
    ends = [r["span_id"] for r in recs if r["kind"] == "span_end"]
    assert len(starts) == len(set(starts)) == 4 * 400 * 2
    assert sorted(starts) == sorted(ends)
    assert validate_file(path).ok


def test_sigkill_leaves_at_most_a_partial_last_line(tmp_path):
    path = tmp_path / "killed.jsonl"
    child = recordings.start("record_until_killed", str(path), stdout=subprocess.PIPE)
    assert child.stdout.readline().strip() == b"ready"
    time.sleep(0.5)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    raw = path.read_bytes().split(b"\n")
    complete, last = raw[:-1], raw[-1]
    assert len(complete) > 10
    for line in complete:
        json.loads(line)  # every complete line is whole
    if last:  # a cut line is possible, and only there
        with pytest.raises(json.JSONDecodeError):
            json.loads(last)
    path.write_bytes(b"\n".join(complete) + b"\n")
    assert validate_file(path).ok


def test_importing_the_recorder_does_not_import_jax():
    code = "import sys, ember.recorder, ember.schemas; print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- write failures: a full disk, paths that cannot be written


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_a_full_disk_warns_once_keeps_recording_and_fails_at_exit():
    # every write to /dev/full fails with ENOSPC, as on a full disk; the block is the
    # recording whose writes fail, so it has many statements
    with (  # noqa: PT012, PT031
        pytest.warns(TraceWriteWarning) as caught,
        pytest.raises(
            TraceWriteError,
            match=r"^the trace /dev/full is incomplete: 1001 record\(s\) were not written "
            r"\(No space left on device\)$",
        ) as failed,
        record("/dev/full") as rec,
    ):
        rec.flush()  # the meta line: the first failure
        for i in range(1000):  # the handlers keep running, counting what is lost
            rec.edge("a", "b", i)
            if i % 100 == 0:
                rec.flush()
        assert rec._writer.lost == 902
    warned = [str(w.message) for w in caught if issubclass(w.category, TraceWriteWarning)]
    assert warned == [
        "ember: writing the trace /dev/full failed (No space left on device); 1 record(s) lost "
        "so far, and no more will be written to it. The program goes on; the trace will be "
        "incomplete."
    ]
    assert failed.value.errno == 28
    assert isinstance(failed.value, OSError)


def test_an_error_in_the_block_is_not_hidden_by_a_failed_trace():
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full (Linux)")
    with pytest.warns(TraceWriteWarning) as caught, pytest.raises(KeyError, match="the body's"):
        with record("/dev/full"):
            raise KeyError("the body's")
    assert [str(w.message)[:44] for w in caught] == [
        "ember: writing the trace /dev/full failed (N",
        "the trace /dev/full is incomplete: 1 record(",
    ]


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE and SIGXFSZ as on Linux")
def test_a_disk_that_fills_mid_run_keeps_whole_lines_and_counts_the_rest(tmp_path):
    path = tmp_path / "filling.jsonl"
    child = recordings.run("filling_disk", str(path), timeout=120, check=False)
    assert child.returncode == 0, child.stderr
    out = child.stdout.splitlines()
    assert out[0] == "still running"
    assert out[1].startswith(f"lost the trace {path} is incomplete: ")
    lost = int(out[1].split("incomplete: ")[1].split(" ")[0])
    assert "Exception in thread" not in child.stderr
    assert "Traceback" not in child.stderr
    assert child.stderr.count("TraceWriteWarning") == 1
    assert f"writing the trace {path} failed (File too large)" in child.stderr
    raw = path.read_bytes()
    assert len(raw) <= 20_000
    complete = raw.split(b"\n")[:-1]
    for line in complete:
        json.loads(line)  # whole lines up to the failure, at most a partial last one
    assert len(complete) + lost == 2001
    assert len(complete) > 100


def test_paths_that_cannot_be_written_fail_at_record_saying_why(tmp_path):
    (tmp_path / "afile").write_text("x")
    cases = [
        (tmp_path / "afile" / "run.jsonl", f"{re.escape(str(tmp_path))}.afile is a file, not a"),
        (tmp_path / "afile" / "sub" / "run.jsonl", "afile is a file, not a folder"),
        (tmp_path, "it is a folder"),
    ]
    if os.path.isdir("/proc/self"):
        cases += [
            ("/proc/run.jsonl", "(the folder /proc does not take new files|Permission denied)"),
            ("/proc/ember-x/run.jsonl", "cannot create the folder /proc/ember-x"),
        ]
    for path, why in cases:
        with (
            pytest.raises(
                TraceWriteError, match=f"^cannot write the trace {re.escape(str(path))}: .*{why}"
            ),
            record(path),
        ):
            pass  # pragma: no cover
    assert not [h for h in bus.list_handlers() if h.startswith("ember.recorder.")]


def _recorder_process(path, run_id: str, hold: float):
    return recordings.start(
        "hold_recording",
        str(path),
        run_id,
        str(hold),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_second_recorder_on_a_path_another_process_records_is_refused(tmp_path):
    # before: the second process truncated the file; the first run's meta line (or the
    # second run's 401 lines) was lost and the whole file refused by ingest
    from ember.schemas import validate_file

    path = tmp_path / "shared.jsonl"
    first = _recorder_process(path, "first", 6.0)
    assert first.stdout.readline().strip() == "recording"
    second = _recorder_process(path, "second", 0.0)
    out, _ = second.communicate(timeout=120)
    assert second.returncode == 3, out
    assert "TraceWriteError" in out
    assert "another recorder is writing it (" in out
    assert first.wait(timeout=120) == 0
    report = validate_file(path)
    assert report.ok, report.errors
    assert report.counts["meta"] == 1
    assert report.counts["span_start"] == report.counts["span_end"] == 400
    # the lock goes with the process: a later recording of the path starts it afresh
    third = _recorder_process(path, "third", 0.0)
    third.communicate(timeout=120)
    assert third.returncode == 0
    assert b'"run_id":"third"' in path.read_bytes().splitlines()[0]
