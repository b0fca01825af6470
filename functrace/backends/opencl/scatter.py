"""OpenCL lowering of ``scatter`` (``x.at[...]``'s set / multiply / min / max on a flat operand).

The output starts as a copy of the operand; one work-item per update then applies it:

* ``set``: each position's winner is the LARGEST update index aimed at it (``atomic_max`` on a
  per-position int, then one pass writing only the winners), so repeated indices resolve as
  numpy's "last update wins" and the result is deterministic;
* ``min`` / ``max``: a compare-and-swap loop; the result does not depend on the order (NaN
  propagates as ``np.minimum`` / ``np.maximum``), so it is deterministic too;
* ``mul``: each position multiplies the updates aimed at it in the order of their index
  (``gather.IndexRuns``: a stable sort of the indices, no atomics), as ``np.multiply.at`` does: the
  numpy backend's bits, on every call.
"""
from __future__ import annotations

import numpy as np

from ...core import Literal
from ...primitives import scatter as S
from .fusion import CTYPE
from .gather import IndexRuns, index_source
from .lowerings import Lowered, has_int64_atomics, register
from .placement import elements_touched

_UNSIGNED = {"float": ("uint", "atomic_cmpxchg"), "double": ("ulong", "atom_cmpxchg"),
             "int": ("uint", "atomic_cmpxchg"), "long": ("ulong", "atom_cmpxchg"),
             "uint": ("uint", "atomic_cmpxchg"), "ulong": ("ulong", "atom_cmpxchg")}
_INT64_ATOMICS = "#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable\n"


def _combine(op: str, t: str) -> str:
    """C expression combining the current value ``old`` with the update ``v`` (min / max)."""
    better = "v < old" if op == "min" else "v > old"
    if t in ("float", "double"):
        return f"(isnan(old) ? old : ((isnan(v) || {better}) ? v : old))"
    return f"({better} ? v : old)"


def _atomic_update(op: str, t: str) -> str:
    """C: ``ft_scatter_{op}_{t}(addr, v)``, the read-combine-swap loop on the bits of ``t``.  Every
    access to ``addr`` is atomic: the first read is a swap of 0 for 0 (a plain load raced with the
    other work-items' swaps, which Oclgrind reports), and a failed swap returns the value to retry with."""
    ut, cmpxchg = _UNSIGNED[t]
    pragma = _INT64_ATOMICS if ut == "ulong" else ""
    return pragma + f"""
inline void ft_scatter_{op}_{t}(volatile __global {t}* addr, {t} v) {{
    volatile __global {ut}* bits = (volatile __global {ut}*)addr;
    union {{ {ut} u; {t} f; }} cur, upd;
    cur.u = {cmpxchg}(bits, ({ut})0, ({ut})0);
    for (;;) {{
        const {t} old = cur.f;
        upd.f = {_combine(op, t)};
        if (upd.u == cur.u) return;
        const {ut} seen = {cmpxchg}(bits, cur.u, upd.u);
        if (seen == cur.u) return;
        cur.u = seen;
    }}
}}"""


@register(S.scatter_p, small_on_host=elements_touched)
def lower_scatter(eqn, rt) -> Lowered | None:
    x, idx, upd = eqn.inputs
    dt = x.aval.dtype
    op = eqn.params["op"]
    if type(x) is Literal or type(upd) is Literal or dt not in CTYPE or idx.aval.dtype != np.dtype(np.int64) \
            or dt == np.dtype(np.float16):  # (no float16 form: float16.py runs the float32 one)
        return None
    if op != "set" and dt == np.dtype(bool):
        return None
    if dt == np.dtype(np.float64) and not getattr(rt, "supports_fp64", True):
        return None
    if op in ("min", "max") and dt.itemsize == 8 and not has_int64_atomics(rt):
        return None
    n, k = x.aval.shape[0], idx.aval.shape[0]
    if k >= 2 ** 31:
        return None  # the winners of ``set`` are 32-bit ints
    t = CTYPE[dt]
    nbytes = n * dt.itemsize
    index = index_source(idx)
    if op == "set":
        claim, write = f"scatter_claim_{t}", f"scatter_set_{t}"
        source = f"""
__kernel void {claim}(__global int* winner, __global const long* restrict idx, const long K) {{
    const long k = get_global_id(0);
    if (k < K) atomic_max(winner + idx[k], (int)k);
}}

__kernel void {write}(__global {t}* out, __global const int* restrict winner,
                      __global const long* restrict idx, __global const {t}* restrict upd, const long K) {{
    const long k = get_global_id(0);
    if (k < K && winner[idx[k]] == (int)k) out[idx[k]] = upd[k];
}}"""
        names = [claim, write]
    elif op == "mul":
        runs = IndexRuns(rt, "long", n, k)
        apply = f"scatter_mul_{t}"
        source = f"""
__kernel void {apply}(__global const {t}* restrict x, __global const {t}* restrict upd,
                      __global const long* restrict perm, __global const long* restrict starts,
                      __global {t}* restrict out, const long n) {{
    const long i = get_global_id(0);
    if (i >= n) return;
    {t} acc = x[i];
    for (long j = starts[i]; j < starts[i + 1]; j++)
        acc *= upd[perm[j]];
    out[i] = acc;
}}"""
        names = runs.kernel_names + [apply]
    else:
        apply = f"scatter_{op}_{t}"
        source = _atomic_update(op, t) + f"""
__kernel void {apply}(__global {t}* out, __global const long* restrict idx, __global const {t}* restrict upd,
                      const long K) {{
    const long k = get_global_id(0);
    if (k < K) ft_scatter_{op}_{t}(out + idx[k], upd[k]);
}}"""
        names = [apply]

    def run(ctx, inputs):
        out = ctx.alloc((n,), dt)
        if op == "mul" and k and n:
            perm, starts = runs.run(ctx, index(ctx, inputs[1]))
            ctx.kernels[apply](ctx.queue, (n,), None, inputs[0].buffer, inputs[2].buffer, perm.buffer,
                               starts.buffer, out.buffer, np.int64(n))
            ctx.release(perm)
            ctx.release(starts)
            return [out]
        if nbytes:
            ctx.rt.cl.enqueue_copy(ctx.queue, out.buffer, inputs[0].buffer, byte_count=nbytes)
        if not k:
            return [out]
        indices = index(ctx, inputs[1]).buffer
        if op == "set":
            winner = ctx.alloc((n,), np.int32)
            ctx.rt.cl.enqueue_fill_buffer(ctx.queue, winner.buffer, np.int32(-1), 0, n * 4)
            ctx.kernels[names[0]](ctx.queue, (k,), None, winner.buffer, indices, np.int64(k))
            ctx.kernels[names[1]](ctx.queue, (k,), None, out.buffer, winner.buffer, indices, inputs[2].buffer,
                                  np.int64(k))
            ctx.release(winner)
        else:
            ctx.kernels[names[0]](ctx.queue, (k,), None, out.buffer, indices, inputs[2].buffer, np.int64(k))
        return [out]

    if op == "mul":
        launches = (1 + runs.launches) if k and n else (1 if nbytes else 0)
        return Lowered(source, names, run, launches,
                       f"scatter-mul (updates in index order by a stable sort of the indices, {k} updates into {n})",
                       shared=runs.shared)
    launches = (1 if nbytes else 0) + ((3 if op == "set" else 1) if k else 0)
    how = "last update wins, deterministic" if op == "set" else "atomic compare-and-swap, order-free"
    return Lowered(source, names, run, launches, f"scatter-{op} ({how}, {k} updates into {n})")
