"""Creation helpers: triangles, grids, index arrays, log-spaced ranges, Vandermonde matrices and
the index-expression objects ``r_``, ``c_``, ``s_``.  Functions of traced values (``tril(x)``,
``meshgrid(x, y)``, ``logspace(a, b)``, ``vander(x)``) are differentiable; index arrays are
concrete, as in JAX (their shapes depend on their arguments)."""
from __future__ import annotations

import numpy as _np

from .. import arrays as _arrays
from .. import primitives as _P
from ..core import Tracer as _Tracer
from . import _base as _fnp
from . import _shape

# index arrays: concrete numpy, as JAX's (their shapes are their arguments)
indices = _np.indices
tril_indices, triu_indices = _np.tril_indices, _np.triu_indices
diag_indices, diag_indices_from = _np.diag_indices, _np.diag_indices_from
mgrid, ogrid, s_, index_exp = _np.mgrid, _np.ogrid, _np.s_, _np.index_exp


def tril_indices_from(arr, k=0):
    shape = _fnp.shape(arr)
    return _np.tril_indices(shape[-2], k, shape[-1])


def triu_indices_from(arr, k=0):
    shape = _fnp.shape(arr)
    return _np.triu_indices(shape[-2], k, shape[-1])


def _triangle(m, k: int, lower: bool):
    x = _arrays.to_array(m)
    if x.ndim < 2:
        x = _fnp.broadcast_to(x, (x.shape[0] if x.ndim else 1,) * 2)
    rows = _P.iota(_np.int64, x.shape[-2:], 0)
    cols = _P.iota(_np.int64, x.shape[-2:], 1)
    keep = (cols - rows <= k) if lower else (cols - rows >= k)
    return _fnp.where(keep, x, _fnp.zeros_like(x))


def tril(m, k=0):
    """The lower triangle of the last two axes (below and on diagonal ``k``), zeros elsewhere."""
    return _triangle(m, k, True)


def triu(m, k=0):
    """The upper triangle of the last two axes (above and on diagonal ``k``), zeros elsewhere."""
    return _triangle(m, k, False)


def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    """Coordinate arrays from 1-D vectors, broadcast ('xy': the first two axes swapped, as numpy)."""
    if indexing not in ("xy", "ij"):
        raise ValueError("meshgrid: indexing must be 'xy' or 'ij'")
    xs = [_fnp.ravel(x) for x in xi]
    shape = [x.shape[0] for x in xs]
    if indexing == "xy" and len(xs) > 1:
        shape[0], shape[1] = shape[1], shape[0]
    out = []
    for i, x in enumerate(xs):
        axis = (1 - i if i < 2 else i) if indexing == "xy" and len(xs) > 1 else i
        unit = [1] * len(xs)
        unit[axis] = x.shape[0]
        g = _fnp.reshape(x, tuple(unit))
        out.append(g if sparse else _fnp.broadcast_to(g, tuple(shape)))
    return out


def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
    """``base ** linspace(start, stop)``; traced endpoints and base differentiate."""
    if not any(isinstance(v, _Tracer) or _arrays.holds_tracer(v) for v in (start, stop, base)):
        return _np.logspace(start, stop, num, endpoint, base, dtype, axis)
    y = _fnp.linspace(start, stop, num, endpoint, axis=axis)
    base = _arrays.to_array(base)
    if base.ndim:
        base = _fnp.expand_dims(base, axis)
    out = _fnp.power(base, y)
    return out if dtype is None else _fnp.asarray(out, dtype)


def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
    """Numbers spaced evenly on a log scale between ``start`` and ``stop`` (same sign, nonzero), the
    endpoints exact, as numpy's; traced endpoints differentiate."""
    if not (_arrays.holds_tracer(start) or _arrays.holds_tracer(stop)):
        return _np.geomspace(start, stop, num, endpoint, dtype, axis)
    start, stop = _arrays.promote_float(start, stop)
    sign = _P.stop_gradient(_fnp.sign(start))
    y = sign * _fnp.exp(_fnp.linspace(_fnp.log(_fnp.abs(start)), _fnp.log(_fnp.abs(stop)), num, endpoint, axis=0))
    if num > 0:  # the endpoints exactly, as numpy sets them
        pos = _P.iota(_np.int64, y.shape, 0)
        y = _fnp.where(pos == 0, _fnp.broadcast_to(start, y.shape), y)
        if endpoint and num > 1:
            y = _fnp.where(pos == num - 1, _fnp.broadcast_to(stop, y.shape), y)
    y = _fnp.moveaxis(y, 0, axis) if axis != 0 else y
    return y if dtype is None else _fnp.asarray(y, dtype)


def vander(x, N=None, increasing=False):
    """The Vandermonde matrix of a 1-D ``x``: columns ``x ** (N-1), ..., x, 1`` (or increasing), by
    integer powers (differentiable at x = 0 too)."""
    x = _arrays.to_array(x)
    if x.ndim != 1:
        raise ValueError("vander: x must be a one-dimensional array or sequence")
    n = x.shape[0] if N is None else int(N)
    cols = [_fnp.ones_like(x) if k == 0 else _fnp.power(x, k) for k in range(n)]
    if not increasing:
        cols = cols[::-1]
    return _fnp.stack(cols, 1) if cols else _fnp.zeros((x.shape[0], 0), x.dtype)


def ix_(*args):
    """Open-mesh index arrays from 1-D sequences (boolean ones as their nonzero positions)."""
    out = []
    for k, a in enumerate(args):
        a = _arrays.to_array(a)
        if a.ndim != 1:
            raise ValueError("ix_: cross index must be 1 dimensional")
        if a.dtype == bool:
            a = _fnp.nonzero(a)[0]
        out.append(_fnp.reshape(a, (1,) * k + (a.shape[0],) + (1,) * (len(args) - k - 1)))
    return tuple(out)


class _Concatenator:
    """``r_`` / ``c_``: slices become ranges (``a:b:c``; ``a:b:nj``, ``nj`` points), scalars 1-D
    arrays, the rest concatenated (along the first axis for ``r_``; as columns for ``c_``).
    Directive strings ('0,2', 'r', 'c') are numpy's: those go to numpy with concrete values."""

    def __init__(self, columns: bool):
        self.columns = columns

    def __getitem__(self, key):
        items = key if isinstance(key, tuple) else (key,)
        if not any(_arrays.holds_tracer(i) for i in items if not isinstance(i, slice)):
            return (_np.c_ if self.columns else _np.r_)[key]
        if any(isinstance(i, str) for i in items):
            raise NotImplementedError("r_ / c_ directive strings with traced values are not implemented")
        parts = []
        for i in items:
            x = _np.r_[i] if isinstance(i, slice) else _arrays.to_array(i)
            x = _shape.atleast_1d(x)
            if self.columns:
                x = _fnp.reshape(x, (-1, 1)) if x.ndim == 1 else x
            parts.append(x)
        return _fnp.concatenate(parts, -1 if self.columns else 0)


r_ = _Concatenator(columns=False)
c_ = _Concatenator(columns=True)
