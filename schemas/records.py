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
SCHEMA_VERSION = 3
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

    shape: list[NonNegInt64]
    dtype: str


class ArgShape(RecordModel):
    """One argument of a segment or call: a tensor (``shape``+``dtype``) or a sequence."""

    name: str
    shape: list[NonNegInt64] | None = None
    dtype: str | None = None
    sequence: list[TensorShape] | None = None


class StaticValue(RecordModel):
    """A value a segment reads on the host; part of its cache key."""

    name: str
    value: Any


class StaticMemory(RecordModel):
    """``memory_analysis()`` of a compiled segment, in bytes."""

    argument_bytes: Int64 | None = None
    output_bytes: Int64 | None = None
    temp_bytes: Int64 | None = None
    alias_bytes: Int64 | None = None
    generated_code_bytes: Int64 | None = None


class Cost(RecordModel):
    """``cost_analysis()`` of a compiled segment."""

    flops: float | None = None
    bytes_accessed: float | None = None


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
    jax: str | None = None
    jaxlib: str | None = None
    backend: str | None = Field(None, description="JAX's platform: cpu, gpu, tpu.")
    device: str | None = Field(None, description="The device kind (jax's device_kind).")
    xla_flags: str | None = Field(None, description="The XLA_FLAGS environment variable.")
    store_format: Int64 | None = Field(None, description="The layout of a stored entry.")


class SpanError(RecordModel):
    """Why a span failed: the ``:exception`` event's kind, reason and stack."""

    kind: str
    reason: str
    stack: str = ""


class ArgChange(RecordModel):
    """One difference that made JAX (or torch.compile) trace a function again."""

    arg: str
    what: Literal["shape", "dtype", "weak_type", "static", "structure", "other"]
    old: str | None = None
    new: str | None = None
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

    kind: Literal["meta"] = "meta"
    schema_id: str = Field(SCHEMA_ID, alias="schema")
    run_id: str
    wall_time_ns: WallTime = Field(description="Epoch ns at ts_ns == 0.")
    host: str
    pid: Int64
    versions: dict[str, str] = Field(default_factory=dict)
    backend: str | None = None
    devices: list[str] = Field(default_factory=list)
    entrypoint: str | None = None
    phase: Phase = "infer"
    tags: dict[str, str] = Field(default_factory=dict)
    sync: bool = Field(
        True,
        description=(
            "True: call, segment, break and step spans end when their results are ready "
            "(jax.block_until_ready); False: they end at dispatch (latency is 'dispatch only')."
        ),
    )

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# ---------------------------------------------------------------- span attributes


class SourceAttrs(RecordModel):
    source: str | None = None


class LoadEndAttrs(SourceAttrs):
    node_count: Int64 | None = None
    opset: Int64 | None = None


class CompileAttrs(SourceAttrs):
    compiler: str


class CompileEndAttrs(CompileAttrs):
    graph_break: bool | None = None


class CallAttrs(SourceAttrs):
    shapes: list[ArgShape] = Field(default_factory=list)


class CallEndAttrs(CallAttrs):
    dispatch_ns: Int64 | None = Field(
        None,
        description="ns from the call's start until all its programs were dispatched "
        "(the span's duration_ns is time to results when meta.sync).",
    )


class SegmentAttrs(SourceAttrs):
    """One execution of one segment inside a call (a child of the call span)."""

    position: Int64
    stop: Int64 | Literal["end"] | None = None
    compiled: bool = Field(description="False: an eager segment, run node by node.")
    key: str | None = Field(None, description="The segment's cache key (hex).")


class SegmentCompileAttrs(SourceAttrs):
    position: Int64
    shapes: list[ArgShape]
    key: str | None = None


class SegmentCompileEndAttrs(SegmentCompileAttrs):
    stop: Int64 | Literal["end"] | None = None
    compiled: bool | None = None
    disk_cache: Literal["hit", "miss"] | None = None
    reason: str | None = None
    host_values: list[str] = Field(default_factory=list)
    memory: StaticMemory | None = None
    cost: Cost | None = None
    disk_key: DiskKey | None = Field(
        None, description="The parts of the segment's disk-cache key (with a cache_dir)."
    )
    disk_miss: str | None = Field(
        None,
        description="On a disk-cache miss where the cache holds the same segment under "
        "another key: the parts that changed (`jaxlib 0.10.1 -> 0.10.2`).",
    )


class BreakAttrs(SourceAttrs):
    position: Int64
    node: str
    op_type: str
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
    revision: str


class HubDownloadEndAttrs(HubFileAttrs):
    bytes: Int64 | None = None


class HubInfoAttrs(RecordModel):
    source: str = Field(description='"hf://owner/repo"')
    revision: str


class HubInfoEndAttrs(HubInfoAttrs):
    result: Literal["fetched", "saved"] | None = None


class OpSpanAttrs(RecordModel):
    """A span around one operation or function (candle-graph's function/op/module)."""

    op_kind: Literal["function", "op", "module"] = "op"
    measured: bool = False


class StepAttrs(RecordModel):
    """A training or inference step (any label: train, eval, forward...) with its index."""

    step: StepLabel
    index: Int64 | None = None


class StepEndAttrs(StepAttrs):
    dispatch_ns: Int64 | None = Field(
        None,
        description="ns until the step's work was dispatched, when the step blocked at its end.",
    )


class UserAttrs(RecordModel):
    """A span opened by the user through the instrumentation API."""

    attrs: dict[str, Any] = Field(default_factory=dict)


class TorchCacheLookup(RecordModel):
    """One lookup of torch.compile's FX graph cache (Inductor) or AOTAutograd cache."""

    cache: Literal["fx_graph", "aotautograd"]
    action: Literal["hit", "miss", "bypass"] = Field(
        description="bypass: a graph the cache cannot hold (compiled, not stored)"
    )
    key: str | None = Field(None, description="torch's cache key (None: the log lacks it).")
    time_saved_ns: Int64 | None = Field(None, description="On a hit: compile time saved.")


class JitAttrs(RecordModel):
    """A compile of a jitted function seen by the JAX bridge."""

    fun_name: str


class JitEndAttrs(JitAttrs):
    tracing_ns: Int64 | None = None
    lowering_ns: Int64 | None = None
    backend_compile_ns: Int64 | None = None
    persistent_cache: Literal["hit", "miss"] | None = None
    retrace_reason: str | None = None
    changes: list[ArgChange] = Field(default_factory=list)
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
    kind: Literal["span_start"] = "span_start"
    ts_ns: Timestamp
    span_id: Int64
    parent_id: Int64 | None = None
    name: str = Field(description="The event prefix, e.g. 'ember.call', or a user name.")


class _SpanEndBase(RecordModel):
    kind: Literal["span_end"] = "span_end"
    ts_ns: Timestamp
    span_id: Int64
    duration_ns: Duration
    status: Literal["ok", "error"] = "ok"
    error: SpanError | None = None


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
                        "span_kind": Literal[span_kind],
                        "attrs": attrs[which],
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

    kind: Literal["cache"] = "cache"
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

    kind: Literal["hub"] = "hub"
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

    kind: Literal["op"] = "op"
    ts_ns: Timestamp
    span_id: Int64 | None = None
    op_name: str
    inputs: list[str] = Field(default_factory=list)
    output: str | None = None
    shape: list[NonNegInt64] = Field(default_factory=list)
    dtype: str
    device: str
    duration_ns: Duration
    storage_bytes: NonNegInt64 | None = None
    input_storage_bytes: NonNegInt64 = 0
    step: ExecutionStep | None = None


class Tensor(RecordModel):
    """A tensor seen while profiling (candle-graph TensorEvent)."""

    kind: Literal["tensor"] = "tensor"
    ts_ns: Timestamp
    span_id: Int64 | None = None
    tensor_id: str
    shape: list[NonNegInt64] = Field(default_factory=list)
    dtype: str
    device: str
    requires_grad: bool = False
    storage_bytes: NonNegInt64 | None = None
    category: MemoryCategory = "unknown"


class Memory(RecordModel):
    """A tensor allocation or free (candle-graph MemoryEvent)."""

    kind: Literal["memory"] = "memory"
    ts_ns: Timestamp
    span_id: Int64 | None = None
    tensor_id: str
    op_name: str | None = None
    device: str
    bytes: NonNegInt64
    action: Literal["alloc", "free"]
    shape: list[NonNegInt64] = Field(default_factory=list)
    dtype: str
    category: MemoryCategory = "unknown"


class DeviceMemory(RecordModel):
    """A device-level memory reading.

    ``source`` says where the numbers come from: ``memory_stats`` (the device's own
    allocator: GPU, TPU), or on the CPU, where JAX reports none, ``live_arrays`` (bytes of
    live JAX arrays in ``used_bytes``, the process's resident set in ``rss_bytes``).
    """

    kind: Literal["device_memory"] = "device_memory"
    ts_ns: Timestamp
    span_id: Int64 | None = None
    device: str
    source: Literal["memory_stats", "live_arrays"]
    used_bytes: NonNegInt64 | None = None
    peak_bytes: NonNegInt64 | None = None
    reserved_bytes: NonNegInt64 | None = None
    free_bytes: NonNegInt64 | None = None
    limit_bytes: NonNegInt64 | None = None
    rss_bytes: NonNegInt64 | None = None


class Gradient(RecordModel):
    """A parameter's gradient at one step (candle-graph GradientEvent)."""

    kind: Literal["gradient"] = "gradient"
    ts_ns: Timestamp
    event_id: str
    step: Int64 | None = None
    root: str
    key: str
    state: Literal["present", "missing", "zero", "non_finite"]
    norm: float | None = None


class Edge(RecordModel):
    """Data-flow timing between a producer span and a consumer span."""

    kind: Literal["edge"] = "edge"
    ts_ns: Timestamp
    from_span: str
    to_span: str
    duration_ns: Duration


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
    | Edge,
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
)
