"""Plan the graph breaks: where a graph must leave ``jax.jit`` and what runs there.

``plan`` finds the nodes that need values only a run has (data-dependent shapes, control flow
on tensors) and splits the graph into segments; ``subgraphs`` compiles and caches what a
break node runs (a whole ``Loop``, its body, an ``If`` branch); ``programs`` are those
programs' parts (what they take of the enclosing scope).
"""
