"""Records a gradient with ``ember.recorder`` and checks that JAX is imported only when
``ember.recorder.jax`` is; prints ``ok``:
``python -m tests.recordings.no_jax_until_asked TRACE``."""

from __future__ import annotations

import importlib
import sys

import ember.recorder


def main(argv: list[str]) -> None:
    with ember.recorder.record(argv[0]) as rec:
        rec.gradient("params", "w", "present", 1.0)
    assert "jax" not in sys.modules, "importing ember.recorder imported jax"
    importlib.import_module("ember.recorder.jax")
    assert "jax" in sys.modules
    print("ok")


if __name__ == "__main__":
    main(sys.argv[1:])
