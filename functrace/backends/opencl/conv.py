"""OpenCL lowering of ``conv_general_dilated`` (kernels in ``cl_kernels/conv.cl``), the geometry
(sizes, strides, paddings, dilations, groups) compiled in as constants; its derivatives are
convolutions too, so they lower the same way.

* few output features per group or a short contraction (a de-blur's 1-channel 9x9 kernel, a
  depthwise conv, a kernel gradient): a direct convolution, one work-item per output, 1 launch;
* otherwise (CNN layers): an im2col copy kernel into (groups, I*K, N*P) columns, then the
  matmul lowering (``matmul.lower_matmul``: OpenCL tiles or host BLAS, as for ``dot_general``)
  of the (groups, O/groups, I*K) kernel with them, then a swap of the (O, N) axes when N > 1.

Spatial ranks above 3, dtypes other than float32/float64 and empty arrays run as host steps.
"""
from __future__ import annotations

import hashlib

import numpy as np

from ...primitives import convolution
from ...transforms.optimize import shape_size
from . import matmul
from .lowerings import Lowered, device_inputs, kernel_source, real_type, register


def _geometry(eqn) -> dict | None:
    """The #defines of ``conv.cl`` for this equation (spatial dims padded to 3 with 1s), or None."""
    lhs, rhs = (a.aval for a in eqn.inputs)
    out = eqn.out_vars[0].aval
    nsp = len(lhs.shape) - 2
    if nsp > 3:
        return None
    lead = 3 - nsp
    p = eqn.params
    pad3 = lambda values, fill: (fill,) * lead + tuple(values)
    geometry = {"N": lhs.shape[0], "C": lhs.shape[1], "O": rhs.shape[0], "I": rhs.shape[1], "NO": out.shape[0],
                "FG": p["feature_group_count"], "BG": p["batch_group_count"]}
    for letter, values in (("", lhs.shape[2:]), ("K", rhs.shape[2:]), ("O", out.shape[2:])):
        geometry.update({f"{letter}{axis}": v for axis, v in zip("DHW", pad3(values, 1))})
    for letter, values in (("S", p["window_strides"]), ("P", [lo for lo, _ in p["padding"]]),
                           ("L", p["lhs_dilation"]), ("R", p["rhs_dilation"])):
        geometry.update({f"{letter}{axis}": v for axis, v in zip("DHW", pad3(values, 0 if letter == "P" else 1))})
    return {k: int(v) for k, v in geometry.items()}


def _use_matmul(geometry: dict) -> bool:
    """Many output features per group and a long contraction: im2col + matmul (the direct kernel
    does one scalar product per output; BLAS-like tiles reuse each load many times)."""
    taps = geometry["I"] * geometry["KD"] * geometry["KH"] * geometry["KW"]
    return geometry["O"] // (geometry["FG"] * geometry["BG"]) >= 8 and taps >= 16


@register(convolution.conv_general_dilated_p)
def lower_conv_general_dilated(eqn, rt):
    dtype = eqn.inputs[0].aval.dtype
    spec = real_type(dtype, rt)
    geometry = _geometry(eqn)
    out_aval = eqn.out_vars[0].aval
    if spec is None or geometry is None or shape_size(out_aval.shape) == 0 \
            or any(shape_size(a.aval.shape) == 0 for a in eqn.inputs):
        return None
    ctype, suffix = spec
    key = ",".join(f"{k}={v}" for k, v in sorted(geometry.items()))
    tag = f"{suffix}_{hashlib.sha1(key.encode()).hexdigest()[:12]}"
    matmul_path = _use_matmul(geometry)
    names = ({"CV_IM2COL": f"conv_im2col_{tag}", "CV_SWAP": f"conv_swap_{tag}"} if matmul_path
             else {"CV_KN": f"conv_direct_{tag}"})
    defines = {"CV_REAL": ctype, **names, **{f"CV_{k}": v for k, v in geometry.items()}}
    source = (f"\n/* ---- conv.cl [{key}] */\n" + "".join(f"#define {k} {v}\n" for k, v in defines.items())
              + kernel_source("conv.cl") + "\n" + "".join(f"#undef {k}\n" for k in defines))
    shape, items = out_aval.shape, shape_size(out_aval.shape)
    if not matmul_path:
        def run(ctx, inputs):
            lhs, rhs = device_inputs(eqn, ctx, inputs)
            out = ctx.alloc(shape, dtype)
            ctx.kernels[names["CV_KN"]](ctx.queue, (items,), None, lhs.buffer, rhs.buffer, out.buffer)
            return [out]

        return Lowered(source, [names["CV_KN"]], run, 1, f"conv_general_dilated (OpenCL conv.cl: direct, one "
                                                          f"work-item per output, {items} items)")
    groups = geometry["FG"] * geometry["BG"]
    positions = geometry["NO"] * geometry["OD"] * geometry["OH"] * geometry["OW"]
    taps = geometry["I"] * geometry["KD"] * geometry["KH"] * geometry["KW"]
    o_per_group = geometry["O"] // groups
    product = matmul.lower_matmul(matmul.MatmulSpec(groups, o_per_group, positions, taps, False, False,
                                                    np.dtype(dtype)), rt)
    swap = geometry["NO"] > 1  # the product is (O, N, P): swapped into (N, O, P) unless N == 1
    product.extra["out_shape"] = (geometry["O"], positions) if swap else tuple(shape)

    def run_im2col(ctx, inputs):
        lhs, rhs = device_inputs(eqn, ctx, inputs)
        cols = ctx.alloc((groups * taps * positions,), dtype)
        ctx.kernels[names["CV_IM2COL"]](ctx.queue, (cols.size // geometry["OW"],), None, lhs.buffer, cols.buffer)
        (prod,) = product.run(ctx, [rhs, cols])
        ctx.release(cols)
        if not swap:
            return [prod]
        out = ctx.alloc(shape, dtype)
        ctx.kernels[names["CV_SWAP"]](ctx.queue, (geometry["NO"] * geometry["O"],), None, prod.buffer, out.buffer)
        ctx.release(prod)
        return [out]

    kernels = [names["CV_IM2COL"]] + ([names["CV_SWAP"]] if swap else []) + product.kernel_names
    return Lowered(source + product.source, kernels, run_im2col, 1 + swap + product.launches,
                   f"conv_general_dilated (OpenCL conv.cl: im2col {groups}x{taps}x{positions}, then "
                   f"{product.label}{', then an (O, N) swap' if swap else ''})", shared=dict(product.shared))
