"""Shared benchmark set-up: thread counts and a BLAS that is not slowed down by the host.

Some hosts set OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE (work-arounds for old OpenBLAS builds);
they make a current numpy's BLAS about 2.5x slower, which would handicap numpy and functrace
against JAX / PyTorch (which do not use OpenBLAS).  ``setup()`` re-runs the script without
them, once, and says so.  Threads default to 1 for every library (OMP_NUM_THREADS overrides), and the process is
pinned to that many cores.  PoCL gets the same budget: with one thread its single-threaded
``basic`` CPU device (same compiler; kernels run in the calling thread), else the ``pthread``
device with that many workers.  Measured on this machine: a launch + finish costs ~2-8 us on
``basic`` and ~19-50 us on ``pthread`` with one worker (thread hand-off per launch).
"""
import os
import sys


def setup() -> str:
    if os.environ.get("OPENBLAS_CORETYPE") or os.environ.get("OPENBLAS_L2_SIZE"):
        env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
        print("(re-running without OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE, which slow numpy's BLAS)", flush=True)
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    threads = os.environ.setdefault("OMP_NUM_THREADS", "1")
    # XLA's CPU runtime starts its own threads whatever its flags say; pinning the process to
    # `threads` cores holds every library to the same budget.
    if hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))[:int(threads)]
        os.sched_setaffinity(0, cores)
    for var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "POCL_MAX_PTHREAD_COUNT"):
        os.environ.setdefault(var, threads)
    if threads == "1":
        os.environ.setdefault("POCL_DEVICES", "basic")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=" + threads)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    return threads


def best_of(fn, repeat: int = 7, warmup: int = 1, warmup_seconds: float = 0.0) -> float:
    """Seconds of the fastest of ``repeat`` calls after ``warmup`` calls, and at least
    ``warmup_seconds`` of calls (noise only adds time; some paths need a while to settle)."""
    import time
    start = time.perf_counter()
    for _ in range(warmup):
        fn()
    while time.perf_counter() - start < warmup_seconds:
        fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def torch_or_none(threads: str):
    """PyTorch limited to ``threads`` intra-op threads, or None when it is not installed."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(int(threads))
    return torch
