"""Tracing and eager-grad overhead: functrace vs JAX and autograd (when installed), same run.

f = 25 repetitions of ``x = sin(x) * x + cos(x)`` then ``sum``, on float64 vectors of 10 and
1000.  Times ``make_jaxpr(f)``, ``make_jaxpr(grad(f))``, ``make_jaxpr(hessian(f))`` and one
eager ``grad(f)(x)`` call; prints equation counts (raw and after CSE+DCE) and ratios.
Run: ``python benchmarks/bench_trace.py``.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import best_of, setup  # noqa: E402

THREADS = setup()

import numpy as np

import functrace as ft
import functrace.numpy as fnp
from functrace.transforms.optimize import optimize

REPS = 25


def make_f(np_mod):
    def f(x):
        for _ in range(REPS):
            x = np_mod.sin(x) * x + np_mod.cos(x)
        return np_mod.sum(x)
    return f



def main():
    try:
        import jax
        import jax.numpy as jnp
        jax.config.update("jax_enable_x64", True)
    except ImportError:
        jax = None
    try:
        import autograd
        import autograd.numpy as anp
    except ImportError:
        autograd = None

    f = make_f(fnp)
    print(f"{'n':>5} {'workload':<26} {'functrace':>11} {'JAX':>11} {'autograd':>11} {'JAX/ft':>8} {'ag/ft':>8}")
    for n in (10, 1000):
        x = np.linspace(0.1, 1.0, n)
        fwd = ft.make_jaxpr(f)(x)
        rev = ft.make_jaxpr(ft.grad(f))(x)
        hes = ft.make_jaxpr(ft.hessian(f))(x)
        counts = {k: (len(c.eqns), len(optimize(c)[0].eqns)) for k, c in
                  (("forward", fwd), ("grad", rev), ("hessian", hes))}
        # Every timed call gets a fresh function object, so no library can answer from a trace cache.
        rows = [
            ("make_jaxpr(f)", lambda: ft.make_jaxpr(make_f(fnp))(x), "jaxpr", None),
            ("make_jaxpr(grad(f))", lambda: ft.make_jaxpr(ft.grad(make_f(fnp)))(x), "jaxpr_grad", None),
            ("make_jaxpr(hessian(f))", lambda: ft.make_jaxpr(ft.hessian(make_f(fnp)))(x), "jaxpr_hess", None),
            ("eager grad(f)(x)", lambda: ft.grad(make_f(fnp))(x), "eager_grad", "ag_grad"),
        ]
        jf = make_f(jnp) if jax else None
        jax_fns = {}
        if jax:
            jx = jnp.asarray(x)
            jax_fns = {"jaxpr": lambda: jax.make_jaxpr(make_f(jnp))(jx),
                       "jaxpr_grad": lambda: jax.make_jaxpr(jax.grad(make_f(jnp)))(jx),
                       "jaxpr_hess": lambda: jax.make_jaxpr(jax.hessian(make_f(jnp)))(jx),
                       "eager_grad": lambda: jax.block_until_ready(jax.grad(make_f(jnp))(jx))}
        ag_fns = {}
        if autograd:
            ag_fns = {"ag_grad": lambda: autograd.grad(make_f(anp))(x)}
        for name, fn, jkey, akey in rows:
            t_ft = best_of(fn)
            t_j = best_of(jax_fns[jkey], repeat=3) if jkey in jax_fns else None
            t_a = best_of(ag_fns[akey]) if akey in ag_fns else None
            fmt = lambda t: f"{t * 1e3:9.2f}ms" if t is not None else f"{'-':>11}"
            ratio = lambda t: f"{t / t_ft:7.1f}x" if t is not None else f"{'-':>8}"
            print(f"{n:>5} {name:<26} {fmt(t_ft)} {fmt(t_j)} {fmt(t_a)} {ratio(t_j)} {ratio(t_a)}")
        f_count = counts["forward"][0]
        print(f"      equations: forward {counts['forward']}, grad {counts['grad']}, hessian {counts['hessian']}"
              f"  (raw, optimized); grad/forward {counts['grad'][1] / f_count:.2f}x, "
              f"hessian/forward {counts['hessian'][1] / f_count:.2f}x")
        if jax:
            jc = [len(jax.make_jaxpr(g)(jnp.asarray(x)).eqns) for g in (jf, jax.grad(jf), jax.hessian(jf))]
            print(f"      JAX equations: forward {jc[0]}, grad {jc[1]}, hessian {jc[2]}")
    # deep chain: no RecursionError
    g = lambda x: fnp.sum(_chain(x, 5000))
    t0 = time.perf_counter()
    ft.grad(g)(np.ones(3))
    ft.make_jaxpr(ft.grad(g))(np.ones(3))
    print(f"5,000-op chain: eager grad + make_jaxpr(grad) in {time.perf_counter() - t0:.2f} s (no RecursionError)")


def _chain(x, n):
    for _ in range(n):
        x = fnp.sin(x)
    return x


if __name__ == "__main__":
    main()
