"""``x.at[idx].set / add / multiply / divide / power / min / max / get``: JAX's functional updates.

Every index form that ``x[idx]`` takes works (ints, negative ints, slices, integer arrays, concrete
boolean masks, tuples, Ellipsis, None).  The index is resolved to the flat positions of ``x`` it
selects by indexing a table of flat positions with it (so numpy's index rules are applied once,
by ``functrace.numpy.getitem``); the update is then one primitive on the flattened operand
(``scatter`` or ``scatter_add``).

Out-of-bounds indices follow JAX (after negative indices wrap once):

* ``get``: clamped by default (``x[index]``, whose out-of-bounds reads through index arrays carry
  no derivative, as JAX's gather) and with ``mode="clip"`` (derivative kept on the clamped
  element); ``mode="fill"`` (or ``"drop"``) returns ``fill_value`` there (NaN for floats, the
  smallest integer for signed, the largest for unsigned, True for bools, as JAX);
* updates: dropped by default (``mode="drop"`` / ``"fill"`` / ``"promise_in_bounds"``);
  ``mode="clip"`` clamps them onto the edge.

Eagerly and under ``jit`` alike: the same resolution runs on concrete or traced indices.
"""
from __future__ import annotations

import math

import numpy as np

from .. import arrays
from .. import primitives as P
from ..core import Tracer
from ..core.errors import user_frame_description
from ..primitives import scatter as S
from . import _base as fnp

_MODES = (None, "clip", "drop", "fill", "promise_in_bounds")



def _check_mode(mode):
    if mode not in _MODES:
        raise ValueError(f"x.at[...]: mode must be one of {_MODES[1:]}, got {mode!r} {user_frame_description()}")


def _axis_index(fnp, entry, n: int, clip: bool):
    """One integer (array) index of an axis of size ``n``: negative entries wrapped, then either
    clamped to ``[0, n)`` (``clip``) or sent to ``n`` when out of bounds (the sentinel row of the
    position table).  Returns (index, may be out of bounds)."""
    if isinstance(entry, (bool, np.bool_)):
        raise IndexError("a boolean scalar index inside x.at[...] is not supported")
    if isinstance(entry, (int, np.integer)):
        entry = np.asarray(int(entry), np.int64)
    i = arrays.to_array(entry)
    if i.dtype.kind not in "iu":
        raise IndexError(f"x.at[...]: index arrays must be of integer or boolean type, got {i.dtype.name} "
                         f"{user_frame_description()}")
    i = arrays.cast(i, np.dtype(np.int64))
    i = fnp.where(i < 0, i + n, i)
    if clip:
        return fnp.clip(i, 0, n - 1), False
    bad = (i < 0) | (i >= n)
    if not isinstance(bad, Tracer) and not np.any(bad):
        return i, False
    return fnp.where(bad, n, i), True


def flat_positions(shape: tuple, index, clip: bool):
    """(positions, out of bounds possible): the flat positions in an array of ``shape`` that
    ``x[index]`` reads, shaped like ``x[index]``; an out-of-bounds entry is -1 (unless ``clip``)."""
    entries = index if isinstance(index, tuple) else (index,)
    entries = arrays.expand_ellipsis(arrays.expand_bool_indices(entries), len(shape))
    resolved, padded, axis, may_oob = [], [], 0, False
    for e in entries:
        if e is None or isinstance(e, slice):
            resolved.append(e)
            axis += e is not None
            continue
        i, oob = _axis_index(fnp, e, shape[axis], clip)
        resolved.append(i)
        if oob:
            padded.append(axis)
            may_oob = True
        axis += 1
    lead = len(resolved) - len(_trailing_full_slices(resolved))
    if lead and not any(e is None or isinstance(e, slice) for e in resolved[:lead]):
        return _direct_positions(fnp, shape, resolved[:lead], padded), may_oob
    table = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
    if padded:  # one extra row of -1 per axis that may be indexed out of bounds
        table = np.pad(table, [(0, 1 if d in padded else 0) for d in range(len(shape))], constant_values=-1)
    return fnp.getitem(table, tuple(resolved)), may_oob


def _trailing_full_slices(resolved: list) -> list:
    """The ``slice(None)`` entries at the end of an index (whole trailing axes)."""
    k = len(resolved)
    while k and isinstance(resolved[k - 1], slice) and resolved[k - 1] == slice(None):
        k -= 1
    return resolved[k:]


def _direct_positions(fnp, shape: tuple, arrays: list, padded: list):
    """Flat positions of ``x[i0, ..., ik, :, ..., :]`` (integer arrays, then whole axes) computed
    from the indices and the strides, without a table: -1 where an index is out of bounds."""
    k = len(arrays)
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    base = None
    for d, i in enumerate(arrays):
        term = fnp.multiply(i, strides[d])
        base = term if base is None else fnp.add(base, term)
    if padded:
        bad = None
        for d in padded:
            hit = arrays[d] == shape[d]
            bad = hit if bad is None else bad | hit
        base = fnp.where(bad, -1, base)
    rest = shape[k:]
    if not rest:
        return base
    offsets = np.arange(math.prod(rest), dtype=np.int64).reshape(rest)
    expanded = fnp.reshape(base, fnp.shape(base) + (1,) * len(rest))
    lin = fnp.add(expanded, offsets)
    return fnp.where(expanded < 0, -1, lin) if padded else lin


def _fill_value(dtype: np.dtype):
    if dtype.kind in "fc":
        return np.nan
    if dtype.kind == "b":
        return True
    return np.iinfo(dtype).min if dtype.kind == "i" else np.iinfo(dtype).max


def _all_concrete(index) -> bool:
    entries = index if isinstance(index, tuple) else (index,)
    return not any(arrays.holds_tracer(e) for e in entries)


class IndexUpdateRef:
    """``x.at[index]``: the pending update; each method returns a new array."""

    def __init__(self, array, index):
        self.array = array
        self.index = index

    def __repr__(self) -> str:
        return f"_IndexUpdateRef({self.array!r}, {self.index!r})"

    def get(self, *, mode=None, fill_value=None, indices_are_sorted=False, unique_indices=False):
        """``x[index]``, out-of-bounds indices clamped (default) or filled (``mode="fill"``).

        By default (and ``mode="promise_in_bounds"``) this is ``x[index]``, so its derivatives are
        JAX's: an out-of-bounds read through an index with arrays (a gather) carries none, one
        through scalars and slices (a dynamic slice) keeps it.  ``mode="clip"`` clamps and keeps
        every derivative; ``mode="fill"`` reads ``fill_value`` there (no derivative)."""
        _check_mode(mode)
        x = arrays.to_array(self.array)
        if mode in (None, "promise_in_bounds"):
            return fnp.getitem(x, self.index)
        fill = mode in ("fill", "drop")
        if _all_concrete(self.index) and not flat_positions(x.shape, self.index, clip=False)[1]:
            return fnp.getitem(x, self.index)  # in bounds: slices stay slices (no gather)
        pos, may_oob = flat_positions(x.shape, self.index, clip=not fill)
        vals = P.take(fnp.ravel(x), arrays.cast(fnp.maximum(pos, 0), np.dtype(np.int64)), 0)
        if not may_oob:
            return vals
        fv = _fill_value(x.dtype) if fill_value is None else fill_value
        return fnp.where(pos < 0, fnp.asarray(fv, x.dtype), vals)

    def _update(self, values, op: str, mode):
        _check_mode(mode)
        x = arrays.to_array(self.array)
        pos, may_oob = flat_positions(x.shape, self.index, clip=mode == "clip")
        vals = fnp.broadcast_to(fnp.asarray(values, x.dtype), fnp.shape(pos))
        pos, vals = fnp.ravel(pos), fnp.ravel(vals)
        n = x.size
        flat = fnp.ravel(x)
        if may_oob:  # dropped updates land in a trash slot past the end, cut off afterwards
            flat = fnp.concatenate([flat, fnp.zeros(1, x.dtype)])
            pos = fnp.where(pos < 0, n, pos)
        pos = arrays.cast(pos, np.dtype(np.int64))
        if op == "add":
            out = P.scatter_add(flat, pos, vals, 0)
        else:
            out = S.scatter(flat, pos, vals, op)
        if may_oob:
            out = P.slice_op(out, (0,), (n,))
        return fnp.reshape(out, x.shape)

    def set(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False):
        """``x[index] = values`` (at a repeated index the last update wins)."""
        return self._update(values, "set", mode)

    def add(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False):
        """``x[index] += values``, repeated indices accumulating."""
        return self._update(values, "add", mode)

    def subtract(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False):
        return self._update(fnp.negative(values), "add", mode)

    def multiply(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False):
        """``x[index] *= values``, repeated indices multiplying."""
        return self._update(values, "mul", mode)

    mul = multiply

    def divide(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False):
        """``x / (product of values at each position)``, as JAX."""
        x = arrays.to_array(self.array)
        product = IndexUpdateRef(fnp.ones_like(x), self.index)._update(values, "mul", mode)
        return fnp.divide(x, product)

    def power(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False):
        """``x ** (product of values at each position)``, as JAX."""
        x = arrays.to_array(self.array)
        product = IndexUpdateRef(fnp.ones_like(x), self.index)._update(values, "mul", mode)
        return fnp.power(x, product)

    def min(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False):
        """``x[index] = minimum(x[index], values)`` over every update."""
        return self._update(values, "min", mode)

    def max(self, values, *, mode=None, indices_are_sorted=False, unique_indices=False):
        """``x[index] = maximum(x[index], values)`` over every update."""
        return self._update(values, "max", mode)

    def apply(self, func, *, mode=None, indices_are_sorted=False, unique_indices=False):
        raise NotImplementedError("x.at[...].apply(ufunc) is not implemented in functrace; use "
                                  "x.at[idx].set(func(x.at[idx].get())) when the indices are unique")


class IndexUpdateHelper:
    """``x.at``: indexing it gives the update methods (``x.at[i].set(v)``)."""

    def __init__(self, array):
        self.array = array

    def __getitem__(self, index) -> IndexUpdateRef:
        return IndexUpdateRef(self.array, index)

    def __repr__(self) -> str:
        return f"_IndexUpdateHelper({self.array!r})"
