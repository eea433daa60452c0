"""``load(source)``: an ONNX model from a path, bytes, a ``ModelProto`` or the Hub.

External data files are read only from the model's own folder: a ``location`` that is
absolute, climbs out with ``..``, or whose resolved path (through symbolic links to files or
folders) leaves the model's resolved folder is an ``ExternalDataError`` naming the tensor and
the file.
Unsupported ops are found here, all at once (``UnsupportedOpsError``), not in the middle of
a call.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import external_data_helper, helper

from ember.recorder import bus
from ember.recorder import events as E
from ember.runtime.graph.ir import Graph
from ember.runtime.jit import xla_cpu

from .errors import ExternalDataError, LoadError, NewerOpsetWarning

__all__ = ["Model", "TensorSpec", "describe_source", "load"]

Dim = int | str | None


@dataclass(frozen=True)
class TensorSpec:
    """What a graph input or output is: name, element dtype, dims (ints, symbols or None).

    ``kind`` is ``"tensor"``, ``"sequence"``, ``"optional"`` or ``"unknown"``; for a
    sequence or an optional, ``dtype`` and ``shape`` describe the elements.
    """

    name: str
    dtype: np.dtype | None
    shape: tuple[Dim, ...] | None
    kind: str = "tensor"

    @classmethod
    def from_type(cls, name: str, tp: onnx.TypeProto) -> TensorSpec:
        kind = "tensor"
        inner = tp
        while True:
            which = inner.WhichOneof("value")
            if which == "sequence_type":
                kind = "sequence" if kind == "tensor" else kind
                inner = inner.sequence_type.elem_type
            elif which == "optional_type":
                kind = "optional" if kind == "tensor" else kind
                inner = inner.optional_type.elem_type
            else:
                break
        if inner.WhichOneof("value") != "tensor_type":
            return cls(name, None, None, kind if kind != "tensor" else "unknown")
        tt = inner.tensor_type
        dtype = None
        if tt.elem_type:
            try:
                dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
            except (KeyError, TypeError, ValueError):
                dtype = None
        shape: tuple[Dim, ...] | None = None
        if tt.HasField("shape"):
            dims: list[Dim] = []
            for d in tt.shape.dim:
                if d.HasField("dim_value") and d.dim_value > 0:
                    dims.append(int(d.dim_value))
                elif d.HasField("dim_value"):
                    # exporters' ways of saying "dynamic": paddle2onnx writes -1, some write
                    # 0 (onnxruntime reads a declared 0 as size 0 only; any size is taken)
                    dims.append(None)
                elif d.HasField("dim_param"):
                    dims.append(d.dim_param)
                else:
                    dims.append(None)
            shape = tuple(dims)
        return cls(name, dtype, shape, kind)

    @property
    def static(self) -> bool:
        """True when every dim is a known integer."""
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    def __str__(self) -> str:
        dt = self.dtype.name if self.dtype is not None else "?"
        if self.shape is None:
            dims = "?"
        else:
            dims = "[" + ", ".join("?" if d is None else str(d) for d in self.shape) + "]"
        text = f"{self.name}: {dt}{dims}"
        return f"{text} ({self.kind})" if self.kind != "tensor" else text


@dataclass
class Model:
    """A loaded ONNX model: the sorted graph with resolved ops and what it takes and gives."""

    proto: onnx.ModelProto
    graph: Graph
    source: str | None
    opset: int
    opsets: dict[str, int]
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    folder: Path | None = None

    @property
    def node_count(self) -> int:
        """The number of top-level nodes."""
        return len(self.graph.nodes)

    @property
    def input_names(self) -> list[str]:
        return [s.name for s in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [s.name for s in self.outputs]

    def __repr__(self) -> str:
        ins = ", ".join(str(s) for s in self.inputs)
        outs = ", ".join(str(s) for s in self.outputs)
        return (
            f"<Model {self.source or '<memory>'} opset={self.opset} "
            f"nodes={self.node_count} ({ins}) -> ({outs})>"
        )


def describe_source(source: Any, revision: str | None = None) -> str | None:
    """The ``source`` of events: the path as given, the Hub source's text form
    (``hf://owner/repo/file``, ``hub.hub_source``), or None."""
    if isinstance(source, (str, os.PathLike)):
        hub = _parse_hub(source)
        if hub is not None:
            return _hub_text(hub, revision)
        return os.fspath(source)
    if isinstance(source, tuple):
        hub = _parse_hub(source)
        if hub is not None:
            return _hub_text(hub, revision)
    return None


def _hub_text(hub: Any, revision: str | None) -> str:
    from ember.runtime.hub import loader as hub_mod

    # a revision the source names stays in its text, so that Model.source loads the same file
    named = hub.revision is not None
    return hub_mod.hub_source(
        hub.repo_id, hub.filename, hub.revision or revision or "main", with_revision=named
    )


def _parse_hub(source: Any) -> Any:
    """``hub.HubSource`` of a Hub source, None for anything else."""
    if isinstance(source, str) and not source.startswith("hf://"):
        return None
    if isinstance(source, tuple) and not (source and source[0] == "hf"):
        return None
    if isinstance(source, os.PathLike):
        return None
    from ember.runtime.hub import loader as hub

    return hub.parse_hub_source(source)


def load(
    source: str | os.PathLike[str] | bytes | onnx.ModelProto | tuple[str, str, str],
    *,
    revision: str | None = None,
    offline: bool | None = None,
) -> Model:
    """Load an ONNX model and resolve its ops.

    ``source`` is a path, the bytes of a model, an ``onnx.ModelProto``, or a Hub source
    (``"hf://owner/repo/path/in/repo.onnx"``, ``"hf://owner/repo@v1/path/in/repo.onnx"`` or
    ``("hf", "owner/repo", "path.onnx")``), downloaded at ``revision`` (the one the source
    names, else ``"main"``). Emits the ``ember.load`` span.
    """
    xla_cpu.run_inline()  # Ember's first call, usually: before a recording starts JAX
    hub = _parse_hub(source) if isinstance(source, (str, tuple)) else None
    if hub is not None and hub.revision is not None:
        if revision is not None and revision != hub.revision:
            raise ValueError(
                f"Hub source {source!r} names revision {hub.revision!r} and load() was given "
                f"revision={revision!r}: give one of them"
            )
        revision = hub.revision
    revision = revision or "main"
    label = describe_source(source, revision)
    with bus.span(E.LOAD, {"source": label}) as span:
        model = _load(source, hub, label, revision=revision, offline=offline)
        span.set(node_count=model.node_count, opset=model.opset)
    return model


def _load(
    source: Any, hub: Any, label: str | None, *, revision: str, offline: bool | None
) -> Model:
    folder: Path | None = None
    if hub is not None:
        from ember.runtime.hub import loader as hub_mod

        path = hub_mod.download_model(hub.repo_id, hub.filename, revision=revision, offline=offline)
        source = path
    if isinstance(source, onnx.ModelProto):
        proto = source
    elif isinstance(source, (bytes, bytearray, memoryview)):
        try:
            proto = onnx.load_model_from_string(bytes(source))
        except Exception as exc:
            raise LoadError(f"the bytes given to load() are not an ONNX model: {exc}") from exc
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.is_file():
            raise LoadError(f"{path}: no such model file")
        # Not resolved: in the Hugging Face cache the model is a symlink into blobs/, and
        # its external data sits next to the link, not next to the blob.
        folder = Path(os.path.abspath(path)).parent
        if path.stat().st_size == 0:
            raise LoadError(f"{path}: the file is empty (0 bytes), not an ONNX model")
        try:
            proto = onnx.load_model(str(path), load_external_data=False)
        except Exception as exc:
            raise LoadError(f"{path}: not an ONNX model ({exc})") from exc
    else:
        raise LoadError(
            f"load() takes a path, bytes, an onnx.ModelProto or a Hub source "
            f"('hf://owner/repo/file.onnx'), not {type(source).__name__}"
        )
    if not proto.HasField("graph"):
        what = label or f"the {'ModelProto' if source is proto else 'bytes'} given to load()"
        raise LoadError(f"{what}: not an ONNX model (no graph in it)")
    _load_external_data(proto, folder, label)
    _check_raw_sizes(proto, label)
    opsets = {
        ("" if o.domain == "ai.onnx" else o.domain): int(o.version) for o in proto.opset_import
    }
    if "" not in opsets:
        opsets[""] = 1
    if proto.functions:
        proto = _inline_functions(proto)
    _check_opsets(opsets, label)
    graph = Graph.from_proto(proto.graph, opsets, source=label)
    _check_graph(graph, label)
    inputs = [
        TensorSpec.from_type(i.name, i.type)
        for i in proto.graph.input
        if i.name not in graph.initializers
    ]
    outputs = [TensorSpec.from_type(o.name, o.type) for o in proto.graph.output]
    return Model(
        proto=proto,
        graph=graph,
        source=label,
        opset=opsets[""],
        opsets=opsets,
        inputs=inputs,
        outputs=outputs,
        folder=folder,
    )


def _inline_functions(proto: onnx.ModelProto) -> onnx.ModelProto:
    import onnx.inliner

    return onnx.inliner.inline_local_functions(proto)


def _external_tensors(proto: onnx.ModelProto) -> list[onnx.TensorProto]:
    return [
        t
        for t in external_data_helper._get_all_tensors(proto)
        if external_data_helper.uses_external_data(t)
    ]


def _load_external_data(proto: onnx.ModelProto, folder: Path | None, label: str | None) -> None:
    tensors = _external_tensors(proto)
    if not tensors:
        return
    if folder is None:
        raise ExternalDataError(
            f"tensor {tensors[0].name!r} keeps its data in an external file, but the model "
            "was given as bytes or a ModelProto: load it from its path so the file can be found"
        )
    resolved_folder = folder.resolve()
    for t in tensors:
        entries = {e.key: e.value for e in t.external_data}
        location = entries.get("location", "")
        offset, length = (_byte_count(label, t.name, location, entries, k) for k in _COUNTS)
        if os.path.isabs(location) or Path(location).drive:
            raise ExternalDataError(
                f"{label}: tensor {t.name!r} points to the absolute path {location!r}; "
                "external data must be a relative path inside the model's folder"
            )
        if ".." in Path(location).parts:
            raise ExternalDataError(
                f"{label}: tensor {t.name!r} points to {location!r}, outside the model's "
                f"folder {folder}; move the file next to the model"
            )
        # Resolved, symlinks and all: a link in the folder (a file, or a folder on the way)
        # must not reach a file outside it.
        path = (folder / location).resolve()
        if resolved_folder not in path.parents:
            raise ExternalDataError(
                f"{label}: tensor {t.name!r} points to {location!r}, which resolves to "
                f"{path} outside the model's folder {resolved_folder} (through a symbolic "
                "link); copy the file into the model's folder"
            )
        if not path.is_file():
            raise ExternalDataError(
                f"{label}: tensor {t.name!r} needs the external data file {location!r}, "
                f"which is not in {folder}"
            )
        # the tensor's size from its dims and type, checked here: a short file would
        # otherwise be a reshape error naming neither the tensor nor the file
        want = _raw_size(t)
        if want is not None and length is not None and length != want:
            raise ExternalDataError(
                f"{label}: tensor {t.name!r} is {want} bytes (dims {list(t.dims)}), but its "
                f"external data length in {location!r} says {length}"
            )
        size = length if length is not None else want
        with open(path, "rb") as f:
            f.seek(offset or 0)
            data = f.read(size) if size is not None else f.read()
        if size is not None and len(data) < size:
            raise ExternalDataError(
                f"{label}: tensor {t.name!r} needs {size} bytes of {location!r} from offset "
                f"{offset or 0}, but the file ({path.stat().st_size} bytes) gives only "
                f"{len(data)}: it is cut short, or not this model's data"
            )
        t.raw_data = data
        del t.external_data[:]
        t.data_location = onnx.TensorProto.DEFAULT


_COUNTS = ("offset", "length")


def _byte_count(
    label: str | None, tensor: str, location: str, entries: dict[str, str], key: str
) -> int | None:
    """The tensor's external data ``offset`` or ``length``: a whole number of bytes, or None."""
    value = entries.get(key)
    if value is None or value == "":
        return None
    try:
        count = int(value)
    except ValueError:
        count = -1
    if count < 0:
        raise ExternalDataError(
            f"{label}: tensor {tensor!r} has the external data {key} {value!r} in "
            f"{location!r}; it must be a whole number of bytes, 0 or more"
        )
    return count


def _raw_size(t: onnx.TensorProto) -> int | None:
    """The bytes of a tensor's raw data from its dims and type; None where it is not fixed."""
    if t.data_type in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED):
        return None
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type))
    except (KeyError, TypeError, ValueError):
        return None
    count = int(np.prod(t.dims, dtype=np.int64)) if t.dims else 1
    bits = _PACKED_BITS.get(t.data_type)
    if bits is not None:  # several values a byte
        return (count * bits + 7) // 8
    return count * dtype.itemsize


# Types stored packed, by their bits a value (the ones this onnx version has).
_PACKED_BITS = {
    getattr(onnx.TensorProto, name): bits
    for name, bits in (
        ("INT4", 4),
        ("UINT4", 4),
        ("FLOAT4E2M1", 4),
        ("INT2", 2),
        ("UINT2", 2),
        ("FLOAT6E2M3", 6),
        ("FLOAT6E3M2", 6),
    )
    if hasattr(onnx.TensorProto, name)
}


def _check_raw_sizes(proto: onnx.ModelProto, label: str | None) -> None:
    """Tensors whose raw bytes do not fit their dims and type: a ``LoadError`` naming them
    (else a reshape error in the middle of loading, naming neither)."""
    for t in external_data_helper._get_all_tensors(proto):
        if not t.HasField("raw_data"):
            continue
        want = _raw_size(t)
        if want is not None and len(t.raw_data) != want:
            raise LoadError(
                f"{label or 'the model'}: tensor {t.name!r} has {len(t.raw_data)} bytes of "
                f"data, but its dims {list(t.dims)} and type "
                f"{helper.tensor_dtype_to_string(t.data_type)} need {want}"
            )


def _check_graph(graph: Graph, label: str | None) -> None:
    """Every value a node reads and every graph output has a producer: a graph input, an
    initializer or a node. A name without one would be a ``KeyError`` in the middle of a call."""
    if not graph.outer_reads:
        return
    where = label or "the model"
    for node in graph.nodes:
        for name in sorted(node.reads() & graph.outer_reads, key=str):
            how = "reads" if name in node.inputs else "reads (in a subgraph)"
            raise LoadError(
                f"{where}: node {node.name!r} ({node.op_type}) {how} {name!r}, which is not a "
                "graph input, an initializer or the output of any node"
            )
    for name in graph.output_names:
        if name in graph.outer_reads:
            raise LoadError(
                f"{where}: graph output {name!r} is not produced by any node and is not a "
                "graph input or an initializer"
            )


def _check_opsets(opsets: dict[str, int], label: str | None) -> None:
    """Warn for an opset newer than the op library knows: its ops run as their newest
    versions that the library has, which is right unless the new opset changed them."""
    from . import ops

    newest: dict[str, int] = {}
    for (domain, _), versions in ops.registered().items():
        newest[domain] = max(newest.get(domain, 0), *(d.since for d in versions))
    for domain, version in sorted(opsets.items()):
        known = newest.get(domain)
        if known is not None and version > known:
            warnings.warn(
                f"{label or 'the model'} uses opset {version} of {domain or 'ai.onnx'}, newer "
                f"than the newest this runtime knows ({known}): its ops run as their opset "
                f"{known} versions, which is wrong where opset {version} changed them",
                NewerOpsetWarning,
                stacklevel=4,
            )
