"""The direct call: a compiled model's steady-state call with as little Python as possible
around jax's C++ call of its program.

A graph without breaks runs as one program. Once that program has run once for some inputs
(jax has then built its C++ call) and nobody listens to calls, the next calls with inputs of
the same shapes and dtypes go straight to the C++ call, which checks shapes and dtypes
itself. A model holds at most one owner of such calls (``CompiledModel._fast``):

- ``WholeGraphCall``: the program ``compile()`` compiled ahead for the compile-time shapes.
  Its ``try_call`` starts as the checked call (``checked``): it compares shapes and dtypes,
  opens the ``ember.call`` span when someone listens, and calls the program. After a call
  while nobody listens to calls, ``try_call`` becomes the direct call, valid for one
  ``bus.generation``: after an attach or detach it hands the call back to ``checked``,
  which decides again.
- ``SpecializedCalls``: a graph without breaks not compiled ahead (input shapes unknown at
  ``compile``, or ``If`` conditions computed from the inputs). After each checked call
  that nobody listened to, the model registers the program it ran (``register``), by the
  conditions' values; ``try_call`` computes the conditions on the host (the *prelude*,
  memoised by the small inputs it reads: a sample rate) and calls the program registered
  for them.

``try_call`` returns None when the inputs do not fit (a missing input, other shapes or
dtypes, a numpy input that jax would narrow to the program's 32-bit type): the model's
checked path then decides (the segment cache, or an ``InputError``). ``program_for`` says
which ``Program`` a call would run, for benchmarks and tests.

What these know of their model is given to them when they are built (the program, its
parameters, signature and output names, the prelude's nodes): they hold no reference to
the model, and the closures they install hold only weak references to them, so nothing
here makes a reference cycle: a dropped model frees its device parameters at once, not at
the next garbage collection.
"""

from __future__ import annotations

import functools
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ember.recorder import bus
from ember.recorder import events as E
from ember.runtime.describe import describe_shapes, static_key
from ember.runtime.graph.ir import Node, run_node, to_host
from ember.runtime.inputs import fits
from ember.runtime.model import TensorSpec

__all__ = [
    "CALL_EVENTS",
    "PY_SCALARS",
    "DirectCall",
    "Program",
    "SpecializedCalls",
    "WholeGraphCall",
    "block",
    "direct_call",
    "run_prelude",
]

DirectCall = Callable[[Mapping[str, Any]], "dict[str, Any] | None"]
"""inputs by name -> outputs by name, or None: the checked path decides."""

_END = "end"
_CALL_SPAN = (E.CALL_START, E.CALL_STOP, E.CALL_EXCEPTION)
_SEGMENT_SPAN = (E.start(E.SEGMENT), E.stop(E.SEGMENT), E.exception(E.SEGMENT))
CALL_EVENTS = (*_CALL_SPAN, E.CACHE_HIT, E.start(E.SEGMENT), E.stop(E.SEGMENT), E.start(E.BREAK))
"""What a checked call emits at a cache hit: while any is listened to, no direct call."""


class CompiledSegment(Protocol):
    """What the fast path reads of a compiled segment (the segment cache's entry)."""

    exe: Any
    dynamic_outputs: tuple[str, ...]
    host_outputs: dict[str, Any]
    needs_x64: bool
    evicted: bool  # the segment cache evicted it

    @property
    def key_hex(self) -> str: ...


@dataclass(frozen=True)
class Program:
    """A compiled program as the direct call runs it."""

    call: Callable[..., Any]  # jax's C++ call of the executable, the parameters bound first
    arg_names: tuple[str, ...]  # the model inputs it takes, in order
    dtypes: tuple[np.dtype[Any], ...]  # theirs: numpy inputs of other dtypes are not narrowed
    output_names: tuple[str, ...]  # its outputs, in order: the model's outputs
    x64: bool  # called inside jax.enable_x64 (it has 64-bit arguments)


def block(values: Any) -> None:
    """Wait until ``values`` (a pytree; numpy and None leaves pass) are computed."""
    import jax

    jax.block_until_ready(values)


@functools.cache
def jax_array_type() -> type:
    """The concrete type of jax's arrays (not ``jax.Array``, whose isinstance is slower)."""
    import jax

    return type(jax.device_put(np.zeros((), np.float32)))


def _no_call(inputs: Mapping[str, Any]) -> dict[str, Any] | None:
    return None


# Python scalars: ``check_inputs`` reads them with ``np.asarray`` (an int as int64), and so do
# the direct calls; jax's C++ call would narrow an int to int32 and refuse it, so a sample
# rate given as ``16000`` took the checked path on every call (silero VAD: 2x a call).
PY_SCALARS = (int, float, bool)


def direct_call(
    program: Program,
    guard: tuple[int, int, DirectCall] | None = None,
    record: RecordedCall | None = None,
) -> DirectCall:
    """The call straight into ``program``'s C++ call.

    jax's C++ call refuses jax arrays of other shapes or dtypes itself; anything else (numpy
    arrays, lists, scalars) it converts, and without x64 it narrows int64 and float64 to the
    program's 32-bit types, so their dtype is compared here (one type check for a jax array,
    ~15 ns for a numpy array). With ``guard`` = (generation, number of inputs, fallback),
    the call is valid while ``bus.generation`` is ``generation`` and the inputs are that
    many; otherwise it is ``fallback``'s. With ``record`` (and a guard: its generation is one
    in which someone listens to the call span) each call is recorded (``RecordedCall``); a
    call it refuses is the fallback's, and records nothing here.
    """
    if record is not None and guard is not None:
        return _recorded_direct_call(direct_call(program), guard, record)
    call = program.call
    names = program.output_names
    arg_names = program.arg_names
    dtypes = program.dtypes
    only = names[0] if len(names) == 1 else None
    array = jax_array_type()
    guarded = guard is not None
    generation, n_inputs, fallback = guard if guard is not None else (0, 0, _no_call)

    if len(arg_names) == 1 and not program.x64:
        single, dtype0 = arg_names[0], dtypes[0]

        def direct_one(inputs: Mapping[str, Any]) -> dict[str, Any] | None:
            if guarded and (bus.generation != generation or len(inputs) != n_inputs):
                return fallback(inputs)
            try:
                x = inputs[single]
                if type(x) in PY_SCALARS:
                    x = np.asarray(x)
                if type(x) is not array and x.dtype != dtype0:
                    return None
                outs = call(x)
            except (KeyError, IndexError, TypeError, AttributeError):
                # a missing input, an input without a dtype, or jax's C++ call refusing
                # other shapes or dtypes: the checked path
                return None
            if only is not None:
                return {only: outs[0]}
            return dict(zip(names, outs, strict=True))

        return direct_one

    import jax

    x64 = program.x64
    enable_x64 = jax.enable_x64

    def direct(inputs: Mapping[str, Any]) -> dict[str, Any] | None:
        if guarded and (bus.generation != generation or len(inputs) != n_inputs):
            return fallback(inputs)
        try:
            args = [inputs[n] for n in arg_names]
            for i, (a, dtype) in enumerate(zip(args, dtypes, strict=True)):
                if type(a) in PY_SCALARS:
                    a = args[i] = np.asarray(a)
                if type(a) is not array and a.dtype != dtype:
                    return None
            if x64:  # 64-bit arguments: called as they were traced
                with enable_x64(True):
                    outs = call(*args)
            else:
                outs = call(*args)
        except (KeyError, IndexError, TypeError, AttributeError):
            return None
        if only is not None:
            return {only: outs[0]}
        return dict(zip(names, outs, strict=True))

    return direct


def _recorded_direct_call(
    plain: DirectCall, guard: tuple[int, int, DirectCall], record: RecordedCall
) -> DirectCall:
    """``plain`` (an unguarded direct call) under ``guard``, each call recorded."""
    generation, n_inputs, fallback = guard

    def recorded_direct(inputs: Mapping[str, Any]) -> dict[str, Any] | None:
        if bus.generation != generation or len(inputs) != n_inputs:
            return fallback(inputs)
        start = time.monotonic_ns()
        try:
            result = plain(inputs)
        except BaseException as exc:
            record.failed(inputs, start, exc)
            raise
        if result is None:  # refused: the general path decides (and records)
            return None
        return record.finish(inputs, start, result)

    return recorded_direct


Signature = tuple[tuple[str, tuple[int, ...], "np.dtype[Any]"], ...]
"""(name, shape, dtype) per argument of a program compiled ahead."""


def _fits(args: list[Any], signature: Signature) -> bool:
    """Each of ``args`` has its signature's shape and dtype."""
    for a, (_, shape, dtype) in zip(args, signature, strict=True):
        try:
            if a.shape != shape or a.dtype != dtype:
                return False
        except AttributeError:
            return False
    return True


class RecordedCall:
    """How a whole-graph call is recorded while someone listens to the call span.

    Its events are sent once it ran (``bus.emit_span``), with the times of the run: the call
    span and its one segment (as on the segmented path) inside it; synced, both end at the
    results and the call carries its ``dispatch_ns``. Nothing is emitted while the program
    runs (it runs no other span and compiles nothing), so no span object, context variable
    or handler sits around the work: on a tiny model that was half of recording's cost. A
    call that raises sends the call span's start and exception events. The checked path
    records its calls with ``run``; a recorded direct call (``direct_call(record=...)``)
    with ``finish`` and ``failed``.
    """

    __slots__ = ("describe", "generation", "segment", "source", "state_ref")

    def __init__(
        self,
        state_ref: Callable[[], WholeGraphCall | None],
        source: str | None,
        describe: Callable[[Mapping[str, Any]], dict[str, Any]],
    ) -> None:
        self.state_ref = state_ref  # the owner by weak reference (no cycle through try_call)
        self.source = source
        # the call span's metadata (``source``, the inputs' ``shapes``), made once per input
        # names where the inputs were checked; never changed once sent (a recorder keeps
        # its encoded attributes by the object, ``recorder.span_lines``)
        self.describe = describe
        # the segment span's metadata while it is listened to (None: not), as of the bus's
        # ``generation`` (what is listened to changes only with it)
        self.generation = -1
        self.segment: dict[str, Any] | None = None

    def run(self, state: WholeGraphCall, args: list[Any], inputs: Mapping[str, Any]) -> Any:
        """Run the program on checked ``args`` and record the call."""
        start = time.monotonic_ns()
        try:
            result = state.run(args)
        except BaseException as exc:
            self.failed(inputs, start, exc)
            raise
        return self.finish(inputs, start, result, state)

    def finish(
        self,
        inputs: Mapping[str, Any],
        start: int,
        result: dict[str, Any],
        state: WholeGraphCall | None = None,
    ) -> dict[str, Any]:
        """Record a call that started at ``start`` and returned ``result`` (not yet ready)."""
        ready = time.monotonic_ns()
        state = state or self.state_ref()
        if state is None:  # the model was dropped meanwhile: nothing to describe
            return result
        stop = None
        if bus.sync:
            try:
                state.block(result)
            except BaseException as exc:
                self.failed(inputs, start, exc)
                raise
            # the span ends at the results; the dispatch time goes with it
            stop = {"dispatch_ns": ready - start}
            ready = time.monotonic_ns()
        meta = self.describe(inputs)
        generation = bus.generation
        if generation != self.generation:  # read before ``listening``, as the checked call
            listened = bus.listening(*_SEGMENT_SPAN)
            self.segment = state.segment_meta(self.source) if listened else None
            self.generation = generation
        if self.segment is not None:
            segment = ((E.SEGMENT, self.segment, start, ready),)
            bus.emit_span(E.CALL, meta, start, ready, stop_metadata=stop, children=segment)
        else:
            bus.emit_span(E.CALL, meta, start, ready, stop_metadata=stop)
        return result

    def failed(self, inputs: Mapping[str, Any], start: int, exc: BaseException) -> None:
        """Record a call that raised ``exc``."""
        meta = self.describe(inputs)
        bus.emit_span_exception(E.CALL, meta, start, exc)


class WholeGraphCall:
    """The call of the program compiled ahead for the compile-time shapes (see the module
    docstring): ``try_call`` is ``checked`` until a call nobody listened to, then direct."""

    __slots__ = (
        "__weakref__",
        "call",
        "checked",
        "cpp",
        "entry",
        "exe",
        "names",
        "segment",
        "signature",
        "simple",
        "try_call",
        "unchecked",
        "x64",
    )

    def __init__(
        self,
        entry: CompiledSegment,
        signature: Signature,
        params: tuple[Any, ...],
        output_names: tuple[str, ...],
        *,
        n_inputs: int,
        source: str | None,
        unchecked: tuple[TensorSpec, ...] = (),
    ) -> None:
        self.signature = signature
        # the model's inputs that are not arguments of the program (unused, or read only
        # for their shape): checked against their specs here, as jax's call does not see
        # them; a model with such inputs gets no direct call
        self.unchecked = unchecked
        self.exe = entry.exe
        self.call: Callable[..., Any] = (
            functools.partial(entry.exe, params) if params else entry.exe
        )
        self.x64 = entry.needs_x64
        self.cpp = False  # ``call`` is jax's C++ call (``_use_cpp_call``)
        self.segment: dict[str, Any] | None = None  # ``segment_meta``
        self.entry = entry
        self.names = output_names
        # Outputs straight from the program, in the model's order: build the dict by zip.
        self.simple = not entry.host_outputs and tuple(entry.dynamic_outputs) == self.names
        self.checked: DirectCall = self._checked(n_inputs, source)
        self.try_call: DirectCall = self.checked

    def _checked(self, n_inputs: int, source: str | None) -> DirectCall:
        """The checked call (closures over locals: cheap; the owner by weak reference)."""
        signature = self.signature
        state_ref = weakref.ref(self)
        arg_names = tuple(name for name, _, _ in signature)
        dtypes = tuple(dtype for _, _, dtype in signature)
        single = arg_names[0] if len(arg_names) == 1 else None
        unchecked = self.unchecked
        # The call span's metadata by the inputs' names in the caller's order: inputs that
        # passed ``_fits`` have the signature's shapes and dtypes, so a recorded call
        # describes them once (a model with unchecked inputs, whose shapes may vary, always).
        described: dict[tuple[str, ...], dict[str, Any]] = {}

        def call_metadata(inputs: Mapping[str, Any]) -> dict[str, Any]:
            if unchecked:
                return {"source": source, "shapes": describe_shapes(inputs)}
            names = tuple(inputs)
            meta = described.get(names)
            if meta is None:
                if len(described) >= 8:
                    described.clear()
                meta = described[names] = {"source": source, "shapes": describe_shapes(inputs)}
            return meta

        recording = RecordedCall(state_ref, source, call_metadata)

        def checked(inputs: Mapping[str, Any]) -> dict[str, Any] | None:
            if len(inputs) != n_inputs:
                return None
            try:
                args = [inputs[single]] if single else [inputs[n] for n in arg_names]
                if unchecked and not all(fits(s, inputs[s.name]) for s in unchecked):
                    return None
            except (KeyError, IndexError, TypeError):  # not a mapping of these names
                return None
            state = state_ref()
            if state is None or not _fits(args, signature):
                return None
            # read before ``listening``: a handler attached in between changes it, so a
            # direct call installed below is not taken while that handler listens
            generation = bus.generation
            listened = bus.listening(*_CALL_SPAN)
            result = recording.run(state, args, inputs) if listened else state.run(args)
            if state.simple and not state.x64 and not unchecked and generation == bus.generation:
                # the direct call from now on, recorded while this handler listens
                program = Program(state.call, arg_names, dtypes, state.names, False)
                guard = (generation, n_inputs, state.checked)
                state.try_call = direct_call(program, guard, recording if listened else None)
            return result

        return checked

    def run(self, args: list[Any]) -> dict[str, Any]:
        """One call of the program with checked ``args``; outputs by name."""
        if self.x64:
            import jax

            with jax.enable_x64(True):
                outs = self.call(*args)
        else:
            outs = self.call(*args)
        if not self.cpp:
            self._use_cpp_call()
        if self.simple:
            names = self.names
            if len(names) == 1:
                return {names[0]: outs[0]}
            return dict(zip(names, outs, strict=False))
        result = dict(self.entry.host_outputs)
        result.update(zip(self.entry.dynamic_outputs, outs, strict=True))
        return {n: result[n] for n in self.names}

    def _use_cpp_call(self) -> None:
        """Call jax's C++ call of the program directly, once jax has made it (on its first
        call); ``cpp`` says it is done (recorded calls run through ``run`` each time)."""
        call = self.call
        if call is self.exe or (isinstance(call, functools.partial) and call.func is self.exe):
            cpp = getattr(self.exe, "_call", None)
            if callable(cpp):
                self.call = (
                    functools.partial(cpp, *call.args)
                    if isinstance(call, functools.partial)
                    else cpp
                )
                self.cpp = True
        else:
            self.cpp = True

    def segment_meta(self, source: str | None) -> dict[str, Any]:
        """The metadata of the whole graph's segment span (made once: the bus copies it)."""
        if self.segment is None:
            self.segment = {
                "source": source,
                "position": 0,
                "stop": _END,
                "compiled": True,
                "key": self.entry.key_hex,
            }
        return self.segment

    def block(self, result: dict[str, Any]) -> None:
        """Wait for a call's outputs: each array's own wait when all come from the program
        (a third of ``jax.block_until_ready``'s cost on a dict, on a tiny call)."""
        if self.simple:
            for value in result.values():
                value.block_until_ready()
        else:
            block(result)

    def program_for(self, inputs: Mapping[str, Any]) -> Program | None:
        """The program a call with ``inputs`` runs; None when they do not fit it."""
        names = tuple(name for name, _, _ in self.signature)
        try:
            args = [inputs[n] for n in names]
            if not all(fits(s, inputs[s.name]) for s in self.unchecked):
                return None
        except KeyError:
            return None
        if not _fits(args, self.signature):
            return None
        dtypes = tuple(dtype for _, _, dtype in self.signature)
        return Program(self.call, names, dtypes, self.names, self.x64)


def _shape_key(value: Any) -> Any:
    """An input the prelude reads only the shape of (or nobody reads), as part of the memo's
    key: its shape and dtype (its type when it has none), which the memo's entry checked."""
    return (np.shape(value), getattr(value, "dtype", type(value)))


def _memo_key(value: Any) -> Any:
    """A value the prelude reads, as a key of its memo: ``static_key``, but a numpy array
    keeps its dtype object (``dtype.str`` costs 0.3 us, most of a sample rate's key)."""
    if type(value) is np.ndarray and not value.dtype.hasobject:
        return (value.shape, value.dtype, value.tobytes())
    if type(value) in PY_SCALARS:  # as check_inputs reads it (an int: int64)
        value = np.asarray(value)
        return (value.shape, value.dtype, value.tobytes())
    return static_key(value)


class SpecializedCalls:
    """The direct calls of a graph without breaks not compiled ahead: one program per value
    of the conditions its prelude computes (see the module docstring)."""

    __slots__ = (
        "arg_names",
        "base",
        "checks",
        "generation",
        "memo",
        "n_inputs",
        "names",
        "prelude",
        "prelude_shapes",
        "prelude_values",
        "programs",
        "single",
        "statics",
    )

    def __init__(
        self,
        *,
        arg_names: tuple[str, ...],
        statics: tuple[str, ...],
        output_names: tuple[str, ...],
        n_inputs: int,
        prelude: Sequence[Node] = (),
        prelude_values: tuple[str, ...] = (),
        prelude_shapes: tuple[str, ...] = (),
        unchecked: tuple[TensorSpec, ...] = (),
    ) -> None:
        self.arg_names = arg_names  # the program's arguments
        self.statics = statics  # the conditions (and other statics) the program is for
        self.names = output_names
        self.n_inputs = n_inputs
        self.prelude = tuple(prelude)  # the nodes that compute the conditions on the host
        self.prelude_values = prelude_values  # the inputs whose values the prelude reads
        # The model's inputs that are not arguments of the program (the sample rate, an
        # unused input): jax's call does not check them, so the memo's key holds their
        # shapes and dtypes (values, for those the prelude reads) and an entry is made
        # only for inputs that fit their specs (else the checked path says what is wrong).
        self.checks = unchecked
        keyed = {s.name for s in unchecked}
        self.prelude_shapes = tuple(sorted((set(prelude_shapes) | keyed) - set(prelude_values)))
        # one input decides the key (a sample rate): its key alone, no tuples built
        self.single = (
            prelude_values[0]
            if len(prelude_values) == 1 and not self.prelude_shapes and bool(statics)
            else None
        )
        self.base: Mapping[str, Any] = {}  # the model's constants, given at registration
        # the conditions' static key by the inputs the prelude reads (a sample rate: one)
        self.memo: dict[Any, Any] = {}
        # the registered programs by the conditions' static key (the entry: to forget it)
        self.programs: dict[Any, tuple[CompiledSegment, Program, DirectCall]] = {}
        self.generation = -1

    def _key(self, inputs: Mapping[str, Any]) -> Any:
        """The conditions' static key for ``inputs``; None when the prelude fails on them
        (the checked path says what is wrong with the inputs)."""
        try:
            # the prelude is a function of the small inputs it reads: run once per value
            values, shapes = self.prelude_values, self.prelude_shapes
            if self.single is not None:  # a sample rate: its key alone
                memo_key = _memo_key(inputs[self.single])
            elif not self.statics and not shapes:
                return ()
            else:
                memo_key = (
                    tuple([_memo_key(inputs[n]) for n in values]),
                    tuple([_shape_key(inputs[n]) for n in shapes]),
                )
            key = self.memo.get(memo_key)
            if key is None:
                if not all(fits(s, inputs[s.name]) for s in self.checks):
                    return None
                env = {n: np.asarray(v) if type(v) in PY_SCALARS else v for n, v in inputs.items()}
                if self.prelude:
                    run_prelude(self.prelude, env, self.base)
                key = tuple(static_key(env[n]) for n in self.statics)
                if len(self.memo) >= 64:
                    self.memo.clear()
                self.memo[memo_key] = key
        except Exception:
            return None
        return key

    def try_call(self, inputs: Mapping[str, Any]) -> dict[str, Any] | None:
        """The program registered for these inputs' conditions, called directly; None (the
        checked path) when nobody registered one since the last attach or detach, or the
        inputs do not fit it."""
        if bus.generation != self.generation or len(inputs) != self.n_inputs:
            return None
        hit = self.programs.get(self._key(inputs))
        return hit[2](inputs) if hit is not None else None

    def program_for(self, inputs: Mapping[str, Any]) -> Program | None:
        """The program a call with ``inputs`` runs directly; None when there is none."""
        hit = self.programs.get(self._key(inputs))
        return hit[1] if hit is not None else None

    def register(
        self,
        entry: CompiledSegment,
        statics: Mapping[str, Any],
        args: Sequence[Any],
        params: Callable[[], tuple[Any, ...]],
        base: Mapping[str, Any],
    ) -> None:
        """After a checked call: the direct call of ``entry`` for these condition values
        (``params``: the program's parameters; ``base``: the model's constants, which the
        prelude reads)."""
        # read before ``listening``: a handler attached in between changes it, so the
        # program registered here is not called directly while that handler listens
        generation = bus.generation
        if (
            entry.exe is None
            or entry.evicted  # by another call, between this one's run and now
            or entry.host_outputs
            or tuple(entry.dynamic_outputs) != self.names
            or bus.listening(*CALL_EVENTS)
        ):
            return
        if generation != self.generation:
            self.programs = {}
            self.generation = generation
        self.base = base
        cpp = getattr(entry.exe, "_call", None) or entry.exe
        bound = params()
        call = functools.partial(cpp, bound) if bound else cpp
        dtypes = tuple(np.dtype(getattr(a, "dtype", np.float32)) for a in args)
        program = Program(call, self.arg_names, dtypes, self.names, entry.needs_x64)
        key = tuple(static_key(statics[n]) for n in self.statics)
        self.programs[key] = (entry, program, direct_call(program))

    def forget(self, entry: CompiledSegment) -> None:
        """The segment cache evicted ``entry``: its direct call goes too."""
        if self.programs:
            self.programs = {k: v for k, v in self.programs.items() if v[0] is not entry}


def run_prelude(
    nodes: Sequence[Node], env: dict[str, Any], base: Mapping[str, Any] | None = None
) -> None:
    """Compute on the host what decides control flow (If conditions from small inputs):
    ``nodes`` read ``env`` (else ``base``), their outputs go into ``env``."""
    local: dict[str, Any] = {}
    for node in nodes:
        shape_only = node.op_type in ("Shape", "Size")
        for name in node.inputs:
            if name and name not in local:
                value = env[name] if base is None or name in env else base[name]
                local[name] = value if shape_only else to_host(value)
        outs = run_node(node, local)
        for name, value in zip(node.outputs, outs, strict=False):
            if name:
                env[name] = local[name] = to_host(value)
