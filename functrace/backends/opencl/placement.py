"""Host step or kernel: a cost estimate for a step on a CPU device (issue 15).

On a driver handing kernels to worker threads (PoCL's ``pthread``, the default), a step (a fused
elementwise group, a reduction with the group it absorbs, a layout copy, a hand-written lowering)
runs as a kernel unless numpy on the host is estimated cheaper (the kernel's estimate times
``WORKER_MARGIN``):

* host: per equation ``HOST_STEP_SECONDS`` (numpy's call) plus its elements times numpy's cost
  per element of that operation (``OP_COSTS``);
* kernel: a dispatch, plus the arithmetic of the whole fused group (``OP_COSTS``' kernel column)
  shared by the device's compute units;
* a wait for the device (a worker waking, the queue draining: :func:`launch_costs`, measured once
  per process) is charged to whichever side breaks a run: a kernel after a host step (someone
  waits for it), or a host step after a kernel (it waits for the queue).  Kernels enqueued
  back to back cost 2-6 us each on PoCL 3.1; one launch and its wait 30-110 us.

Costs are per element and per operation, separately for numpy and for kernels, float32 and
float64: the two differ by up to 40x either way (numpy's float32 ``tan`` is 20x faster than
PoCL's, its ``erf`` 35x slower), so one weight for both sides misplaced steps.  Calibrated on a
2-core Skylake (numpy 2.4, PoCL 3.1 ``pthread``), with a 65 us wait: issue 15's 14-operation
chain is estimated at 68 us on the host and 80 us as one kernel on 10K float32 (measured 46 and
105-117 us: host), and at 0.49 ms and 0.19 ms on 100K (measured 0.36 and 0.15-0.29 ms: kernel).
A wait measured under ~35 us puts the 10K chain on the device; ``OpenCLExecutable``'s timed
trial then brings such small programs back to numpy.
``ft.config.opencl_host_step_elements`` set to a number replaces the estimate by that element
count (tests pin placements with it); a driver running kernels in the calling thread keeps the
element count ``IN_THREAD_ELEMENTS``.
"""
from __future__ import annotations

import statistics
import time
from typing import NamedTuple

import numpy as np

from ... import nn
from ... import primitives as P
from ...config import config
from ...optimize import shape_size
from ...scipy import special as scipy_special

HOST_STEP_SECONDS = 1.5e-6  # numpy's cost of one call on a small array, inside a host segment

# ns per element: (host float32, host float64, kernel float32, kernel float64).  Host: numpy's
# ufunc on in-cache data, as a host step runs it; kernel: one compute unit's arithmetic inside a
# fused kernel.  Measured with ``python benchmarks/calibrate_placement.py`` (numpy 2.4, PoCL 3.1
# pthread, Skylake-AVX512); rms_norm per element, attention per logit (queries x keys per head,
# head size 32) from timing the two backends on them.  Unlisted: ``CHEAP_COSTS``.
OP_COSTS = {
    P.div_p: (0.21, 0.59, 0.18, 0.67),
    P.select_p: (4.9, 6.3, 0.04, 0.03),  # numpy's where on an unpredictable mask (a sorted one: 0.7)
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
    nn.erf_p: (87.2, 87.3, 2.45, 7.08),
    P.pow_p: (1.08, 4.93, 10.3, 143.0),
    P.atan2_p: (0.84, 2.48, 1.07, 3.10),
    P.rem_p: (11.8, 11.4, 2.17, 18.4),
    P.floor_div_p: (16.9, 17.1, 2.56, 20.8),
    nn.rms_norm_p: (1.2, 2.4, 1.0, 2.0),
    nn.attention_p: (4.5, 9.0, 2.9, 5.8),
}
CHEAP_COSTS = (0.2, 0.3, 0.05, 0.1)  # adds, products, compares, converts, reductions, copies
# The fused elementwise primitives charged ``CHEAP_COSTS``: a few instructions per element either way
CHEAP = frozenset({
    P.add_p, P.sub_p, P.mul_p, P.neg_p, P.abs_p, P.floor_p, P.ceil_p, P.round_p, P.sign_p, P.max_p, P.min_p,
    P.copysign_p, P.signbit_p, P.is_finite_p, P.eq_p, P.ne_p, P.lt_p, P.le_p, P.gt_p, P.ge_p,
    P.and_p, P.or_p, P.xor_p, P.not_p, P.shift_left_p, P.shift_right_logical_p,
    P.convert_element_type_p, P.bitcast_convert_type_p, P.stop_gradient_p,
})
# The fused elementwise primitives not calibrated yet: charged ``CHEAP_COSTS`` until measured
UNCALIBRATED = frozenset({P.cbrt_p, P.fmod_p, nn.erf_inv_p, scipy_special.erfc_p})


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
# and for a core when other processes keep them busy, where numpy runs at once in this thread:
# measured with 7 other processes busy on 2 cores, the MLP step's 65536-element three-operation
# kernel took 4.7-9.2 ms (launch to finish, median of 30); that group stays on the host on any
# estimate (44 us in numpy vs 6 us of arithmetic and a 65-130 us wait as a kernel).  2.0 (with
# estimates that overrated numpy's transcendentals 2-3x) put issue 15's chain on 100K elements
# on the host whenever the wait measured over ~125 us: 2.4x slower than its kernel.
WORKER_MARGIN = 1.5


# A driver running kernels in the calling thread (one compute unit, PoCL's ``basic``): steps
# under this many elements are held back and batched into one launch per run of them (see
# executable._batch_small_steps), as measured when that was built.  The estimate is not used
# there: with launches of ~2 us it made every step of the MLP step a kernel of its own (21
# launches instead of 5), doubling the first call (4.1 vs 1.9 s: each kernel compiles at its
# first launch) for no measured gain.
IN_THREAD_ELEMENTS = 4096


# Below this many elements a step stays on the host whatever the estimate says: the estimate
# weighs run time only, and every kernel also compiles at its first launch (PoCL 3.1: ~2 s for a
# 256-equation kernel).  The gradient of a 1,000-step elementwise chain on 4 elements, 6,000
# equations, took 48 s to its first result as kernels against 0.3 s on the host.
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
    """``rt``'s launch costs, measured once per process (~25 ms, the probe's binary from the disk
    cache): not kept on disk, as they move with the machine's load and state -- a value cached
    under load (18 us) put a 10K-element chain on a quiet machine's device, where a launch and
    wait took 65-110 us, 2.6x slower than numpy."""
    cached = getattr(rt, "_launch_costs", None)
    if cached is None:
        cached = rt._launch_costs = _measure_launch(rt)
    return cached


def _measure_launch(rt) -> LaunchCosts:
    """Medians of one launch + wait (15 times) and of 21 back to back (5 times), each after 1 ms
    of other work in this thread, as between the calls of a training loop: PoCL's workers spin a
    while after a kernel, then sleep (one launch + wait measured 30-65 us right after others,
    110 us after 1 ms, 166 us after 10 ms)."""
    kernel = rt.cl.Kernel(rt.program(_LAUNCH_PROBE), "ft_launch_probe")
    buf = rt.cl.Buffer(rt.context, rt.cl.mem_flags.READ_WRITE | rt.cl.mem_flags.COPY_HOST_PTR,
                       hostbuf=np.zeros(64, np.float32))
    queue = rt.cl.CommandQueue(rt.context)

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
