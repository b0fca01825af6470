"""OpenCL lowerings of ``take`` (gather: integer indexing, embeddings) and ``scatter_add`` (its
transpose: the embedding gradient).

Both view the operand as ``(P, n, Q)`` around the indexed axis and the indices as a flat list of
``K``: ``take`` writes ``out[p, k, q] = x[p, idx[k], q]`` (one work-item per output element);
``scatter_add`` adds ``upd[p, k, q]`` into ``out[p, idx[k], q]`` in the order of ``k`` (repeated
indices accumulate as ``np.add.at`` does: the same bits as the numpy backend on every call; no
atomics).  Indices are clamped to ``[0, n)`` as the numpy implementation does.
"""
from __future__ import annotations

import math

import numpy as np

from ... import primitives as P
from ...core import JaxprEqn, Literal, ShapedArray, Var
from ...primitives import sorting
from .fusion import CTYPE
from .layout import bits_type
from .lowerings import Lowered, register
from .placement import elements_touched
from .sort import lower_argsort


def _geometry(x_shape, idx_shape, axis):
    P = math.prod(x_shape[:axis])
    n = x_shape[axis]
    Q = math.prod(x_shape[axis + 1:])
    K = math.prod(idx_shape)
    return P, n, Q, K


def index_source(idx):
    """A run-time getter for the index array: the step's input, or a device copy of a literal
    (a scalar index is inlined in the IR), made once."""
    if type(idx) is not Literal:
        return lambda ctx, given: given
    cache = []

    def get(ctx, given):
        if not cache:
            cache.append(ctx.rt.to_device(np.asarray(idx.val).reshape(1)))
        return cache[0]
    return get


def _supported(eqn, rt, float_only: bool) -> bool:
    x, idx = eqn.inputs[0], eqn.inputs[1]
    dt = x.aval.dtype
    if dt not in CTYPE or dt == np.dtype(bool) or idx.aval.dtype not in (np.dtype(np.int64), np.dtype(np.int32)):
        return False
    if float_only and dt.kind != "f" or float_only and dt == np.dtype(np.float16):  # (float16: float16.py runs the float32 form)
        return False
    if dt == np.dtype(np.float64) and not getattr(rt, "supports_fp64", True):
        return False
    # only the index may be an inline literal (a scalar index); data operands must be arrays
    return not any(type(a) is Literal for i, a in enumerate(eqn.inputs) if i != 1)


@register(P.take_p, small_on_host=elements_touched)
def lower_take(eqn, rt) -> Lowered | None:
    if not _supported(eqn, rt, float_only=False):
        return None
    x, idx = eqn.inputs
    axis = eqn.params["axis"]
    P, n, Q, K = _geometry(x.aval.shape, idx.aval.shape, axis)
    total = P * K * Q
    t, it = bits_type(x.aval.dtype), CTYPE[idx.aval.dtype]
    name = f"gather_{t}_{it}"
    source = f"""
__kernel void {name}(__global const {t}* restrict x, __global const {it}* restrict idx,
                     __global {t}* restrict out, const long P, const long n, const long Q, const long K) {{
    const long g = get_global_id(0);
    if (g >= P * K * Q) return;
    const long q = g % Q, k = (g / Q) % K, p = g / (Q * K);
    long i = (long)idx[k];
    i = i < 0 ? 0 : (i >= n ? n - 1 : i);
    out[g] = x[(p * n + i) * Q + q];
}}"""
    out_shape = eqn.out_vars[0].aval.shape
    dtype = x.aval.dtype
    index = index_source(idx)

    def run(ctx, inputs):
        out = ctx.alloc(out_shape, dtype)
        if total:
            ctx.kernels[name](ctx.queue, (total,), None, inputs[0].buffer, index(ctx, inputs[1]).buffer, out.buffer,
                              np.int64(P), np.int64(n), np.int64(Q), np.int64(K))
        return [out]

    return Lowered(source, [name], run, 1 if total else 0, f"gather ({name}, {P}x{K}x{Q} elements)")


class IndexRuns:
    """The updates aimed at each of ``n`` positions, in the order of their place ``k`` among the ``K``
    (``idx`` clamped to ``[0, n)``): a stable argsort of the indices (``sort.py``), then by binary
    search the start of each position's run in sorted order.  What makes a scatter deterministic,
    and in ``np.add.at``'s order, without atomics.  ``shared`` holds the kernels' sources, each once
    per program whatever else needs them."""

    def __init__(self, rt, index_ctype: str, n: int, K: int):
        self.n, self.K = n, K
        self.order = lower_argsort(JaxprEqn(sorting.argsort_p, [Var(ShapedArray((K,), np.dtype(np.int64)))],
                                            {"descending": False}, [Var(ShapedArray((K,), np.dtype(np.int64)))]), rt)
        self.keys, self.starts = f"index_runs_keys_{index_ctype}", "index_runs_starts"
        self.shared = {"argsort_long_asc": self.order.source, self.keys: f"""
__kernel void {self.keys}(__global const {index_ctype}* restrict idx, __global long* restrict keys, const long n,
                          const long K) {{
    const long k = get_global_id(0);
    if (k < K) keys[k] = clamp((long)idx[k], 0L, n - 1);
}}""", self.starts: f"""
__kernel void {self.starts}(__global const long* restrict keys, __global const long* restrict perm,
                            __global long* restrict starts, const long n, const long K) {{
    /* starts[i]: the first place in sorted order of a key >= i (starts[n] = K) */
    const long i = get_global_id(0);
    if (i > n) return;
    long lo = 0, hi = K;
    while (lo < hi) {{
        const long m = (lo + hi) / 2;
        if (keys[perm[m]] < i) lo = m + 1; else hi = m;
    }}
    starts[i] = lo;
}}"""}
        self.kernel_names = self.order.kernel_names + [self.keys, self.starts]
        self.launches = 2 + self.order.launches

    def run(self, ctx, idx) -> tuple:
        """(perm, starts) device arrays for the index array ``idx`` (K > 0): the caller releases them."""
        n, K = np.int64(self.n), np.int64(self.K)
        key = ctx.alloc((self.K,), np.int64)
        ctx.kernels[self.keys](ctx.queue, (self.K,), None, idx.buffer, key.buffer, n, K)
        (perm,) = self.order.run(ctx, [key])
        starts = ctx.alloc((self.n + 1,), np.int64)
        ctx.kernels[self.starts](ctx.queue, (self.n + 1,), None, key.buffer, perm.buffer, starts.buffer, n, K)
        ctx.release(key)
        return perm, starts


@register(P.scatter_add_p, small_on_host=elements_touched)
def lower_scatter_add(eqn, rt) -> Lowered | None:
    """``out[p, i, q] = x[p, i, q] + upd[p, k, q]`` summed over the ``k`` with ``idx[k] == i`` in the
    order of ``k`` (``IndexRuns``): ``np.add.at``'s order, so the numpy backend's bits on every call;
    a work-item per output element adds its run."""
    if not _supported(eqn, rt, float_only=True):
        return None
    x, idx, upd = eqn.inputs
    axis = eqn.params["axis"]
    P, n, Q, K = _geometry(x.aval.shape, idx.aval.shape, axis)
    t = CTYPE[x.aval.dtype]
    runs = IndexRuns(rt, CTYPE[idx.aval.dtype], n, K)
    add = f"scatter_add_{t}"
    source = f"""
__kernel void {add}(__global const {t}* restrict x, __global const {t}* restrict upd,
                    __global const long* restrict perm, __global const long* restrict starts,
                    __global {t}* restrict out, const long P, const long n, const long Q, const long K) {{
    const long g = get_global_id(0);
    if (g >= P * n * Q) return;
    const long q = g % Q, i = (g / Q) % n, p = g / (Q * n);
    {t} acc = x[g];
    for (long j = starts[i]; j < starts[i + 1]; j++)
        acc += upd[(p * K + perm[j]) * Q + q];
    out[g] = acc;
}}"""
    shape, dtype = x.aval.shape, x.aval.dtype
    total = P * n * Q
    index = index_source(idx)

    def run(ctx, inputs):
        out = ctx.alloc(shape, dtype)
        if not total:
            return [out]
        if not K:
            ctx.rt.cl.enqueue_copy(ctx.queue, out.buffer, inputs[0].buffer, byte_count=total * dtype.itemsize)
            return [out]
        perm, starts = runs.run(ctx, index(ctx, inputs[1]))
        ctx.kernels[add](ctx.queue, (total,), None, inputs[0].buffer, inputs[2].buffer, perm.buffer, starts.buffer,
                         out.buffer, *(np.int64(v) for v in (P, n, Q, K)))
        ctx.release(perm)
        ctx.release(starts)
        return [out]

    return Lowered(source, runs.kernel_names + [add], run, (1 + runs.launches if K else 1) if total else 0,
                   f"scatter-add ({add}: updates in index order by a stable sort of the indices, "
                   f"{P}x{K}x{Q} updates)", shared=runs.shared)
