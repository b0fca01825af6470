"""OpenCL lowerings of ``rms_norm`` and ``rms_norm_bwd`` (kernels in ``cl_kernels/rmsnorm.cl``).

* ``rms_norm``: one work-item per row (vectorized along the row): 1 launch.
* ``rms_norm_bwd``: ``dx`` one work-item per row (it also keeps ``rstd`` per row in a scratch
  buffer); ``dw`` sums ``g * x * rstd`` over all rows in parallel: per-column partial sums over
  row chunks, then (when there is more than one chunk) a combine kernel: 2 or 3 launches.

On the gpu kind (``policy.row_work_groups``) the same steps run ``cl_kernels/rmsnorm_rows.cl``: a
work-group per row (``ROW_GROUP`` work-items, fewer where the device allows fewer; several rows
per group when rows are shorter than the group), its work-items reading neighbouring elements and
the row's sums added by a tree in local memory; ``dw`` as a column reduction: work-groups of 32
neighbouring columns by ``ROW_GROUP / 32`` row lanes over chunks of rows, lanes added by a tree in
local memory, then the chunks added in order by a combine kernel (no atomics: the same bits every
run).

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


# work-items of a row work-group on the gpu kind (at most; a power of two)
ROW_GROUP = 256
# columns of a dw work-group on the gpu kind (a warp of neighbouring columns: coalesced loads)
DW_COLUMNS = 32
# work-groups the gpu kind's dw reduction aims for (enough to fill a large GPU)
DW_GROUPS = 1024


def row_group_size(rt) -> int:
    """Work-items of a row work-group on ``rt``'s device: ``ROW_GROUP``, or the largest power of
    two its ``max_work_group_size`` allows."""
    items = int(getattr(getattr(rt, "device", None), "max_work_group_size", ROW_GROUP) or ROW_GROUP)
    wg = 1
    while wg * 2 <= min(items, ROW_GROUP):
        wg *= 2
    return wg


def threads_per_row(D: int, wg: int) -> int:
    """Work-items per row: the whole group for rows of at least ``wg`` elements, else the row
    length rounded up to a power of two (``wg // T`` rows per group)."""
    t = 1
    while t < D and t < wg:
        t *= 2
    return t


def rows_design(D: int, wg: int) -> str:
    """The report's words for the row work-groups of rows of ``D`` elements."""
    t = threads_per_row(D, wg)
    if t == wg:
        return f"a work-group per row ({wg} work-items)"
    return f"a work-group per {wg // t} rows ({t} work-item{'s' if t > 1 else ''} per row)"


def _rows_source(ctype: str, suf: str, wg: int) -> str:
    cw = min(DW_COLUMNS, wg)
    return specialize("rmsnorm_rows.cl", {"RR_REAL": ctype, "RR_SUF": suf, "RR_WG": wg, "RR_CW": cw,
                                          "RR_RH": wg // cw})


def _lower_rms_norm_rows(eqn, rt, ctype, suf, R, D):
    dtype = eqn.inputs[0].aval.dtype
    shape = eqn.inputs[0].aval.shape
    wg = row_group_size(rt)
    T = threads_per_row(D, wg)
    groups = -(-R // (wg // T))
    name = f"rms_norm_rows_fwd_{suf}"
    eps = dtype.type(eqn.params["eps"])

    def run(ctx, inputs):
        x, w = device_inputs(eqn, ctx, inputs)
        y = ctx.alloc(shape, dtype)
        ctx.kernels[name](ctx.queue, (groups * wg,), (wg,), x.buffer, w.buffer, y.buffer, np.int64(R),
                          np.int64(D), np.uint32(T), eps)
        return [y]

    return Lowered(_rows_source(ctype, suf, wg), [name], run, 1,
                   f"rms_norm (OpenCL rmsnorm_rows.cl: {name}, {rows_design(D, wg)})")


@register(fused.rms_norm_p, small_on_host=elements_touched)
def lower_rms_norm(eqn, rt):
    chk = _check(eqn, rt, 2)
    if chk is None:
        return None
    ctype, suf, R, D = chk
    if rt.policy.row_work_groups:
        return _lower_rms_norm_rows(eqn, rt, ctype, suf, R, D)
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


def _dw_row_chunks(R: int, D: int, lanes: int, columns: int = DW_COLUMNS) -> int:
    """Row chunks of the gpu kind's dw reduction (work-groups of ``columns`` x ``lanes``):
    about ``DW_GROUPS`` work-groups in all, each lane of a chunk summing at least 8 rows."""
    col_groups = -(-D // columns)
    return max(1, min(-(-DW_GROUPS // col_groups), -(-R // (8 * lanes))))


def _lower_rms_norm_bwd_rows(eqn, rt, ctype, suf, R, D):
    dtype = eqn.inputs[0].aval.dtype
    shape = eqn.inputs[0].aval.shape
    eps = dtype.type(eqn.params["eps"])
    wg = row_group_size(rt)
    T = threads_per_row(D, wg)
    groups = -(-R // (wg // T))
    cw = min(DW_COLUMNS, wg)
    rh = wg // cw
    chunks = _dw_row_chunks(R, D, rh, cw)
    rows_per_chunk = -(-R // chunks)
    chunks = -(-R // rows_per_chunk)
    cols = -(-D // cw) * cw
    comb = -(-D // wg) * wg
    names = [f"rms_norm_rows_bwd_dx_{suf}", f"rms_norm_rows_bwd_dw_{suf}", f"rms_norm_rows_bwd_dw_combine_{suf}"]

    def run(ctx, inputs):
        x, w, g = device_inputs(eqn, ctx, inputs)
        k_dx, k_dw, k_comb = (ctx.kernels[n] for n in names)
        dx = ctx.alloc(shape, dtype)
        dw = ctx.alloc((D,), dtype)
        rstd = ctx.alloc((R,), dtype)
        k_dx(ctx.queue, (groups * wg,), (wg,), x.buffer, w.buffer, g.buffer, dx.buffer, rstd.buffer,
             np.int64(R), np.int64(D), np.uint32(T), eps)
        partial = dw if chunks == 1 else ctx.alloc((chunks, D), dtype)
        k_dw(ctx.queue, (cols, chunks * rh), (cw, rh), x.buffer, g.buffer, rstd.buffer, partial.buffer,
             np.int64(R), np.int64(D), np.int64(rows_per_chunk))
        if chunks > 1:
            k_comb(ctx.queue, (comb,), (wg,), partial.buffer, dw.buffer, np.int64(D), np.int64(chunks))
            ctx.release(partial)
        ctx.release(rstd)
        return [dx, dw]

    return Lowered(_rows_source(ctype, suf, wg), names, run, 2 if chunks == 1 else 3,
                   f"rms_norm_bwd (OpenCL rmsnorm_rows.cl: dx by {rows_design(D, wg)}; dw as a column "
                   f"reduction by work-groups of {cw} columns x {rh} row lane{'s' if rh > 1 else ''} over {chunks} row chunk"
                   f"{'s + combine' if chunks > 1 else ''})")


@register(fused.rms_norm_bwd_p)
def lower_rms_norm_bwd(eqn, rt):
    chk = _check(eqn, rt, 3)
    if chk is None:
        return None
    ctype, suf, R, D = chk
    if rt.policy.row_work_groups:
        return _lower_rms_norm_bwd_rows(eqn, rt, ctype, suf, R, D)
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
