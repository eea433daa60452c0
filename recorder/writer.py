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

Write failures (a full disk, a quota, a file size limit): the buffer hands its bytes to
``_TraceFile``, which writes them with ``os.write`` and never raises. On the first failure
it warns once (``TraceWriteWarning``: the file, the error, the records lost so far) and
writes nothing more, so the file keeps whole lines (at most one partial last line); every
record after that is counted as lost. The program keeps running, and ``close()`` raises
``TraceWriteError`` naming the file and how many records were not written. A path that
cannot be opened at all (a parent that is a file, ``/proc/...``) is a ``TraceWriteError``
when the writer is made, saying why.
"""

from __future__ import annotations

import errno
import io
import os
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

__all__ = [
    "ENCODE_OPTIONS",
    "TraceWriteError",
    "TraceWriteWarning",
    "TraceWriter",
    "encode_default",
]

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


class TraceWriteError(OSError):
    """A trace file could not be opened, or records could not be written to it."""


class TraceWriteWarning(RuntimeWarning):
    """Writing a trace failed; the program goes on and the records are counted as lost."""


class _TraceFile(io.RawIOBase):
    """The file under the buffer: ``os.write`` in a loop; a failure is counted, not raised."""

    def __init__(self, path: Path, fd: int) -> None:
        super().__init__()
        self.path = path
        self.fd = fd
        self.lost = 0  # records (lines) not written
        self.error: OSError | None = None

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        size = len(data)
        if self.error is not None:
            self.lost += bytes(data).count(b"\n")
            return size
        view = memoryview(data).cast("B")
        done = 0
        try:
            while done < size:
                n = os.write(self.fd, view[done:])
                if n <= 0:  # a device that takes nothing: as full
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                done += n
        except OSError as exc:
            self.error = exc
            # a line whose end was not written is lost (the file may end with its start)
            self.lost += bytes(view[done:]).count(b"\n")
            warnings.warn(
                f"ember: writing the trace {self.path} failed ({exc.strerror or exc}); "
                f"{self.lost} record(s) lost so far, and no more will be written to it. "
                "The program goes on; the trace will be incomplete.",
                TraceWriteWarning,
                stacklevel=2,
            )
        return size

    def close(self) -> None:
        if not self.closed:
            try:
                os.close(self.fd)
            except OSError as exc:  # a network file system may report a failed write here
                if self.error is None:
                    self.error = exc
            super().close()


def _open_trace(path: Path) -> int:
    """Create or truncate ``path`` for appending; a ``TraceWriteError`` that says why not."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
        if blocker is not None:
            why = f"{blocker} is a file, not a folder"
        else:
            why = f"cannot create the folder {path.parent} ({exc.strerror or exc})"
        raise _open_error(path, why, exc) from exc
    try:
        # Truncate, then append: O_APPEND makes each flush land at the end of the file.
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o666)
    except OSError as exc:
        if path.is_dir():
            why = "it is a folder"
        elif exc.errno == errno.ENOENT:  # the folder exists: it takes no new files (/proc)
            why = f"the folder {path.parent} does not take new files ({exc.strerror})"
        else:
            why = exc.strerror or str(exc)
        raise _open_error(path, why, exc) from exc


def _open_error(path: Path, why: str, exc: OSError) -> TraceWriteError:
    error = TraceWriteError(f"cannot write the trace {path}: {why}; record to another path")
    error.errno = exc.errno
    return error


class TraceWriter:
    """Append JSON lines to ``path``. Thread-safe. Use as a context manager or ``close()``."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        flush_interval: float = 1.0,
        buffer_bytes: int = 1 << 16,
        before_flush: Callable[[], None] | None = None,
    ) -> None:
        self.path = Path(path)
        # the recorder's deferred records: written before each flush (periodic or asked)
        self._before_flush = before_flush
        self._raw = _TraceFile(self.path, _open_trace(self.path))
        self._file = io.BufferedWriter(self._raw, buffer_size=buffer_bytes)
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
            if self._before_flush is not None and not self._file.closed:
                self._before_flush()
            self._file.flush()
        except ValueError:  # closed meanwhile: close() flushed it
            pass

    def _flush_periodically(self, interval: float) -> None:
        while not self._closed.wait(interval):
            self.flush()

    @property
    def lost(self) -> int:
        """Records that could not be written (a full disk...); 0 while all is well."""
        return self._raw.lost

    def close(self) -> None:
        """Flush and close; ``TraceWriteError`` if records could not be written."""
        self._closed.set()
        if self._file.closed:
            return
        self._file.close()
        error = self._raw.error
        if error is not None:
            failed = TraceWriteError(
                f"the trace {self.path} is incomplete: {self._raw.lost} record(s) were not "
                f"written ({error.strerror or error})"
            )
            failed.errno = error.errno
            raise failed

    @property
    def closed(self) -> bool:
        return self._file.closed

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
