"""Multi-process functrace over MPI: allreduce bandwidth and data-parallel MLP throughput.

1. Allreduce of 1 MB and 16 MB of float32 over 2 processes: ``ft.jit(lambda x: ft.lax.psum(x,
   "processes"))`` (numpy and OpenCL backends) against raw mpi4py ``Allreduce`` on the same
   communicator, interleaved in the same run (best of N calls each).
2. The training step of a 784-512-512-10 tanh MLP (float32, softmax cross-entropy, SGD), global batch
   256: 2 processes x 1 thread (128 examples each, gradients averaged with ``pmean``) against
   1 process x 1 thread (all 256); BLAS and PoCL at 1 thread per process (not pinned: the machine is shared).

Run: ``python benchmarks/bench_distributed.py`` (it launches ``mpiexec`` beside ``sys.executable``
itself and prints the machine's load with the results: on a shared machine, compare the ratios).
"""
import json
import os
import subprocess
import sys

from _common import best_of  # the benchmarks' folder is the script's: on sys.path

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SIZES = (784, 512, 512, 10)
GLOBAL_BATCH = 256


def _single_threaded() -> None:
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "POCL_MAX_PTHREAD_COUNT"):
        os.environ[var] = "1"
    os.environ.setdefault("POCL_DEVICES", "basic")  # PoCL's single-threaded CPU device


def worker_allreduce() -> dict:
    import numpy as np

    import functrace as ft
    comm = ft.distributed.communicator()
    results = {}
    for megabytes in (1, 16):
        x = np.random.default_rng(comm.Get_rank()).standard_normal(megabytes * 2**18).astype(np.float32)
        out = np.empty_like(x)
        contenders = {"raw mpi4py Allreduce (preallocated output)": lambda: comm.Allreduce(x, out),
                      "raw mpi4py Allreduce (new output)": lambda: comm.Allreduce(x, np.empty_like(x))}
        on_device = ft.device_put(x)  # a jitted step's operand on OpenCL is an intermediate on the device
        for backend, operand in (("numpy", x), ("opencl", on_device)):
            step = ft.jit(lambda v: ft.lax.psum(v, "processes"), backend=backend)
            contenders[f"functrace jit psum ({backend})"] = lambda step=step, v=operand: ft.block_until_ready(step(v))
            np.testing.assert_allclose(np.asarray(step(x)), comm.allreduce(x), rtol=1e-6)
        best = {k: float("inf") for k in contenders}
        for _ in range(8 if megabytes == 16 else 40):  # interleaved: load changes hit everyone alike
            for name, fn in contenders.items():
                comm.Barrier()
                best[name] = min(best[name], best_of(fn, 5))
        results[f"{megabytes} MB"] = {k: x.nbytes / t / 1e9 for k, t in best.items()}  # GB/s
    return results


def _mlp(backend: str):
    import numpy as np

    import functrace as ft
    import functrace.numpy as fnp

    def loss(params, x, labels):
        h = x
        for w, b in params[:-1]:
            h = fnp.tanh(h @ w + b)
        w, b = params[-1]
        return -fnp.mean(fnp.sum(labels * ft.nn.log_softmax(h @ w + b), axis=1))

    def step(params, x, labels):
        grads = ft.lax.pmean(ft.grad(loss)(params, x, labels), "processes")
        return ft.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads)

    rng = np.random.default_rng(0)
    params = [((rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32), np.zeros(n, np.float32))
              for m, n in zip(SIZES[:-1], SIZES[1:])]
    x = rng.standard_normal((GLOBAL_BATCH, SIZES[0])).astype(np.float32)
    labels = np.eye(SIZES[-1], dtype=np.float32)[rng.integers(0, SIZES[-1], GLOBAL_BATCH)]
    return ft.jit(step, backend=backend), params, *ft.distributed.shard((x, labels))


def worker_mlp() -> dict:
    import functrace as ft
    comm = ft.distributed.communicator()
    results = {}
    for backend in ("numpy", "opencl"):
        step, params, x, labels = _mlp(backend)
        run = lambda step=step, params=params, x=x, labels=labels: ft.block_until_ready(step(params, x, labels))
        best = float("inf")
        for _ in range(5):
            comm.Barrier()
            best = min(best, best_of(run, 5))
        results[backend] = GLOBAL_BATCH / comm.allreduce(best, op=_max_op())  # examples/s (the slowest process)
    return results


def _max_op():
    from mpi4py import MPI
    return MPI.MAX


def worker(kind: str) -> None:
    _single_threaded()
    sys.path.insert(0, REPO)
    import functrace as ft
    ft.distributed.initialize()
    rank = ft.distributed.process_index()
    result = worker_allreduce() if kind == "allreduce" else worker_mlp()
    if rank == 0:
        print("RESULT " + json.dumps(result), flush=True)


def launch(kind: str, processes: int) -> dict:
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    proc = subprocess.run([mpiexec, "-n", str(processes), sys.executable, os.path.abspath(__file__), "--worker", kind],
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} on {processes} processes failed:\n{proc.stdout}\n{proc.stderr}")
    return json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])


def main() -> None:
    print("load before:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    allreduce = launch("allreduce", 2)
    for size, table in allreduce.items():
        raw = table["raw mpi4py Allreduce (preallocated output)"]
        print(f"\nallreduce of {size} float32 over 2 processes (GB/s of the array; ratio to raw preallocated):")
        for name, bandwidth in table.items():
            print(f"  {name:45s} {bandwidth:7.3f} GB/s  {bandwidth / raw:5.2f}")
    one, two = [], []
    for _ in range(2):  # alternated: a change in the machine's load hits both
        one.append(launch("mlp", 1))
        two.append(launch("mlp", 2))
    print(f"\nMLP {'-'.join(map(str, SIZES))} step, global batch {GLOBAL_BATCH}, float32 (examples/s, best of the runs):")
    for backend in one[0]:
        a, b = max(r[backend] for r in one), max(r[backend] for r in two)
        print(f"  {backend:7s} 1 process x 1 thread {a:8.0f}   2 processes x 1 thread {b:8.0f}   speedup {b / a:4.2f}x")
    print("load after: ", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    if "--worker" in sys.argv:
        worker(sys.argv[sys.argv.index("--worker") + 1])
    else:
        main()
