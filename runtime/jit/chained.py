"""The direct call of a graph whose breaks only bring ``If`` conditions to the host.

A wake-word model with a verifier (openwakeword's hey_jarvis): a program computes a score,
an ``If`` on the score's threshold runs the verifier network or passes the score on. The
condition is computed on the device, so the ``If`` is a graph break (DESIGN: an ``If`` on a
computed condition): the first segment's program runs, the condition comes to the host, and
the next segment, one program per condition value, runs the taken branch. The checked path
(``CompiledModel._run_segments``) redoes on each call what is the same from call to call:
the segment cache's keys (the arguments' shapes and the statics hashed), its lookups under
the model's lock, an environment of the model's constants, the listeners' checks. On
hey_jarvis that was ~80 us a call around ~90 us of programs (AMD EPYC, 2 vCPUs,
2026-12-04).

``ChainCalls`` keeps, after a checked call that nobody listened to (``register``), each
segment's program by the values of the conditions it was compiled for; ``try_call`` then
runs them in a row: a program, its conditions to the host, the next segment's program for
their values. It returns None (the checked path decides) when no program is registered for
a condition's value, when jax's call refuses the inputs (other shapes or dtypes), and while
anyone listens (``bus.generation``): the checked path then emits every event as before.
As for ``SpecializedCalls``, a direct call does not touch the segment cache's recency;
an entry the cache evicts is forgotten here (``forget``), so its program is not kept alive.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.recorder import bus
from ember.runtime.describe import static_key
from ember.runtime.graph.ir import to_host
from ember.runtime.jit.fastpath import CALL_EVENTS, PY_SCALARS, jax_array_type
from ember.runtime.jit.segment_trace import Entry

__all__ = ["ChainCalls", "Link"]


@dataclass(frozen=True)
class Link:
    """One segment of the chain: the values it takes (``args``), the conditions its program
    was compiled for (``statics``: values on the host), and the conditions brought to the
    host after it (``reads``: the next ``If``'s)."""

    args: tuple[str, ...]
    statics: tuple[str, ...]
    reads: tuple[str, ...]


@dataclass(frozen=True)
class _Step:
    """A segment's program as the chain calls it."""

    entry: Entry  # the segment cache's entry (to forget it when evicted)
    call: Callable[..., Any]  # jax's C++ call of the program, the parameters bound first
    dtypes: tuple[np.dtype[Any], ...]  # its arguments': numpy inputs of others are refused
    outputs: tuple[str, ...]  # the names of what it computes, in order
    host_outputs: Mapping[str, Any]  # values its trace found on the host (read-only)
    forwards: tuple[int, ...] | None  # per output, the argument it is (nothing to run)
    x64: bool  # called inside jax.enable_x64 (it has 64-bit arguments)


class ChainCalls:
    """The direct calls of a graph of segments between ``If`` conditions brought to the
    host (see the module docstring)."""

    __slots__ = ("consts", "generation", "inputs", "links", "n_inputs", "names", "steps")

    def __init__(
        self, links: Sequence[Link], output_names: tuple[str, ...], inputs: tuple[str, ...]
    ) -> None:
        self.links = tuple(links)
        self.names = output_names
        self.inputs = frozenset(inputs)  # the model's input names
        self.n_inputs = len(inputs)
        # the outputs that are the model's constants (given at registration)
        self.consts: dict[str, Any] = {}
        # per link, its registered steps by the static key of its conditions' values
        self.steps: tuple[dict[Any, _Step], ...] = tuple({} for _ in self.links)
        self.generation = -1

    def try_call(self, inputs: Mapping[str, Any]) -> dict[str, Any] | None:
        """The registered programs run in a row; None (the checked path) when one is missing
        for a condition's value, the inputs do not fit, or the bus changed since they were
        registered (someone may listen)."""
        if (
            bus.generation != self.generation
            or type(inputs) is not dict  # a list of pairs, say: the checked path says why
            or len(inputs) != self.n_inputs
        ):
            return None
        env = {**self.consts, **inputs}
        for name, value in inputs.items():
            if type(value) in PY_SCALARS:  # read as check_inputs reads it (an int: int64)
                env[name] = np.asarray(value)
        try:
            for link, steps in zip(self.links, self.steps, strict=True):
                if link.statics:
                    step = steps.get(tuple([static_key(env[n]) for n in link.statics]))
                else:
                    step = steps.get(())
                if step is None:
                    return None
                outs = _run(step, [env[n] for n in link.args])
                if outs is None:
                    return None
                if step.host_outputs:
                    env.update(step.host_outputs)
                env.update(zip(step.outputs, outs, strict=True))
                for name in link.reads:
                    env[name] = to_host(env[name])
            return {n: env[n] for n in self.names}
        except (KeyError, IndexError, TypeError, AttributeError, ValueError):
            # a missing input, an input without a dtype, or jax's C++ call refusing other
            # shapes or dtypes: the checked path says what is wrong
            return None

    def program_for(self, inputs: Mapping[str, Any]) -> None:
        """None: a chain runs several programs, not one (``CompiledModel.program_for``)."""
        return None

    def register(
        self,
        used: Sequence[tuple[Entry, Mapping[str, Any], Sequence[Any]]],
        params: Sequence[tuple[Any, ...]],
        base: Mapping[str, Any],
        generation: int,
    ) -> None:
        """After a checked call: each link's program for the conditions' values it ran with.
        ``used``: per link, (entry, its statics, its arguments); ``params``: per link, the
        program's parameters; ``base``: the model's constants (an output may be one);
        ``generation``: the bus's, read before the call first asked whether anyone listens
        (a handler attached since then gets the checked path). Called under the model's
        lock, as the segment cache evicts: an entry evicted meanwhile is not registered."""
        if len(used) != len(self.links) or bus.listening(*CALL_EVENTS):
            return
        built = []
        for (entry, statics, args), link, bound in zip(used, self.links, params, strict=True):
            if entry.exe is None or entry.guarded or entry.evicted:
                return  # an eager segment, a program that checks its own guesses, or gone
            # a program that passes values on is not run (``_run``), so jax's call would not
            # check the model inputs it also takes: such a link always runs its program
            forwards = None if self.inputs.intersection(link.args) else entry.forwards
            cpp = getattr(entry.exe, "_call", None) or entry.exe
            call = functools.partial(cpp, bound) if bound else cpp
            dtypes = tuple(np.dtype(getattr(a, "dtype", np.float32)) for a in args)
            key = tuple(static_key(statics[n]) for n in link.statics)
            step = _Step(
                entry,
                call,
                dtypes,
                tuple(entry.dynamic_outputs),
                entry.host_outputs,
                forwards,
                entry.needs_x64,
            )
            built.append((key, step))
        if generation != self.generation:
            self.steps = tuple({} for _ in self.links)
            self.generation = generation
        self.consts = {n: base[n] for n in self.names if n in base and n not in self.inputs}
        for steps, (key, step) in zip(self.steps, built, strict=True):
            steps[key] = step

    def forget(self, entry: Entry) -> None:
        """The segment cache evicted ``entry``: its direct calls go too."""
        self.steps = tuple(
            {k: s for k, s in steps.items() if s.entry is not entry} for steps in self.steps
        )


def _run(step: _Step, args: list[Any]) -> Sequence[Any] | None:
    """``step``'s outputs for ``args``; None when a numpy argument has another dtype (jax
    would narrow it to the program's type: the checked path refuses it). ``try_call`` made
    Python scalar inputs numpy already."""
    array = jax_array_type()
    for a, dtype in zip(args, step.dtypes, strict=True):
        if type(a) is not array and a.dtype != dtype:
            return None
    forwards = step.forwards
    if forwards is not None and all(type(args[i]) is array for i in forwards):
        return [args[i] for i in forwards]  # a pass-through: nothing to run (Entry.run)
    if step.x64:
        import jax

        with jax.enable_x64(True):
            return step.call(*args)
    return step.call(*args)
