"""OpenCL lowerings of ``softmax`` and ``log_softmax`` over the last axis (``cl_kernels/softmax.cl``):
one work-item per row, three passes over the row (max, sum of exponentials, output): 1 launch
where the decomposition takes a max reduction, a sum reduction and an elementwise kernel.
Their gradients are decompositions (``ft.nn``), which fuse into one row reduction and one
elementwise kernel.

On the gpu kind (``policy.row_work_groups``) the kernels of ``cl_kernels/softmax_rows.cl`` run
instead: a work-group per row (several rows per group when rows are short, see
``norms.row_group_size``), neighbouring work-items reading neighbouring elements, the row's max
and sum of exponentials reduced by trees in local memory.  (Cross-entropy is log_softmax and a
gather: it runs these kernels too.)"""
from __future__ import annotations

import numpy as np

from ...primitives import nn as fused
from .lowerings import Lowered, device_inputs, real_type, register, specialize
from .norms import row_group_size, rows_design, threads_per_row


def _lower(eqn, rt, kind: str) -> Lowered | None:
    aval = eqn.inputs[0].aval
    spec = real_type(aval.dtype, rt)
    if spec is None or len(aval.shape) < 1 or 0 in aval.shape:
        return None
    ctype, suf = spec
    D = aval.shape[-1]
    R = int(np.prod(aval.shape, dtype=np.int64)) // D
    if rt.policy.row_work_groups:
        return _lower_rows(eqn, rt, kind, ctype, suf, R, D)
    name = f"{kind}_fwd_{suf}"

    def run(ctx, inputs):
        (x,) = device_inputs(eqn, ctx, inputs)
        y = ctx.alloc(aval.shape, aval.dtype)
        ctx.kernels[name](ctx.queue, (R,), None, x.buffer, y.buffer, np.int64(D))
        return [y]

    return Lowered(specialize("softmax.cl", {"SM_REAL": ctype, "SM_SUF": suf}), [name], run, 1,
                   f"{kind} (OpenCL softmax.cl: {name}, one work-item per row of {D})")


def _lower_rows(eqn, rt, kind: str, ctype: str, suf: str, R: int, D: int) -> Lowered:
    aval = eqn.inputs[0].aval
    wg = row_group_size(rt)
    T = threads_per_row(D, wg)
    groups = -(-R // (wg // T))
    name = f"{kind}_rows_fwd_{suf}"

    def run(ctx, inputs):
        (x,) = device_inputs(eqn, ctx, inputs)
        y = ctx.alloc(aval.shape, aval.dtype)
        ctx.kernels[name](ctx.queue, (groups * wg,), (wg,), x.buffer, y.buffer, np.int64(R), np.int64(D),
                          np.uint32(T))
        return [y]

    return Lowered(specialize("softmax_rows.cl", {"SR_REAL": ctype, "SR_SUF": suf, "SR_WG": wg}), [name], run, 1,
                   f"{kind} (OpenCL softmax_rows.cl: {name}, rows of {D}: {rows_design(D, wg)})")


@register(fused.softmax_p)
def lower_softmax(eqn, rt) -> Lowered | None:
    return _lower(eqn, rt, "softmax")


@register(fused.log_softmax_p)
def lower_log_softmax(eqn, rt) -> Lowered | None:
    return _lower(eqn, rt, "log_softmax")
