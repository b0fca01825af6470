"""``ft.pure_callback``: eager, under jit on both backends (a host step on OpenCL, with its
reason), under vmap with each vmap_method, refusing derivatives, checking declared shapes."""
from __future__ import annotations

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp

X = np.linspace(0.0, 1.0, 5)


def _sin_callback(x):
    return ft.pure_callback(np.sin, ft.ShapeDtypeStruct(x.shape, x.dtype), x, vmap_method="sequential")


def test_eager_and_jit_on_both_backends():
    for f in (_sin_callback, ft.jit(_sin_callback, backend="numpy"), ft.jit(lambda x: _sin_callback(x * 2) * 3)):
        got = np.asarray(f(X))
        assert got.dtype == X.dtype
    np.testing.assert_allclose(ft.jit(lambda x: _sin_callback(x * 2) * 3)(X), np.sin(X * 2) * 3)
    np.testing.assert_allclose(_sin_callback(X), np.sin(X))


def test_pytree_arguments_and_results():
    def stats(d, scale=1.0):
        return {"mean": np.mean(d["v"]) * scale, "n": np.array(d["v"].size, np.int64)}
    shapes = {"mean": ft.ShapeDtypeStruct((), np.float64), "n": ft.ShapeDtypeStruct((), np.int64)}
    out = ft.jit(lambda v: ft.pure_callback(stats, shapes, {"v": v}, scale=2.0))(X)
    assert float(out["mean"]) == pytest.approx(np.mean(X) * 2) and int(out["n"]) == 5


@pytest.mark.parametrize("method", ["sequential", "expand_dims", "broadcast_all"])
def test_vmap_methods(method):
    calls = []

    def rowsum(x, w):
        calls.append(x.shape)
        return np.sum(x * w, -1)

    def f(x):
        return ft.pure_callback(rowsum, ft.ShapeDtypeStruct((), x.dtype), x, np.array([1.0, 2.0]), vmap_method=method)
    xs = np.arange(6.0).reshape(3, 2)
    np.testing.assert_allclose(ft.vmap(f)(xs), xs @ [1.0, 2.0])
    assert calls == ([(2,)] * 3 if method == "sequential" else [(3, 2)])


def test_vmap_without_method_raises():
    f = lambda x: ft.pure_callback(np.sin, ft.ShapeDtypeStruct((), x.dtype), x)  # noqa: E731
    with pytest.raises(NotImplementedError, match="vmap_method"):
        ft.vmap(f)(X)


def test_derivatives_raise_pointing_at_custom_rules():
    with pytest.raises(TypeError, match="custom_jvp"):
        ft.grad(lambda x: fnp.sum(_sin_callback(x)))(X)
    with pytest.raises(TypeError, match="custom_jvp"):
        ft.jvp(_sin_callback, (X,), (X,))


def test_wrong_result_shape_or_dtype_raises():
    with pytest.raises(TypeError, match="declared"):
        ft.pure_callback(np.sin, ft.ShapeDtypeStruct((4,), np.float64), X)
    with pytest.raises(TypeError, match="declared"):
        ft.jit(lambda x: ft.pure_callback(np.sin, ft.ShapeDtypeStruct((5,), np.float32), x))(X)


def test_opencl_host_step_says_why():
    from functrace.backends.opencl import runtime
    if runtime.get_runtime() is None:
        pytest.skip("no usable OpenCL device on this machine")
    saved = ft.config.opencl_small_program_elements, ft.config.opencl_host_step_elements
    ft.config.update("opencl_small_program_elements", 0)
    ft.config.update("opencl_host_step_elements", 0)
    try:
        compiled = ft.jit(lambda x: _sin_callback(x * 2) * 3, backend="opencl").lower(X).compile()
        assert "pure_callback (numpy on the host; calls the user's Python function" in compiled.report()
        np.testing.assert_allclose(compiled(X), np.sin(X * 2) * 3)
    finally:
        ft.config.update("opencl_small_program_elements", saved[0])
        ft.config.update("opencl_host_step_elements", saved[1])
