"""Products and miscellaneous numerics: kron, cross, vecdot, matvec, select, choose,
put_along_axis, compress, digitize, interp, convolve, correlate, bincount, cov, corrcoef,
trapezoid, gradient, polyval, closeness tests; histogram and polyfit on concrete values.
Written over ``functrace.numpy``, so differentiable and batched wherever numpy's result depends
smoothly on the values."""
from __future__ import annotations

import builtins as _builtins

import numpy as _np

from .. import arrays as _arrays
from .. import primitives as _P
from ..core import Tracer as _Tracer
from ..core.errors import ShapeError as _ShapeError
from ..core.errors import user_frame_description as _where_in_user_code
from . import _base as _fnp
from . import _elementwise, _shape

histogram = _arrays.concrete_only("histogram")
histogram_bin_edges = _arrays.concrete_only("histogram_bin_edges")
polyfit = _arrays.concrete_only("polyfit")


def _concrete(x, what: str):
    return x._concrete(what) if isinstance(x, _Tracer) else x


# --------------------------------------------------------------------------- products


def kron(a, b):
    """The Kronecker product: blocks ``a[i, j] * b``, ranks aligned by leading unit axes."""
    a, b = _arrays.promote(_arrays.to_array(a), _arrays.to_array(b))
    nd = _builtins.max(a.ndim, b.ndim)
    a = _fnp.reshape(a, (1,) * (nd - a.ndim) + a.shape)
    b = _fnp.reshape(b, (1,) * (nd - b.ndim) + b.shape)
    prod = _fnp.multiply(_fnp.reshape(a, tuple(v for n in a.shape for v in (n, 1))),
                         _fnp.reshape(b, tuple(v for n in b.shape for v in (1, n))))
    return _fnp.reshape(prod, tuple(m * n for m, n in zip(a.shape, b.shape)))


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """The cross product of 3-vectors (or 2-vectors: the z component, as numpy)."""
    if axis is not None:
        axisa = axisb = axisc = axis
    a = _fnp.moveaxis(_arrays.to_array(a), axisa, -1)
    b = _fnp.moveaxis(_arrays.to_array(b), axisb, -1)
    a, b = _arrays.promote(a, b)
    if a.shape[-1] not in (2, 3) or b.shape[-1] not in (2, 3):
        raise ValueError(f"cross: incompatible dimensions for cross product (dimension must be 2 or 3), got "
                         f"{a.shape[-1]} and {b.shape[-1]} {_where_in_user_code()}")
    if a.shape[-1] == 2 and b.shape[-1] == 2:
        return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]
    zero = lambda v: _fnp.zeros_like(v[..., 0])  # noqa: E731
    a0, a1, a2 = a[..., 0], a[..., 1], a[..., 2] if a.shape[-1] == 3 else zero(a)
    b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2] if b.shape[-1] == 3 else zero(b)
    c = _fnp.stack(_fnp.broadcast_arrays(a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0), -1)
    return _fnp.moveaxis(c, -1, axisc)


def vecdot(x1, x2, axis=-1):
    """The dot product of vectors along ``axis``, broadcast over the others (conjugating ``x1``)."""
    x1, x2 = _arrays.promote(_arrays.to_array(x1), _arrays.to_array(x2))
    if x1.shape[axis] != x2.shape[axis]:
        raise _ShapeError(f"vecdot: axis sizes differ, {x1.shape} and {x2.shape} {_where_in_user_code()}")
    return _fnp.sum(_fnp.multiply(_conj(x1), x2), axis)


def _conj(x):
    return _np.conj(x) if not isinstance(x, _Tracer) and x.dtype.kind == "c" else x


def matvec(x1, x2):
    """Matrix-vector products over broadcast leading axes: ``x1 (..., m, n)``, ``x2 (..., n)``."""
    return _fnp.matmul(x1, _fnp.expand_dims(x2, -1))[..., 0]


def vecmat(x1, x2):
    """Vector-matrix products (``x1`` conjugated): ``x1 (..., m)``, ``x2 (..., m, n)``."""
    return _fnp.matmul(_fnp.expand_dims(_conj(_arrays.to_array(x1)), -2), x2)[..., 0, :]


# --------------------------------------------------------------------------- selection


def select(condlist, choicelist, default=0):
    """The first choice whose condition holds, elementwise; ``default`` where none does."""
    if len(condlist) != len(choicelist):
        raise ValueError("select: list of cases must be same length as list of conditions")
    if not condlist:
        raise ValueError("select with an empty condition list is not possible")
    out = default
    for cond, choice in zip(reversed(condlist), reversed(choicelist)):
        c = _arrays.to_array(cond)
        if c.dtype != bool:
            raise TypeError(f"select: condition arrays must be boolean, got {c.dtype.name} {_where_in_user_code()}")
        out = _fnp.where(c, choice, out)
    return out


def choose(a, choices, mode="raise"):
    """``choices[a[i]][i]`` elementwise.  Traced indices need mode 'clip' or 'wrap' (as JAX)."""
    idx = _arrays.to_array(a)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"choose: indices must be integers, got {idx.dtype.name} {_where_in_user_code()}")
    n = len(choices)
    if mode == "raise":
        concrete = _concrete(idx, "choose's indices with mode='raise' (pass mode='clip' or 'wrap')")
        if _np.size(concrete) and (_np.min(concrete) < 0 or _np.max(concrete) >= n):
            raise ValueError("choose: invalid entry in choice array")
    elif mode == "clip":
        idx = _fnp.clip(idx, 0, n - 1)
    elif mode == "wrap":
        idx = _fnp.remainder(idx, n)
    else:
        raise ValueError(f"choose: mode must be 'raise', 'wrap' or 'clip', got {mode!r}")
    out = choices[n - 1]
    for k in range(n - 2, -1, -1):
        out = _fnp.where(_fnp.equal(idx, k), choices[k], out)
    return _fnp.broadcast_to(out, _P.broadcast_shapes("choose", _fnp.shape(idx), _fnp.shape(out)))


def put_along_axis(arr, indices, values, axis, inplace=True, mode=None):
    """The functional form of numpy.put_along_axis, as JAX's: pass ``inplace=False``; returns ``arr``
    with ``values`` written at ``indices`` along ``axis`` (with repeated indices, the last write
    wins, as numpy).  Differentiable in ``arr`` and ``values``; ``indices`` may be traced."""
    if inplace:
        raise ValueError("put_along_axis: functrace arrays are immutable; pass inplace=False to get the "
                         "updated array (as jax.numpy)")
    x = _arrays.to_array(arr)
    axis = _arrays.normalize_axis(axis, x.ndim, "put_along_axis")
    idx = _arrays.normalize_index(indices, x.shape[axis])
    if _fnp.ndim(idx) != x.ndim:
        raise ValueError("put_along_axis: indices and arr must have the same number of dimensions")
    vals = _fnp.broadcast_to(_fnp.asarray(values, x.dtype), _fnp.shape(idx))
    # hits[..., k, j, ...]: write k lands on position j; only the last write to a position counts
    idx_e = _fnp.expand_dims(idx, axis + 1)
    positions = _P.iota(_np.int64, (1,) * (axis + 1) + (x.shape[axis],) + (1,) * (x.ndim - axis - 1), axis + 1)
    hits = _fnp.equal(idx_e, positions)
    later = _fnp.cumsum(_fnp.flip(_fnp.asarray(hits, _np.int64), axis), axis)
    last = _fnp.logical_and(hits, _fnp.equal(_fnp.flip(later, axis), 1))
    written = _fnp.sum(_fnp.where(last, _fnp.expand_dims(vals, axis + 1), _fnp.zeros((), x.dtype)), axis)
    touched = _fnp.any(hits, axis)
    full = tuple(_builtins.max(a, b) for a, b in zip(x.shape, _fnp.shape(touched)))
    return _fnp.where(_fnp.broadcast_to(touched, full), _fnp.broadcast_to(written, full), _fnp.broadcast_to(x, full))


def compress(condition, a, axis=None):
    """The slices of ``a`` along ``axis`` where the concrete ``condition`` holds."""
    cond = _np.asarray(_concrete(condition, "compress's condition (its output shape depends on it)"), bool)
    x = _arrays.to_array(a)
    if axis is None:
        x, axis = _fnp.ravel(x), 0
    axis = _arrays.normalize_axis(axis, x.ndim, "compress")
    if cond.ndim != 1:
        raise ValueError("compress: condition must be a 1-d array")
    keep = _np.nonzero(cond[: x.shape[axis]])[0].astype(_np.int64)
    if cond.size > x.shape[axis] and cond[x.shape[axis]:].any():
        raise IndexError(f"compress: index out of bounds for axis {axis} of size {x.shape[axis]}")
    return _P.take(x, keep, axis)


def extract(condition, arr):
    """``ravel(arr)`` where the concrete ``condition`` (raveled) holds."""
    return compress(_np.ravel(_concrete(condition, "extract's condition")), _fnp.ravel(arr))


# --------------------------------------------------------------------------- binning, interpolation


def digitize(x, bins, right=False):
    """The bin of each value of ``x`` (numpy's convention, bins increasing or decreasing), as a count
    of comparisons: no sort needed, traced bins too."""
    x = _arrays.to_array(x)
    bins = _arrays.to_array(bins)
    if bins.ndim != 1:
        raise ValueError("digitize: bins must be 1-dimensional")
    xe = _fnp.expand_dims(x, -1)
    increasing = _fnp.sum(_fnp.less(bins, xe) if right else _fnp.less_equal(bins, xe), -1)
    if bins.shape[0] < 2:
        return increasing
    decreasing = _fnp.sum(_fnp.less_equal(xe, bins) if right else _fnp.less(xe, bins), -1)
    return _fnp.where(_fnp.greater(bins[0], bins[-1]), decreasing, increasing)


def interp(x, xp, fp, left=None, right=None, period=None):
    """Piecewise-linear interpolation of (``xp``, ``fp``) at ``x`` (``xp`` increasing); values
    outside take ``left`` / ``right`` (default the end values).  Differentiable in all three."""
    if period is not None:
        raise NotImplementedError("interp: period= is not implemented")
    x, xp, fp = _arrays.promote_float(x, xp, fp)
    if _fnp.ndim(xp) != 1 or _fnp.ndim(fp) != 1 or xp.shape != fp.shape:
        raise ValueError("interp: xp and fp must be 1-D sequences of the same length")
    n = xp.shape[0]
    if n == 1:
        out = _fnp.broadcast_to(fp[0], x.shape)
    else:
        # segment i covers [xp[i], xp[i+1]]: i = (number of xp <= x) - 1, clipped to the segments
        i = _fnp.clip(_fnp.sum(_fnp.less_equal(xp, _fnp.expand_dims(x, -1)), -1) - 1, 0, n - 2)
        x0, x1 = _P.take(xp, i, 0), _P.take(xp, i + 1, 0)
        f0, f1 = _P.take(fp, i, 0), _P.take(fp, i + 1, 0)
        span = x1 - x0
        t = (x - x0) / _fnp.where(span == 0, _fnp.ones_like(span), span)
        out = f0 + t * (f1 - f0)
        out = _fnp.where(_fnp.equal(x, x1), f1, out)  # numpy returns fp exactly at the nodes
    lo = fp[0] if left is None else _fnp.asarray(left, x.dtype)
    hi = fp[-1] if right is None else _fnp.asarray(right, x.dtype)
    out = _fnp.where(_fnp.less(x, xp[0]), lo, out)
    return _fnp.where(_fnp.greater(x, xp[-1]), hi, out)


def bincount(x, weights=None, minlength=0, *, length=None):
    """Counts (or summed weights) of each non-negative integer in ``x``.  Under a transformation
    the output size must be static: pass ``length`` (values >= length are dropped, as JAX)."""
    idx = _arrays.to_array(x)
    if idx.dtype.kind not in "iub":
        raise TypeError(f"bincount: x must be integers, got {idx.dtype.name} {_where_in_user_code()}")
    if idx.ndim != 1:
        raise ValueError("bincount: x must be one-dimensional")
    if length is None:
        concrete = _concrete(idx, "bincount's output length (pass length=)")
        if _np.size(concrete) and _np.min(concrete) < 0:
            raise ValueError("bincount: x must be non-negative")
        length = _builtins.max(int(minlength), int(_np.max(concrete)) + 1 if _np.size(concrete) else 0)
    w = _fnp.ones(idx.shape, _np.int64) if weights is None else _arrays.to_array(weights)
    if weights is not None and w.dtype.kind not in "fc":
        w = _fnp.asarray(w, _np.float64)
    idx = _fnp.asarray(idx, _np.int64)
    inside = _fnp.logical_and(_fnp.greater_equal(idx, 0), _fnp.less(idx, length))
    w = _fnp.where(inside, w, _fnp.zeros((), w.dtype))
    return _P.scatter_add(_fnp.zeros((length,), w.dtype), _fnp.clip(idx, 0, _builtins.max(length - 1, 0)), w, 0)


# --------------------------------------------------------------------------- convolution


def _correlate_full(a, v):
    """sum_k a[n + k - (len(v) - 1)] v[k] for every n of the full output (zeros outside ``a``)."""
    n, m = a.shape[0], v.shape[0]
    padded = _fnp.pad(a, (m - 1, m - 1))
    windows = _np.arange(n + m - 1)[:, None] + _np.arange(m)[None, :]
    return _fnp.matmul(_P.take(padded, windows.astype(_np.int64), 0), v)


def _trim(full, n: int, m: int, mode: str):
    if mode == "full":
        return full
    if mode == "same":
        length = _builtins.max(n, m)
        start = (n + m - 1 - length) // 2
        return full[start:start + length]
    if mode == "valid":
        return full[_builtins.min(n, m) - 1: _builtins.max(n, m)]
    raise ValueError(f"mode must be one of 'full', 'same' or 'valid', got {mode!r}")


def _sequences(name: str, a, v) -> tuple:
    """(a, v, len(a), len(v)) promoted to one dtype: two non-empty 1-D sequences, or a ValueError."""
    a, v = _arrays.promote(_arrays.to_array(a), _arrays.to_array(v))
    if a.ndim != 1 or v.ndim != 1:
        raise ValueError(f"{name}: object too deep for desired array (inputs must be 1-D)")
    if a.shape[0] == 0 or v.shape[0] == 0:
        raise ValueError(f"{name}: inputs cannot be empty")
    return a, v, a.shape[0], v.shape[0]


def correlate(a, v, mode="valid"):
    """The cross-correlation of two 1-D sequences (numpy's definition, modes 'valid', 'same', 'full')."""
    a, v, n, m = _sequences("correlate", a, v)
    if n >= m:
        full = _correlate_full(a, v)
    else:  # numpy: the roles swap, the output reversed
        full = _fnp.flip(_correlate_full(v, a))
    return _trim(full, n, m, mode)


def convolve(a, v, mode="full"):
    """The discrete linear convolution of two 1-D sequences."""
    a, v, n, m = _sequences("convolve", a, v)
    big, small = (a, v) if n >= m else (v, a)
    return _trim(_correlate_full(big, _fnp.flip(small)), n, m, mode)


# --------------------------------------------------------------------------- statistics, calculus


def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None):
    """The covariance matrix of the variables (rows, or columns with ``rowvar=False``)."""
    if fweights is not None or aweights is not None:
        raise NotImplementedError("cov: fweights / aweights are not implemented")
    x = _shape.atleast_2d(_arrays.to_float(m, _np.float64))
    if not rowvar and x.shape[0] != 1:
        x = _fnp.transpose(x)
    if y is not None:
        y = _shape.atleast_2d(_arrays.to_float(y, _np.float64))
        if not rowvar and y.shape[0] != 1:
            y = _fnp.transpose(y)
        x = _fnp.concatenate(_arrays.promote(x, y), 0)
    ddof = (0 if bias else 1) if ddof is None else ddof
    n = x.shape[1]
    centered = x - _fnp.mean(x, 1, keepdims=True)
    c = _fnp.matmul(centered, _fnp.transpose(_conj(centered))) / (n - ddof)
    return _fnp.squeeze(c)


def corrcoef(x, y=None, rowvar=True):
    """Pearson correlation coefficients, clipped to [-1, 1] as numpy does."""
    c = cov(x, y, rowvar)
    if _fnp.ndim(c) == 0:
        return c / c
    d = _fnp.sqrt(_fnp.diagonal(c))
    return _fnp.clip(c / d[:, None] / d[None, :], -1, 1)


def trapezoid(y, x=None, dx=1.0, axis=-1):
    """The integral of ``y`` along ``axis`` by the trapezoidal rule (sample points ``x`` or spacing ``dx``)."""
    y = _arrays.to_float(y, _np.float64)
    axis = _arrays.normalize_axis(axis, y.ndim, "trapezoid")
    n = y.shape[axis]
    lo = _fnp.take(y, _np.arange(0, _builtins.max(n - 1, 0)), axis)
    hi = _fnp.take(y, _np.arange(1, n), axis)
    if x is None:
        d = dx
    else:
        x = _arrays.to_array(x)
        d = _shape.diff(x) if x.ndim == 1 else _shape.diff(x, axis=axis)
        if x.ndim == 1:
            d = _fnp.reshape(d, tuple(-1 if k == axis else 1 for k in range(y.ndim)))
    return _fnp.sum(d * (lo + hi) / 2.0, axis)


def gradient(f, *varargs, axis=None, edge_order=1):
    """numpy.gradient: second-order central differences inside, one-sided at the edges (order 1
    or 2); spacings are scalars or coordinate arrays, one per axis."""
    f = _arrays.to_float(f, _np.float64)
    axes = tuple(range(f.ndim)) if axis is None else tuple(_arrays.distinct_axes(axis, f.ndim, "gradient"))
    if not varargs:
        spacing = [1.0] * len(axes)
    elif len(varargs) == 1 and _fnp.ndim(varargs[0]) == 0:
        spacing = list(varargs) * len(axes)
    elif len(varargs) == len(axes):
        spacing = list(varargs)
    else:
        raise TypeError("gradient: invalid number of spacing arguments")
    if edge_order not in (1, 2):
        raise ValueError("gradient: edge_order must be 1 or 2")
    out = [_gradient_along(f, ax, h, edge_order) for ax, h in zip(axes, spacing)]
    return out[0] if len(out) == 1 else out


def _gradient_along(f, axis: int, h, edge_order: int):
    n = f.shape[axis]
    if n < edge_order + 1:
        raise ValueError("gradient: shape of the array too small to calculate a numerical gradient, at least "
                         "(edge_order + 1) elements are required")
    part = lambda lo, hi: _fnp.take(f, _np.arange(lo, n + hi if hi <= 0 else hi), axis)  # noqa: E731
    shape = tuple(-1 if k == axis else 1 for k in range(f.ndim))
    if _fnp.ndim(h) == 0:  # uniform spacing
        interior = (part(2, 0) - part(0, -2)) / (2.0 * h)
        if edge_order == 1:
            first = (part(1, 2) - part(0, 1)) / h
            last = (part(n - 1, n) - part(n - 2, n - 1)) / h
        else:
            first = (-1.5 * part(0, 1) + 2.0 * part(1, 2) - 0.5 * part(2, 3)) / h
            last = (0.5 * part(n - 3, n - 2) - 2.0 * part(n - 2, n - 1) + 1.5 * part(n - 1, n)) / h
        return _fnp.concatenate([first, interior, last], axis)
    x = _arrays.to_float(h, _np.float64)
    if x.ndim != 1 or x.shape[0] != n:
        raise ValueError("gradient: distances must be either scalars or match the length of the axis")
    dx = _shape.diff(x)
    d1, d2 = _fnp.reshape(dx[:-1], shape), _fnp.reshape(dx[1:], shape)
    a, b, c = -d2 / (d1 * (d1 + d2)), (d2 - d1) / (d1 * d2), d1 / (d2 * (d1 + d2))
    interior = a * part(0, -2) + b * part(1, -1) + c * part(2, 0)
    if edge_order == 1:
        first = (part(1, 2) - part(0, 1)) / dx[0]
        last = (part(n - 1, n) - part(n - 2, n - 1)) / dx[-1]
    else:
        h1, h2 = dx[0], dx[1]
        first = (-(2.0 * h1 + h2) / (h1 * (h1 + h2)) * part(0, 1) + (h1 + h2) / (h1 * h2) * part(1, 2)
                 - h1 / (h2 * (h1 + h2)) * part(2, 3))
        h1, h2 = dx[-2], dx[-1]
        last = (h2 / (h1 * (h1 + h2)) * part(n - 3, n - 2) - (h2 + h1) / (h1 * h2) * part(n - 2, n - 1)
                + (2.0 * h2 + h1) / (h2 * (h1 + h2)) * part(n - 1, n))
    return _fnp.concatenate([first, interior, last], axis)


def polyval(p, x):
    """The polynomial with coefficients ``p`` (highest power first) at ``x``, by Horner's rule."""
    p = _arrays.to_array(p)
    if p.ndim != 1:
        raise ValueError("polyval: p must be 1-D")
    x = _arrays.to_array(x)
    y = _fnp.zeros_like(x)
    for k in range(p.shape[0]):
        y = y * x + p[k]
    return y


# --------------------------------------------------------------------------- comparisons


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """``|a - b| <= atol + rtol * |b|`` elementwise; infinities equal only to themselves."""
    a, b = _arrays.promote(_arrays.to_array(a), _arrays.to_array(b))
    if a.dtype.kind in "biu":
        a, b = _fnp.asarray(a, _np.float64), _fnp.asarray(b, _np.float64)
    finite = _fnp.logical_and(_fnp.isfinite(a), _fnp.isfinite(b))
    close = _fnp.less_equal(_fnp.abs(a - b), atol + rtol * _fnp.abs(b))
    out = _fnp.where(finite, close, _fnp.equal(a, b))
    if equal_nan:
        out = _fnp.logical_or(out, _fnp.logical_and(_fnp.isnan(a), _fnp.isnan(b)))
    return out


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    return _fnp.all(isclose(a, b, rtol, atol, equal_nan))


def array_equal(a1, a2, equal_nan=False):
    """Same shape and elements (False for different shapes, as numpy)."""
    a1, a2 = _arrays.to_array(a1), _arrays.to_array(a2)
    if _fnp.shape(a1) != _fnp.shape(a2):
        return _np.bool_(False)
    eq = _fnp.equal(a1, a2)
    if equal_nan and _np.result_type(a1.dtype, a2.dtype).kind in "fc":
        eq = _fnp.logical_or(eq, _fnp.logical_and(_fnp.isnan(a1), _fnp.isnan(a2)))
    return _fnp.all(eq)


def array_equiv(a1, a2):
    """Equal after broadcasting (False where the shapes do not broadcast)."""
    a1, a2 = _arrays.to_array(a1), _arrays.to_array(a2)
    try:
        _np.broadcast_shapes(_fnp.shape(a1), _fnp.shape(a2))
    except ValueError:
        return _np.bool_(False)
    return _fnp.all(_fnp.equal(a1, a2))


# --------------------------------------------------------------------------- small helpers


def isin(element, test_elements, assume_unique=False, invert=False):
    """Whether each element is among ``test_elements`` (by comparisons: traced values too)."""
    x = _arrays.to_array(element)
    tests = _fnp.ravel(test_elements)
    found = _fnp.any(_fnp.equal(_fnp.expand_dims(x, -1), tests), -1) if tests.shape[0] else _fnp.zeros(x.shape, bool)
    return _fnp.logical_not(found) if invert else found


def fill_diagonal(a, val, wrap=False, inplace=True):
    """numpy.fill_diagonal as JAX's: pass ``inplace=False``; returns ``a`` with its main diagonal
    set (values taken cyclically from ``val``; tall 2-D arrays wrap only with ``wrap=True``)."""
    if inplace:
        raise ValueError("fill_diagonal: functrace arrays are immutable; pass inplace=False (as jax.numpy)")
    x = _arrays.to_array(a)
    if x.ndim < 2 or (x.ndim > 2 and len(set(x.shape)) != 1):
        raise ValueError("fill_diagonal: array must be at least 2-d, and all dimensions equal beyond 2-d")
    step = int(_np.sum(_np.cumprod((1,) + x.shape[:0:-1]))) if x.ndim > 2 else x.shape[1] + 1
    end = x.size if (x.ndim > 2 or wrap) else _builtins.min(x.size, x.shape[1] * x.shape[1])
    flat_positions = _np.arange(x.size)
    on_diagonal = (flat_positions % step == 0) & (flat_positions < end)
    values = _fnp.ravel(_fnp.asarray(val, x.dtype))
    ordinal = (flat_positions // step) % _builtins.max(values.shape[0], 1)
    filled = _P.take(values, ordinal.astype(_np.int64), 0)
    return _fnp.reshape(_fnp.where(on_diagonal, filled, _fnp.ravel(x)), x.shape)


def diagflat(v, k=0):
    return _fnp.diag(_fnp.ravel(v), k)


def resize(a, new_shape):
    """``a`` raveled, repeated cyclically to fill ``new_shape`` (as numpy.resize)."""
    x = _fnp.ravel(a)
    shape = (new_shape,) if isinstance(new_shape, (int, _np.integer)) else tuple(new_shape)
    n = int(_np.prod(shape, dtype=_np.int64))
    if x.shape[0] == 0 or n == 0:
        return _fnp.zeros(shape, x.dtype)
    return _fnp.reshape(_P.take(x, _np.arange(n, dtype=_np.int64) % x.shape[0], 0), shape)


def put(a, ind, v, mode=None, *, inplace=True):
    """numpy.put as JAX's: pass ``inplace=False``; ``v`` written at the flat indices ``ind``."""
    if inplace:
        raise ValueError("put: functrace arrays are immutable; pass inplace=False (as jax.numpy)")
    x = _arrays.to_array(a)
    idx = _fnp.ravel(ind)
    if mode == "clip":
        idx = _fnp.clip(idx, 0, x.size - 1)
    elif mode == "wrap":
        idx = _fnp.remainder(idx, x.size)
    values = resize(_fnp.asarray(v, x.dtype), _fnp.shape(idx))
    return _fnp.reshape(put_along_axis(_fnp.ravel(x), idx, values, 0, inplace=False), x.shape)


def trim_zeros(filt, trim="fb"):
    """The 1-D ``filt`` without its leading ('f') and/or trailing ('b') zeros (concrete values)."""
    values = _np.asarray(_concrete(filt, "trim_zeros (its output shape depends on the values)"))
    nonzero = _np.nonzero(values)[0]
    first = nonzero[0] if "f" in trim.lower() and nonzero.size else (0 if nonzero.size else values.shape[0])
    last = nonzero[-1] + 1 if "b" in trim.lower() and nonzero.size else values.shape[0]
    return filt[first:last]


def unstack(x, axis=0):
    """The slices of ``x`` along ``axis``, as a tuple."""
    x = _arrays.to_array(x)
    axis = _arrays.normalize_axis(axis, x.ndim, "unstack")
    return tuple(_P.take(x, _np.asarray(i, _np.int64), axis) for i in range(x.shape[axis]))


def matrix_transpose(x):
    """The last two axes swapped."""
    x = _arrays.to_array(x)
    if x.ndim < 2:
        raise ValueError(f"matrix_transpose: x must be at least 2-dimensional, got shape {x.shape}")
    return _fnp.swapaxes(x, -1, -2)


def isscalar(element) -> bool:
    """numpy.isscalar; a 0-d traced value counts (as a 0-d jax.Array does in JAX)."""
    return (isinstance(element, _Tracer) and element.ndim == 0) or _np.isscalar(element)


def iscomplexobj(x) -> bool:
    return _np.dtype(_arrays.dtype_info(x)[0]).kind == "c"


def isrealobj(x) -> bool:
    return not iscomplexobj(x)


def iscomplex(x):
    x = _arrays.to_array(x)
    return _fnp.not_equal(_elementwise.imag(x), 0)


def isreal(x):
    x = _arrays.to_array(x)
    return _fnp.equal(_elementwise.imag(x), 0)
