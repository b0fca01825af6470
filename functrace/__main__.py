"""Demo: ``python -m functrace`` shows a gradient, a Hessian and a printed jaxpr."""
import time

import numpy as np

import functrace as ft
import functrace.numpy as fnp


def main() -> None:
    t0 = time.perf_counter()
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((3, 2)) * 0.5, "b": np.zeros(2)}
    x, y = rng.standard_normal((8, 3)), rng.standard_normal((8, 2))

    def loss(p, x, y):
        return fnp.mean((fnp.tanh(x @ p["w"] + p["b"]) - y) ** 2)

    g = ft.grad(loss)(params, x, y)
    print("loss:", float(loss(params, x, y)))
    print("grad w.r.t. params (same pytree structure):")
    for k, v in g.items():
        print(f"  {k}: {np.array2string(np.asarray(v), precision=4)}")

    f = lambda x: fnp.sum(fnp.sin(x) * x ** 3)
    print("\nHessian of sum(sin(x) * x**3) at ones(4):")
    print(np.array2string(np.asarray(ft.hessian(f)(np.ones(4))), precision=4))

    h = lambda x: fnp.sin(x) * x
    print("\nthird derivative of sin(x)*x at 0.7 (grad of grad of grad):",
          float(ft.grad(ft.grad(ft.grad(h)))(0.7)))

    print("\njaxpr of grad(sum(sin(x) * x**3)):")
    print(ft.make_jaxpr(ft.grad(f))(np.ones(4)))
    print(f"\n(done in {time.perf_counter() - t0:.2f} s)")


if __name__ == "__main__":
    main()
