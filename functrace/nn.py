"""``ft.nn``: neural-network functions.

Most are compositions of ``functrace.numpy`` (so every transformation handles them and the
compiler fuses their elementwise chains).  ``rms_norm`` and ``attention`` are *fused
primitives*: one IR equation each, with a numerically stable numpy implementation, a fused
backward primitive (``rms_norm_bwd``, ``attention_bwd``, which the OpenCL backend runs as
hand-written kernels), and derivative rules for every other case taken from a reference
decomposition in ``functrace.numpy`` — so Hessians and other nested derivatives through
them work (closure under differentiation).
"""
from __future__ import annotations

import math
import sys
from typing import Callable

import numpy as np

from . import (
    arrays,
    initializers,  # noqa: F401  (ft.nn.initializers)
    random,
)
from . import numpy as fnp
from . import primitives as P
from .autodiff import jvp_flat, vjp_flat
from .batching import vmap
from .convolution import conv_general_dilated
from .core import ShapedArray, get_aval
from .errors import ShapeError, user_frame_description
from .lax_numeric import (  # noqa: F401  (re-exported; they live there so that ft.random need not import ft.nn)
    ERF_INV_CENTRAL,
    ERF_INV_STEPS,
    ERF_INV_TAIL,
    ERF_INV_TAIL_FROM,
    erf,
    erf_inv,
    erf_inv_p,
    erf_p,
)
from .primitives import new_primitive, shape_of

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


def _stable_max(x, axis):
    """The max along ``axis`` (kept) as a shift for exp: 0 where it is not finite (rows of -inf)
    or where the axis is empty (a max of nothing; the sum of exps is then 0)."""
    shape = shape_of(x)
    axes = arrays.reduction_axes(axis, len(shape), "max")
    if any(shape[a] == 0 for a in axes):
        return np.zeros(tuple(1 if d in axes else n for d, n in enumerate(shape)), x.dtype)
    m = P.stop_gradient(fnp.max(x, axis=axis, keepdims=True))
    return fnp.where(fnp.isfinite(m), m, fnp.zeros_like(m))  # rows of -inf stay finite


def logsumexp(x, axis=None, keepdims: bool = False):
    """log(sum(exp(x))) without overflow; the max shift carries no derivative (it cancels)."""
    x = arrays.to_float(x)
    m = _stable_max(x, axis)
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
    return _over_axis(log_softmax_p, _log_softmax_reference, x, axis)


def softmax(x, axis: int = -1):
    return _over_axis(softmax_p, _softmax_reference, x, axis)


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


def _rms_norm_reference(x, w, *, eps):
    ms = fnp.mean(x * x, axis=-1, keepdims=True)
    return x * P.rsqrt_p.bind(ms + np.asarray(eps, dtype=get_aval(x).dtype)) * w


def _mean_last(a):
    """The mean over the last axis, kept; over an empty axis 0 (its results are empty anyway),
    not numpy's NaN with a warning."""
    return np.sum(a, axis=-1, keepdims=True, dtype=a.dtype) / max(a.shape[-1], 1)


def _rstd(x, eps):
    """1 / sqrt(mean(x^2) + eps) over the last axis, kept.  float32/64: the sums of squares are
    BLAS dot products of the rows (no x*x temporary; 3-14x faster than ``sum(x * x)``)."""
    if x.dtype.char in "fd" and x.shape[-1]:
        ms = np.matmul(x[..., None, :], x[..., :, None])[..., 0]
        ms /= x.dtype.type(x.shape[-1])
    else:
        ms = _mean_last(x * x)
    ms += x.dtype.type(eps)
    return np.divide(x.dtype.type(1), np.sqrt(ms, out=ms), out=ms)


def _rms_norm_impl(x, w, *, eps):
    x = np.asarray(x)
    out = x * _rstd(x, eps)
    out *= w
    return out


def _rms_norm_bwd_impl(x, w, g, *, eps):
    """dx = rstd * (g*w - x * rstd^2 * mean(g*w*x)), dw = sum over leading axes of g * x * rstd."""
    x, w, g = np.asarray(x), np.asarray(w), np.asarray(g)
    rstd = _rstd(x, eps)
    gw = g * w
    dx = rstd * (gw - x * (rstd * rstd) * _mean_last(gw * x))
    dw = np.sum(g * x * rstd, axis=tuple(range(x.ndim - 1)), dtype=x.dtype)
    return [dx.astype(x.dtype), dw.astype(x.dtype)]


def _rms_norm_bwd_reference(x, w, g, *, eps):
    _, pull = vjp_flat(lambda x, w: [_rms_norm_reference(x, w, eps=eps)], [x, w], [True, True])
    return pull([g])


def _check_last_axis(name, x, w):
    xs, ws = shape_of(x), shape_of(w)
    if len(xs) < 1 or ws != xs[-1:]:
        raise ShapeError(f"{name}: weight must have shape (x.shape[-1],) = {xs[-1:]}, got {ws} "
                         f"{user_frame_description()}")


def _with_reference_rules(prim, reference: Callable):
    """Forward and reverse rules of a fused primitive from its reference decomposition
    (``reference(*args, **params)`` returns the list of outputs, computed with functrace.numpy)."""
    def jvp_rule(primals, tangents, **params):
        outs, touts = jvp_flat(lambda *a: reference(*a, **params), primals, tangents)
        return (outs, touts) if prim.multiple_results else (outs[0], touts[0])

    def vjp_rule(primals, needs, **params):
        outs, pull = vjp_flat(lambda *a: reference(*a, **params), primals, needs)

        def backward(cts):
            res = iter(pull(cts))
            return [next(res) if n else None for n in needs]
        return (outs if prim.multiple_results else outs[0]), backward

    prim.jvp_rule = jvp_rule
    prim.vjp_rule = vjp_rule
    return prim


rms_norm_bwd_p = new_primitive("rms_norm_bwd")
rms_norm_bwd_p.multiple_results = True
rms_norm_bwd_p.impl = _rms_norm_bwd_impl
rms_norm_bwd_p.abstract_eval = lambda x, w, g, *, eps: [x, w]
_with_reference_rules(rms_norm_bwd_p, _rms_norm_bwd_reference)

rms_norm_p = new_primitive("rms_norm")
rms_norm_p.impl = _rms_norm_impl
rms_norm_p.abstract_eval = lambda x, w, *, eps: x
_with_reference_rules(rms_norm_p, lambda x, w, *, eps: [_rms_norm_reference(x, w, eps=eps)])


def _rms_norm_vjp(primals, needs, *, eps):
    x, w = primals
    out = rms_norm_p.bind(x, w, eps=eps)

    def backward(cts):
        dx, dw = rms_norm_bwd_p.bind(x, w, cts[0], eps=eps)  # the fused backward kernel
        return [dx if needs[0] else None, dw if needs[1] else None]
    return out, backward


def _leading_batch_rule(prim, batched_args: tuple):
    """Batching for fused ops whose ``batched_args`` accept any leading batch axes: move the
    vmapped axis to the front of those (materializing unbatched ones); other arguments must be
    unbatched, else fall back to vmapping the reference decomposition."""
    def rule(vals, dims, **params):
        size = next(shape_of(v)[d] for v, d in zip(vals, dims) if d is not None)
        if any(d is not None for i, d in enumerate(dims) if i not in batched_args):
            return None
        new = []
        for i, (v, d) in enumerate(zip(vals, dims)):
            if i in batched_args:
                v = P.moveaxis(v, d, 0) if d is not None else P.broadcast_in_dim(
                    v, (size,) + shape_of(v), tuple(range(1, len(shape_of(v)) + 1)))
            new.append(v)
        out = prim.bind(*new, **params)
        return out, ([0] * len(out) if prim.multiple_results else 0)
    return rule


def _batch_or_reference(prim, batched_args, reference):
    """``batched_args=None``: always vmap the reference decomposition."""
    fast = _leading_batch_rule(prim, batched_args) if batched_args is not None else lambda *a, **k: None

    def rule(vals, dims, **params):
        res = fast(vals, dims, **params)
        if res is not None:
            return res
        axes = tuple(dims)
        outs = vmap(lambda *a: reference(*a, **params), in_axes=axes)(*vals)
        return (outs, [0] * len(outs)) if prim.multiple_results else (outs[0], 0)
    return rule


rms_norm_p.vjp_rule = _rms_norm_vjp
rms_norm_p.batch = _batch_or_reference(rms_norm_p, (0,), lambda x, w, *, eps: [_rms_norm_reference(x, w, eps=eps)])
# dw sums over x's leading axes, so a vmapped axis cannot simply become one more of them
rms_norm_bwd_p.batch = _batch_or_reference(rms_norm_bwd_p, None, _rms_norm_bwd_reference)


# --------------------------------------------------------------------------- softmax primitives


def _log_softmax_reference(x):
    shifted = x - _stable_max(x, -1)
    return shifted - fnp.log(fnp.sum(fnp.exp(shifted), axis=-1, keepdims=True))


def _softmax_reference(x):
    e = fnp.exp(x - _stable_max(x, -1))
    return e / fnp.sum(e, axis=-1, keepdims=True)


def _shift_np(x):
    m = np.max(x, axis=-1, keepdims=True)
    return np.where(np.isfinite(m), m, np.zeros_like(m))


def _softmax_impl(x):
    x = np.asarray(x)
    with np.errstate(invalid="ignore"):
        e = np.exp(x - _shift_np(x))
        return (e / np.sum(e, axis=-1, keepdims=True, dtype=x.dtype)).astype(x.dtype)


def _log_softmax_impl(x):
    x = np.asarray(x)
    with np.errstate(invalid="ignore", divide="ignore"):
        shifted = x - _shift_np(x)
        return (shifted - np.log(np.sum(np.exp(shifted), axis=-1, keepdims=True, dtype=x.dtype))).astype(x.dtype)


# softmax / log_softmax over the last axis are primitives (one kernel per row on OpenCL).  Forward
# mode differentiates the reference decomposition; reverse mode uses the output:
#   softmax:     dx = y * (g - sum(g * y))          log_softmax: dx = g - exp(y) * sum(g)
# written with functrace.numpy, so it nests (Hessians).
def _last_axis_primitive(name: str, impl: Callable, reference: Callable):
    """A primitive mapping x to an array of x's aval, with forward rules and batching (leading
    axes) from its reference decomposition."""
    prim = new_primitive(name)
    prim.impl = impl
    prim.abstract_eval = lambda x: x
    outputs = lambda x: [reference(x)]
    _with_reference_rules(prim, outputs)
    prim.batch = _batch_or_reference(prim, (0,), outputs)
    return prim


softmax_p = _last_axis_primitive("softmax", _softmax_impl, _softmax_reference)
log_softmax_p = _last_axis_primitive("log_softmax", _log_softmax_impl, _log_softmax_reference)


def _softmax_vjp(primals, needs):
    y = softmax_p.bind(primals[0])
    return y, lambda cts: [y * (cts[0] - fnp.sum(cts[0] * y, axis=-1, keepdims=True))]


def _log_softmax_vjp(primals, needs):
    y = log_softmax_p.bind(primals[0])
    return y, lambda cts: [cts[0] - fnp.exp(y) * fnp.sum(cts[0], axis=-1, keepdims=True)]


softmax_p.vjp_rule = _softmax_vjp
log_softmax_p.vjp_rule = _log_softmax_vjp


def rms_norm(x, weight, eps: float = 1e-6):
    """x / sqrt(mean(x^2) + eps) * weight over the last axis (one fused primitive)."""
    x = arrays.to_float(x)
    w = fnp.asarray(weight, get_aval(x).dtype)
    _check_last_axis("rms_norm", x, w)
    return rms_norm_p.bind(x, w, eps=float(eps))


# --------------------------------------------------------------------------- attention


def _attention_reference(q, k, v, mask, *, causal, scale):
    """[out, lse] with q (..., T, N, H), k/v (..., S, N, H), mask (..., N, T, S) bool."""
    logits = fnp.einsum("...tnh,...snh->...nts", q, k) * scale
    logits = fnp.where(mask, logits, np.asarray(-1e30, get_aval(logits).dtype))
    m = P.stop_gradient(fnp.max(logits, axis=-1, keepdims=True))
    e = fnp.exp(logits - m)
    s = fnp.sum(e, axis=-1, keepdims=True)
    p = e / s
    out = fnp.einsum("...nts,...snh->...tnh", p, v)
    lse = fnp.squeeze(fnp.log(s) + m, axis=-1)  # (..., N, T)
    return [out, lse]


def _heads_first(a):
    """(..., T, N, H) -> (..., N, T, H): a view."""
    return a.swapaxes(-2, -3)


def _scores(q, k, scale):
    """Scaled logits (..., N, T, S) through ``np.matmul`` (BLAS; ``np.einsum`` loops in C: ~10x
    slower at 64 tokens, 4 heads of 32).  Forward and backward share it: with huge scores the
    backward's P = exp(L - lse) needs the very logits whose log-sum-exp the forward saved.
    Computed as K Q^T and returned transposed (a view): the softmax then reduces over the
    middle axis of contiguous (..., N, S, T) memory, ~3x faster than over 64-element rows."""
    scores_t = np.matmul(_heads_first(k), _heads_first(q).swapaxes(-1, -2))
    scores_t *= q.dtype.type(scale)
    return scores_t.swapaxes(-1, -2)


def _attention_impl(q, k, v, mask, *, causal, scale):
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    # the softmax over keys in the (..., N, S, T) layout of the scores' memory, in place (the
    # masked select as a copy into the dropped pairs: ~2x faster than np.where)
    logits_t = _scores(q, k, scale).swapaxes(-1, -2)
    np.copyto(logits_t, q.dtype.type(-1e30), where=np.logical_not(np.swapaxes(mask, -1, -2)))
    m = logits_t.max(axis=-2, keepdims=True)
    logits_t -= m
    e = np.exp(logits_t, out=logits_t)
    s = e.sum(axis=-2, keepdims=True)
    e /= s
    out = np.empty(q.shape, q.dtype)  # (..., T, N, H), written through its heads-first view
    np.matmul(e.swapaxes(-1, -2), _heads_first(v), out=_heads_first(out))
    return [out, (np.log(s) + m)[..., 0, :].astype(q.dtype, copy=False)]


def _attention_bwd_impl(q, k, v, mask, out, lse, g, *, causal, scale):
    """Flash-attention backward from the saved log-sum-exp: P = exp(L - lse - bias) with L the
    masked logits, dV = P^T g, dP = g V^T, dS = P * (dP - rowsum(P * dP)) at kept pairs (0 at
    masked ones), dQ = dS K * scale, dK = dS^T Q * scale.  ``bias`` is 0 except in rows with no
    logit above -1e30 (fully masked rows), whose output averages the keys scoring -1e30: there
    lse = log(count) - 1e30 rounds to -1e30, so bias = log(count) restores P = 1 / count."""
    q, k, v, out, lse, g = map(np.asarray, (q, k, v, out, lse, g))
    neg = q.dtype.type(-1e30)
    logits = np.where(mask, _scores(q, k, scale), neg)
    lse = lse[..., None]
    # masked pairs: exp(-1e30 - lse), 0 (NaN in a NaN row); bias after lse (lse + bias is lse again)
    p = np.exp(logits - lse - _dead_row_bias(logits, lse, neg)).astype(q.dtype)
    # the products as batched BLAS calls over (..., N) on heads-first views (np.einsum loops in
    # C: b4 T256 4 heads of 64, 122 -> 19 ms, most of the numpy transformer block's fwd+bwd)
    g_h = _heads_first(g)
    dv = _heads_last(np.matmul(np.swapaxes(p, -1, -2), g_h))
    dp = np.matmul(g_h, np.swapaxes(_heads_first(v), -1, -2))
    # the reference's sum_j P_j dP_j (the flash shortcut g . out is equal where all is finite, but
    # not at an inf: inf - inf is NaN in one and -inf in the other; fuzzer seed 9000 program 3265)
    delta = np.sum(p * dp, axis=-1, keepdims=True)
    # select, not just p = 0: a NaN in dp - delta must not reach masked pairs (0 * NaN = NaN),
    # as the reference's where(mask, logits, -1e30) has an exactly zero derivative there
    ds = np.where(mask, p * (dp - delta) * q.dtype.type(scale), 0).astype(q.dtype)
    dq = _heads_last(np.matmul(ds, _heads_first(k)))
    dk = _heads_last(np.matmul(np.swapaxes(ds, -1, -2), _heads_first(q)))
    return [dq, dk, dv]


def _heads_last(a):
    """(..., N, T, H) -> (..., T, N, H), C-contiguous (the layout of the inputs it is a derivative of)."""
    return np.ascontiguousarray(np.moveaxis(a, -3, -2))


def _dead_row_bias(logits, lse, neg):
    """log(count of logits equal to -1e30) in rows whose log-sum-exp is -1e30 (no logit above it,
    some equal: the forward averaged those), else 0."""
    count = np.sum(logits == neg, axis=-1, keepdims=True)
    dead = (lse <= neg) & (count > 0)
    return np.where(dead, np.log(np.maximum(count, 1)), 0).astype(lse.dtype)


def _attention_bwd_reference(q, k, v, mask, out, lse, g, *, causal, scale):
    _, pull = vjp_flat(lambda q, k, v: _attention_reference(q, k, v, mask, causal=causal, scale=scale)[:1],
                       [q, k, v], [True, True, True])
    return pull([g])


attention_p = new_primitive("attention")
attention_p.multiple_results = True
attention_p.impl = _attention_impl


def _attention_abstract(q, k, v, mask, *, causal, scale):
    lse_shape = q.shape[:-3] + (q.shape[-2], q.shape[-3])
    return [q, ShapedArray(lse_shape, q.dtype)]


attention_p.abstract_eval = _attention_abstract
_with_reference_rules(attention_p, _attention_reference)

attention_bwd_p = new_primitive("attention_bwd")
attention_bwd_p.multiple_results = True
attention_bwd_p.impl = _attention_bwd_impl
attention_bwd_p.abstract_eval = lambda q, k, v, mask, out, lse, g, *, causal, scale: [q, k, v]
_with_reference_rules(attention_bwd_p, _attention_bwd_reference)


def _attention_vjp(primals, needs, *, causal, scale):
    q, k, v, mask = primals
    out, lse = attention_p.bind(q, k, v, mask, causal=causal, scale=scale)

    def backward(cts):
        if cts[1] is not None:  # the log-sum-exp output is internal; fall back to the reference
            _, pull = vjp_flat(lambda *a: _attention_reference(*a, mask, causal=causal, scale=scale),
                               [q, k, v], needs[:3])
            res = iter(pull(cts))
            return [next(res) if n else None for n in needs[:3]] + [None]
        g = cts[0] if cts[0] is not None else P.zeros_like(out)
        dq, dk, dv = attention_bwd_p.bind(q, k, v, mask, out, lse, g, causal=causal, scale=scale)
        return [dq if needs[0] else None, dk if needs[1] else None, dv if needs[2] else None, None]
    return [out, lse], backward


attention_p.vjp_rule = _attention_vjp
attention_p.batch = _batch_or_reference(attention_p, (0, 1, 2, 3), _attention_reference)
attention_bwd_p.batch = _batch_or_reference(attention_bwd_p, (0, 1, 2, 3, 4, 5, 6), _attention_bwd_reference)


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
