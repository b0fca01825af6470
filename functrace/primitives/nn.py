"""The fused neural-network primitives: ``rms_norm`` (x / sqrt(mean(x^2) + eps) * w over the last
axis) and its fused backward ``rms_norm_bwd``, ``softmax`` and ``log_softmax`` over the last axis,
and ``attention`` (scaled dot-product attention returning the output and the log-sum-exp of the
scores) and its fused backward ``attention_bwd``.

Each is one IR equation with a numerically stable numpy implementation; the OpenCL backend runs
them (and the backward primitives, the reverse rules of ``rms_norm`` and ``attention``) as
hand-written kernels.  Every other derivative rule, and batching where the vmapped axis cannot
simply become one more leading axis, comes from a reference decomposition written with
``functrace.numpy`` (``rms_norm_reference``, ``softmax_reference``, ``attention_reference``, ...),
so Hessians and other nested derivatives through them work (closure under differentiation).
The user's functions (``ft.nn.rms_norm``, ``softmax``, ``attention``, ...) live in ``functrace.nn``.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .. import arrays
from .. import numpy as fnp
from ..core import ShapedArray, get_aval
from ..transforms.autodiff import jvp_flat, vjp_flat
from ..transforms.batching import vmap
from . import basic as P
from .basic import new_primitive, shape_of

# --------------------------------------------------------------------------- rms_norm


def stable_max(x, axis):
    """The max along ``axis`` (kept) as a shift for exp: 0 where it is not finite (rows of -inf)
    or where the axis is empty (a max of nothing; the sum of exps is then 0)."""
    shape = shape_of(x)
    axes = arrays.reduction_axes(axis, len(shape), "max")
    if any(shape[a] == 0 for a in axes):
        return np.zeros(tuple(1 if d in axes else n for d, n in enumerate(shape)), x.dtype)
    m = P.stop_gradient(fnp.max(x, axis=axis, keepdims=True))
    return fnp.where(fnp.isfinite(m), m, fnp.zeros_like(m))  # rows of -inf stay finite



def rms_norm_reference(x, w, *, eps):
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


def rms_norm_bwd_reference(x, w, g, *, eps):
    _, pull = vjp_flat(lambda x, w: [rms_norm_reference(x, w, eps=eps)], [x, w], [True, True])
    return pull([g])


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
_with_reference_rules(rms_norm_bwd_p, rms_norm_bwd_reference)

rms_norm_p = new_primitive("rms_norm")
rms_norm_p.impl = _rms_norm_impl
rms_norm_p.abstract_eval = lambda x, w, *, eps: x
_with_reference_rules(rms_norm_p, lambda x, w, *, eps: [rms_norm_reference(x, w, eps=eps)])


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
rms_norm_p.batch = _batch_or_reference(rms_norm_p, (0,), lambda x, w, *, eps: [rms_norm_reference(x, w, eps=eps)])
# dw sums over x's leading axes, so a vmapped axis cannot simply become one more of them
rms_norm_bwd_p.batch = _batch_or_reference(rms_norm_bwd_p, None, rms_norm_bwd_reference)


# --------------------------------------------------------------------------- softmax primitives


def log_softmax_reference(x):
    shifted = x - stable_max(x, -1)
    return shifted - fnp.log(fnp.sum(fnp.exp(shifted), axis=-1, keepdims=True))


def softmax_reference(x):
    e = fnp.exp(x - stable_max(x, -1))
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


softmax_p = _last_axis_primitive("softmax", _softmax_impl, softmax_reference)
log_softmax_p = _last_axis_primitive("log_softmax", _log_softmax_impl, log_softmax_reference)


def _softmax_vjp(primals, needs):
    y = softmax_p.bind(primals[0])
    return y, lambda cts: [y * (cts[0] - fnp.sum(cts[0] * y, axis=-1, keepdims=True))]


def _log_softmax_vjp(primals, needs):
    y = log_softmax_p.bind(primals[0])
    return y, lambda cts: [cts[0] - fnp.exp(y) * fnp.sum(cts[0], axis=-1, keepdims=True)]


softmax_p.vjp_rule = _softmax_vjp
log_softmax_p.vjp_rule = _log_softmax_vjp



# --------------------------------------------------------------------------- attention


def attention_reference(q, k, v, mask, *, causal, scale):
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


def attention_bwd_reference(q, k, v, mask, out, lse, g, *, causal, scale):
    _, pull = vjp_flat(lambda q, k, v: attention_reference(q, k, v, mask, causal=causal, scale=scale)[:1],
                       [q, k, v], [True, True, True])
    return pull([g])


attention_p = new_primitive("attention")
attention_p.multiple_results = True
attention_p.impl = _attention_impl


def _attention_abstract(q, k, v, mask, *, causal, scale):
    lse_shape = q.shape[:-3] + (q.shape[-2], q.shape[-3])
    return [q, ShapedArray(lse_shape, q.dtype)]


attention_p.abstract_eval = _attention_abstract
_with_reference_rules(attention_p, attention_reference)

attention_bwd_p = new_primitive("attention_bwd")
attention_bwd_p.multiple_results = True
attention_bwd_p.impl = _attention_bwd_impl
attention_bwd_p.abstract_eval = lambda q, k, v, mask, out, lse, g, *, causal, scale: [q, k, v]
_with_reference_rules(attention_bwd_p, attention_bwd_reference)


def _attention_vjp(primals, needs, *, causal, scale):
    q, k, v, mask = primals
    out, lse = attention_p.bind(q, k, v, mask, causal=causal, scale=scale)

    def backward(cts):
        if cts[1] is not None:  # the log-sum-exp output is internal; fall back to the reference
            _, pull = vjp_flat(lambda *a: attention_reference(*a, mask, causal=causal, scale=scale),
                               [q, k, v], needs[:3])
            res = iter(pull(cts))
            return [next(res) if n else None for n in needs[:3]] + [None]
        g = cts[0] if cts[0] is not None else P.zeros_like(out)
        dq, dk, dv = attention_bwd_p.bind(q, k, v, mask, out, lse, g, causal=causal, scale=scale)
        return [dq if needs[0] else None, dk if needs[1] else None, dv if needs[2] else None, None]
    return [out, lse], backward


attention_p.vjp_rule = _attention_vjp
attention_p.batch = _batch_or_reference(attention_p, (0, 1, 2, 3), attention_reference)
attention_bwd_p.batch = _batch_or_reference(attention_bwd_p, (0, 1, 2, 3, 4, 5, 6), attention_bwd_reference)
