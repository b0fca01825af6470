"""The GPU table (issue 28): functrace's OpenCL backend on the default OpenCL device (a GPU on a
machine with one) against JAX jit and PyTorch on their GPU, same process, same inputs.

Workloads (the sizes of the H200 table; ``--smoke``: tiny ones): sgemm 4096³ float32; a
transformer block forward + backward (B8 T1024 D1024, 16 heads, SwiGLU hidden 2816, RMSNorm,
causal attention) and the first call of that step (trace + compile + run); causal attention
forward and forward + backward (B8 T1024, 16 heads of 64); the rms_norm gradient of 65536 x 1024;
the sum of 64M float32; an MLP SGD step 784-512-512-10 at batch 128 (relu, softmax
cross-entropy); the Hessian of a 256-vector function in float64; a transcendental and an
arithmetic elementwise chain over 64M float32; one small kernel (1K float32) per call.

Each functrace workload is first checked against functrace's numpy backend
(``ft.jit(f, backend="numpy")``, same inputs) by the largest difference relative to the largest
reference value; above the row's tolerance the row prints FAIL instead of a time and the script
exits 1 at the end.  Times: fastest and median of ``--calls`` calls (10; the small kernel at least
100) after one warm-up call, inputs on the device (``ft.device_put``), each call ended by
``ft.block_until_ready``.  JAX jit runs at the "highest" and at the default matmul precision
(TF32 on NVIDIA cards) and PyTorch in float32 (TF32 off), each only when installed and it sees a
GPU (else "-"; never required).  The last column is functrace's fastest over JAX's at "highest".
The device, its driver and the device kind are printed first; the rows as a markdown table.

Unlike the other benchmarks this one has no pinned second run (see _common.py): it is about the
device.  It does not set ``JAX_PLATFORMS``; it sets ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` so
that JAX leaves the card's memory to OpenCL.

Run: ``python benchmarks/bench_gpu.py`` (under 4 minutes on an H200; ``benchmarks/run_gpu.sh``
sets a machine with an NVIDIA card up and runs it), ``--smoke`` (tiny sizes, 3 calls: a
correctness smoke on any OpenCL device, every program as kernels even on the cpu kind, whose
host shortcut for small programs is switched off; CI runs it), ``--only sgemm,sum`` (some workloads; names
below), ``--device-kind gpu`` (the gpu kind's kernel designs on whatever device is the default:
``ft.config`` ``opencl_device_kind``, also ``FUNCTRACE_OPENCL_DEVICE_KIND``).
"""
import argparse
import math
import os
import subprocess
import sys
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
from _common import call_times, median  # noqa: E402

import functrace as ft  # noqa: E402
import functrace.numpy as fnp  # noqa: E402

FULL = {"sgemm": 4096, "transformer": (8, 1024, 1024, 16, 2816), "attention": (8, 1024, 16, 64),
        "rms_norm": (65536, 1024), "sum": 64 << 20, "mlp": ((784, 512, 512, 10), 128), "hessian": 256,
        "chains": 64 << 20, "small_kernel": 1024}
# every one compiles and runs in well under a second on PoCL; attention at the transformer's heads
SMOKE = {"sgemm": 64, "transformer": (2, 16, 32, 4, 48), "attention": (2, 16, 4, 8),
         "rms_norm": (64, 32), "sum": 4096, "mlp": ((64, 32, 32, 10), 16), "hessian": 16,
         "chains": 4096, "small_kernel": 1024}

# workload -> the keys of the rows it prints (each row's label starts with its key)
WORKLOADS = {
    "sgemm": ("sgemm",),
    "transformer": ("transformer block fwd+bwd", "transformer step first call"),
    "attention": ("causal attention fwd", "causal attention fwd+bwd"),
    "rms_norm": ("rms_norm grad",),
    "sum": ("sum",),
    "mlp": ("MLP step",),
    "hessian": ("Hessian",),
    "chains": ("transcendental chain", "arithmetic chain"),
    "small_kernel": ("small kernel",),
}
COLUMNS = ("jax_hi", "jax_def", "torch")
NOTES: list = []


class Row:
    def __init__(self, key):
        self.key = self.label = key
        self.ft = None          # (fastest, median) seconds, or None
        self.fail = None        # why the row failed (printed instead of a time)
        self.err = None         # max difference relative to the numpy backend's largest value
        self.cols = {}          # column -> (fastest, median) | "err"
        self.first = {}         # column -> seconds of the first call (the first-call row)


# ---------------------------------------------------------------- helpers

def timed(fn, calls):
    """(fastest, median) seconds of ``calls`` calls after one warm-up call."""
    ts = call_times(fn, calls)
    return min(ts), median(ts)


def worst_err(got, ref) -> float:
    """The largest |got - ref| over the leaves, each relative to its largest |ref| (inf on a
    shape or structure mismatch or a non-finite value)."""
    gl, rl = ft.tree_util.tree_leaves(got), ft.tree_util.tree_leaves(ref)
    if len(gl) != len(rl):
        return math.inf
    worst = 0.0
    for g, w in zip(gl, rl):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        if g.shape != w.shape:
            return math.inf
        if w.size:
            d = float(np.abs(g - w).max()) / max(float(np.abs(w).max()), 1e-30)
            if not math.isfinite(d):
                return math.inf
            worst = max(worst, d)
    return worst


def ft_measure(row, fn, args, tol, calls):
    """Check ``fn`` (jitted on OpenCL, inputs on the device) against the numpy backend, then time
    it; returns (seconds of its first call, the reference)."""
    f, ref_f = ft.jit(fn, backend="opencl"), ft.jit(fn, backend="numpy")
    dargs = ft.device_put(args)
    t0 = time.perf_counter()
    got = f(*dargs)
    ft.block_until_ready(got)
    first = time.perf_counter() - t0
    ref = ref_f(*args)
    row.err = worst_err(got, ref)
    if not row.err <= tol:
        row.fail = f"FAIL: max rel. difference from the numpy backend {row.err:.1e} > {tol:.0e}"
    else:
        row.ft = timed(lambda: ft.block_until_ready(f(*dargs)), calls)
    return first, ref, f, dargs


_libs: dict = {}


def jax_gpu():
    """JAX when installed and it sees a GPU, else None (and why, for the header)."""
    if "jax" not in _libs:
        try:
            import jax
            jax.devices("gpu")
            _libs["jax"], _libs["jax_why"] = jax, f"JAX {jax.__version__} on {jax.devices('gpu')[0]}"
        except Exception as e:  # noqa: BLE001 (not installed, or no GPU backend)
            _libs["jax"], _libs["jax_why"] = None, f"JAX: - ({type(e).__name__}: {str(e)[:80]})"
    return _libs["jax"]


def torch_gpu():
    if "torch" not in _libs:
        try:
            import torch
            ok = torch.cuda.is_available()
            _libs["torch"] = torch if ok else None
            _libs["torch_why"] = (f"PyTorch {torch.__version__} on {torch.cuda.get_device_name(0)}" if ok
                                  else f"PyTorch {torch.__version__}: - (no CUDA device)")
            if ok:
                torch.backends.cuda.matmul.allow_tf32 = False
                torch.backends.cudnn.allow_tf32 = False
        except Exception as e:  # noqa: BLE001
            _libs["torch"], _libs["torch_why"] = None, f"PyTorch: - ({type(e).__name__})"
    return _libs["torch"]


def jax_cols(row, make, args, ref, tol, calls, x64=False):
    """JAX jit of ``make(jax)`` at "highest" and at the default matmul precision; the "highest"
    result is compared with the numpy backend's (a note when it differs by more than ``tol``)."""
    jax = jax_gpu()
    if jax is None:
        return
    for prec, col in (("highest", "jax_hi"), ("default", "jax_def")):
        try:
            if x64:
                jax.config.update("jax_enable_x64", True)
            with jax.default_matmul_precision(prec):  # (part of jit's cache key: every call inside)
                jf = jax.jit(make(jax))
                jargs = jax.device_put(args)
                t0 = time.perf_counter()
                out = jax.block_until_ready(jf(*jargs))
                row.first[col] = time.perf_counter() - t0
                if prec == "highest" and ref is not None:
                    e = worst_err(jax.tree_util.tree_map(np.asarray, out), ref)
                    if not e <= tol:
                        NOTES.append(f"{row.key}: JAX (highest) differs from functrace's numpy backend by {e:.1e}")
                row.cols[col] = timed(lambda: jax.block_until_ready(jf(*jargs)), calls)
        except Exception as e:  # noqa: BLE001 (a contender's failure is a note, not a FAIL)
            row.cols[col] = "err"
            NOTES.append(f"{row.key}: JAX ({prec}) failed: {type(e).__name__}: {str(e)[:200]}")
        finally:
            if x64:
                jax.config.update("jax_enable_x64", False)


def torch_col(row, make, calls):
    """PyTorch (float32, TF32 off): ``make(torch)`` returns one call, synchronized."""
    torch = torch_gpu()
    if torch is None:
        return
    try:
        row.cols["torch"] = timed(make(torch), calls)
    except Exception as e:  # noqa: BLE001
        row.cols["torch"] = "err"
        NOTES.append(f"{row.key}: PyTorch failed: {type(e).__name__}: {str(e)[:200]}")


def rng():
    return np.random.default_rng(0)


# ---------------------------------------------------------------- workloads

def w_sgemm(rows, S, calls):
    n = S["sgemm"]
    row = rows["sgemm"]
    row.label = f"sgemm {n}³ f32"
    r = rng()
    a, b = r.standard_normal((n, n), np.float32), r.standard_normal((n, n), np.float32)
    mm = lambda a, b: a @ b  # noqa: E731
    _, ref, _, _ = ft_measure(row, mm, (a, b), 1e-4, calls)
    jax_cols(row, lambda jax: mm, (a, b), ref, 1e-4, calls)

    def tmake(torch):
        ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        return lambda: (ta @ tb, torch.cuda.synchronize())
    torch_col(row, tmake, calls)


def transformer_parts(dims):
    B, T, D, H, F = dims
    r = rng()
    s = lambda *shape: (r.standard_normal(shape) / math.sqrt(shape[0])).astype(np.float32)  # noqa: E731
    p = {"wq": s(D, D), "wk": s(D, D), "wv": s(D, D), "wo": s(D, D), "g1": np.ones(D, np.float32),
         "g2": np.ones(D, np.float32), "w1": s(D, F), "w3": s(D, F), "w2": s(F, D)}
    x = r.standard_normal((B, T, D)).astype(np.float32)

    def block_ft(p, x):
        h = ft.nn.rms_norm(x, p["g1"])
        split = lambda a: fnp.reshape(a, (B, T, H, D // H))  # noqa: E731
        att = ft.nn.attention(split(h @ p["wq"]), split(h @ p["wk"]), split(h @ p["wv"]), causal=True)
        x = x + fnp.reshape(att, (B, T, D)) @ p["wo"]
        h = ft.nn.rms_norm(x, p["g2"])
        x = x + ft.nn.swiglu(h @ p["w1"], h @ p["w3"]) @ p["w2"]
        return fnp.mean(x * x)

    def block_jax(jax):
        jnp = jax.numpy
        rms = lambda x, g: x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * g  # noqa: E731

        def block(p, x):
            h = rms(x, p["g1"])
            split = lambda a: jnp.reshape(a, (B, T, H, D // H))  # noqa: E731
            att = jax.nn.dot_product_attention(split(h @ p["wq"]), split(h @ p["wk"]), split(h @ p["wv"]),
                                               is_causal=True)
            x = x + jnp.reshape(att, (B, T, D)) @ p["wo"]
            h = rms(x, p["g2"])
            x = x + (jax.nn.silu(h @ p["w1"]) * (h @ p["w3"])) @ p["w2"]
            return jnp.mean(x * x)
        return jax.value_and_grad(block)

    def torch_step(torch):
        import torch.nn.functional as tf
        tp = {k: torch.from_numpy(v).cuda().requires_grad_() for k, v in p.items()}
        tx = torch.from_numpy(x).cuda()
        rms = lambda x, g: x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + 1e-6) * g  # noqa: E731

        def call():
            for v in tp.values():
                v.grad = None
            h = rms(tx, tp["g1"])
            split = lambda a: a.reshape(B, T, H, D // H).transpose(1, 2)  # noqa: E731
            att = tf.scaled_dot_product_attention(split(h @ tp["wq"]), split(h @ tp["wk"]), split(h @ tp["wv"]),
                                                  is_causal=True)
            y = tx + att.transpose(1, 2).reshape(B, T, D) @ tp["wo"]
            h = rms(y, tp["g2"])
            y = y + (tf.silu(h @ tp["w1"]) * (h @ tp["w3"])) @ tp["w2"]
            loss = torch.mean(y * y)
            loss.backward()
            torch.cuda.synchronize()
        return call
    return p, x, block_ft, block_jax, torch_step


def w_transformer(rows, S, calls):
    dims = S["transformer"]
    B, T, D, H, F = dims
    row, first_row = rows["transformer block fwd+bwd"], rows["transformer step first call"]
    row.label = f"transformer block fwd+bwd B{B} T{T} D{D} H{H} F{F} f32"
    p, x, block_ft, block_jax, torch_step = transformer_parts(dims)
    first, ref, step, dargs = ft_measure(row, ft.value_and_grad(block_ft), (p, x), 2e-3, calls)
    first_row.label = f"transformer step first call (trace + compile + run) B{B} T{T} D{D}"
    first_row.ft, first_row.fail, first_row.err = (first, first), row.fail, row.err
    jax_cols(row, block_jax, (p, x), ref, 2e-3, calls)
    first_row.cols = {c: (t, t) for c, t in row.first.items()}
    torch_col(row, torch_step, calls)
    if row.fail is None:
        try:
            n = step.lower(*dargs).compile().num_kernel_launches
            NOTES.append(f"{row.key}: functrace runs {n} kernel launches per step")
        except Exception as e:  # noqa: BLE001
            NOTES.append(f"{row.key}: kernel launches unknown ({type(e).__name__})")


def w_attention(rows, S, calls):
    B, T, H, Dh = S["attention"]
    fwd_row, bwd_row = rows["causal attention fwd"], rows["causal attention fwd+bwd"]
    fwd_row.label = f"causal attention fwd B{B} T{T} H{H} d{Dh} f32"
    bwd_row.label = f"causal attention fwd+bwd B{B} T{T} H{H} d{Dh} f32"
    r = rng()
    q, k, v = (r.standard_normal((B, T, H, Dh)).astype(np.float32) for _ in range(3))
    fwd = lambda q, k, v: ft.nn.attention(q, k, v, causal=True)  # noqa: E731
    both = ft.value_and_grad(lambda q, k, v: fnp.sum(fwd(q, k, v) ** 2), argnums=(0, 1, 2))
    _, ref_f, _, _ = ft_measure(fwd_row, fwd, (q, k, v), 1e-3, calls)
    _, ref_b, _, _ = ft_measure(bwd_row, both, (q, k, v), 1e-3, calls)

    def jfwd(jax):
        return lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True)

    def jboth(jax):
        return jax.value_and_grad(lambda q, k, v: jax.numpy.sum(jfwd(jax)(q, k, v) ** 2), argnums=(0, 1, 2))
    jax_cols(fwd_row, jfwd, (q, k, v), ref_f, 1e-3, calls)
    jax_cols(bwd_row, jboth, (q, k, v), ref_b, 1e-3, calls)

    def tmake(backward):
        def make(torch):
            import torch.nn.functional as tf
            tq, tk, tv = (torch.from_numpy(a).cuda().transpose(1, 2).contiguous().requires_grad_(backward)
                          for a in (q, k, v))

            def call():
                out = tf.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
                if backward:
                    torch.autograd.grad(torch.sum(out * out), (tq, tk, tv))
                torch.cuda.synchronize()
            return call
        return make
    torch_col(fwd_row, tmake(False), calls)
    torch_col(bwd_row, tmake(True), calls)


def w_rms_norm(rows, S, calls):
    n, d = S["rms_norm"]
    row = rows["rms_norm grad"]
    row.label = f"rms_norm grad {n}x{d} f32"
    r = rng()
    x, g = r.standard_normal((n, d)).astype(np.float32), r.standard_normal(d).astype(np.float32)
    grad = ft.grad(lambda x, g: fnp.sum(ft.nn.rms_norm(x, g) * x), argnums=(0, 1))
    _, ref, _, _ = ft_measure(row, grad, (x, g), 1e-3, calls)

    def jgrad(jax):
        jnp = jax.numpy
        rms = lambda x, g: x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * g  # noqa: E731
        return jax.grad(lambda x, g: jnp.sum(rms(x, g) * x), argnums=(0, 1))
    jax_cols(row, jgrad, (x, g), ref, 1e-3, calls)

    def tmake(torch):
        tx, tg = (torch.from_numpy(a).cuda().requires_grad_() for a in (x, g))

        def call():
            y = tx * torch.rsqrt(torch.mean(tx * tx, dim=-1, keepdim=True) + 1e-6) * tg
            torch.autograd.grad(torch.sum(y * tx), (tx, tg))
            torch.cuda.synchronize()
        return call
    torch_col(row, tmake, calls)


def w_sum(rows, S, calls):
    n = S["sum"]
    row = rows["sum"]
    row.label = f"sum of {n // (1 << 20)}M f32" if n >= 1 << 20 else f"sum of {n} f32"
    x = rng().uniform(0.0, 1.0, n).astype(np.float32)
    _, ref, _, _ = ft_measure(row, lambda x: fnp.sum(x), (x,), 1e-5, calls)
    jax_cols(row, lambda jax: jax.numpy.sum, (x,), ref, 1e-5, calls)

    def tmake(torch):
        tx = torch.from_numpy(x).cuda()
        return lambda: (torch.sum(tx), torch.cuda.synchronize())
    torch_col(row, tmake, calls)


def w_mlp(rows, S, calls):
    sizes, batch = S["mlp"]
    row = rows["MLP step"]
    row.label = f"MLP step {'-'.join(map(str, sizes))} b{batch} f32 (SGD)"
    r = rng()
    params = [(r.standard_normal((m, n)).astype(np.float32) * 0.05, np.zeros(n, np.float32))
              for m, n in zip(sizes[:-1], sizes[1:])]
    x = r.standard_normal((batch, sizes[0])).astype(np.float32)
    y = np.eye(sizes[-1], dtype=np.float32)[r.integers(0, sizes[-1], batch)]

    def loss(m):
        def f(params, x, y):
            h = x
            for i, (w, b) in enumerate(params):
                h = h @ w + b
                if i < len(params) - 1:
                    h = m.maximum(h, 0.0)
            h = h - m.max(h, axis=1, keepdims=True)
            return -m.mean(m.sum(y * (h - m.log(m.sum(m.exp(h), axis=1, keepdims=True))), axis=1))
        return f

    def sgd(grad_fn):
        def step(params, x, y):
            v, g = grad_fn(params, x, y)
            return v, [(w - 0.01 * gw, b - 0.01 * gb) for (w, b), (gw, gb) in zip(params, g)]
        return step
    _, ref, _, _ = ft_measure(row, sgd(ft.value_and_grad(loss(fnp))), (params, x, y), 1e-3, calls)
    jax_cols(row, lambda jax: sgd(jax.value_and_grad(loss(jax.numpy))), (params, x, y), ref, 1e-3, calls)

    def tmake(torch):
        tp = [(torch.from_numpy(w).cuda().requires_grad_(), torch.from_numpy(b).cuda().requires_grad_())
              for w, b in params]
        tx, ty = torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()

        def call():
            h = tx
            for i, (w, b) in enumerate(tp):
                h = h @ w + b
                if i < len(tp) - 1:
                    h = torch.relu(h)
            v = -torch.mean(torch.sum(ty * torch.log_softmax(h, dim=1), dim=1))
            gs = torch.autograd.grad(v, [t for wb in tp for t in wb])
            with torch.no_grad():
                [t - 0.01 * gt for t, gt in zip([t for wb in tp for t in wb], gs)]
            torch.cuda.synchronize()
        return call
    torch_col(row, tmake, calls)


def w_hessian(rows, S, calls):
    n = S["hessian"]
    row = rows["Hessian"]
    row.label = f"Hessian {n}x{n} f64"
    r = rng()
    A, x = r.standard_normal((n, n)), r.standard_normal(n)
    f = lambda x: fnp.sum(fnp.tanh(A @ x) ** 2) + fnp.sum(x ** 4)  # noqa: E731
    _, ref, _, _ = ft_measure(row, ft.hessian(f), (x,), 1e-8, calls)

    def jh(jax):
        jA = jax.numpy.asarray(A)
        return jax.hessian(lambda x: jax.numpy.sum(jax.numpy.tanh(jA @ x) ** 2) + jax.numpy.sum(x ** 4))
    jax_cols(row, jh, (x,), ref, 1e-8, calls, x64=True)


def w_chains(rows, S, calls):
    n = S["chains"]
    size = f"{n // (1 << 20)}M" if n >= 1 << 20 else str(n)
    trow, arow = rows["transcendental chain"], rows["arithmetic chain"]
    trow.label = f"transcendental chain {size} f32 (tanh(sin·exp + cos) + sqrt)"
    arow.label = f"arithmetic chain {size} f32 ((2x + 1)x - 3)"
    x = rng().uniform(0.1, 0.9, n).astype(np.float32)

    def chain(m):
        return lambda v: m.tanh(m.sin(v) * m.exp(-v * v) + m.cos(v) * 0.5) * 1.5 + m.sqrt(v)

    def arith(v):
        return (v * 2.0 + 1.0) * v - 3.0
    _, ref_t, _, _ = ft_measure(trow, chain(fnp), (x,), 1e-5, calls)
    _, ref_a, _, _ = ft_measure(arow, arith, (x,), 1e-6, calls)
    jax_cols(trow, lambda jax: chain(jax.numpy), (x,), ref_t, 1e-5, calls)
    jax_cols(arow, lambda jax: arith, (x,), ref_a, 1e-6, calls)

    def tmake(fn):
        def make(torch):
            tx = torch.from_numpy(x).cuda()
            return lambda: (fn(tx), torch.cuda.synchronize())
        return make
    torch_col(trow, lambda torch: tmake(chain(torch))(torch), calls)
    torch_col(arow, tmake(arith), calls)


def w_small_kernel(rows, S, calls):
    n = S["small_kernel"]
    row = rows["small kernel"]
    row.label = f"small kernel ({n} f32: tanh(0.001x) + 1), per call"
    x = np.arange(n, dtype=np.float32)
    fn = lambda m: lambda v: m.tanh(v * 0.001) + 1.0  # noqa: E731
    calls = calls if calls < 10 else max(calls, 100)
    _, ref, _, _ = ft_measure(row, fn(fnp), (x,), 1e-6, calls)
    jax_cols(row, lambda jax: fn(jax.numpy), (x,), ref, 1e-6, calls)

    def tmake(torch):
        tx = torch.from_numpy(x).cuda()
        return lambda: (fn(torch)(tx), torch.cuda.synchronize())
    torch_col(row, tmake, calls)


RUN = {"sgemm": w_sgemm, "transformer": w_transformer, "attention": w_attention, "rms_norm": w_rms_norm,
       "sum": w_sum, "mlp": w_mlp, "hessian": w_hessian, "chains": w_chains, "small_kernel": w_small_kernel}


# ---------------------------------------------------------------- output

def fmt(t) -> str:
    if t < 1e-3:
        return f"{t * 1e6:.1f} µs"
    if t < 1.0:
        return f"{t * 1e3:.3g} ms" if t >= 1e-2 else f"{t * 1e3:.3f} ms"
    return f"{t:.2f} s"


def cell(v) -> str:
    if v is None:
        return "-"
    if v == "err":
        return "err"
    return fmt(v[0]) if v[0] == v[1] else f"{fmt(v[0])} / {fmt(v[1])}"


def print_row(row, seconds):
    ft_cell = row.fail if row.fail else cell(row.ft)
    hi = row.cols.get("jax_hi")
    ratio = f"{row.ft[0] / hi[0]:.2f}x" if row.ft and isinstance(hi, tuple) and hi[0] > 0 else "-"
    err = "-" if row.err is None else f"{row.err:.0e}"
    cols = " | ".join(cell(row.cols.get(c)) for c in COLUMNS)
    print(f"| {row.label} | {ft_cell} | {err} | {cols} | {ratio} | {seconds:.1f} |", flush=True)


def header(kind_option):
    from functrace.backends.opencl.runtime import get_runtime
    rt = get_runtime()
    if rt is None:
        print("no usable OpenCL device (see the warning above): nothing to measure", flush=True)
        raise SystemExit(2)
    dev = rt.device
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=os.path.dirname(os.path.abspath(__file__)), timeout=10).stdout.strip()
    except Exception:  # noqa: BLE001
        commit = ""
    print(f"device: {dev.name.strip()} ({dev.platform.name.strip()}, {dev.platform.version.strip()}), "
          f"driver {dev.driver_version.strip()}, {dev.max_compute_units} compute units, "
          f"{dev.global_mem_size / 2**30:.1f} GiB", flush=True)
    print(f"functrace {commit or '?'}: device kind {rt.kind} (option {kind_option}); "
          f"python {sys.version.split()[0]}, numpy {np.__version__}", flush=True)
    jax_gpu()
    torch_gpu()
    print(_libs["jax_why"], "|", _libs["torch_why"], flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, 3 calls: a correctness smoke on any device")
    ap.add_argument("--only", default="", help=f"comma-separated workloads of {', '.join(RUN)}")
    ap.add_argument("--calls", type=int, default=None, help="timed calls per row (default 10; 3 with --smoke)")
    ap.add_argument("--device-kind", choices=("auto", "cpu", "gpu"), default=None,
                    help="the opencl_device_kind option (default: FUNCTRACE_OPENCL_DEVICE_KIND or auto)")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(RUN)
    unknown = [n for n in names if n not in RUN]
    if unknown:
        ap.error(f"unknown workloads {unknown}; choose from {list(RUN)}")
    if args.device_kind:
        ft.config.update("opencl_device_kind", args.device_kind)
    sizes, calls = (SMOKE, 3) if args.smoke else (FULL, 10)
    if args.smoke:  # tiny programs run as kernels too, not on the host (the cpu kind's shortcut)
        ft.config.update("opencl_small_program_elements", 0)
        ft.config.update("opencl_host_step_elements", 0)
    calls = args.calls or calls
    header(ft.config.opencl_device_kind)
    print(f"{'smoke sizes' if args.smoke else 'full sizes'}; fastest / median of {calls} calls after a warm-up "
          f"(the small kernel: {calls if calls < 10 else max(calls, 100)}); err: max difference from functrace's "
          f"numpy backend relative to its largest value\n", flush=True)
    print("| workload | functrace | err | JAX jit (highest) | JAX jit (default) | PyTorch (fp32) "
          "| functrace / JAX highest | wall s |")
    print("|---|---|---|---|---|---|---|---|", flush=True)
    start, failed = time.perf_counter(), 0
    for name in names:
        rows = {k: Row(k) for k in WORKLOADS[name]}
        t0 = time.perf_counter()
        try:
            RUN[name](rows, sizes, calls)
        except Exception as e:  # noqa: BLE001 (a row that could not run is a FAIL, not a crash)
            why = f"FAIL: {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
            for row in rows.values():
                if row.ft is None and row.fail is None:
                    row.fail = why
            import traceback
            traceback.print_exc(limit=4, file=sys.stderr)
        for row in rows.values():
            if row.fail is None and row.ft is None:
                row.fail = "FAIL: not measured"
            failed += row.fail is not None
            print_row(row, time.perf_counter() - t0)
    for note in NOTES:
        print(f"- {note}")
    print(f"\n{failed} row(s) failed; {time.perf_counter() - start:.1f} s in all", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
