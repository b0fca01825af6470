"""The 9x9 de-blur step: jit(value_and_grad) of sum((conv2d(x, k, padding=4) - y)**2) on a
1x1x128x128 image, per backend (first call = trace + compile + run; then best steady call).

    python benchmarks/bench_conv.py
"""
import time

from _common import best_of, setup

setup()

import numpy as np  # noqa: E402

import functrace as ft  # noqa: E402
import functrace.numpy as fnp  # noqa: E402


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 1, 128, 128)).astype(np.float32)
    k = rng.standard_normal((1, 1, 9, 9)).astype(np.float32)
    y = rng.standard_normal((1, 1, 128, 128)).astype(np.float32)
    loss = lambda x, k, y: fnp.sum((ft.nn.conv2d(x, k, padding=4) - y) ** 2)
    for backend in ("numpy", "opencl"):
        step = ft.jit(ft.value_and_grad(loss, argnums=(0, 1)), backend=backend)
        t0 = time.perf_counter()
        ft.block_until_ready(step(x, k, y))
        first = time.perf_counter() - t0
        steady = best_of(lambda: ft.block_until_ready(step(x, k, y)))
        print(f"de-blur 9x9 step on 1x1x128x128, {backend:6s}: first call {first * 1e3:8.1f} ms, "
              f"steady {steady * 1e3:8.2f} ms")
    try:
        import jax
    except ImportError:
        return
    jloss = lambda x, k, y: jax.numpy.sum((jax.lax.conv_general_dilated(x, k, (1, 1), ((4, 4), (4, 4))) - y) ** 2)
    jstep = jax.jit(jax.value_and_grad(jloss, argnums=(0, 1)))
    jax.block_until_ready(jstep(x, k, y))
    print(f"de-blur 9x9 step on 1x1x128x128, jax   : steady {best_of(lambda: jax.block_until_ready(jstep(x, k, y))) * 1e3:8.2f} ms")


if __name__ == "__main__":
    main()
