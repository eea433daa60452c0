"""Entry point of the ``ember`` command: importing a command module registers it."""

from __future__ import annotations

from . import (
    analysis,  # noqa: F401
    compare,  # noqa: F401
    dashboard,  # noqa: F401
    demo,  # noqa: F401
    run,  # noqa: F401
    trends,  # noqa: F401
    validate,  # noqa: F401
)
from .app import app

__all__ = ["app"]

if __name__ == "__main__":
    app()
