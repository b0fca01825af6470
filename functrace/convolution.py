"""``ft.lax.conv_general_dilated`` (and ``conv`` / ``conv_with_general_padding`` / ``conv_transpose``):
N-D convolution with strides, padding, lhs/rhs dilation, feature and batch groups, as JAX's; and
JAX's shape helpers for layers (``ConvDimensionNumbers``, ``conv_dimension_numbers``,
``conv_general_shape_tuple``, ``conv_transpose_shape_tuple``, ...), as stax writes them.

The user's functions check their arguments, resolve the padding and transpose other
``dimension_numbers`` into the canonical layout of the ``conv_general_dilated`` primitive, which is
declared with all its rules (and why it is a primitive) in ``functrace.primitives.convolution``.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence, Union

import numpy as np

from . import numpy as fnp
from . import primitives as P
from .core.errors import ShapeError, user_frame_description
from .lax_numeric import padtype_to_pads
from .precision import canonicalize_precision, preferred_dtypes
from .primitives import shape_of
from .primitives.convolution import (  # noqa: F401  (the primitive, read through here by the OpenCL backend)
    conv_canonical,
    conv_error,
    conv_general_dilated_p,
    dilated_size,
)

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
        raise conv_error(f"lhs {shape_of(lhs)} and rhs {shape_of(rhs)} must have the same rank, at least 2")
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
    pads = padding_pairs(padding, in_sizes, [dilated_size(k, d) for k, d in zip(k_sizes, rhs_dilation)], strides)
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
        pads = [_transpose_pads(dilated_size(k, d), s, padding) for k, d, s in zip(k_sizes, rhs_dilation, strides)]
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
