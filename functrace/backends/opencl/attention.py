"""OpenCL lowerings of ``attention`` and ``attention_bwd`` (kernels in ``cl_kernels/attention.cl``).

* ``attention`` -> [out, lse]: one flash-style kernel (online softmax over 16-key tiles; the
  T x S logits are never stored).  1 launch.
* ``attention_bwd`` -> [dq, dk, dv]: a dQ kernel (query rows as lanes; it also writes
  ``delta = rowsum(g * out)``, the fully masked rows' ``bias`` and which rows' masked pairs weigh
  nothing to scratch buffers) then a dK/dV
  kernel (keys as lanes) reading them; P is recomputed per tile from the saved lse.  2 launches,
  no atomics.

The mask operand (bool, (batch..., N, T, S), already containing the causal mask) is what the
kernels obey; fully masked tiles are skipped (where the zeros they would add are exact: see
attention.cl), which is how the causal upper triangle costs nothing.  ``causal`` needs no separate
treatment.

``attention.cl`` is specialized by a ``#define`` prefix per (dtype, head_dim, heads, lanes) and
the kernel names carry that suffix (``attention_fwd_f32_h64_n4_w16``).  Unsupported cases
(other dtypes, float64 without device support, empty arrays, head_dim > 256) return None and
run as host steps.

On the gpu kind (``policy.tiled_attention``) the same three kernels come from
``cl_kernels/attention_tiled.cl`` for head_dim <= 128 (larger head dims keep attention.cl): a
work-group of 64 work-items per 64 queries (forward, dQ) or 64 keys (dK/dV) of one batch * head,
one row per work-item with its accumulators in private memory, the other side streamed in tiles
staged in local memory by the whole group (64 rows per tile for float32 up to head_dim 64, fewer
for longer rows, float64 and devices with little local memory: at most 32 KiB of local tiles), tiles that no row of the group keeps
(and whose zeros are exact) skipped by the whole group.  Same launches and scratch rows as the
CPU design.
"""
from __future__ import annotations

import numpy as np

from ...primitives import nn as fused
from ...transforms.optimize import shape_size
from .lowerings import Lowered, device_inputs, real_type, register, specialize

MAX_HEAD_DIM = 256  # private per-work-item tiles are O(head_dim * lanes)
TILED_MAX_HEAD_DIM = 128  # attention_tiled.cl: 2-4 private rows of head_dim per work-item
TILED_WG = 64             # attention_tiled.cl: work-items (queries / keys) per work-group
TILED_LOCAL_BYTES = 32768  # attention_tiled.cl: its two local tiles at most
TILED_LOCAL_RESERVE = 6144  # attention_tiled.cl's other local arrays: mask tile, flags, rows of lse etc.


def _tiled_rows(H: int, itemsize: int, budget: int = TILED_LOCAL_BYTES) -> int:
    """Rows per local tile of attention_tiled.cl: two tiles of head_dim (rounded up to a power of
    two) within ``budget`` bytes, a multiple of 16, at most 64 (0: not even 16 fit)."""
    hp = 1 << (H - 1).bit_length()
    rows = min(64, budget // (2 * hp * itemsize)) // 16 * 16
    return rows if rows >= 16 else 0


def _tiled_budget(rt) -> int:
    """Local-memory bytes attention_tiled.cl's tiles may take on ``rt``'s device (its mask tile,
    flags and rows take the last TILED_LOCAL_RESERVE); 0 where its work-groups of TILED_WG
    work-items do not fit."""
    try:
        if rt.device.max_work_group_size < TILED_WG:
            return 0
        return min(TILED_LOCAL_BYTES, int(rt.device.local_mem_size) - TILED_LOCAL_RESERVE)
    except Exception:
        return TILED_LOCAL_BYTES


def _lanes(rt, ctype: str) -> int:
    """Vector lanes per work-item: the device's native width, at least 8 (4 for double), at most 16."""
    try:
        native = rt.device.native_vector_width_float if ctype == "float" else rt.device.native_vector_width_double
    except Exception:
        native = 0
    return rt.policy.attention_lanes(ctype, native)


def _spec(eqn, rt):
    """Checks shapes and dtypes; returns the specialization or None."""
    q, k, v, mask = (a.aval for a in eqn.inputs[:4])
    if len(q.shape) < 3 or k.shape != v.shape or q.shape[:-3] != k.shape[:-3] or q.shape[-2:] != k.shape[-2:]:
        return None
    dtype = q.dtype
    if k.dtype != dtype or v.dtype != dtype or mask.dtype != np.dtype(bool):
        return None
    rs = real_type(dtype, rt)
    if rs is None:
        return None
    *batch, T, N, H = q.shape
    S = k.shape[-3]
    if mask.shape != tuple(batch) + (N, T, S):
        return None
    if min(T, S, N, H) == 0 or int(np.prod(batch, dtype=np.int64)) == 0 or H > MAX_HEAD_DIM:
        return None
    if T >= 2 ** 31 or S >= 2 ** 31:
        return None
    ctype, dsuf = rs
    B = int(np.prod(batch, dtype=np.int64))
    BK = _tiled_rows(H, np.dtype(dtype).itemsize, _tiled_budget(rt)) if rt.policy.tiled_attention else 0
    if BK and H <= TILED_MAX_HEAD_DIM:
        suffix = f"{dsuf}_h{H}_n{N}_k{BK}"
        defines = {"AF_REAL": ctype, "AF_HD": H, "AF_NH": N, "AF_WG": TILED_WG, "AF_BK": BK, "AF_SUF": suffix}
        return dict(dtype=dtype, B=B, T=T, S=S, N=N, H=H, BK=BK, tiled=True, suffix=suffix,
                    source=specialize("attention_tiled.cl", defines), lse_shape=tuple(batch) + (N, T))
    W = _lanes(rt, ctype)
    suffix = f"{dsuf}_h{H}_n{N}_w{W}"
    defines = {"AT_REAL": ctype, "AT_ITYPE": "int" if ctype == "float" else "long", "AT_W": W, "AT_HD": H,
               "AT_NH": N, "AT_SUF": suffix}
    return dict(dtype=dtype, B=B, T=T, S=S, N=N, H=H, W=W, tiled=False, suffix=suffix,
                source=specialize("attention.cl", defines), lse_shape=tuple(batch) + (N, T))


def _local(rt, dims: int):
    # the cpu kind: one work-item per work-group lets the driver balance the uneven (causal) work
    # across cores; elsewhere the driver chooses.
    return (1,) * dims if rt.policy.one_item_work_groups else None


def _logits(eqn) -> int:
    """Elements attention's work goes by: its logits, queries x keys per head (lse (..., N, T)
    times the S keys of k (..., S, N, H))."""
    return shape_size(eqn.out_vars[1].aval.shape) * eqn.inputs[1].aval.shape[-3]


def _tiled_groups(rows: int, B: int, N: int):
    """(global size, local size) of attention_tiled.cl's kernels: a group per TILED_WG rows."""
    return (-(-rows // TILED_WG) * TILED_WG, B * N), (TILED_WG, 1)


def _tiled_words(sp, rows: str, other: str) -> str:
    return (f"a work-group per {TILED_WG} {rows} x one head, one per work-item, {other} in "
            f"{sp['BK']}-row local-memory tiles, tiles no row keeps skipped")


@register(fused.attention_p, small_on_host=_logits)
def lower_attention(eqn, rt):
    sp = _spec(eqn, rt)
    if sp is None:
        return None
    dtype, B, T, S, N = sp["dtype"], sp["B"], sp["T"], sp["S"], sp["N"]
    if sp["tiled"]:
        name = f"attention_tiled_fwd_{sp['suffix']}"
        gsize, local = _tiled_groups(T, B, N)
        label = (f"attention (OpenCL attention_tiled.cl: {name}, tiled flash forward: "
                 f"{_tiled_words(sp, 'queries', 'K/V')}, online softmax)")
    else:
        name = f"attention_fwd_{sp['suffix']}"
        gsize, local = (-(-T // sp["W"]), B * N), _local(rt, 2)
        label = (f"attention (OpenCL attention.cl: {name}, flash forward, online softmax over 16-key "
                 f"tiles, {sp['W']} query rows per work-item, masked tiles skipped)")
    scale = dtype.type(eqn.params["scale"])
    q_shape, lse_shape = eqn.inputs[0].aval.shape, sp["lse_shape"]

    def run(ctx, inputs):
        q, k, v, mask = device_inputs(eqn, ctx, inputs)
        out = ctx.alloc(q_shape, dtype)
        lse = ctx.alloc(lse_shape, dtype)
        ctx.kernels[name](ctx.queue, gsize, local, q.buffer, k.buffer, v.buffer, mask.buffer, out.buffer,
                          lse.buffer, np.int32(T), np.int32(S), scale)
        return [out, lse]

    return Lowered(sp["source"], [name], run, 1, label)


@register(fused.attention_bwd_p)
def lower_attention_bwd(eqn, rt):
    sp = _spec(eqn, rt)
    if sp is None:
        return None
    avals = [a.aval for a in eqn.inputs]
    q_aval, k_aval = avals[0], avals[1]
    if avals[4].shape != q_aval.shape or avals[6].shape != q_aval.shape or avals[5].shape != sp["lse_shape"] \
            or any(a.dtype != q_aval.dtype for a in (avals[4], avals[5], avals[6])):
        return None
    dtype, B, T, S, N = sp["dtype"], sp["B"], sp["T"], sp["S"], sp["N"]
    if sp["tiled"]:
        names = [f"attention_tiled_dq_{sp['suffix']}", f"attention_tiled_dkdv_{sp['suffix']}"]
        (g_dq, l_dq), (g_dkdv, l_dkdv) = _tiled_groups(T, B, N), _tiled_groups(S, B, N)
        label = (f"attention_bwd (OpenCL attention_tiled.cl: {names[0]} ({_tiled_words(sp, 'queries', 'K/V')}) "
                 f"with delta, then {names[1]} ({_tiled_words(sp, 'keys', 'Q/dO')}); P recomputed from the "
                 f"saved lse)")
    else:
        names = [f"attention_bwd_dq_{sp['suffix']}", f"attention_bwd_dkdv_{sp['suffix']}"]
        g_dq, g_dkdv = (-(-T // sp["W"]), B * N), (-(-S // sp["W"]), B * N)
        l_dq = l_dkdv = _local(rt, 2)
        label = (f"attention_bwd (OpenCL attention.cl: {names[0]} with delta, then {names[1]}; P recomputed "
                 f"from the saved lse per 16-wide tile, masked tiles skipped)")
    scale = dtype.type(eqn.params["scale"])
    q_shape, k_shape, lse_shape = q_aval.shape, k_aval.shape, sp["lse_shape"]

    def run(ctx, inputs):
        q, k, v, mask, out, lse, g = device_inputs(eqn, ctx, inputs)
        k_dq, k_dkdv = ctx.kernels[names[0]], ctx.kernels[names[1]]
        dq = ctx.alloc(q_shape, dtype)
        dk = ctx.alloc(k_shape, dtype)
        dv = ctx.alloc(k_shape, dtype)
        rows = [ctx.alloc(lse_shape, dtype), ctx.alloc(lse_shape, dtype), ctx.alloc(lse_shape, np.uint8)]
        k_dq(ctx.queue, g_dq, l_dq, q.buffer, k.buffer, v.buffer, mask.buffer, out.buffer, lse.buffer, g.buffer,
             dq.buffer, *[r.buffer for r in rows], np.int32(T), np.int32(S), scale)
        k_dkdv(ctx.queue, g_dkdv, l_dkdv, q.buffer, k.buffer, v.buffer, mask.buffer, lse.buffer, g.buffer,
               *[r.buffer for r in rows], dk.buffer, dv.buffer, np.int32(T), np.int32(S), scale)
        for r in rows:  # (delta, bias, weightless) the in-order queue runs their later users after dkdv
            ctx.release(r)
        return [dq, dk, dv]

    return Lowered(sp["source"], names, run, 2, label)
