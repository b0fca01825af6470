"""Hessian and Hessian-vector product of f(x) = sum(tanh(A @ x)**2) + 0.5*sum(x**4), A 256x256
float64: functrace jitted (the default backend) and eager, against JAX (jit and eager) and
autograd when installed, timed interleaved in the same run (at the defaults, then pinned to one
thread: see _common.py).
Run: ``python benchmarks/bench_hessian.py``.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import best_of, setup  # noqa: E402

THREADS = setup()

import numpy as np

import functrace as ft
import functrace.numpy as fnp

N = 256


def make_f(np_mod, A):
    return lambda x: np_mod.sum(np_mod.tanh(A @ x) ** 2) + 0.5 * np_mod.sum(x ** 4)



def main():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((N, N)) / np.sqrt(N)
    x, v = rng.standard_normal(N), rng.standard_normal(N)
    f = make_f(fnp, A)
    hvp = lambda x, v: ft.jvp(ft.grad(f), (x,), (v,))[1]
    jit_hess, jit_hvp = ft.jit(ft.hessian(f)), ft.jit(hvp)
    H = jit_hess(x)
    rows = {
        "hessian": {"functrace jit": lambda: jit_hess(x), "functrace eager": lambda: ft.hessian(f)(x)},
        "hvp": {"functrace jit": lambda: jit_hvp(x, v), "functrace eager": lambda: hvp(x, v)},
    }
    np.testing.assert_allclose(jit_hvp(x, v), H @ v, rtol=1e-8, atol=1e-10)
    try:
        import jax
        import jax.numpy as jnp
        jax.config.update("jax_enable_x64", True)
        jA, jx, jv = jnp.asarray(A), jnp.asarray(x), jnp.asarray(v)
        jf = make_f(jnp, jA)
        jhvp = lambda x, v: jax.jvp(jax.grad(jf), (x,), (v,))[1]
        jjh, jjhvp = jax.jit(jax.hessian(jf)), jax.jit(jhvp)
        np.testing.assert_allclose(np.asarray(jjh(jx)), H, rtol=1e-8, atol=1e-10)
        rows["hessian"]["JAX jit"] = lambda: jjh(jx).block_until_ready()
        rows["hessian"]["JAX eager"] = lambda: jax.hessian(jf)(jx).block_until_ready()
        rows["hvp"]["JAX jit"] = lambda: jjhvp(jx, jv).block_until_ready()
    except ImportError:
        pass
    try:
        import autograd
        import autograd.numpy as anp
        af = make_f(anp, A)
        rows["hessian"]["autograd"] = lambda: autograd.hessian(af)(x)
        rows["hvp"]["autograd"] = lambda: autograd.hessian_vector_product(af)(x, v)
    except ImportError:
        pass
    print(f"f(x) = sum(tanh(A @ x)**2) + 0.5*sum(x**4), A {N}x{N} float64, {THREADS} thread(s)")
    for task, contenders in rows.items():
        results = {k: [] for k in contenders}
        for _ in range(3):  # interleaved rounds
            for name, fn in contenders.items():
                results[name].append(best_of(fn))
        base = min(results["functrace jit"])
        for name, ts in results.items():
            t = min(ts)
            print(f"  {task:<8} {name:<16} {t * 1e3:9.3f} ms   {t / base:7.2f}x of functrace jit")


if __name__ == "__main__":
    main()
