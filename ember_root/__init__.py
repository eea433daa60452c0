"""Ember: see why models recompile, what compile caches evict, and where memory goes."""

__version__ = "0.1.0"
