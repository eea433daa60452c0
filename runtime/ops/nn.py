"""Normalization, losses, random generators and SwiGLU.

Convolutions are in ``conv.py`` and pooling in ``pool.py``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import op, xp
from .pool import spatial_axes

# ---------------------------------------------------------------------------------------------
# normalization


def _channel(v, ndim: int):
    return jnp.reshape(v, (1, -1) + (1,) * (ndim - 2))


@op("BatchNormalization")
def batch_normalization(
    X,
    scale,
    B,
    input_mean,
    input_var,
    *,
    epsilon=1e-5,
    momentum=0.9,
    training_mode=0,
    is_test=1,
    spatial=1,
    consumed_inputs=None,
):
    """Per-channel normalization by running stats, or batch stats in training; opset 1+."""
    x = jnp.asarray(X)
    if not training_mode:
        # Fold into one multiply-add (on the host when the statistics are initializers):
        # XLA fuses it into the preceding conv's epilogue.
        m = xp(scale, B, input_mean, input_var)
        inv = m.asarray(scale) / m.sqrt(m.asarray(input_var) + epsilon)
        shift = m.asarray(B) - m.asarray(input_mean) * inv
        return (x * _channel(inv, x.ndim) + _channel(shift, x.ndim)).astype(x.dtype)
    axes = (0,) + spatial_axes(x)
    mean = jnp.mean(x, axis=axes)
    var = jnp.var(x, axis=axes)
    y = (x - _channel(mean, x.ndim)) * lax.rsqrt(_channel(var, x.ndim) + epsilon)
    y = y * _channel(scale, x.ndim) + _channel(B, x.ndim)
    running_mean = jnp.asarray(input_mean) * momentum + mean * (1 - momentum)
    running_var = jnp.asarray(input_var) * momentum + var * (1 - momentum)
    return (
        y.astype(x.dtype),
        running_mean.astype(jnp.asarray(input_mean).dtype),
        running_var.astype(jnp.asarray(input_var).dtype),
    )


@op("InstanceNormalization")
def instance_normalization(input, scale, B, *, epsilon=1e-5):
    """Each (sample, channel) normalized over its spatial dims, scaled, shifted; opset 1+."""
    x = jnp.asarray(input)
    xs = _stash(x, 1)
    axes = spatial_axes(x)
    mean = jnp.mean(xs, axis=axes, keepdims=True)
    var = jnp.var(xs, axis=axes, keepdims=True)
    y = (xs - mean) * lax.rsqrt(var + epsilon)
    return (y * _channel(scale, x.ndim) + _channel(B, x.ndim)).astype(x.dtype)


def _stash(x, stash_type: int):
    return (
        x.astype(jnp.float32) if stash_type == 1 and x.dtype in (jnp.float16, jnp.bfloat16) else x
    )


@op("LayerNormalization", since=17)
def layer_normalization(X, Scale, B=None, *, axis=-1, epsilon=1e-5, stash_type=1):
    """Normalized over the dims from ``axis`` on; Y, mean and inverse std dev; opset 17+."""
    x = jnp.asarray(X)
    axis = axis % x.ndim
    axes = tuple(range(axis, x.ndim))
    xs = _stash(x, stash_type)
    mean = jnp.mean(xs, axis=axes, keepdims=True)
    d = xs - mean
    var = jnp.mean(d * d, axis=axes, keepdims=True)
    inv = 1.0 / jnp.sqrt(var + epsilon)
    y = (d * inv).astype(x.dtype) * jnp.asarray(Scale)
    if B is not None:
        y = y + jnp.asarray(B)
    return y.astype(x.dtype), mean.astype(x.dtype), inv.astype(x.dtype)


@op("RMSNormalization", since=23)
def rms_normalization(X, scale, *, axis=-1, epsilon=1e-5, stash_type=1):
    """X divided by its root mean square over the dims from ``axis``, scaled; opset 23+."""
    x = jnp.asarray(X)
    axis = axis % x.ndim
    xs = _stash(x, stash_type)
    ms = jnp.mean(xs * xs, axis=tuple(range(axis, x.ndim)), keepdims=True)
    y = xs * lax.rsqrt(ms + epsilon)
    return (y.astype(x.dtype) * jnp.asarray(scale)).astype(x.dtype)


def _group_norm(x, scale, bias, epsilon, num_groups, stash_type, per_channel):
    n, c = x.shape[:2]
    xs = _stash(x, stash_type)
    g = xs.reshape((n, num_groups, -1))
    mean = jnp.mean(g, axis=-1, keepdims=True)
    var = jnp.var(g, axis=-1, keepdims=True)
    y = ((g - mean) * lax.rsqrt(var + epsilon)).reshape(x.shape).astype(x.dtype)
    if not per_channel:  # opset 18: scale and bias are per group
        scale = jnp.repeat(jnp.asarray(scale), c // num_groups)
        bias = jnp.repeat(jnp.asarray(bias), c // num_groups)
    return (y * _channel(scale, x.ndim) + _channel(bias, x.ndim)).astype(x.dtype)


@op("GroupNormalization", since=18)
def group_normalization_18(X, scale, bias, *, epsilon=1e-5, num_groups=1):
    """Normalized over channel groups; scale and bias are per group; opsets 18-20."""
    return _group_norm(jnp.asarray(X), scale, bias, epsilon, num_groups, 0, per_channel=False)


@op("GroupNormalization", since=21)
def group_normalization(X, scale, bias, *, epsilon=1e-5, num_groups=1, stash_type=1):
    """Normalized over channel groups; scale and bias are per channel; opset 21+."""
    return _group_norm(jnp.asarray(X), scale, bias, epsilon, num_groups, stash_type, True)


@op("LpNormalization")
def lp_normalization(input, *, axis=-1, p=2):
    """X divided by its p-norm (p 1 or 2) along ``axis``; opset 1+."""
    x = jnp.asarray(input)
    if p == 1:
        norm = jnp.sum(jnp.abs(x), axis=axis, keepdims=True)
    else:
        norm = jnp.sqrt(jnp.sum(x * x, axis=axis, keepdims=True))
    return jnp.where(norm == 0, 0, x / jnp.where(norm == 0, 1, norm)).astype(x.dtype)


@op("MeanVarianceNormalization", since=9)
def mean_variance_normalization(X, *, axes=(0, 2, 3)):
    """(X - mean) / std dev over ``axes``; opset 9+."""
    x = jnp.asarray(X)
    axes = tuple(int(a) for a in axes)
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean(x * x, axis=axes, keepdims=True) - mean * mean
    return ((x - mean) / (jnp.sqrt(var) + 1e-9)).astype(x.dtype)


@op("LRN")
def lrn(X, *, alpha=1e-4, beta=0.75, bias=1.0, size=1):
    """Local response normalization across ``size`` neighbouring channels; opset 1+."""
    x = jnp.asarray(X)
    lo = (size - 1) // 2
    hi = size - 1 - lo
    sq = x * x
    window = (1, size) + (1,) * (x.ndim - 2)
    padding = ((0, 0), (lo, hi)) + ((0, 0),) * (x.ndim - 2)
    s = lax.reduce_window(sq, jnp.asarray(0, x.dtype), lax.add, window, (1,) * x.ndim, padding)
    return (x / (bias + alpha / size * s) ** beta).astype(x.dtype)


# ---------------------------------------------------------------------------------------------
# losses


def _reduce_loss(loss, weight_sum, reduction: str):
    if reduction == "none":
        return loss
    if reduction == "sum":
        return jnp.sum(loss)
    return jnp.sum(loss) / weight_sum


def _nll(log_prob, target, weight, ignore_index, reduction):
    lp = jnp.asarray(log_prob)
    t = jnp.asarray(target).astype(jnp.int64)
    c = lp.shape[1]
    if ignore_index is not None:
        keep = t != ignore_index
        t_safe = jnp.where(keep, t, 0)
    else:
        keep = jnp.ones(t.shape, bool)
        t_safe = t
    picked = jnp.take_along_axis(lp, jnp.expand_dims(t_safe, 1), axis=1)[:, 0]
    w = jnp.ones((c,), lp.dtype) if weight is None else jnp.asarray(weight)
    wt = jnp.where(keep, w[t_safe], 0).astype(lp.dtype)
    loss = -picked * wt
    if reduction == "mean":
        return (jnp.sum(loss) / jnp.sum(wt)).astype(lp.dtype)
    return _reduce_loss(loss, None, reduction).astype(lp.dtype)


@op("NegativeLogLikelihoodLoss", since=12)
def negative_log_likelihood_loss(
    input, target, weight=None, *, ignore_index=None, reduction="mean"
):
    """NLL loss of log-probabilities at the targets, weighted, reduced; opset 12+."""
    return _nll(input, target, weight, ignore_index, reduction)


@op("SoftmaxCrossEntropyLoss", since=12)
def softmax_cross_entropy_loss(
    scores, labels, weights=None, *, ignore_index=None, reduction="mean"
):
    """Cross entropy of softmax(scores) and the labels; loss, log_prob; opset 12+."""
    s = jnp.asarray(scores)
    log_prob = jax.nn.log_softmax(s, axis=1)
    loss = _nll(log_prob, labels, weights, ignore_index, reduction)
    return loss, log_prob.astype(s.dtype)


# ---------------------------------------------------------------------------------------------
# random: ONNX leaves the values unspecified (tests check shapes and dtypes). The key comes from
# ``seed``, or is drawn when the node is traced, so a compiled segment repeats its draws.


_ONNX_FLOAT = {1: np.float32, 10: np.float16, 11: np.float64, 16: jnp.bfloat16}


def _key(seed):
    if seed is None:
        seed = np.random.randint(0, 2**31 - 1)
    return jax.random.PRNGKey(
        int(np.float32(seed).view(np.int32)) if isinstance(seed, float) else int(seed)
    )


def _onnx_dtype(code: int, like=None):
    from onnx.helper import tensor_dtype_to_np_dtype

    if code is None:
        return np.dtype(like.dtype)
    return _ONNX_FLOAT.get(code) or tensor_dtype_to_np_dtype(code)


@op("RandomNormal")
def random_normal(*, dtype=1, mean=0.0, scale=1.0, seed=None, shape=()):
    """Normal draws of ``shape`` (jax.random: not numpy's stream); opset 1+."""
    d = _onnx_dtype(dtype)
    z = jax.random.normal(_key(seed), tuple(int(s) for s in shape), jnp.float32)
    return (z * scale + mean).astype(d)


@op("RandomUniform")
def random_uniform(*, dtype=1, high=1.0, low=0.0, seed=None, shape=()):
    """Uniform draws in [``low``, ``high``) of ``shape`` (jax.random); opset 1+."""
    d = _onnx_dtype(dtype)
    u = jax.random.uniform(_key(seed), tuple(int(s) for s in shape), jnp.float32, low, high)
    return u.astype(d)


@op("RandomNormalLike")
def random_normal_like(input, *, dtype=None, mean=0.0, scale=1.0, seed=None):
    """Normal draws of the input's shape (jax.random); opset 1+."""
    d = _onnx_dtype(dtype, jnp.asarray(input))
    z = jax.random.normal(_key(seed), jnp.shape(input), jnp.float32)
    return (z * scale + mean).astype(d)


@op("RandomUniformLike")
def random_uniform_like(input, *, dtype=None, high=1.0, low=0.0, seed=None):
    """Uniform draws of the input's shape (jax.random); opset 1+."""
    d = _onnx_dtype(dtype, jnp.asarray(input))
    u = jax.random.uniform(_key(seed), jnp.shape(input), jnp.float32, low, high)
    return u.astype(d)


@op("Bernoulli", since=15)
def bernoulli(input, *, dtype=None, seed=None):
    """1 with the input's probability, else 0 (jax.random: not numpy's draws); opset 15+."""
    p = jnp.asarray(input)
    d = _onnx_dtype(dtype, p)
    u = jax.random.uniform(_key(seed), p.shape, jnp.float32)
    return (u < p.astype(jnp.float32)).astype(d)


@op("SwiGLU", since=28)
def swiglu(A, B, *, alpha=1.0):
    """A * sigmoid(``alpha`` * A) * B; opset 28+."""
    a = jnp.asarray(A)
    return (a * jax.nn.sigmoid(alpha * a).astype(a.dtype) * jnp.asarray(B)).astype(a.dtype)
