"""Every record of an Ember trace, as pydantic models: the single source of truth.

A trace is JSONL: one record a line, ``kind`` says which model. Line 1 is ``meta``.
Span records are discriminated a second time on ``span_kind``, so each span kind has
typed attributes: exactly the metadata of Transmuter's telemetry for ONNX runtime events
(``load``, ``compile``, ``call``, ``run``, ``segment_compile``, ``segment``, ``break``,
``hub_download``, ``hub_info``), the candle-graph fields for profiling records (``op``,
``tensor``, ``memory``, ``device_memory``, ``gradient``, ``edge``), and the JAX bridge's
``jit`` compile spans.

Timestamps (``ts_ns``) are monotonic nanoseconds since the run started; ``meta``'s
``wall_time_ns`` anchors them to the epoch. Unknown fields are errors (``extra="forbid"``)
so a misspelt field is reported instead of silently dropped.

Version 2 (``ember.trace/2``): ``meta.sync`` says whether work spans (call, segment,
break, step) end at their results (``True``) or at dispatch; call and step ends carry
``dispatch_ns``; a ``segment`` span is one execution of one segment inside a call; break
ends carry ``host_transfer_ns`` and ``subgraph_ns``. Version 1 traces are upgraded by
``versions.MIGRATIONS`` (their meta gets ``sync: false``: v1 call spans ended at dispatch).

Version 3 (``ember.trace/3``, additive: a version 2 record is a valid version 3 record): a
``segment_compile`` end carries the parts of its disk-cache key (``disk_key``) and, when the
disk cache missed an entry it holds for the same segment under another key, the part that
changed (``disk_miss``: ``jaxlib 0.10.1 -> 0.10.2``); a ``jit`` end carries where the
function was defined and called (``defined_at``, ``called_at``) and, with JAX's persistent
cache on, the same two fields for it. A ``step`` span's ``step`` is any label the program
gives it (``train``, ``eval``), no longer only candle-graph's forward | backward | optimizer
(which stay valid values).
Also in version 3: a ``jit`` end may carry a torch.compile frame compile's ``compile_id``,
``guard_count``, ``cache_size`` and ``recompile_limit``/``recompile_limit_hit``, and a
``break`` span a ``reason`` and the ``user_stack`` that reached it, and a ``jit`` end its FX
graph and AOTAutograd cache lookups (``torch_caches``) (imported TORCH_TRACE logs); an
``ArgChange`` may name the ``dim`` whose size changed (old and new are then sizes).

Version 4 (``ember.trace/4``, additive): a job is many processes. ``meta`` may name the job
(``job_id``), the process's ``rank`` and the job's ``world_size`` as the launcher's environment
gave them (``job_source``), and a ``process`` record, written once the program has started
JAX's backend (never before: that would break ``jax.distributed``), carries the backend, the
devices, this process's device ids and the job identity JAX itself reports.

Version 5 (``ember.trace/5``, additive): a ``step`` span that ``ember record`` opened around a
top-level call of a jitted or pmapped function names that function (``fun_name``), so the
calls JAX served from its in-memory cache (hits) can be counted per function; an
``ArgChange`` may say an argument's ``placement`` changed (from the host onto the devices).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias, Union

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, Strict

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "MAX_LINE_BYTES",
    "MAX_NESTING",
    "MAX_RUN_NS",
    "MAX_WALL_TIME_NS",
    "RECORD_KINDS",
    "SCHEMA_ID",
    "SCHEMA_NAME",
    "SCHEMA_VERSION",
    "SPAN_ATTRS",
    "SPAN_KINDS",
    "Duration",
    "Int64",
    "NonNegInt64",
    "Record",
    "RecordModel",
    "SpanEnd",
    "SpanStart",
    "Timestamp",
    "WallTime",
]

SCHEMA_NAME = "ember.trace"
SCHEMA_VERSION = 5
SCHEMA_ID = f"{SCHEMA_NAME}/{SCHEMA_VERSION}"

# ---------------------------------------------------------------- limits
# One set of limits for every reader: ``ember validate`` (pydantic on every line) and
# ``ember ingest`` (DuckDB's typed read, pydantic for what it refuses) apply these same ones.

MAX_LINE_BYTES = 16 * 1024 * 1024
"""The longest line (one record, without its newline) a trace may have."""

MAX_NESTING = 64
"""How deeply arrays and objects may nest in one record, the record's own object counting
as 1 (a static value or a user attribute is a few levels down). Deeper lines are refused:
parsers recurse, and a line nested thousands deep crashed the readers before this."""

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

MAX_RUN_NS = 10 * 366 * 86_400 * 10**9
"""The longest a run may last, and so the largest ``ts_ns`` or ``duration_ns``: ten years
(3.2e17 ns). Times are bounded so that ``wall_time_ns + ts_ns`` always fits a 64-bit
integer (and a timestamp): one record with ``ts_ns`` near 2**63 overflowed that sum and
broke every view over every run of a shared database."""

MAX_WALL_TIME_NS = 7_258_118_400 * 10**9
"""``wall_time_ns`` is an epoch time before this one: 2200-01-01T00:00:00Z."""

# Integers are strict: a JSON integer, never ``1.5`` (lax pydantic refuses it, DuckDB's typed
# read rounded it to 2), ``2.0``, ``"7"`` or ``true``. One definition for every reader: ingest
# reads integer fields as JSON and checks the JSON type (``ember.analysis.checks``).
Int64 = Annotated[int, Strict(), Field(ge=INT64_MIN, le=INT64_MAX)]
"""An integer field: a JSON integer, stored as a 64-bit integer (DuckDB's BIGINT), so it must
fit one."""

NonNegInt64 = Annotated[NonNegativeInt, Strict(), Field(le=INT64_MAX)]
"""A count or a size: a JSON integer from 0 to ``INT64_MAX``."""

Timestamp = Annotated[NonNegativeInt, Strict(), Field(le=MAX_RUN_NS)]
"""``ts_ns``: a JSON integer from 0 to ``MAX_RUN_NS`` (ns since the run started)."""

Duration = Annotated[NonNegativeInt, Strict(), Field(le=MAX_RUN_NS)]
"""``duration_ns``: a JSON integer from 0 to ``MAX_RUN_NS`` (a span lasts no longer than a run)."""

WallTime = Annotated[NonNegativeInt, Strict(), Field(lt=MAX_WALL_TIME_NS)]
"""``wall_time_ns``: epoch ns from 1970 to before 2200 (``MAX_WALL_TIME_NS``)."""


class RecordModel(BaseModel):
    """Base of every record and attribute model: unknown fields are errors, values frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# ---------------------------------------------------------------- shared value types


class TensorShape(RecordModel):
    """Shape and dtype of one tensor (dtype as numpy names it: ``float32``, ``int64``)."""

    shape: list[NonNegInt64] = Field(
        description="The size of each dimension, outermost first ([] for a scalar)."
    )
    dtype: str = Field(description="The element type as numpy names it (float32, int64).")


class ArgShape(RecordModel):
    """One argument of a segment or call: a tensor (``shape``+``dtype``) or a sequence."""

    name: str = Field(description="The argument's name (the graph input or value name).")
    shape: list[NonNegInt64] | None = Field(
        None, description="For a tensor: the size of each dimension (None for a sequence)."
    )
    dtype: str | None = Field(
        None, description="For a tensor: the element type as numpy names it (None for a sequence)."
    )
    sequence: list[TensorShape] | None = Field(
        None, description="For a sequence argument: the shape and dtype of each of its tensors."
    )


class StaticValue(RecordModel):
    """A value a segment reads on the host; part of its cache key."""

    name: str = Field(description="The name of the value the segment reads on the host.")
    value: Any = Field(description="The value itself (JSON), as it enters the segment's cache key.")


class StaticMemory(RecordModel):
    """``memory_analysis()`` of a compiled segment, in bytes."""

    argument_bytes: Int64 | None = Field(
        None, description="Bytes of the compiled program's arguments."
    )
    output_bytes: Int64 | None = Field(None, description="Bytes of its outputs.")
    temp_bytes: Int64 | None = Field(
        None, description="Bytes of the temporary buffers it needs while it runs."
    )
    alias_bytes: Int64 | None = Field(
        None, description="Bytes of outputs that share (alias) an argument's buffer."
    )
    generated_code_bytes: Int64 | None = Field(
        None, description="Bytes of its generated machine code."
    )


class Cost(RecordModel):
    """``cost_analysis()`` of a compiled segment."""

    flops: float | None = Field(
        None, description="Floating-point operations of one execution, as XLA estimates them."
    )
    bytes_accessed: float | None = Field(
        None, description="Bytes one execution reads and writes, as XLA estimates them."
    )


class DiskKey(RecordModel):
    """The parts of a disk-cache key (what a compiled program on disk depends on).

    Two entries for the same segment (position, argument shapes, static values) differ in
    one of these when a run misses a cache another run filled.
    """

    model: str | None = Field(None, description="Digest of the model's bytes (first 16 hex).")
    ember: str | None = Field(None, description="Ember's version.")
    runtime: str | None = Field(
        None, description="Digest of ember.runtime's sources (first 16 hex)."
    )
    jax: str | None = Field(None, description="The jax version.")
    jaxlib: str | None = Field(None, description="The jaxlib version.")
    backend: str | None = Field(None, description="JAX's platform: cpu, gpu, tpu.")
    device: str | None = Field(None, description="The device kind (jax's device_kind).")
    xla_flags: str | None = Field(None, description="The XLA_FLAGS environment variable.")
    store_format: Int64 | None = Field(None, description="The layout of a stored entry.")


class SpanError(RecordModel):
    """Why a span failed: the ``:exception`` event's kind, reason and stack."""

    kind: str = Field(description="The exception's type name (ValueError).")
    reason: str = Field(description="The exception's message.")
    stack: str = Field(
        "", description="The traceback, as Python formats it ('' when none was captured)."
    )


class ArgChange(RecordModel):
    """One difference that made JAX (or torch.compile) trace a function again."""

    arg: str = Field(description="The argument that changed (its name or path in the arguments).")
    what: Literal["shape", "dtype", "weak_type", "static", "structure", "placement", "other"] = (
        Field(
            description="What about it changed: its shape, dtype, weak type, a static value, "
            "the pytree structure, where it is (placement: old and new are then 'host' or "
            "'N devices', the type being the same), or something else."
        )
    )
    old: str | None = Field(
        None, description="The value before, as text (a shape, a dtype, a static value)."
    )
    new: str | None = Field(None, description="The value now, as text.")
    dim: Int64 | None = Field(
        None,
        description="For a shape change of one dimension: which (0-based); old and new are "
        "then that dimension's sizes ('8', '16'), not whole shapes.",
    )


MemoryCategory = Literal[
    "parameter",
    "input",
    "activation",
    "output",
    "temporary",
    "gradient",
    "optimizer_state",
    "unknown",
]
Phase = Literal["infer", "train"]
ExecutionStep = Literal["forward", "backward", "optimizer"]
KNOWN_STEPS: tuple[str, ...] = ("forward", "backward", "optimizer")
"""The candle-graph step names ( ``ExecutionStep``); a step span takes any label."""
StepLabel = Annotated[
    str,
    Field(
        description=(
            "The step as the program names it: 'train', 'eval', a jitted function's name, or "
            "one of candle-graph's forward | backward | optimizer."
        ),
    ),
]


# ---------------------------------------------------------------- meta


class Meta(RecordModel):
    """Line 1 of every trace: which schema, which run, where and how it ran."""

    kind: Literal["meta"] = Field("meta", description="The record kind: always 'meta'.")
    schema_id: str = Field(
        SCHEMA_ID,
        alias="schema",
        description="The trace's schema and version: 'ember.trace/' and the version number.",
    )
    run_id: str = Field(description="The run's id, unique across runs (one run a trace file).")
    wall_time_ns: WallTime = Field(description="Epoch ns at ts_ns == 0.")
    host: str = Field(description="The host name of the machine that ran it.")
    pid: Int64 = Field(description="The process id of the recorded program.")
    versions: dict[str, str] = Field(
        default_factory=dict,
        description="Version of each of python, ember, jax, jaxlib, onnx and onnxruntime that "
        "is installed, by name.",
    )
    backend: str | None = Field(
        None,
        description="JAX's default platform: cpu, gpu, tpu (None: JAX not imported).",
    )
    devices: list[str] = Field(
        default_factory=list,
        description="JAX's devices, as str(device) writes them (empty: JAX not imported).",
    )
    entrypoint: str | None = Field(
        None, description="What was run: the entrypoint the caller named, else the command line."
    )
    phase: Phase = Field("infer", description="infer: an inference run; train: a training run.")
    tags: dict[str, str] = Field(
        default_factory=dict,
        description="The user's labels for the run (name -> value), e.g. branch or model.",
    )
    sync: bool = Field(
        True,
        description=(
            "True: call, segment, break and step spans end when their results are ready "
            "(jax.block_until_ready); False: they end at dispatch (latency is 'dispatch only')."
        ),
    )
    job_id: str | None = Field(
        None,
        description="The job the process belongs to, as known at its start: `ember record --job` "
        "(EMBER_JOB) or the launcher's id ('slurm:123.0', 'torchrun:RUN_ID'); None: not said "
        "(a later 'process' record may say it).",
    )
    rank: NonNegInt64 | None = Field(
        None, description="The process's rank in its job (RANK, SLURM_PROCID, MPI's rank)."
    )
    world_size: NonNegInt64 | None = Field(
        None, description="How many processes the job has (WORLD_SIZE, SLURM_NTASKS, MPI's size)."
    )
    job_source: str | None = Field(
        None,
        description="What named the rank or the job: ember, torchrun, slurm, openmpi, pmi or "
        "jax.distributed.",
    )

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# ---------------------------------------------------------------- span attributes


class SourceAttrs(RecordModel):
    source: str | None = Field(
        None, description="The model file, Hub address or program the span is about."
    )


class LoadEndAttrs(SourceAttrs):
    node_count: Int64 | None = Field(None, description="Nodes in the loaded ONNX graph.")
    opset: Int64 | None = Field(None, description="The graph's ONNX opset version.")


class CompileAttrs(SourceAttrs):
    compiler: str = Field(description="What compiled the model (jax.jit).")


class CompileEndAttrs(CompileAttrs):
    graph_break: bool | None = Field(
        None,
        description="True: the graph has breaks (ops that run on the host), so it compiled as "
        "several segments.",
    )


class CallAttrs(SourceAttrs):
    shapes: list[ArgShape] = Field(
        default_factory=list, description="The shapes and dtypes of the call's inputs."
    )


class CallEndAttrs(CallAttrs):
    dispatch_ns: Int64 | None = Field(
        None,
        description="ns from the call's start until all its programs were dispatched "
        "(the span's duration_ns is time to results when meta.sync).",
    )


class SegmentAttrs(SourceAttrs):
    """One execution of one segment inside a call (a child of the call span)."""

    position: Int64 = Field(description="Index of the segment's first node in the sorted graph.")
    stop: Int64 | Literal["end"] | None = Field(
        None, description="Where the segment ends: the index after its last node, or 'end'."
    )
    compiled: bool = Field(description="False: an eager segment, run node by node.")
    key: str | None = Field(None, description="The segment's cache key (hex).")


class SegmentCompileAttrs(SourceAttrs):
    position: Int64 = Field(description="Index of the segment's first node in the sorted graph.")
    shapes: list[ArgShape] = Field(description="The shapes and dtypes of the segment's inputs.")
    key: str | None = Field(None, description="The segment's cache key (hex).")


class SegmentCompileEndAttrs(SegmentCompileAttrs):
    stop: Int64 | Literal["end"] | None = Field(
        None, description="Where the segment ends: the index after its last node, or 'end'."
    )
    compiled: bool | None = Field(
        None, description="False: the segment runs eagerly (node by node), nothing was compiled."
    )
    disk_cache: Literal["hit", "miss"] | None = Field(
        None, description="With a disk cache: hit (loaded from disk) or miss (compiled and stored)."
    )
    reason: str | None = Field(
        None,
        description="What the break at stop needs (a value on the host), or why the segment is "
        "not compiled; None at the end of the graph.",
    )
    host_values: list[str] = Field(
        default_factory=list,
        description="Names of the host values from earlier work that the segment reads (its "
        "statics, part of its key).",
    )
    memory: StaticMemory | None = Field(
        None, description="The compiled program's memory_analysis(), in bytes."
    )
    cost: Cost | None = Field(None, description="The compiled program's cost_analysis().")
    disk_key: DiskKey | None = Field(
        None, description="The parts of the segment's disk-cache key (with a cache_dir)."
    )
    disk_miss: str | None = Field(
        None,
        description="On a disk-cache miss where the cache holds the same segment under "
        "another key: the parts that changed (`jaxlib 0.10.1 -> 0.10.2`).",
    )


class BreakAttrs(SourceAttrs):
    position: Int64 = Field(description="Index of the break's node in the sorted graph.")
    node: str = Field(description="The name of the node that breaks the graph.")
    op_type: str = Field(description="The node's ONNX op type (If, Loop, NonZero...).")
    reason: str | None = Field(
        None, description="Why the graph broke, as the compiler said it (torch.compile)."
    )
    user_stack: list[str] | None = Field(
        None,
        description="The user's code that reached the break, outermost call first, one "
        "'file:line in function' a frame (torch.compile's user code traceback).",
    )


class BreakEndAttrs(BreakAttrs):
    host_transfer_ns: Int64 | None = Field(
        None, description="ns spent moving the break's inputs to the host."
    )
    subgraph_ns: Int64 | None = Field(
        None,
        description="ns spent running a subgraph (If branch, Loop/Scan body) inside the break.",
    )


class HubFileAttrs(RecordModel):
    source: str = Field(description='"hf://owner/repo/path/in/repo"')
    revision: str = Field(description="The revision asked for (a branch, tag or commit).")


class HubDownloadEndAttrs(HubFileAttrs):
    bytes: Int64 | None = Field(None, description="Bytes downloaded.")


class HubInfoAttrs(RecordModel):
    source: str = Field(description='"hf://owner/repo"')
    revision: str = Field(description="The revision asked for (a branch, tag or commit).")


class HubInfoEndAttrs(HubInfoAttrs):
    result: Literal["fetched", "saved"] | None = Field(
        None,
        description="fetched: the file list came from the Hub; saved: from Ember's saved copy "
        "(offline).",
    )


class OpSpanAttrs(RecordModel):
    """A span around one operation or function (candle-graph's function/op/module)."""

    op_kind: Literal["function", "op", "module"] = Field(
        "op", description="What the span wraps: a function, an op or a module (candle-graph)."
    )
    measured: bool = Field(
        False,
        description="The candle-graph span's own measured flag, as imported (False when absent).",
    )


class StepAttrs(RecordModel):
    """A training or inference step (any label: train, eval, forward...) with its index."""

    step: StepLabel
    index: Int64 | None = Field(
        None, description="The step's number (0-based), when the program gives one."
    )
    fun_name: str | None = Field(
        None,
        description="The jitted or pmapped function whose top-level call this step is (the "
        "automatic steps of `ember record`); None for a step the program opened itself.",
    )


class StepEndAttrs(StepAttrs):
    dispatch_ns: Int64 | None = Field(
        None,
        description="ns until the step's work was dispatched, when the step blocked at its end.",
    )


class UserAttrs(RecordModel):
    """A span opened by the user through the instrumentation API."""

    attrs: dict[str, Any] = Field(
        default_factory=dict, description="The user's own attributes, name -> any JSON value."
    )


class TorchCacheLookup(RecordModel):
    """One lookup of torch.compile's FX graph cache (Inductor) or AOTAutograd cache."""

    cache: Literal["fx_graph", "aotautograd"] = Field(
        description="Which cache: fx_graph (Inductor's FX graph cache) or aotautograd."
    )
    action: Literal["hit", "miss", "bypass"] = Field(
        description="bypass: a graph the cache cannot hold (compiled, not stored)"
    )
    key: str | None = Field(None, description="torch's cache key (None: the log lacks it).")
    time_saved_ns: Int64 | None = Field(None, description="On a hit: compile time saved.")


class JitAttrs(RecordModel):
    """A compile of a jitted function seen by the JAX bridge."""

    fun_name: str = Field(
        description="The name of the jitted function (or the primitive, outside jit)."
    )


class JitEndAttrs(JitAttrs):
    tracing_ns: Int64 | None = Field(None, description="ns spent tracing the function to a jaxpr.")
    lowering_ns: Int64 | None = Field(None, description="ns spent lowering the jaxpr to StableHLO.")
    backend_compile_ns: Int64 | None = Field(
        None,
        description="ns spent in the backend (XLA) compile, or loading from the persistent cache.",
    )
    persistent_cache: Literal["hit", "miss"] | None = Field(
        None, description="With JAX's persistent cache on: hit (loaded) or miss (compiled)."
    )
    retrace_reason: str | None = Field(
        None, description="Why JAX traced the function again, in words (None on its first compile)."
    )
    changes: list[ArgChange] = Field(
        default_factory=list,
        description="The argument changes that caused the retrace, one per difference.",
    )
    outside_jit: bool | None = Field(
        None,
        description="True: a JAX primitive run outside jit (op by op); fun_name is the "
        "primitive's name (broadcast_in_dim for jnp.ones).",
    )
    jax_explanation: str | None = Field(
        None,
        description="JAX's own cache-miss explanation, when Ember could not reduce it to "
        "typed changes (a recompile whose key looks unchanged).",
    )
    defined_at: str | None = Field(
        None, description="Where the jitted function is defined (file:line), from JAX."
    )
    called_at: str | None = Field(
        None,
        description="The call that traced it: file:line:column (function), from JAX.",
    )
    disk_key: DiskKey | None = Field(
        None,
        description="With JAX's persistent cache on: the parts of its key Ember can name "
        "(jax, jaxlib, backend, device, xla_flags).",
    )
    disk_miss: str | None = Field(
        None,
        description="On a persistent-cache miss of a function the cache stored before: the "
        "key parts that changed (`jaxlib 0.10.1 -> 0.10.2`).",
    )
    # torch.compile frame compiles (imported TORCH_TRACE logs, analysis/torch_trace.py)
    compile_id: str | None = Field(
        None, description="torch.compile's compile id: frame/compile (`0/1`), `_N` attempt N."
    )
    guard_count: Int64 | None = Field(None, description="Guards torch installed on the frame.")
    cache_size: Int64 | None = Field(
        None, description="Compiled entries the frame had before this compile (torch)."
    )
    recompile_limit: Int64 | None = Field(
        None, description="torch's recompile_limit, when this compile failed on it."
    )
    recompile_limit_hit: bool | None = Field(
        None,
        description="True: torch refused to compile the frame again (cache_size reached "
        "recompile_limit); the frame runs eagerly from then on.",
    )
    torch_caches: list[TorchCacheLookup] | None = Field(
        None, description="The FX graph and AOTAutograd cache lookups of this compile (torch)."
    )


# span kind -> (attrs of span_start, attrs of span_end)
SPAN_ATTRS: dict[str, tuple[type[RecordModel], type[RecordModel]]] = {
    "load": (SourceAttrs, LoadEndAttrs),
    "compile": (CompileAttrs, CompileEndAttrs),
    "call": (CallAttrs, CallEndAttrs),
    "run": (SourceAttrs, SourceAttrs),
    "segment_compile": (SegmentCompileAttrs, SegmentCompileEndAttrs),
    "segment": (SegmentAttrs, SegmentAttrs),
    "break": (BreakAttrs, BreakEndAttrs),
    "hub_download": (HubFileAttrs, HubDownloadEndAttrs),
    "hub_info": (HubInfoAttrs, HubInfoEndAttrs),
    "op": (OpSpanAttrs, OpSpanAttrs),
    "step": (StepAttrs, StepEndAttrs),
    "user": (UserAttrs, UserAttrs),
    "jit": (JitAttrs, JitEndAttrs),
}
SPAN_KINDS: tuple[str, ...] = tuple(SPAN_ATTRS)


# ---------------------------------------------------------------- spans


class _SpanStartBase(RecordModel):
    kind: Literal["span_start"] = Field(
        "span_start", description="The record kind: always 'span_start'."
    )
    ts_ns: Timestamp = Field(description="When the span started, in ns since the run started.")
    span_id: Int64 = Field(
        description="The span's id, unique in its run; its span_end has the same id."
    )
    parent_id: Int64 | None = Field(
        None, description="The enclosing span's id (None for a top-level span)."
    )
    name: str = Field(description="The event prefix, e.g. 'ember.call', or a user name.")


class _SpanEndBase(RecordModel):
    kind: Literal["span_end"] = Field("span_end", description="The record kind: always 'span_end'.")
    ts_ns: Timestamp = Field(description="When the span ended, in ns since the run started.")
    span_id: Int64 = Field(description="The id of the span this ends (its span_start's span_id).")
    duration_ns: Duration = Field(description="How long the span lasted, in ns.")
    status: Literal["ok", "error"] = Field(
        "ok", description="ok, or error: the span ended with an exception."
    )
    error: SpanError | None = Field(None, description="With status error: the exception.")


def _span_models(base: type[RecordModel], which: int, suffix: str) -> list[type[RecordModel]]:
    # One class per span kind: `span_kind` is its literal tag and `attrs` its typed
    # attributes. Built in a loop because the kinds differ only in those two.
    models = []
    for span_kind, attrs in SPAN_ATTRS.items():
        cls_name = "".join(p.title() for p in span_kind.split("_")) + suffix
        models.append(
            type(
                cls_name,
                (base,),
                {
                    "__annotations__": {
                        "span_kind": Annotated[
                            Literal[span_kind],
                            Field(description=f"The span's kind: always '{span_kind}'."),
                        ],
                        "attrs": Annotated[
                            attrs[which],
                            Field(
                                description=f"The span's typed attributes "
                                f"({attrs[which].__name__})."
                            ),
                        ],
                    },
                    "__module__": __name__,
                    "__doc__": f"{suffix[4:].lower() or 'start'} of a '{span_kind}' span",
                },
            )
        )
    return models


_START_MODELS = _span_models(_SpanStartBase, 0, "SpanStart")
_END_MODELS = _span_models(_SpanEndBase, 1, "SpanEnd")
globals().update({m.__name__: m for m in _START_MODELS + _END_MODELS})

if TYPE_CHECKING:
    # The span models are made at run time, which a type checker cannot follow: to it a
    # span record is its base class (every field but the kind's literal tag and attrs).
    SpanStart: TypeAlias = _SpanStartBase
    SpanEnd: TypeAlias = _SpanEndBase
else:
    SpanStart = Annotated[Union[tuple(_START_MODELS)], Field(discriminator="span_kind")]  # noqa: UP007
    SpanEnd = Annotated[Union[tuple(_END_MODELS)], Field(discriminator="span_kind")]  # noqa: UP007


# ---------------------------------------------------------------- point events


class Cache(RecordModel):
    """A lookup of a compiled segment (hit/miss) or the eviction of one.

    ``shapes``, ``key`` and ``statics`` are those of the segment looked up, or of the
    segment removed for ``evict``; ``cache_size`` is set on ``evict``.
    """

    kind: Literal["cache"] = Field("cache", description="The record kind: always 'cache'.")
    ts_ns: Timestamp = Field(description="When, in ns since the run started.")
    action: Literal["hit", "miss", "evict"] = Field(
        description="hit: found compiled; miss: compiled now; evict: removed to make room."
    )
    span_id: Int64 | None = Field(None, description="The enclosing span (the call).")
    source: str | None = Field(None, description="The model file (or program) of the segment.")
    position: Int64 = Field(description="The segment's position in its graph.")
    shapes: list[ArgShape] = Field(description="The shapes and dtypes of the segment's inputs.")
    key: str | None = Field(None, description="The segment's cache key.")
    statics: list[StaticValue] = Field(
        default_factory=list, description="The static (compile-time) values in its key."
    )
    cache_size: Int64 | None = Field(None, description="On evict: the cache's capacity.")


class Hub(RecordModel):
    """A Hub file found current in the cache."""

    kind: Literal["hub"] = Field("hub", description="The record kind: always 'hub'.")
    ts_ns: Timestamp = Field(description="When, in ns since the run started.")
    action: Literal["hit"] = Field("hit", description="hit: the cached file was current.")
    span_id: Int64 | None = Field(None, description="The enclosing span.")
    source: str = Field(description="The Hub file (repo and path).")
    revision: str = Field(description="The revision (commit) of the file.")
    check: Literal["etag", "hash", "none", "offline"] = Field(
        description="How the file was found current: its ETag, its hash, no check, offline."
    )
    bytes: NonNegInt64 = Field(description="The file's size in bytes.")


class Op(RecordModel):
    """A timed operation (candle-graph OpEvent)."""

    kind: Literal["op"] = Field("op", description="The record kind: always 'op'.")
    ts_ns: Timestamp = Field(description="When the op started, in ns since the run started.")
    span_id: Int64 | None = Field(None, description="The enclosing span (the run).")
    op_name: str = Field(description="The operation (the ONNX op type in profile mode).")
    inputs: list[str] = Field(default_factory=list, description="The names of its input values.")
    output: str | None = Field(None, description="The name of its (first) output value.")
    shape: list[NonNegInt64] = Field(default_factory=list, description="The shape of its output.")
    dtype: str = Field(description="The dtype of its output.")
    device: str = Field(description="Where its output is (cpu:0, gpu:0, host).")
    duration_ns: Duration = Field(description="How long it ran, in ns (waited for its result).")
    storage_bytes: NonNegInt64 | None = Field(None, description="Bytes of all its outputs.")
    input_storage_bytes: NonNegInt64 = Field(0, description="Bytes of all its inputs.")
    step: ExecutionStep | None = Field(
        None, description="The training step it belongs to: forward, backward or optimizer."
    )


class Tensor(RecordModel):
    """A tensor seen while profiling (candle-graph TensorEvent)."""

    kind: Literal["tensor"] = Field("tensor", description="The record kind: always 'tensor'.")
    ts_ns: Timestamp = Field(description="When the tensor was seen, in ns since the run started.")
    span_id: Int64 | None = Field(None, description="The enclosing span.")
    tensor_id: str = Field(
        description="The tensor's id (its value name), as memory records name it."
    )
    shape: list[NonNegInt64] = Field(default_factory=list, description="The tensor's shape.")
    dtype: str = Field(description="The tensor's dtype.")
    device: str = Field(description="Where the tensor is (cpu:0, gpu:0, host).")
    requires_grad: bool = Field(False, description="True: a gradient is computed for it.")
    storage_bytes: NonNegInt64 | None = Field(None, description="Bytes of its storage.")
    category: MemoryCategory = Field(
        "unknown",
        description="What the memory is for: parameter, input, activation, output, temporary, "
        "gradient, optimizer_state or unknown.",
    )


class Memory(RecordModel):
    """A tensor allocation or free (candle-graph MemoryEvent)."""

    kind: Literal["memory"] = Field("memory", description="The record kind: always 'memory'.")
    ts_ns: Timestamp = Field(description="When, in ns since the run started.")
    span_id: Int64 | None = Field(None, description="The enclosing span.")
    tensor_id: str = Field(
        description="The tensor allocated or freed (as its tensor record names it)."
    )
    op_name: str | None = Field(
        None, description="The op that allocated it (None for inputs and parameters)."
    )
    device: str = Field(description="Where the memory is (cpu:0, gpu:0, host).")
    bytes: NonNegInt64 = Field(description="Bytes allocated or freed.")
    action: Literal["alloc", "free"] = Field(
        description="alloc: the tensor came to exist; free: it was released after its last reader."
    )
    shape: list[NonNegInt64] = Field(default_factory=list, description="The tensor's shape.")
    dtype: str = Field(description="The tensor's dtype.")
    category: MemoryCategory = Field(
        "unknown",
        description="What the memory is for: parameter, input, activation, output, temporary, "
        "gradient, optimizer_state or unknown.",
    )


class DeviceMemory(RecordModel):
    """A device-level memory reading.

    ``source`` says where the numbers come from: ``memory_stats`` (the device's own
    allocator: GPU, TPU), or on the CPU, where JAX reports none, ``live_arrays`` (bytes of
    live JAX arrays in ``used_bytes``, the process's resident set in ``rss_bytes``).
    """

    kind: Literal["device_memory"] = Field(
        "device_memory", description="The record kind: always 'device_memory'."
    )
    ts_ns: Timestamp = Field(description="When it was read, in ns since the run started.")
    span_id: Int64 | None = Field(None, description="The enclosing span.")
    device: str = Field(description="The device read (cpu:0, gpu:0).")
    source: Literal["memory_stats", "live_arrays"] = Field(
        description="memory_stats: the device allocator's own numbers; live_arrays: on the CPU, "
        "bytes of live JAX arrays."
    )
    used_bytes: NonNegInt64 | None = Field(
        None,
        description="Bytes in use (memory_stats: bytes_in_use; live_arrays: bytes of live arrays).",
    )
    peak_bytes: NonNegInt64 | None = Field(
        None, description="The most bytes in use so far (the allocator's peak)."
    )
    reserved_bytes: NonNegInt64 | None = Field(
        None, description="Bytes the allocator has reserved from the device."
    )
    free_bytes: NonNegInt64 | None = Field(None, description="Bytes still free on the device.")
    limit_bytes: NonNegInt64 | None = Field(
        None, description="The most bytes the allocator may use."
    )
    rss_bytes: NonNegInt64 | None = Field(
        None, description="live_arrays: the process's resident set size, in bytes."
    )


class Process(RecordModel):
    """This process in its job, once the program has started JAX's backend: its devices and
    its rank. Written at most once per trace, at the first compile after the backend started
    (or the first flush, or at the end), never earlier: reading devices starts the backend,
    and ``jax.distributed.initialize``, the ``jax_platforms`` option and ``XLA_FLAGS`` only
    work before it starts. Not written when ``meta`` already said it all (its backend and
    devices, and no rank from JAX the launcher did not give). Its job fields are the ones to
    read (``meta``'s were known earlier)."""

    kind: Literal["process"] = Field("process", description="The record kind: always 'process'.")
    ts_ns: Timestamp = Field(description="When it was found, in ns since the run started.")
    backend: str | None = Field(None, description="JAX's default platform: cpu, gpu, tpu.")
    devices: list[str] = Field(
        default_factory=list,
        description="Every device of the job, as str(device) writes them (jax.devices()).",
    )
    local_device_ids: list[Int64] = Field(
        default_factory=list,
        description="The ids of this process's own devices (jax.local_devices()).",
    )
    job_id: str | None = Field(
        None,
        description="The job: meta's, else the jax.distributed coordinator ('jax:HOST:PORT').",
    )
    rank: NonNegInt64 | None = Field(
        None, description="The process's rank: jax.process_index() in a multi-process job."
    )
    world_size: NonNegInt64 | None = Field(
        None, description="How many processes the job has: jax.process_count()."
    )
    job_source: str | None = Field(
        None,
        description="What named the rank or the job: ember, torchrun, slurm, openmpi, pmi or "
        "jax.distributed.",
    )


class Gradient(RecordModel):
    """A parameter's gradient at one step (candle-graph GradientEvent)."""

    kind: Literal["gradient"] = Field("gradient", description="The record kind: always 'gradient'.")
    ts_ns: Timestamp = Field(description="When, in ns since the run started.")
    event_id: str = Field(description="The record's id, unique in its run.")
    step: Int64 | None = Field(None, description="The training step's index.")
    root: str = Field(description="The pytree the gradient belongs to (params).")
    key: str = Field(description="The parameter's path in that pytree.")
    state: Literal["present", "missing", "zero", "non_finite"] = Field(
        description="present: a finite nonzero gradient; missing: none; zero: all zeros; "
        "non_finite: a NaN or inf in it."
    )
    norm: float | None = Field(
        None, description="The gradient's L2 norm (None when missing or not finite)."
    )


class Edge(RecordModel):
    """Data-flow timing between a producer span and a consumer span."""

    kind: Literal["edge"] = Field("edge", description="The record kind: always 'edge'.")
    ts_ns: Timestamp = Field(description="When the consumer ended, in ns since the run started.")
    from_span: str = Field(description="The producer (a node name in profile mode).")
    to_span: str = Field(description="The consumer that reads the producer's value.")
    duration_ns: Duration = Field(
        description="From the producer's end to the consumer's start, in ns (how long the value "
        "waited)."
    )


Record = Annotated[
    Meta
    | SpanStart
    | SpanEnd
    | Cache
    | Hub
    | Op
    | Tensor
    | Memory
    | DeviceMemory
    | Gradient
    | Edge
    | Process,
    Field(discriminator="kind"),
]
"""Any one line of a trace."""

RECORD_KINDS: tuple[str, ...] = (
    "meta",
    "span_start",
    "span_end",
    "cache",
    "hub",
    "op",
    "tensor",
    "memory",
    "device_memory",
    "gradient",
    "edge",
    "process",
)
