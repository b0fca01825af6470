"""OpenCL lowering of ``argsort``: a stable bottom-up merge sort of index lists, one row per line.

The operand is viewed as ``(R, n)`` rows.  A first kernel sorts blocks of 16 (key, index) pairs,
one block per work-item (a stable insertion sort); pass ``w`` (w = 16, 32, 64, ...) then merges
sorted blocks of ``w`` pairs pairwise.  Each work-item moves one
index to its place in the merged block: its position in its own block plus the number of keys in
the other block ordered before it, found by binary search (a left key counts the right keys
strictly before it, a right key the left keys not after it: equal keys keep their order, so the
sort is stable, and the result is deterministic).  ``ceil(log2(n / 16))`` launches of ``R * n``
work-items, ``O(log n)`` reads each (keys travel with their indices: no indirection); buffers
ping-pong so that the last pass writes the output.
NaNs order last (first when descending), as numpy and JAX.
"""
from __future__ import annotations

import math

import numpy as np

from ...core import Literal
from ...primitives import sorting
from .fusion import CTYPE
from .lowerings import Lowered, register

_BLOCK = 16  # entries a work-item sorts alone before the merge passes


def _before(name: str, t: str, is_float: bool, descending: bool) -> str:
    """C: ``name(a, b)``, true when key ``a`` sorts strictly before key ``b`` (one helper per key
    type and direction: two sorts in one program define two)."""
    cmp = ">" if descending else "<"
    if not is_float:
        return f"inline int {name}({t} a, {t} b) {{ return a {cmp} b; }}"
    nan_rule = "isnan(a) && !isnan(b)" if descending else "isnan(b) && !isnan(a)"
    return f"inline int {name}({t} a, {t} b) {{ return (a {cmp} b) || ({nan_rule}); }}"


@register(sorting.argsort_p)
def lower_argsort(eqn, rt) -> Lowered | None:
    x = eqn.inputs[0]
    dt = x.aval.dtype
    if type(x) is Literal or dt not in CTYPE or dt == np.dtype(np.float16):  # (float16.py runs the float32 form)
        return None
    if dt == np.dtype(np.float64) and not getattr(rt, "supports_fp64", True):
        return None
    descending = bool(eqn.params["descending"])
    shape = x.aval.shape
    n = shape[-1]
    rows = math.prod(shape[:-1])
    total = rows * n
    passes = math.ceil(math.log2(n / _BLOCK)) if n > _BLOCK else 0
    blocks = rows * -(-n // _BLOCK)
    t = CTYPE[dt]
    suffix = f"{t}_{'desc' if descending else 'asc'}"
    init, merge = f"argsort_init_{suffix}", f"argsort_merge_{suffix}"
    before = f"ft_before_{suffix}"
    source = _before(before, t, dt.kind == "f", descending) + f"""
__kernel void {init}(__global const {t}* restrict x, __global {t}* restrict keys, __global long* restrict idx,
                     const long n, const long blocks) {{
    /* one work-item sorts one block of {_BLOCK} entries of a row (a stable insertion sort) */
    const long g = get_global_id(0);
    if (g >= blocks) return;
    const long per_row = (n + {_BLOCK} - 1) / {_BLOCK};
    const long row = (g / per_row) * n, start = (g % per_row) * {_BLOCK};
    const long count = min((long){_BLOCK}, n - start);
    {t} k[{_BLOCK}];
    long v[{_BLOCK}];
    for (long j = 0; j < count; j++) {{
        const {t} key = x[row + start + j];
        long p = j;
        while (p > 0 && {before}(key, k[p - 1])) {{ k[p] = k[p - 1]; v[p] = v[p - 1]; p--; }}
        k[p] = key;
        v[p] = start + j;
    }}
    for (long j = 0; j < count; j++) {{ keys[row + start + j] = k[j]; idx[row + start + j] = v[j]; }}
}}

__kernel void {merge}(__global const {t}* restrict src_keys, __global const long* restrict src,
                      __global {t}* restrict dst_keys, __global long* restrict dst,
                      const long n, const long w, const long total) {{
    const long g = get_global_id(0);
    if (g >= total) return;
    const long row = (g / n) * n, i = g % n;
    const long start = (i / (2 * w)) * 2 * w;
    const long mid = min(start + w, n), end = min(start + 2 * w, n);
    const {t} key = src_keys[g];
    long lo, hi, at;
    if (i < mid) {{   /* left block: count right keys strictly before mine */
        lo = mid; hi = end;
        while (lo < hi) {{
            const long m = (lo + hi) / 2;
            if ({before}(src_keys[row + m], key)) lo = m + 1; else hi = m;
        }}
        at = row + start + (i - start) + (lo - mid);
    }} else {{        /* right block: count left keys not after mine */
        lo = start; hi = mid;
        while (lo < hi) {{
            const long m = (lo + hi) / 2;
            if (!{before}(key, src_keys[row + m])) lo = m + 1; else hi = m;
        }}
        at = row + start + (i - mid) + (lo - start);
    }}
    dst_keys[at] = key;
    dst[at] = src[g];
}}"""

    def run(ctx, inputs):
        out = ctx.alloc(shape, np.int64)
        if not total:
            return [out]
        scratch = [ctx.alloc(shape, dt), ctx.alloc(shape, dt)] + ([ctx.alloc(shape, np.int64)] if passes else [])
        keys = scratch[:2]
        # index buffers ping-pong so that the last pass writes ``out``
        idx = [out] if not passes else [out, scratch[2]] if passes % 2 == 0 else [scratch[2], out]
        ctx.kernels[init](ctx.queue, (blocks,), None, inputs[0].buffer, keys[0].buffer, idx[0].buffer,
                          np.int64(n), np.int64(blocks))
        for p in range(passes):
            a, b = p % 2, (p + 1) % 2
            ctx.kernels[merge](ctx.queue, (total,), None, keys[a].buffer, idx[a].buffer, keys[b].buffer,
                               idx[b].buffer, np.int64(n), np.int64(_BLOCK << p), np.int64(total))
        for buf in scratch:
            ctx.release(buf)
        return [out]

    return Lowered(source, [init, merge], run, (1 + passes) if total else 0,
                   f"argsort (stable merge sort, {rows} rows of {n}, {passes} passes)")
