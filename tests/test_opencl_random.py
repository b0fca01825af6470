"""ft.random on OpenCL: the threefry2x32 kernel (cl_kernels/threefry.cl) and the bit primitives
and erf_inv in generated kernels against the numpy backend (odd sizes, broadcasting, float32 and
float64); whole sampling programs with no host step equal to eager; vmap over keys."""
import os

import numpy as np
import pytest

import functrace as ft
from functrace import primitives as P
from functrace import random as R
from functrace.backends.opencl import runtime as cl_runtime

rt = cl_runtime.get_runtime()
pytestmark = pytest.mark.skipif(rt is None, reason="no usable OpenCL device on this machine")
RNG = np.random.default_rng(5)


def compile_opencl(f, *args):
    compiled = ft.jit(f, backend="opencl").lower(*args).compile()
    assert compiled.num_host_steps == 0, compiled.report()
    return compiled


@pytest.mark.parametrize("shapes", [
    [(7,), (7,), (7,), (7,)],
    [(3, 1, 5), (1, 4, 1), (), (4, 5)],
    [(1,), (), (2, 1, 1), (1, 127)],
    [(), (), (), (1000,)],
    [(2, 3), (2, 3), (0, 2, 3), ()],
], ids=["same", "broadcast", "broadcast_odd", "counters", "empty"])
def test_threefry_kernel_matches_the_reference(shapes):
    ops = [RNG.integers(0, 2 ** 32, s, dtype=np.uint64).astype(np.uint32) for s in shapes]
    f = lambda *a: R.threefry2x32_p.bind(*a)
    compiled = compile_opencl(f, *ops)
    if np.broadcast_shapes(*shapes) != (0, 2, 3):
        assert "threefry2x32 (OpenCL threefry.cl" in compiled.report()
    for got, want in zip(compiled(*ops), R.threefry2x32_reference(*ops)):
        np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("n", [1, 7, 127, 1000])
def test_bit_primitives_in_generated_kernels(n):
    words = RNG.integers(0, 2 ** 32, (n,), dtype=np.uint64).astype(np.uint32)
    shifts = RNG.integers(0, 40, (3, 1), dtype=np.uint32)  # broadcast; 32 and past shift everything out
    wide = RNG.integers(0, 2 ** 63, (n,), dtype=np.uint64)

    def f(w, s, v):
        return (P.shift_left(w, s), P.shift_right_logical(w, s), P.bitcast_convert_type(w, np.float32),
                P.bitcast_convert_type(P.or_p.bind(P.shift_right_logical(w, np.uint32(9)), np.uint32(0x3F800000)),
                                       np.float32),
                P.shift_left(P.convert_element_type(w, np.uint64), np.uint64(32)) | v,
                P.bitcast_convert_type(v, np.float64), P.rem_p.bind(w, np.uint32(7)))
    compiled = compile_opencl(f, words, shifts, wide)
    for got, want in zip(compiled(words, shifts, wide), ft.jit(f, backend="numpy")(words, shifts, wide)):
        got, want = np.asarray(got), np.asarray(want)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))  # bit for bit (NaNs too)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 7, 127, 1000])
def test_erf_inv_kernel(dtype, n):
    x = RNG.uniform(-1, 1, n).astype(dtype)
    special = np.array([1.0, -1.0, 1.5, 0.0, 1 - 1e-12, -0.9999999], dtype)[:n]  # +-inf, NaN, the far tail
    x[:len(special)] = special
    f = lambda x: ft.nn.erf_inv(x) * 2.0
    compiled = compile_opencl(f, x)
    got, want = np.asarray(compiled(x)), np.asarray(ft.jit(f, backend="numpy")(x))
    assert got.dtype == want.dtype == dtype
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    # float32: the same polynomial (PoCL's log1p may differ by an ulp); float64: Newton to rounding
    np.testing.assert_allclose(got, want, rtol=4e-7 if dtype == np.float32 else 1e-15, atol=0)


def _samplers(key, logits, cov):
    """Many of ft.random's samplers in one program (one OpenCL compilation)."""
    return {
        "split": R.split(key, 3), "fold_in": R.fold_in(key, 5), "bits": R.bits(key, (7, 3)),
        "bits64": R.bits(key, (5,), np.uint64),
        "uniform": R.uniform(key, (127,), minval=-2.0, maxval=3.0), "normal": R.normal(key, (3, 41)),
        "normal64": R.normal(key, (127,), np.float64), "truncated": R.truncated_normal(key, -1.0, 0.5, (33,)),
        "bernoulli": R.bernoulli(key, 0.3, (50,)), "categorical": R.categorical(key, logits, shape=(6, 3)),
        "randint": R.randint(key, (31,), -5, 17), "randint64": R.randint(key, (9,), 0, 2 ** 40, np.int64),
        "permutation": R.permutation(key, 40), "choice": R.choice(key, 9, (4,), replace=False),
        "choice_p": R.choice(key, 4, (11,), p=np.array([0.1, 0.2, 0.3, 0.4], np.float32)),
        "gumbel": R.gumbel(key, (17,)), "exponential": R.exponential(key, (17,)),
        "mvn": R.multivariate_normal(key, np.zeros(2), cov, (5,)),
        "dropout": ft.nn.dropout(key, 0.5, np.arange(1.0, 41.0)),
        "init": ft.nn.initializers.he_normal()(key, (6, 5)),
    }


def _assert_same_samples(got, want):
    for name in want:
        g, w = np.asarray(got[name]), np.asarray(want[name])
        assert g.dtype == w.dtype and g.shape == w.shape, name
        if g.dtype == np.float32:
            np.testing.assert_allclose(g, w, rtol=4e-7, atol=3e-7, err_msg=name)
        elif g.dtype == np.float64:
            np.testing.assert_allclose(g, w, rtol=1e-14, atol=1e-15, err_msg=name)
        else:
            np.testing.assert_array_equal(g, w, err_msg=name)


def test_samplers_run_as_kernels_and_equal_eager():
    """The key traced: threefry and the conversions as kernels, no host step, eager's numbers."""
    key = R.PRNGKey(17)
    logits = np.log(np.array([[0.2, 0.5, 0.3], [0.6, 0.3, 0.1], [0.3, 0.3, 0.4]], np.float32))
    cov = np.array([[1.0, 0.4], [0.4, 2.0]])
    compiled = compile_opencl(lambda k: _samplers(k, logits, cov), key)
    assert "threefry2x32 (OpenCL threefry.cl" in compiled.report()
    _assert_same_samples(compiled(key), _samplers(key, logits, cov))


def test_vmap_over_keys_on_opencl_equals_a_loop():
    keys = R.split(R.PRNGKey(2), 5)
    f = lambda k: (R.normal(k, (3, 7)), R.randint(k, (4,), 0, 10), R.permutation(k, 6))
    compiled = compile_opencl(ft.vmap(f), keys)
    got = compiled(keys)
    for i, k in enumerate(np.asarray(keys)):
        want = f(k)
        np.testing.assert_allclose(np.asarray(got[0])[i], want[0], rtol=4e-7, atol=3e-7)
        np.testing.assert_array_equal(np.asarray(got[1])[i], want[1])
        np.testing.assert_array_equal(np.asarray(got[2])[i], want[2])


def test_long_traced_permutation_sorts_on_the_device():
    """permutation of 10,000 (two stable rounds of the merge-sort kernel): JAX's stored numbers."""
    want = np.load(os.path.join(os.path.dirname(__file__), "data", "random_vectors.npz"))["permutation_10000/0"]
    key = R.PRNGKey(0)
    compiled = compile_opencl(lambda k: R.permutation(k, 10000), key)
    assert "argsort (stable merge sort" in compiled.report()
    np.testing.assert_array_equal(compiled(key), want)


def _decomposed(key, mean, cov):
    """Samplers through functrace.numpy.linalg: multivariate_normal by each method, orthogonal."""
    out = {m: R.multivariate_normal(key, mean, cov, (5,), method=m) for m in ("cholesky", "eigh", "svd")}
    out["orthogonal"] = ft.nn.initializers.orthogonal()(key, (4, 6))
    return out


def test_traced_decompositions_run_on_the_host_between_kernels():
    """A traced cov and the orthogonal initializer: LAPACK host steps (reported) between kernels,
    eager's numbers."""
    key, mean = R.PRNGKey(4), np.array([0.5, -1.0, 2.0], np.float32)
    cov = np.array([[2.0, 0.3, 0.1], [0.3, 1.0, -0.2], [0.1, -0.2, 0.5]], np.float32)
    compiled = ft.jit(_decomposed, backend="opencl").lower(key, mean, cov).compile()
    assert "LAPACK" in compiled.report()
    _assert_same_samples(compiled(key, mean, cov), _decomposed(key, mean, cov))
