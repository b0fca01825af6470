"""Measure the per-element costs behind the host-or-kernel estimate (``placement.OP_COSTS``).

For each elementwise operation: ``sum(op(x * c_i) for 8 constants c_i)`` on inputs in (0.1, 0.9),
timed as the numpy backend on 100K elements (numpy's ufuncs on in-cache data, as a host step
runs them) and as one fused OpenCL kernel on 2M elements (the device's arithmetic at all its
compute units), minus the same sum with the operation left out; printed in ns per element, per
compute unit for the kernel, float32 and float64.  Inputs stay well inside normal range: a chain
that shrinks its values into subnormals measures the FPU's slow path instead of the operation.
Run: ``python benchmarks/calibrate_placement.py [op,op,...]`` (about a minute for all).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import numpy as np
from _common import call_times  # noqa: E402

import functrace as ft
import functrace.numpy as fnp
import functrace.scipy.special as fsp
from functrace.backends.opencl import get_runtime
from functrace.backends.opencl.placement import compute_units

TERMS = 8
OPS = {
    "identity": lambda x: x, "add": lambda x: x + 0.5, "mul": lambda x: x * 0.999, "max": lambda x: fnp.maximum(x, 0.5),
    "div": lambda x: 1.0 / x, "select": lambda x: fnp.where(x > 0.5, x, 0.25), "convert": lambda x: x.astype(np.int32).astype(x.dtype),
    "sqrt": fnp.sqrt, "rsqrt": ft.lax.rsqrt, "integer_pow": lambda x: x ** 3, "exp": fnp.exp, "log": fnp.log,
    "log1p": fnp.log1p, "expm1": fnp.expm1, "tanh": fnp.tanh, "logistic": ft.nn.sigmoid, "sin": fnp.sin, "cos": fnp.cos,
    "tan": fnp.tan, "erf": fsp.erf, "pow": lambda x: x ** 0.7, "atan2": lambda x: fnp.arctan2(x, 0.7),
    "rem": lambda x: fnp.remainder(x, 0.3), "floor_div": lambda x: fnp.floor_divide(x, 0.3),
}


def quartile_time(f, reps):
    """The lower quartile of ``reps`` timed calls (after one): steadier than the fastest."""
    times = sorted(call_times(f, repeat=reps))
    return times[len(times) // 4]


def summed(op):
    return lambda x: sum(op(x * (0.9 + 0.025 * i)) for i in range(TERMS))


def costs(op, dtype, rt):
    """(host, kernel) seconds of ``summed(op)``: numpy backend at 100K, one kernel at 2M elements."""
    xh = np.random.default_rng(0).uniform(0.1, 0.9, 100_000).astype(dtype)
    host = ft.jit(summed(op), backend="numpy")
    xk = rt.to_device(np.random.default_rng(0).uniform(0.1, 0.9, 2_000_000).astype(dtype))
    kernel = ft.jit(summed(op), backend="opencl")
    exe = kernel.lower(xk).compile().executable
    assert exe.num_kernel_launches == 1 and exe.num_host_steps == 0, exe.report()
    return quartile_time(lambda: host(xh), 40) / xh.size, quartile_time(lambda: kernel(xk).block_until_ready(), 10) / xk.size


def main():
    rt = get_runtime()
    ft.config.update("opencl_small_program_elements", 0)
    ft.config.update("opencl_host_step_elements", 0)  # every step a kernel
    units = compute_units(rt)
    wanted = sys.argv[1].split(",") if len(sys.argv) > 1 else list(OPS)
    print(f"device {rt.name}, {units} compute units; ns per element: host (numpy), kernel (per compute unit)")
    base = {dt: costs(OPS["identity"], dt, rt) for dt in (np.float32, np.float64)}
    for name in wanted:
        row = []
        for dt in (np.float32, np.float64):
            h, k = costs(OPS[name], dt, rt)
            row += [(h - base[dt][0]) / TERMS * 1e9, (k - base[dt][1]) / TERMS * units * 1e9]
        print(f"    {name!r}: ({row[0]:.2f}, {row[2]:.2f}, {row[1]:.2f}, {row[3]:.2f}),  # host f32, f64; kernel f32, f64", flush=True)


if __name__ == "__main__":
    main()
