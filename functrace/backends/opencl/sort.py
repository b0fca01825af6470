"""OpenCL lowering of ``argsort``: a stable bottom-up merge sort of index lists, one row per line.

The operand is viewed as ``(R, n)`` rows.  An index buffer starts as the identity; pass ``w``
(w = 1, 2, 4, ...) merges sorted blocks of ``w`` indices pairwise.  Each work-item moves one
index to its place in the merged block: its position in its own block plus the number of keys in
the other block ordered before it, found by binary search (a left key counts the right keys
strictly before it, a right key the left keys not after it: equal keys keep their order, so the
sort is stable, and the result is deterministic).  ``ceil(log2 n)`` launches of ``R * n``
work-items, ``O(log n)`` reads each; buffers ping-pong so that the last pass writes the output.
NaNs order last (first when descending), as numpy and JAX.
"""
from __future__ import annotations

import math

import numpy as np

from ... import sorting
from ...core import Literal
from .fusion import CTYPE
from .lowerings import Lowered, register


def _before(t: str, is_float: bool, descending: bool) -> str:
    """C: ``ft_before(a, b)``, true when key ``a`` sorts strictly before key ``b``."""
    cmp = ">" if descending else "<"
    if not is_float:
        return f"inline int ft_before({t} a, {t} b) {{ return a {cmp} b; }}"
    nan_rule = "isnan(a) && !isnan(b)" if descending else "isnan(b) && !isnan(a)"
    return f"inline int ft_before({t} a, {t} b) {{ return (a {cmp} b) || ({nan_rule}); }}"


@register(sorting.argsort_p)
def lower_argsort(eqn, rt) -> Lowered | None:
    x = eqn.inputs[0]
    dt = x.aval.dtype
    if type(x) is Literal or dt not in CTYPE or dt == np.dtype(bool):
        return None
    if dt == np.dtype(np.float64) and not getattr(rt, "supports_fp64", True):
        return None
    descending = bool(eqn.params["descending"])
    shape = x.aval.shape
    n = shape[-1]
    rows = math.prod(shape[:-1])
    total = rows * n
    passes = max(0, math.ceil(math.log2(n))) if n > 1 else 0
    t = CTYPE[dt]
    suffix = f"{t}_{'desc' if descending else 'asc'}"
    init, merge = f"argsort_init_{suffix}", f"argsort_merge_{suffix}"
    source = _before(t, dt.kind == "f", descending) + f"""
__kernel void {init}(__global long* restrict idx, const long n, const long total) {{
    const long g = get_global_id(0);
    if (g < total) idx[g] = g % n;
}}

__kernel void {merge}(__global const {t}* restrict x, __global const long* restrict src,
                      __global long* restrict dst, const long n, const long w, const long total) {{
    const long g = get_global_id(0);
    if (g >= total) return;
    const long row = (g / n) * n, i = g % n;
    const long start = (i / (2 * w)) * 2 * w;
    const long mid = min(start + w, n), end = min(start + 2 * w, n);
    const long me = src[g];
    const {t} key = x[row + me];
    long lo, hi;
    if (i < mid) {{   /* left block: count right keys strictly before mine */
        lo = mid; hi = end;
        while (lo < hi) {{
            const long m = (lo + hi) / 2;
            if (ft_before(x[row + src[row + m]], key)) lo = m + 1; else hi = m;
        }}
        dst[row + start + (i - start) + (lo - mid)] = me;
    }} else {{        /* right block: count left keys not after mine */
        lo = start; hi = mid;
        while (lo < hi) {{
            const long m = (lo + hi) / 2;
            if (!ft_before(key, x[row + src[row + m]])) lo = m + 1; else hi = m;
        }}
        dst[row + start + (i - mid) + (lo - start)] = me;
    }}
}}"""

    def run(ctx, inputs):
        out = ctx.alloc(shape, np.int64)
        if not total:
            return [out]
        scratch = ctx.alloc(shape, np.int64) if passes else None
        # ping-pong so that the last pass writes ``out``
        bufs = [out, scratch] if passes % 2 == 0 else [scratch, out]
        ctx.kernels[init](ctx.queue, (total,), None, bufs[0].buffer, np.int64(n), np.int64(total))
        for p in range(passes):
            ctx.kernels[merge](ctx.queue, (total,), None, inputs[0].buffer, bufs[p % 2].buffer,
                               bufs[(p + 1) % 2].buffer, np.int64(n), np.int64(1 << p), np.int64(total))
        if scratch is not None:
            ctx.release(scratch)
        return [out]

    return Lowered(source, [init, merge], run, (1 + passes) if total else 0,
                   f"argsort (stable merge sort, {rows} rows of {n}, {passes} passes)")
