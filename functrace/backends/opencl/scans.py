"""OpenCL lowerings of the primitives that walk one axis in order: ``cumsum`` and ``cumprod``
(either direction) and ``argmax`` / ``argmin``.

The operand is viewed as ``(P, n, Q)`` around the axis; one work-item per ``(p, q)`` line walks
its ``n`` elements (stride ``Q``), so neighbouring work-items read neighbouring memory.  The
results match numpy's: cumsum and cumprod accumulate sequentially in the operand's dtype, arg-reductions
return the first index of the extreme value, or of the first NaN.
"""
from __future__ import annotations

import math

import numpy as np

from ... import primitives as P
from ...core import Literal
from .fusion import CTYPE
from .lowerings import Lowered, register


def _line_geometry(shape: tuple, axis: int) -> tuple[int, int, int]:
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])


def _supported(eqn, rt) -> bool:
    x = eqn.inputs[0]
    dt = x.aval.dtype
    if type(x) is Literal or dt not in CTYPE or dt in (np.dtype(bool), np.dtype(np.float16)):  # (float16: no half form)
        return False
    return not (dt == np.dtype(np.float64) and not getattr(rt, "supports_fp64", True))


def _line_lowering(eqn, name: str, body: str, out_dtype, label: str) -> Lowered:
    """One kernel ``name`` running ``body`` per line (it sees ``x``, ``out``, ``base`` = the
    line's first element, ``n``, ``Q`` and ``g`` = the line's index)."""
    x = eqn.inputs[0]
    axis = eqn.params["axis"]
    P, n, Q = _line_geometry(x.aval.shape, axis)
    t, ot = CTYPE[x.aval.dtype], CTYPE[np.dtype(out_dtype)]
    source = f"""
__kernel void {name}(__global const {t}* restrict x, __global {ot}* restrict out,
                     const long P, const long n, const long Q) {{
    const long g = get_global_id(0);
    if (g >= P * Q) return;
    const long base = (g / Q) * n * Q + g % Q;
    {body}
}}"""
    out_shape = eqn.out_vars[0].aval.shape
    lines = P * Q if n else 0

    def run(ctx, inputs):
        out = ctx.alloc(out_shape, out_dtype)
        if lines:
            ctx.kernels[name](ctx.queue, (lines,), None, inputs[0].buffer, out.buffer,
                              np.int64(P), np.int64(n), np.int64(Q))
        return [out]

    return Lowered(source, [name], run, 1 if lines else 0, f"{label} ({name}: {P}x{Q} lines of {n})")


def _lower_running(eqn, rt, what: str, identity: str, update: str) -> Lowered | None:
    """A running sum or product along the axis, accumulated in order in the operand's dtype."""
    if not _supported(eqn, rt):
        return None
    t = CTYPE[eqn.inputs[0].aval.dtype]
    reverse = bool(eqn.params["reverse"])
    body = f"""{t} acc = {identity};
    for (long j = 0; j < n; j++) {{
        const long e = base + ({'n - 1 - j' if reverse else 'j'}) * Q;
        acc {update} x[e];
        out[e] = acc;
    }}"""
    name = f"{eqn.primitive.name}_{'rev_' if reverse else ''}{t}"
    return _line_lowering(eqn, name, body, eqn.inputs[0].aval.dtype, f"cumulative {what}")


@register(P.cumsum_p)
def lower_cumsum(eqn, rt) -> Lowered | None:
    return _lower_running(eqn, rt, "sum", "0", "+=")


@register(P.cumprod_p)
def lower_cumprod(eqn, rt) -> Lowered | None:
    return _lower_running(eqn, rt, "product", "1", "*=")


def _lower_arg_reduction(eqn, rt, cmp: str) -> Lowered | None:
    x = eqn.inputs[0]
    if not _supported(eqn, rt) or x.aval.shape[eqn.params["axis"]] == 0:
        return None  # an empty axis: the host step raises numpy's error
    t = CTYPE[x.aval.dtype]
    is_float = x.aval.dtype.kind == "f"
    nan_first = "if (isnan(best)) { out[g] = 0; return; }" if is_float else ""
    nan_stop = "if (isnan(v)) { bi = j; break; }" if is_float else ""
    body = f"""{t} best = x[base];
    long bi = 0;
    {nan_first}
    for (long j = 1; j < n; j++) {{
        const {t} v = x[base + j * Q];
        {nan_stop}
        if (v {cmp} best) {{ best = v; bi = j; }}
    }}
    out[g] = bi;"""
    kind = eqn.primitive.name
    return _line_lowering(eqn, f"{kind}_{t}", body, np.int64, kind)


@register(P.argmax_p)
def lower_argmax(eqn, rt) -> Lowered | None:
    return _lower_arg_reduction(eqn, rt, ">")


@register(P.argmin_p)
def lower_argmin(eqn, rt) -> Lowered | None:
    return _lower_arg_reduction(eqn, rt, "<")
