"""The program tests/test_distributed.py runs under ``mpiexec -n 2``: ``python tests/mpi_program.py
<check>``.  Every process checks its own results and raises on a mismatch (which aborts the job
with a non-zero exit); process 0 prints ``OK <check> <details>`` at the end."""
import queue
import sys
import threading
import time

import numpy as np
from test_collectives import jax_cases

import functrace as ft
import functrace.numpy as fnp

P = "processes"


def check_collectives() -> str:
    """Each collective over the MPI processes, eagerly and jitted on both backends, equals
    ``vmap(axis_name="processes")`` over the stacked shards (computed by every process)."""
    n, rank = ft.distributed.process_count(), ft.distributed.process_index()
    checked = 0
    for name, (fn, x) in jax_cases(ft.lax, P, n).items():
        want = np.asarray(ft.vmap(fn, axis_name=P)(x)[rank])
        for backend in (None, "numpy", "opencl"):
            got = np.asarray(fn(x[rank]) if backend is None else ft.jit(fn, backend=backend)(x[rank]))
            if got.shape != want.shape or not np.array_equal(got, want):
                raise AssertionError(f"{name} on {backend}: process {rank} got {got}, expected {want}")
            checked += 1
    return f"{checked} collective results"


def check_broadcast_and_shard() -> str:
    rank = ft.distributed.process_index()
    tree = {"w": np.full((2, 3), float(rank)), "k": np.arange(4, dtype=np.int32) + rank, "s": 1.5 + rank}
    got = ft.distributed.broadcast(tree, root=1)
    assert np.array_equal(got["w"], np.ones((2, 3))) and np.array_equal(got["k"], np.arange(4) + 1)
    assert got["s"] == 2.5 and tree["w"][0, 0] == rank  # the caller's arrays are not changed
    batch = np.arange(12).reshape(6, 2)
    assert np.array_equal(ft.distributed.shard(batch), batch[3 * rank:3 * rank + 3])
    return "broadcast and shard"


def _loss(params, x, y):
    (w1, b1), (w2, b2) = params
    h = fnp.tanh(x @ w1 + b1)
    return fnp.mean((h @ w2 + b2 - y) ** 2)


def check_data_parallel_gradient() -> str:
    """pmean of per-process gradients == the full-batch gradient, to float64 rounding, on both
    backends (every process also computes the full batch's gradient, as the reference)."""
    rng = np.random.default_rng(0)
    params = [(rng.standard_normal((5, 16)), rng.standard_normal(16)), (rng.standard_normal((16, 3)), rng.standard_normal(3))]
    x, y = rng.standard_normal((64, 5)), rng.standard_normal((64, 3))
    full = ft.tree_util.tree_leaves(ft.grad(_loss)(params, x, y))
    step = lambda p, xs, ys: ft.lax.pmean(ft.grad(_loss)(p, xs, ys), P)
    worst = 0.0
    for backend in ("numpy", "opencl"):
        local = ft.jit(step, backend=backend)(params, ft.distributed.shard(x), ft.distributed.shard(y))
        for g, f in zip(ft.tree_util.tree_leaves(local), full):
            g = np.asarray(g)
            np.testing.assert_allclose(g, f, rtol=1e-13, atol=1e-15)
            worst = max(worst, float(np.max(np.abs(g - f) / np.maximum(np.abs(f), 1e-300))))
    return f"max relative difference {worst:.1e}"


def raise_on_the_last_process() -> str:
    """The last process raises; the others wait in a collective that can never complete."""
    if ft.distributed.process_index() == ft.distributed.process_count() - 1:
        print(f"RAISING AT {time.time():.3f}", file=sys.stderr, flush=True)
        raise RuntimeError("an error on one process")
    ft.lax.psum(np.ones(3), P)
    return "unreachable"


def _failing_computation() -> None:
    print(f"RAISING AT {time.time():.3f}", file=sys.stderr, flush=True)
    raise RuntimeError("an error on one process")


def raise_in_a_thread_of_the_last_process() -> str:
    """A worker thread of the last process raises before it hands its result over: that process's
    main thread waits for the result forever, the others wait in a collective."""
    if ft.distributed.process_index() == ft.distributed.process_count() - 1:
        results = queue.Queue()
        threading.Thread(target=lambda: results.put(_failing_computation()), name="worker").start()
        results.get()
    ft.lax.psum(np.ones(3), P)
    return "unreachable"


CHECKS = {"collectives": [check_collectives, check_broadcast_and_shard, check_data_parallel_gradient],
          "raise": [raise_on_the_last_process], "raise-in-thread": [raise_in_a_thread_of_the_last_process]}

if __name__ == "__main__":
    ft.distributed.initialize()
    results = [check() for check in CHECKS[sys.argv[1]]]
    ft.lax.psum(np.ones(1), P)  # every process got here
    if ft.distributed.process_index() == 0:
        print("OK", sys.argv[1], "; ".join(results), flush=True)
