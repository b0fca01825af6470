"""Cumulative products and the NaN-ignoring reductions: ``cumprod``, ``nancumsum``,
``nancumprod``, ``nansum``, ``nanprod``, ``nanmean``, ``nanvar``, ``nanstd``, ``nanmax``,
``nanmin``, ``nanargmax``, ``nanargmin``, ``ptp``, ``count_nonzero``.

The ``nan`` forms replace NaNs by the reduction's identity (``where``, so a NaN entry gets a zero
derivative) and count the others.  An all-NaN slice gives NaN for ``nanmax`` / ``nanmin`` /
``nanmean`` (numpy's value, without its warning) and -1 for ``nanargmax`` / ``nanargmin`` (JAX's;
numpy raises).  Cumulative products are ``associative_scan``s of ``mul`` (``functrace/primitives/basic.py``).
"""
from __future__ import annotations

import numpy as np

from .. import arrays
from .. import primitives as P
from ..core import Tracer
from ..core.eager import as_eager
from ..primitives import cumulative
from . import _base as fnp
from ._dtypes import result_type


def _cumulative(prim, numpy_fn, a, axis, dtype, fname):
    x = arrays.accumulate_as(a, dtype)
    if axis is None:
        x, axis = fnp.ravel(x), 0
    axis = arrays.reduction_axes(axis, x.ndim, fname)[0]
    if not isinstance(x, Tracer):  # concrete: numpy's sequential result, bit for bit
        return as_eager(np.asarray(numpy_fn(x, axis=axis)))
    return cumulative(prim, x, axis)


def cumprod(a, axis=None, dtype=None):
    """numpy.cumprod; differentiable (exact at zeros) as a scan of products."""
    return _cumulative(P.mul_p, np.cumprod, a, axis, dtype, "cumprod")


cumulative_prod = cumprod


def _without_nan(a, identity):
    x = arrays.to_array(a)
    if x.dtype.kind not in "fc":
        return x
    return fnp.where(fnp.isnan(x), fnp.asarray(identity, x.dtype), x)


def nancumsum(a, axis=None, dtype=None):
    return fnp.cumsum(_without_nan(a, 0), axis, dtype)


def nancumprod(a, axis=None, dtype=None):
    return cumprod(_without_nan(a, 1), axis, dtype)


def nansum(a, axis=None, dtype=None, keepdims=False):
    return fnp.sum(_without_nan(a, 0), axis, dtype, keepdims)


def nanprod(a, axis=None, dtype=None, keepdims=False):
    return fnp.prod(_without_nan(a, 1), axis, dtype, keepdims)


def _valid_count(x, axis, keepdims):
    return fnp.sum(fnp.asarray(~fnp.isnan(x), x.dtype), axis, keepdims=keepdims)


def nanmean(a, axis=None, dtype=None, keepdims=False):
    x = arrays.to_float(a, np.float64) if dtype is None else fnp.asarray(a, dtype)
    return fnp.divide(nansum(x, axis, keepdims=keepdims), _valid_count(x, axis, keepdims))


def nanvar(a, axis=None, dtype=None, ddof=0, keepdims=False):
    x = arrays.to_float(a, np.float64) if dtype is None else fnp.asarray(a, dtype)
    centered = fnp.where(fnp.isnan(x), fnp.zeros((), x.dtype), x - nanmean(x, axis, keepdims=True))
    count = _valid_count(x, axis, keepdims)
    return fnp.divide(fnp.sum(centered * centered, axis, keepdims=keepdims), fnp.maximum(count - ddof, 0))


def nanstd(a, axis=None, dtype=None, ddof=0, keepdims=False):
    return fnp.sqrt(nanvar(a, axis, dtype, ddof, keepdims))


def _ignoring_nan(reduce, identity, all_nan_result, a, axis, keepdims):
    """``reduce`` over the non-NaN entries (NaNs replaced by ``identity``); ``all_nan_result`` (in the
    result's dtype) where every entry reduced is NaN: NaN for nanmax / nanmin, -1 for nanargmax /
    nanargmin."""
    x = arrays.to_array(a)
    if x.dtype.kind not in "fc":
        return reduce(x, axis, keepdims=keepdims)
    out = reduce(_without_nan(x, identity), axis, keepdims=keepdims)
    all_nan = fnp.all(fnp.isnan(x), axis, keepdims=keepdims)
    return fnp.where(all_nan, fnp.asarray(all_nan_result, result_type(out)), out)


def nanmax(a, axis=None, keepdims=False):
    return _ignoring_nan(fnp.max, -np.inf, np.nan, a, axis, keepdims)


def nanmin(a, axis=None, keepdims=False):
    return _ignoring_nan(fnp.min, np.inf, np.nan, a, axis, keepdims)


def nanargmax(a, axis=None, keepdims=False):
    return _ignoring_nan(fnp.argmax, -np.inf, -1, a, axis, keepdims)


def nanargmin(a, axis=None, keepdims=False):
    return _ignoring_nan(fnp.argmin, np.inf, -1, a, axis, keepdims)


def ptp(a, axis=None, keepdims=False):
    """numpy.ptp: max - min."""
    return fnp.subtract(fnp.max(a, axis, keepdims=keepdims), fnp.min(a, axis, keepdims=keepdims))


def count_nonzero(a, axis=None, keepdims=False):
    x = arrays.to_array(a)
    return fnp.sum(fnp.asarray(fnp.not_equal(x, 0), np.int64), axis, keepdims=keepdims)
