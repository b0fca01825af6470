"""Sorting and searching: values against numpy (and JAX's stored values), under ``jit`` on both
backends, derivatives (order 2), ``vmap`` against a loop."""
import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace import lax
from functrace.test_util import check_grads

RNG = np.random.default_rng(11)


def _with_ties_and_nans(shape):
    x = np.round(RNG.standard_normal(shape), 1)  # many ties
    x.flat[::7] = np.nan
    return x


def _all_ways(f, *args):
    """f eagerly, jitted on numpy, jitted on OpenCL: host arrays."""
    return [f(*args), ft.jit(f, backend="numpy")(*args), np.asarray(ft.jit(f, backend="opencl")(*args))]


@pytest.mark.parametrize("shape,axis", [((17,), -1), ((4, 9), 0), ((3, 5, 6), 1), ((2, 3), None)])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_and_argsort_match_numpy(shape, axis, descending):
    x = _with_ties_and_nans(shape)
    want_perm = np.argsort(-x if descending else x, axis=axis, kind="stable")
    if descending:  # NaNs first, ties in original order (JAX's stable descending order)
        flat = x.reshape(-1) if axis is None else np.moveaxis(x, axis, -1)
        want_perm = np.argsort(np.where(np.isnan(flat), -np.inf, -flat), axis=-1, kind="stable")
        want_perm = want_perm if axis is None else np.moveaxis(want_perm, -1, axis)
    for got in _all_ways(lambda x: fnp.argsort(x, axis=axis, descending=descending), x):
        np.testing.assert_array_equal(got, want_perm)
    want = np.take_along_axis(x.reshape(-1) if axis is None else x, want_perm, -1 if axis is None else axis)
    for got in _all_ways(lambda x: fnp.sort(x, axis=axis, descending=descending), x):
        np.testing.assert_array_equal(got, want)


# stored values generated once with JAX (jax_enable_x64)
_X = np.array([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0])
_JAX = {"top_k_values": [9.0, 6.0, 5.0, 5.0], "top_k_indices": [5, 7, 4, 8],
        "argsort_desc": [5, 7, 4, 8, 2, 0, 9, 6, 1, 3], "argsort_desc_nan": [1, 2, 4, 0, 3],
        "sort_desc_nan": [np.nan, 3.0, 1.0, -1.0], "quantile_nearest": [1.0, 3.0, 5.0],
        "sort_grad": [3.0, 0.0, 1.0, 2.0], "median_grad": [0.5, 0.0, 0.0, 0.5]}


def test_against_stored_jax_values():
    values, idx = lax.top_k(_X, 4)
    np.testing.assert_array_equal(values, _JAX["top_k_values"])
    np.testing.assert_array_equal(idx, _JAX["top_k_indices"])
    np.testing.assert_array_equal(fnp.argsort(_X, descending=True), _JAX["argsort_desc"])
    np.testing.assert_array_equal(fnp.argsort(np.array([1.0, np.nan, 3.0, -1.0, 3.0]), descending=True),
                                  _JAX["argsort_desc_nan"])
    np.testing.assert_array_equal(fnp.sort(np.array([1.0, np.nan, 3.0, -1.0]), descending=True),
                                  _JAX["sort_desc_nan"])
    np.testing.assert_array_equal(fnp.quantile(_X[:7], np.array([0.1, 0.5, 0.9]), method="nearest"),
                                  _JAX["quantile_nearest"])
    np.testing.assert_array_equal(ft.grad(lambda x: fnp.sum(fnp.sort(x) * np.arange(4.0)))(
        np.array([3.0, 1.0, 1.0, 2.0])), _JAX["sort_grad"])
    np.testing.assert_array_equal(ft.grad(fnp.median)(np.array([3.0, 1.0, 4.0, 2.0])), _JAX["median_grad"])


def test_against_jax():
    jax = pytest.importorskip("jax", reason="optional comparison with JAX")
    jnp = jax.numpy
    x = RNG.standard_normal((3, 8)).astype(np.float32)
    x[0, 3] = x[0, 5]
    v, i = jax.lax.top_k(x, 3)
    gv, gi = lax.top_k(x, 3)
    np.testing.assert_array_equal(gv, v)
    np.testing.assert_array_equal(gi, i)
    np.testing.assert_array_equal(fnp.argsort(x, descending=True), jnp.argsort(x, descending=True))
    np.testing.assert_allclose(fnp.quantile(x, np.array([0.3, 0.7]), axis=1), jnp.quantile(x, jnp.array([0.3, 0.7]),
                                                                                          axis=1), rtol=1e-6)


def test_top_k_and_lax_sort():
    x = RNG.standard_normal((3, 7))
    for values, idx in _all_ways(lambda x: lax.top_k(x, 3), x):
        np.testing.assert_array_equal(np.asarray(idx), np.argsort(-x, axis=-1, kind="stable")[:, :3])
        np.testing.assert_array_equal(np.asarray(values), -np.sort(-x, axis=-1)[:, :3])
    keys, vals = np.array([2, 1, 2, 0]), np.array([10.0, 20.0, 30.0, 40.0])
    k, v = lax.sort((keys, vals))
    np.testing.assert_array_equal(k, [0, 1, 2, 2])
    np.testing.assert_array_equal(v, [40, 20, 10, 30])
    k, v = lax.sort_key_val(vals, keys)
    np.testing.assert_array_equal(v, keys)
    np.testing.assert_array_equal(lax.sort(x, dimension=0), np.sort(x, axis=0))


@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted(side):
    a = np.sort(np.round(RNG.standard_normal(12), 1))
    a[-2:] = np.nan  # NaNs last, as np.sort leaves them
    v = np.concatenate([a[::3], np.round(RNG.standard_normal(5), 1), [np.nan, -np.inf, np.inf]])
    for got in _all_ways(lambda a, v: fnp.searchsorted(a, v, side=side), a, v):
        np.testing.assert_array_equal(got, np.searchsorted(a, v, side=side))
    big = np.sort(np.round(RNG.standard_normal(400), 1))  # 400 x 300 pairs: the binary-search path
    big[-3:] = np.nan
    values = np.concatenate([np.round(RNG.standard_normal(290), 1), big[::40], [np.nan, -np.inf, np.inf]])
    for got in _all_ways(lambda a, v: fnp.searchsorted(a, v, side=side), big, values):
        np.testing.assert_array_equal(got, np.searchsorted(big, values, side=side))
    perm = RNG.permutation(12)
    np.testing.assert_array_equal(fnp.searchsorted(a[perm], v, side, sorter=np.argsort(perm)),
                                  np.searchsorted(a, v, side))


def test_lexsort_partition():
    keys = RNG.integers(0, 3, (3, 11))
    for got in _all_ways(fnp.lexsort, keys):
        np.testing.assert_array_equal(got, np.lexsort(keys))
    x = RNG.standard_normal((4, 9))
    p = fnp.partition(x, 3, axis=1)
    assert np.all(p[:, :3] <= p[:, 3:4]) and np.all(p[:, 4:] >= p[:, 3:4])
    np.testing.assert_array_equal(p[:, 3], np.partition(x, 3, axis=1)[:, 3])
    ap = fnp.argpartition(x, 3, axis=1)
    np.testing.assert_array_equal(np.take_along_axis(x, ap, 1)[:, 3], p[:, 3])


def test_unique():
    u = np.array([3, 1, 1, 5, 3, 3, 0])
    for got, want in zip(fnp.unique(u, return_index=True, return_inverse=True, return_counts=True),
                         np.unique(u, return_index=True, return_inverse=True, return_counts=True)):
        np.testing.assert_array_equal(got, want)
    # size= (fixed-size, works under jit): JAX's padding with the smallest value, or fill_value
    for run in (lambda f, *a: f(*a), lambda f, *a: ft.jit(f, backend="numpy")(*a),
                lambda f, *a: np.asarray(ft.jit(f, backend="opencl")(*a))):
        np.testing.assert_array_equal(run(lambda u: fnp.unique(u, size=6), u), [0, 1, 3, 5, 0, 0])
        np.testing.assert_array_equal(run(lambda u: fnp.unique(u, size=3), u), [0, 1, 3])
        np.testing.assert_array_equal(run(lambda u: fnp.unique(u, size=5, fill_value=-7), u), [0, 1, 3, 5, -7])
    values, index, inverse, counts = fnp.unique(u, size=5, return_index=True, return_inverse=True,
                                                return_counts=True)
    np.testing.assert_array_equal(index[:4], [6, 1, 0, 3])
    np.testing.assert_array_equal(inverse, np.unique(u, return_inverse=True)[1])
    np.testing.assert_array_equal(counts, [1, 2, 3, 1, 0])
    f = np.array([np.nan, 1.0, np.nan, 1.0])
    np.testing.assert_array_equal(fnp.unique(f, size=3, fill_value=0.0), [1.0, np.nan, 0.0])
    with pytest.raises(ft.ConcretizationError, match="size="):
        ft.jit(fnp.unique, backend="numpy")(u)


@pytest.mark.parametrize("method", ["linear", "lower", "higher", "midpoint", "nearest"])
def test_quantile_methods(method):
    x = RNG.standard_normal((5, 8))
    q = np.array([0.0, 0.13, 0.5, 0.77, 1.0])
    for axis in (None, 1, (0, 1)):
        want = np.quantile(x, q, axis=axis, method=method)
        for got in _all_ways(lambda x: fnp.quantile(x, q, axis=axis, method=method), x):
            np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(fnp.percentile(x, 30.0, axis=0, method=method, keepdims=True),
                               np.percentile(x, 30.0, axis=0, method=method, keepdims=True))


def test_median_and_nan_forms():
    x = RNG.standard_normal((4, 7))
    x[1, 2] = x[3, 0] = np.nan
    x[2] = np.nan  # an all-NaN row
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):
        wants = [np.nanmedian(x, axis=1), np.nanquantile(x, [0.2, 0.9], axis=1),
                 np.nanpercentile(x, 40, axis=1, keepdims=True)]
    fs = [lambda x: fnp.nanmedian(x, axis=1), lambda x: fnp.nanquantile(x, np.array([0.2, 0.9]), axis=1),
          lambda x: fnp.nanpercentile(x, 40, axis=1, keepdims=True)]
    for f, want in zip(fs, wants):
        for got in _all_ways(f, x):
            np.testing.assert_allclose(got, want)
    np.testing.assert_allclose(fnp.median(x, axis=0), np.median(x, axis=0))  # NaN where a column has one
    np.testing.assert_allclose(fnp.median(x[0]), np.median(x[0]))
    with pytest.raises(ValueError, match=r"range \[0, 1\]"):
        fnp.quantile(x, 1.5)


def test_grads_order_2():
    x = np.array([0.3, -1.2, 2.1, 0.9, -0.4, 1.6, 0.05])
    check_grads(lambda x: fnp.sort(x) * np.arange(7.0), (x,), order=2, modes=("fwd", "rev"))
    check_grads(lambda x: fnp.sort(x.reshape(7, 1) * x, axis=0, descending=True), (x,), order=2, modes=("fwd", "rev"))
    check_grads(lambda x: lax.top_k(x, 3)[0], (x,), order=2, modes=("fwd", "rev"))
    check_grads(lambda x: fnp.median(x), (x,), order=2, modes=("fwd", "rev"))
    check_grads(lambda x: fnp.nanquantile(fnp.where(x > 2, np.nan, x), np.array([0.3, 0.8])), (x,), order=2,
                modes=("fwd", "rev"))
    check_grads(lambda x, q: fnp.quantile(x, q), (x, np.array([0.31, 0.62])), order=2, modes=("fwd", "rev"))


def test_vmap_matches_a_loop():
    x = RNG.standard_normal((4, 9))
    for f in (fnp.sort, lambda r: fnp.argsort(r, descending=True), lambda r: lax.top_k(r, 2)[1],
              lambda r: fnp.quantile(r, np.array([0.25, 0.5])), lambda r: fnp.searchsorted(np.linspace(-1, 1, 5), r),
              lambda r: fnp.unique(fnp.round(r), size=4)):
        np.testing.assert_allclose(ft.vmap(f)(x), np.stack([f(r) for r in x]))
    np.testing.assert_allclose(ft.vmap(fnp.sort, in_axes=1)(x), np.stack([np.sort(x[:, j]) for j in range(9)]))
