"""What functrace.numpy's functions share with the rest of functrace: operands made arrays, numpy's
dtype promotion (NEP 50, weak Python scalars), and axis and index normalization with errors that
name the user's line.  A layer between the primitives and the numpy API: ``functrace.numpy``,
``nn``, ``lax``, ``random`` and ``scipy`` use these names; ``functrace.numpy`` exports only numpy's.
"""
from __future__ import annotations

import builtins
import functools

import numpy as np

from . import primitives as P
from .core import PY_SCALAR_TYPES, Tracer
from .core.errors import ShapeError, user_frame_description

_WEAK_KIND_ORDER = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}
_DEFAULT_DTYPE = {"b": np.dtype(bool), "i": np.dtype(np.int64), "f": np.dtype(np.float64),
                  "c": np.dtype(np.complex128)}
_C64 = np.dtype(np.complex64)
# numpy's default accumulator of sum/prod/cumsum for narrower integers and bools (by kind)
_ACCUMULATOR = {"b": np.dtype(np.int_), "i": np.dtype(np.int_), "u": np.dtype(np.uint)}


def dtype_info(x):
    """(dtype, weak) of an operand."""
    if isinstance(x, Tracer):
        a = x.aval
        return a.dtype, a.weak_type
    t = type(x)
    if t in PY_SCALAR_TYPES:
        return P.get_aval(x).dtype, True
    if isinstance(x, (np.ndarray, np.generic)):
        return x.dtype, False
    return _numeric_asarray(x).dtype, False


@functools.lru_cache(maxsize=2048)
def result_dtype(infos: tuple) -> tuple:
    """(dtype, weak) of combining operands given as (dtype, weak) pairs, by numpy 2 (NEP 50) rules.

    A weak Python scalar only matters when its kind is higher than the arrays' kind: an integer
    or bool array then goes to the scalar's default dtype (``int32_array * 2.5`` is float64), a
    float array to the complex dtype of its precision (``float32_array + 1j`` is complex64).
    """
    strong = [d for d, w in infos if not w]
    weak = [d for d, w in infos if w]
    if not strong:
        return np.result_type(*weak), True
    out = np.result_type(*strong)
    for d in weak:
        if _WEAK_KIND_ORDER[d.kind] > _WEAK_KIND_ORDER.get(out.kind, 3):
            out = np.result_type(out, _DEFAULT_DTYPE[d.kind] if out.kind in "biu" else _C64)
    return out, False


def float_dtype(dtype: np.dtype, int_dtype=None) -> np.dtype:
    """The inexact dtype numpy computes a float function of ``dtype`` in.

    Inexact dtypes stay.  Integers and bools go to ``int_dtype`` when given (``true_divide``,
    means and norms use float64), else to the smallest float holding them, like numpy's ufunc
    loops: bool/int8/uint8 -> float16, int16/uint16 -> float32, wider integers -> float64.
    """
    if dtype.kind in "fc":
        return dtype
    return np.dtype(int_dtype) if int_dtype is not None else np.promote_types(dtype, np.float16)


def cast(x, dtype):
    if isinstance(x, Tracer):
        return x if x.aval.dtype == dtype else P.convert_element_type(x, dtype)
    if isinstance(x, np.ndarray) and x.dtype == dtype:
        return x
    return np.asarray(x, dtype=dtype)


def promote(*args):
    """Cast operands to their common numpy result dtype (respecting weak Python scalars)."""
    if len(args) == 2:
        x, y = args
        if isinstance(x, Tracer) and isinstance(y, Tracer) and x.aval.dtype == y.aval.dtype:
            return args
    dt, _ = result_dtype(tuple(dtype_info(a) for a in args))
    return tuple(cast(a, dt) for a in args)


@functools.lru_cache(maxsize=1024)
def float_result_dtype(infos: tuple, int_dtype=None) -> np.dtype:
    """The dtype of a float function (arctan2, hypot, ...) of operands given as (dtype, weak):
    their common result dtype when that is inexact, weak Python scalars respected
    (``hypot(float32_array, 1.5)`` is float32).  For integer and bool operands ``int_dtype`` if
    given, else the float numpy's loops use: the promotion of each operand's own float
    (``float_dtype``; weak scalars as the common dtype), so int8 with uint8 is float16 although
    int8 + uint8 is int16, while bool with a Python int is float64."""
    dt, _ = result_dtype(infos)
    if dt.kind in "fc":
        return dt
    if int_dtype is not None:
        return np.dtype(int_dtype)
    return np.result_type(*(float_dtype(dt if weak else d) for d, weak in infos))


def promote_float(*args, int_dtype=None):
    """``promote`` to ``float_result_dtype``: for the float functions arctan2, hypot, ..."""
    dt = float_result_dtype(tuple(dtype_info(a) for a in args), int_dtype)
    return tuple(cast(a, dt) for a in args)


def promote_no_bool_loop(*args):
    """``promote`` for numpy's ufuncs with no bool loop (``power``, ``floor_divide``, ``remainder``,
    ``fmod``, ``square``): numpy computes bools in the first integer loop, int8 (``bool_array //
    True`` and ``bool_array ** bool_array`` are int8), so bool operands become int8 here too --
    the dtype a traced program records is then the one its values have."""
    dt, _ = result_dtype(tuple(dtype_info(a) for a in args))
    dt = np.dtype(np.int8) if dt.kind == "b" else dt
    return tuple(cast(a, dt) for a in args)


def promote_divide(x, y):
    """``promote_float`` for ``true_divide``, whose only integer loop is float64 (int8 / int8 too)."""
    return promote_float(x, y, int_dtype=np.dtype(np.float64))


def holds_tracer(x) -> bool:
    """A tracer, or a (nested) list or tuple with one among its entries."""
    return isinstance(x, Tracer) or (
        isinstance(x, (list, tuple)) and builtins.any(isinstance(v, Tracer) for v in _flat(x)))


def to_array(x):
    if isinstance(x, Tracer) or isinstance(x, np.ndarray):
        return x
    if holds_tracer(x):
        rows = promote(*[to_array(v) for v in x])  # a nested list holding tracers: stacked on a new axis 0
        return P.concatenate([P.expand_dims(r, (0,)) for r in rows], 0)
    return _numeric_asarray(x)


def _numeric_asarray(x):
    """``np.asarray(x)`` of a value that is no array yet; a non-numeric one (None, a string, ...)
    raises TypeError naming the user's line, where numpy would make an object array (a jitted
    program of objects that fails only when it runs)."""
    arr = np.asarray(x)
    if arr.dtype.kind not in "biufc":
        what = ("None (a None in a pytree argument of ft.jit, grad or vmap is an empty subtree, as in "
                "JAX: the function receives None, not an array)" if x is None else
                f"{type(x).__name__} {x!r:.60}")
        raise TypeError(f"functrace.numpy operations take numbers and numeric arrays, got {what} "
                        f"{user_frame_description()}")
    return arr


def _flat(seq):
    for v in seq:
        if isinstance(v, (list, tuple)):
            yield from _flat(v)
        else:
            yield v


def to_float(x, int_dtype=None):
    """``x`` as an inexact array, of dtype ``float_dtype(x.dtype, int_dtype)``."""
    x = to_array(x)
    d = x.dtype
    if d.kind in "fc":
        return x
    return cast(x, float_dtype(d, int_dtype))


def concrete_only(name):
    """numpy's ``name`` on concrete values (tracers that know theirs, e.g. under eager ``grad``;
    others raise ConcretizationError): its result does not depend differentiably on them."""
    def concrete(a):
        if isinstance(a, Tracer):
            return a._concrete(name)
        if isinstance(a, (list, tuple)):
            return type(a)(concrete(b) for b in a)
        return a

    def f(*args, **kwargs):
        return getattr(np, name)(*map(concrete, args), **{k: concrete(v) for k, v in kwargs.items()})
    f.__name__ = name
    return f


def normalize_axis(a, ndim: int, fname: str) -> int:
    """Axis ``a`` of an array of ``ndim`` dimensions, made non-negative; out of range: ShapeError
    (numpy's AxisError; wrapping it around would silently pick another axis)."""
    if not -ndim <= a < ndim:
        raise ShapeError(f"{fname}: axis {a} is out of bounds for an array of dimension {ndim} "
                         f"{user_frame_description()}")
    return int(a) % ndim


def distinct_axes(axes, ndim: int, fname: str) -> list:
    """Distinct axes (an int or a sequence), each checked by ``normalize_axis``."""
    out = [normalize_axis(a, ndim, fname) for a in ((axes,) if isinstance(axes, (int, np.integer)) else axes)]
    if len(set(out)) != len(out):
        raise ShapeError(f"{fname}: repeated axis in {axes} {user_frame_description()}")
    return out


def reduction_axes(axis, ndim, fname="reduction"):
    if axis is None:
        return tuple(range(ndim))
    return tuple(sorted(distinct_axes(axis, ndim, fname)))


def accumulate_as(a, dtype):
    """``a`` cast for sum/prod/cumsum: to ``dtype`` if given, else to numpy's default accumulator
    (bools and narrower signed integers -> int64, narrower unsigned -> uint64; others stay)."""
    x = to_array(a)
    if dtype is not None:
        return cast(x, np.dtype(dtype))
    acc = _ACCUMULATOR.get(x.dtype.kind)
    return x if acc is None or x.dtype.itemsize >= acc.itemsize else cast(x, acc)


def normalize_index(idx, n: int):
    """Integer index array with negative entries wrapped; out-of-range concrete indices raise."""
    arr = to_array(idx)
    if isinstance(arr, Tracer):
        if arr.dtype.kind not in "iu":
            raise IndexError(f"arrays used as indices must be of integer type, got {arr.dtype.name} "
                             f"{user_frame_description()}")
        arr = cast(arr, np.dtype(np.int64))
        return P.select(P.lt_p.bind(arr, np.array(0, np.int64)), P.add(arr, np.array(n, np.int64)), arr)
    if arr.dtype.kind not in "iu":
        raise IndexError(f"arrays used as indices must be of integer (or boolean) type, got {arr.dtype.name} "
                         f"{user_frame_description()}")
    if arr.size and (arr.max() >= n or arr.min() < -n):
        raise IndexError(f"index {int(arr.max() if arr.max() >= n else arr.min())} is out of bounds for axis "
                         f"with size {n} {user_frame_description()}")
    return np.where(arr < 0, arr + n, arr).astype(np.int64)


def is_array_index(i) -> bool:
    """An advanced (integer-array) index entry, once sequences are arrays: 0-d arrays included."""
    return isinstance(i, (np.ndarray, Tracer))


def _index_entry(i):
    """A sequence inside an index as an array (an empty one an integer array, as in numpy)."""
    if not isinstance(i, (list, tuple)):
        return i
    arr = to_array(i)
    return arr.astype(np.int64) if isinstance(arr, np.ndarray) and arr.size == 0 else arr


def expand_bool_indices(idx: tuple) -> list:
    """Boolean scalars become ``None`` (``x[True] == x[None]``), concrete masks their ``nonzero()``
    integer arrays (one per masked axis); a traced mask (a value-dependent shape) raises."""
    out = []
    for i in map(_index_entry, idx):
        if isinstance(i, (bool, np.bool_)) or (isinstance(i, np.ndarray) and i.ndim == 0 and i.dtype == bool):
            if not bool(i):
                raise IndexError("a scalar False index (an empty result) is not supported")
            out.append(None)
        elif is_array_index(i) and i.dtype == np.dtype(bool):
            if isinstance(i, Tracer):
                raise IndexError("boolean mask indexing with a traced mask has a value-dependent shape; "
                                 f"use fnp.where(mask, x, 0) instead {user_frame_description()}")
            out.extend(np.nonzero(i))
        else:
            out.append(i)
    return out


def expand_ellipsis(idx: list, ndim: int) -> list:
    """Replace the Ellipsis (or pad at the end) with full slices, so that ``ndim`` axes are indexed."""
    ellipses = [k for k, i in enumerate(idx) if i is Ellipsis]  # by identity: == on index arrays is elementwise
    if len(ellipses) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    consumed = builtins.sum(1 for i in idx if i is not None and i is not Ellipsis)
    if consumed > ndim:
        raise IndexError(f"too many indices for array: array is {ndim}-dimensional, but {consumed} "
                         f"were indexed {user_frame_description()}")
    fill = [slice(None)] * (ndim - consumed)
    if not ellipses:
        return idx + fill
    k = ellipses[0]
    return idx[:k] + fill + idx[k + 1:]
