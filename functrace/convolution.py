"""``ft.lax.conv_general_dilated`` (and ``conv`` / ``conv_with_general_padding`` / ``conv_transpose``):
N-D convolution with strides, padding, lhs/rhs dilation, feature and batch groups, as JAX's; and
JAX's shape helpers for layers (``ConvDimensionNumbers``, ``conv_dimension_numbers``,
``conv_general_shape_tuple``, ``conv_transpose_shape_tuple``, ...), as stax writes them.

Why a primitive (and not a composition of pads, slices and ``dot_general``): an im2col
composition differentiates into one pad + one add per kernel tap (81 of each for a 9x9 kernel),
while the derivatives of a convolution are themselves convolutions.  So ``conv_general_dilated``
is one primitive whose rules bind the same primitive, as JAX's: the lhs cotangent is a
convolution of the output cotangent with the flipped, in/out-swapped kernel (``lhs_dilation =
window_strides``), the rhs cotangent a convolution of lhs with the output cotangent (groups
swapped: feature groups become batch groups and back).  Derivatives therefore nest to any order,
and ``vmap`` folds its axis into the batch or into the groups, as JAX does.

The primitive works in one canonical layout (lhs ``N C spatial...``, rhs ``O I spatial...``,
out ``N C spatial...``) with resolved ``(low, high)`` padding pairs; the user's function
transposes other ``dimension_numbers`` into it (plain transposes, which jit fuses or copies).
The numpy implementation is a strided window view, copied into im2col columns, and one BLAS
product per group; OpenCL (``backends/opencl/conv.py``) runs a direct-convolution kernel for
few-channel convolutions and an im2col kernel + the matmul lowering for CNN-like ones.
"""
from __future__ import annotations

import math
from typing import NamedTuple, Sequence, Union

import numpy as np

from . import numpy as fnp
from . import primitives as P
from .core import ShapedArray, get_aval
from .errors import DtypeError, ShapeError, user_frame_description
from .lax_numeric import padtype_to_pads
from .precision import canonicalize_precision, preferred_dtypes
from .primitives import new_primitive, shape_of

conv_general_dilated_p = new_primitive("conv_general_dilated")


def _dilated(size: int, dilation: int) -> int:
    """Length of ``size`` elements with ``dilation - 1`` zeros between neighbours."""
    return 0 if size == 0 else 1 + dilation * (size - 1)


def _out_spatial(in_sizes, k_sizes, strides, padding, lhs_dilation, rhs_dilation) -> tuple:
    return tuple(max(0, (_dilated(i, ld) + lo + hi - _dilated(k, rd)) // s + 1) if _dilated(k, rd) > 0 else 0
                 for i, k, s, (lo, hi), ld, rd in zip(in_sizes, k_sizes, strides, padding, lhs_dilation, rhs_dilation))


def _conv_error(msg: str) -> ShapeError:
    return ShapeError(f"conv_general_dilated: {msg} {user_frame_description()}")


def _conv_abstract(lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation, feature_group_count,
                   batch_group_count):
    if lhs.dtype != rhs.dtype:
        raise DtypeError(f"conv_general_dilated: operand dtypes differ ({lhs.dtype.name} vs {rhs.dtype.name}) "
                         f"{user_frame_description()}")
    ls, rs = lhs.shape, rhs.shape
    if len(ls) != len(rs) or len(ls) < 2:
        raise _conv_error(f"lhs {ls} and rhs {rs} must have the same rank, at least 2 (batch and feature dims)")
    nsp = len(ls) - 2
    for name, v in (("window_strides", window_strides), ("padding", padding), ("lhs_dilation", lhs_dilation),
                    ("rhs_dilation", rhs_dilation)):
        if len(v) != nsp:
            raise _conv_error(f"{name} {v} must have one entry per spatial dimension ({nsp})")
    fg, bg = feature_group_count, batch_group_count
    if fg > 1 and bg > 1:
        raise _conv_error(f"at most one of feature_group_count ({fg}) and batch_group_count ({bg}) may exceed 1")
    if ls[1] != rs[1] * fg:
        raise _conv_error(f"lhs feature size {ls[1]} must equal rhs input-feature size {rs[1]} times "
                          f"feature_group_count {fg} (lhs {ls}, rhs {rs} in N C spatial / O I spatial order)")
    if rs[0] % (fg * bg) != 0:
        raise _conv_error(f"rhs output-feature size {rs[0]} must be a multiple of the group count {fg * bg}")
    if ls[0] % bg != 0:
        raise _conv_error(f"lhs batch size {ls[0]} must be a multiple of batch_group_count {bg}")
    out = _out_spatial(ls[2:], rs[2:], window_strides, padding, lhs_dilation, rhs_dilation)
    return ShapedArray((ls[0] // bg, rs[0]) + out, lhs.dtype, False)


def _conv_impl(lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation, feature_group_count,
               batch_group_count):
    """A strided view of every window (after dilating and padding lhs), copied into im2col columns
    and multiplied by the kernel: one matmul per group."""
    lhs, rhs = np.asarray(lhs), np.asarray(rhs)
    nsp = lhs.ndim - 2
    if any(d > 1 for d in lhs_dilation):
        dilated = np.zeros(lhs.shape[:2] + tuple(_dilated(s, d) for s, d in zip(lhs.shape[2:], lhs_dilation)),
                           lhs.dtype)
        dilated[(slice(None), slice(None)) + tuple(slice(None, None, d) for d in lhs_dilation)] = lhs
        lhs = dilated
    lhs = np.pad(lhs, [(0, 0), (0, 0)] + [(max(lo, 0), max(hi, 0)) for lo, hi in padding])
    lhs = lhs[(slice(None), slice(None)) + tuple(slice(max(-lo, 0), n - max(-hi, 0))
                                                 for (lo, hi), n in zip(padding, lhs.shape[2:]))]
    out_sp = _out_spatial(lhs.shape[2:], rhs.shape[2:], window_strides, [(0, 0)] * nsp, [1] * nsp, rhs_dilation)
    lhs = np.ascontiguousarray(lhs)
    st = lhs.strides
    windows = np.lib.stride_tricks.as_strided(
        lhs, lhs.shape[:2] + out_sp + rhs.shape[2:],
        st[:2] + tuple(s * w for s, w in zip(st[2:], window_strides)) + tuple(s * d for s, d in zip(st[2:], rhs_dilation)),
        writeable=False)
    groups = feature_group_count * batch_group_count
    n_out = lhs.shape[0] // batch_group_count
    # im2col per group as (C/G * K, N * P) (long rows: the copy reads whole output rows), then one product
    to_columns = (1,) + tuple(range(nsp + 2, 2 * nsp + 2)) + (0,) + tuple(range(2, nsp + 2))
    parts = []
    for g in range(groups):
        if batch_group_count > 1:
            part = windows[g * n_out:(g + 1) * n_out]
        else:
            part = windows[:, g * rhs.shape[1]:(g + 1) * rhs.shape[1]]
        columns = part.transpose(to_columns).reshape(-1, n_out * math.prod(out_sp))
        kernel = rhs[g * (rhs.shape[0] // groups):(g + 1) * (rhs.shape[0] // groups)]
        parts.append(kernel.reshape(kernel.shape[0], -1) @ columns)
    out = (np.concatenate(parts) if len(parts) > 1 else parts[0]).reshape((rhs.shape[0], n_out) + out_sp)
    return np.ascontiguousarray(out.swapaxes(0, 1)).astype(lhs.dtype, copy=False)


def conv_canonical(lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation, feature_group_count=1,
                   batch_group_count=1):
    """Bind the canonical-layout primitive (lhs ``N C ...``, rhs ``O I ...``, padding pairs),
    checking shapes first (eager binds run ``impl`` without the shape rule)."""
    params = dict(window_strides=tuple(int(s) for s in window_strides),
                  padding=tuple((int(lo), int(hi)) for lo, hi in padding),
                  lhs_dilation=tuple(int(d) for d in lhs_dilation), rhs_dilation=tuple(int(d) for d in rhs_dilation),
                  feature_group_count=int(feature_group_count), batch_group_count=int(batch_group_count))
    _conv_abstract(get_aval(lhs), get_aval(rhs), **params)
    return conv_general_dilated_p.bind(lhs, rhs, **params)


def _split_major(x, axis: int, count: int):
    """Axis ``axis`` of size ``count * m`` as two axes (count, m)."""
    s = shape_of(x)
    return P.reshape(x, s[:axis] + (count, s[axis] // count) + s[axis + 1:])


def _merge(x, axis: int):
    """Axes ``axis`` and ``axis + 1`` as one (the first major)."""
    s = shape_of(x)
    return P.reshape(x, s[:axis] + (s[axis] * s[axis + 1],) + s[axis + 2:])


def _swap01(x):
    return P.transpose(x, (1, 0) + tuple(range(2, len(shape_of(x)))))


def _conv_transpose_lhs(g, ans, lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation,
                        feature_group_count, batch_group_count):
    """d lhs: the cotangent convolved with the flipped kernel, in/out features swapped per group,
    strides and lhs dilation exchanged."""
    ls, rs, gs = shape_of(lhs), shape_of(rhs), shape_of(g)
    nsp = len(ls) - 2
    groups = feature_group_count * batch_group_count
    kernel = _split_major(rhs, 0, groups)                                     # (G, O/G, I, K...)
    kernel = P.transpose(kernel, (0, 2, 1) + tuple(range(3, nsp + 3)))       # (G, I, O/G, K...)
    kernel = P.rev(_merge(kernel, 0), tuple(range(2, nsp + 2)))              # (G*I, O/G, K...) flipped
    pads = []
    for i in range(nsp):
        k_dil = _dilated(rs[2 + i], rhs_dilation[i])
        lo = k_dil - padding[i][0] - 1
        hi = _dilated(ls[2 + i], lhs_dilation[i]) + k_dil - 1 - _dilated(gs[2 + i], window_strides[i]) - lo
        pads.append((lo, hi))
    out = conv_canonical(g, kernel, window_strides=lhs_dilation, padding=pads, lhs_dilation=window_strides,
               rhs_dilation=rhs_dilation, feature_group_count=groups)
    if batch_group_count > 1:  # (N/B, B*C, ...) -> (B*N/B, C, ...)
        out = _merge(_swap01(_split_major(out, 1, batch_group_count)), 0)
    return out


def _conv_transpose_rhs(g, ans, lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation,
                        feature_group_count, batch_group_count):
    """d rhs: lhs (batch and features swapped) convolved with the cotangent (likewise), strides and
    rhs dilation exchanged, feature groups becoming batch groups and back."""
    ls, rs, gs = shape_of(lhs), shape_of(rhs), shape_of(g)
    nsp = len(ls) - 2
    pads = []
    for i in range(nsp):
        lo = padding[i][0]
        hi = (_dilated(gs[2 + i], window_strides[i]) - _dilated(ls[2 + i], lhs_dilation[i])
              + _dilated(rs[2 + i], rhs_dilation[i]) - lo - 1)
        pads.append((lo, hi))
    out = conv_canonical(_swap01(lhs), _swap01(g), window_strides=rhs_dilation, padding=pads, lhs_dilation=lhs_dilation,
               rhs_dilation=window_strides, feature_group_count=batch_group_count,
               batch_group_count=feature_group_count)
    return _swap01(out)


def _conv_batch(vals, dims, **params):
    """vmap: a batched lhs joins the batch (inside each batch group); a batched rhs joins the
    output features (inside each group); both batched: the vmapped axis becomes more groups."""
    lhs, rhs = vals
    dl, dr = dims
    fg, bg = params["feature_group_count"], params["batch_group_count"]
    groups = fg * bg
    if dl is not None and dr is not None:
        lhs, rhs = P.moveaxis(lhs, dl, 0), P.moveaxis(rhs, dr, 0)
        vb = shape_of(lhs)[0]
        rhs = _merge(rhs, 0)                                       # (V*O, I, ...): V-major groups
        if bg > 1:                                                 # V batch groups more
            lhs = _merge(lhs, 0)
            out = conv_canonical(lhs, rhs, **{**params, "batch_group_count": vb * bg})
        else:                                                      # V feature groups more
            lhs = _merge(_swap01(lhs), 1)                          # (N, V*C, ...)
            out = conv_canonical(lhs, rhs, **{**params, "feature_group_count": vb * fg})
        return _swap01(_split_major(out, 1, vb)), 0                # (N, V*O, ...) -> (V, N, O, ...)
    if dl is not None:
        lhs = P.moveaxis(lhs, dl, 0)
        vb = shape_of(lhs)[0]
        lhs = _swap01(_split_major(lhs, 1, bg))                    # (B, V, N/B, ...)
        lhs = _merge(_merge(lhs, 1), 0)                            # V joins each batch group
        out = conv_canonical(lhs, rhs, **params)                             # (V*N/B, O, ...)
        return _split_major(out, 0, vb), 0
    rhs = P.moveaxis(rhs, dr, 0)
    vb = shape_of(rhs)[0]
    rhs = _swap01(_split_major(rhs, 1, groups))                    # (G, V, O/G, I, ...)
    rhs = _merge(_merge(rhs, 1), 0)                                # (G*V*O/G, I, ...)
    out = conv_canonical(lhs, rhs, **params)                                 # (N, G*V*O/G, ...)
    out = _split_major(_split_major(out, 1, groups), 2, vb)       # (N, G, V, O/G, ...)
    out = P.transpose(out, (2, 0, 1) + tuple(range(3, len(shape_of(out)))))
    return _merge(out, 2), 0


conv_general_dilated_p.impl = _conv_impl
conv_general_dilated_p.abstract_eval = _conv_abstract
conv_general_dilated_p.jvp = [lambda t, ans, lhs, rhs, **params: conv_canonical(t, rhs, **params),
                              lambda t, ans, lhs, rhs, **params: conv_canonical(lhs, t, **params)]
conv_general_dilated_p.vjp = [_conv_transpose_lhs, _conv_transpose_rhs]
conv_general_dilated_p.batch = _conv_batch


# --------------------------------------------------------------------------- the user's functions


class ConvDimensionNumbers(NamedTuple):
    """Where a convolution's axes are, as JAX's: ``lhs_spec`` is (batch, feature, spatial...) axes of
    lhs, ``rhs_spec`` (out feature, in feature, spatial...) of rhs, ``out_spec`` as lhs_spec for the output."""

    lhs_spec: Sequence[int]
    rhs_spec: Sequence[int]
    out_spec: Sequence[int]


# what ``dimension_numbers`` takes (JAX's name)
ConvGeneralDilatedDimensionNumbers = Union[tuple[str, str, str], ConvDimensionNumbers, None]


def conv_general_permutations(dimension_numbers: Sequence[str], fname: str = "conv_general_permutations"
                              ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(lhs, rhs, out) permutations into the canonical layout from spec strings such as
    ``('NHWC', 'HWIO', 'NHWC')``, spatial axes in the order the rhs spec lists them (JAX's)."""
    if not (isinstance(dimension_numbers, (tuple, list)) and len(dimension_numbers) == 3):
        raise TypeError(f"{fname}: dimension_numbers must be None, a ConvDimensionNumbers or a (lhs_spec, rhs_spec, "
                        f"out_spec) triple of strings, got {dimension_numbers!r} {user_frame_description()}")
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    pairs = (("N", "C"), ("O", "I"), ("N", "C"))
    for spec, (a, b) in zip(dimension_numbers, pairs):
        if not isinstance(spec, str) or spec.count(a) != 1 or spec.count(b) != 1 or len(set(spec)) != len(spec):
            raise TypeError(f"{fname}: dimension_numbers spec {spec!r} must be a string of distinct letters with one "
                            f"{a!r} and one {b!r} (e.g. ('NHWC', 'HWIO', 'NHWC')) {user_frame_description()}")
    spatial = [set(s) - set(p) for s, p in zip(dimension_numbers, pairs)]
    if not spatial[0] == spatial[1] == spatial[2]:
        raise TypeError(f"{fname}: dimension_numbers {tuple(dimension_numbers)!r} must name the same spatial "
                        f"letters in each spec {user_frame_description()}")
    order = [c for c in rhs_spec if c not in "OI"]
    return tuple((spec.index(a), spec.index(b)) + tuple(spec.index(c) for c in order)
                 for spec, (a, b) in zip(dimension_numbers, pairs))


def conv_dimension_numbers(lhs_shape: Sequence[int], rhs_shape: Sequence[int], dimension_numbers,
                           fname: str = "conv_dimension_numbers") -> ConvDimensionNumbers:
    """``dimension_numbers`` (None, spec strings or a ConvDimensionNumbers) as a ConvDimensionNumbers."""
    if isinstance(dimension_numbers, ConvDimensionNumbers):
        return dimension_numbers
    ndim = len(lhs_shape)
    if len(rhs_shape) != ndim:
        raise TypeError(f"{fname}: lhs and rhs must have the same rank, got shapes {tuple(lhs_shape)} and "
                        f"{tuple(rhs_shape)} {user_frame_description()}")
    if dimension_numbers is None:
        canonical = tuple(range(ndim))
        return ConvDimensionNumbers(canonical, canonical, canonical)
    if isinstance(dimension_numbers, (tuple, list)) and len(dimension_numbers) == 3 \
            and all(isinstance(s, (tuple, list)) for s in dimension_numbers):  # permutations, as a plain tuple
        perms = tuple(tuple(int(i) for i in s) for s in dimension_numbers)
        if any(sorted(p) != list(range(ndim)) for p in perms):
            raise TypeError(f"{fname}: dimension_numbers {dimension_numbers!r} must be permutations of range({ndim}) "
                            f"{user_frame_description()}")
        return ConvDimensionNumbers(*perms)
    perms = conv_general_permutations(dimension_numbers, fname)
    for spec in dimension_numbers:
        if len(spec) != ndim:
            raise TypeError(f"{fname}: dimension_numbers spec {spec!r} must have one letter per axis of lhs "
                            f"{tuple(lhs_shape)} and rhs {tuple(rhs_shape)} {user_frame_description()}")
    return ConvDimensionNumbers(*perms)


def _int_tuple(value, n: int, what: str, least: int, default: int) -> tuple:
    if value is None:
        return (default,) * n
    value = (value,) * n if isinstance(value, (int, np.integer)) else tuple(value)
    if len(value) != n or not all(isinstance(v, (int, np.integer)) and v >= least for v in value):
        raise ValueError(f"conv_general_dilated: {what} must be {n} ints >= {least} (one per spatial dimension), "
                         f"got {value!r} {user_frame_description()}")
    return tuple(int(v) for v in value)


def padding_pairs(padding, in_sizes, k_sizes, strides) -> tuple:
    """(low, high) per spatial dim from 'SAME' / 'SAME_LOWER' / 'VALID' (sizes of the undilated
    input and the dilated kernel, as JAX) or from a sequence of pairs."""
    n = len(in_sizes)
    if isinstance(padding, str):
        if padding.upper() not in ("SAME", "SAME_LOWER", "VALID"):
            raise ValueError(f"conv_general_dilated: padding {padding!r} must be 'SAME', 'SAME_LOWER', 'VALID' or a "
                             f"sequence of (low, high) pairs {user_frame_description()}")
        return tuple(padtype_to_pads(in_sizes, k_sizes, strides, padding))
    try:
        pairs = tuple((int(lo), int(hi)) for lo, hi in padding)
    except (TypeError, ValueError):
        pairs = ()
    if len(pairs) != n or not all(isinstance(v, (int, np.integer)) for p in padding for v in p):
        raise ValueError(f"conv_general_dilated: padding must be a string or {n} (low, high) int pairs (one per "
                         f"spatial dimension), got {padding!r} {user_frame_description()}")
    return pairs


def conv_general_dilated(lhs, rhs, window_strides: Sequence[int], padding, lhs_dilation: Sequence[int] | None = None,
                         rhs_dilation: Sequence[int] | None = None,
                         dimension_numbers: ConvGeneralDilatedDimensionNumbers = None, feature_group_count: int = 1, batch_group_count: int = 1, precision=None,
                         preferred_element_type=None):
    """General N-D convolution (cross-correlation), as ``jax.lax.conv_general_dilated``.

    ``padding``: 'SAME', 'SAME_LOWER', 'VALID' or (low, high) pairs (negative pairs crop);
    ``dimension_numbers``: None (``NC...`` / ``OI...`` / ``NC...``), strings such as
    ``('NHWC', 'HWIO', 'NHWC')`` or a ``ConvDimensionNumbers``; ``precision`` is checked and changes
    nothing (``ft.lax.Precision`` says why: the operands' dtype at full precision, on every device);
    ``preferred_element_type``: one that holds the operands' values (wider, or integers to floats)
    converts the operands first, so the products accumulate in it; another casts the result."""
    canonicalize_precision(precision, "conv_general_dilated")
    lhs, rhs = fnp.asarray(lhs), fnp.asarray(rhs)
    dtype = fnp.result_type(lhs, rhs)
    compute, out_dtype = preferred_dtypes("conv_general_dilated", dtype, preferred_element_type)
    lhs, rhs = fnp.asarray(lhs, compute or dtype), fnp.asarray(rhs, compute or dtype)
    ndim = len(shape_of(lhs))
    if len(shape_of(rhs)) != ndim or ndim < 2:
        raise _conv_error(f"lhs {shape_of(lhs)} and rhs {shape_of(rhs)} must have the same rank, at least 2")
    lhs_perm, rhs_perm, out_perm = conv_dimension_numbers(shape_of(lhs), shape_of(rhs), dimension_numbers,
                                                          "conv_general_dilated")
    nsp = ndim - 2
    strides = _int_tuple(window_strides, nsp, "window_strides", 1, 1)
    lhs_dilation = _int_tuple(lhs_dilation, nsp, "lhs_dilation", 1, 1)
    rhs_dilation = _int_tuple(rhs_dilation, nsp, "rhs_dilation", 1, 1)
    for what, count in (("feature_group_count", feature_group_count), ("batch_group_count", batch_group_count)):
        if not isinstance(count, (int, np.integer)) or count < 1:
            raise ValueError(f"conv_general_dilated: {what} must be an int >= 1, got {count!r} "
                             f"{user_frame_description()}")
    lhs_c, rhs_c = P.transpose(lhs, tuple(lhs_perm)), P.transpose(rhs, tuple(rhs_perm))
    in_sizes, k_sizes = shape_of(lhs_c)[2:], shape_of(rhs_c)[2:]
    if isinstance(padding, str) and any(d > 1 for d in lhs_dilation):
        raise ValueError(f"conv_general_dilated: string padding {padding!r} with lhs_dilation {lhs_dilation} is "
                         f"ambiguous (as in JAX); give (low, high) pairs {user_frame_description()}")
    pads = padding_pairs(padding, in_sizes, [_dilated(k, d) for k, d in zip(k_sizes, rhs_dilation)], strides)
    out = conv_canonical(lhs_c, rhs_c, window_strides=strides, padding=pads, lhs_dilation=lhs_dilation,
               rhs_dilation=rhs_dilation, feature_group_count=feature_group_count, batch_group_count=batch_group_count)
    out = P.transpose(out, tuple(int(i) for i in np.argsort(out_perm)))
    return out if out_dtype is None else fnp.asarray(out, out_dtype)


def conv_with_general_padding(lhs, rhs, window_strides: Sequence[int], padding,
                              lhs_dilation: Sequence[int] | None = None, rhs_dilation: Sequence[int] | None = None,
                              precision=None, preferred_element_type=None):
    """``conv_general_dilated`` in the default ``NC...`` / ``OI...`` layout, as JAX's."""
    return conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation,
                                precision=precision, preferred_element_type=preferred_element_type)


def conv(lhs, rhs, window_strides: Sequence[int], padding, precision=None, preferred_element_type=None):
    """``ft.lax.conv``: no dilation, default layout, as ``jax.lax.conv``."""
    return conv_general_dilated(lhs, rhs, window_strides, padding, precision=precision,
                                preferred_element_type=preferred_element_type)


def _transpose_pads(k: int, s: int, padding) -> tuple[int, int]:
    """(low, high) pads of a transposed convolution's dilated input for the forward convolution's
    'SAME' / 'VALID' padding (kernel size k, stride s), as JAX's ``conv_transpose``."""
    if padding == "SAME":
        total = k + s - 2
        low = k - 1 if s > k - 1 else -(-total // 2)
    elif padding == "VALID":
        total, low = k + s - 2 + max(k - s, 0), k - 1
    else:
        raise ValueError(f"conv_transpose: padding {padding!r} must be 'SAME', 'VALID' or (low, high) pairs "
                         f"{user_frame_description()}")
    return low, total - low


def conv_transpose(lhs, rhs, strides: Sequence[int], padding, rhs_dilation: Sequence[int] | None = None,
                   dimension_numbers: ConvGeneralDilatedDimensionNumbers = None, transpose_kernel: bool = False, precision=None,
                   preferred_element_type=None):
    """``lax.conv_transpose``: a fractionally strided convolution (lhs dilated by ``strides``), as
    JAX's: layouts default to ``NHWC`` / ``HWIO``; with ``transpose_kernel`` it is the gradient of
    the forward convolution with the same kernel, strides and 'SAME' / 'VALID' padding."""
    lhs, rhs = fnp.asarray(lhs), fnp.asarray(rhs)
    ndim = len(shape_of(lhs))
    if len(shape_of(rhs)) != ndim or ndim < 2:
        raise ShapeError(f"conv_transpose: lhs {shape_of(lhs)} and rhs {shape_of(rhs)} must have the same rank, at "
                         f"least 2 {user_frame_description()}")
    if dimension_numbers is None:
        if ndim > 5:
            raise ValueError(f"conv_transpose: no default dimension_numbers for rank {ndim}: give them "
                             f"{user_frame_description()}")
        letters = "HWD"[:ndim - 2]
        dimension_numbers = ("N" + letters + "C", letters + "IO", "N" + letters + "C")
    dn = conv_dimension_numbers(shape_of(lhs), shape_of(rhs), dimension_numbers, "conv_transpose")
    k_sizes = [shape_of(rhs)[i] for i in dn.rhs_spec[2:]]
    nsp = ndim - 2
    strides = _int_tuple(strides, nsp, "strides", 1, 1)
    rhs_dilation = _int_tuple(rhs_dilation, nsp, "rhs_dilation", 1, 1)
    if isinstance(padding, str):
        pads = [_transpose_pads(_dilated(k, d), s, padding) for k, d, s in zip(k_sizes, rhs_dilation, strides)]
    else:
        pads = padding
    if transpose_kernel:  # flip the spatial axes and exchange the in and out feature axes
        rhs = P.rev(rhs, tuple(dn.rhs_spec[2:]))
        perm = list(range(ndim))
        perm[dn.rhs_spec[0]], perm[dn.rhs_spec[1]] = perm[dn.rhs_spec[1]], perm[dn.rhs_spec[0]]
        rhs = P.transpose(rhs, tuple(perm))
    return conv_general_dilated(lhs, rhs, (1,) * nsp, pads, strides, rhs_dilation, dn, precision=precision,
                                preferred_element_type=preferred_element_type)


# --------------------------------------------------------------------------- shape helpers (JAX's)


def conv_shape_tuple(lhs_shape: Sequence[int], rhs_shape: Sequence[int], strides: Sequence[int], pads,
                     batch_group_count: int = 1) -> tuple[int, ...]:
    """The output shape of a convolution of canonical-layout shapes (``N C ...`` / ``O I ...``)."""
    if isinstance(pads, str):
        pads = padtype_to_pads(lhs_shape[2:], rhs_shape[2:], strides, pads)
    if len(pads) != len(lhs_shape) - 2:
        raise TypeError(f"conv_shape_tuple: expected {len(lhs_shape) - 2} (low, high) pads, got {len(pads)}")
    padded = [int(n) + int(lo) + int(hi) for n, (lo, hi) in zip(lhs_shape[2:], pads)]
    if any(n < 0 for n in padded):
        raise ValueError(f"conv_shape_tuple: negative padding {pads} is larger than the input {tuple(lhs_shape[2:])}")
    spatial = tuple(max(0, (n - int(k)) // int(s) + 1) for n, k, s in zip(padded, rhs_shape[2:], strides))
    return (int(lhs_shape[0]) // int(batch_group_count), int(rhs_shape[0])) + spatial


def _take(shape: Sequence[int], perm: Sequence[int]) -> tuple:
    return tuple(int(shape[i]) for i in perm)


def _untake(shape: Sequence[int], perm: Sequence[int]) -> tuple:
    out = [0] * len(perm)
    for size, i in zip(shape, perm):
        out[i] = int(size)
    return tuple(out)


def conv_general_shape_tuple(lhs_shape: Sequence[int], rhs_shape: Sequence[int], window_strides: Sequence[int],
                             padding, dimension_numbers) -> tuple[int, ...]:
    """The output shape of ``conv_general_dilated`` (no dilation) for spec strings, as JAX's."""
    lhs_perm, rhs_perm, out_perm = conv_general_permutations(dimension_numbers, "conv_general_shape_tuple")
    out = conv_shape_tuple(_take(lhs_shape, lhs_perm), _take(rhs_shape, rhs_perm), window_strides, padding)
    return _untake(out, out_perm)


def conv_transpose_shape_tuple(lhs_shape: Sequence[int], rhs_shape: Sequence[int], window_strides: Sequence[int],
                               padding, dimension_numbers) -> tuple[int, ...]:
    """The output shape of ``conv_transpose`` (no dilation) for spec strings, as JAX's."""
    lhs_perm, rhs_perm, out_perm = conv_general_permutations(dimension_numbers, "conv_transpose_shape_tuple")
    lhs_c, rhs_c = _take(lhs_shape, lhs_perm), _take(rhs_shape, rhs_perm)
    if isinstance(padding, str):
        padding = [_transpose_pads(k, s, padding) for k, s in zip(rhs_c[2:], window_strides)]
    spatial = tuple((i - 1) * int(s) - k + 2 + int(sum(p))
                    for i, k, s, p in zip(lhs_c[2:], rhs_c[2:], window_strides, padding))
    return _untake((lhs_c[0], rhs_c[0]) + spatial, out_perm)
