"""``x.at[...]`` functional updates, the eager array type, and ``lax.dynamic_slice`` /
``dynamic_update_slice``: every index form against numpy, JAX's out-of-bounds rules eagerly and
under ``jit`` (both backends), derivatives (order 2), ``vmap`` against a loop."""
import pickle

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace import lax
from functrace.core.eager import EagerArray
from functrace.test_util import check_grads

RNG = np.random.default_rng(7)

# every index form x[idx] takes, on a (3, 4) array
INDEX_FORMS = {
    "int": 2, "negative_int": -1, "slice_step": slice(1, None, 2), "reversed": slice(None, None, -1),
    "int_array_repeats": np.array([0, 2, 0]), "2d_array": np.array([[1], [0]]),
    "mask": np.array([True, False, True]), "full_mask": RNG.random((3, 4)) > 0.5,
    "tuple_int_slice": (1, slice(None)), "ellipsis": (Ellipsis, 1), "none": (None, 0),
    "slice_and_array": (slice(None), [0, 2, 2]), "two_arrays": ([0, 1, 2, 0], [3, 0, 1, 3]),
    "nonadjacent_arrays": ([0, 2], slice(1, 3), ),
    "int_none_array": (0, None, [1, 3]), "negative_arrays": ([-1, -3], [-4, 1]),
}


def _numpy_update(x, idx, op, v):
    y = np.array(x, copy=True)
    if op == "set":
        y[idx] = v
    else:
        ufunc = {"add": np.add, "multiply": np.multiply, "min": np.minimum, "max": np.maximum}[op]
        shape = y[idx].shape
        ufunc.at(y, idx, np.broadcast_to(v, shape))
    return y


def _apply(x, idx, op, v):
    return getattr(fnp.asarray(x).at[idx], op)(v)


@pytest.mark.parametrize("op", ["set", "add", "multiply", "min", "max"])
@pytest.mark.parametrize("form", sorted(INDEX_FORMS))
def test_every_index_form_matches_numpy(form, op):
    idx = INDEX_FORMS[form]
    x = RNG.standard_normal((3, 4))
    v = RNG.standard_normal(np.shape(x[idx]))
    want = _numpy_update(x, idx, op, v)
    np.testing.assert_allclose(_apply(x, idx, op, v), want)
    np.testing.assert_allclose(ft.jit(lambda x, v: _apply(x, idx, op, v), backend="numpy")(x, v), want)
    np.testing.assert_allclose(fnp.asarray(x).at[idx].get(), x[idx])


@pytest.mark.parametrize("form", ["int_array_repeats", "two_arrays", "negative_arrays", "slice_and_array"])
def test_traced_indices_match_numpy(form):
    """Index arrays passed as arguments (traced under jit)."""
    idx = INDEX_FORMS[form]
    arrays = tuple(np.asarray(i) for i in (idx if isinstance(idx, tuple) else (idx,)) if not isinstance(i, slice))
    x = RNG.standard_normal((3, 4))
    v = RNG.standard_normal(np.shape(x[idx]))

    def f(x, v, *arrays):
        it = iter(arrays)
        full = tuple(i if isinstance(i, slice) else next(it) for i in (idx if isinstance(idx, tuple) else (idx,)))
        return fnp.asarray(x).at[full].add(v), fnp.asarray(x).at[full].get()

    for backend in ("numpy", "opencl"):
        out, got = ft.jit(f, backend=backend)(x, v, *arrays)
        np.testing.assert_allclose(np.asarray(out), _numpy_update(x, idx, "add", v))
        np.testing.assert_allclose(np.asarray(got), x[idx])


def test_broadcast_values_and_dtypes():
    x = fnp.zeros((3, 4), np.float32)
    y = x.at[:, 1].set(2)  # a Python scalar broadcasts, the dtype stays float32
    assert y.dtype == np.float32 and np.array_equal(y[:, 1], [2, 2, 2])
    z = fnp.arange(6).at[::2].multiply(3)
    assert z.dtype == fnp.arange(6).dtype
    np.testing.assert_array_equal(z, [0, 1, 6, 3, 12, 5])
    np.testing.assert_array_equal(fnp.ones(4).at[[0, 0]].subtract(1.5), [-2, 1, 1, 1])


def test_divide_and_power_use_the_product_of_the_updates():
    x = np.array([8.0, 3.0, 2.0])
    np.testing.assert_allclose(fnp.asarray(x).at[[0, 0, 2]].divide(np.array([2.0, 2.0, 4.0])), [2, 3, 0.5])
    np.testing.assert_allclose(fnp.asarray(x).at[[0, 0, 2]].power(np.array([1.0, 2.0, 3.0])), [64, 3, 8])


# expected values generated once with JAX 0.4 (jax_enable_x64): a = arange(5.0), idx = [7, -1, -9]
_JAX_OOB = {
    ("get", None): [4.0, 4.0, 0.0],
    ("get", "fill"): [np.nan, 4.0, np.nan],
    ("set", None): [0.0, 1.0, 2.0, 3.0, 10.0],
    ("set", "clip"): [10.0, 1.0, 2.0, 3.0, 10.0],
}


@pytest.mark.parametrize("op,mode", sorted(_JAX_OOB, key=str))
@pytest.mark.parametrize("where", ["eager", "numpy", "opencl", "opencl_traced_index"])
def test_out_of_bounds_indices_follow_jax(op, mode, where):
    """Gathers clamp (or fill), scatters drop (or clip): eagerly and under jit alike."""
    a, idx = np.arange(5.0), np.array([7, -1, -9])

    def f(a, idx):
        ref = fnp.asarray(a).at[idx]
        return ref.get(mode=mode) if op == "get" else ref.set(10.0, mode=mode)

    if where == "eager":
        got = f(a, idx)
    elif where == "opencl_traced_index":
        got = ft.jit(f, backend="opencl")(a, idx)
    else:
        got = ft.jit(lambda a: f(a, idx), backend=where)(a)
    np.testing.assert_array_equal(np.asarray(got), _JAX_OOB[(op, mode)])


def test_out_of_bounds_agree_with_jax():
    jnp = pytest.importorskip("jax.numpy", reason="optional comparison with JAX")
    ja, idx = jnp.arange(5.0), jnp.array([7, -1, -9])
    np.testing.assert_array_equal(ja.at[idx].get(), _JAX_OOB[("get", None)])
    np.testing.assert_array_equal(ja.at[idx].get(mode="fill"), _JAX_OOB[("get", "fill")])
    np.testing.assert_array_equal(ja.at[idx].set(10.0), _JAX_OOB[("set", None)])
    np.testing.assert_array_equal(ja.at[idx].set(10.0, mode="clip"), _JAX_OOB[("set", "clip")])


def test_bad_mode_and_traced_mask_raise():
    x = fnp.zeros(3)
    with pytest.raises(ValueError, match="mode must be one of"):
        x.at[0].set(1.0, mode="wrap")
    with pytest.raises(IndexError, match="boolean mask"):
        ft.jit(lambda x: x.at[x > 0].set(1.0), backend="numpy")(np.ones(3))
    with pytest.raises(NotImplementedError, match="apply"):
        x.at[0].apply(np.sin)


# --------------------------------------------------------------------------- the eager array type


def test_eager_results_are_numpy_arrays_with_at():
    x = fnp.zeros((4, 3))
    assert type(x) is EagerArray and isinstance(x, np.ndarray)
    for t in range(4):  # the JAX idiom outside any transformation
        x = x.at[t].set(np.full(3, float(t)))
    np.testing.assert_array_equal(x, np.repeat(np.arange(4.0)[:, None], 3, 1))
    assert type(fnp.sin(x)) is EagerArray and type(np.sin(x)) is EagerArray  # numpy ufuncs keep the type
    assert type(np.asarray(x)) is np.ndarray  # np.asarray: the plain array, no copy
    assert np.shares_memory(np.asarray(x), x)
    assert repr(x) == "Array(" + repr(np.asarray(x))[6:-1] + ", dtype=float64)"  # as jitted results print
    assert str(x) == str(np.asarray(x))
    y = pickle.loads(pickle.dumps(x))
    assert type(y) is EagerArray and np.array_equal(y, x)
    assert type(fnp.asarray(np.ones(2))) is EagerArray
    assert type(fnp.asarray(np.ones(2)).at[0].set(3.0)) is EagerArray


def test_jit_results_have_at():
    out = ft.jit(lambda x: x * 2, backend="opencl")(np.arange(3.0))
    np.testing.assert_array_equal(out.at[1].add(1.0), [0, 3, 4])
    out = ft.jit(lambda x: x * 2, backend="numpy")(np.arange(3.0))
    np.testing.assert_array_equal(out.at[1].add(1.0), [0, 3, 4])


def test_eager_arrays_are_jit_arguments():
    f = ft.jit(lambda x: x + 1, backend="numpy")
    np.testing.assert_array_equal(f(fnp.zeros(2)), [1, 1])
    np.testing.assert_array_equal(f(np.zeros(2)), [1, 1])  # same signature, same program


# --------------------------------------------------------------------------- derivatives and batching


_DUP = np.array([0, 2, 2, -1, 0])


@pytest.mark.parametrize("op", ["set", "add", "multiply", "min", "max", "divide", "power", "get"])
def test_grads_order_2(op):
    x = RNG.uniform(0.5, 2.0, 4) * np.array([1, -1, 1, -1])
    u = RNG.uniform(0.5, 2.0, 5)
    if op == "multiply":
        u[1] = 0.0  # a zero update: the product of the others is exact
    if op in ("min", "max"):
        x, u = np.array([0.3, -1.2, 2.1, 0.9]), np.array([1.4, -0.35, 0.15, 0.55, -0.8])
    if op == "power":
        x = np.abs(x)

    def f(x, u):
        ref = fnp.asarray(x).at[_DUP]
        return ref.get() * u if op == "get" else getattr(ref, op)(u)
    check_grads(f, (x, u), order=2, modes=("fwd", "rev"))


def test_grad_matches_jax_reference():
    """d/d(x, u) of sum(x.at[[0,2,2,-1,0]].set(u) ** 2) and of a max with ties (JAX's values)."""
    gx, gu = ft.grad(lambda x, u: fnp.sum(fnp.asarray(x).at[_DUP].set(u) ** 2), (0, 1))(
        np.arange(1.0, 5.0), np.arange(1.0, 6.0))
    np.testing.assert_allclose(gx, [0, 4, 0, 0])
    np.testing.assert_allclose(gu, [0, 0, 6, 8, 10])
    gx, gu = ft.grad(lambda x, u: fnp.sum(fnp.asarray(x).at[np.array([0, 0, 1])].max(u)), (0, 1))(
        np.array([1.0, 2.0]), np.array([1.0, 0.5, 2.0]))
    np.testing.assert_allclose(gx, [0.5, 0.5])
    np.testing.assert_allclose(gu, [0.5, 0.0, 0.5])


@pytest.mark.parametrize("op", ["set", "add", "multiply", "max"])
def test_vmap_matches_a_loop(op):
    x = RNG.standard_normal((5, 6))
    idx = RNG.integers(-6, 8, (5, 3))  # some out of bounds: dropped
    u = RNG.standard_normal((5, 3))
    f = lambda x, i, u: getattr(fnp.asarray(x).at[i], op)(u)
    want = np.stack([f(x[b], idx[b], u[b]) for b in range(5)])
    np.testing.assert_allclose(ft.vmap(f)(x, idx, u), want)
    np.testing.assert_allclose(ft.vmap(f, in_axes=(0, None, 0))(x, idx[0], u),
                               np.stack([f(x[b], idx[0], u[b]) for b in range(5)]))
    np.testing.assert_allclose(ft.vmap(f, in_axes=(None, 0, 0))(x[0], idx, u),
                               np.stack([f(x[0], idx[b], u[b]) for b in range(5)]))


def test_scan_filling_rows():
    """``X = X.at[t].set(x)`` with a traced row index inside a loop."""
    def fill(xs):
        return lax.fori_loop(0, 4, lambda t, X: X.at[t].set(fnp.asarray(xs)[t] * t), fnp.zeros((4, 3)))
    xs = RNG.standard_normal((4, 3))
    np.testing.assert_allclose(ft.jit(fill, backend="numpy")(xs), xs * np.arange(4.0)[:, None])
    check_grads(fill, (xs,), order=1, modes=("rev",))


# --------------------------------------------------------------------------- dynamic slices


# JAX's values (generated once): negative starts count from the end, then clamp
_JAX_DS = [((8,), 4, [6, 7, 8, 9]), ((-3,), 4, [6, 7, 8, 9]), ((-12,), 4, [0, 1, 2, 3]), ((-1,), 2, [8, 9])]


@pytest.mark.parametrize("start,size,want", _JAX_DS)
def test_dynamic_slice_clamps_like_jax(start, size, want):
    x = np.arange(10.0)
    np.testing.assert_array_equal(lax.dynamic_slice(x, start, (size,)), want)
    for backend in ("numpy", "opencl"):
        got = ft.jit(lambda x, s: lax.dynamic_slice(x, (s,), (size,)), backend=backend)(x, start[0])
        np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("start,want", [(5, [0, 1, 2, 3, -1, -2]), (-3, [0, 1, 2, -1, -2, 5]),
                                        (-30, [-1, -2, 2, 3, 4, 5])])
def test_dynamic_update_slice_clamps_like_jax(start, want):
    x, u = np.arange(6.0), np.array([-1.0, -2.0])
    np.testing.assert_array_equal(lax.dynamic_update_slice(x, u, (start,)), want)
    for backend in ("numpy", "opencl"):
        got = ft.jit(lambda x, u, s: lax.dynamic_update_slice(x, u, (s,)), backend=backend)(x, u, start)
        np.testing.assert_array_equal(np.asarray(got), want)


def test_dynamic_slices_in_dim_grads_and_vmap():
    x = RNG.standard_normal((4, 5))
    np.testing.assert_array_equal(lax.dynamic_slice_in_dim(x, 1, 2, axis=1), x[:, 1:3])
    np.testing.assert_array_equal(lax.dynamic_index_in_dim(x, 2, 0, keepdims=False), x[2])
    np.testing.assert_array_equal(lax.dynamic_update_index_in_dim(x, np.zeros(5), 3, 0)[3], np.zeros(5))
    np.testing.assert_array_equal(lax.dynamic_update_slice_in_dim(x, np.ones((4, 2)), 4, 1)[:, 3:], np.ones((4, 2)))
    check_grads(lambda x, u: lax.dynamic_update_slice(x, u, (fnp.asarray(2), 1)) * x, (x, x[:2, :3]), order=2,
                modes=("fwd", "rev"))
    check_grads(lambda x: lax.dynamic_slice(x, (fnp.asarray(1), 3), (2, 2)), (x,), order=2, modes=("fwd", "rev"))
    starts = np.array([0, 3, -1, 9])
    got = ft.vmap(lambda s: lax.dynamic_slice(x, (s, 1), (2, 3)))(starts)
    np.testing.assert_array_equal(got, np.stack([lax.dynamic_slice(x, (s, 1), (2, 3)) for s in starts]))
    got = ft.vmap(lambda s, u: lax.dynamic_update_slice(x, u, (s, 0)))(starts, np.ones((4, 2, 5)))
    np.testing.assert_array_equal(got, np.stack([lax.dynamic_update_slice(x, np.ones((2, 5)), (s, 0))
                                                 for s in starts]))
