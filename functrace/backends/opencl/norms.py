"""OpenCL lowerings of ``rms_norm`` and ``rms_norm_bwd`` (kernels in ``cl_kernels/rmsnorm.cl``).

* ``rms_norm``: one work-item per row (vectorized along the row): 1 launch.
* ``rms_norm_bwd``: ``dx`` one work-item per row (it also keeps ``rstd`` per row in a scratch
  buffer); ``dw`` sums ``g * x * rstd`` over all rows in parallel: per-column partial sums over
  row chunks, then (when there is more than one chunk) a combine kernel: 2 or 3 launches.

``rmsnorm.cl`` is specialized per element type by a ``#define`` prefix (``RN_REAL``, ``RN_SUF``)
and ``#undef`` suffix, so float32 and float64 variants can share one program; kernel names
carry the suffix (``rms_norm_fwd_f32``).  Unsupported cases (other dtypes, float64 on a
device without it, empty arrays) return None and run as host steps.
"""
from __future__ import annotations

import numpy as np

from ...primitives import nn as fused
from ...transforms.optimize import shape_size
from .lowerings import Lowered, device_inputs, real_type, register, specialize
from .placement import elements_touched


def _check(eqn, rt, n_float: int):
    """Common checks: the first ``n_float`` inputs share one supported dtype; x is (..., D) with
    D > 0 rows > 0 and w is (D,).  Returns (ctype, suffix, R, D) or None."""
    avals = [a.aval for a in eqn.inputs[:n_float]]
    dtype = avals[0].dtype
    if any(a.dtype != dtype for a in avals):
        return None
    spec = real_type(dtype, rt)
    if spec is None:
        return None
    xs, ws = avals[0].shape, avals[1].shape
    if len(xs) < 1 or ws != xs[-1:] or shape_size(xs) == 0:
        return None
    if n_float > 2 and avals[2].shape != xs:
        return None
    D = xs[-1]
    return spec[0], spec[1], shape_size(xs) // D, D


@register(fused.rms_norm_p, small_on_host=elements_touched)
def lower_rms_norm(eqn, rt):
    chk = _check(eqn, rt, 2)
    if chk is None:
        return None
    ctype, suf, R, D = chk
    dtype = eqn.inputs[0].aval.dtype
    shape = eqn.inputs[0].aval.shape
    name = f"rms_norm_fwd_{suf}"
    eps = dtype.type(eqn.params["eps"])

    def run(ctx, inputs):
        x, w = device_inputs(eqn, ctx, inputs)
        y = ctx.alloc(shape, dtype)
        ctx.kernels[name](ctx.queue, (R,), None, x.buffer, w.buffer, y.buffer, np.int64(D), eps)
        return [y]

    return Lowered(specialize("rmsnorm.cl", {"RN_REAL": ctype, "RN_SUF": suf}), [name], run, 1,
                   f"rms_norm (OpenCL rmsnorm.cl: {name}, one work-item per row)")


def _dw_chunks(R: int, D: int) -> int:
    """Row chunks for the dw reduction: enough work-items to fill the device, chunks of at least
    16 rows."""
    col_items = -(-D // 16)
    want = max(1, -(-64 // col_items))
    return max(1, min(want, -(-R // 16), 256))


@register(fused.rms_norm_bwd_p)
def lower_rms_norm_bwd(eqn, rt):
    chk = _check(eqn, rt, 3)
    if chk is None:
        return None
    ctype, suf, R, D = chk
    dtype = eqn.inputs[0].aval.dtype
    shape = eqn.inputs[0].aval.shape
    eps = dtype.type(eqn.params["eps"])
    names = [f"rms_norm_bwd_dx_{suf}", f"rms_norm_bwd_dw_{suf}", f"rms_norm_bwd_dw_combine_{suf}"]
    chunks = _dw_chunks(R, D)
    rows_per_chunk = -(-R // chunks)
    chunks = -(-R // rows_per_chunk)
    col_items = -(-D // 16)

    def run(ctx, inputs):
        x, w, g = device_inputs(eqn, ctx, inputs)
        k_dx, k_dw, k_comb = (ctx.kernels[n] for n in names)
        dx = ctx.alloc(shape, dtype)
        dw = ctx.alloc((D,), dtype)
        rstd = ctx.alloc((R,), dtype)
        k_dx(ctx.queue, (R,), None, x.buffer, w.buffer, g.buffer, dx.buffer, rstd.buffer, np.int64(D), eps)
        if chunks == 1:
            k_dw(ctx.queue, (col_items, 1), None, x.buffer, g.buffer, rstd.buffer, dw.buffer,
                 np.int64(R), np.int64(D), np.int64(rows_per_chunk))
        else:
            partial = ctx.alloc((chunks, D), dtype)
            k_dw(ctx.queue, (col_items, chunks), None, x.buffer, g.buffer, rstd.buffer, partial.buffer,
                 np.int64(R), np.int64(D), np.int64(rows_per_chunk))
            k_comb(ctx.queue, (D,), None, partial.buffer, dw.buffer, np.int64(D), np.int64(chunks))
            ctx.release(partial)
        ctx.release(rstd)
        return [dx, dw]

    return Lowered(specialize("rmsnorm.cl", {"RN_REAL": ctype, "RN_SUF": suf}), names, run,
                   2 if chunks == 1 else 3,
                   f"rms_norm_bwd (OpenCL rmsnorm.cl: dx per row; dw as {chunks} row-chunk partial "
                   f"column sums{' + combine' if chunks > 1 else ''})")
