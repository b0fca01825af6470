"""Jitted training step of a 784-512-512-10 tanh MLP (batch 128, softmax cross-entropy, float32).

Contenders, timed interleaved in the same run: functrace ``jit(value_and_grad)`` on the numpy
backend and on OpenCL (parameters and data on the device via ``ft.device_put``, as JAX's are),
functrace eager ``value_and_grad``, and when installed JAX ``jit(value_and_grad)``,
HIPS autograd and PyTorch eager.  Threads: the defaults first, then pinned
to one thread (see _common.py).
Run: ``python benchmarks/bench_mlp.py``.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import call_times, median, setup  # noqa: E402

THREADS = setup()

import numpy as np

import functrace as ft
import functrace.numpy as fnp

SIZES = (784, 512, 512, 10)
BATCH = 128


def init_params(rng):
    return [{"w": (rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32),
             "b": np.zeros(n, np.float32)} for m, n in zip(SIZES[:-1], SIZES[1:])]


def make_loss(np_mod):
    def loss(params, x, y):
        h = x
        for layer in params[:-1]:
            h = np_mod.tanh(h @ layer["w"] + layer["b"])
        logits = h @ params[-1]["w"] + params[-1]["b"]
        m = np_mod.max(logits, axis=1, keepdims=True)
        shifted = logits - m
        log_probs = shifted - np_mod.log(np_mod.sum(np_mod.exp(shifted), axis=1, keepdims=True))
        return -np_mod.mean(np_mod.sum(y * log_probs, axis=1))
    return loss



def main():
    rng = np.random.default_rng(0)
    params = init_params(rng)
    x = rng.standard_normal((BATCH, SIZES[0])).astype(np.float32)
    y = np.eye(SIZES[-1], dtype=np.float32)[rng.integers(0, SIZES[-1], BATCH)]
    contenders = {}

    loss = make_loss(fnp)
    step = ft.jit(ft.value_and_grad(loss), backend="numpy")
    contenders["functrace jit (numpy backend)"] = lambda: step(params, x, y)
    eager = ft.value_and_grad(loss)
    contenders["functrace eager"] = lambda: eager(params, x, y)
    from functrace.backends.opencl import get_runtime
    if get_runtime() is not None:
        step_cl = ft.jit(ft.value_and_grad(loss), backend="opencl")
        dparams, dx, dy = ft.device_put((params, x, y))  # resident on the device, as JAX's arrays are
        v_cl, _ = step_cl(dparams, dx, dy)
        assert np.allclose(np.asarray(v_cl), step(params, x, y)[0], rtol=1e-4)
        contenders["functrace jit (opencl)"] = lambda: ft.block_until_ready(step_cl(dparams, dx, dy))
    ref_val, ref_grads = step(params, x, y)

    try:
        import jax
        import jax.numpy as jnp
        jparams = jax.tree_util.tree_map(jnp.asarray, params)
        jx, jy = jnp.asarray(x), jnp.asarray(y)
        jstep = jax.jit(jax.value_and_grad(make_loss(jnp)))
        contenders["JAX jit"] = lambda: jax.block_until_ready(jstep(jparams, jx, jy))
        jv, _ = jstep(jparams, jx, jy)
        assert np.allclose(jv, ref_val, rtol=1e-4), (jv, ref_val)
    except ImportError:
        pass
    try:
        import autograd
        import autograd.numpy as anp
        astep = autograd.value_and_grad(make_loss(anp))
        contenders["autograd"] = lambda: astep(params, x, y)
    except ImportError:
        pass
    try:
        import torch
        torch.set_num_threads(int(THREADS))
        tparams = [{k: torch.tensor(v, requires_grad=True) for k, v in layer.items()} for layer in params]
        tx, ty = torch.tensor(x), torch.tensor(y)
        tloss = make_loss_torch(torch)

        def torch_step():
            for layer in tparams:
                for v in layer.values():
                    v.grad = None
            out = tloss(tparams, tx, ty)
            out.backward()
            return out
        contenders["PyTorch eager"] = torch_step
    except ImportError:
        pass

    contenders["its products alone (host BLAS)"] = products_alone(params, x)

    # interleave: several rounds, each timing every contender once
    results = {k: [] for k in contenders}
    for _ in range(5):
        for name, fn in contenders.items():
            results[name] += call_times(fn, repeat=7, warmup=2)
    base = min(results["functrace jit (numpy backend)"])
    print(f"MLP {SIZES} batch {BATCH} float32, {THREADS} thread(s); time per value_and_grad step "
          f"(fastest of {len(results[name])} calls; median)")
    for name, ts in results.items():
        t = min(ts)
        print(f"  {name:<32} {t * 1e3:8.2f} ms   {t / base:6.2f}x of functrace jit   median {median(ts) * 1e3:8.2f} ms")
    lowered = step.lower(params, x, y)
    fwd = ft.jit(loss).lower(params, x, y)
    n_fwd, n_step = len(fwd.jaxpr.eqns), len(lowered.jaxpr.eqns)
    print(f"  optimized IR: forward {n_fwd} equations, value_and_grad step {n_step} "
          f"({n_step / n_fwd:.2f}x forward); saved for backward: "
          f"{len(lowered.report().analysis.saved_for_backward)} values")


def products_alone(params, x):
    """The step's matrix products and nothing else, as numpy's BLAS runs them (same shapes and
    transposed layouts, the process's BLAS threads): the floor of any step built on this BLAS
    (the forward's three products, then per layer the weight's derivative h^T g and, above the
    first, the input's g W^T)."""
    hs = [x]
    for p in params[:-1]:
        hs.append(np.tanh(hs[-1] @ p["w"]))
    gs = [np.ones((BATCH, n), np.float32) for n in SIZES[1:]]

    def run():
        h = x
        for p in params:
            h = h @ p["w"]
        for k in reversed(range(len(params))):
            np.dot(hs[k].T, gs[k])
            if k:
                np.dot(gs[k], params[k]["w"].T)
    return run


def make_loss_torch(torch):
    def loss(params, x, y):
        h = x
        for layer in params[:-1]:
            h = torch.tanh(h @ layer["w"] + layer["b"])
        logits = h @ params[-1]["w"] + params[-1]["b"]
        return -torch.mean(torch.sum(y * torch.log_softmax(logits, dim=1), dim=1))
    return loss


if __name__ == "__main__":
    main()
