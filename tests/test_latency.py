"""The small-batch latency paths (issue 15): dot_general's cached plans, the numpy backend's paired
matrix-vector products, the forward numpy implementations of attention and rms_norm against
their reference decompositions, in every layout and edge case they special-case."""
import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace import primitives
from functrace.backends import numpy_backend
from functrace.backends.opencl import runtime as cl_runtime
from functrace.core import eval_jaxpr
from functrace.primitives import nn as fused

RNG = np.random.default_rng(15)

DOT_CASES = [  # (x shape, y shape, dimension numbers, einsum spec)
    ((5,), (5,), (((0,), (0,)), ((), ())), "k,k->"),
    ((4, 5), (5,), (((1,), (0,)), ((), ())), "mk,k->m"),
    ((5, 4), (5,), (((0,), (0,)), ((), ())), "km,k->m"),
    ((5,), (5, 3), (((0,), (0,)), ((), ())), "k,kn->n"),
    ((5,), (3, 5), (((0,), (1,)), ((), ())), "k,nk->n"),
    ((4, 5), (5, 3), (((1,), (0,)), ((), ())), "mk,kn->mn"),
    ((5, 4), (3, 5), (((0,), (1,)), ((), ())), "km,nk->mn"),
    ((2, 4, 5), (5, 3), (((2,), (0,)), ((), ())), "abk,kn->abn"),
    ((2, 4, 5), (3, 5), (((2,), (1,)), ((), ())), "abk,nk->abn"),
    ((5, 2, 4), (3, 5, 2), (((0, 1), (1, 2)), ((), ())), "kjm,nkj->mn"),
    ((6, 4, 5), (6, 5, 3), (((2,), (1,)), ((0,), (0,))), "bmk,bkn->bmn"),
    ((4, 6, 5), (5, 3, 6), (((2,), (0,)), ((1,), (2,))), "mbk,knb->bmn"),
    ((0, 5), (5, 3), (((1,), (0,)), ((), ())), "mk,kn->mn"),
    ((4, 0), (0, 3), (((1,), (0,)), ((), ())), "mk,kn->mn"),
]


@pytest.mark.parametrize("x_shape,y_shape,dims,spec", DOT_CASES)
def test_dot_general_plans_match_einsum(x_shape, y_shape, dims, spec):
    """Each cached plan (matrix/vector products, transposed operands, contractions over several
    axes, batch axes in any position, empty axes) against einsum, eagerly and jitted."""
    x, y = RNG.standard_normal(x_shape), RNG.standard_normal(y_shape)
    want = np.einsum(spec, x, y)
    got = primitives.dot_general_p.impl(x, y, dimension_numbers=dims)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    jitted = ft.jit(lambda a, b: primitives.dot_general(a, b, dims), backend="numpy")(x, y)
    np.testing.assert_allclose(jitted, want, rtol=1e-12, atol=1e-12)


def _pairs(f, *args):
    return numpy_backend._paired_matrix_vector_products(ft.jit(f).lower(*args).jaxpr.jaxpr)


@pytest.mark.parametrize("product", [lambda a, x: a @ x, lambda a, x: a.T @ x, lambda a, x: x @ a,
                                     lambda a, x: x @ a.T], ids=["Ax", "ATx", "xA", "xAT"])
def test_matrix_vector_products_of_one_matrix_run_paired(product):
    """A @ x and A @ v (every orientation) in one BLAS product: the same values as apart."""
    a, x, v = RNG.standard_normal((256, 256)), RNG.standard_normal(256), RNG.standard_normal(256)
    f = lambda a, x, v: (product(a, x) * 2.0, fnp.tanh(product(a, v)))
    assert len(_pairs(f, a, x, v)) == 1
    got = ft.jit(f, backend="numpy")(a, x, v)
    np.testing.assert_allclose(got[0], product(a, x) * 2.0, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got[1], np.tanh(product(a, v)), rtol=1e-12, atol=1e-12)


def test_matrix_vector_products_not_paired():
    """A vector computed after the first product (A @ (A @ x)), another matrix, or a matrix too
    small or too large for the gain: separate products, still right."""
    a, b, x = RNG.standard_normal((256, 256)), RNG.standard_normal((256, 256)), RNG.standard_normal(256)
    assert _pairs(lambda a, x: a @ (a @ x), a, x) == {}
    assert _pairs(lambda a, b, x: (a @ x, b @ x), a, b, x) == {}
    small, xs = RNG.standard_normal((64, 64)), RNG.standard_normal(64)
    assert _pairs(lambda a, x, v: (a @ x, a @ v), small, xs, xs) == {}
    large, xl = np.ones((768, 768)), np.ones(768)
    assert _pairs(lambda a, x, v: (a @ x, a @ v), large, xl, xl) == {}
    np.testing.assert_allclose(ft.jit(lambda a, x: a @ (a @ x), backend="numpy")(a, x), a @ (a @ x), rtol=1e-12)


def test_hessian_vector_product_runs_its_two_products_paired():
    """Forward over reverse: the primal and tangent products with A pair; the value is H @ v."""
    a, x, v = RNG.standard_normal((256, 256)) / 16, RNG.standard_normal(256), RNG.standard_normal(256)
    f = lambda x: fnp.sum(fnp.tanh(a @ x) ** 2)
    hvp = lambda x, v: ft.jvp(ft.grad(f), (x,), (v,))[1]
    assert len(_pairs(hvp, x, v)) == 1
    np.testing.assert_allclose(ft.jit(hvp, backend="numpy")(x, v), ft.hessian(f)(x) @ v, rtol=1e-10, atol=1e-12)


def _attention_reference(q, k, v, mask, scale):
    closed = ft.make_jaxpr(lambda q, k, v: fused.attention_reference(q, k, v, mask, causal=False, scale=scale))
    jaxpr = closed(q, k, v)
    return [np.asarray(o) for o in eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, q, k, v)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 7, 3, 4), (2, 3, 5, 2, 3), (5, 1, 2)])
def test_attention_forward_matches_its_reference(shape, dtype):
    """Output (C-contiguous, (..., T, N, H)) and log-sum-exp against the reference decomposition,
    with a random mask that leaves some rows fully masked (their output: the average of v)."""
    q, k, v = (RNG.standard_normal(shape).astype(dtype) for _ in range(3))
    mask_shape = shape[:-3] + (shape[-2], shape[-3], shape[-3])
    mask = RNG.random(mask_shape) > 0.4
    mask[..., 0, :] = False  # the first query of every head sees nothing
    out, lse = fused.attention_p.impl(q, k, v, mask, causal=False, scale=0.7)
    want_out, want_lse = _attention_reference(q, k, v, mask, 0.7)
    assert out.dtype == dtype and lse.dtype == dtype and out.flags.c_contiguous
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, want_out, rtol=tol, atol=tol)
    np.testing.assert_allclose(lse, want_lse, rtol=tol)
    np.testing.assert_allclose(out[..., 0, :, :], np.broadcast_to(v.mean(axis=-3), out[..., 0, :, :].shape),
                               rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("shape", [(3, 7), (2, 1, 5), (4,), (3, 0)])
def test_rms_norm_forward_matches_its_reference(shape, dtype):
    """The BLAS row dots (float32/64) and the plain sum (float16), empty rows included."""
    x = RNG.standard_normal(shape).astype(dtype)
    w = RNG.standard_normal(shape[-1:]).astype(dtype)
    got = fused.rms_norm_p.impl(x, w, eps=1e-6)
    wide = x.astype(np.float64)
    want = wide / np.sqrt((wide * wide).mean(-1, keepdims=True) + 1e-6) * w if shape[-1] else wide
    assert got.dtype == dtype and got.shape == shape
    np.testing.assert_allclose(got, want, rtol={np.float16: 3e-3, np.float32: 1e-5, np.float64: 1e-12}[dtype])


def test_host_trial_keeps_the_way_with_the_lower_median():
    """The trial's verdict: the median call of each way decides (times the margin)."""
    from functrace.backends.opencl.executable import HostTrial
    trial = HostTrial(host=None, why="a test")
    trial.times[False][:] = [5, 4, 6, 4.2, 9]
    trial.times[True][:] = [9, 3.5, 3, 4, 4.1]
    assert trial.host_wins()  # medians: 4 < 5
    trial.times[False][:] = [3.0, 3.0, 3.0, 5.0, 9.0]
    assert not trial.host_wins()  # 4 > 3
    trial.times[False][:] = [4.5] * 5
    assert trial.host_wins()  # 4 < 4.5
    margin = HostTrial(None, "a margin", 1.2)
    margin.times = {False: [4.5] * 5, True: [4.0] * 5}
    assert not margin.host_wins()  # 4 x 1.2 > 4.5


@pytest.mark.parametrize("host_wins", [False, True])
def test_one_unit_device_program_ends_on_the_faster_way(monkeypatch, host_wins):
    """On a device running kernels in the calling thread, a program with kernels is tried both
    ways inside its first call; every call's result is right and bitwise the first's, and the
    winner stays (the host: no launches, the report says why)."""
    from functrace.backends.opencl import executable, planner
    monkeypatch.setattr(executable, "compute_units", lambda rt: 1)
    monkeypatch.setattr(planner, "compute_units", lambda rt: 1)
    monkeypatch.setattr(executable.HostTrial, "host_wins", lambda self: host_wins)
    monkeypatch.setattr(executable, "_TRIAL_VERDICTS", {})  # (no verdict from an earlier test's program)
    monkeypatch.setattr(ft.config, "opencl_small_program_elements", 0)
    monkeypatch.setattr(ft.config, "opencl_host_step_elements", None)  # (a number pins placements: no trial)
    x, w = RNG.standard_normal((64, 96)).astype(np.float32), RNG.standard_normal((96, 80)).astype(np.float32)
    f = lambda x, w: fnp.tanh(x @ w) * 2.0 + 1.0
    jitted = ft.jit(f, backend="opencl")
    first = np.asarray(jitted(x, w))
    np.testing.assert_allclose(first, np.tanh(x @ w) * 2.0 + 1.0, rtol=1e-5, atol=1e-5)
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(jitted(x, w)), first)
    compiled = jitted.lower(x, w).compile()
    exe = compiled.executable
    assert exe._settled and (exe._on_host is not None) == host_wins
    assert (exe.num_kernel_launches == 0) == host_wins
    assert ("measured faster as one numpy program" in exe.report()) == host_wins


@pytest.mark.skipif(cl_runtime.get_runtime() is None or cl_runtime.get_runtime().kind != "cpu",
                    reason="describes the cpu kind's trials")
@pytest.mark.parametrize("host_wins", [False, True])
def test_worker_device_program_with_kernels_is_tried_under_trial_elements(monkeypatch, host_wins):
    """On a device handing kernels to worker threads, a program with a kernel and under
    TRIAL_ELEMENTS of work is tried both ways inside its first call and the winner stays; a larger
    one, or one whose placements are pinned, is not tried."""
    from functrace.backends.opencl import executable, placement, planner
    rt = cl_runtime.get_runtime()
    monkeypatch.setattr(executable, "compute_units", lambda rt: 2)
    monkeypatch.setattr(planner, "compute_units", lambda rt: 2)
    monkeypatch.setattr(placement, "compute_units", lambda rt: 2)
    monkeypatch.setattr(rt, "_launch_costs", placement.LaunchCosts(0.0, 0.0), raising=False)  # kernels
    monkeypatch.setattr(executable.HostTrial, "host_wins", lambda self: host_wins)
    monkeypatch.setattr(executable, "_TRIAL_VERDICTS", {})  # (no verdict from an earlier test's program)
    monkeypatch.setattr(ft.config, "opencl_small_program_elements", 0)
    monkeypatch.setattr(ft.config, "opencl_host_step_elements", None)
    x = RNG.standard_normal(50_000).astype(np.float32)
    f = lambda x: fnp.tanh(fnp.sin(x) * 1.5) + fnp.exp(-x * x)
    want = np.tanh(np.sin(x) * 1.5) + np.exp(-x * x)

    def run(calls):
        jitted = ft.jit(f, backend="opencl")
        for _ in range(calls):
            np.testing.assert_allclose(np.asarray(jitted(x)), want, rtol=1e-5, atol=1e-6)
        return jitted.lower(x).compile().executable

    exe = run(2)
    assert exe._settled and (exe._on_host is not None) == host_wins
    assert ("measured faster as one numpy program" in exe.report()) == host_wins
    trial = exe._new_trial()
    assert "kernels placed one step at a time" in trial.why and trial.margin == executable.TRIAL_MARGIN
    monkeypatch.setattr(executable, "TRIAL_ELEMENTS", 100_000)  # the program's work is 6 x 50K elements
    exe = run(3)
    assert exe._new_trial() is None and exe._on_host is None and exe.num_kernel_launches == 1
    monkeypatch.setattr(executable, "TRIAL_ELEMENTS", 1 << 22)
    monkeypatch.setattr(ft.config, "opencl_host_step_elements", 1024)  # pinned
    exe = run(3)
    assert exe._new_trial() is None and exe._on_host is None
