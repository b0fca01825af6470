"""Per-call overhead and first-call (compile) cost of OpenCL-jitted functions.

* per-call: a jitted 20-equation elementwise function on a small vector (device-resident input),
  functrace OpenCL vs functrace numpy backend vs JAX jit (and PyTorch eager, for scale), same run;
* first call of the MLP training step (784-512-512-10, batch 128, jit(value_and_grad)) in a
  fresh process: cold (empty functrace and PoCL caches) and warm (caches filled by earlier
  processes: after one call, PoCL's source cache; after a run of several steps, also the
  program binaries functrace keeps for programs that run twice), the warm one as the median and
  range over several processes (the machine is shared and noisy), and split into starting OpenCL
  (once per process, before any functrace work: importing pyopencl, the ICD loader loading every
  installed driver, functrace choosing the device and making its context) and the call after it.
Run: ``python benchmarks/bench_overhead.py``.
"""
import os
import subprocess
import sys
import tempfile
from typing import NamedTuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import call_times, median, setup, torch_or_none  # noqa: E402

THREADS = setup()

import numpy as np

import functrace as ft
import functrace.numpy as fnp

WARM_PROCESSES = 8  # fresh processes per warm measurement

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
t_imp = t_drv = t1
if {runtime_first}:  # start OpenCL first, timed apart: import pyopencl, load the drivers, choose
    import pyopencl as cl
    t_imp = time.perf_counter()
    cl.get_platforms()
    t_drv = time.perf_counter()
    from functrace.backends.opencl import get_runtime
    get_runtime()
t_rt = time.perf_counter()
step = ft.jit(ft.value_and_grad(make_loss(fnp)), backend="opencl")
val, grads = step(params, x, y)
float(np.asarray(val))
t2 = time.perf_counter()
for _ in range({more}):  # the rest of a (short) training run: what a real earlier run leaves cached
    step(params, x, y)
print(f"{{t2 - t1:.4f}} {{t1 - t0:.4f}} {{t_imp - t1:.4f}} {{t_drv - t_imp:.4f}} {{t_rt - t_drv:.4f}} {{t2 - t_rt:.4f}}")
"""


def chain20_with(m, x):
    for _ in range(5):
        x = m.sin(x) * 0.5 + x * x - 0.25
    return x


def chain20(x):
    return chain20_with(fnp, x)


def bench(fn, repeat=200):
    """Median seconds of ``repeat`` calls after ten warm-up calls."""
    return median(call_times(fn, repeat=repeat, warmup=10))


class FirstCall(NamedTuple):
    """Seconds, in one fresh process: the first call of the MLP step, the imports before it and,
    when OpenCL was started first (``runtime_first``), that start's parts and the call after it."""

    call: float
    imports: float
    import_pyopencl: float
    load_drivers: float
    choose_device: float
    after_start: float


def first_call(env, more: int = 0, runtime_first: bool = False) -> FirstCall:
    """Run the MLP step's first call in a fresh process (then ``more`` steps)."""
    here = os.path.dirname(os.path.abspath(__file__))
    code = FIRST_CALL.format(root=os.path.dirname(here), bench=here, more=more, runtime_first=runtime_first)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return FirstCall(*map(float, out.stdout.split()[-6:]))


def ms_spread(values) -> str:
    """'median ms (min-max)' of a list of seconds."""
    v = np.array(values) * 1e3
    return f"{np.median(v):.0f} ms ({v.min():.0f}-{v.max():.0f})"


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
    n = WARM_PROCESSES
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, FUNCTRACE_CACHE_DIR=os.path.join(tmp, "ft"), POCL_CACHE_DIR=os.path.join(tmp, "pocl"))
        cold = first_call(env)                     # one call: PoCL's source cache only
        warm_once = first_call(env, more=4)        # a run of 5 steps: programs run twice keep binaries
        warm = [first_call(env) for _ in range(n)]
        split = [first_call(env, runtime_first=True) for _ in range(n)]
    print(f"first call of the MLP step (trace + optimize + compile + run), fresh process "
          f"(imports {cold.imports * 1e3:.0f} ms not included): cold caches {cold.call * 1e3:.0f} ms; "
          f"warm caches, after an earlier run of several steps, median (range) over {n} processes: "
          f"{ms_spread([r.call for r in warm])} ({warm_once.call * 1e3:.0f} ms after one earlier call, "
          f"which leaves only PoCL's source cache)")
    start = [r.import_pyopencl + r.load_drivers + r.choose_device for r in split]
    print(f"  the warm first call in two parts, over {n} more processes: starting OpenCL (once per process, "
          f"whatever is compiled) {ms_spread(start)} = import pyopencl {ms_spread([r.import_pyopencl for r in split])}"
          f" + the ICD loader loading the installed drivers {ms_spread([r.load_drivers for r in split])} + "
          f"functrace choosing the device {ms_spread([r.choose_device for r in split])}; then the call "
          f"{ms_spread([r.after_start for r in split])}")


if __name__ == "__main__":
    main()
