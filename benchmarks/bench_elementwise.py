"""Fused elementwise chains on the OpenCL device vs numpy and JAX jit (same run, same thread budget).

* transcendental chain ``tanh(x)*x + exp(-x*x) + sin(x)*0.5 - log1p(x*x)`` on 4M float32;
* arithmetic chain ``((x*1.5 + y)*0.5 - x*y)*2 + 1`` on 4M float32, against the device's
  measured copy bandwidth (an OpenCL buffer copy of the same bytes).
Contenders: functrace OpenCL, numpy, and when installed JAX jit and PyTorch eager (torch's
threads set to the same budget).  PyTorch runs after the others' interleaved rounds: once its
ops have run, numpy's 16 MB temporaries stop page-faulting in this process (measured: 3000 minor
faults per numpy chain before, 0 after; the chain 27 -> 17 ms), which would flatter numpy.  Inputs are device arrays (``ft.Array``) so the timing is the kernels, as in a training loop; each
contender runs for a second before timing (the first ~20 OpenCL calls of a fresh process were
measured 5x slower than steady state on PoCL).
Then issue 15's placement sweep: a 14-operation transcendental chain
``tanh(x)*x + exp(-x*x) + sin(x)*0.5 - log1p(x*x) + cos(x)`` from 1K to 16M float32 elements,
functrace OpenCL at the default placement (host steps or kernels by the cost estimate) against
the same with every step a kernel (``opencl_small_program_elements`` and
``opencl_host_step_elements`` 0) and the numpy backend; the ratio is the default's time over the
faster of the two.
Run: ``python benchmarks/bench_elementwise.py`` (defaults, then pinned: see _common.py).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import best_of, setup, torch_or_none  # noqa: E402

THREADS = setup()

import numpy as np

import functrace as ft
import functrace.numpy as fnp
from functrace.backends.opencl import get_runtime

N = 4 * 1024 * 1024



def main():
    rt = get_runtime()
    if rt is None:
        print("no usable OpenCL device")
        return
    rng = np.random.default_rng(0)
    x = rng.standard_normal(N).astype(np.float32)
    y = rng.standard_normal(N).astype(np.float32)
    chains = {
        "transcendental": (lambda m: lambda x, y: m.tanh(x) * x + m.exp(-x * x) + m.sin(x) * 0.5 - m.log1p(x * x)),
        "arithmetic": (lambda m: lambda x, y: ((x * 1.5 + y) * 0.5 - x * y) * 2.0 + 1.0),
    }
    xd, yd = rt.to_device(x), rt.to_device(y)
    try:
        import jax
        import jax.numpy as jnp
        jx, jy = jnp.asarray(x), jnp.asarray(y)
    except ImportError:
        jax = None
    torch = torch_or_none(THREADS)
    if torch is not None:
        tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    print(f"{N} float32 elements, device {rt.name}, {THREADS} thread(s)")
    measured = {}
    for name, make in chains.items():
        f_cl = ft.jit(make(fnp), backend="opencl")
        out = f_cl(xd, yd)
        np.testing.assert_allclose(np.asarray(out), make(np)(x, y), rtol=2e-5, atol=2e-5)
        launches = f_cl.lower(xd, yd).compile().num_kernel_launches
        contenders = {"functrace opencl": lambda: f_cl(xd, yd).block_until_ready(),
                      "numpy": lambda: make(np)(x, y)}
        if jax:
            jf = jax.jit(make(jnp))
            contenders["JAX jit"] = lambda: jf(jx, jy).block_until_ready()
        rounds = {k: [] for k in contenders}
        for _ in range(3):  # interleaved rounds; the spread shows how noisy the machine is
            for k, fn in contenders.items():
                rounds[k].append(best_of(fn, warmup_seconds=1.0))
        measured[name] = (launches, rounds)
    if torch is not None:  # after all the others: see the module docstring
        for name, make in chains.items():
            tf = make(torch)
            measured[name][1]["PyTorch eager"] = [best_of(lambda: tf(tx, ty), warmup_seconds=1.0) for _ in range(3)]
    for name, (launches, rounds) in measured.items():
        times = {k: min(v) for k, v in rounds.items()}
        base = times["functrace opencl"]
        print(f"  {name} chain ({launches} kernel launch{'es' if launches > 1 else ''}):")
        for k, t in times.items():
            print(f"    {k:<18} {t * 1e3:8.2f} ms   {t / base:6.2f}x of functrace   "
                  f"(rounds: {', '.join(f'{r * 1e3:.1f}' for r in rounds[k])} ms)")
        if name == "arithmetic":
            nbytes = 3 * N * 4  # read x, y; write out
            dst = rt.empty((N,), np.float32)
            copy = best_of(lambda: (rt.cl.enqueue_copy(rt.queue, dst.buffer, xd.buffer), rt.queue.finish()),
                           warmup_seconds=1.0)
            copy_bw = 2 * N * 4 / copy
            bw = nbytes / base
            print(f"    bandwidth {bw / 1e9:.1f} GB/s vs device copy {copy_bw / 1e9:.1f} GB/s "
                  f"({100 * bw / copy_bw:.0f}% of copy bandwidth)")


SWEEP = (1_000, 10_000, 100_000, 1_000_000, 16_000_000)


def chain14(m):
    return lambda x: m.tanh(x) * x + m.exp(-x * x) + m.sin(x) * 0.5 - m.log1p(x * x) + m.cos(x)


def placement_sweep():
    """Default placement vs all kernels vs the numpy backend, interleaved, per size."""
    rt = get_runtime()
    print("  14-operation transcendental chain, default placement vs the faster of all-kernels and numpy backend:")
    for n in SWEEP:
        x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
        xd = rt.to_device(x)
        default = ft.jit(chain14(fnp), backend="opencl")
        kernels = ft.jit(chain14(fnp), backend="opencl")
        host = ft.jit(chain14(fnp), backend="numpy")
        saved = {k: getattr(ft.config, k) for k in ("opencl_small_program_elements", "opencl_host_step_elements")}
        for k in saved:
            ft.config.update(k, 0)
        kernels(xd)  # compiled with every step a kernel
        for k, v in saved.items():
            ft.config.update(k, v)
        default(xd)
        exe = default.lower(xd).compile().executable
        contenders = {"default": lambda: default(xd).block_until_ready(),
                      "all kernels": lambda: kernels(xd).block_until_ready(), "numpy backend": lambda: host(x)}
        repeat = 3 if n >= 10**7 else 7
        rounds = {k: [] for k in contenders}
        for _ in range(3):
            for k, fn in contenders.items():
                rounds[k].append(best_of(fn, repeat=repeat, warmup_seconds=0.3))
        t = {k: min(v) for k, v in rounds.items()}
        where = (f"{exe.num_kernel_launches} launch(es), {exe.num_host_steps} host step(s)"
                 if hasattr(exe, "num_host_steps") else "a small program: all on the host")
        print(f"    {n:>10} elements: default {t['default'] * 1e3:8.3f} ms ({where}), all kernels "
              f"{t['all kernels'] * 1e3:8.3f} ms, numpy backend {t['numpy backend'] * 1e3:8.3f} ms; "
              f"default / faster {t['default'] / min(t['all kernels'], t['numpy backend']):.2f}")


if __name__ == "__main__":
    main()
    placement_sweep()
