"""The gpu kind's attention kernels (issue 28: cl_kernels/attention_tiled.cl), forced on this
machine's device: the forward (out and lse) and the gradients of q, k and v against the numpy
backend -- causal or not, with a boolean mask, a fully masked row, a fully masked block of rows,
sequence lengths of 1, 7, 65 and 130 (one partial tile, several tiles, tiles the causal mask
skips), T != S, several heads, no / one / two batch axes, an infinite value at keys the causal
mask hides, float32 and float64 -- the same bits on a second call, and the report naming the
tiled design.

Head dim and heads are the same in every case: one kernel specialization and one program per
dtype (cached on disk afterwards)."""
import numpy as np
import pytest
from test_opencl_kernels import _full_mask, assert_close, assert_kernels, run_both

import functrace as ft
import functrace.numpy as fnp
from functrace import nn
from functrace.backends.opencl import attention as cl_attention
from functrace.backends.opencl import runtime as cl_runtime
from functrace.primitives import nn as fused

pytestmark = pytest.mark.skipif(cl_runtime.get_runtime() is None, reason="no usable OpenCL device on this machine")


@pytest.fixture(autouse=True)
def gpu_kind(monkeypatch):
    """Every test here runs with the gpu kind forced on this machine's device."""
    monkeypatch.setattr(ft.config, "opencl_device_kind", "gpu")


N, H = 3, 16
# (batch axes, T, S, mask kind)
CASES = [
    ((2,), 7, 7, "causal"),
    ((), 130, 130, "causal"),          # three 64-key tiles: the first group skips two
    ((2, 1), 65, 65, "random"),        # two batch axes; a fully masked row
    ((1,), 1, 1, "none"),
    ((2,), 65, 130, "causal+random"),  # T < S; row 0 keeps no key
    ((1,), 130, 65, "blocks"),         # whole tiles masked for some groups, masked rows
]


def _case(rng, batch, T, S, kind, dtype):
    q = rng.standard_normal(batch + (T, N, H)).astype(dtype)
    k, v = (rng.standard_normal(batch + (S, N, H)).astype(dtype) for _ in range(2))
    cot = rng.standard_normal(q.shape).astype(dtype)
    mask = None
    if "random" in kind:
        mask = rng.random(batch + (N, T, S)) > 0.3
        mask[..., 0, :] = False
    if kind == "blocks":
        t, s = np.arange(T)[:, None], np.arange(S)[None]
        mask = np.broadcast_to((np.abs(t - s) < 5) | (s < 3), batch + (N, T, S)).copy()
        mask[..., 70:90, :] = False
    return q, k, v, cot, mask, "causal" in kind


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy reference: masked rows, inf * 0
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tiled_attention_matches_numpy(dtype):
    rng = np.random.default_rng(28)
    cases = [_case(rng, *c, dtype) for c in CASES]
    arrays = [(q, k, v, c) for q, k, v, c, _, _ in cases]
    masks = [(m, causal) for *_, m, causal in cases]
    # an inf in v at a key the causal mask hides from the rows before it: their output's column
    # is NaN (0 * inf), as in the reference, so the tile holding it is never skipped
    q, k, v, c = arrays[1]
    v = v.copy()
    v[100, 1, 3] = np.inf
    arrays[1] = (q, k, v, c)

    def f(arrays):
        res = []
        for (q, k, v, c), (m, causal) in zip(arrays, masks):
            scale = 1.0 / np.sqrt(H)
            out, lse = fused.attention_p.bind(q, k, v, _full_mask(q, k, m, causal), causal=causal, scale=scale)
            grads = ft.grad(lambda q, k, v: fnp.sum(nn.attention(q, k, v, causal=causal, mask=m) * c),
                            argnums=(0, 1, 2))(q, k, v)
            res.append((out, lse, grads))
        return res

    got, want, report = run_both(f, arrays)
    for g, w in zip(ft.tree_util.tree_leaves(got), ft.tree_util.tree_leaves(want)):
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    finite = lambda t: ft.tree_util.tree_map(lambda a: np.where(np.isnan(a), 0, a), t)
    assert_close(finite(got), finite(want), dtype)
    out, lse, _ = got[1]
    nan = np.zeros(out.shape, bool)
    nan[:100, 1, 3] = True
    np.testing.assert_array_equal(np.isnan(out), nan)
    # fully masked rows average v over all keys, with lse = log(S) - 1e30
    out, lse, _ = got[4]
    assert np.all(lse[..., 0] < -1e29) and np.mean(lse[..., 1:] > -1e29) > 0.9
    np.testing.assert_allclose(out[:, 0], arrays[4][2].mean(axis=1), rtol=1e-5, atol=1e-5)

    assert_kernels(report, ["attention", "attention_bwd"])
    bk = cl_attention._tiled_rows(H, np.dtype(dtype).itemsize)
    for line in report.splitlines():
        if line.startswith("  kernel  attention"):
            assert "attention_tiled.cl" in line and f"{bk}-row local-memory tiles" in line, line
            assert "a work-group per 64 queries" in line, line
    assert "a work-group per 64 keys" in report
    # the same bits on every call (fixed summation orders, no atomics)
    again = ft.tree_util.tree_leaves(ft.jit(f, backend="opencl")(arrays))
    for a, b in zip(again, ft.tree_util.tree_leaves(got)):
        assert np.asarray(a).tobytes() == b.tobytes()


def test_tile_rows_and_fallback_head_dims():
    """Local tiles stay within 32 KiB and the device's local memory (rows a multiple of 16, at most
    64); head dims past 128 keep the CPU design (attention.cl) on the gpu kind."""
    assert [cl_attention._tiled_rows(h, 4) for h in (8, 64, 65, 128)] == [64, 64, 32, 32]
    assert [cl_attention._tiled_rows(h, 8) for h in (8, 64, 128)] == [64, 32, 16]
    # a device with 32 KiB of local memory: 48-row tiles; too little for 16 rows: the CPU design
    assert cl_attention._tiled_rows(64, 4, 32768 - cl_attention.TILED_LOCAL_RESERVE) == 48 and cl_attention._tiled_rows(128, 8, 16384) == 0
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((5, 1, 136)).astype(np.float32) for _ in range(3))
    got, want, report = run_both(lambda q, k, v: nn.attention(q, k, v, causal=True), q, k, v)
    assert_close(got, want, np.float32)
    assert "attention.cl" in report and "attention_tiled.cl" not in report
