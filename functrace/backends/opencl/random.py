"""OpenCL lowering of ``threefry2x32`` (``ft.random``'s hash; kernel in ``cl_kernels/threefry.cl``):
one work-item per output element, 1 launch.  Each operand is read where it broadcasts to the
output element (an index expression of integer constants, generated per layout), so keys of a
``vmap`` and counters of a sample shape need no materialized broadcast.  The bits-to-floats
arithmetic after it (shift, or, bitcast, ...) is ordinary elementwise primitives, fused into the
generated kernels."""
from __future__ import annotations

import hashlib

import numpy as np

from ...primitives import random_bits
from ...transforms.optimize import shape_size
from .fusion import access_for
from .lowerings import Lowered, device_inputs, kernel_source, register


@register(random_bits.threefry2x32_p)
def lower_threefry2x32(eqn, rt) -> Lowered | None:
    """One launch of threefry.cl specialized to the operands' broadcast layout (its kernel name)."""
    out_shape = tuple(eqn.out_vars[0].aval.shape)
    n = shape_size(out_shape)
    reads = {f"TF_AT_{w}(i)": f"({access_for(out_shape, tuple(a.aval.shape)).index('(i)')})"  # as fused kernels read
             for w, a in zip(("K1", "K2", "X1", "X2"), eqn.inputs)}
    layout = repr((out_shape, [a.aval.shape for a in eqn.inputs]))
    name = "threefry2x32_" + hashlib.sha1(layout.encode()).hexdigest()[:12]
    head = f"#define TF_NAME {name}\n" + "".join(f"#define {k} {v}\n" for k, v in reads.items())
    tail = "#undef TF_NAME\n" + "".join(f"#undef {k.split('(')[0]}\n" for k in reads)
    source = f"\n/* ---- threefry.cl [{layout}] */\n" + head + kernel_source("threefry.cl") + "\n" + tail

    def run(ctx, inputs):
        k1, k2, x1, x2 = device_inputs(eqn, ctx, inputs)
        y1, y2 = ctx.alloc(out_shape, eqn.out_vars[0].aval.dtype), ctx.alloc(out_shape, eqn.out_vars[1].aval.dtype)
        if n:
            ctx.kernels[name](ctx.queue, (n,), None, k1.buffer, k2.buffer, x1.buffer, x2.buffer,
                              y1.buffer, y2.buffer, np.int64(n))
        return [y1, y2]

    return Lowered(source, [name], run, 1 if n else 0,
                   f"threefry2x32 (OpenCL threefry.cl: {name}, one work-item per element of {n})")
