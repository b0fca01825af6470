"""Sorting and searching: ``sort``, ``argsort``, ``lexsort``, ``partition``, ``searchsorted``,
``unique``, ``quantile`` / ``percentile`` / ``median`` and their ``nan`` forms.

All are written over the stable ``argsort`` primitive (``functrace/primitives/sorting.py``) and gathers, so
they differentiate (a sort's derivative gathers by its permutation, as JAX's), batch, and run as
OpenCL kernels.
"""
from __future__ import annotations

import builtins

import numpy as np

from .. import arrays
from ..core import Tracer
from ..core.eager import as_eager
from ..core.errors import user_frame_description
from ..primitives.sorting import argsort_last
from . import _base as fnp


def _along_last(x, axis, fname):
    """(x with ``axis`` moved last, the normalized axis); ``axis=None`` flattens."""
    x = arrays.to_array(x)
    if axis is None:
        return fnp.ravel(x), -1
    if x.ndim == 0:
        raise ValueError(f"{fname}: cannot sort a 0-d array along an axis {user_frame_description()}")
    axis = arrays.normalize_axis(axis, x.ndim, fname)
    return fnp.moveaxis(x, axis, -1), axis


def argsort(a, axis=-1, kind=None, order=None, *, stable=True, descending=False):
    """numpy.argsort; always stable (``kind`` is accepted and ignored, as JAX)."""
    if order is not None:
        raise NotImplementedError("argsort(order=...) (structured arrays) is not supported")
    x, ax = _along_last(a, axis, "argsort")
    perm = argsort_last(x, descending)
    return perm if axis is None else fnp.moveaxis(perm, -1, ax)


def sort(a, axis=-1, kind=None, order=None, *, stable=True, descending=False):
    """numpy.sort (NaNs last); differentiable: the derivative gathers by the sorting permutation."""
    if order is not None:
        raise NotImplementedError("sort(order=...) (structured arrays) is not supported")
    x, ax = _along_last(a, axis, "sort")
    if isinstance(x, Tracer):
        out = fnp.take_along_axis(x, argsort_last(x, descending), -1)
    else:  # concrete: numpy's gather by the same permutation, without staging index arithmetic
        out = as_eager(np.take_along_axis(x, argsort_last(x, descending), -1))
    return out if axis is None else fnp.moveaxis(out, -1, ax)


def partition(a, kth, axis=-1):
    """numpy.partition: a full sort is one valid partition (the order within each side is
    unspecified by numpy too)."""
    return sort(a, axis)


def argpartition(a, kth, axis=-1):
    """numpy.argpartition, as the full stable sorting permutation (a valid partition)."""
    return argsort(a, axis)


def lexsort(keys, axis=-1):
    """numpy.lexsort: sort by the last key, ties broken by the previous ones (stable passes)."""
    keys = [arrays.to_array(k) for k in keys] if not isinstance(keys, (np.ndarray, Tracer)) else \
        [keys[i] for i in range(len(keys))]
    if not keys:
        raise TypeError("lexsort: need at least one key")
    moved = [fnp.moveaxis(k, arrays.normalize_axis(axis, k.ndim, "lexsort"), -1) for k in keys]
    perm = argsort_last(moved[0])
    for k in moved[1:]:
        perm = fnp.take_along_axis(perm, argsort_last(fnp.take_along_axis(k, perm, -1)), -1)
    return fnp.moveaxis(perm, -1, arrays.normalize_axis(axis, keys[0].ndim, "lexsort"))


def _before(a, b):
    """``a`` sorts strictly before ``b`` in numpy's order (NaN largest)."""
    if a.dtype.kind not in "fc":
        return a < b
    return (a < b) | (fnp.isnan(b) & ~fnp.isnan(a))


_COMPARE_ALL_LIMIT = 1 << 16  # len(a) * len(v) up to which one fused comparison of every pair is cheapest


def searchsorted(a, v, side="left", sorter=None, *, method=None):
    """numpy.searchsorted of a sorted 1-D ``a`` (NaNs last): per value, the number of entries of
    ``a`` before it (``left``) or not after it (``right``).  Small problems compare every pair
    (one fused reduction); larger ones run a vectorized binary search of ``log2(len(a))`` steps."""
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
    a = arrays.to_array(a)
    if a.ndim != 1:
        raise ValueError(f"searchsorted: a must be 1-D, got shape {a.shape} {user_frame_description()}")
    if sorter is not None:
        a = fnp.take(a, sorter)
    a, v = arrays.promote(a, arrays.to_array(v))
    n = a.shape[0]
    goes_right = (lambda entry, value: _before(entry, value)) if side == "left" else \
        (lambda entry, value: ~_before(value, entry))
    if n * builtins.max(fnp.size(v), 1) <= _COMPARE_ALL_LIMIT:
        return fnp.sum(fnp.asarray(goes_right(a, fnp.expand_dims(v, -1)), np.int64), axis=-1)
    lo = fnp.zeros(fnp.shape(v), np.int64)
    hi = fnp.full(fnp.shape(v), n, np.int64)
    for _ in range(n.bit_length()):
        mid = (lo + hi) // 2
        right = goes_right(fnp.take(a, fnp.minimum(mid, n - 1)), v) & (lo < hi)
        lo = fnp.where(right, mid + 1, lo)
        hi = fnp.where(right | (lo >= hi), hi, mid)
    return lo


_METHODS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile(a, q, axis, method, keepdims, ignore_nan: bool, fname: str):
    """Quantiles ``q`` of ``a`` over ``axis`` (numpy's ``method``), NaNs ignored or propagated."""
    if method not in _METHODS:
        raise NotImplementedError(f"{fname}: method={method!r} is not implemented (supported: {_METHODS})")
    x = arrays.to_float(a, np.float64)
    ndim = x.ndim
    axes = tuple(range(ndim)) if axis is None else tuple(arrays.reduction_axes(axis, ndim, fname))
    kept = [d for d in range(ndim) if d not in axes]
    x = fnp.transpose(x, kept + list(axes))
    x = fnp.reshape(x, tuple(x.shape[:len(kept)]) + (-1,))
    n = x.shape[-1]
    if n == 0:
        raise ValueError(f"{fname}: cannot take a quantile of an empty axis {user_frame_description()}")
    q = arrays.to_array(q)
    q = fnp.asarray(q, x.dtype)
    if not isinstance(q, Tracer) and (np.any(q < 0) or np.any(q > 1)):
        raise ValueError(f"{fname}: quantiles must be in the range [0, 1] {user_frame_description()}")
    s = sort(x, -1)  # NaNs last
    isnan = fnp.isnan(x)
    if ignore_nan:
        count = fnp.sum(fnp.asarray(~isnan, np.int64), -1, keepdims=True)  # (..., 1)
    else:
        count = fnp.full(x.shape[:-1] + (1,), n, np.int64)
    last = fnp.asarray(fnp.maximum(count - 1, 0), x.dtype)
    # positions: one trailing axis per quantile, q's axes moved to the front at the end
    qf = fnp.ravel(q)
    pos = fnp.multiply(last, qf)  # (..., nq)
    lo = fnp.floor(pos)
    hi = fnp.ceil(pos)
    if method == "lower":
        hi = lo
    elif method == "higher":
        lo = hi
    elif method == "nearest":
        lo = hi = fnp.rint(pos)
    lo_i = fnp.asarray(lo, np.int64)
    hi_i = fnp.asarray(hi, np.int64)
    v_lo = fnp.take_along_axis(s, lo_i, -1)
    v_hi = fnp.take_along_axis(s, hi_i, -1)
    if method == "midpoint":
        out = (v_lo + v_hi) * 0.5
    elif method == "linear":
        frac = pos - lo
        out = v_lo + (v_hi - v_lo) * frac
        out = fnp.where(frac == 0, v_lo, out)  # exact at sample points (and no inf - inf there)
    else:
        out = v_lo
    bad = count == 0 if ignore_nan else fnp.any(isnan, -1, keepdims=True)
    out = fnp.where(bad, np.nan, out)
    out = fnp.moveaxis(out, -1, 0)
    out = fnp.reshape(out, q.shape + out.shape[1:])
    if keepdims:
        shape = q.shape + tuple(1 if d in axes else m for d, m in enumerate(arrays.to_array(a).shape))
        out = fnp.reshape(out, shape)
    return out


def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
             interpolation=None):
    """numpy.quantile (methods linear, lower, higher, midpoint, nearest); NaN where a slice has one."""
    return _quantile(a, q, axis, interpolation or method, keepdims, False, "quantile")


def nanquantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
                interpolation=None):
    """numpy.nanquantile: NaNs ignored; an all-NaN slice gives NaN."""
    return _quantile(a, q, axis, interpolation or method, keepdims, True, "nanquantile")


def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
               interpolation=None):
    return _quantile(a, fnp.divide(q, 100.0), axis, interpolation or method, keepdims, False, "percentile")


def nanpercentile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *,
                  interpolation=None):
    return _quantile(a, fnp.divide(q, 100.0), axis, interpolation or method, keepdims, True, "nanpercentile")


def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    return _quantile(a, 0.5, axis, "linear", keepdims, False, "median")


def nanmedian(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    return _quantile(a, 0.5, axis, "linear", keepdims, True, "nanmedian")


def unique(ar, return_index=False, return_inverse=False, return_counts=False, axis=None, *,
           equal_nan=True, size=None, fill_value=None):
    """numpy.unique of a flattened array.  On concrete values numpy's; with ``size=`` (as JAX) a
    fixed-size result that works under ``jit``: the first ``size`` sorted unique values, padded
    with ``fill_value`` (default: the smallest value)."""
    if size is None:
        if isinstance(ar, Tracer):
            ar = ar._concrete("unique (its output size depends on the values; pass size=)")
        out = arrays.concrete_only("unique")(ar, return_index, return_inverse, return_counts, axis, equal_nan=equal_nan)
        return tuple(map(as_eager, out)) if isinstance(out, tuple) else as_eager(out)
    if axis is not None:
        raise NotImplementedError("unique(size=..., axis=...) is not implemented; flatten first")
    x = fnp.ravel(arrays.to_array(ar))
    n = x.shape[0]
    perm = argsort_last(x)
    s = fnp.take(x, perm)
    if n:
        is_new = fnp.concatenate([fnp.ones(1, bool), s[1:] != s[:-1]])
    else:
        is_new = fnp.zeros(0, bool)
    if equal_nan and n and x.dtype.kind in "fc":
        both_nan = fnp.isnan(s[1:]) & fnp.isnan(s[:-1])
        is_new = fnp.concatenate([fnp.ones(1, bool), (s[1:] != s[:-1]) & ~both_nan])
    group = fnp.cumsum(fnp.asarray(is_new, np.int64)) - 1  # group id of each sorted entry
    slot = fnp.where(is_new, group, size)  # group starts go to their slot; others are dropped
    fill = (s[0] if n else fnp.zeros((), x.dtype)) if fill_value is None else fill_value
    values = fnp.full(size, fill, x.dtype).at[slot].set(s, mode="drop")
    results = [values]
    if return_index:
        results.append(fnp.zeros(size, np.int64).at[slot].set(perm, mode="drop"))
    if return_inverse:
        inverse = fnp.zeros(n, np.int64).at[perm].set(group)
        results.append(fnp.reshape(inverse, fnp.shape(ar)) if fnp.ndim(ar) > 1 else inverse)
    if return_counts:
        results.append(fnp.zeros(size, np.int64).at[fnp.minimum(group, size)].add(1, mode="drop"))
    return results[0] if len(results) == 1 else tuple(results)

