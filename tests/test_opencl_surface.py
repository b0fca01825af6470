"""The new elementwise primitives (cbrt, fmod, copysign, signbit) and the composites of the wider
numpy surface on OpenCL against the numpy backend (conftest: kernels even for small programs,
canary mode)."""
import warnings

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.backends.opencl import runtime

pytestmark = pytest.mark.skipif(runtime.get_runtime() is None, reason="no usable OpenCL device on this machine")
RNG = np.random.default_rng(161)


def test_opencl_matches_the_numpy_backend():
    """One program using the new primitives and composites, on OpenCL against the numpy backend
    (float32 and float64, an odd size, broadcasting)."""
    def f(x, y):
        return (fnp.cbrt(x), fnp.fmod(x, y), fnp.copysign(x, y[:1]), fnp.signbit(x), fnp.trunc(x * 3), fnp.sinc(x),
                fnp.i0(x), fnp.heaviside(x, 0.5), fnp.logaddexp2(x, y), fnp.nan_to_num(x / y),
                fnp.pad(x, 3, mode="reflect"), fnp.roll(x, 5), fnp.interp(x[:50], y[:4], x[4:8]),
                fnp.tril(fnp.outer(x[:9], y[:9])), fnp.einsum("ii->i", fnp.outer(x[:9], y[:9])))
    for dtype in (np.float32, np.float64):
        x = RNG.standard_normal(1001).astype(dtype)
        y = (RNG.standard_normal(1001) + 0.1).astype(dtype)
        x[:4] = [0.0, -0.0, np.inf, np.nan]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = ft.jit(f, backend="opencl").lower(x, y).compile()
            got, want = compiled(x, y), ft.jit(f, backend="numpy")(x, y)
        for g, w in zip(got, want):
            g, w = np.asarray(g), np.asarray(w)
            assert g.dtype == w.dtype and g.shape == w.shape
            tol = 3e-5 if dtype == np.float32 else 1e-12
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol, equal_nan=True)
        assert compiled.num_host_steps == 0, compiled.report()
