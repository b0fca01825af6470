"""Host step or kernel: a cost estimate for each step on a CPU device.

On a driver handing kernels to worker threads (PoCL's ``pthread``), a step (a fused elementwise
group, a reduction with the group it absorbs, a layout copy, a hand-written lowering) runs as a
kernel unless numpy on the host is estimated cheaper (the kernel's estimate times ``WORKER_MARGIN``):

* host: per equation ``HOST_STEP_SECONDS`` (numpy's call) plus its elements times numpy's cost
  per element of that operation (``OP_COSTS``' host columns);
* kernel: a dispatch, plus the arithmetic of the whole fused group (``OP_COSTS``' kernel columns)
  shared by the device's compute units;
* a wait for the device (a worker waking, the queue draining: :func:`launch_costs`, measured once
  per process) is charged to whichever side breaks a run: a kernel after a host step (someone
  waits for it), or a host step after a kernel (it waits for the queue).

Costs are per primitive, per side and per float width: numpy's and a kernel's differ by up to
40x either way, so one weight for both sides misplaces steps.  ``ft.config.opencl_host_step_elements``
set to a number replaces the estimate by that element count (tests pin placements with it); a
driver running kernels in the calling thread keeps the element count ``IN_THREAD_ELEMENTS``.
The measurements behind the constants: benchmarks/RESULTS.md ("Measurement notes moved from
the OpenCL backend's docstrings").
"""
from __future__ import annotations

import statistics
import time
from typing import NamedTuple

import numpy as np

from ... import primitives as P
from ...core.config import config
from ...primitives import nn as fused
from ...primitives import special
from ...transforms.optimize import shape_size

HOST_STEP_SECONDS = 1.5e-6  # numpy's cost of one call on a small array, inside a host segment

# ns per element: (host float32, host float64, kernel float32, kernel float64).  Host: numpy's
# ufunc on in-cache data, as a host step runs it; kernel: one compute unit's arithmetic inside a
# fused kernel; ``rms_norm`` per element, ``attention`` per logit (queries x keys per head).
# Measured with ``python benchmarks/calibrate_placement.py``.  Unlisted: ``CHEAP_COSTS``.
OP_COSTS = {
    P.div_p: (0.21, 0.59, 0.18, 0.67),
    P.select_p: (4.9, 6.3, 0.04, 0.03),  # numpy's where on an unpredictable mask
    P.sqrt_p: (0.23, 0.93, 0.22, 0.95),
    P.rsqrt_p: (0.59, 2.07, 0.46, 1.69),
    P.integer_pow_p: (0.25, 1.35, 0.05, 0.04),  # (x ** 3: a chain of multiplies on both sides)
    P.exp_p: (0.46, 0.62, 0.27, 0.97),
    P.log_p: (0.40, 0.84, 0.38, 1.83),
    P.log1p_p: (0.49, 1.15, 0.49, 1.88),
    P.expm1_p: (0.26, 1.08, 1.29, 3.39),
    P.tanh_p: (0.38, 1.50, 0.50, 2.59),
    P.logistic_p: (1.02, 2.39, 0.36, 1.18),
    P.sin_p: (0.56, 5.71, 0.28, 3.93),
    P.cos_p: (1.04, 5.09, 0.35, 4.00),
    P.tan_p: (0.47, 1.36, 20.3, 4.21),
    special.erf_p: (87.2, 87.3, 2.45, 7.08),
    P.pow_p: (1.08, 4.93, 10.3, 143.0),
    P.atan2_p: (0.84, 2.48, 1.07, 3.10),
    P.rem_p: (11.8, 11.4, 2.17, 18.4),
    P.floor_div_p: (16.9, 17.1, 2.56, 20.8),
    fused.rms_norm_p: (1.2, 2.4, 1.0, 2.0),
    fused.attention_p: (4.5, 9.0, 2.9, 5.8),
}
# every other primitive (adds, products, compares, converts, reductions, copies, and the few
# functions not measured yet: cbrt, fmod, erf_inv, erfc): a few instructions per element either way
CHEAP_COSTS = (0.2, 0.3, 0.05, 0.1)


def op_costs(eqn) -> tuple:
    """``OP_COSTS``' row for this equation, its float64 columns when any operand is 8 bytes wide."""
    wide = any(getattr(v.aval.dtype, "itemsize", 4) >= 8 for v in list(eqn.out_vars) + list(eqn.inputs)
               if hasattr(v, "aval"))
    costs = OP_COSTS.get(eqn.primitive, CHEAP_COSTS)
    return (costs[1], costs[3]) if wide else (costs[0], costs[2])


def elements_touched(eqn) -> int:
    """Elements an equation touches: its largest output or input."""
    return max([shape_size(v.aval.shape) for v in eqn.out_vars] +
               [shape_size(v.aval.shape) for v in eqn.inputs if hasattr(v, "aval")])


def host_seconds(eqns) -> float:
    """Estimated time of these equations as numpy calls on the host."""
    return sum(HOST_STEP_SECONDS + elements_touched(e) * op_costs(e)[0] * 1e-9 for e in eqns)


def kernel_seconds(rt, eqns, elements: int) -> float:
    """Estimated time of one kernel over ``elements`` work-items doing all of ``eqns``, enqueued
    after another kernel (no wait: see ``launch_costs``)."""
    work = sum(op_costs(e)[1] for e in eqns) * elements * 1e-9
    return launch_costs(rt).dispatch + work / compute_units(rt)


def compute_units(rt) -> int:
    """The device's compute units (1: PoCL's ``basic``, kernels run in the calling thread)."""
    return max(1, int(getattr(rt.device, "max_compute_units", 1) or 1))


# A driver handing kernels to worker threads (more than one compute unit): a kernel must be
# estimated this much cheaper than the host to launch.  Its launch waits for a worker to wake,
# and for a core when other processes keep them busy, where numpy runs at once in this thread.
WORKER_MARGIN = 1.5


# A driver running kernels in the calling thread (one compute unit, PoCL's ``basic``): steps
# under this many elements are held back and batched into one launch per run of them (see
# planner._batch_small_steps).  The estimate is not used there: with launches of ~2 us it
# makes every step a kernel of its own, each compiled at its first launch, for no gain.
IN_THREAD_ELEMENTS = 4096


# Below this many elements a step stays on the host whatever the estimate says: the estimate
# weighs run time only, and every kernel also compiles at its first launch (seconds for a long
# fused group), which a step this small never earns back.
MIN_KERNEL_ELEMENTS = 1024


def host_reason(rt, eqns, elements: int, after_kernel: bool = False) -> str | None:
    """Why this step (``eqns`` fused over ``elements``) runs on the host -- the report's words --
    or None when it is a kernel.  ``after_kernel``: the step before it in the program launches a
    kernel (the device's wait then falls on a host step, else on a kernel).  The cpu kind only
    (``policy.host_steps``): on the gpu kind every step is a kernel."""
    if rt is None or not rt.policy.host_steps:
        return None
    limit = config.opencl_host_step_elements
    if limit is not None:
        return f"fewer than {limit} elements (opencl_host_step_elements)" if elements < int(limit) else None
    if compute_units(rt) <= 1:
        return (f"fewer than {IN_THREAD_ELEMENTS} elements: below a kernel launch's latency"
                if elements < IN_THREAD_ELEMENTS else None)
    if elements < MIN_KERNEL_ELEMENTS:
        return f"fewer than {MIN_KERNEL_ELEMENTS} elements: a kernel's first-launch compile would cost more"
    host, kernel = host_seconds(eqns), kernel_seconds(rt, eqns, elements)
    wait = launch_costs(rt).wait
    host, kernel = (host + wait, kernel) if after_kernel else (host, kernel + wait)
    if host >= WORKER_MARGIN * kernel:
        return None
    return (f"cheaper on the host: estimated {host * 1e6:.0f} us in numpy vs {kernel * 1e6:.0f} us as a "
            f"kernel, which must win by {WORKER_MARGIN:g}x on a driver that hands kernels to worker threads")


def host_is_cheaper(rt, eqns, elements: int, after_kernel: bool = False) -> bool:
    """Should this step run on the host?  (``host_reason`` says why.)"""
    return host_reason(rt, eqns, elements, after_kernel) is not None


# ------------------------------------------------------------------------- launch costs

class LaunchCosts(NamedTuple):
    """A CPU device's per-kernel costs beyond its arithmetic, in seconds."""
    dispatch: float  # one more kernel enqueued behind others
    wait: float      # a launch on an idle device and the wait for it, beyond a dispatch


_LAUNCH_PROBE = "__kernel void ft_launch_probe(__global float* a) { a[get_global_id(0)] += 1.0f; }"


def launch_costs(rt) -> LaunchCosts:
    """``rt``'s launch costs, measured once per process (~25 ms): not kept on disk, as they move
    with the machine's load and state."""
    cached = getattr(rt, "_launch_costs", None)
    if cached is None:
        cached = rt._launch_costs = _measure_launch(rt)
    return cached


def _measure_launch(rt) -> LaunchCosts:
    """Medians of one launch + wait (15 times) and of 21 back to back (5 times), each after 1 ms
    of other work in this thread, as between the calls of a training loop (PoCL's workers spin a
    while after a kernel, then sleep: a launch right after others is cheaper)."""
    kernel = rt.cl.Kernel(rt.program(_LAUNCH_PROBE), "ft_launch_probe")
    buf = rt.cl.Buffer(rt.context, rt.cl.mem_flags.READ_WRITE | rt.cl.mem_flags.COPY_HOST_PTR,
                       hostbuf=np.zeros(64, np.float32))
    queue = rt.cl.CommandQueue(rt.context, rt.device)

    def timed(launches: int) -> float:
        pause = time.perf_counter() + 1e-3
        while time.perf_counter() < pause:
            pass
        start = time.perf_counter()
        for _ in range(launches):
            kernel(queue, (64,), None, buf)
        queue.finish()
        return time.perf_counter() - start

    timed(1)  # (compiles the work-group function)
    one = statistics.median([timed(1) for _ in range(15)])
    dispatch = max(0.0, (statistics.median([timed(21) for _ in range(5)]) - one) / 20)
    return LaunchCosts(dispatch, max(0.0, one - dispatch))
