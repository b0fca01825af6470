"""Shape and index helpers (roll, rot90, diff, insert, delete, block, the split and stack
variants, index conversions), written over ``functrace.numpy``: each is
differentiable and batches where numpy's result depends smoothly on the values."""
from __future__ import annotations

import builtins as _builtins
import operator as _operator

import numpy as _np

from .. import arrays as _arrays
from .. import primitives as _P
from ..core import Tracer as _Tracer
from ..core.errors import ShapeError as _ShapeError
from ..core.errors import user_frame_description as _where_in_user_code
from . import _base as _fnp

_atleast_1d_one, _atleast_2d_one, _array_split_sections = _fnp.atleast_1d, _fnp.atleast_2d, _fnp.array_split


def _concrete(x, what: str):
    """A concrete value for ``what`` (a traced one that knows its value, else ConcretizationError)."""
    return x._concrete(what) if isinstance(x, _Tracer) else x


def roll(a, shift, axis=None):
    """numpy.roll; ``shift`` may be traced (a gather at computed indices)."""
    x = _arrays.to_array(a)
    if axis is None:
        return _fnp.reshape(roll(_fnp.ravel(x), shift, 0), x.shape)
    shifts = list(shift) if isinstance(shift, (list, tuple)) else [shift]
    axes = list(axis) if isinstance(axis, (list, tuple)) else [axis]
    if len(shifts) != len(axes):  # one of them a single value: broadcast, as numpy
        if len(shifts) != 1 and len(axes) != 1:
            raise ValueError(f"roll: shift and axis must be broadcastable ({len(shifts)} vs {len(axes)})")
        shifts, axes = shifts * (len(axes) if len(shifts) == 1 else 1), axes * (len(shifts) if len(axes) == 1 else 1)
    for s, ax in zip(shifts, axes):
        ax = _arrays.normalize_axis(int(ax), x.ndim, "roll")
        n = x.shape[ax]
        if n == 0:
            continue
        if isinstance(s, _Tracer):
            idx = _fnp.remainder(_P.iota(_np.int64, (n,), 0) - _fnp.asarray(s, _np.int64), n)
        else:
            idx = (_np.arange(n, dtype=_np.int64) - _operator.index(s)) % n
        x = _P.take(x, idx, ax)
    return x


def rot90(m, k=1, axes=(0, 1)):
    """Rotate by 90 degrees ``k`` times in the plane of ``axes`` (from the first toward the second)."""
    x = _arrays.to_array(m)
    if len(axes) != 2:
        raise ValueError("rot90: len(axes) must be 2")
    a0, a1 = (_arrays.normalize_axis(a, x.ndim, "rot90") for a in axes)
    if a0 == a1:
        raise ValueError("rot90: the axes must be different")
    k %= 4
    if k == 0:
        return x
    if k == 2:
        return _fnp.flip(_fnp.flip(x, a0), a1)
    perm = list(range(x.ndim))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    if k == 1:
        return _fnp.transpose(_fnp.flip(x, a1), perm)
    return _fnp.flip(_fnp.transpose(x, perm), a1)


def diff(a, n=1, axis=-1, prepend=None, append=None):
    """The ``n``-th discrete difference along ``axis`` (booleans: not_equal, as numpy)."""
    x = _arrays.to_array(a)
    if n < 0:
        raise ValueError(f"diff: order must be non-negative but got {n}")
    axis = _arrays.normalize_axis(axis, x.ndim, "diff")

    def along(v):
        v = _arrays.to_array(v)
        if v.ndim == 0:
            return _fnp.broadcast_to(v, tuple(1 if d == axis else s for d, s in enumerate(x.shape)))
        return v
    if prepend is not None or append is not None:
        parts = ([along(prepend)] if prepend is not None else []) + [x] + ([along(append)] if append is not None else [])
        x = _fnp.concatenate(parts, axis)
    for _ in range(n):
        m = x.shape[axis]
        hi = _P.slice_op(x, tuple(1 if d == axis else 0 for d in range(x.ndim)), x.shape)
        lo = _P.slice_op(x, (0,) * x.ndim, tuple(_builtins.max(m - 1, 0) if d == axis else s
                                                  for d, s in enumerate(x.shape)))
        x = _fnp.not_equal(hi, lo) if x.dtype == bool else _fnp.subtract(hi, lo)
    return x


def ediff1d(ary, to_end=None, to_begin=None):
    x = diff(_fnp.ravel(ary))
    parts = ([_fnp.ravel(to_begin)] if to_begin is not None else []) + [x] + (
        [_fnp.ravel(to_end)] if to_end is not None else [])
    return _fnp.concatenate(parts) if len(parts) > 1 else x


def append(arr, values, axis=None):
    if axis is None:
        return _fnp.concatenate([_fnp.ravel(arr), _fnp.ravel(values)])
    return _fnp.concatenate([arr, values], axis)


def insert(arr, obj, values, axis=None):
    """numpy.insert with concrete positions ``obj`` (an int, a slice or a sequence); the values may
    be traced.  The result is a gather from ``arr`` and the values, by numpy's own index rules."""
    x = _arrays.to_array(arr)
    if axis is None:
        x, axis = _fnp.ravel(x), 0
    axis = _arrays.normalize_axis(axis, x.ndim, "insert")
    n = x.shape[axis]
    obj = _concrete(obj, "insert's positions")
    positions = _np.arange(*obj.indices(n)) if isinstance(obj, slice) else _np.asarray(obj)
    v = _arrays.to_array(values)
    v = _fnp.asarray(v, x.dtype) if v.dtype != x.dtype else v
    if positions.ndim == 0:  # numpy: the values' first axis is the inserted one
        v = _fnp.reshape(v, (1,) * (x.ndim - v.ndim) + v.shape) if v.ndim < x.ndim else v
        v = _fnp.moveaxis(v, 0, axis)
        count = v.shape[axis]
    else:
        count = positions.size
    v = _fnp.broadcast_to(v, tuple(count if d == axis else s for d, s in enumerate(x.shape)))
    order = _np.insert(_np.arange(n, dtype=_np.int64), positions, _np.arange(n, n + count, dtype=_np.int64))
    return _P.take(_fnp.concatenate([x, v], axis), order, axis)


def delete(arr, obj, axis=None):
    """numpy.delete with concrete positions (an int, a slice, a sequence or a boolean mask)."""
    x = _arrays.to_array(arr)
    if axis is None:
        x, axis = _fnp.ravel(x), 0
    axis = _arrays.normalize_axis(axis, x.ndim, "delete")
    keep = _np.delete(_np.arange(x.shape[axis], dtype=_np.int64), _concrete(obj, "delete's positions"))
    return _P.take(x, keep, axis)


def atleast_1d(*arys):
    out = [_atleast_1d_one(a) for a in arys]
    return out[0] if len(out) == 1 else out


def atleast_2d(*arys):
    out = [_atleast_2d_one(a) for a in arys]
    return out[0] if len(out) == 1 else out


def atleast_3d(*arys):
    """0-d to (1, 1, 1), (N,) to (1, N, 1), (M, N) to (M, N, 1), as numpy."""
    def one(a):
        x = _arrays.to_array(a)
        if x.ndim == 0:
            return _fnp.reshape(x, (1, 1, 1))
        if x.ndim == 1:
            return _fnp.reshape(x, (1, x.shape[0], 1))
        return _fnp.reshape(x, x.shape + (1,)) if x.ndim == 2 else x
    out = [one(a) for a in arys]
    return out[0] if len(out) == 1 else out


def column_stack(tup):
    """1-D arrays as columns, 2-D arrays as they are, side by side."""
    cols = [_arrays.to_array(a) for a in tup]
    cols = [_fnp.reshape(c, (-1, 1)) if c.ndim < 2 else c for c in cols]
    return _fnp.concatenate(cols, 1)


def dstack(tup):
    return _fnp.concatenate([atleast_3d(a) for a in tup], 2)


def array_split(ary, indices_or_sections, axis=0):
    """numpy.array_split: a number of sections (the first ones one longer) or the split indices."""
    if isinstance(indices_or_sections, (int, _np.integer)):
        return _array_split_sections(ary, int(indices_or_sections), axis)
    return _fnp.split(ary, indices_or_sections, axis)


def _split_along(name: str, axis_of):
    def split(ary, indices_or_sections):
        x = _arrays.to_array(ary)
        axis = axis_of(x.ndim)
        if x.ndim <= axis:
            raise ValueError(f"{name} only works on arrays of {axis + 1} or more dimensions")
        return _fnp.split(x, indices_or_sections, axis)
    split.__name__ = name
    split.__doc__ = f"numpy.{name}: ``split`` along axis {axis_of(2)} (axis 0 for 1-D arrays in hsplit)."
    return split


hsplit = _split_along("hsplit", lambda nd: 0 if nd == 1 else 1)
vsplit = _split_along("vsplit", lambda nd: 0)
dsplit = _split_along("dsplit", lambda nd: 2)


def rollaxis(a, axis, start=0):
    """numpy.rollaxis: ``axis`` moved to lie before position ``start``."""
    x = _arrays.to_array(a)
    axis = _arrays.normalize_axis(axis, x.ndim, "rollaxis")
    if not -x.ndim <= start <= x.ndim:
        raise _ShapeError(f"rollaxis: start {start} is out of bounds for {x.ndim} dimensions {_where_in_user_code()}")
    start = start % (x.ndim + 1) if start < 0 else start
    if axis < start:
        start -= 1
    return _fnp.moveaxis(x, axis, start) if axis != start else x


def unravel_index(indices, shape):
    """Flat indices to a tuple of coordinate arrays; traced indices too (integer division)."""
    shape = tuple(int(s) for s in ((shape,) if isinstance(shape, (int, _np.integer)) else shape))
    if not isinstance(indices, _Tracer) and not _arrays.holds_tracer(indices):
        return _np.unravel_index(indices, shape)
    idx = _fnp.asarray(indices, _np.int64)
    # as JAX: out-of-range indices clamp (a program cannot raise on a value)
    idx = _fnp.clip(_fnp.where(idx < 0, idx + int(_np.prod(shape)), idx), 0, _builtins.max(int(_np.prod(shape)) - 1, 0))
    out = []
    for s in reversed(shape):
        out.append(_fnp.remainder(idx, s))
        idx = _fnp.floor_divide(idx, s)
    return tuple(reversed(out))


def ravel_multi_index(multi_index, dims, mode="raise", order="C"):
    """Coordinate arrays to flat indices.  Traced coordinates need mode 'clip' or 'wrap' (a
    compiled program cannot raise on a value: as JAX)."""
    if order != "C":
        raise NotImplementedError("ravel_multi_index: only order='C' is implemented")
    dims = tuple(int(d) for d in dims)
    if not _builtins.any(isinstance(i, _Tracer) for i in multi_index):
        return _np.ravel_multi_index(tuple(_np.asarray(i) for i in multi_index), dims, mode=mode)
    if mode == "raise":
        raise NotImplementedError("ravel_multi_index of traced indices with mode='raise': the bounds check "
                                  "needs concrete values; pass mode='clip' or mode='wrap' (as JAX)")
    if len(multi_index) != len(dims):
        raise ValueError(f"ravel_multi_index: {len(multi_index)} index arrays for {len(dims)} dimensions")
    flat = None
    for i, d in zip(multi_index, dims):
        i = _fnp.asarray(i, _np.int64)
        i = _fnp.clip(i, 0, d - 1) if mode == "clip" else _fnp.remainder(i, d)
        flat = i if flat is None else flat * d + i
    return flat


def block(arrays):
    """numpy.block: nested lists of arrays assembled, the innermost lists along the last axis."""
    def depth(v):
        return 1 + depth(v[0]) if isinstance(v, list) and v else (1 if isinstance(v, list) else 0)
    if isinstance(arrays, tuple):
        raise TypeError("block: arrays must be nested lists, not tuples (as numpy)")
    d = depth(arrays)
    leaves = []

    def collect(v):
        if isinstance(v, list):
            for u in v:
                collect(u)
        else:
            leaves.append(_arrays.to_array(v))
    collect(arrays)
    ndim = _builtins.max([d] + [a.ndim for a in leaves])

    def assemble(v, level):
        if not isinstance(v, list):
            x = _arrays.to_array(v)
            return _fnp.reshape(x, (1,) * (ndim - x.ndim) + x.shape) if x.ndim < ndim else x
        if level >= d or not v:
            raise ValueError("block: list depths are mismatched (or a list is empty)")
        return _fnp.concatenate([assemble(u, level + 1) for u in v], ndim - d + level)
    return assemble(arrays, 0)
