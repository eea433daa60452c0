"""Transformer ops: Attention (opset 23+), RotaryEmbedding.

Masks are built as additive biases (0 / -inf) like the ONNX reference so that fully masked
rows produce zeros instead of NaN.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from . import op


def _split_heads(x, num_heads: int):
    b, s, h = x.shape
    return jnp.transpose(x.reshape(b, s, num_heads, h // num_heads), (0, 2, 1, 3))


def _causal_bias(q_len: int, kv_len: int, offset, dtype, left=-1, right=-1, causal=True):
    """(q, kv) or (batch, 1, q, kv) additive bias; ``offset`` aligns queries to keys."""
    i = np.arange(q_len).reshape(q_len, 1)
    j = np.arange(kv_len).reshape(1, kv_len)
    allowed: Any  # numpy for a fixed offset, JAX for one given per batch
    if np.ndim(offset) > 0 or not isinstance(offset, (int, np.integer)):
        diff = (i + jnp.reshape(offset, (-1, 1, 1))) - j  # (batch, q, kv)
        allowed = jnp.ones(diff.shape, bool)
    else:
        diff = (i + int(offset)) - j
        allowed = np.ones(diff.shape, bool)
    if causal:
        allowed = allowed & (diff >= 0)
    if left >= 0:
        allowed = allowed & (diff <= left)
    if right >= 0:
        allowed = allowed & (-diff <= right)
    bias = jnp.where(allowed, jnp.asarray(0, dtype), jnp.asarray(-jnp.inf, dtype))
    return bias[:, None] if bias.ndim == 3 else bias


@op("Attention", since=23)
def attention(
    Q,
    K,
    V,
    attn_mask=None,
    past_key=None,
    past_value=None,
    nonpad_kv_seqlen=None,
    *,
    is_causal=0,
    kv_num_heads=None,
    q_num_heads=None,
    qk_matmul_output_mode=0,
    scale=None,
    softcap=0.0,
    softmax_precision=None,
    left_window_size=-1,
    right_window_size=-1,
):
    """Scaled dot-product attention: GQA, masks, causal windows, softcap, KV cache; opset 23+.

    Y, present key, present value and the requested QK output, in named steps."""
    q, k, v = jnp.asarray(Q), jnp.asarray(K), jnp.asarray(V)
    dtype = q.dtype
    three_d = q.ndim == 3
    if three_d:
        q, k, v = _to_heads(q, k, v, q_num_heads, kv_num_heads)
    if scale is None:
        scale = 1.0 / np.sqrt(q.shape[3])
    if past_key is not None:
        k = jnp.concatenate([jnp.asarray(past_key), k], axis=2)
    if past_value is not None:
        v = jnp.concatenate([jnp.asarray(past_value), v], axis=2)
    present_key, present_value = k, v
    bias = _attention_bias(
        q,
        k,
        attn_mask,
        past_key,
        nonpad_kv_seqlen,
        is_causal=is_causal,
        left_window_size=left_window_size,
        right_window_size=right_window_size,
    )
    k, v = _repeat_kv_heads(k, v, q.shape[1])
    qk, scores = _scores(q, k, bias, np.sqrt(scale).astype(dtype), softcap)
    qk_out = scores if qk_matmul_output_mode == 2 else qk
    probs = _masked_softmax(scores, bias, softmax_precision)
    if qk_matmul_output_mode == 3:
        qk_out = probs
    y = jnp.einsum("bhqk,bhkd->bhqd", probs.astype(dtype), v)
    if three_d:
        y = jnp.transpose(y, (0, 2, 1, 3)).reshape(y.shape[0], y.shape[2], -1)
    return y.astype(dtype), present_key, present_value, qk_out.astype(dtype)


def _to_heads(q, k, v, q_num_heads, kv_num_heads):
    """3-D (batch, seq, heads * head) inputs as 4-D (batch, heads, seq, head)."""
    if q_num_heads is None or kv_num_heads is None:
        raise ValueError("Attention: 3-D inputs need the q_num_heads and kv_num_heads attributes")
    return (
        _split_heads(q, q_num_heads),
        _split_heads(k, kv_num_heads),
        _split_heads(v, kv_num_heads),
    )


def _attention_bias(
    q, k, attn_mask, past_key, nonpad_kv_seqlen, *, is_causal, left_window_size, right_window_size
):
    """The additive (0 / -inf) bias of the scores: the mask (bool or float, padded to the
    keys' length), the causal or sliding window, and the padding after each batch entry's
    ``nonpad_kv_seqlen`` keys."""
    dtype = q.dtype
    q_len, kv_len = q.shape[2], k.shape[2]
    bias = jnp.zeros((q_len, kv_len), dtype)
    mask = None if attn_mask is None else jnp.asarray(attn_mask)
    if mask is not None and mask.shape[-1] < kv_len:
        fill = False if mask.dtype == jnp.bool_ else -jnp.inf
        widths = [(0, 0)] * (mask.ndim - 1) + [(0, kv_len - mask.shape[-1])]
        mask = jnp.pad(mask, widths, constant_values=fill)
    if mask is not None:
        if mask.dtype == jnp.bool_:
            mask = jnp.where(mask, jnp.asarray(0, dtype), jnp.asarray(-jnp.inf, dtype))
        bias = bias + mask.astype(dtype)
    if nonpad_kv_seqlen is not None and past_key is None:
        offset = jnp.reshape(jnp.asarray(nonpad_kv_seqlen), (-1,)) - q_len
    else:
        offset = 0 if past_key is None else int(jnp.shape(past_key)[2])
    left = -1 if left_window_size is None else int(left_window_size)
    right = -1 if right_window_size is None else int(right_window_size)
    windowed = left >= 0 or right >= 0
    if is_causal or windowed:
        bias = bias + _causal_bias(
            q_len,
            kv_len,
            offset,
            dtype,
            left=left,
            right=right,
            causal=bool(is_causal),
        )
    if nonpad_kv_seqlen is not None:
        keep = jnp.arange(kv_len) < jnp.asarray(nonpad_kv_seqlen)[:, None]
        pad_bias = jnp.where(keep, 0, -jnp.inf).astype(dtype)
        bias = bias + pad_bias.reshape(q.shape[0], 1, 1, kv_len)
    return bias


def _repeat_kv_heads(k, v, heads_q: int):
    """Grouped-query attention: each key/value head serves heads_q / heads_kv query heads."""
    heads_kv = k.shape[1]
    if heads_q == heads_kv:
        return k, v
    return jnp.repeat(k, heads_q // heads_kv, axis=1), jnp.repeat(v, heads_q // heads_kv, axis=1)


def _scores(q, k, bias, root, softcap):
    """QK^T scaled (sqrt(scale) on each side, as the reference does) and soft-capped, and
    the same plus the bias."""
    qk = jnp.einsum("bhqd,bhkd->bhqk", q * root, k * root)
    if softcap:
        qk = jnp.tanh(qk / softcap) * softcap
    return qk, qk + bias


def _masked_softmax(scores, bias, softmax_precision):
    """Softmax over the keys, in ``softmax_precision`` when given; a row whose bias masks
    every key is zeros, not NaN."""
    if softmax_precision is not None:
        from onnx.helper import tensor_dtype_to_np_dtype

        scores = scores.astype(tensor_dtype_to_np_dtype(softmax_precision))
    top = jnp.max(scores, axis=-1, keepdims=True)
    e = jnp.exp(scores - jnp.where(jnp.isneginf(top), 0, top))
    total = jnp.sum(e, axis=-1, keepdims=True)
    probs = e / jnp.where(total == 0, 1, total)
    fully_masked = jnp.isneginf(jnp.max(bias, axis=-1, keepdims=True))
    return jnp.where(fully_masked, 0, probs)


@op("RotaryEmbedding", since=23)
def rotary_embedding(
    X,
    cos_cache,
    sin_cache,
    position_ids=None,
    *,
    interleaved=0,
    num_heads=0,
    rotary_embedding_dim=0,
):
    """Rotary position embedding of X from the cos/sin caches (interleaved or not); opset 23+."""
    x = jnp.asarray(X)
    original = x.shape
    if x.ndim == 4:  # (batch, heads, seq, head) -> (batch, seq, heads, head)
        x = jnp.transpose(x, (0, 2, 1, 3))
    else:
        if not num_heads:
            raise ValueError("RotaryEmbedding: 3-D input needs the num_heads attribute")
        x = x.reshape(x.shape[0], x.shape[1], num_heads, -1)
    head = x.shape[3]
    dim = rotary_embedding_dim or head
    rot, rest = x[..., :dim], x[..., dim:]
    cos, sin = jnp.asarray(cos_cache), jnp.asarray(sin_cache)
    if position_ids is not None:
        pos = jnp.asarray(position_ids)
        cos, sin = cos[pos], sin[pos]
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    if interleaved:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
    else:
        x1, x2 = rot[..., : dim // 2], rot[..., dim // 2 :]
    real = cos * x1 - sin * x2
    imag = sin * x1 + cos * x2
    if interleaved:
        rot = jnp.stack([real, imag], axis=-1).reshape(rot.shape)
    else:
        rot = jnp.concatenate([real, imag], axis=-1)
    out = jnp.concatenate([rot, rest], axis=-1).astype(x.dtype)
    if len(original) == 3:
        return out.reshape(original)
    return jnp.transpose(out, (0, 2, 1, 3))


@op("FlexAttention", since=1, domain="ai.onnx.preview", subgraphs=True)
def flex_attention(Q, K, V, *, scale=None, score_mod=None, prob_mod=None, softmax_precision=None):
    """Attention with the ``score_mod``/``prob_mod`` subgraphs applied to the scores; opset 1+."""
    q, k, v = jnp.asarray(Q), jnp.asarray(K), jnp.asarray(V)
    if scale is None:
        scale = 1.0 / np.sqrt(q.shape[-1])
    if q.shape[1] != k.shape[1]:
        k = jnp.repeat(k, q.shape[1] // k.shape[1], axis=1)
        v = jnp.repeat(v, q.shape[1] // v.shape[1], axis=1)
    root = np.sqrt(np.float32(scale)).astype(q.dtype)
    scores = jnp.einsum("bhqd,bhkd->bhqk", q * root, k * root)
    if softmax_precision is not None:
        from onnx.helper import tensor_dtype_to_np_dtype

        work = np.dtype(tensor_dtype_to_np_dtype(softmax_precision))
    else:
        work = np.dtype(np.float32) if np.dtype(q.dtype).itemsize < 4 else np.dtype(q.dtype)
    scores = scores.astype(work)
    if score_mod is not None:
        scores = jnp.asarray(score_mod(scores)[0]).astype(work)
    e = jnp.exp(scores - jnp.max(scores, axis=-1, keepdims=True))
    probs = e / jnp.sum(e, axis=-1, keepdims=True)
    if prob_mod is not None:
        probs = jnp.asarray(prob_mod(probs)[0]).astype(work)
    return jnp.einsum("bhqk,bhkd->bhqd", probs, v.astype(work)).astype(v.dtype)


@op("LinearAttention", since=27)
def linear_attention(
    query,
    key,
    value,
    past_state=None,
    decay=None,
    beta=None,
    *,
    chunk_size=None,
    kv_num_heads=None,
    q_num_heads=None,
    scale=None,
    update_rule="gated_delta",
):
    """Linear attention as a recurrence over time (gated / delta rules); Y, state; opset 27+."""
    from jax import lax

    if q_num_heads is None or kv_num_heads is None:
        raise ValueError("LinearAttention needs the q_num_heads and kv_num_heads attributes")
    gating = update_rule in ("gated", "gated_delta")
    delta = update_rule in ("delta", "gated_delta")
    q = jnp.asarray(query)
    out_dtype = q.dtype
    b, t, _ = q.shape
    d_k = q.shape[-1] // q_num_heads
    d_v = jnp.shape(value)[-1] // kv_num_heads
    group = q_num_heads // kv_num_heads
    f32 = jnp.float32
    q4 = _split_heads(q, q_num_heads).astype(f32)
    k4 = _split_heads(jnp.asarray(key), kv_num_heads).astype(f32)
    v4 = _split_heads(jnp.asarray(value), kv_num_heads).astype(f32)
    if gating:
        g = jnp.asarray(decay)
        if g.shape[-1] == kv_num_heads:
            g4 = jnp.transpose(g.reshape(b, t, kv_num_heads, 1), (0, 2, 1, 3))
        else:
            g4 = _split_heads(g, kv_num_heads)
        g4 = g4.astype(f32)
    else:
        g4 = jnp.zeros((b, kv_num_heads, t, 1), f32)
    if delta:
        bt = jnp.asarray(beta)
        beta4 = jnp.transpose(bt.reshape(b, t, bt.shape[-1], 1), (0, 2, 1, 3)).astype(f32)
    else:
        beta4 = jnp.ones((b, 1, t, 1), f32)
    if past_state is not None:
        state0 = jnp.asarray(past_state).astype(f32)
        state_dtype = jnp.asarray(past_state).dtype
    else:
        state0 = jnp.zeros((b, kv_num_heads, d_k, d_v), f32)
        state_dtype = out_dtype
    scale_val = 1.0 / np.sqrt(d_k) if not scale else float(scale)

    def step(state, xs):
        q_t, k_t, v_t, g_t, beta_t = xs
        if gating:
            state = state * jnp.exp(g_t)[..., None]
        if delta:
            v_t = beta_t * (v_t - jnp.einsum("bhdm,bhd->bhm", state, k_t))
        state = state + k_t[..., :, None] * v_t[..., None, :]
        read = jnp.repeat(state, group, axis=1) if group > 1 else state
        return state, scale_val * jnp.einsum("bhd,bhdm->bhm", q_t, read)

    def time_major(x):
        return jnp.moveaxis(x, 2, 0)

    state, ys = lax.scan(
        step, state0, tuple(time_major(x) for x in (q4, k4, v4, g4, beta4))
    )  # ys: (t, b, hq, d_v)
    out = jnp.transpose(ys, (1, 0, 2, 3)).reshape(b, t, q_num_heads * d_v)
    return out.astype(out_dtype), state.astype(state_dtype)


@op("CausalConvWithState", since=27)
def causal_conv_with_state(input, weight, bias=None, past_state=None, *, activation="none"):
    """Depthwise causal 1-D conv over past_state + input (silu); Y, new state; opset 27+."""
    from jax import lax

    x = jnp.asarray(input)
    w = jnp.asarray(weight)
    batch, channels, _ = x.shape
    k = w.shape[2]
    pad = jnp.zeros((batch, channels, k - 1), x.dtype) if past_state is None else past_state
    padded = jnp.concatenate([jnp.asarray(pad, x.dtype), x], axis=2)
    y = lax.conv_general_dilated(
        padded, w, window_strides=[1], padding=[(0, 0)], feature_group_count=channels
    )
    if bias is not None:
        y = y + jnp.asarray(bias).reshape(1, -1, 1)
    y = y.astype(x.dtype)
    if activation in ("silu", "swish"):
        yf = y.astype(jnp.float32)
        y = (yf * (1.0 / (1.0 + jnp.exp(-yf)))).astype(x.dtype)
    elif activation != "none":
        raise ValueError(f"CausalConvWithState: unsupported activation {activation!r}")
    return y, padded[:, :, padded.shape[2] - (k - 1) :]


@op("TensorScatter", since=24)
def tensor_scatter(past_cache, update, write_indices=None, *, axis=-2, mode="linear"):
    """KV-cache update: ``update`` written into ``past_cache`` from write_indices; opset 24+."""
    cache = jnp.asarray(past_cache)
    upd = jnp.asarray(update)
    axis = axis % cache.ndim
    max_len, seq = cache.shape[axis], upd.shape[axis]
    if write_indices is None:
        starts = jnp.zeros((cache.shape[0],), jnp.int64)
    else:
        starts = jnp.asarray(write_indices).astype(jnp.int64)
    pos = starts[:, None] + jnp.arange(seq)[None, :]  # (batch, seq)
    if mode == "circular":
        pos = pos % max_len
    # For every cache slot: which update row lands there (a dense, jittable gather).
    hit = pos[:, :, None] == jnp.arange(max_len)[None, None, :]  # (batch, seq, max_len)
    written = jnp.any(hit, axis=1)  # (batch, max_len)
    source = jnp.argmax(hit, axis=1)  # (batch, max_len)
    moved_c = jnp.moveaxis(cache, axis, -1)  # (batch, ..., max_len)
    moved_u = jnp.moveaxis(upd, axis, -1)  # (batch, ..., seq)
    mid = (1,) * (moved_c.ndim - 2)
    source = jnp.broadcast_to(source.reshape((source.shape[0],) + mid + (max_len,)), moved_c.shape)
    placed = jnp.take_along_axis(moved_u, source, axis=-1)
    out = jnp.where(written.reshape((written.shape[0],) + mid + (max_len,)), placed, moved_c)
    return jnp.moveaxis(out, -1, axis)
