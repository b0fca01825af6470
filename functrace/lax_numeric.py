"""``ft.lax``'s numeric operations (re-exported by ``functrace/lax.py``): ``dynamic_slice`` and
``dynamic_update_slice`` (and their ``_in_dim`` forms), ``select``, ``clamp``, ``rsqrt``,
``erf``, ``erf_inv``, ``sort``, ``top_k``, ``associative_scan``, ``cumsum`` / ``cumprod`` / ``cummax`` /
``cummin`` and ``reduce_window`` (max / sum / average pooling), ``dot`` / ``dot_general``, the
``Precision`` enum, and the shape helpers JAX programs build layers with (``padtype_to_pads``,
``reduce_window_shape_tuple``).

``precision=`` and ``preferred_element_type=`` mean here what they mean in JAX, with one
difference that ``Precision`` explains: functrace computes every product in its operands' dtype
at full precision on every device, so a precision is checked and changes nothing.

Start indices of the dynamic slices follow JAX: a negative start counts from the end (once), then
it is clamped so that the slice lies inside the operand (``clip(start, 0, n - size)``), eagerly
and under ``jit`` alike.
"""
from __future__ import annotations

import builtins
import operator
from typing import Any, Sequence

import numpy as np

from . import arrays
from . import numpy as fnp
from . import primitives as P
from .core import Tracer
from .core.errors import user_frame_description
from .numpy._indexing import IndexUpdateRef
from .precision import (  # noqa: F401  (Precision, PrecisionLike: re-exported as ft.lax's)
    Precision,
    PrecisionLike,
    canonicalize_precision,
    dot_operands,
    dot_with_options,
    preferred_dtypes,
)
from .primitives import associative_scan, cumulative
from .primitives.sorting import argsort_last
from .primitives.special import (  # noqa: F401  (ERF_INV_*, erf_p, erf_inv_p: read through here and ft.nn)
    ERF_INV_CENTRAL,
    ERF_INV_STEPS,
    ERF_INV_TAIL,
    ERF_INV_TAIL_FROM,
    erf_inv_p,
    erf_p,
)

__all__ = ["Precision", "PrecisionLike", "associative_scan", "clamp", "cummax", "cummin", "cumprod", "cumsum", "dot", "dot_general",
           "dynamic_index_in_dim", "dynamic_slice", "dynamic_slice_in_dim", "dynamic_update_index_in_dim",
           "dynamic_update_slice", "dynamic_update_slice_in_dim", "erf", "erf_inv", "padtype_to_pads",
           "reduce_window", "reduce_window_shape_tuple", "rsqrt", "select", "sort", "sort_key_val", "top_k"]


def _clamped_start(start, n: int, size: int):
    """A start index, negative ones counted from the end, clamped to ``[0, n - size]`` (concrete:
    a Python int; traced: an int64 tracer)."""
    if not isinstance(start, Tracer):
        start = operator.index(start)
        return int(np.clip(start + n if start < 0 else start, 0, n - size))
    if start.shape != () or start.dtype.kind not in "iu":
        raise TypeError(f"dynamic slice start indices must be integer scalars, got {start.aval.str_short()} "
                        f"{user_frame_description()}")
    start = fnp.asarray(start, np.int64)
    return fnp.clip(fnp.where(start < 0, start + n, start), 0, n - size)


def _check_sizes(name, shape, starts, sizes):
    if len(starts) != len(shape) or len(sizes) != len(shape):
        raise ValueError(f"{name}: need one start index and size per axis of the operand {shape}, got "
                         f"{len(starts)} and {len(sizes)} {user_frame_description()}")
    for n, s in zip(shape, sizes):
        if not 0 <= s <= n:
            raise ValueError(f"{name}: slice sizes {tuple(sizes)} do not fit the operand {shape} "
                             f"{user_frame_description()}")


def dynamic_slice(operand, start_indices: Sequence, slice_sizes: Sequence):
    """``operand[s0:s0+k0, s1:s1+k1, ...]`` with run-time starts, clamped into the operand (JAX)."""
    x = arrays.to_array(operand)
    starts = list(start_indices) if not isinstance(start_indices, (np.ndarray, Tracer)) else \
        [start_indices[i] for i in range(len(start_indices))]
    sizes = [operator.index(s) for s in slice_sizes]
    _check_sizes("dynamic_slice", x.shape, starts, sizes)
    for axis, (start, n, size) in enumerate(zip(starts, x.shape, sizes)):
        s = _clamped_start(start, n, size)
        if isinstance(s, Tracer):
            x = P.take(x, fnp.add(s, np.arange(size, dtype=np.int64)), axis)
        else:
            x = P.slice_op(x, [s if d == axis else 0 for d in range(x.ndim)],
                           [s + size if d == axis else m for d, m in enumerate(x.shape)])
    return x


def dynamic_update_slice(operand, update, start_indices: Sequence):
    """``operand`` with the block at ``start_indices`` replaced by ``update``; starts clamped (JAX)."""
    x = arrays.to_array(operand)
    u = fnp.asarray(update, x.dtype)
    starts = list(start_indices) if not isinstance(start_indices, (np.ndarray, Tracer)) else \
        [start_indices[i] for i in range(len(start_indices))]
    _check_sizes("dynamic_update_slice", x.shape, starts, u.shape)
    index = []
    for axis, (start, n, size) in enumerate(zip(starts, x.shape, u.shape)):
        s = _clamped_start(start, n, size)
        if isinstance(s, Tracer):  # an index array along this axis, shaped to broadcast (an outer product)
            index.append(fnp.reshape(fnp.add(s, np.arange(size, dtype=np.int64)),
                                     tuple(size if d == axis else 1 for d in range(x.ndim))))
        else:
            index.append(slice(s, s + size))
    if any(isinstance(i, Tracer) for i in index):
        # slices alongside index arrays: every axis an index array, so the indexed shape is u's
        index = [i if isinstance(i, Tracer) else np.arange(i.start, i.stop).reshape(
            tuple(i.stop - i.start if d == axis else 1 for d in range(x.ndim))) for axis, i in enumerate(index)]
    return IndexUpdateRef(x, tuple(index)).set(u)


def dynamic_slice_in_dim(operand, start_index, slice_size: int, axis: int = 0):
    x = arrays.to_array(operand)
    axis = arrays.normalize_axis(axis, x.ndim, "dynamic_slice_in_dim")
    starts = [start_index if d == axis else 0 for d in range(x.ndim)]
    return dynamic_slice(x, starts, [slice_size if d == axis else n for d, n in enumerate(x.shape)])


def dynamic_index_in_dim(operand, index, axis: int = 0, keepdims: bool = True):
    out = dynamic_slice_in_dim(operand, index, 1, axis)
    return out if keepdims else fnp.squeeze(out, axis)


def dynamic_update_slice_in_dim(operand, update, start_index, axis: int):
    x = arrays.to_array(operand)
    axis = arrays.normalize_axis(axis, x.ndim, "dynamic_update_slice_in_dim")
    return dynamic_update_slice(x, update, [start_index if d == axis else 0 for d in range(x.ndim)])


def dynamic_update_index_in_dim(operand, update, index, axis: int):
    x = arrays.to_array(operand)
    axis = arrays.normalize_axis(axis, x.ndim, "dynamic_update_index_in_dim")
    u = arrays.to_array(update)
    if u.ndim == x.ndim - 1:
        u = fnp.expand_dims(u, axis)
    return dynamic_update_slice_in_dim(x, u, index, axis)


def select(pred, on_true, on_false):
    """Elementwise ``on_true if pred else on_false`` (JAX's ``lax.select``: equal shapes and dtypes)."""
    pred, t, f = (arrays.to_array(v) for v in (pred, on_true, on_false))
    if t.dtype != f.dtype or not (fnp.shape(pred) in ((), t.shape) and t.shape == f.shape):
        raise TypeError(f"lax.select: needs a boolean predicate of the branches' shape (or a scalar) and "
                        f"branches of one shape and dtype; got {fnp.shape(pred)}, {t.dtype}{t.shape}, "
                        f"{f.dtype}{f.shape} {user_frame_description()}")
    return P.select(fnp.asarray(pred, bool), t, f)


def clamp(min, x, max):  # noqa: A002  (JAX's argument names)
    """``minimum(maximum(x, min), max)`` (JAX's argument order)."""
    return fnp.minimum(fnp.maximum(x, min), max)


def rsqrt(x):
    """``1 / sqrt(x)``."""
    return P.rsqrt_p.bind(arrays.to_float(x))


# --------------------------------------------------------------------------- erf and erf_inv (also ft.nn's)
# (the primitives: primitives/special.py)


def erf(x):
    return erf_p.bind(arrays.to_float(x))


def erf_inv(x):
    """The inverse of erf on (-1, 1) (+-inf at +-1, NaN outside), as jax.lax.erf_inv."""
    return erf_inv_p.bind(arrays.to_float(x))


def _cumulative_op(prim, name: str):
    def f(operand, axis: int = 0, reverse: bool = False):
        x = arrays.to_array(operand)
        axis = arrays.normalize_axis(axis, x.ndim, f"lax.{name}")
        if prim is None:
            return P.cumsum(x, axis, reverse)
        return cumulative(prim, x, axis, reverse)
    f.__name__ = name
    f.__doc__ = f"JAX's ``lax.{name}``: the inclusive {name[3:]} along ``axis`` (``reverse``: from the end)."
    return f


cumsum = _cumulative_op(None, "cumsum")
cumprod = _cumulative_op(P.mul_p, "cumprod")
cummax = _cumulative_op(P.max_p, "cummax")
cummin = _cumulative_op(P.min_p, "cummin")


def sort(operand, dimension: int = -1, is_stable: bool = True, num_keys: int = 1):
    """JAX's ``lax.sort``: one array, or a sequence sorted together by its first ``num_keys``."""
    if isinstance(operand, (list, tuple)):
        ops = [arrays.to_array(o) for o in operand]
        keys = ops[:num_keys]
        perm = fnp.lexsort(keys[::-1], axis=dimension)
        return type(operand)(fnp.take_along_axis(o, perm, dimension) for o in ops)
    return fnp.sort(operand, axis=dimension)


def sort_key_val(keys, values, dimension: int = -1, is_stable: bool = True):
    return sort((keys, values), dimension, is_stable, 1)


def top_k(operand, k: int):
    """(the ``k`` largest entries along the last axis, in descending order, and their indices);
    ties go to the lower index, as JAX's."""
    x = arrays.to_array(operand)
    k = operator.index(k)
    if not 0 <= k <= x.shape[-1]:
        raise ValueError(f"top_k: k={k} must be in [0, {x.shape[-1]}] {user_frame_description()}")
    perm = argsort_last(x, descending=True)
    idx = P.slice_op(perm, (0,) * x.ndim, x.shape[:-1] + (k,))
    return fnp.take_along_axis(x, idx, -1), idx


_WINDOW_REDUCERS = {"max": P.reduce_max_p, "min": P.reduce_min_p, "add": P.reduce_sum_p}


def reduce_window(operand, init_value, computation, window_dimensions: Sequence, window_strides: Sequence,
                  padding="VALID"):
    """Windowed reductions (max / min / sum pooling) as JAX's ``lax.reduce_window``, for
    ``computation`` in ``lax.max``, ``lax.min``, ``lax.add`` (or the names "max", "min", "add").

    Written as ``prod(window)`` strided slices combined elementwise: differentiable, batched and
    fused into OpenCL kernels; meant for small windows (pooling), not large ones."""
    name = computation if isinstance(computation, str) else {
        fnp.maximum: "max", fnp.minimum: "min", fnp.add: "add"}.get(computation)
    if name not in _WINDOW_REDUCERS:
        raise NotImplementedError("reduce_window: computation must be lax.max, lax.min or lax.add")
    x = arrays.to_array(operand)
    dims, strides = tuple(window_dimensions), tuple(window_strides)
    if len(dims) != x.ndim or len(strides) != x.ndim:
        raise ValueError(f"reduce_window: one window size and stride per axis of {x.shape}")
    if isinstance(padding, str):
        pads = padtype_to_pads(x.shape, dims, strides, padding)
    else:
        pads = [tuple(p) for p in padding]
    init = fnp.asarray(init_value, x.dtype)
    if any(lo or hi for lo, hi in pads):
        x = P.pad(x, init, [(lo, hi, 0) for lo, hi in pads])
    out_shape = [(n - w) // s + 1 for n, w, s in zip(x.shape, dims, strides)]
    combine = {"max": fnp.maximum, "min": fnp.minimum, "add": fnp.add}[name]
    acc = None
    for offset in np.ndindex(*dims):
        piece = P.slice_op(x, offset, [o + (m - 1) * s + 1 for o, m, s in zip(offset, out_shape, strides)], strides)
        acc = piece if acc is None else combine(acc, piece)
    return combine(acc, init) if acc is not None else fnp.broadcast_to(init, tuple(out_shape))



# --------------------------------------------------------------------------- shape helpers


def padtype_to_pads(in_shape: Sequence[int], window_shape: Sequence[int], window_strides: Sequence[int],
                    padding: str) -> list[tuple[int, int]]:
    """(low, high) pads per axis for 'SAME', 'SAME_LOWER' or 'VALID' padding, as ``jax.lax.padtype_to_pads``."""
    mode = padding.upper() if isinstance(padding, str) else padding
    if mode == "VALID":
        return [(0, 0)] * len(in_shape)
    if mode not in ("SAME", "SAME_LOWER"):
        raise RuntimeError(f"padtype_to_pads: unrecognized padding type {padding!r}: expected 'VALID', 'SAME' or "
                           f"'SAME_LOWER'")
    pads = []
    for size, window, stride in zip(in_shape, window_shape, window_strides):
        size, window, stride = int(size), int(window), int(stride)
        total = builtins.max((-(-size // stride) - 1) * stride + window - size, 0)  # SAME: ceil(size / stride) outputs
        low = total // 2 if mode == "SAME" else total - total // 2  # the odd one at the end / at the start
        pads.append((low, total - low))
    return pads


def _dilated_sizes(sizes: Sequence[int], dilation: Sequence[int] | None) -> tuple:
    if dilation is None:
        return tuple(int(s) for s in sizes)
    return tuple(0 if s == 0 else 1 + int(d) * (int(s) - 1) for s, d in zip(sizes, dilation))


def reduce_window_shape_tuple(operand_shape: Sequence[int], window_dimensions: Sequence[int],
                              window_strides: Sequence[int], padding: Sequence[tuple[int, int]],
                              base_dilation: Sequence[int] | None = None,
                              window_dilation: Sequence[int] | None = None) -> tuple[int, ...]:
    """The shape ``reduce_window`` returns, given explicit (low, high) pads, as JAX's."""
    sizes = _dilated_sizes(operand_shape, base_dilation)
    windows = _dilated_sizes(window_dimensions, window_dilation)
    padded = [n + int(lo) + int(hi) for n, (lo, hi) in zip(sizes, padding)]
    return tuple(builtins.max(0, (n - w) // int(s) + 1) for n, w, s in zip(padded, windows, window_strides))


# --------------------------------------------------------------------------- precision, dot, dot_general


def _dims(value, ndim: int, what: str) -> tuple:
    dims = (value,) if isinstance(value, (int, np.integer)) else tuple(value)
    if not all(isinstance(d, (int, np.integer)) and 0 <= d < ndim for d in dims) or len(set(dims)) != len(dims):
        raise TypeError(f"dot_general: {what} {value!r} must be distinct axes in [0, {ndim}) "
                        f"{user_frame_description()}")
    return tuple(int(d) for d in dims)


def dot_general(lhs: Any, rhs: Any, dimension_numbers: Sequence, precision: PrecisionLike = None,
                preferred_element_type: Any = None) -> Any:
    """``lax.dot_general``: contract ``((lhs_contract, rhs_contract), (lhs_batch, rhs_batch))``;
    the result's axes are the batch axes, then lhs's free axes, then rhs's."""
    (x, y), out_dtype = dot_operands("dot_general", (lhs, rhs), precision, preferred_element_type)
    try:
        (lc, rc), (lb, rb) = dimension_numbers
    except (TypeError, ValueError):
        raise TypeError(f"dot_general: dimension_numbers must be ((lhs_contracting, rhs_contracting), "
                        f"(lhs_batch, rhs_batch)), got {dimension_numbers!r} {user_frame_description()}") from None
    lc, lb = _dims(lc, x.ndim, "lhs contracting dims"), _dims(lb, x.ndim, "lhs batch dims")
    rc, rb = _dims(rc, y.ndim, "rhs contracting dims"), _dims(rb, y.ndim, "rhs batch dims")
    if set(lc) & set(lb) or set(rc) & set(rb):
        raise TypeError(f"dot_general: an axis is both contracted and batched in {dimension_numbers!r} "
                        f"{user_frame_description()}")
    if [x.shape[i] for i in lc] != [y.shape[i] for i in rc] or [x.shape[i] for i in lb] != [y.shape[i] for i in rb]:
        raise TypeError(f"dot_general: contracting or batch axes of shapes {x.shape} and {y.shape} differ in size "
                        f"(dimension_numbers={dimension_numbers!r}) {user_frame_description()}")
    out = P.dot_general(x, y, ((lc, rc), (lb, rb)))
    return out if out_dtype is None else fnp.asarray(out, out_dtype)


def dot(lhs: Any, rhs: Any, precision: PrecisionLike = None, preferred_element_type: Any = None) -> Any:
    """``lax.dot``: a vector or matrix product of 1-D or 2-D operands (lhs's last axis with rhs's first)."""
    x, y = arrays.to_array(lhs), arrays.to_array(rhs)
    if not (1 <= x.ndim <= 2 and 1 <= y.ndim <= 2 and x.shape[-1] == y.shape[0]):
        raise TypeError(f"dot: incompatible shapes {x.shape} and {y.shape} (1-D or 2-D operands; lhs's last axis "
                        f"contracts with rhs's first; fnp.dot / fnp.matmul take any rank) {user_frame_description()}")
    return dot_general(x, y, (((x.ndim - 1,), (0,)), ((), ())), precision, preferred_element_type)
