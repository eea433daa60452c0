"""The lines of spans sent after they ended (``recorder.span_lines``) are the record
builders' lines: a recording writes the same file whether its span handler takes a sent
span whole or its event handlers get the span's events."""

from __future__ import annotations

import itertools
import re
import time
from contextlib import nullcontext

import numpy as np
import orjson
import pytest

from ember.recorder import bus, record
from ember.schemas.validate import validate_file

CALL = {"source": "m.onnx", "shapes": [{"name": "x", "shape": [4, 8], "dtype": "float32"}]}
SEGMENT = {"source": "m.onnx", "position": 0, "stop": "end", "compiled": True, "key": "ab12"}

CASES = {
    "a call and its segment, synced": (CALL, {"dispatch_ns": 30}, [("ember.segment", SEGMENT)]),
    "a call without a stop": (CALL, None, [("ember.segment", SEGMENT)]),
    "no children": (CALL, {"dispatch_ns": 7}, []),
    # the stop gives again a field of the start: the merged value, in the start's place
    "a stop that overrides": (CALL, {"source": "other.onnx", "dispatch_ns": 1}, []),
    # metadata that is not a field of the record is left out, at the start and at the end
    "fields that are not attributes": ({**CALL, "note": 1}, {"dispatch_ns": 3, "x": 2}, []),
    "numpy values": (
        {"source": None, "shapes": [{"name": "x", "shape": [np.int64(4)], "dtype": "float32"}]},
        {"dispatch_ns": np.int64(9)},
        [],
    ),
    "a numpy array": (
        {"source": None, "shapes": [{"name": "x", "shape": np.array([4, 8]), "dtype": "f4"}]},
        None,
        [],
    ),
    # (not valid traces, NOT_VALID: only the encoding is compared)
    "empty metadata": ({}, {"dispatch_ns": 5}, [("ember.segment", {})]),
    "a stop that is not an int": (CALL, {"dispatch_ns": 2.5}, []),
    "a stop that is a bool": (CALL, {"dispatch_ns": True}, []),
    "a percent sign": ({**CALL, "source": "100%d.onnx"}, {"dispatch_ns": 4}, []),
    # kinds without a template: the builders' own lines (a user span keeps its name)
    "a user span inside a step": (
        {"step": "train", "index": 3},
        None,
        [("ember.user", {"name": "load batch", "rows": 8})],
    ),
    "a span the recorder does not record": (CALL, None, [("my.own", {"a": 1})]),
    "two children": (
        {"step": "train", "index": 3},
        None,
        [("ember.user", {"name": "load", "rows": 8}), ("ember.user", {"name": "step"})],
    ),
    # what orjson cannot encode: the records that hold it are lost (logged), the others kept
    "an int past 64 bits in the stop": (CALL, {"dispatch_ns": 2**64}, [("ember.segment", SEGMENT)]),
    "an int past 64 bits, merged": (
        {**CALL, "dispatch_ns": 1},
        {"dispatch_ns": -(2**63) - 1},
        [("ember.segment", SEGMENT)],
    ),
    "a dict with an int key in the call's": (
        {**CALL, "shapes": [{1: "x"}]},
        {"dispatch_ns": 1},
        [("ember.segment", SEGMENT)],
    ),
    "a dict with an int key in the segment's": (
        CALL,
        {"dispatch_ns": 1},
        [("ember.segment", {**SEGMENT, "key": {2: "k"}})],
    ),
}
NOT_VALID = {"empty metadata", "a stop that is not an int", "a stop that is a bool"}
LOST = {  # case -> the records not written
    "an int past 64 bits in the stop": 1,
    "an int past 64 bits, merged": 1,
    "a dict with an int key in the call's": 2,
    "a dict with an int key in the segment's": 2,
}


def _sent_twice(tmp_path, md, stop, kids, start, valid=True, then=lambda: None, container=list):
    """Lines of the same span sent with the recorder's span handler, then with its events
    (``then()`` runs once the recording is open; ``container``: of the children, a tuple
    as the runtime sends them, or any iterable)."""
    prefix = "ember.step" if "step" in md else "ember.call"
    children = container((p, m, start + 10 + i, start + 20 + i) for i, (p, m) in enumerate(kids))
    path = tmp_path / "t.jsonl"
    with record(path) as rec:
        then()
        handlers = bus.list_handlers()
        (spans_id,) = [h for h in handlers if rec.run_id in h and handlers[h] == {bus.SPANS_SENT}]
        with bus.span("ember.run", {"source": "m.onnx"}):
            bus.emit_span(prefix, md, start, start + 100, stop_metadata=stop, children=children)
            rec.flush()
            bus.detach(spans_id)
            bus.emit_span(prefix, md, start, start + 100, stop_metadata=stop, children=children)
    assert validate_file(path).ok or not valid
    lines = path.read_bytes().splitlines()[2:-1]  # less meta and the run span
    half = len(lines) // 2
    return _renumbered(lines[:half]), _renumbered(lines[half:])


def _renumbered(lines: list[bytes]) -> list[bytes]:
    """The lines, their span ids (and parent ids) numbered from 1 in the order they are
    first named: the bytes to compare."""
    new = itertools.count(1)
    ids: dict[bytes, bytes] = {}

    def renumber(match: re.Match[bytes]) -> bytes:
        if match[2] not in ids:
            ids[match[2]] = b"%d" % next(new)
        return match[1] + ids[match[2]]

    return [re.sub(rb'("(?:span|parent)_id":)(\d+)', renumber, line) for line in lines]


@pytest.mark.parametrize("container", [list, tuple])
@pytest.mark.parametrize("case", CASES)
def test_a_sent_span_is_written_as_its_events_would_be(tmp_path, case, container):
    md, stop, kids = CASES[case]
    by_span_handler, by_events = _sent_twice(
        tmp_path, md, stop, kids, time.monotonic_ns(), case not in NOT_VALID, container=container
    )
    assert by_span_handler == by_events  # byte for byte, but for the span ids
    assert len(by_events) == 2 + 2 * sum(p != "my.own" for p, _ in kids) - LOST.get(case, 0)


def test_a_span_that_started_before_the_recording_starts_at_zero(tmp_path):
    by_span_handler, by_events = _sent_twice(tmp_path, CALL, None, [], start=1)
    assert by_span_handler == by_events
    assert [orjson.loads(line)["ts_ns"] for line in by_events] == [0, 0]


def test_metadata_changed_between_calls_is_written_as_it_was_sent(tmp_path):
    # the attributes are kept by the metadata object: a new object is encoded anew
    path = tmp_path / "t.jsonl"
    with record(path):
        first = dict(CALL)
        bus.emit_span("ember.call", first, 10, 20)
        bus.emit_span("ember.call", {**CALL, "source": "b.onnx"}, 30, 40)
        bus.emit_span("ember.call", first, 50, 60)
    starts = [
        r["attrs"]["source"]
        for r in map(orjson.loads, path.read_bytes().splitlines())
        if r["kind"] == "span_start"
    ]
    assert starts == ["m.onnx", "b.onnx", "m.onnx"]


def _edge_on(event: str) -> None:
    """Attach a handler of another id that writes a record (an edge, at the event's time)
    from inside a span's event, as ``track_device_memory`` does at a call's stop."""

    def on_event(name, measurements, md):
        bus.emit(
            "ember.edge",
            {"monotonic_time": measurements["monotonic_time"]},
            {"from_span": name, "to_span": "x", "duration_ns": 1},
        )

    bus.attach("test-edges", [event], on_event)


@pytest.mark.parametrize(
    ("event", "attached"),
    [
        ("ember.call.stop", "before the recording"),  # track_device_memory(), then record()
        ("ember.call.stop", "inside the recording"),
        ("ember.segment.stop", "inside the recording"),
        ("ember.call.start", "inside the recording"),
    ],
)
def test_a_record_written_from_another_handler_of_a_sent_span_keeps_its_place(
    tmp_path, event, attached
):
    # another handler of the span's events gets them as it did, and what it records lands
    # between the span's lines where its event came: the lines are the events' lines
    before = attached == "before the recording"
    if before:
        _edge_on(event)
    try:
        by_span_handler, by_events = _sent_twice(
            tmp_path, CALL, {"dispatch_ns": 3}, [("ember.segment", SEGMENT)],
            time.monotonic_ns(), then=(lambda: None) if before else lambda: _edge_on(event),
        )  # fmt: skip
    finally:
        bus.detach("test-edges")
    assert by_span_handler == by_events
    kinds = [orjson.loads(line)["kind"] for line in by_events]
    assert sorted(kinds) == ["edge"] + ["span_end"] * 2 + ["span_start"] * 2


def test_the_children_of_a_sent_span_nobody_records_are_its_parents(tmp_path):
    # a span of a prefix the recorder does not record: its children are the enclosing
    # span's, as its events have them (no parent_id of a span the trace does not hold)
    path = tmp_path / "t.jsonl"
    start = time.monotonic_ns()
    with record(path), bus.span("ember.run", {"source": "m.onnx"}):
        run_id = bus.current_span_id()
        bus.emit_span(
            "my.own", {"a": 1}, start, start + 50,
            children=[("ember.segment", SEGMENT, start + 1, start + 2)],
        )  # fmt: skip
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    (segment,) = [r for r in records if r["kind"] == "span_start" and r["span_kind"] == "segment"]
    assert segment["parent_id"] == run_id


def test_calls_sent_in_a_row_are_written_as_their_events_would_be(tmp_path, monkeypatch):
    # One drain writes every call sent since the last: a run of calls of one pair template
    # is filled by one %. Whatever breaks a run (another template, a stop no template
    # takes, a call without its segment, a record that is lost) keeps its place.
    from ember.recorder.span_lines import SpanLines

    other = {**CALL, "source": "b.onnx"}
    sends = [
        (CALL, {"dispatch_ns": 1}, 1),
        (CALL, {"dispatch_ns": 2}, 1),
        (CALL, {"dispatch_ns": 3}, 1),
        (CALL, {"dispatch_ns": 2.5}, 1),  # a float: the builders' line
        (other, {"dispatch_ns": 4}, 1),
        (CALL, {"dispatch_ns": 5}, 1),
        (CALL, None, 1),  # no stop metadata: another end template
        (CALL, {"dispatch_ns": 6}, 0),  # no segment
        (CALL, {"dispatch_ns": 2**64}, 1),  # lost: orjson refuses it
        (CALL, {"dispatch_ns": 7}, 2),  # two segments
        (CALL, {"dispatch_ns": 8}, 1),
    ]
    runs: list[int] = []
    fill = SpanLines._fill
    monkeypatch.setattr(
        SpanLines, "_fill", lambda self, t, run, v: runs.append(len(run)) or fill(self, t, run, v)
    )

    def send_all(start: int) -> None:
        for i, (md, stop, segments) in enumerate(sends):
            t = start + 1000 * i
            kids = [("ember.segment", SEGMENT, t + 10 + j, t + 20 + j) for j in range(segments)]
            bus.emit_span("ember.call", md, t, t + 100, stop_metadata=stop, children=kids)

    path = tmp_path / "t.jsonl"
    start = time.monotonic_ns()
    with record(path) as rec:
        handlers = bus.list_handlers()
        (spans_id,) = [h for h in handlers if rec.run_id in h and handlers[h] == {bus.SPANS_SENT}]
        send_all(start)  # no parent
        with bus.span("ember.run", {"source": "m.onnx"}):
            send_all(start)  # inside a span
        rec.flush()
        half = len(path.read_bytes().splitlines())
        bus.detach(spans_id)
        send_all(start)
        with bus.span("ember.run", {"source": "m.onnx"}):
            send_all(start)
    lines = [line for line in path.read_bytes().splitlines() if b'"span_kind":"run"' not in line]
    half -= 2  # the first run span's lines
    by_span_handler, by_events = _renumbered(lines[1:half]), _renumbered(lines[half:])
    assert by_span_handler == by_events  # byte for byte, but for the span ids
    assert len(by_events) == 2 * (4 * 11 - 2 + 2 - 1)
    assert runs == [3, 1, 1, 1, 1] * 2  # calls 1-3 in one %; the others alone or not at all


ONE_TEMPLATE = {  # case -> (the calls: metadata, stop), whether one template fills them
    "calls of one template": ([(CALL, {"dispatch_ns": d}) for d in range(1, 40)], True),
    "calls without a stop": ([(CALL, None)] * 30, True),
    # equal metadata that encodes otherwise (4.0 is not 4): by identity, not equality
    "an equal metadata object between": (
        [(CALL, {"dispatch_ns": 1})] * 5
        + [
            (
                {**CALL, "shapes": [{"name": "x", "shape": [4.0, 8], "dtype": "float32"}]},
                {"dispatch_ns": 2},
            )
        ]
        + [(CALL, {"dispatch_ns": 3})] * 5,
        False,
    ),
    "a stop that is a bool between": (
        [(CALL, {"dispatch_ns": 1})] * 5
        + [(CALL, {"dispatch_ns": True})]
        + [(CALL, {"dispatch_ns": 2})] * 5,
        False,
    ),
    "a stop past 64 bits between": (
        [(CALL, {"dispatch_ns": 1})] * 5
        + [(CALL, {"dispatch_ns": 2**64})]
        + [(CALL, {"dispatch_ns": 2})] * 5,
        False,
    ),
    "a call without a stop between": (
        [(CALL, {"dispatch_ns": 1})] * 5 + [(CALL, None)] + [(CALL, {"dispatch_ns": 2})] * 5,
        False,
    ),
}


@pytest.mark.parametrize("inside", [False, True], ids=["no parent", "inside a span"])
@pytest.mark.parametrize("case", ONE_TEMPLATE)
def test_a_drain_of_calls_of_one_template_is_written_as_their_events_would_be(
    tmp_path, monkeypatch, case, inside
):
    # A drain whose calls all share one pair template is filled from its values taken
    # column by column (``SpanLines._one_template``); any call that differs in what the
    # template depends on sends the drain call by call. Either way: the events' lines.
    from ember.recorder.span_lines import SpanLines

    calls, one = ONE_TEMPLATE[case]
    filled: list[bool] = []
    whole = SpanLines._one_template

    def spy(self: SpanLines, sent: list) -> bytes | None:
        filled.append(False)  # unless it returns lines (it may raise: call by call too)
        lines = whole(self, sent)
        filled[-1] = lines is not None
        return lines

    monkeypatch.setattr(SpanLines, "_one_template", spy)

    def send_all(start: int) -> None:
        with bus.span("ember.run", {"source": "m.onnx"}) if inside else nullcontext():
            for i, (md, stop) in enumerate(calls):
                t = start + 1000 * i
                kids = (("ember.segment", SEGMENT, t + 10, t + 20 + i),)
                bus.emit_span("ember.call", md, t, t + 100 + i, stop_metadata=stop, children=kids)

    path = tmp_path / "t.jsonl"
    with record(path) as rec:
        start = time.monotonic_ns() + 1
        handlers = bus.list_handlers()
        (spans_id,) = [h for h in handlers if rec.run_id in h and handlers[h] == {bus.SPANS_SENT}]
        send_all(start)
        rec.flush()
        half = len(path.read_bytes().splitlines()) - 2 * inside  # less the run span's lines
        bus.detach(spans_id)
        send_all(start)
    lines = [line for line in path.read_bytes().splitlines() if b'"span_kind":"run"' not in line]
    by_span_handler, by_events = _renumbered(lines[1:half]), _renumbered(lines[half:])
    lost = 1 if case == "a stop past 64 bits between" else 0  # orjson refuses it (logged)
    assert len(by_events) == 4 * len(calls) - lost
    assert by_span_handler == by_events  # byte for byte, but for the span ids
    assert filled == [one]


def test_a_drain_of_calls_that_started_before_the_recording_starts_them_at_zero(tmp_path):
    # the columns take no clamping: a call that started before the run's start is written
    # call by call, at ts_ns 0 (as its events are)
    path = tmp_path / "t.jsonl"
    early = time.monotonic_ns()
    with record(path):
        for i in range(10):
            kids = (("ember.segment", SEGMENT, early + i, early + 20 + i),)
            bus.emit_span("ember.call", CALL, early + i, early + 50 + i, children=kids)
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()[1:]]
    assert len(records) == 40
    assert {r["ts_ns"] for r in records if r["kind"] == "span_start"} == {0}
    assert validate_file(path).ok
