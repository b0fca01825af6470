"""A new user's first calls: the 784-512-512-10 MLP ``jit(value_and_grad)`` step (batch 128) at
the defaults (all cores, the default device) in a fresh install (empty functrace and PoCL caches).

Prints the time of each of the first ``CALLS`` calls: compiles, kernel-vs-BLAS choices and binary
caching must not stall any call after the first (issue 15: < 0.5 s each, the first four < 2.5 s).
Run: ``python benchmarks/bench_first_calls.py`` (``--cache DIR``: the caches of an earlier run).
"""
import argparse
import os
import sys
import tempfile
import time

parser = argparse.ArgumentParser()
parser.add_argument("--cache", help="cache directory (default: a new empty one)")
parser.add_argument("--calls", type=int, default=8)
args = parser.parse_args()
cache = args.cache or tempfile.mkdtemp(prefix="functrace-first-calls-")
os.environ["POCL_CACHE_DIR"] = os.path.join(cache, "pocl")  # (the pinned run: a fresh one too)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import setup  # noqa: E402

setup()

import numpy as np  # noqa: E402
from bench_mlp import BATCH, SIZES, init_params, make_loss  # noqa: E402

import functrace as ft  # noqa: E402

ft.config.update("cache_dir", os.path.join(cache, "functrace"))


def main():
    rng = np.random.default_rng(0)
    params = init_params(rng)
    x = rng.standard_normal((BATCH, SIZES[0])).astype(np.float32)
    y = np.eye(SIZES[-1], dtype=np.float32)[rng.integers(0, SIZES[-1], BATCH)]
    t0 = time.perf_counter()
    step = ft.jit(ft.value_and_grad(make_loss(ft.numpy)))
    dparams, dx, dy = ft.device_put((params, x, y))
    setup_s = time.perf_counter() - t0
    times = []
    for _ in range(args.calls):
        t0 = time.perf_counter()
        ft.block_until_ready(step(dparams, dx, dy))
        times.append(time.perf_counter() - t0)
    print(f"first calls of the MLP step (fresh caches {cache}): "
          f"device_put {setup_s * 1e3:.0f} ms; calls " + " ".join(f"{t * 1e3:.0f}" for t in times) + " ms; "
          f"first four {sum(times[:4]):.2f} s, worst after the first {max(times[1:]) * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
