"""Transformer block forward + backward (batch 4, seq 256, d_model 256, 4 heads, SwiGLU hidden 683,
RMSNorm, causal attention), float32: functrace OpenCL (parameters on the device, as JAX's are)
and numpy backends vs JAX jit and PyTorch eager (``scaled_dot_product_attention``), same run,
every library held to the same thread budget.
Run: ``python benchmarks/bench_transformer.py`` (the defaults, then pinned to one thread: see _common.py)."""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import call_times, median, setup, torch_or_none  # noqa: E402

THREADS = setup()

import numpy as np

import functrace as ft
import functrace.numpy as fnp

B, T, D, H, F = 4, 256, 256, 4, 683


def init(rng):
    s = lambda *shape: (rng.standard_normal(shape) / math.sqrt(shape[0])).astype(np.float32)
    return {"wq": s(D, D), "wk": s(D, D), "wv": s(D, D), "wo": s(D, D), "g1": np.ones(D, np.float32),
            "g2": np.ones(D, np.float32), "w1": s(D, F), "w3": s(D, F), "w2": s(F, D)}


def block_ft(p, x):
    h = ft.nn.rms_norm(x, p["g1"])
    split = lambda a: fnp.reshape(a, (B, T, H, D // H))
    att = ft.nn.attention(split(h @ p["wq"]), split(h @ p["wk"]), split(h @ p["wv"]), causal=True)
    x = x + fnp.reshape(att, (B, T, D)) @ p["wo"]
    h = ft.nn.rms_norm(x, p["g2"])
    x = x + ft.nn.swiglu(h @ p["w1"], h @ p["w3"]) @ p["w2"]
    return fnp.mean(x * x)


def block_jax(p, x):
    import jax
    import jax.numpy as jnp

    def rms(x, g):
        return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * g
    h = rms(x, p["g1"])
    split = lambda a: jnp.reshape(a, (B, T, H, D // H))
    att = jax.nn.dot_product_attention(split(h @ p["wq"]), split(h @ p["wk"]), split(h @ p["wv"]), is_causal=True)
    x = x + jnp.reshape(att, (B, T, D)) @ p["wo"]
    h = rms(x, p["g2"])
    x = x + (jax.nn.silu(h @ p["w1"]) * (h @ p["w3"])) @ p["w2"]
    return jnp.mean(x * x)


def block_torch(torch, p, x):
    import torch.nn.functional as F_

    def rms(x, g):
        return x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + 1e-6) * g
    h = rms(x, p["g1"])
    split = lambda a: a.reshape(B, T, H, D // H).transpose(1, 2)  # (B, heads, T, head_dim)
    att = F_.scaled_dot_product_attention(split(h @ p["wq"]), split(h @ p["wk"]), split(h @ p["wv"]), is_causal=True)
    x = x + att.transpose(1, 2).reshape(B, T, D) @ p["wo"]
    h = rms(x, p["g2"])
    x = x + (F_.silu(h @ p["w1"]) * (h @ p["w3"])) @ p["w2"]
    return torch.mean(x * x)


def main():
    rng = np.random.default_rng(0)
    p, x = init(rng), rng.standard_normal((B, T, D)).astype(np.float32)
    contenders = {}
    step_cl = ft.jit(ft.value_and_grad(block_ft), backend="opencl")
    step_np = ft.jit(ft.value_and_grad(block_ft), backend="numpy")
    dp, dx = ft.device_put((p, x))
    contenders["functrace opencl"] = lambda: ft.block_until_ready(step_cl(dp, dx))
    contenders["functrace numpy"] = lambda: step_np(p, x)
    ref = step_np(p, x)
    got = step_cl(p, x)
    for g, w in zip(ft.tree_util.tree_leaves(got), ft.tree_util.tree_leaves(ref)):
        np.testing.assert_allclose(np.asarray(g), w, rtol=2e-3, atol=2e-4)
    try:
        import jax
        jp = jax.tree_util.tree_map(jax.numpy.asarray, p)
        jx = jax.numpy.asarray(x)
        jstep = jax.jit(jax.value_and_grad(block_jax))
        jv, _ = jstep(jp, jx)
        np.testing.assert_allclose(float(jv), float(ref[0]), rtol=1e-3)
        contenders["JAX jit"] = lambda: jax.block_until_ready(jstep(jp, jx))
    except ImportError:
        pass
    torch = torch_or_none(THREADS)
    if torch is not None:
        tp = {k: torch.tensor(v, requires_grad=True) for k, v in p.items()}
        tx = torch.from_numpy(x)

        def torch_step():
            for v in tp.values():
                v.grad = None
            loss = block_torch(torch, tp, tx)
            loss.backward()
            return loss
        np.testing.assert_allclose(float(torch_step().detach()), float(ref[0]), rtol=1e-3)
        contenders["PyTorch eager"] = torch_step
    results = {k: [] for k in contenders}
    for _ in range(3):
        for k, fn in contenders.items():
            results[k] += call_times(fn)
    base = min(results["functrace opencl"])
    print(f"transformer block fwd+bwd (B={B}, T={T}, D={D}, heads={H}, SwiGLU {F}), float32, {THREADS} thread(s) "
          f"(fastest of {len(results[k])} calls; median)")
    for k, ts in results.items():
        t = min(ts)
        print(f"  {k:<18} {t * 1e3:8.2f} ms   {t / base:6.2f}x of functrace opencl   median {median(ts) * 1e3:8.2f} ms")
    exe = step_cl.lower(dp, dx).compile()
    print(f"  opencl: {exe.num_kernel_launches} kernel launches per step")


if __name__ == "__main__":
    main()
