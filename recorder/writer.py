"""The JSONL writer: whole lines, buffered, flushed at least once a second.

Records arrive as dicts that are valid by construction (the recorder builds them from
the schema's field lists), so the hot path is ``orjson.dumps`` and one write into an
``io.BufferedWriter``: the same work as the benchmark's floor. A background thread
flushes the buffer every ``flush_interval`` seconds, so a process that is killed loses
at most that much, and the file ends with at most one partial line (a line that
straddled the buffer's edge when the process died); ingest reports and skips it.

Thread-safety: ``BufferedWriter`` guards its buffer with its own lock (documented in
``io``), so each ``write`` of one whole line lands contiguously even when threads
write at once; the writer adds no lock of its own on the hot path.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import orjson

__all__ = ["TraceWriter", "ENCODE_OPTIONS", "encode_default"]

ENCODE_OPTIONS = orjson.OPT_APPEND_NEWLINE | orjson.OPT_SERIALIZE_NUMPY


def encode_default(value: Any) -> Any:
    # numpy scalars and other objects that orjson does not know: their Python value,
    # else their text, so a record is never lost to an odd attribute.
    item = getattr(value, "item", None)
    if callable(item):
        return item()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


class TraceWriter:
    """Append JSON lines to ``path``. Thread-safe. Use as a context manager or ``close()``."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        flush_interval: float = 1.0,
        buffer_bytes: int = 1 << 16,
    ) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Truncate, then append: O_APPEND makes each flush land at the end of the file.
        self.path.write_bytes(b"")
        self._file = open(self.path, "ab", buffering=buffer_bytes)  # noqa: SIM115 (closed in close())
        self._closed = threading.Event()
        self._flusher = threading.Thread(
            target=self._flush_periodically,
            args=(flush_interval,),
            daemon=True,
            name=f"ember-flush-{self.path.name}",
        )
        self._flusher.start()
        # The hot path of the recorder: append one whole encoded line (``orjson.dumps(
        # record, default=encode_default, option=ENCODE_OPTIONS)``) without a frame of ours.
        self.append = self._file.write

    def write(self, record: dict[str, Any]) -> None:
        line = orjson.dumps(record, default=encode_default, option=ENCODE_OPTIONS)
        try:
            self._file.write(line)
        except ValueError:
            if self._file.closed:
                raise ValueError(f"trace {self.path} is closed; open a new record()") from None
            raise

    @property
    def lines(self) -> int:
        """Lines written so far. Counts the file: meant for reports, not for hot loops."""
        self.flush()
        with open(self.path, "rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))

    def flush(self) -> None:
        try:
            self._file.flush()
        except ValueError:  # closed meanwhile: close() flushed it
            pass

    def _flush_periodically(self, interval: float) -> None:
        while not self._closed.wait(interval):
            self.flush()

    def close(self) -> None:
        self._closed.set()
        self._file.close()

    @property
    def closed(self) -> bool:
        return self._file.closed

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
