"""Small-batch latency (issue 15, item 5): the forward of a 2-block transformer (token embedding,
RMSNorm, causal attention with 4 heads, SwiGLU MLP, d_model 128, vocabulary 512) on one sequence
of 64 tokens, float32, as one sampling step would run it: functrace ``jit`` on OpenCL (parameters
on the device) and on the numpy backend against JAX jit, timed interleaved in the same run; also
the OpenCL program's kernel launches and host steps per call.
Run: ``python benchmarks/bench_sampling.py`` (the defaults, then pinned to one thread: see _common.py).
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import best_of, setup  # noqa: E402

THREADS = setup()

import numpy as np

import functrace as ft
import functrace.numpy as fnp

BLOCKS, T, D, H, F, VOCAB = 2, 64, 128, 4, 344, 512


def init(rng):
    """Embedding table, per-block weights, final norm; the output projection is the table's transpose."""
    s = lambda *shape: (rng.standard_normal(shape) / math.sqrt(shape[0])).astype(np.float32)
    blocks = [{"wq": s(D, D), "wk": s(D, D), "wv": s(D, D), "wo": s(D, D), "g1": np.ones(D, np.float32),
               "g2": np.ones(D, np.float32), "w1": s(D, F), "w3": s(D, F), "w2": s(F, D)} for _ in range(BLOCKS)]
    return {"embed": s(VOCAB, D), "blocks": blocks, "g": np.ones(D, np.float32)}


def forward_ft(p, ids):
    """Logits (1, T, VOCAB) of token ids (1, T)."""
    x = ft.nn.embedding(p["embed"], ids)
    split = lambda a: fnp.reshape(a, (1, T, H, D // H))
    for b in p["blocks"]:
        h = ft.nn.rms_norm(x, b["g1"])
        att = ft.nn.attention(split(h @ b["wq"]), split(h @ b["wk"]), split(h @ b["wv"]), causal=True)
        x = x + fnp.reshape(att, (1, T, D)) @ b["wo"]
        h = ft.nn.rms_norm(x, b["g2"])
        x = x + ft.nn.swiglu(h @ b["w1"], h @ b["w3"]) @ b["w2"]
    return ft.nn.rms_norm(x, p["g"]) @ p["embed"].T


def forward_jax(p, ids):
    import jax
    import jax.numpy as jnp

    def rms(x, g):
        return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * g
    x = jnp.take(p["embed"], ids, axis=0)
    split = lambda a: jnp.reshape(a, (1, T, H, D // H))
    for b in p["blocks"]:
        h = rms(x, b["g1"])
        att = jax.nn.dot_product_attention(split(h @ b["wq"]), split(h @ b["wk"]), split(h @ b["wv"]), is_causal=True)
        x = x + jnp.reshape(att, (1, T, D)) @ b["wo"]
        h = rms(x, b["g2"])
        x = x + (jax.nn.silu(h @ b["w1"]) * (h @ b["w3"])) @ b["w2"]
    return rms(x, p["g"]) @ p["embed"].T


def main():
    rng = np.random.default_rng(0)
    p = init(rng)
    ids = rng.integers(0, VOCAB, (1, T)).astype(np.int32)
    fwd_cl = ft.jit(forward_ft, backend="opencl")
    fwd_np = ft.jit(forward_ft, backend="numpy")
    dp, dids = ft.device_put((p, ids))
    ref = fwd_np(p, ids)
    np.testing.assert_allclose(np.asarray(fwd_cl(dp, dids)), ref, rtol=2e-3, atol=2e-4)
    contenders = {"functrace opencl": lambda: ft.block_until_ready(fwd_cl(dp, dids)),
                  "functrace numpy": lambda: fwd_np(p, ids)}
    try:
        import jax
        jp = jax.tree_util.tree_map(jax.numpy.asarray, p)
        jids = jax.numpy.asarray(ids)
        jfwd = jax.jit(forward_jax)
        np.testing.assert_allclose(np.asarray(jfwd(jp, jids)), ref, rtol=2e-3, atol=2e-4)
        contenders["JAX jit"] = lambda: jax.block_until_ready(jfwd(jp, jids))
    except ImportError:
        pass
    results = {k: [] for k in contenders}
    for _ in range(5):  # interleaved rounds
        for k, fn in contenders.items():
            results[k].append(best_of(fn, repeat=20, warmup=3))
    base = min(results["functrace opencl"])
    print(f"{BLOCKS}-block transformer forward, 1x{T} tokens (D={D}, heads={H}, SwiGLU {F}, vocabulary "
          f"{VOCAB}), float32, {THREADS} thread(s)")
    for k, ts in results.items():
        t = min(ts)
        print(f"  {k:<18} {t * 1e3:8.3f} ms   {t / base:6.2f}x of functrace opencl")
    if "JAX jit" in results:
        jax_t = min(results["JAX jit"])
        print(f"  functrace / JAX jit (target <= 1.2): opencl {base / jax_t:.2f}x, "
              f"numpy {min(results['functrace numpy']) / jax_t:.2f}x")
    exe = fwd_cl.lower(dp, dids).compile().executable
    settled = " (settled: run as one numpy program)" if getattr(exe, "_on_host", None) is not None else ""
    print(f"  opencl: {exe.num_kernel_launches} kernel launches and "
          f"{getattr(exe, 'num_host_steps', 0)} host steps per call{settled}")


if __name__ == "__main__":
    main()
