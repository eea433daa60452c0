"""Signal ops: DFT, STFT, window functions, MelWeightMatrix.

Complex values travel as a trailing dimension of size 2 (real, imaginary), or 1 for real
input, as ONNX defines. Lengths (dft_length, frame_step, window size) are host inputs.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from . import op


def _np_dtype(code: int) -> np.dtype:
    from onnx.helper import tensor_dtype_to_np_dtype

    return np.dtype(tensor_dtype_to_np_dtype(code))


def _as_complex(x, wide: bool = True):
    # Forward transforms in double precision: float32 FFTs miss atol 1e-7 on near-zero bins.
    if wide:
        x = x.astype(jnp.float64)
    if x.shape[-1] == 1:
        return x[..., 0]
    return x[..., 0] + 1j * x[..., 1]


def _as_pairs(c, dtype):
    return jnp.stack([jnp.real(c), jnp.imag(c)], axis=-1).astype(dtype)


def _dft(x, dft_length, axis: int, inverse: int, onesided: int):
    x = jnp.asarray(x)
    axis = axis % x.ndim
    if dft_length is None or np.asarray(dft_length).size == 0:
        n = 2 * (x.shape[axis] - 1) if inverse and onesided else x.shape[axis]
    else:
        n = int(np.asarray(dft_length))
    signal = _as_complex(x, wide=not inverse)
    if inverse:
        if onesided:
            return jnp.fft.irfft(signal, n=n, axis=axis)[..., None].astype(x.dtype)
        return _as_pairs(jnp.fft.ifft(signal, n=n, axis=axis), x.dtype)
    spectrum = jnp.fft.fft(signal, n=n, axis=axis)
    if onesided:
        spectrum = jnp.take(spectrum, jnp.arange(n // 2 + 1), axis=axis)
    return _as_pairs(spectrum, x.dtype)


@op("DFT", since=17, host_inputs=(1,))
def dft_17(input, dft_length=None, *, axis=1, inverse=0, onesided=0):
    """(Inverse) DFT along the ``axis`` attribute, full or one-sided; opsets 17-19."""
    return _dft(input, dft_length, axis, inverse, onesided)


@op("DFT", since=20, host_inputs=(1, 2))
def dft(input, dft_length=None, axis=None, *, inverse=0, onesided=0):
    """(Inverse) DFT along the ``axis`` input, full or one-sided; opset 20+."""
    ax = -2 if axis is None else int(np.asarray(axis))
    return _dft(input, dft_length, ax, inverse, onesided)


@op("STFT", since=17, host_inputs=(1, 3))
def stft(signal, frame_step, window=None, frame_length=None, *, onesided=1):
    """Short-time Fourier transform: windowed frames of the signal, each transformed; opset 17+."""
    x = jnp.asarray(signal)
    step = int(np.asarray(frame_step))
    if frame_length is not None:
        length = int(np.asarray(frame_length))
    elif window is not None:
        length = int(jnp.shape(window)[0])
    else:
        length = x.shape[-2]
    w = jnp.ones((length,), x.dtype) if window is None else jnp.asarray(window)
    frames = 1 + (x.shape[-2] - length) // step
    starts = np.arange(frames)[:, None] * step + np.arange(w.shape[0])[None, :]
    valid = starts < x.shape[-2]
    framed = jnp.take(x, jnp.asarray(np.minimum(starts, x.shape[-2] - 1)), axis=-2)
    framed = jnp.where(jnp.asarray(valid)[..., None], framed, 0)  # (batch, frames, win, c)
    framed = framed * w.reshape(-1, 1).astype(x.dtype)

    spectrum = jnp.fft.fft(_as_complex(framed), n=length, axis=-1)
    if onesided:
        spectrum = spectrum[..., : length // 2 + 1]
    return _as_pairs(spectrum, x.dtype)


def _window_positions(size, periodic: int):
    n = int(np.asarray(size))
    return np.arange(n, dtype=np.float64), (n if periodic else n - 1)


@op("HannWindow", since=17, host_inputs=(0,))
def hann_window(size, *, output_datatype=1, periodic=1):
    """A Hann window of ``size`` (periodic or symmetric); opset 17+."""
    k, n = _window_positions(size, periodic)
    return (np.sin(k * np.pi / n) ** 2).astype(_np_dtype(output_datatype))


@op("HammingWindow", since=17, host_inputs=(0,))
def hamming_window(size, *, output_datatype=1, periodic=1):
    """A Hamming window of ``size`` (periodic or symmetric); opset 17+."""
    k, n = _window_positions(size, periodic)
    alpha = 25.0 / 46.0
    return (alpha - np.cos(k * np.pi * 2 / n) * (1 - alpha)).astype(_np_dtype(output_datatype))


@op("BlackmanWindow", since=17, host_inputs=(0,))
def blackman_window(size, *, output_datatype=1, periodic=1):
    """A Blackman window of ``size`` (periodic or symmetric); opset 17+."""
    k, n = _window_positions(size, periodic)
    w = 0.42 - 0.5 * np.cos(k * np.pi * 2 / n) + 0.08 * np.cos(k * np.pi * 4 / n)
    return w.astype(_np_dtype(output_datatype))


@op("MelWeightMatrix", since=17, host_inputs=(0, 1, 2, 3, 4))
def mel_weight_matrix(
    num_mel_bins,
    dft_length,
    sample_rate,
    lower_edge_hertz,
    upper_edge_hertz,
    *,
    output_datatype=1,
):
    """The mel filter bank mapping one-sided DFT bins to ``num_mel_bins``; opset 17+."""
    bins = int(np.asarray(num_mel_bins))
    length = int(np.asarray(dft_length))
    rate = np.asarray(sample_rate)
    low = 2595 * np.log1p(np.asarray(lower_edge_hertz) / 700) / np.log(10)
    high = 2595 * np.log1p(np.asarray(upper_edge_hertz) / 700) / np.log(10)
    points = np.arange(bins + 2)
    mel = points * ((high - low) / points.shape[0]) + low
    hz = 700 * np.expm1(mel / 2595 * np.log(10))
    edges = (((length + 1) * hz) // rate).astype(int)
    out = np.zeros((length // 2 + 1, bins))
    for i in range(bins):
        left, center, right = edges[i], edges[i + 1], edges[i + 2]
        if center == left:
            out[center, i] = 1
        else:
            j = np.arange(left, center + 1)
            out[j, i] = (j - left) / (center - left)
        if right > center:
            j = np.arange(center, right)
            out[j, i] = (right - j) / (right - center)
    return out.astype(_np_dtype(output_datatype))
