"""Compiled segments on disk: Ember's program store over JAX's persistent compilation cache.

A ``CompiledModel`` with a ``cache_dir`` keeps compiled segments on disk in two layers:

1. **The program store** (``ProgramStore``, files ``<cache_dir>/ember-programs/*.program``):
   the compiled executable of a segment with what its trace learned (which outputs the
   program returns, the values it computed on the host), keyed by a digest of everything
   the program depends on: the model's bytes, the segment's bounds, arguments, parameters
   and static values, the sources of ``ember.runtime``, the JAX version and the device. A
   hit skips tracing, lowering and compiling: a warm load only deserializes.
2. **JAX's persistent cache** (the rest of ``cache_dir``), for a program the store does not
   have: when the lowered program is one XLA compiled before (the same model under
   another name, say), compiling it is a read.

Next to the programs, the store keeps a model's convolution weights in XLA:CPU's kernel
layout (``*.weights``, see ``xla_cpu.oihw_to_hwio``), in one file mapped back into memory
without a copy: relaying out light resnet50's 100 MB was most of a warm load (warm compile
0.48-0.56 s -> 0.16-0.30 s; compile and first call 0.84-1.0 s -> 0.38 s; machine load 12).

Entries are pickles, like JAX's own cache entries: point ``cache_dir`` only at a
directory you trust. The cache is an optimisation and never breaks a call: an entry that
cannot be read (truncated, written by another JAX) or that is not the program its name says
(each entry carries its own digest, so entries swapped between names are noticed) is
logged, removed and compiled again (and stored again, unless JAX's cache gave the program:
on XLA:CPU such a program serialized again does not run, so it is never stored). A
``cache_dir`` that cannot be used (a regular
file, a folder that cannot be created or written) is logged once and the model compiles
without the disk cache.

JAX keeps one global persistent cache. ``disk_cache(path)`` points it at ``path`` for the
duration of one compile (writing every program, whatever its compile time or size) and
puts the caller's own setting back afterwards, so a ``CompiledModel`` with a ``cache_dir``
does not change the cache of the rest of the program. Compiles with a directory are
serialized by a module lock; other threads that compile plain ``jax.jit`` functions at the
same moment may see the directory too.

Whether a program came from the directory is read from JAX's own monitoring events
(``/jax/compilation_cache/cache_hits`` and ``cache_misses``), counted per thread.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import pickle
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ember.recorder.disk_keys import KEY_PARTS, changed_parts, read_parts, write_parts

__all__ = [
    "KEY_PARTS",
    "DiskCacheProbe",
    "ProgramStore",
    "StoredProgram",
    "changed_parts",
    "disk_cache",
    "usable_cache_dir",
]

log = logging.getLogger("ember.runtime")

# Bump when the layout of a stored program changes: old entries then simply miss.
# 2: the entry carries its digest.
_STORE_FORMAT = 2
# Stored weights start at offsets aligned to this (what XLA:CPU needs to alias a buffer).
_ALIGN = 64

_lock = threading.RLock()
_local = threading.local()
_listener_installed = False

_HIT = "/jax/compilation_cache/cache_hits"
_MISS = "/jax/compilation_cache/cache_misses"
_REQUEST = "/jax/compilation_cache/compile_requests_use_cache"


class DiskCacheProbe:
    """Counts JAX's cache events in this thread while the probe is open."""

    __slots__ = ("hits", "misses", "requests")

    def __init__(self) -> None:
        self.hits = 0
        self.misses = 0
        self.requests = 0

    @property
    def result(self) -> str | None:
        """``"hit"``, ``"miss"`` or None when the persistent cache was not asked."""
        if self.hits:
            return "hit"
        if self.misses or self.requests:
            return "miss"
        return None


def _on_event(event: str, **_: object) -> None:
    probe = getattr(_local, "probe", None)
    if probe is None:
        return
    if event == _HIT:
        probe.hits += 1
    elif event == _MISS:
        probe.misses += 1
    elif event == _REQUEST:
        probe.requests += 1


def _install_listener() -> None:
    global _listener_installed
    if _listener_installed:
        return
    from jax import monitoring

    monitoring.register_event_listener(_on_event)
    _listener_installed = True


# cache directories checked in this process: path -> None (usable) or why not (warned once)
_checked: dict[str, str | None] = {}


def usable_cache_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` can hold the disk cache (made if missing, a file can be written).

    Checked once per directory and process; an unusable one is logged once, saying why.
    """
    key = os.fspath(path)
    if key in _checked:
        return _checked[key] is None
    why: str | None = None
    try:
        os.makedirs(key, exist_ok=True)
    except OSError as exc:
        if os.path.exists(key) and not os.path.isdir(key):
            why = "it is a file, not a folder"
        else:
            blocker = next((p for p in Path(key).parents if p.is_file()), None)
            why = f"{blocker} is a file" if blocker else f"cannot create it ({exc.strerror})"
    if why is None:
        try:
            fd, probe = tempfile.mkstemp(dir=key, prefix=".ember-probe-")
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            why = f"cannot write in it ({exc.strerror or exc})"
    with _lock:
        if key not in _checked:
            _checked[key] = why
            if why is not None:
                log.warning(
                    "ember: the cache directory %s cannot be used (%s); compiling without "
                    "the disk cache",
                    key,
                    why,
                )
    return why is None


@contextmanager
def disk_cache(path: str | os.PathLike[str] | None) -> Iterator[DiskCacheProbe]:
    """Compile inside with JAX's persistent cache at ``path`` (None, or a directory that
    cannot be used: no disk cache)."""
    probe = DiskCacheProbe()
    if path is None or not usable_cache_dir(path):
        yield probe
        return
    from jax._src import compilation_cache
    from jax._src import config as jax_config

    with _lock:
        _install_listener()
        with ExitStack() as stack:
            stack.enter_context(jax_config.enable_compilation_cache(True))
            stack.enter_context(jax_config.compilation_cache_dir(os.fspath(path)))
            stack.enter_context(jax_config.persistent_cache_min_compile_time_secs(0.0))
            stack.enter_context(jax_config.persistent_cache_min_entry_size_bytes(-1))
            compilation_cache.reset_cache()
            previous = getattr(_local, "probe", None)
            _local.probe = probe
            try:
                yield probe
            finally:
                _local.probe = previous
                compilation_cache.reset_cache()


@dataclass(frozen=True)
class StoredProgram:
    """A compiled segment as the program store gives it back."""

    exe: Any
    dynamic_outputs: tuple[str, ...]
    host_outputs: dict[str, Any]
    needs_x64: bool
    forwards: tuple[int, ...] | None = None


def _forwards(stored: Any) -> tuple[int, ...] | None:
    """A stored entry's ``forwards`` (None, so the program runs, where it has none)."""
    return None if stored is None else tuple(int(i) for i in stored)


@functools.cache
def _runtime_fingerprint() -> str:
    """A digest of ``ember.runtime``'s sources: a change to an op must not reuse programs."""
    h = hashlib.sha256()
    root = Path(__file__).parent
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()


@functools.cache
def _platform_parts() -> dict[str, str]:
    """The versions and the device a compiled program depends on."""
    import jax
    import jaxlib

    from ember import __version__ as ember_version

    device = jax.devices()[0]
    return {
        "ember": ember_version,
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "backend": device.platform,
        "device": device.device_kind,
    }


class ProgramStore:
    """Compiled segments of one model in ``<cache_dir>/ember-programs``.

    ``model_bytes`` is the serialized model: every program of the store depends on it.
    Safe to share between threads and processes: entries are written to a temporary file
    and renamed, so a reader sees a whole entry or none.
    """

    def __init__(self, cache_dir: str | os.PathLike[str], model_bytes: bytes) -> None:
        self.cache_dir = os.fspath(cache_dir)
        self.directory = Path(cache_dir) / "ember-programs"
        self._model_digest = hashlib.sha256(model_bytes).hexdigest()
        self._save_failed = False

    def key_parts(self) -> dict[str, Any]:
        """What every entry of this store depends on besides its segment, part by part (the
        schema's ``DiskKey``): the model, Ember, its runtime's sources, JAX, jaxlib, the
        backend and device, ``XLA_FLAGS`` and the entry layout."""
        return {
            "model": self._model_digest[:16],
            "runtime": _runtime_fingerprint()[:16],
            **_platform_parts(),
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "store_format": _STORE_FORMAT,
        }

    def digest(self, *segment_key: Any) -> str:
        """The entry name for a segment: ``segment_key`` is everything that tells it apart."""
        parts = self.key_parts()
        text = repr(
            (self._model_digest, _runtime_fingerprint(), sorted(parts.items()), segment_key)
        )
        return hashlib.sha256(text.encode()).hexdigest()

    def site(self, *segment_key: Any) -> str:
        """A name for the segment alone (its position, arguments, statics), whatever the
        model's bytes, versions or device: where the key parts of its last entry are kept,
        so that a miss can say which part changed."""
        return hashlib.sha256(repr(segment_key).encode()).hexdigest()

    def _site_path(self, site: str) -> Path:
        return self.directory / f"{site}.key.json"

    def note_key(self, site: str) -> None:
        """Keep the key parts of the entry just stored for ``site`` (see ``explain_miss``)."""
        if not usable_cache_dir(self.cache_dir):
            return
        try:
            write_parts(self._site_path(site), self.key_parts())
        except Exception as exc:  # only the next miss's explanation is lost
            self._could_not_store("key parts", self._site_path(site), exc)

    def explain_miss(self, site: str) -> str | None:
        """Why the store has no entry for a segment it stored before (under another key):
        the key parts that changed since (``jaxlib 0.10.1 -> 0.10.2``). None when the
        segment was never stored here, or its parts cannot be read."""
        before = read_parts(self._site_path(site))
        return None if before is None else changed_parts(before, self.key_parts())

    def path(self, digest: str) -> Path:
        return self.directory / f"{digest}.program"

    def weights_path(self, digest: str) -> Path:
        return self.directory / f"{digest}.weights"

    def load_weights(self, digest: str) -> dict[str, np.ndarray] | None:
        """The stored arrays, read-only views of the file mapped into memory (no copy: jax's
        ``device_put`` of such a view on the CPU aliases it, and the pages are read when a
        program first reads them); None when there are none or they cannot be used. The
        store never changes a file in place (it writes aside and renames, and removes by
        unlinking), so a mapping stays valid for as long as its arrays live; do not truncate
        or rewrite ``*.weights`` files of a running process by hand."""
        path = self.weights_path(digest)
        if not usable_cache_dir(self.cache_dir):
            return None
        try:
            try:
                data = np.memmap(path, dtype=np.uint8, mode="r")
            except (FileNotFoundError, NotADirectoryError):
                return None
            size = int(data[:8].view("<u8")[0])
            header = pickle.loads(data[8 : 8 + size].tobytes())
            if header.get("digest") != digest:
                raise ValueError(
                    f"it holds the weights {str(header.get('digest'))[:16]}..., not "
                    f"{digest[:16]}...: entries renamed or swapped"
                )
            arrays = {}
            for name, dtype, shape, offset, nbytes in header["arrays"]:
                if offset + nbytes > data.size:
                    raise ValueError(f"{name!r} ends past the end of the file (truncated)")
                arrays[name] = data[offset : offset + nbytes].view(dtype).reshape(shape)
            return arrays
        except Exception as exc:  # a bad entry costs a relayout, never the call
            log.warning(
                "ember: ignoring stored weights %s (%s: %s); it is removed, and the weights "
                "laid out again",
                path,
                type(exc).__name__,
                exc,
            )
            try:
                path.unlink(missing_ok=True)
            except OSError:
                pass
            return None

    def save_weights(self, digest: str, arrays: Mapping[str, np.ndarray]) -> bool:
        """Write ``arrays`` (contiguous) in one file, each at an offset aligned to 64 bytes
        so that it can be mapped and aliased; False (and a warning) when it cannot."""
        path = self.weights_path(digest)
        if not usable_cache_dir(self.cache_dir):
            return False
        try:
            table = []
            offset = 0
            for name, a in arrays.items():
                table.append((name, a.dtype.str, a.shape, offset, a.nbytes))
                offset += -(-a.nbytes // _ALIGN) * _ALIGN
            # the header's own size moves the data: lay it out until the offsets settle
            start = 0
            while True:
                header = pickle.dumps(
                    {"digest": digest, "arrays": [(*t[:3], start + t[3], t[4]) for t in table]},
                    protocol=pickle.HIGHEST_PROTOCOL,
                )
                need = -(-(8 + len(header)) // _ALIGN) * _ALIGN
                if need == start:
                    break
                start = need

            def write(f: BinaryIO) -> None:
                f.write(np.array([len(header)], "<u8").tobytes())
                f.write(header)
                for (_, _, _, rel, _), a in zip(table, arrays.values(), strict=True):
                    f.seek(start + rel)
                    f.write(np.ascontiguousarray(a).data)

            self._write_atomically(path, write)
            return True
        except Exception as exc:  # the model still runs; only the next load pays
            return self._could_not_store("weights", path, exc)

    def load(self, digest: str) -> StoredProgram | None:
        """The stored program, or None when there is none or it cannot be used."""
        path = self.path(digest)
        if not usable_cache_dir(self.cache_dir):
            return None
        try:
            from jax.experimental import serialize_executable

            try:
                data = path.read_bytes()
            except (FileNotFoundError, NotADirectoryError):  # not stored (yet): save() says why
                return None
            entry = pickle.loads(data)
            if entry.get("digest") != digest:
                raise ValueError(
                    f"it holds the program {str(entry.get('digest'))[:16]}..., not "
                    f"{digest[:16]}...: entries renamed or swapped"
                )
            exe = serialize_executable.deserialize_and_load(
                entry["payload"], entry["in_tree"], entry["out_tree"]
            )
            return StoredProgram(
                exe=exe,
                dynamic_outputs=tuple(entry["dynamic_outputs"]),
                host_outputs=entry["host_outputs"],
                needs_x64=bool(entry["needs_x64"]),
                forwards=_forwards(entry.get("forwards")),
            )
        except Exception as exc:  # a bad entry costs a compile, never the call
            log.warning(
                "ember: ignoring compiled program %s (%s: %s); it is removed, and the "
                "program compiled (and stored again unless JAX's own cache has it)",
                path,
                type(exc).__name__,
                exc,
            )
            try:  # so that it is neither read nor warned about again
                path.unlink(missing_ok=True)
            except OSError:
                pass
            return None

    def save(self, digest: str, program: StoredProgram) -> bool:
        """Write ``program``; False (and a warning) when it cannot be stored."""
        path = self.path(digest)
        if not usable_cache_dir(self.cache_dir):
            return False
        try:
            from jax.experimental import serialize_executable

            payload, in_tree, out_tree = serialize_executable.serialize(program.exe)
            data = pickle.dumps(
                {
                    "digest": digest,
                    "payload": payload,
                    "in_tree": in_tree,
                    "out_tree": out_tree,
                    "dynamic_outputs": list(program.dynamic_outputs),
                    "host_outputs": program.host_outputs,
                    "needs_x64": program.needs_x64,
                    "forwards": program.forwards,
                },
                protocol=pickle.HIGHEST_PROTOCOL,
            )
            self._write_atomically(path, lambda f: f.write(data))
            return True
        except Exception as exc:  # the program still runs; only the next load pays
            return self._could_not_store("compiled program", path, exc)

    def _write_atomically(self, path: Path, write: Callable[[BinaryIO], object]) -> None:
        """``write`` fills a temporary file in the store's directory, which then replaces
        ``path`` in one step: a reader sees the old file or the whole new one, never a part."""
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                write(f)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def _could_not_store(self, what: str, path: Path, exc: Exception) -> bool:
        """Say that ``what`` could not be stored at ``path`` (a warning the first time, debug
        after: a full disk would otherwise warn at every compile); returns False."""
        (log.debug if self._save_failed else log.warning)(
            "ember: could not store the %s %s (%s: %s)",
            what,
            path,
            type(exc).__name__,
            exc,
        )
        self._save_failed = True
        return False
