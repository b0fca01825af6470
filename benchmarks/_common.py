"""Shared benchmark set-up: the user's defaults as the headline, one pinned thread beside it.

A run (``python benchmarks/bench_<name>.py``) first measures at the **defaults** a user has
after ``pip install``: no thread variables, every core, the default OpenCL device (PoCL's
``pthread`` device), JAX and PyTorch at their own defaults.  When it is done, the same script
runs again in a child process **pinned** to one thread, and its figures follow under a header:
``OMP_NUM_THREADS`` / ``OPENBLAS_NUM_THREADS`` / ``MKL_NUM_THREADS`` / ``POCL_MAX_PTHREAD_COUNT``
1, the process pinned to one core, PoCL's single-threaded ``basic`` device (same compiler;
kernels run in the calling thread: a launch + finish costs ~2-8 us on ``basic`` and ~19-50 us on
``pthread`` with one worker), XLA on one thread.  ``FUNCTRACE_BENCH_MODE=defaults`` or
``pinned`` runs only that one (``OMP_NUM_THREADS=n`` with ``pinned``: n threads and n cores).

Some hosts set OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE (work-arounds for old OpenBLAS builds);
they make a current numpy's BLAS about 2.5x slower, which would handicap numpy and functrace
against JAX / PyTorch (which do not use OpenBLAS).  ``setup()`` re-runs the script without
them, once, and says so.
"""
import atexit
import os
import subprocess
import sys


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def _load() -> str:
    """The machine's load averages (1, 5, 15 min): the figures of a shared machine need them."""
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "unknown"


def _run_pinned_beside() -> None:
    """After the defaults run: the same script, pinned to one thread, in a child process."""
    print(f"\n== pinned: one thread, one core, PoCL's basic device (load {_load()}) ==", flush=True)
    env = dict(os.environ, FUNCTRACE_BENCH_MODE="pinned")
    subprocess.run([sys.executable] + sys.argv, env=env, check=False)


_threads: list = []  # setup()'s result: scripts importing another script's helpers call it again


def setup() -> str:
    """Set the process up for the mode (see the module's docstring); returns the thread count."""
    if not _threads:
        _threads.append(_setup())
    return _threads[0]


def _setup() -> str:
    if os.environ.get("OPENBLAS_CORETYPE") or os.environ.get("OPENBLAS_L2_SIZE"):
        env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
        print("(re-running without OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE, which slow numpy's BLAS)", flush=True)
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    mode = os.environ.get("FUNCTRACE_BENCH_MODE", "both")
    if mode not in ("both", "defaults", "pinned"):
        raise SystemExit(f"FUNCTRACE_BENCH_MODE must be both, defaults or pinned, not {mode!r}")
    if mode != "pinned":
        print(f"== defaults: all {_cores()} cores, the default device, no thread variables "
              f"(load {_load()}) ==", flush=True)
        if mode == "both":
            atexit.register(_run_pinned_beside)
        return str(_cores())
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
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=" + threads)
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


def call_times(fn, repeat: int = 7, warmup: int = 1) -> list:
    """Seconds of each of ``repeat`` calls after ``warmup`` calls: the fastest says what a path
    can do, the median what a user waits on a busy machine (see bench_under_load.py)."""
    import time
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def median(times: list) -> float:
    return sorted(times)[len(times) // 2]


def torch_or_none(threads: str):
    """PyTorch limited to ``threads`` intra-op threads, or None when it is not installed."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(int(threads))
    return torch
