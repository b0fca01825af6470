"""float32 matmul, 1024^3 and 2048^3: functrace's OpenCL kernel alone against numpy's BLAS.

Both are timed interleaved in the same run, on the same operands (best of at least ``--repeat``
runs each, more for small sizes: about ``--seconds`` of timing per contender and size):

* **OpenCL kernel**: the launches ``dot_general`` lowers to (packing of A and B, then the
  register-tiled compute kernel of ``cl_kernels/matmul.cl``) on device buffers that already
  hold the operands: no host transfers, no Python tracing, the host-BLAS alternative disabled.
* **numpy**: ``np.matmul(a, b, out=c)`` (OpenBLAS as numpy ships it; ``_common.setup()``
  drops OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE, which slow it down).
* for information, when installed, **PyTorch** ``torch.matmul(a, b, out=c)`` (its threads set to
  the same budget), and **jit end to end**: ``ft.jit(lambda a, b: a @ b, backend="opencl")`` on
  ``ft.Array`` operands, the OpenCL kernels forced (``ft.config.update("matmul", "opencl")``, as
  ``FUNCTRACE_MATMUL=opencl``); adds the output allocation and the per-call overhead.

Threads: the defaults (every core for OpenBLAS and PoCL's workers), then pinned to one thread
(see _common.py; ``FUNCTRACE_BENCH_MODE=pinned OMP_NUM_THREADS=2`` pins two).  Run:
``python benchmarks/bench_matmul.py`` (``--sizes 512,1024`` for other sizes,
``--variants AB,AtB,ABt`` for the transposed layouts backward passes use, ``--dtype float64``).
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import setup, torch_or_none  # noqa: E402

THREADS = setup()

import numpy as np  # noqa: E402

import functrace as ft  # noqa: E402
from functrace.backends.opencl import matmul as mm  # noqa: E402
from functrace.backends.opencl.lowerings import LaunchContext  # noqa: E402
from functrace.backends.opencl.runtime import get_runtime  # noqa: E402


class _Pool:
    """The executable's buffer pool, reduced to what the launches need."""

    def __init__(self, rt):
        self.rt, self.free = rt, {}

    def alloc(self, shape, dtype):
        lst = self.free.get((tuple(shape), np.dtype(dtype)))
        return lst.pop() if lst else self.rt.empty(shape, dtype)

    def release(self, arr):
        self.free.setdefault((arr.shape, arr.dtype), []).append(arr)


def kernel_runner(rt, a_dev, b_dev, n, dtype=np.float32, ta=False, tb=False):
    spec = mm.MatmulSpec(1, n, n, n, ta, tb, np.dtype(dtype))
    plan = mm._Plan(spec, rt, False, "none")
    pool = _Pool(rt)
    ctx = LaunchContext(rt, rt.queue, {}, pool.alloc, pool.release)  # kernels: the shared matmul program
    out = rt.empty((n, n), dtype)

    def run():
        plan.run_opencl(ctx, a_dev, b_dev, out)
        rt.queue.finish()
    return run, out, plan


def best(fn, repeat):
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1024,2048")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--no-jit", action="store_true", help="skip the jit end-to-end column")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--variants", default="AB", help="comma list of AB, AtB, ABt, AtBt (operand layouts; "
                    "numpy gets the same transposed views)")
    args = ap.parse_args()
    rt = get_runtime()
    if rt is None:
        print("no usable OpenCL device: nothing to measure")
        return
    pocl_threads = os.environ.get("POCL_MAX_PTHREAD_COUNT") or f"{rt.device.max_compute_units} (compute units)"
    print(f"device: {rt.name}; numpy/OpenBLAS threads: {THREADS}; process pinned to "
          f"{len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else '?'} core(s); "
          f"PoCL worker threads: {pocl_threads}")
    print(f"blocking: {mm.BLOCK_M}x{mm.BLOCK_N} per work-item, kc {mm.BLOCK_K}")
    rng = np.random.default_rng(0)
    rows = []
    torch = torch_or_none(THREADS)
    ft.config.update("matmul", "opencl")
    dtype = np.dtype(args.dtype)
    for variant, n in [(v, int(s)) for v in args.variants.split(",") for s in args.sizes.split(",")]:
        ta, tb = variant.startswith("At"), variant.endswith("Bt")
        a = rng.standard_normal((n, n)).astype(dtype)  # stored as op(A) (or its transpose when ta)
        b = rng.standard_normal((n, n)).astype(dtype)
        c = np.empty((n, n), dtype)
        a_dev, b_dev = rt.to_device(a), rt.to_device(b)
        run_cl, out, plan = kernel_runner(rt, a_dev, b_dev, n, dtype, ta, tb)
        a_op, b_op = (a.T if ta else a), (b.T if tb else b)
        run_np = lambda: np.matmul(a_op, b_op, out=c)
        if torch is not None:
            ta_, tb_, tc_ = torch.from_numpy(a_op), torch.from_numpy(b_op), torch.from_numpy(np.empty_like(c))
            run_torch = lambda: torch.matmul(ta_, tb_, out=tc_)
        spec = {"AB": "ik,kj->ij", "AtB": "ki,kj->ij", "ABt": "ik,jk->ij", "AtBt": "ki,jk->ij"}[variant]
        jitted = ft.jit(lambda x, y: ft.numpy.einsum(spec, x, y), backend="opencl")
        run_jit = lambda: jitted(a_dev, b_dev).block_until_ready()
        run_cl(), run_np()
        if not args.no_jit:
            run_jit()
        err = np.abs(np.asarray(out) - c).max() / np.abs(c).max()
        assert err < (1e-5 if dtype == np.float32 else 1e-12), f"OpenCL result differs from numpy: relative error {err}"
        t_cl, t_np, t_jit, t_torch = [], [], [], []
        reps = max(args.repeat, int(args.seconds / max(best(run_np, 1), best(run_cl, 1))))
        for _ in range(reps):  # interleaved: both see the same machine load
            t_cl.append(best(run_cl, 1))
            t_np.append(best(run_np, 1))
            if not args.no_jit:
                t_jit.append(best(run_jit, 1))
            if torch is not None:
                t_torch.append(best(run_torch, 1))
        gf = lambda ts: 2 * n ** 3 / min(ts) / 1e9 if ts else float("nan")
        rows.append((variant, n, gf(t_cl), gf(t_np), gf(t_jit), gf(t_torch)))
        print(f"  {variant} {n}: {plan.describe()}; max relative error vs numpy {err:.1e}", flush=True)
    print()
    print(f"{dtype.name} matmul, {THREADS} thread(s)")
    print(f"{'variant':>7} | {'size':>7} | {'OpenCL kernel':>14} | {'numpy BLAS':>11} | {'ratio':>6} | "
          f"{'jit end-to-end':>14} | {'PyTorch':>8}")
    print(f"{'':>7} | {'':>7} | {'GFLOP/s':>14} | {'GFLOP/s':>11} | {'CL/np':>6} | {'GFLOP/s':>14} | {'GFLOP/s':>8}")
    for variant, n, g_cl, g_np, g_jit, g_torch in rows:
        print(f"{variant:>7} | {f'{n}^3':>7} | {g_cl:14.1f} | {g_np:11.1f} | {g_cl / g_np:6.2f} | {g_jit:14.1f} | "
              f"{g_torch:8.1f}")
    if dtype == np.float32:
        print("\ntarget: OpenCL kernel >= 0.50x numpy BLAS GFLOP/s (float32 1024^3 and 2048^3)")


if __name__ == "__main__":
    main()
