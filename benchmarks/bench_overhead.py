"""Per-call overhead and first-call (compile) cost of OpenCL-jitted functions.

* per-call: a jitted 20-equation elementwise function on a small vector (device-resident input),
  functrace OpenCL vs functrace numpy backend vs JAX jit (and PyTorch eager, for scale), same run;
* first call of the MLP training step (784-512-512-10, batch 128, jit(value_and_grad)) in a
  fresh process: cold (empty functrace and PoCL caches) and warm (caches filled by earlier
  processes: after one call, PoCL's source cache; after a run of several steps, also the
  program binaries functrace keeps for programs that run twice; best of three processes), and
  the warm one split into starting OpenCL (pyopencl's import and the drivers' loading, once per
  process) and the call after it.
Run: ``python benchmarks/bench_overhead.py``.
"""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import setup, torch_or_none  # noqa: E402

THREADS = setup()

import numpy as np

import functrace as ft
import functrace.numpy as fnp

FIRST_CALL = r"""
import os, sys, time
t0 = time.perf_counter()
sys.path.insert(0, {root!r})
import numpy as np, functrace as ft, functrace.numpy as fnp
sys.path.insert(0, {bench!r})
from bench_mlp import init_params, make_loss
rng = np.random.default_rng(0)
params = init_params(rng)
x = rng.standard_normal((128, 784)).astype(np.float32)
y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 128)]
t1 = time.perf_counter()
if {runtime_first}:  # start OpenCL first (import pyopencl, load the drivers): timed apart
    from functrace.backends.opencl import get_runtime
    get_runtime()
t_rt = time.perf_counter()
step = ft.jit(ft.value_and_grad(make_loss(fnp)), backend="opencl")
val, grads = step(params, x, y)
float(np.asarray(val))
t2 = time.perf_counter()
for _ in range({more}):  # the rest of a (short) training run: what a real earlier run leaves cached
    step(params, x, y)
print(f"{{t2 - t1:.4f}} {{t1 - t0:.4f}} {{t_rt - t1:.4f}} {{t2 - t_rt:.4f}}")
"""


def chain20_with(m, x):
    for _ in range(5):
        x = m.sin(x) * 0.5 + x * x - 0.25
    return x


def chain20(x):
    return chain20_with(fnp, x)


def bench(fn, repeat=200):
    for _ in range(10):
        fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def first_call(env, more: int = 0, runtime_first: bool = False) -> tuple[float, float, float, float]:
    """Seconds of (the first call of the MLP step in a fresh process, its imports, starting the
    OpenCL runtime, the call after that start); the last two only with ``runtime_first`` (the
    runtime then starts before the call).  The process then runs ``more`` steps."""
    here = os.path.dirname(os.path.abspath(__file__))
    code = FIRST_CALL.format(root=os.path.dirname(here), bench=here, more=more, runtime_first=runtime_first)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    call, imports, runtime, after = map(float, out.stdout.split()[-4:])
    return call, imports, runtime, after


def main():
    x = np.random.default_rng(0).standard_normal(256).astype(np.float32)
    n_eqns = len(ft.jit(chain20).lower(x).jaxpr.eqns)
    from functrace.backends.opencl import get_runtime
    rt = get_runtime()
    results = {}
    if rt is not None:
        f_cl = ft.jit(chain20, backend="opencl")
        xd = ft.Array.from_host(rt, x)  # a device array, as results of earlier calls are
        results["functrace opencl"] = bench(lambda: f_cl(xd).block_until_ready())
    f_np = ft.jit(chain20, backend="numpy")
    results["functrace numpy"] = bench(lambda: f_np(x))
    try:
        import jax
        import jax.numpy as jnp
        jf = jax.jit(lambda x: chain20_with(jnp, x))
        jx = jnp.asarray(x)
        results["JAX jit"] = bench(lambda: jf(jx).block_until_ready())
    except ImportError:
        pass
    torch = torch_or_none(THREADS)
    if torch is not None:  # eager: one dispatch per operation, for scale
        tx = torch.from_numpy(x)
        results["PyTorch eager"] = bench(lambda: chain20_with(torch, tx))
    print(f"per-call overhead, jitted {n_eqns}-equation function on 256 float32 ({THREADS} thread(s)):")
    base = results.get("functrace opencl", results["functrace numpy"])
    for k, t in results.items():
        print(f"  {k:<18} {t * 1e6:8.1f} us   {t / base:6.2f}x of functrace opencl")
    if rt is None:
        return
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, FUNCTRACE_CACHE_DIR=os.path.join(tmp, "ft"), POCL_CACHE_DIR=os.path.join(tmp, "pocl"))
        cold, imp, _, _ = first_call(env)             # one call: PoCL's source cache only
        warm_once, *_ = first_call(env, more=4)       # a run of 5 steps: programs run twice keep binaries
        warm = min(first_call(env)[0] for _ in range(3))
        _, _, start, after = min((first_call(env, runtime_first=True) for _ in range(3)), key=lambda r: r[2] + r[3])
    print(f"first call of the MLP step (trace + optimize + compile + run), fresh process "
          f"(imports {imp * 1e3:.0f} ms not included): cold caches {cold * 1e3:.0f} ms; warm caches "
          f"{warm * 1e3:.0f} ms after an earlier run of several steps ({warm_once * 1e3:.0f} ms after one "
          f"earlier call, which leaves only PoCL's source cache)")
    print(f"  the warm first call in two parts: starting OpenCL (import pyopencl, load the installed drivers: "
          f"once per process, whatever is compiled) {start * 1e3:.0f} ms + the call itself {after * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
