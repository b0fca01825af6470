"""Cumulative products and extrema, ``lax.associative_scan``, the NaN reductions, ``prod``'s
derivative in O(n) memory, and the smaller ``lax`` functions (map, select, clamp, rsqrt, erf,
reduce_window): numpy values, ``jit`` on both backends, derivatives (order 2), ``vmap``."""
import math

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace import lax
from functrace.test_util import check_grads

RNG = np.random.default_rng(5)


def _all_ways(f, *args):
    return [f(*args), ft.jit(f, backend="numpy")(*args), np.asarray(ft.jit(f, backend="opencl")(*args))]


@pytest.mark.parametrize("n", [0, 1, 2, 5, 8, 13])
def test_cumulative_ops_match_numpy(n):
    x = RNG.uniform(0.5, 1.5, (3, n)) * RNG.choice([-1, 1], (3, n))
    if n > 3:
        x[1, 2] = 0.0
    for axis in (0, 1):
        for got in _all_ways(lambda x: fnp.cumprod(x, axis), x):
            np.testing.assert_allclose(got, np.cumprod(x, axis), rtol=1e-13)
        for reverse in (False, True):
            flip = (lambda v: np.flip(v, axis)) if reverse else (lambda v: v)
            for name, ufunc in (("cummax", np.maximum), ("cummin", np.minimum), ("cumprod", np.multiply),
                                ("cumsum", np.add)):
                want = flip(ufunc.accumulate(flip(x), axis))
                for got in _all_ways(lambda x: getattr(lax, name)(x, axis, reverse), x):
                    np.testing.assert_allclose(got, want, rtol=1e-13)
    np.testing.assert_allclose(fnp.cumprod(x), np.cumprod(x))
    np.testing.assert_allclose(fnp.cumulative_prod(x, axis=1), np.cumprod(x, axis=1))


def test_associative_scan_pytree_reverse_axis():
    """A linear recurrence h_t = a_t h_{t-1} + b_t as a scan of (a, b) pairs, against a loop."""
    a, b = RNG.uniform(0.5, 1.0, (7, 3)), RNG.standard_normal((7, 3))

    def combine(left, right):
        return right[0] * left[0], right[0] * left[1] + right[1]

    def loop(a, b, reverse=False):
        out, h = [], np.zeros(3)
        order = range(6, -1, -1) if reverse else range(7)
        for t in order:
            h = a[t] * h + b[t]
            out.append(h)
        return np.stack(out[::-1] if reverse else out)

    np.testing.assert_allclose(lax.associative_scan(combine, (a, b))[1], loop(a, b))
    np.testing.assert_allclose(lax.associative_scan(combine, (a, b), reverse=True)[1], loop(a, b, True))
    np.testing.assert_allclose(lax.associative_scan(combine, (a.T, b.T), axis=1)[1], loop(a, b).T)
    jitted = ft.jit(lambda a, b: lax.associative_scan(combine, (a, b))[1], backend="opencl")
    np.testing.assert_allclose(np.asarray(jitted(a, b)), loop(a, b))
    check_grads(lambda a, b: lax.associative_scan(combine, (a, b))[1], (a, b), order=2, modes=("fwd", "rev"))
    with pytest.raises(ValueError, match="same length"):
        lax.associative_scan(combine, (a, b[:3]))


def test_cumulative_grads_and_jax_values():
    x = np.array([0.7, -1.3, 0.0, 2.2, -0.4, 1.1])
    check_grads(lambda x: fnp.cumprod(x), (x,), order=2, modes=("fwd", "rev"))
    check_grads(lambda x: lax.cumprod(x, reverse=True), (x,), order=2, modes=("fwd", "rev"))
    d = np.array([0.3, -1.2, 2.1, 0.9, -0.4, 1.6])
    check_grads(lambda x: lax.cummax(x), (d,), order=2, modes=("fwd", "rev"))
    check_grads(lambda x: lax.cummin(x, reverse=True), (d,), order=2, modes=("fwd", "rev"))
    # ties: JAX's value (generated once) splits the derivative as its scan of max does
    np.testing.assert_array_equal(ft.grad(lambda x: fnp.sum(lax.cummax(x)))(np.array([1.0, 3.0, 3.0, 2.0, 5.0])),
                                  [1.0, 2.0, 1.0, 0.0, 1.0])


def test_prod_derivative_is_exact_at_zeros_and_linear_in_memory():
    x = np.array([[1.5, 0.0, 2.0, -1.0], [0.0, 3.0, 0.0, 2.0], [1.0, 2.0, 3.0, 4.0]])
    want = np.array([[0.0, -3.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [24.0, 12.0, 8.0, 6.0]])
    np.testing.assert_allclose(ft.grad(lambda x: fnp.sum(fnp.prod(x, axis=1)))(x), want)
    np.testing.assert_allclose(ft.jacfwd(lambda r: fnp.prod(r))(x[0]), want[0])
    check_grads(lambda x: fnp.prod(x, axis=(0, 1)), (RNG.standard_normal((2, 3)),), order=2, modes=("fwd", "rev"))
    n = 4096  # the old rule built an n x n mask: 16M elements here
    jaxpr = ft.make_jaxpr(ft.grad(lambda v: fnp.prod(v)))(np.ones(n))
    biggest = max(math.prod(v.aval.shape) for e in jaxpr.eqns for v in e.out_vars)
    assert biggest <= 2 * n


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # 0/0 of an all-NaN row, as numpy
def test_nan_reductions_match_numpy():
    x = RNG.standard_normal((4, 5))
    x[0, 1] = x[2, 3] = x[2, 4] = np.nan
    x[3] = np.nan  # an all-NaN row
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):
        cases = [(fnp.nansum, np.nansum(x, 1)), (fnp.nanprod, np.nanprod(x, 1)), (fnp.nanmean, np.nanmean(x, 1)),
                 (fnp.nanvar, np.nanvar(x, 1)), (fnp.nanstd, np.nanstd(x, 1)), (fnp.nanmax, np.nanmax(x, 1)),
                 (fnp.nanmin, np.nanmin(x, 1)), (fnp.nancumsum, np.nancumsum(x, 1)),
                 (fnp.nancumprod, np.nancumprod(x, 1))]
    for f, want in cases:
        for got in _all_ways(lambda x: f(x, axis=1), x):
            np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=f.__name__)
    # all-NaN slices: -1 for the arg-reductions (JAX; numpy raises), else numpy's index
    np.testing.assert_array_equal(fnp.nanargmax(x, axis=1), [np.nanargmax(r) for r in x[:3]] + [-1])
    np.testing.assert_array_equal(fnp.nanargmin(x, axis=1), [np.nanargmin(r) for r in x[:3]] + [-1])
    np.testing.assert_allclose(fnp.nanvar(x[:3], axis=1, ddof=1, keepdims=True),
                               np.nanvar(x[:3], axis=1, ddof=1, keepdims=True))
    np.testing.assert_allclose(fnp.nansum(x), np.nansum(x))
    ints = np.array([[0, 3, 0], [1, 2, 5]])
    np.testing.assert_array_equal(fnp.nanmax(ints, axis=0), [1, 3, 5])
    np.testing.assert_array_equal(fnp.count_nonzero(ints, axis=1), [1, 3])
    assert fnp.count_nonzero(ints) == 4
    np.testing.assert_array_equal(fnp.ptp(ints, axis=1), np.ptp(ints, axis=1))
    np.testing.assert_allclose(fnp.ptp(x[:3, :1]), np.ptp(x[:3, :1]))


def test_nan_reduction_grads_and_vmap():
    x = np.array([[0.3, -1.2, 2.1], [0.9, -0.4, 1.6]])
    with_nan = lambda f: (lambda x: f(fnp.where(x > 2.0, np.nan, x), axis=1))
    for f in (fnp.nansum, fnp.nanmean, fnp.nanvar, fnp.nanstd, fnp.nanmax, fnp.nanmin, fnp.nanprod):
        check_grads(with_nan(f), (x,), order=2, modes=("fwd", "rev"))
    x = RNG.standard_normal((3, 6))
    x[1, 2] = np.nan
    for f in (fnp.nanmean, fnp.nanargmax, fnp.nancumsum, fnp.ptp, fnp.count_nonzero):
        np.testing.assert_allclose(ft.vmap(f)(x), np.stack([f(r) for r in x]))


def test_small_lax_functions():
    x = RNG.standard_normal((3, 4))
    np.testing.assert_allclose(lax.map(lambda r: fnp.sum(r ** 2), x), np.sum(x ** 2, 1))
    mapped = lax.map(lambda r: {"a": r * 2, "b": r[0]}, x)
    np.testing.assert_allclose(mapped["a"], 2 * x)
    np.testing.assert_allclose(mapped["b"], x[:, 0])
    np.testing.assert_allclose(lax.select(x > 0, x, -x), np.abs(x))
    with pytest.raises(TypeError, match="lax.select"):
        lax.select(x > 0, x, np.zeros(4))
    np.testing.assert_allclose(lax.clamp(-0.5, x, 0.5), np.clip(x, -0.5, 0.5))
    y = np.abs(x) + 0.1
    np.testing.assert_allclose(lax.rsqrt(y), 1 / np.sqrt(y))
    np.testing.assert_allclose(lax.erf(x), [[math.erf(v) for v in r] for r in x])
    check_grads(lambda y: lax.rsqrt(y) * lax.erf(y), (y,), order=2, modes=("fwd", "rev"))
    check_grads(lambda x: lax.map(fnp.sin, x), (x,), order=2, modes=("fwd", "rev"))


@pytest.mark.parametrize("padding", ["VALID", "SAME", ((1, 0), (0, 2))])
def test_reduce_window_pooling(padding):
    x = RNG.standard_normal((5, 7))
    window, strides = (2, 3), (2, 2)
    if isinstance(padding, str) and padding == "SAME":
        pads = [(0, 1), (1, 1)]  # JAX's SAME for these sizes: out = ceil(n / stride)
    elif padding == "VALID":
        pads = [(0, 0), (0, 0)]
    else:
        pads = list(padding)
    xp = np.pad(x, pads, constant_values=-np.inf)
    rows = (xp.shape[0] - 2) // 2 + 1
    cols = (xp.shape[1] - 3) // 2 + 1
    want = np.array([[xp[i * 2:i * 2 + 2, j * 2:j * 2 + 3].max() for j in range(cols)] for i in range(rows)])
    for got in _all_ways(lambda x: lax.reduce_window(x, -np.inf, lax.max, window, strides, padding), x):
        np.testing.assert_allclose(got, want)
    summed = lax.reduce_window(x, 0.0, lax.add, (2, 2), (1, 1), "VALID")
    np.testing.assert_allclose(summed, x[:-1, :-1] + x[1:, :-1] + x[:-1, 1:] + x[1:, 1:])
    check_grads(lambda x: lax.reduce_window(x, 0.0, lax.add, (2, 2), (2, 1), padding), (x,), order=2,
                modes=("fwd", "rev"))
    with pytest.raises(NotImplementedError, match="computation"):
        lax.reduce_window(x, 1.0, fnp.multiply, (2, 2), (1, 1))


def test_prod_derivative_over_an_empty_axis():
    """The O(n) derivative of prod shifted an empty axis by one (a 1-element array where there is
    none: ValueError in grad; found by the fuzzer's reference); the derivative of nothing is empty."""
    x = np.zeros((3, 0))
    for axis in (0, 1, None):
        f = lambda x, axis=axis: fnp.sum(fnp.prod(x, axis=axis))
        for g in (ft.grad(f), ft.jit(ft.grad(f), backend="numpy")):
            assert np.asarray(g(x)).shape == (3, 0)
        _, t = ft.jvp(f, (x,), (x,))
        assert float(t) == 0.0
    assert ft.grad(lambda v: fnp.prod(v))(np.zeros(0)).shape == (0,)


@pytest.mark.opencl_kernels
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cumprod_runs_in_numpys_order(dtype):
    """A product tree reassociated a zero prefix times a later overflowing pair into NaN (numpy and
    JAX give -0) and rounded differently: cumprod now multiplies in order, eagerly and under jit,
    along any axis, in either direction, bit for bit as numpy."""
    x = np.array([0.0, 2.0, 1e30, -1e30, 3.0, 4.0, 5.0, 6.0], dtype)
    want = np.cumprod(x)
    for got in _all_ways(lambda x: fnp.cumprod(x), x):
        np.testing.assert_array_equal(got, want)
        assert np.array_equal(np.signbit(got), np.signbit(want))
    y = RNG.uniform(0.5, 1.5, (7, 33, 5)).astype(dtype)  # rounding: exact equality with numpy's order
    for axis in range(3):
        for reverse in (False, True):
            want = np.flip(np.cumprod(np.flip(y, axis), axis), axis) if reverse else np.cumprod(y, axis)
            for got in _all_ways(lambda v: lax.cumprod(v, axis, reverse), y):
                np.testing.assert_array_equal(got, want)
    exe = ft.jit(lambda v: fnp.cumprod(v, axis=1), backend="opencl").lower(y).compile()
    assert "cumulative product" in str(exe.report()) and exe.num_host_steps == 0, exe.report()


@pytest.mark.opencl_kernels
def test_cumprod_grads_vmap_and_zeros():
    x = np.array([[0.7, 0.0, -1.3, 0.0, 2.2], [1.1, -0.4, 0.9, 1.6, -2.0]])
    for axis in (0, 1):
        for reverse in (False, True):
            check_grads(lambda v: lax.cumprod(v, axis, reverse), (x,), order=2, modes=("fwd", "rev"))
    jac = ft.jacrev(lambda r: fnp.cumprod(r))(x[0])
    np.testing.assert_allclose(jac, ft.jacfwd(lambda r: fnp.cumprod(r))(x[0]), rtol=1e-14)
    want = np.array([[1.0 if j <= i else 0.0 for j in range(5)] for i in range(5)])
    np.testing.assert_allclose(jac[:, 0], want[:, 0] * np.concatenate([[1.0], np.cumprod(x[0, 1:])]))
    np.testing.assert_allclose(ft.vmap(lambda r: fnp.cumprod(r))(x), np.cumprod(x, axis=1))
    g = ft.jit(ft.grad(lambda v: fnp.sum(fnp.cumprod(v, axis=1) ** 2)), backend="opencl")(x)
    np.testing.assert_allclose(np.asarray(g), ft.grad(lambda v: fnp.sum(fnp.cumprod(v, axis=1) ** 2))(x), rtol=1e-12)
