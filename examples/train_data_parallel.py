"""Data-parallel training of an MLP over MPI processes with functrace.

Every process runs this same script on its share of each global batch; the gradients are
averaged over processes with ``ft.lax.pmean(grads, "processes")`` inside the jitted step, so every
process applies the same update and the parameters stay identical everywhere.

    pip install 'functrace[mpi]'                            # mpi4py and the mpich wheel
    mpiexec -n 2 python examples/train_data_parallel.py     # two processes on this machine
    python examples/train_data_parallel.py                  # one process: the same result

On a cluster: ``mpiexec -n 8 -f hostfile python ...`` (MPICH; one host name per line, ``host:4``
for four processes on it), or under SLURM ``srun -n 8 python ...``.  Options: ``--steps``,
``--batch`` (the global batch, divisible by the process count), ``--backend numpy|opencl``.
"""
import argparse
import time

import numpy as np

import functrace as ft
import functrace.numpy as fnp

SIZES = (784, 512, 512, 10)


def init_params(rng: np.random.Generator) -> list:
    return [{"w": (rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32), "b": np.zeros(n, np.float32)}
            for m, n in zip(SIZES[:-1], SIZES[1:])]


def loss(params: list, x, labels):
    """Softmax cross-entropy of a tanh MLP, averaged over the (local) batch."""
    h = x
    for layer in params[:-1]:
        h = fnp.tanh(h @ layer["w"] + layer["b"])
    logits = h @ params[-1]["w"] + params[-1]["b"]
    return -fnp.mean(fnp.sum(labels * ft.nn.log_softmax(logits), axis=1))


def make_step(learning_rate: float, backend: str):
    """One SGD step: local gradients, their mean over processes (equal shards: the global batch's
    gradient), the same update on every process."""
    def step(params, x, labels):
        value, grads = ft.value_and_grad(loss)(params, x, labels)
        value, grads = ft.lax.pmean((value, grads), "processes")
        return ft.tree_util.tree_map(lambda p, g: p - learning_rate * g, params, grads), value
    return ft.jit(step, backend=backend)


def synthetic_batch(rng: np.random.Generator, batch: int):
    """A learnable task: the label is the argmax of a fixed linear map of the input."""
    x = rng.standard_normal((batch, SIZES[0])).astype(np.float32)
    teacher = np.random.default_rng(1).standard_normal((SIZES[0], SIZES[-1])).astype(np.float32)
    return x, np.eye(SIZES[-1], dtype=np.float32)[np.argmax(x @ teacher, axis=1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--learning-rate", type=float, default=0.1)
    parser.add_argument("--backend", default="numpy", choices=["numpy", "opencl"])
    args = parser.parse_args()

    ft.distributed.initialize()  # a no-op group of one when not launched by mpiexec
    rank, count = ft.distributed.process_index(), ft.distributed.process_count()
    params = ft.distributed.broadcast(init_params(np.random.default_rng(rank)))  # process 0's
    step = make_step(args.learning_rate, args.backend)
    data = np.random.default_rng(0)  # every process draws the same global batches, keeps its shard
    start = time.perf_counter()
    for i in range(args.steps):
        x, labels = ft.distributed.shard(synthetic_batch(data, args.batch))
        params, value = step(params, x, labels)
        if rank == 0 and (i % 10 == 0 or i == args.steps - 1):
            print(f"step {i:4d}  loss {float(np.asarray(value)):.4f}", flush=True)
    if rank == 0:
        elapsed = time.perf_counter() - start
        print(f"{count} process(es): {args.steps * args.batch / elapsed:.0f} examples/s", flush=True)


if __name__ == "__main__":
    main()
