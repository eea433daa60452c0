"""Ember: see why models recompile, what compile caches evict, and where memory goes.

``ember.expect(recompiles=0)`` puts a compile budget on a block (see ``ember.budget``);
the packages are ``ember.runtime``, ``ember.recorder``, ``ember.analysis`` and the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["CompileBudgetExceeded", "__version__", "expect"]

if TYPE_CHECKING:
    from .budget import CompileBudgetExceeded, expect


def __getattr__(name: str) -> Any:
    # imported on first use: ``import ember`` stays light (the budget imports the recorder)
    if name in ("expect", "CompileBudgetExceeded"):
        from . import budget

        return getattr(budget, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
