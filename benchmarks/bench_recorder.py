"""Cost of the event bus and of recording, side by side with their floors.

1. ``bus.emit`` with no handler attached, as a ratio to a bare no-op Python call
   (target <= 2x): the cost every model call pays when nobody records.
2. Recording end to end (``bus.emit`` -> recorder handler -> record dict -> orjson ->
   buffered file write), in microseconds per event and as a ratio to the floor of
   ``orjson.dumps`` + a buffered write of the same record (target <= 3x).

Run: ``.venv/bin/python benchmarks/bench_recorder.py``
"""

from __future__ import annotations

import io
import os
import tempfile
import timeit

import orjson

from ember.recorder import bus, record

N = 200_000
SHAPES = [{"name": "input_ids", "shape": [1, 17], "dtype": "int64"}]
METADATA = {
    "source": "model.onnx",
    "position": 12,
    "shapes": SHAPES,
    "key": "0123456789abcdef",
    "statics": [],
}
MEASUREMENTS = {"count": 1}


def best_per_call(fn, number=N, repeat=5) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number


def noop(name, measurements=None, metadata=None):
    return None


def main() -> None:
    bare = best_per_call(lambda: noop("ember.cache.hit", MEASUREMENTS, METADATA))
    emit_idle = best_per_call(lambda: bus.emit("ember.cache.hit", MEASUREMENTS, METADATA))

    with tempfile.TemporaryDirectory() as tmp:
        # the floor: serialise the finished record and append it to a buffered file
        rec = {"kind": "cache", "ts_ns": 123456, "action": "hit", "span_id": None, **METADATA}
        with open(
            os.path.join(tmp, "floor.jsonl"), "wb", buffering=io.DEFAULT_BUFFER_SIZE * 16
        ) as f:
            opt = orjson.OPT_APPEND_NEWLINE
            floor = best_per_call(lambda: f.write(orjson.dumps(rec, option=opt)))

        with record(os.path.join(tmp, "run.jsonl")):
            recorded = best_per_call(
                lambda: bus.emit("ember.cache.hit", MEASUREMENTS, METADATA), number=N // 2
            )

    print(f"bare no-op call            {bare * 1e9:8.1f} ns")
    print(
        f"emit, no handler           {emit_idle * 1e9:8.1f} ns   ratio {emit_idle / bare:5.2f}x"
        "  (target <= 2x)"
    )
    print(f"orjson + buffered write    {floor * 1e6:8.3f} us")
    print(
        f"recording end to end       {recorded * 1e6:8.3f} us   ratio {recorded / floor:5.2f}x"
        "  (target <= 3x)"
    )


if __name__ == "__main__":
    main()
