"""The parts of a disk-cache key, and which of them changed since a cache stored an entry.

A compiled program on disk depends on the model, Ember, JAX, jaxlib, the device, the XLA
flags... (the schema's ``DiskKey``). A cache names its entries by a digest of all of them,
so a run that misses an entry another run stored cannot tell why from the name. Both of
Ember's disk caches keep, next to the entries, the parts of the last key stored for a
*site* (one segment, one jitted function) in a small JSON file; a miss at a site that has
one names the parts that differ (``jaxlib 0.10.1 -> 0.10.2``).

Used by the runtime's program store (``runtime/diskcache.py``) and by the JAX bridge for
JAX's own persistent compilation cache (``jax_compiles.py``). No JAX import here.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["KEY_PARTS", "changed_parts", "read_parts", "write_parts"]

# the order a miss names the parts that changed in; the names are the schema's DiskKey
KEY_PARTS = (
    "model",
    "ember",
    "runtime",
    "jax",
    "jaxlib",
    "backend",
    "device",
    "xla_flags",
    "store_format",
)


def changed_parts(before: Mapping[str, Any], now: Mapping[str, Any]) -> str | None:
    """``jaxlib 0.10.1 -> 0.10.2; model 1a2b... -> 3c4d...``: the key parts that differ, in
    ``KEY_PARTS`` order; None when none does."""
    changes = [
        f"{name} {before.get(name) or '(none)'} -> {now.get(name) or '(none)'}"
        for name in KEY_PARTS
        if before.get(name) != now.get(name)
    ]
    return "; ".join(changes) or None


def read_parts(path: Path) -> dict[str, Any] | None:
    """The key parts kept at ``path``; None when there are none or they cannot be read."""
    try:
        parts = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return parts if isinstance(parts, dict) else None


def write_parts(path: Path, parts: Mapping[str, Any]) -> None:
    """Keep ``parts`` at ``path``, written aside and renamed (a reader sees all or none).
    Raises ``OSError`` when it cannot."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(json.dumps(dict(parts), sort_keys=True).encode())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
