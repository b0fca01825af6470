"""Multi-process functrace over MPI: allreduce bandwidth and data-parallel MLP throughput.

1. Allreduce of 1 MB and 16 MB of float32 over 2 processes: ``ft.jit(lambda x: ft.lax.psum(x,
   "processes"))`` (numpy and OpenCL backends) against raw mpi4py ``Allreduce`` on the same
   communicator, interleaved in the same run (best of N calls each).
2. The training step of a 784-512-512-10 tanh MLP (float32, softmax cross-entropy, SGD), global batch
   256: 2 processes x 1 thread (128 examples each, gradients averaged with ``pmean``) against
   1 process x 1 thread (all 256); BLAS and PoCL at 1 thread per process (not pinned: the machine is shared).

Run: ``python benchmarks/bench_distributed.py [allreduce] [mlp]`` (it launches ``mpiexec`` beside
``sys.executable`` itself, with the arguments in ``FUNCTRACE_BENCH_MPIEXEC_ARGS`` if set, and prints
the machine's load with the results: on a shared machine, compare the ratios).  The MLP part breaks
each figure down: the step at half the batch on one process (the local work of each of two
processes, which bounds their speed-up), the two processes' step with their Allreduce skipped,
each process's time inside Allreduce (its wait for the other included) and raw mpi4py's time on
the same arrays, and CPU time over wall time (below 1: the process waited for a core).
"""
import json
import os
import subprocess
import sys
import time

from _common import best_of  # the benchmarks' folder is the script's: on sys.path

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SIZES = (784, 512, 512, 10)
GLOBAL_BATCH = 256
RUNS = int(os.environ.get("FUNCTRACE_BENCH_RUNS", 2))  # launches of each MLP configuration


def _single_threaded() -> None:
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "POCL_MAX_PTHREAD_COUNT"):
        os.environ[var] = "1"
    os.environ.setdefault("POCL_DEVICES", "basic")  # PoCL's single-threaded CPU device


BASELINE = "raw mpi4py Allreduce(x, out), out preallocated"


def worker_allreduce() -> dict:
    """Per size, each contender's best time over interleaved rounds, and its median over the rounds.
    The baseline is the operation ``psum`` of a jitted function's argument does: out of place (the
    argument is the caller's, never overwritten) into an output that is reused when it is free."""
    import numpy as np
    from mpi4py import MPI

    import functrace as ft
    comm = ft.distributed.communicator()
    results = {}
    for megabytes in (1, 16):
        x = np.random.default_rng(comm.Get_rank()).standard_normal(megabytes * 2**18).astype(np.float32)
        out, scratch = np.empty_like(x), x.copy()
        contenders = {BASELINE: lambda: comm.Allreduce(x, out),
                      "raw mpi4py Allreduce(x, new array)": lambda: comm.Allreduce(x, np.empty_like(x)),
                      # another operation: it overwrites its input (MPICH's out-of-place copies x to out first)
                      "raw mpi4py Allreduce(IN_PLACE, x)": lambda: comm.Allreduce(MPI.IN_PLACE, scratch)}
        on_device = ft.device_put(x)  # a jitted step's operand on OpenCL is an intermediate on the device
        for backend, operand in (("numpy", x), ("opencl", on_device)):
            step = ft.jit(lambda v: ft.lax.psum(v, "processes"), backend=backend)
            contenders[f"functrace jit psum ({backend})"] = lambda step=step, v=operand: ft.block_until_ready(step(v))
            np.testing.assert_allclose(np.asarray(step(x)), comm.allreduce(x), rtol=1e-6)
        rounds = {k: [] for k in contenders}
        for _ in range(20 if megabytes == 16 else 40):  # interleaved: load changes hit everyone alike
            for name, fn in contenders.items():
                comm.Barrier()
                rounds[name].append(best_of(fn, 5))
        results[f"{megabytes} MB"] = {k: {"best": min(t), "median": sorted(t)[len(t) // 2], "bytes": x.nbytes}
                                      for k, t in rounds.items()}
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


class _TimedCommunicator:
    """functrace's communicator, timing its Allreduce calls (the waiting for the slower process
    included): a rank's step splits into its own work and its communication."""

    def __init__(self, comm):
        self.comm, self.seconds, self.skip = comm, 0.0, False

    def __getattr__(self, name):
        return getattr(self.comm, name)

    def Allreduce(self, send, receive, op):
        if self.skip:  # the step without its communication (for its time only: the results are wrong)
            return
        start = time.perf_counter()
        self.comm.Allreduce(send, receive, op=op)
        self.seconds += time.perf_counter() - start


def _steps(run, comm, timed, rounds: int = 5, per_round: int = 5) -> dict:
    """Seconds per step (best of the rounds' best, and the median step), the Allreduce part of the
    median step, and the process's CPU time over wall time (below 1: the rank waited for its core)."""
    walls, in_allreduce, cpu = [], [], 0.0
    for _ in range(10):  # OpenCL's matmul choice (auto mode) measures at the third run of a shape
        run()
    for _ in range(rounds):
        comm.Barrier()
        for _ in range(per_round):
            before, start, cpu_start = timed.seconds, time.perf_counter(), time.process_time()
            run()
            walls.append(time.perf_counter() - start)
            cpu += time.process_time() - cpu_start
            in_allreduce.append(timed.seconds - before)
    order = sorted(range(len(walls)), key=walls.__getitem__)
    median = order[len(order) // 2]
    return {"best": walls[order[0]], "median": walls[median], "allreduce": in_allreduce[median],
            "cpu_per_wall": cpu / sum(walls)}


def worker_mlp() -> dict:
    """The step's time per backend on this process group; alone (one process), the step at half the
    batch too: the local work of each of 2 processes, which bounds their speed-up."""
    import numpy as np

    import functrace as ft
    comm = ft.distributed.communicator()
    timed = ft.distributed._group.comm = _TimedCommunicator(comm)  # the collectives' communicator
    results = {}
    for backend in ("numpy", "opencl"):
        step, params, x, labels = _mlp(backend)
        run = lambda step=step, params=params, x=x, labels=labels: ft.block_until_ready(step(params, x, labels))
        mine = _steps(run, comm, timed)
        result = {"best": comm.allreduce(mine["best"], op=_max_op()),  # the slowest process's
                  "ranks": comm.allgather(mine)}
        if comm.Get_size() == 1:
            half = len(x) // 2
            result["half batch"] = _steps(lambda: ft.block_until_ready(step(params, x[:half], labels[:half])),
                                          comm, timed)["best"]
        else:
            # the processes' own work side by side (they share the memory bus), and the floor of the
            # communication: raw mpi4py on the gradients' arrays, one Allreduce per array over 64 KB
            timed.skip = True
            result["without communication"] = comm.allreduce(_steps(run, comm, timed)["best"], op=_max_op())
            timed.skip = False
            grads = [np.ones_like(p) for layer in params for p in layer]
            large = [g for g in grads if g.nbytes >= 1 << 16]
            small = np.concatenate([g.reshape(-1) for g in grads if g.nbytes < 1 << 16])
            outs = [np.empty_like(g) for g in large]

            def raw():
                for g, out in zip(large, outs):
                    comm.Allreduce(g, out)
                comm.Allreduce(_mpi_in_place(), small)
            raw_best = float("inf")
            for _ in range(5):
                comm.Barrier()
                raw_best = min(raw_best, best_of(raw, 5))
            result["raw allreduce"] = raw_best
        results[backend] = result
    return results


def _mpi_in_place():
    from mpi4py import MPI
    return MPI.IN_PLACE


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
    extra = os.environ.get("FUNCTRACE_BENCH_MPIEXEC_ARGS", "").split()  # e.g. "-bind-to core"
    proc = subprocess.run([mpiexec, *extra, "-n", str(processes), sys.executable, os.path.abspath(__file__),
                           "--worker", kind], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} on {processes} processes failed:\n{proc.stdout}\n{proc.stderr}")
    return json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])


def main(parts: list) -> None:
    print("load before:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    if "allreduce" in parts:
        print_allreduce(launch("allreduce", 2))
    if "mlp" in parts:
        print_mlp()
    print("load after: ", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


def print_allreduce(allreduce: dict) -> None:
    for size, table in allreduce.items():
        raw = table[BASELINE]
        print(f"\nallreduce of {size} float32 over 2 processes: GB/s of the array (best round), and the "
              f"bandwidth's ratio to the first row's (best rounds; median rounds):")
        for name, t in table.items():
            print(f"  {name:45s} {t['bytes'] / t['best'] / 1e9:6.2f} GB/s  {raw['best'] / t['best']:5.2f}  "
                  f"{raw['median'] / t['median']:5.2f}")


def print_mlp() -> None:
    one, two = [], []
    for _ in range(RUNS):  # alternated: a change in the machine's load hits both
        one.append(launch("mlp", 1))
        two.append(launch("mlp", 2))
    print(f"\nMLP {'-'.join(map(str, SIZES))} step, global batch {GLOBAL_BATCH}, float32, 1 thread per process "
          f"(ms per step; best of {RUNS} launches):")
    for backend in one[0]:
        a = min(r[backend]["best"] for r in one)
        half = min(r[backend]["half batch"] for r in one)
        b = min(r[backend]["best"] for r in two)
        alone = min(r[backend]["without communication"] for r in two)
        print(f"  {backend:7s} 1 process: {a * 1e3:6.2f} (batch {GLOBAL_BATCH // 2}: {half * 1e3:6.2f}, so 2 processes "
              f"gain at most {a / half:4.2f}x)   2 processes: {b * 1e3:6.2f}   speed-up {a / b:4.2f}x "
              f"({GLOBAL_BATCH / a:6.0f} -> {GLOBAL_BATCH / b:6.0f} examples/s); 2 processes without their "
              f"Allreduce: {alone * 1e3:6.2f} ({a / alone:4.2f}x)")
        for k, r in enumerate(two):
            for rank, m in enumerate(r[backend]["ranks"]):
                print(f"          launch {k + 1}, process {rank}: median step {m['median'] * 1e3:6.2f} ms = "
                      f"{(m['median'] - m['allreduce']) * 1e3:6.2f} own work + {m['allreduce'] * 1e3:5.2f} in Allreduce "
                      f"(raw mpi4py on the same arrays alone: {r[backend]['raw allreduce'] * 1e3:4.2f}); "
                      f"CPU time / wall {m['cpu_per_wall']:4.2f}")


if __name__ == "__main__":
    if "--worker" in sys.argv:
        worker(sys.argv[sys.argv.index("--worker") + 1])
    else:
        main(sys.argv[1:] or ["allreduce", "mlp"])
