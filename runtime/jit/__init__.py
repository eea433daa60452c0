"""Compiling and calling a model's segments with ``jax.jit``.

``compiled`` is the call driver (``compile``, ``run``); ``segment_build`` builds programs
(ahead of time or on a miss), ``segment_trace`` traces and compiles one segment,
``segment_cache`` is the per-position LRU, ``diskcache`` the program store on disk,
``fastpath`` the steady-state direct call and ``xla_cpu`` the XLA:CPU options. In the shape
of JAX's compilation cache: an interface, an LRU policy and a driver.
"""
