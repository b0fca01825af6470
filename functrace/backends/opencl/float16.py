"""float16 for the hand-written kernels (matmul, softmax, norms, attention, ...): the equation is
lowered as its float32 twin, between kernels converting its float16 operands to float32 and its
float32 results to float16 (``vload_half`` / ``vstore_half_rte``: OpenCL 1.x core, no
cl_khr_fp16).  numpy computes float16 products and most float16 functions the same way (in
float32, rounded once): ``a @ b`` of float16 matrices is ``(float32(a) @ float32(b))`` rounded.
Generated kernels need none of this: they read and write float16 themselves (``fusion.py``).
"""
from __future__ import annotations

import numpy as np

from ... import primitives as P
from ...core import ClosedJaxpr, Jaxpr, JaxprEqn, Literal, ShapedArray, Var
from .lowerings import Lowered

HALF, SINGLE = np.dtype(np.float16), np.dtype(np.float32)
_CONVERT_SOURCE = """
__kernel void ft_half_to_float(__global const half* restrict x, __global float* restrict y, const long n) {
    const long i = get_global_id(0);
    if (i < n) y[i] = vload_half(i, x);
}
__kernel void ft_float_to_half(__global const float* restrict x, __global half* restrict y, const long n) {
    const long i = get_global_id(0);
    if (i < n) vstore_half_rte(x[i], i, y);
}"""


def _single(a):
    """``a`` (a Var or Literal) as float32 if it is float16: a fresh Var, or the literal's value."""
    if a.aval.dtype != HALF:
        return a
    if type(a) is Literal:
        return Literal(np.asarray(a.val, HALF).astype(SINGLE))
    return Var(ShapedArray(a.aval.shape, SINGLE, a.aval.weak_type))


def _twin_fits(eqn) -> bool:
    """Is ``eqn``'s float32 twin the same computation?  Not when a parameter names float16 or
    holds a sub-program (whose values would stay float16), nor for a cumulative sum (numpy
    rounds a float16 running sum at every step: in float32 it would drift from the numpy
    backend's by up to n rounding errors)."""
    if eqn.primitive is P.cumsum_p:
        return False
    return not any(v is np.float16 or (isinstance(v, np.dtype) and v == HALF) or isinstance(v, (Jaxpr, ClosedJaxpr))
                   for v in eqn.params.values())


def lower_in_float32(fn, eqn, rt) -> Lowered | None:
    """``fn``'s lowering of ``eqn``'s float32 twin, with float16 conversions around it; None when
    ``eqn`` has no float16 operand or result, or the twin has no lowering either."""
    if not any(v.aval.dtype == HALF for v in list(eqn.inputs) + eqn.out_vars) or not _twin_fits(eqn):
        return None
    twin = JaxprEqn(eqn.primitive, [_single(a) for a in eqn.inputs], eqn.params, [_single(v) for v in eqn.out_vars],
                    eqn.phase)
    inner = fn(twin, rt)
    if inner is None:
        return None
    widen = [type(a) is not Literal and a.aval.dtype == HALF for a in eqn.inputs]
    narrow = [v.aval.dtype == HALF for v in eqn.out_vars]

    def convert(ctx, kernel: str, x, dtype):
        out = ctx.alloc(x.shape, dtype)
        n = int(np.prod(x.shape, dtype=np.int64))
        if n:
            ctx.kernels[kernel](ctx.queue, (n,), None, x.buffer, out.buffer, np.int64(n))
        return out

    def run(ctx, inputs):
        wide = [convert(ctx, "ft_half_to_float", x, SINGLE) if w else x for x, w in zip(inputs, widen)]
        outs = inner.run(ctx, wide)
        results = [convert(ctx, "ft_float_to_half", y, HALF) if w else y for y, w in zip(outs, narrow)]
        # temporaries back to the pool (the in-order queue runs their later users after these launches)
        temporaries = [x for x, w in zip(wide, widen) if w]
        temporaries += [y for y, w in zip(outs, narrow) if w and all(y is not x for x in wide)]
        for t in {id(t): t for t in temporaries}.values():
            ctx.release(t)
        return results

    return Lowered(inner.source, inner.kernel_names + ["ft_half_to_float", "ft_float_to_half"], run,
                   inner.launches + sum(widen) + sum(narrow), f"{inner.label} in float32, float16 converted at its edges",
                   inner.extra, {**inner.shared, "ft_half_convert": _CONVERT_SOURCE})
