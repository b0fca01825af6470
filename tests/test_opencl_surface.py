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


# a case of each kind of program the composites make: gathers (pad, insert, interp, einsum's
# diagonal), masks (triu), concatenations (block), scatters (put_along_axis), polynomials (i0,
# sinc), exact scaling (frexp); a program of every case compiles for about a minute
ON_OPENCL = {"einsum[iji->j]", "pad-reflect", "insert-values", "block", "triu-batched", "frexp", "i0", "sinc",
             "kron", "cross", "interp-lr", "convolve-same-0", "gradient-x2", "put_along_axis"}


def test_surface_cases_in_one_opencl_program():
    """A case of each kind from test_numpy_surface.CASES, all in one jitted program (one compile),
    on OpenCL against the numpy backend: the composites lower to kernels with its values."""
    import test_numpy_surface as surface
    cases = [c for c in surface.CASES if c[0] in ON_OPENCL]
    assert len(cases) == len(ON_OPENCL)
    arrays, slots = [], []
    for _, _, _, args in cases:
        index = []
        for a in args:
            k = next((i for i, b in enumerate(arrays) if b is a), None)
            if k is None:
                arrays.append(a)
                k = len(arrays) - 1
            index.append(k)
        slots.append(index)

    def program(*xs):
        return [f(*[xs[i] for i in index]) for (_, f, _, _), index in zip(cases, slots)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = ft.jit(program, backend="opencl")(*arrays)
        want = ft.jit(program, backend="numpy")(*arrays)
    for (name, _, _, _), g, w in zip(cases, got, want):
        for gl, wl in zip(ft.tree_util.tree_leaves(g), ft.tree_util.tree_leaves(w)):
            gl, wl = np.asarray(gl), np.asarray(wl)
            assert gl.dtype == wl.dtype and gl.shape == wl.shape, name
            tol = 3e-5 if wl.dtype == np.float32 else 1e-11
            np.testing.assert_allclose(gl, wl, rtol=tol, atol=tol, equal_nan=True, err_msg=name)
