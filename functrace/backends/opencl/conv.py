"""OpenCL lowering of ``conv_general_dilated`` (kernel in ``cl_kernels/conv.cl``).

A direct convolution: one work-item per output element, the geometry (sizes, strides, paddings,
dilations, groups) compiled in as constants, so its derivatives (which are convolutions too)
run as the same kernel with other constants: 1 launch per convolution, no im2col buffer.
Spatial ranks above 3, dtypes other than float32/float64 and empty arrays run as host steps.
"""
from __future__ import annotations

import hashlib

from ... import convolution
from ...optimize import shape_size
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
    name = f"conv_general_dilated_{suffix}_{hashlib.sha1(key.encode()).hexdigest()[:12]}"
    defines = {"CV_REAL": ctype, "CV_KN": name, **{f"CV_{k}": v for k, v in geometry.items()}}
    source = (f"\n/* ---- conv.cl [{key}] */\n" + "".join(f"#define {k} {v}\n" for k, v in defines.items())
              + kernel_source("conv.cl") + "\n" + "".join(f"#undef {k}\n" for k in defines))
    shape, items = out_aval.shape, shape_size(out_aval.shape)

    def run(ctx, inputs):
        lhs, rhs = device_inputs(eqn, ctx, inputs)
        out = ctx.alloc(shape, dtype)
        ctx.kernels[name](ctx.queue, (items,), None, lhs.buffer, rhs.buffer, out.buffer)
        return [out]

    return Lowered(source, [name], run, 1, f"conv_general_dilated (OpenCL conv.cl: direct, one work-item per "
                                           f"output, {items} items)")
