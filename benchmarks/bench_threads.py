"""One jitted OpenCL program called from 8 threads: what the design choice was measured on.

Per call (8 threads x ``CALLS`` calls, each reading its outputs back), for
* the shipped design: one in-order queue, each executable launching one call at a time (a lock
  around its launches, not around waiting for the results);
* a lock held through the wait as well (``launch + finish``: no call overlaps another's kernels);
* per-thread queues, as an upper bound: every thread its own queue *and* its own executable
  (kernels, buffer pool, scratch), so nothing is shared and nothing synchronized -- what a
  per-thread-queue design could at best reach (it would also need events between queues for
  arrays passed from thread to thread, and per-thread kernel objects);
* one thread making the calls alone.
Programs: ``repro`` (fused kernels over 131584 elements and a small keepdims sum: the repro of
issue 14), ``mixed`` (the same and a matrix product, host BLAS or OpenCL).
Run: ``OMP_NUM_THREADS=2 python benchmarks/bench_threads.py`` (both cores: PoCL's ``pthread``
device; with 1, its ``basic`` device).
"""
import copy
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import setup  # noqa: E402

setup()

import numpy as np  # noqa: E402

import functrace as ft  # noqa: E402
import functrace.numpy as fnp  # noqa: E402
from functrace.backends.opencl import runtime as cl_runtime  # noqa: E402
from functrace.backends.opencl.executable import OpenCLExecutable  # noqa: E402

THREADS, CALLS, REPEATS = 8, 30, 5


def repro(x, y, w):
    return (fnp.tanh(x * 1.5 + y) * fnp.sin(y) + fnp.sum(x * y, axis=1, keepdims=True) / 257.0,)


def mixed(x, y, w):
    h = repro(x, y, w)[0]
    return h, h @ w, fnp.sum(h * h)


def us_per_call(callers: list, inputs: list) -> float:
    """Each thread i calls ``callers[i]`` CALLS times on its inputs and reads the outputs back."""
    barrier = threading.Barrier(len(callers))

    def work(i):
        barrier.wait()
        for _ in range(CALLS):
            [np.asarray(o) for o in callers[i](*inputs[i])]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(callers))]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return (time.perf_counter() - t0) / (len(callers) * CALLS) * 1e6


def main() -> None:
    rt = cl_runtime.get_runtime()
    rng = np.random.default_rng(0)
    inputs = [[rng.standard_normal(s).astype(np.float32) for s in ((512, 257), (512, 257), (257, 16))]
              for _ in range(THREADS)]
    for program in (repro, mixed):
        f = ft.jit(program, backend="opencl")
        for _ in range(4):  # compiled, and an auto-mode matmul decided
            [np.asarray(o) for o in f(*inputs[0])]
        exe = f.lower(*inputs[0]).compile().executable
        wait_lock = threading.Lock()

        def launch_and_wait(*args):
            with wait_lock:
                outs = exe._launch(args)
                rt.finish()
            return outs

        def own_queue():
            clone = copy.copy(rt)
            clone.queue, clone._in_flight = rt.cl.CommandQueue(rt.context), []
            return OpenCLExecutable(exe.closed, clone)

        variants = {"1 thread": [exe], "8 threads, lock around launches (shipped)": [exe] * THREADS,
                    "8 threads, lock around launch + wait": [launch_and_wait] * THREADS,
                    "8 threads, per-thread queues and executables": [own_queue() for _ in range(THREADS)]}
        times = {name: [] for name in variants}
        for _ in range(REPEATS):  # interleaved, so a noisy moment hits every variant
            for name, callers in variants.items():
                times[name].append(us_per_call(callers, inputs))
        print(f"{program.__name__} on {rt.name} ({rt.device.max_compute_units} compute units), "
              f"us per call, min / median of {REPEATS}:")
        for name, t in times.items():
            print(f"  {name:<48} {min(t):8.0f} / {sorted(t)[REPEATS // 2]:8.0f}")


if __name__ == "__main__":
    main()
