"""solve / cholesky / eigh of a 256x256 float64 matrix and their gradients: functrace jit (the
default OpenCL backend, where LAPACK runs as host steps, and the numpy backend) against JAX jit and
numpy, timed interleaved in the same run (1 thread unless OMP_NUM_THREADS is set).
Run: ``python benchmarks/bench_linalg.py``.
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


def workloads(np_mod):
    """Scalar functions of one matrix whose value and gradient are timed."""
    la = np_mod.linalg
    rhs = np.linspace(-1.0, 1.0, N * 4).reshape(N, 4)
    return {
        "solve": lambda a: np_mod.sum(la.solve(a, rhs) ** 2),
        "cholesky": lambda a: np_mod.sum(la.cholesky(a) ** 2),
        "eigh": lambda a: np_mod.sum(la.eigh(a)[1][:, -1] ** 4) + np_mod.sum(la.eigh(a)[0] ** 2),
    }


def main():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((N, N))
    spd = a @ a.T / N + np.eye(N)
    ours = workloads(fnp)
    rows = {}
    for name, f in ours.items():
        rows[name] = {"functrace jit": (ft.jit(f), spd), "functrace jit numpy": (ft.jit(f, backend="numpy"), spd),
                      "numpy (value only)": None}
        rows[name + " grad"] = {"functrace jit": (ft.jit(ft.grad(f)), spd),
                                "functrace jit numpy": (ft.jit(ft.grad(f), backend="numpy"), spd)}
    rows["solve"]["numpy (value only)"] = (lambda m: np.sum(np.linalg.solve(m, np.linspace(-1, 1, N * 4).reshape(N, 4)) ** 2), spd)
    rows["cholesky"]["numpy (value only)"] = (lambda m: np.sum(np.linalg.cholesky(m) ** 2), spd)
    rows["eigh"]["numpy (value only)"] = (lambda m: np.linalg.eigh(m), spd)
    try:
        import jax
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp
        theirs = workloads(jnp)
        jspd = jnp.asarray(spd)
        for name, f in theirs.items():
            value, grad = jax.jit(f), jax.jit(jax.grad(f))
            np.testing.assert_allclose(float(value(jspd)), float(rows[name]["functrace jit"][0](spd)), rtol=1e-9)
            np.testing.assert_allclose(np.asarray(grad(jspd)), np.asarray(rows[name + " grad"]["functrace jit"][0](spd)),
                                       rtol=1e-6, atol=1e-9)
            rows[name]["JAX jit"] = (lambda m, f=value: f(m).block_until_ready(), jspd)
            rows[name + " grad"]["JAX jit"] = (lambda m, f=grad: f(m).block_until_ready(), jspd)
    except ImportError:
        pass
    print(f"linalg of a {N}x{N} float64 SPD matrix, {THREADS} thread(s)")
    versus_jax = []
    for task, contenders in rows.items():
        contenders = {k: v for k, v in contenders.items() if v is not None}
        results = {k: [] for k in contenders}
        for _ in range(3):  # interleaved rounds
            for label, (fn, arg) in contenders.items():
                results[label].append(best_of(lambda: fn(arg), repeat=5))
        base = min(results["functrace jit"])
        for label, ts in results.items():
            t = min(ts)
            print(f"  {task:<14} {label:<20} {t * 1e3:9.3f} ms   {t / base:7.2f}x of functrace jit")
        if "JAX jit" in results:
            jax_t = min(results["JAX jit"])
            versus_jax.append(f"  {task:<14} opencl {base / jax_t:5.2f}x   numpy {min(results['functrace jit numpy']) / jax_t:5.2f}x")
    if versus_jax:
        print("functrace jit time / JAX jit time (target: <= 1.5):")
        print("\n".join(versus_jax))


if __name__ == "__main__":
    main()
