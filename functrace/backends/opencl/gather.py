"""OpenCL lowerings of ``take`` (gather: integer indexing, embeddings) and ``scatter_add`` (its
transpose: the embedding gradient).

Both view the operand as ``(P, n, Q)`` around the indexed axis and the indices as a flat list of
``K``: ``take`` writes ``out[p, k, q] = x[p, idx[k], q]`` (one work-item per output element);
``scatter_add`` copies ``x`` and then adds ``upd[p, k, q]`` into ``out[p, idx[k], q]`` with an
atomic compare-and-swap add (repeated indices accumulate; the order of additions, hence the
last bits of the result, may vary between runs).  Indices are clamped to ``[0, n)`` as the
numpy implementation does.
"""
from __future__ import annotations

import math

import numpy as np

from ... import primitives as P
from ...core import Literal
from .fusion import CTYPE
from .layout import bits_type
from .lowerings import Lowered, has_int64_atomics, register
from .placement import elements_touched

_ATOMIC_ADD = {
    "float": """
inline void ft_atomic_add_float(volatile __global float* addr, float v) {
    union { unsigned int u; float f; } old, upd;
    do { old.f = *addr; upd.f = old.f + v; }
    while (atomic_cmpxchg((volatile __global unsigned int*)addr, old.u, upd.u) != old.u);
}""",
    "double": """
#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable
inline void ft_atomic_add_double(volatile __global double* addr, double v) {
    union { unsigned long u; double f; } old, upd;
    do { old.f = *addr; upd.f = old.f + v; }
    while (atom_cmpxchg((volatile __global unsigned long*)addr, old.u, upd.u) != old.u);
}""",
}


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
    if float_only and dt.kind != "f" or float_only and dt == np.dtype(np.float16):  # (no float16 atomics)
        return False
    if dt == np.dtype(np.float64) and not getattr(rt, "supports_fp64", True):
        return False
    if float_only and dt.itemsize == 8 and not has_int64_atomics(rt):  # (the atomic add of doubles)
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


@register(P.scatter_add_p, small_on_host=elements_touched)
def lower_scatter_add(eqn, rt) -> Lowered | None:
    if not _supported(eqn, rt, float_only=True):
        return None
    x, idx, upd = eqn.inputs
    axis = eqn.params["axis"]
    P, n, Q, K = _geometry(x.aval.shape, idx.aval.shape, axis)
    total = P * K * Q
    t, it = CTYPE[x.aval.dtype], CTYPE[idx.aval.dtype]
    name = f"scatter_add_{t}_{it}"
    source = _ATOMIC_ADD[t] + f"""
__kernel void {name}(__global {t}* out, __global const {it}* restrict idx, __global const {t}* restrict upd,
                     const long P, const long n, const long Q, const long K) {{
    const long g = get_global_id(0);
    if (g >= P * K * Q) return;
    const long q = g % Q, k = (g / Q) % K, p = g / (Q * K);
    long i = (long)idx[k];
    i = i < 0 ? 0 : (i >= n ? n - 1 : i);
    ft_atomic_add_{t}(out + (p * n + i) * Q + q, upd[g]);
}}"""
    shape, dtype = x.aval.shape, x.aval.dtype
    nbytes = math.prod(shape) * dtype.itemsize
    index = index_source(idx)

    def run(ctx, inputs):
        out = ctx.alloc(shape, dtype)
        if nbytes:
            ctx.rt.cl.enqueue_copy(ctx.queue, out.buffer, inputs[0].buffer, byte_count=nbytes)
        if total:
            ctx.kernels[name](ctx.queue, (total,), None, out.buffer, index(ctx, inputs[1]).buffer, inputs[2].buffer,
                              np.int64(P), np.int64(n), np.int64(Q), np.int64(K))
        return [out]

    return Lowered(source, [name], run, (1 if total else 0) + (1 if nbytes else 0),
                   f"scatter-add ({name}: copy + atomic adds, {P}x{K}x{Q} updates)")
