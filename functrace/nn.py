"""``ft.nn``: neural-network functions.

Most are compositions of ``functrace.numpy`` (so every transformation handles them and the
compiler fuses their elementwise chains).  ``rms_norm``, ``softmax``, ``log_softmax`` and
``attention`` bind *fused primitives* (one IR equation each, with a fused backward primitive for
``rms_norm`` and ``attention`` that the OpenCL backend runs as hand-written kernels), declared
with all their rules in ``functrace.primitives.nn``.
"""
from __future__ import annotations

import math
import sys

import numpy as np

from . import (
    arrays,
    initializers,  # noqa: F401  (ft.nn.initializers)
    random,
)
from . import numpy as fnp
from . import primitives as P
from .convolution import conv_general_dilated
from .core import get_aval
from .core.errors import ShapeError, user_frame_description
from .lax_numeric import erf, erf_inv  # noqa: F401  (ft.nn.erf, ft.nn.erf_inv)
from .primitives import shape_of
from .primitives.nn import (
    attention_p,
    log_softmax_p,
    log_softmax_reference,
    rms_norm_p,
    softmax_p,
    softmax_reference,
    stable_max,
)

# --------------------------------------------------------------------------- activations


def relu(x):
    """max(x, 0), NaN kept, with JAX's derivative: 1 where x > 0, else 0 (at the kink 0 and at NaN
    too); the value elsewhere is held by ``stop_gradient`` (as ``relu6``)."""
    x = fnp.asarray(x)
    return fnp.where(x > 0, x, P.stop_gradient(fnp.maximum(x, fnp.zeros_like(x))))


def sigmoid(x):
    return fnp.sigmoid(x)


def silu(x):
    """x * sigmoid(x) (a.k.a. swish)."""
    return x * fnp.sigmoid(x)


swish = silu


def swiglu(gate, up):
    """silu(gate) * up, the gated unit of SwiGLU feed-forward layers."""
    return silu(gate) * up


def gelu(x, approximate: bool = True):
    """Gaussian error linear unit; ``approximate=True`` is the tanh form (as jax.nn.gelu)."""
    x = arrays.to_float(x)
    if approximate:
        c = math.sqrt(2.0 / math.pi)
        return 0.5 * x * (1.0 + fnp.tanh(c * (x + 0.044715 * x * x * x)))
    return 0.5 * x * (1.0 + erf(x * (1.0 / math.sqrt(2.0))))


# --------------------------------------------------------------------------- softmax family


def logsumexp(x, axis=None, keepdims: bool = False):
    """log(sum(exp(x))) without overflow; the max shift carries no derivative (it cancels)."""
    x = arrays.to_float(x)
    m = stable_max(x, axis)
    out = fnp.log(fnp.sum(fnp.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else fnp.squeeze(out, axis=axis) if axis is not None else fnp.reshape(out, ())


def _over_axis(prim, reference, x, axis: int):
    """``prim`` on the last axis; another axis runs the reference decomposition there."""
    x = arrays.to_float(x)
    nd = len(shape_of(x))
    if nd == 0:
        raise ShapeError(f"{prim.name}: needs an array with at least one axis {user_frame_description()}")
    if arrays.normalize_axis(axis, nd, prim.name) != nd - 1 or shape_of(x)[axis] == 0:  # (the primitive needs a max)
        return fnp.moveaxis(reference(fnp.moveaxis(x, axis, -1)), -1, axis)
    return prim.bind(x)


def log_softmax(x, axis: int = -1):
    return _over_axis(log_softmax_p, log_softmax_reference, x, axis)


def softmax(x, axis: int = -1):
    return _over_axis(softmax_p, softmax_reference, x, axis)


def cross_entropy(logits, labels, reduction: str = "mean"):
    """Softmax cross-entropy over the last axis.  ``labels``: integer class ids (shape
    ``logits.shape[:-1]``) or probabilities shaped like ``logits``."""
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"cross_entropy: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    logits = arrays.to_float(logits)
    logp = log_softmax(logits, axis=-1)
    labels = fnp.asarray(labels)
    if labels.dtype.kind in "iu":
        if shape_of(labels) != shape_of(logits)[:-1]:
            raise ShapeError(f"cross_entropy: integer labels must have shape {shape_of(logits)[:-1]} "
                             f"(logits without the class axis), got {shape_of(labels)} {user_frame_description()}")
        losses = -fnp.squeeze(fnp.take_along_axis(logp, fnp.expand_dims(labels, -1), axis=-1), axis=-1)
    else:
        if shape_of(labels) != shape_of(logits):
            raise ShapeError(f"cross_entropy: probability labels must have the logits' shape {shape_of(logits)}, "
                             f"got {shape_of(labels)} {user_frame_description()}")
        losses = -fnp.sum(labels * logp, axis=-1)
    if reduction == "mean":
        return fnp.mean(losses)
    return fnp.sum(losses) if reduction == "sum" else losses


# --------------------------------------------------------------------------- normalization


def layer_norm(x, weight, bias, eps: float = 1e-5):
    """(x - mean) / sqrt(var + eps) * weight + bias over the last axis (``weight`` or ``bias``
    None: no scale or no shift)."""
    x = arrays.to_float(x)
    mu = fnp.mean(x, axis=-1, keepdims=True)
    xc = x - mu
    var = fnp.mean(xc * xc, axis=-1, keepdims=True)
    y = xc * P.rsqrt_p.bind(var + eps)
    y = y if weight is None else y * weight
    return y if bias is None else y + bias


def _check_last_axis(name, x, w):
    xs, ws = shape_of(x), shape_of(w)
    if len(xs) < 1 or ws != xs[-1:]:
        raise ShapeError(f"{name}: weight must have shape (x.shape[-1],) = {xs[-1:]}, got {ws} "
                         f"{user_frame_description()}")


def rms_norm(x, weight, eps: float = 1e-6):
    """x / sqrt(mean(x^2) + eps) * weight over the last axis (one fused primitive)."""
    x = arrays.to_float(x)
    w = fnp.asarray(weight, get_aval(x).dtype)
    _check_last_axis("rms_norm", x, w)
    return rms_norm_p.bind(x, w, eps=float(eps))


# --------------------------------------------------------------------------- attention


def attention(q, k, v, causal: bool = False, mask=None, scale: float | None = None):
    """Scaled dot-product attention as ``jax.nn.dot_product_attention``: q (batch..., T, N, H),
    k and v (batch..., S, N, H); ``mask`` (bool, broadcastable to (batch..., N, T, S)) keeps
    True positions; ``causal`` keeps key j for query i when j <= i (as JAX and PyTorch: aligned at
    the first positions when T != S; a KV cache needs an explicit ``mask``).  One fused primitive
    whose backward pass is recomputed from the saved log-sum-exp."""
    q, k, v = arrays.promote(arrays.to_float(q), arrays.to_float(k), arrays.to_float(v))
    qs, ks, vs = shape_of(q), shape_of(k), shape_of(v)
    if len(qs) < 3 or ks != vs or qs[:-3] != ks[:-3] or qs[-2:] != ks[-2:]:
        raise ShapeError(f"attention: expected q (batch..., T, N, H) and k, v (batch..., S, N, H) with equal "
                         f"batch, heads and head_dim; got q {qs}, k {ks}, v {vs} {user_frame_description()}")
    T, S = qs[-3], ks[-3]
    full = qs[:-3] + (qs[-2], T, S)
    keep = np.tril(np.ones((T, S), bool)) if causal else np.ones((T, S), bool)
    m = np.broadcast_to(keep, full)
    if mask is not None:
        m = fnp.logical_and(fnp.broadcast_to(fnp.asarray(mask, bool), full), m)
    scale = 1.0 / math.sqrt(qs[-1]) if scale is None else float(scale)
    return attention_p.bind(q, k, v, m, causal=bool(causal), scale=scale)[0]


def dot_product_attention(query, key, value, bias=None, mask=None, *, scale: float | None = None,
                          is_causal: bool = False, query_seq_lengths=None, key_value_seq_lengths=None,
                          local_window_size=None, implementation: str | None = None):
    """``jax.nn.dot_product_attention``: query (batch, T, N, H) or (T, N, H), key and value
    (batch, S, K, H) or (S, K, H) with N a multiple of K (grouped-query attention: query head n
    reads key/value head n // (N // K)); ``bias`` (added to the logits) and ``mask`` (bool, True
    keeps) broadcast to (batch, N, T, S); ``is_causal``, per-batch ``query_seq_lengths`` (queries
    past it give zeros) / ``key_value_seq_lengths`` and ``local_window_size`` (an int or (left,
    right): key j for query i when i - left <= j <= i + right) restrict it further.  Without
    ``bias`` it runs the attention kernels (``attention``); with one, as a composite of products, a
    softmax and a product.
    ``implementation``: None or "xla" (functrace's own either way)."""
    if implementation not in (None, "xla"):
        raise NotImplementedError(f"dot_product_attention: implementation={implementation!r} is not available "
                                  f"(functrace has its own kernels: pass None) {user_frame_description()}")
    q, k, v = (fnp.asarray(t) for t in (query, key, value))
    batched = len(shape_of(q)) == 4
    if not batched:
        q, k, v = q[None], k[None], v[None]
    qs, ks, vs = shape_of(q), shape_of(k), shape_of(v)
    if len(qs) != 4 or ks != vs or len(ks) != 4 or qs[0] != ks[0] or qs[3] != ks[3] or qs[2] % ks[2]:
        raise ShapeError(f"dot_product_attention: expected query (B, T, N, H) and key, value (B, S, K, H) with N a "
                         f"multiple of K (or the same without B); got query {shape_of(query)}, key "
                         f"{shape_of(key)}, value {shape_of(value)} {user_frame_description()}")
    if qs[2] != ks[2]:  # grouped-query attention: each key/value head serves N // K query heads
        k, v = fnp.repeat(k, qs[2] // ks[2], axis=2), fnp.repeat(v, qs[2] // ks[2], axis=2)
    B, T, N, H = qs
    S = ks[1]
    keep = _attention_keep(B, T, S, mask, query_seq_lengths, key_value_seq_lengths, local_window_size)
    if bias is None:
        out = attention(q, k, v, causal=is_causal, mask=keep, scale=scale)
    else:
        scale = 1.0 / math.sqrt(H) if scale is None else float(scale)
        logits = fnp.einsum("btnh,bsnh->bnts", q, k) * scale + fnp.asarray(bias, get_aval(q).dtype)
        if is_causal:
            keep = fnp.logical_and(np.tril(np.ones((T, S), bool)), True if keep is None else keep)
        if keep is not None:  # (JAX's large finite negative: a row masked whole averages the values)
            logits = fnp.where(keep, logits, -0.7 * float(np.finfo(get_aval(logits).dtype).max))
        out = fnp.einsum("bnts,bsnh->btnh", softmax(logits, axis=-1), v)
    if query_seq_lengths is not None:  # (a query past its sequence's length gives zeros, as JAX's)
        within = np.arange(T)[None, :, None, None] < fnp.asarray(query_seq_lengths)[:, None, None, None]
        out = fnp.where(within, out, 0.0)
    return out if batched else out[0]


def _attention_keep(B: int, T: int, S: int, mask, q_lengths, kv_lengths, window):
    """The positions ``dot_product_attention`` keeps, (B, 1 or N, T, S) or None for all."""
    keep = None if mask is None else fnp.asarray(mask, bool)
    t, s = np.arange(T)[:, None], np.arange(S)[None, :]  # (query, key positions)
    if q_lengths is not None or kv_lengths is not None:
        ql = fnp.full((B,), T) if q_lengths is None else fnp.asarray(q_lengths)
        kl = fnp.full((B,), S) if kv_lengths is None else fnp.asarray(kv_lengths)
        lengths = fnp.logical_and(t < ql[:, None, None, None], s < kl[:, None, None, None])
        keep = lengths if keep is None else fnp.logical_and(keep, lengths)
    if window is not None:
        left, right = (window, window) if isinstance(window, (int, np.integer)) else tuple(window)
        local = (s >= t - left) & (s <= t + right)
        keep = local if keep is None else fnp.logical_and(keep, local)
    return keep


# --------------------------------------------------------------------------- embedding, conv


def embedding(table, ids):
    """Rows of ``table`` selected by integer ``ids`` (a gather; its gradient is a scatter-add)."""
    ids = fnp.asarray(ids)
    if ids.dtype.kind not in "iu":
        raise TypeError(f"embedding: ids must be integers, got {ids.dtype} {user_frame_description()}")
    return fnp.take(table, ids, axis=0)


def _int_pair(value, what: str, least: int) -> tuple:
    """An int or a pair of ints (height, width), each at least ``least``: else a clear error."""
    pair = (value, value) if isinstance(value, (int, np.integer)) else tuple(value) \
        if isinstance(value, (tuple, list)) else None
    if pair is None or len(pair) != 2 or not all(isinstance(v, (int, np.integer)) and v >= least for v in pair):
        raise ValueError(f"conv2d: {what} must be an int or an (int, int) pair, each >= {least}; got {value!r} "
                         f"{user_frame_description()}")
    return int(pair[0]), int(pair[1])


def conv2d(x, w, stride=1, padding=0):
    """2-D convolution (cross-correlation), NCHW input and OIHW weights: ``ft.lax.conv_general_dilated``,
    whose derivatives are convolutions too (one op each, not one pad + add per kernel tap).

    ``padding``: an int, an (int, int) pair of symmetric paddings, ((lo, hi), (lo, hi)) pairs, or
    'SAME' / 'VALID'."""
    x = arrays.to_float(x)
    w = fnp.asarray(w, get_aval(x).dtype)
    xs, ws = shape_of(x), shape_of(w)
    if len(xs) != 4 or len(ws) != 4 or xs[1] != ws[1]:
        raise ShapeError(f"conv2d: expected x (N, C, H, W) and w (O, C, KH, KW) with equal C; got {xs} and {ws} "
                         f"{user_frame_description()}")
    strides = _int_pair(stride, "stride", 1)
    if isinstance(padding, str):
        if padding.upper() not in ("SAME", "VALID"):
            raise ValueError(f"conv2d: padding {padding!r} must be 'SAME', 'VALID', an int, an (int, int) pair or "
                             f"((lo, hi), (lo, hi)) pairs {user_frame_description()}")
        pads = padding.upper()
    elif isinstance(padding, (tuple, list)) and len(padding) == 2 and all(isinstance(p, (tuple, list)) for p in padding):
        pads = tuple(_int_pair(tuple(p), "padding", 0) for p in padding)
    else:
        ph, pw = _int_pair(padding, "padding", 0)
        pads = ((ph, ph), (pw, pw))
    if not isinstance(pads, str):
        h, wd = xs[2] + sum(pads[0]), xs[3] + sum(pads[1])
        if ws[2] > h or ws[3] > wd:
            raise ShapeError(f"conv2d: kernel {ws[2]}x{ws[3]} larger than padded input {h}x{wd} "
                             f"{user_frame_description()}")
    return conv_general_dilated(x, w, strides, pads)


# --------------------------------------------------------------------------- more activations, one_hot,
# standardize, dropout (jax.nn's definitions; dropout as flax's, with ft.random's bits)


def one_hot(x, num_classes: int, dtype=np.float32, axis: int = -1):
    """1 where ``x`` equals the class index along a new axis ``axis`` of length ``num_classes``,
    else 0 (an out-of-range class gives a row of zeros), as jax.nn.one_hot."""
    x = fnp.asarray(x)
    if not isinstance(num_classes, (int, np.integer)) or num_classes < 0:
        raise TypeError(f"one_hot: num_classes must be a non-negative int, got {num_classes!r} {user_frame_description()}")
    ndim = len(shape_of(x))
    axis = axis % (ndim + 1)
    classes = np.arange(num_classes).reshape([-1 if d == axis else 1 for d in range(ndim + 1)])
    return (fnp.expand_dims(x, axis) == classes).astype(dtype)


def leaky_relu(x, negative_slope: float = 0.01):
    """x where x >= 0, else negative_slope * x."""
    x = arrays.to_float(x)
    return fnp.where(x >= 0, x, negative_slope * x)


def elu(x, alpha: float = 1.0):
    """x where x > 0, else alpha * (exp(x) - 1) (the unused branch kept finite for the gradient)."""
    x = arrays.to_float(x)
    return fnp.where(x > 0, x, alpha * fnp.expm1(fnp.where(x > 0, fnp.zeros_like(x), x)))


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(x):
    """The scaled ELU of Klambauer et al. (2017): scale * elu(x, alpha)."""
    return _SELU_SCALE * elu(x, _SELU_ALPHA)


def celu(x, alpha: float = 1.0):
    """max(x, 0) + alpha * (exp(min(x, 0) / alpha) - 1), written with max and min as JAX's, so that
    the derivatives at the kink 0 are JAX's (1, then 1 / (4 alpha) from the ties' halves)."""
    x = arrays.to_float(x)
    return fnp.maximum(x, 0.0) + alpha * fnp.expm1(fnp.minimum(x, 0.0) / alpha)


def glu(x, axis: int = -1):
    """The gated linear unit: the first half of ``axis`` times the sigmoid of the second half."""
    x = arrays.to_float(x)
    n = shape_of(x)[axis]
    if n % 2:
        raise ShapeError(f"glu: axis {axis} has odd length {n} {user_frame_description()}")
    a, b = fnp.split(x, 2, axis=axis)
    return a * fnp.sigmoid(b)


def relu6(x):
    """min(max(x, 0), 6), with JAX's derivative: 1 strictly inside (0, 6), else 0 -- the kinks at 0
    and 6 included (one-sided values, not the 1/2 of a max/min tie) and at NaN.  The clipped value is
    held by ``stop_gradient``, so that every derivative (jvp, vjp, nested, batched, compiled) is this
    mask and the second derivative is 0."""
    x = arrays.to_float(x)
    inside = (x > 0) & (x < 6)
    return fnp.where(inside, x, P.stop_gradient(fnp.minimum(fnp.maximum(x, 0.0), 6.0)))


def hard_tanh(x):
    """x clipped to [-1, 1] (derivative 1 on [-1, 1], the kinks included, and at NaN, as JAX)."""
    x = arrays.to_float(x)
    return fnp.where(x > 1, fnp.ones_like(x), fnp.where(x < -1, -fnp.ones_like(x), x))


def hard_sigmoid(x):
    """relu6(x + 3) / 6, a piecewise-linear sigmoid (derivative 1/6 strictly inside (-3, 3), 0 at
    the kinks -3 and 3, as JAX)."""
    return relu6(arrays.to_float(x) + 3.0) / 6.0


def hard_silu(x):
    """x * hard_sigmoid(x) (a.k.a. hard swish); derivative 0 at -3 and 1 at 3, as JAX."""
    x = arrays.to_float(x)
    return x * hard_sigmoid(x)


hard_swish = hard_silu


def softplus(x):
    """log(1 + exp(x)), without overflow."""
    return fnp.logaddexp(arrays.to_float(x), 0.0)


def log_sigmoid(x):
    """log(sigmoid(x)) = -softplus(-x)."""
    return -softplus(-arrays.to_float(x))


def standardize(x, axis=-1, mean=None, variance=None, epsilon: float = 1e-5):
    """(x - mean) / sqrt(variance + epsilon) over ``axis`` (statistics computed unless given),
    as jax.nn.standardize (variance as E[x^2] - E[x]^2)."""
    x = arrays.to_float(x)
    if mean is None:
        mean = fnp.mean(x, axis=axis, keepdims=True)
    if variance is None:
        variance = fnp.mean(fnp.square(x), axis=axis, keepdims=True) - fnp.square(mean)
    return (x - mean) / fnp.sqrt(variance + epsilon)


def dropout(key, rate: float, x, deterministic: bool = False):
    """``x`` with each element zeroed with probability ``rate`` and the kept ones scaled by
    1 / (1 - rate) (inverted dropout, as flax's Dropout: keep = bernoulli(key, 1 - rate));
    ``deterministic=True`` or ``rate == 0`` returns ``x``."""
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"dropout: rate must be in [0, 1], got {rate!r} {user_frame_description()}")
    x = arrays.to_float(x)
    if deterministic or rate == 0.0:
        return x
    if rate == 1.0:
        return fnp.zeros_like(x)
    keep = random.bernoulli(key, 1.0 - rate, shape_of(x))
    return fnp.where(keep, x / (1.0 - rate), fnp.zeros_like(x))


# ``from functrace.nn.initializers import glorot_normal``, as JAX code (stax) imports them
sys.modules[__name__ + ".initializers"] = initializers
