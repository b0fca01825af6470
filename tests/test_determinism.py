"""Same inputs, same bits: a compiled function returns bitwise the same results on every call and
from every thread, and so does the same function jitted again in the process, whatever its
performance choices (host BLAS threads, host step or kernel,
auto mode's matmul verdicts, the trial of a program both ways).  Run in a fresh process at the
defaults (no test fixture's settings), with ``OPENBLAS_CORETYPE=Haswell`` where the CPU has AVX2:
there OpenBLAS rounds a product differently at 1 and 2 threads."""
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent('''
    import sys, threading
    import numpy as np
    import functrace as ft, functrace.numpy as fnp

    def loss(params, x, labels):
        h = x
        for w, b in params[:-1]:
            h = ft.nn.relu(h @ w + b)
        w, b = params[-1]
        return ft.nn.cross_entropy(h @ w + b, labels)

    rng = np.random.default_rng(0)
    sizes = [784, 512, 512, 10]
    params = [(rng.standard_normal((m, n)).astype(np.float32) / np.sqrt(m), np.zeros(n, np.float32))
              for m, n in zip(sizes[:-1], sizes[1:])]
    x = rng.standard_normal((128, 784)).astype(np.float32)
    labels = rng.integers(0, 10, 128)
    small = [(w[:40, :24], b[:24]) for w, b in params[:1]] + [(params[-1][0][:24], params[-1][1])]
    problems = []
    for backend in ("opencl", "numpy"):
        for name, p, xs in (("MLP step", params, x), ("small MLP step", small, x[:8, :40])):
            step = ft.jit(ft.value_and_grad(loss), backend=backend)
            leaves = lambda out: [np.asarray(a) for a in ft.tree_util.tree_leaves(out)]
            first = leaves(step(p, xs, labels[:len(xs)]))
            differ = [k for k in range(100)
                      if any(not np.array_equal(a, b) for a, b in zip(leaves(step(p, xs, labels[:len(xs)])), first))]
            # the same function jitted again (a new program of the same shapes) rounds as the first
            differ += [f"re-jit {k}" for k in range(1)
                       if any(not np.array_equal(a, b) for a, b in zip(
                           leaves(ft.jit(ft.value_and_grad(loss), backend=backend)(p, xs, labels[:len(xs)])), first))]
            wrong_threads = []

            def work(tid):
                for _ in range(10):
                    got = leaves(step(p, xs, labels[:len(xs)]))
                    if any(not np.array_equal(a, b) for a, b in zip(got, first)):
                        wrong_threads.append(tid)
            threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
            [t.start() for t in threads]
            [t.join() for t in threads]
            if differ or wrong_threads:
                problems.append(f"{name} on {backend}: calls {differ[:10]} of 100 and {len(wrong_threads)} of 80 "
                                f"calls from 8 threads differ from the first call")
    print("\\n".join(problems) or "OK")
''')


def _has_avx2() -> bool:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return " avx2" in f.read()
    except OSError:
        return False


def test_a_jitted_mlp_step_gives_the_same_bits_on_every_call_and_thread():
    env = {k: v for k, v in os.environ.items()  # the defaults: no option but the cache's place
           if k == "FUNCTRACE_CACHE_DIR" or not k.startswith(("FUNCTRACE_", "OPENBLAS_CORETYPE"))}
    if _has_avx2():  # (OpenBLAS's Haswell kernels need it; elsewhere the CPU's own)
        env["OPENBLAS_CORETYPE"] = "Haswell"
    run = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().splitlines()[-1] == "OK", run.stdout + run.stderr[-2000:]
