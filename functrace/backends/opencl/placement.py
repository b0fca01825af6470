"""Host step or kernel: a cost estimate for a step on a CPU device (issue 15).

On a driver handing kernels to worker threads (PoCL's ``pthread``, the default), a step (a fused
elementwise group, a reduction with the group it absorbs, a layout copy) runs as a kernel
unless numpy on the host is estimated cheaper (the kernel's estimate times ``WORKER_MARGIN``):

* host: per equation ``HOST_STEP_SECONDS`` (numpy's call) plus ``elements x (1 + weight) x
  NS_PER_WEIGHT`` (one pass over memory per equation, then its arithmetic);
* kernel: the device's launch latency (a launch and a wait, :func:`launch_seconds`, measured
  once per device and thread budget and kept in the disk cache) plus the arithmetic of the whole
  fused group over the step's elements, shared by the device's compute units.

Weights are per element, relative to an add: a transcendental costs about eight adds in numpy's
SIMD loops and in PoCL's vector code alike (``OP_WEIGHTS``).  Calibrated on a 2-core Skylake
(PoCL 3.1 ``pthread``, launch + wait ~30 us): a 14-operation chain of 7 transcendentals on 100K
float32 is estimated at 0.97 ms on the host (measured 1.0-1.35 ms) and 0.41 ms as one kernel
(measured 0.33 ms), so it runs as a kernel, where the element count alone (under 131072) had
put it on the host; one add crosses over at ~470K elements with ``WORKER_MARGIN`` (the element
rule: 131072).
``ft.config.opencl_host_step_elements`` set to a number replaces the estimate by that element
count (tests pin placements with it); a driver running kernels in the calling thread keeps the
element count ``IN_THREAD_ELEMENTS``.
"""
from __future__ import annotations

import hashlib
import os
import time

from ...config import config
from ...optimize import shape_size

HOST_STEP_SECONDS = 3e-6  # numpy's cost of one call on a small array, inside a host segment
NS_PER_WEIGHT = 0.12      # per element and unit of weight (an add's arithmetic, or a pass over memory)

_CHEAP = 1
OP_WEIGHTS = {
    **dict.fromkeys(("div", "sqrt", "rsqrt", "integer_pow"), 2),
    "rms_norm": 4,  # (a hand-written kernel) squares, a row mean, rsqrt, two products
    "attention": 16,  # (per logit) two products of head size, exp, max, sum, a division
    **dict.fromkeys(("rem", "floor_div"), 4),
    **dict.fromkeys(("exp", "log", "expm1", "log1p", "logistic", "tanh", "sin", "cos", "erf"), 8),
    **dict.fromkeys(("tan", "pow", "atan2"), 16),
}


def weight(eqn) -> int:
    """Relative cost per element of one equation (an add is 1)."""
    return OP_WEIGHTS.get(eqn.primitive.name, _CHEAP)


def elements_touched(eqn) -> int:
    """Elements an equation touches: its largest output or input."""
    return max([shape_size(v.aval.shape) for v in eqn.out_vars] +
               [shape_size(v.aval.shape) for v in eqn.inputs if hasattr(v, "aval")])


def host_seconds(eqns) -> float:
    """Estimated time of these equations as numpy calls on the host."""
    return sum(HOST_STEP_SECONDS + elements_touched(e) * (1 + weight(e)) * NS_PER_WEIGHT * 1e-9 for e in eqns)


def kernel_seconds(rt, eqns, elements: int) -> float:
    """Estimated time of one kernel over ``elements`` work-items doing all of ``eqns``."""
    work = sum(weight(e) for e in eqns) * elements * NS_PER_WEIGHT * 1e-9
    return launch_seconds(rt) + work / compute_units(rt)


def compute_units(rt) -> int:
    """The device's compute units (1: PoCL's ``basic``, kernels run in the calling thread)."""
    return max(1, int(getattr(rt.device, "max_compute_units", 1) or 1))


# A driver handing kernels to worker threads (more than one compute unit): a kernel must be
# estimated this much cheaper than the host to launch.  Its launch waits for a worker to wake,
# and for a core when other processes keep them busy, where numpy runs at once in this thread:
# measured with 7 other processes busy on 2 cores, the MLP step's 65536-element three-operation
# kernel took 4.7-9.2 ms (launch to finish, median of 30) against an estimate of 30 us.  Fewer
# launches are the robust choice on a shared machine; on a quiet one those groups were measured
# no faster as kernels either (2.46 vs 2.26-2.30 ms a step), and they stay on the host here (56
# us estimated in numpy, 2 x 30 us as kernels), while the 14-operation chain on 100K elements
# (0.97 ms vs 2 x 0.41 ms) still runs as one kernel.
WORKER_MARGIN = 2.0


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


def host_reason(rt, eqns, elements: int) -> str | None:
    """Why this step (``eqns`` fused over ``elements``) runs on the host -- the report's words --
    or None when it is a kernel.  CPU devices only: elsewhere every step is a kernel."""
    if rt is None or not rt.is_cpu:
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
    if host >= WORKER_MARGIN * kernel:
        return None
    return (f"cheaper on the host: estimated {host * 1e6:.0f} us in numpy vs {kernel * 1e6:.0f} us as a "
            f"kernel, which must win by {WORKER_MARGIN:g}x on a driver that hands kernels to worker threads")


def host_is_cheaper(rt, eqns, elements: int) -> bool:
    """Should this step run on the host?  (``host_reason`` says why.)"""
    return host_reason(rt, eqns, elements) is not None


# ------------------------------------------------------------------------- launch latency

_LAUNCH_PROBE = "__kernel void ft_launch_probe(__global float* a) { a[get_global_id(0)] += 1.0f; }"
_THREAD_VARIABLES = ("POCL_MAX_PTHREAD_COUNT", "POCL_DEVICES", "OMP_NUM_THREADS")


def _latency_key(rt) -> str:
    """Per device, driver thread settings and cores this process may use."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"launch-latency (median of 20)|{rt.fingerprint}|" + "|".join(os.environ.get(v, "") for v in _THREAD_VARIABLES) + f"|{cores}"


def launch_seconds(rt) -> float:
    """One launch of a tiny kernel and the wait for it on ``rt`` (the median of 20, after one
    that compiles it: the fastest was 8 us on PoCL's pthread device where launches inside a
    program cost 20-50 us): measured once per process, or read from the disk cache where an
    earlier process with the same device and thread settings measured it (~50 ms on a fresh
    cache)."""
    cached = getattr(rt, "_launch_seconds", None)
    if cached is not None:
        return cached
    from .runtime import cache_dir, read_entry, write_entry
    key = _latency_key(rt)
    path = os.path.join(cache_dir(), "launch-" + hashlib.sha256(key.encode()).hexdigest()[:16] + ".txt")
    payload = read_entry(path, key)
    try:
        seconds = float(payload.decode()) if payload is not None else None
    except ValueError:
        seconds = None
    if seconds is None:
        seconds = _measure_launch(rt)
        try:
            write_entry(path, key, repr(seconds).encode())
        except OSError:
            pass  # a cache we cannot write only costs the measurement again
    rt._launch_seconds = seconds
    return seconds


def _measure_launch(rt) -> float:
    import numpy as np
    kernel = rt.cl.Kernel(rt.program(_LAUNCH_PROBE), "ft_launch_probe")
    buf = rt.cl.Buffer(rt.context, rt.cl.mem_flags.READ_WRITE | rt.cl.mem_flags.COPY_HOST_PTR,
                       hostbuf=np.zeros(64, np.float32))
    queue = rt.cl.CommandQueue(rt.context)
    times = []
    for _ in range(21):
        t0 = time.perf_counter()
        kernel(queue, (64,), None, buf)
        queue.finish()
        times.append(time.perf_counter() - t0)
    return sorted(times[1:])[10]  # (the first compiles the work-group function)
