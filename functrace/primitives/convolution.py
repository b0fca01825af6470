"""The ``conv_general_dilated`` primitive: N-D convolution (cross-correlation) with strides,
padding, lhs/rhs dilation, feature and batch groups, as JAX's; its rules bind the same primitive.

Why a primitive (and not a composition of pads, slices and ``dot_general``): an im2col
composition differentiates into one pad + one add per kernel tap (81 of each for a 9x9 kernel),
while the derivatives of a convolution are themselves convolutions.  So ``conv_general_dilated``
is one primitive whose rules bind the same primitive, as JAX's: the lhs cotangent is a
convolution of the output cotangent with the flipped, in/out-swapped kernel (``lhs_dilation =
window_strides``), the rhs cotangent a convolution of lhs with the output cotangent (groups
swapped: feature groups become batch groups and back).  Derivatives therefore nest to any order,
and ``vmap`` folds its axis into the batch or into the groups, as JAX does.

The primitive works in one canonical layout (lhs ``N C spatial...``, rhs ``O I spatial...``,
out ``N C spatial...``) with resolved ``(low, high)`` padding pairs (``conv_canonical`` binds it);
the user's function (``functrace.convolution.conv_general_dilated``) transposes other
``dimension_numbers`` into it (plain transposes, which jit fuses or copies).  The numpy
implementation is a strided window view, copied into im2col columns, and one BLAS product per
group; OpenCL (``backends/opencl/conv.py``) runs a direct-convolution kernel for few-channel
convolutions and an im2col kernel + the matmul lowering for CNN-like ones.
"""
from __future__ import annotations

import math

import numpy as np

from ..core import ShapedArray, get_aval
from ..core.errors import DtypeError, ShapeError, user_frame_description
from . import basic as P
from .basic import new_primitive, shape_of

conv_general_dilated_p = new_primitive("conv_general_dilated")


def dilated_size(size: int, dilation: int) -> int:
    """Length of ``size`` elements with ``dilation - 1`` zeros between neighbours."""
    return 0 if size == 0 else 1 + dilation * (size - 1)


def _out_spatial(in_sizes, k_sizes, strides, padding, lhs_dilation, rhs_dilation) -> tuple:
    return tuple(max(0, (dilated_size(i, ld) + lo + hi - dilated_size(k, rd)) // s + 1) if dilated_size(k, rd) > 0 else 0
                 for i, k, s, (lo, hi), ld, rd in zip(in_sizes, k_sizes, strides, padding, lhs_dilation, rhs_dilation))


def conv_error(msg: str) -> ShapeError:
    return ShapeError(f"conv_general_dilated: {msg} {user_frame_description()}")


def _conv_abstract(lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation, feature_group_count,
                   batch_group_count):
    if lhs.dtype != rhs.dtype:
        raise DtypeError(f"conv_general_dilated: operand dtypes differ ({lhs.dtype.name} vs {rhs.dtype.name}) "
                         f"{user_frame_description()}")
    ls, rs = lhs.shape, rhs.shape
    if len(ls) != len(rs) or len(ls) < 2:
        raise conv_error(f"lhs {ls} and rhs {rs} must have the same rank, at least 2 (batch and feature dims)")
    nsp = len(ls) - 2
    for name, v in (("window_strides", window_strides), ("padding", padding), ("lhs_dilation", lhs_dilation),
                    ("rhs_dilation", rhs_dilation)):
        if len(v) != nsp:
            raise conv_error(f"{name} {v} must have one entry per spatial dimension ({nsp})")
    fg, bg = feature_group_count, batch_group_count
    if fg > 1 and bg > 1:
        raise conv_error(f"at most one of feature_group_count ({fg}) and batch_group_count ({bg}) may exceed 1")
    if ls[1] != rs[1] * fg:
        raise conv_error(f"lhs feature size {ls[1]} must equal rhs input-feature size {rs[1]} times "
                          f"feature_group_count {fg} (lhs {ls}, rhs {rs} in N C spatial / O I spatial order)")
    if rs[0] % (fg * bg) != 0:
        raise conv_error(f"rhs output-feature size {rs[0]} must be a multiple of the group count {fg * bg}")
    if ls[0] % bg != 0:
        raise conv_error(f"lhs batch size {ls[0]} must be a multiple of batch_group_count {bg}")
    out = _out_spatial(ls[2:], rs[2:], window_strides, padding, lhs_dilation, rhs_dilation)
    return ShapedArray((ls[0] // bg, rs[0]) + out, lhs.dtype, False)


def _conv_impl(lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation, feature_group_count,
               batch_group_count):
    """A strided view of every window (after dilating and padding lhs), copied into im2col columns
    and multiplied by the kernel: one matmul per group."""
    lhs, rhs = np.asarray(lhs), np.asarray(rhs)
    nsp = lhs.ndim - 2
    if any(d > 1 for d in lhs_dilation):
        dilated = np.zeros(lhs.shape[:2] + tuple(dilated_size(s, d) for s, d in zip(lhs.shape[2:], lhs_dilation)),
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
        k_dil = dilated_size(rs[2 + i], rhs_dilation[i])
        lo = k_dil - padding[i][0] - 1
        hi = dilated_size(ls[2 + i], lhs_dilation[i]) + k_dil - 1 - dilated_size(gs[2 + i], window_strides[i]) - lo
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
        hi = (dilated_size(gs[2 + i], window_strides[i]) - dilated_size(ls[2 + i], lhs_dilation[i])
              + dilated_size(rs[2 + i], rhs_dilation[i]) - lo - 1)
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
