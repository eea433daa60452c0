"""XLA:CPU tuning of the compiled segments: the compiler options and the layout of
convolution weights.

Both were measured on XLA:CPU only (``benchmarks/bench_runtime.py``); other backends get
JAX's defaults and ONNX's layout.

- **Compiler options.** XLA:CPU sends convolutions to YNNPACK fusions by default; its own
  emitters are faster on the models measured (resnet50 180 -> 121 ms a call, densenet121
  85 -> 57, inception_v1 47 -> 37, alexnet 32 -> 24; vgg19 311 -> 326), so convolutions
  stay XLA's. Dots do go to YNNPACK (``INDIVIDUAL_DOT``): XLA's own dot computes
  ``A @ B.T`` slowly, and ddddocr's CRNN head, a Gemm of (32, 1024) by a 8210x1024 weight,
  took 72 ms a call there against 5.7 ms in onnxruntime (load ~7). On an AVX2-only AMD
  EPYC too: magika b1 10.1 ms a call with the option, 38.2 without (onnxruntime 9.5), the
  CRNN 42 against 49 (onnxruntime 25). The options are given per compile, so the rest of
  the process keeps JAX's defaults. (With XLA's own convolutions, onnx's light squeezenet
  breaks a tie differently: its constant weights make all 1000 logits equal, about 9.5e9,
  where float32 values are 1024 apart, so a one-ulp difference in the summation order
  makes its softmax one-hot; ``tests/runtime/test_backend.py`` compares its logits.)
- **512-bit vectors.** On a CPU with AVX-512, XLA:CPU is told to prefer 512-bit vectors in
  the loops it emits (its default is 256): the elementwise fusions of convolution nets (the
  depthwise taps, activations, transposes) do half the instructions. Measured on the PP-OCR
  paddle exports, process CPU time per call, one process alternating both, 2 cores shared
  (load 11-15): detector 68.6 -> 53.8 ms, recogniser 19.0 -> 16.3, classifier 6.1 -> 5.5,
  magika b4 27.6 -> 25.5. Without AVX-512 the option is left out.
- **LLVM at -O2.** The loops XLA:CPU emits itself (its fusions: activations, pads,
  depthwise taps, transposes) are optimised at LLVM's -O2 instead of its default -O3
  (``xla_backend_optimization_level``; library calls, Eigen's and YNNPACK's convolutions
  and dots, are not compiled here). At -O3, a fusion whose innermost dimension is 16
  floats (an NHWC tensor of 16 channels: the first stage of YOLOv8n, PP-LCNet, the PP-OCR
  models) has its channel loop fully unrolled and the loop around it vectorised across
  width, 16 apart: 687 gathers and shuffles where 64 channels get one contiguous vector
  loop. A HardSwish on 1x112x112x16 took 183 us against 41 us on 1x56x56x64 (the same
  number of values); at -O2 64 us, SiLU 236 -> 88 us, 1x160x160x16 258 -> 108 us; 64
  channels unchanged (load ~11, best of 400). In the models, the fusions' per-step best
  times (JAX's profiler, 40 calls) add to 1,255-1,317 -> 834-1,108 us on PP-LCNet and
  2,659-2,671 -> 2,072-2,359 us on YOLOv8n; convolutions and dots unchanged. Compiles
  are faster too. The A/B over every model of ``bench_realmodels.py`` is in the README.
- **Programs run in the calling thread.** JAX's CPU client runs a program whose cost
  analysis counts fewer than 1,000 flops in the calling thread and hands every other one to
  its own thread pool; the caller then waits for that thread. On the 2-vCPU Intel host
  (2026-12-03) the hand-off and the wake-up cost ~30 us a program: ``a + 1`` on 32 floats
  6 us a call, on 1,024 floats 36 us (6.3 us run inline), a 64x64 dot 61 us (11.5 inline).
  Ember's models are called and read at once, so it asks JAX to run them inline
  (``jax_cpu_enable_async_dispatch=False``; the GIL is released meanwhile): silero-vad
  104 -> 56 us a call (onnxruntime 96), openwakeword's hey_jarvis 198 -> 129 us. Large
  models did not change beyond the noise (YOLOv8n 22-24 ms either way): a numpy input of
  theirs is copied in on JAX's threads, and the program then waits for it there as before.
  It is a setting of JAX's CPU client, read when the client starts: ``run_inline`` sets it
  only where nothing has started JAX's backends yet (a program that did keeps its client),
  and ``EMBER_CPU_ASYNC_DISPATCH=1`` keeps JAX's default (Ember cannot tell JAX's default
  from a program's own ``jax.config.update`` of it to True).
- **Nodes run one by one compute on numpy.** What runs eagerly (a segment of fewer than 20
  nodes after a break, a Loop body or If branch that cannot be one program) went through
  JAX's eager dispatch, ~40 us an op; numpy takes ~5, and a jax array on the CPU is host
  memory already (``to_host`` is a view). ``eager_on_numpy`` says when: on the CPU, and
  while no value is larger than ``EAGER_NUMPY_MAX`` elements (numpy's loops use one core).
  The demo model with a tail of 18 nodes after its NonZero: 339 -> 158 us a call;
  SLANet-plus, whose decoder body ran eagerly at each of 199 steps: 1.85 -> 0.37 s (the
  body is one program now, ``jit.speculate``: 0.13 s).
- **HWIO weights.** XLA:CPU convolves with HWIO kernels (spatial dimensions first, then
  input and output channels); a parameter in ONNX's OIHW layout was copied into that layout
  on every call (resnet50: 100 MB a call; silero-vad's op-15 export, whose 1-D STFT
  convolution has a 258x1x256 weight: 103 -> 59 us a call, against onnxruntime's 67). A
  convolution weight of any spatial rank that only Conv reads is stored on the device as
  HWIO (``oihw_to_hwio``) and the program reads it back through a transpose
  (``read_hwio``), which XLA folds into the convolution.
- **A program's buffers stay in the process between calls.** XLA:CPU allocates a
  program's temporaries and outputs with ``malloc`` on every call. glibc hands a freed
  block of more than its mmap threshold straight back to the kernel, and trims the heap's
  top past its trim threshold; the next call then faults every page in again (~0.9 us a
  4 KiB page on the 2-vCPU host). Both thresholds start at 128 KiB and move up only as
  the process frees large blocks, to at most 32 MiB (and 64 MiB), so how fast a model runs
  depended on what the process had freed before: openwakeword's melspectrogram ran 0.54
  ms a call in one process and 1.1 ms in another (323 page faults a call); a program
  whose 40 MB output is dropped each call took 9.8 ms (9,766 faults), 1.15 ms without
  them. ``keep_buffers`` sets the thresholds after each compile to what glibc's own rule
  gives once the program's largest buffer (temporaries, outputs, an input copied in) is
  freed (mmap threshold above it), the trim threshold four times that, never below
  glibc's ceilings (32 MiB, 64 MiB) and never lowered. (At twice, glibc's own rule, the
  holes XLA's aligned blocks leave made the heap grow past it and be trimmed again every
  few calls in 2 of 8 processes: 13-21 % of a 40 MB output faulted a call; at four times
  0-2 %, the heap growing once or twice.) The memory kept is what each call takes
  again anyway. A program that runs on JAX's threads (its numpy inputs are copied in
  there) and needs a block of more than 64 MiB still faults it in every call: their malloc
  arenas cannot hold it (CenterNet's DLA-34, 68 MB of temporaries: ~70 MB a call). Only
  with glibc, on the CPU backend, and where the user set no threshold
  (``MALLOC_MMAP_THRESHOLD_`` and the like, or ``GLIBC_TUNABLES``);
  ``EMBER_CPU_KEEP_BUFFERS=0`` leaves malloc as it is.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import sys
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

EAGER_NUMPY_MAX = 1 << 20
"""The most elements a value may hold for nodes run one by one to compute on numpy."""


@functools.cache
def _cpu_backend() -> bool:
    import jax

    return jax.default_backend() == "cpu"


def eager_on_numpy(values: Iterable[Any]) -> bool:
    """Whether nodes run one by one on ``values`` should compute on numpy (see the module
    docstring): JAX's default backend is the CPU and none of them is large."""
    return _cpu_backend() and all(
        getattr(v, "size", 0) <= EAGER_NUMPY_MAX for v in values if not isinstance(v, list)
    )


def _has_avx512() -> bool:
    """True where the CPU reports AVX-512F (Linux's /proc/cpuinfo; elsewhere False)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            return any(line.startswith("flags") and " avx512f" in line for line in f)
    except OSError:
        return False


COMPILER_OPTIONS: dict[str, str | bool] = {
    "xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT",
    "xla_backend_optimization_level": "2",
}
if _has_avx512():
    COMPILER_OPTIONS["xla_cpu_prefer_vector_width"] = "512"


ASYNC_DISPATCH_ENV = "EMBER_CPU_ASYNC_DISPATCH"
"""``1`` (or ``true``, ``yes``, ``on``): Ember leaves JAX's CPU client to run programs on
its own threads."""


def run_inline() -> None:
    """Ask JAX's CPU client to run programs in the calling thread (see the module
    docstring), where JAX's backends have not started yet and ``EMBER_CPU_ASYNC_DISPATCH``
    does not opt out. ``load()``, ``compile()`` and ``run()`` call it: a recording opened
    after ``load()`` starts JAX's backend (to name it) with the setting already made."""
    if os.environ.get(ASYNC_DISPATCH_ENV, "").strip().lower() in ("1", "true", "yes", "on"):
        return
    import jax
    from jax._src import xla_bridge

    # JAX's own flag and whether its client started: no public reader of either
    flag = getattr(xla_bridge, "_CPU_ENABLE_ASYNC_DISPATCH", None)
    started = getattr(xla_bridge, "backends_are_initialized", None)
    if flag is None or started is None:  # another JAX: left as it is
        return
    if flag.value and not started():  # the client reads it when it starts
        jax.config.update("jax_cpu_enable_async_dispatch", False)


def compiler_options() -> dict[str, str | bool] | None:
    """The options every segment is compiled with on this backend (None: JAX's defaults)."""
    import jax

    return COMPILER_OPTIONS if jax.default_backend() == "cpu" else None


def hwio_params(
    nodes: Iterable[Any], params: Iterable[str], values: Mapping[str, Any]
) -> frozenset[str]:
    """The parameters to keep on the device as HWIO: convolution weights (1-D, 2-D or 3-D:
    values of 3 dimensions or more) that no node but Conv reads, as its weight (input 1).
    Empty off XLA:CPU."""
    import jax

    if jax.default_backend() != "cpu":
        return frozenset()
    wanted = set(params)
    uses: dict[str, set[tuple[str, int]]] = {}
    for node in nodes:
        for i, name in enumerate(node.inputs):
            if name in wanted:
                uses.setdefault(name, set()).add((node.op_type, i))
    return frozenset(
        n for n, used in uses.items() if used == {("Conv", 1)} and np.ndim(values[n]) >= 3
    )


def oihw_to_hwio(w: np.ndarray) -> np.ndarray:
    """A convolution weight (O, I, *spatial) in XLA:CPU's kernel layout (*spatial, I, O),
    contiguous.

    Done as a 3-D transpose over (O, I, prod(spatial)), which numpy copies about 2.7x
    faster than the 4-D ``transpose(2, 3, 1, 0)`` when the memory is warm. On a fresh load
    the page faults of the new 100 MB dominate (resnet50: about 0.1 s, once).
    """
    o, i, *spatial = w.shape
    hwio = np.ascontiguousarray(w.reshape(o, i, -1).transpose(2, 1, 0))
    return hwio.reshape(*spatial, i, o)


def read_hwio(value: Any) -> Any:
    """Inside a program: an HWIO weight as the OIHW tensor the ONNX graph expects."""
    import jax.numpy as jnp

    n = value.ndim
    return jnp.transpose(value, (n - 1, n - 2, *range(n - 2)))


KEEP_BUFFERS_ENV = "EMBER_CPU_KEEP_BUFFERS"
"""``0`` (or ``false``, ``no``, ``off``): Ember leaves glibc's malloc thresholds as they are."""

_M_TRIM_THRESHOLD = -1  # mallopt's parameters (malloc.h)
_M_MMAP_THRESHOLD = -3
_GLIBC_MMAP_CEILING = 32 << 20  # the most glibc's own moving mmap threshold reaches (64-bit)
_KEEP_MAX = 1 << 30  # the most kept
_INT_MAX = 2**31 - 1  # mallopt takes a C int
# a user's own malloc settings, which Ember leaves as they are (glibc's environment
# variables and tunables; a program's own ``mallopt`` calls cannot be seen)
_USER_MALLOC_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")
_USER_TUNABLES = (
    "glibc.malloc.mmap_threshold",
    "glibc.malloc.trim_threshold",
    "glibc.malloc.top_pad",
)
_kept = 0  # the mmap threshold set so far (0: none)
_kept_lock = threading.Lock()  # models compile on threads of their own


@functools.cache
def _mallopt() -> Any:
    """glibc's ``mallopt``, where Ember may set it: Linux with glibc, the CPU backend, no
    malloc threshold set by the user, and ``EMBER_CPU_KEEP_BUFFERS`` not opting out; else
    None."""
    if os.environ.get(KEEP_BUFFERS_ENV, "").strip().lower() in ("0", "false", "no", "off"):
        return None
    if any(os.environ.get(name) for name in _USER_MALLOC_ENV):
        return None
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if any(name in tunables for name in _USER_TUNABLES):
        return None
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return None
    if not _cpu_backend():
        return None
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is not None:
        mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
        mallopt.restype = ctypes.c_int
    return mallopt


def keep_buffers(memory: Mapping[str, int] | None, input_bytes: int = 0) -> None:
    """Keep a compiled program's per-call buffers in the process between calls (see the
    module docstring). ``memory``: the program's memory analysis (``temp_bytes``,
    ``output_bytes``; None: not known); ``input_bytes``: its largest argument (a numpy
    input is copied into a buffer of that size on every call)."""
    global _kept
    memory = memory or {}
    largest = max(memory.get("temp_bytes", 0), memory.get("output_bytes", 0), input_bytes)
    threshold = min(max(_GLIBC_MMAP_CEILING, largest + (1 << 20)), _KEEP_MAX)
    if threshold <= _kept:
        return
    mallopt = _mallopt()
    if mallopt is None:
        return
    with _kept_lock:
        if threshold <= _kept:
            return
        # the trim threshold first: a heap top of up to four times the largest block stays
        trim = min(4 * threshold, _INT_MAX)
        if mallopt(_M_TRIM_THRESHOLD, trim) and mallopt(_M_MMAP_THRESHOLD, threshold):
            _kept = threshold
