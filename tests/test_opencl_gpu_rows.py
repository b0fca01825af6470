"""The gpu kind's row kernels (issue 28: cl_kernels/rmsnorm_rows.cl, cl_kernels/softmax_rows.cl),
forced on this machine's device: rms_norm and its gradient (dx by row work-groups, dw as a column
reduction over row chunks), softmax, log_softmax and cross-entropy (log_softmax and a gather),
forward and gradients against the numpy backend -- rows of 1, 3, 20, 257 and 1000 elements (one
row per work-group, several rows per group, rows longer than the group), a single row, many short
rows, leading batch axes, float32 and float64, rows holding NaN and +-inf -- the same bits on every
call, and the report naming the work-group design.

Each dtype's cases are one jitted function: one program per dtype (cached on disk afterwards)."""
from types import SimpleNamespace

import numpy as np
import pytest
from test_opencl_kernels import assert_close, assert_kernels, run_both

import functrace as ft
import functrace.numpy as fnp
from functrace import nn
from functrace.backends.opencl import norms
from functrace.backends.opencl import runtime as cl_runtime

pytestmark = pytest.mark.skipif(cl_runtime.get_runtime() is None, reason="no usable OpenCL device on this machine")


@pytest.fixture(autouse=True)
def gpu_kind(monkeypatch):
    """Every test here runs with the gpu kind forced on this machine's device."""
    monkeypatch.setattr(ft.config, "opencl_device_kind", "gpu")


# rows of 1 (256 per group), 3 (64 per group), 20 (8 per group), 257 and 1000 (longer than the
# group); a single row; many short rows (several chunks of dw + combine); leading batch axes
SHAPES = [(1,), (300, 1), (5, 3), (257,), (2, 3, 1000), (700, 20), (2, 4, 257)]


def _cases(dtype, seed):
    rng = np.random.default_rng(seed)
    xs = [(rng.standard_normal(s) * 3).astype(dtype) for s in SHAPES]
    ws = [rng.standard_normal(s[-1:]).astype(dtype) for s in SHAPES]
    cs = [rng.standard_normal(s).astype(dtype) for s in SHAPES]
    return xs, ws, cs


def _special(x):
    """Rows of -inf, one +inf, one NaN (the numpy reference's NaN rows)."""
    x = x.copy()
    x[0] = -np.inf
    x[1, 3] = np.inf
    x[2, 5] = np.nan
    x[3, :2] = -np.inf
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_kernels_match_numpy(dtype):
    xs, ws, cs = _cases(dtype, 28)
    sp = _special(xs[5])
    labels = np.random.default_rng(1).integers(0, 20, 700)

    def f(xs, ws, cs, sp):
        def loss(xs, ws):
            return sum(fnp.sum((nn.rms_norm(x, w, eps=1e-6 if i % 2 else 0.1) + nn.log_softmax(x)) * c)
                       for i, (x, w, c) in enumerate(zip(xs, ws, cs[2:6]))) + nn.cross_entropy(xs[3], labels)
        outs = [(nn.rms_norm(x, w), nn.softmax(x), nn.log_softmax(x)) for x, w in zip(xs, ws)]
        special = (nn.rms_norm(sp, ws[5]), nn.softmax(sp), nn.log_softmax(sp),
                   nn.cross_entropy(sp, labels, reduction="none"))
        return outs, special, ft.grad(loss, argnums=(0, 1))(xs[2:6], ws[2:6])

    with np.errstate(invalid="ignore", over="ignore"):
        got, want, report = run_both(f, xs, ws, cs, sp)
    assert_close(got, want, dtype)
    assert np.isnan(got[1][1][0]).all() and np.isnan(got[1][1][2]).all() and not np.isnan(got[1][1][4]).any()
    assert_kernels(report, ["rms_norm", "rms_norm_bwd", "softmax", "log_softmax"])
    for line in report.splitlines():
        if "kernel  rms_norm" in line or "softmax:" in line:
            assert "_rows.cl" in line and "a work-group per" in line, line
    assert "rows of 1000: a work-group per row (256 work-items)" in report
    assert "rows of 20: a work-group per 8 rows (32 work-items per row)" in report
    assert "rows of 1: a work-group per 256 rows (1 work-item per row)" in report
    assert "column reduction" in report and "row chunks + combine" in report
    # the same bits on every call (fixed summation orders, no atomics)
    jf = ft.jit(f, backend="opencl")
    again = [np.asarray(a) for a in ft.tree_util.tree_leaves(jf(xs, ws, cs, sp))]
    for a, b in zip(again, ft.tree_util.tree_leaves(got)):
        assert a.tobytes() == b.tobytes()


def test_small_work_groups(monkeypatch):
    """A device allowing fewer work-items (here 16: dw work-groups of 16 columns x 1 lane) computes
    the same values."""
    monkeypatch.setattr(norms, "ROW_GROUP", 16)
    xs, ws, cs = _cases(np.float64, 3)
    xs, ws, cs = xs[4:6], ws[4:6], cs[4:6]

    def f(xs, ws, cs):
        loss = lambda xs, ws: sum(fnp.sum(nn.rms_norm(x, w) * c) + fnp.sum(nn.log_softmax(x) * c)
                                  for x, w, c in zip(xs, ws, cs))
        return [nn.softmax(x) for x in xs], ft.grad(loss, argnums=(0, 1))(xs, ws)

    got, want, report = run_both(f, xs, ws, cs)
    assert_close(got, want, np.float64)
    assert "rows of 1000: a work-group per row (16 work-items)" in report
    assert "work-groups of 16 columns x 1 row lane over" in report


def test_work_group_sizes_fit_the_device():
    dev = lambda n: SimpleNamespace(device=SimpleNamespace(max_work_group_size=n))
    assert norms.row_group_size(dev(4096)) == norms.row_group_size(dev(1024)) == 256
    assert norms.row_group_size(dev(192)) == 128 and norms.row_group_size(dev(1)) == 1
    assert [norms.threads_per_row(d, 256) for d in (1, 2, 3, 20, 256, 257, 65536)] == [1, 2, 4, 32, 256, 256, 256]
    assert [norms.threads_per_row(d, 16) for d in (1, 3, 17)] == [1, 4, 16]
    assert norms._dw_row_chunks(65536, 1024, 8) == 32 and norms._dw_row_chunks(64, 1024, 8) == 1
