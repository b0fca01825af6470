"""The OpenCL ``argsort`` (merge sort) and ``scatter`` kernels against the numpy backend: odd
sizes, ties, NaNs, several dtypes, batched rows, broadcast updates; no host steps (conftest
switches the small-program shortcut off and runs them with canaries)."""
import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp

RNG = np.random.default_rng(3)


def _compiled(f, *args):
    c = ft.jit(f, backend="opencl").lower(*args).compile()
    assert c.num_host_steps == 0, c.report()
    return c


@pytest.mark.parametrize("n,dtype", [(1, np.float64), (2, np.float64), (5, np.float64), (17, np.float64),
                                     (64, np.float64), (1025, np.float64), (4099, np.float64),
                                     (3, np.int32), (100, np.int32), (33, np.float32), (9, np.int64)])
def test_argsort_kernel_matches_numpy(n, dtype):
    rows = 3 if n < 1000 else 1
    if np.dtype(dtype).kind == "f":
        x = np.round(RNG.standard_normal((rows, n)), 1).astype(dtype)  # ties
        x.flat[::5] = np.nan
    else:
        x = RNG.integers(-4, 4, (rows, n)).astype(dtype)
    for descending in (False, True):
        f = lambda x: fnp.argsort(x, descending=descending)
        got = np.asarray(_compiled(f, x)(x))
        np.testing.assert_array_equal(got, ft.jit(f, backend="numpy")(x))


def test_sort_kernel_on_a_middle_axis_and_empty_and_size_one():
    x = RNG.standard_normal((4, 7, 3))
    f = lambda x: fnp.sort(x, axis=1)
    np.testing.assert_array_equal(np.asarray(_compiled(f, x)(x)), np.sort(x, axis=1))
    for shape in ((0, 5), (5, 0), (3, 1)):
        z = np.ones(shape)
        np.testing.assert_array_equal(np.asarray(ft.jit(fnp.argsort, backend="opencl")(z)),
                                      np.argsort(z, kind="stable"))


@pytest.mark.parametrize("op,dtype", [("set", np.float64), ("multiply", np.float64), ("min", np.float64),
                                      ("max", np.float64), ("set", np.int32), ("max", np.float32),
                                      ("multiply", np.int64), ("min", np.int32)])
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # numpy's NaN in maximum.at
def test_scatter_kernels_match_numpy(op, dtype):
    x = (RNG.standard_normal((7, 5)) * 3).astype(dtype)
    idx = RNG.integers(-8, 9, 23)  # repeats, negatives, some out of bounds (dropped)
    u = (RNG.standard_normal((23, 1)) * 3).astype(dtype)  # broadcast along the rows
    if np.dtype(dtype).kind == "f":
        x[2, 1] = np.nan  # NaN propagates through min / max
    f = lambda x, i, u: getattr(fnp.asarray(x).at[i], op)(u)
    got = np.asarray(_compiled(f, x, idx, u)(x, idx, u))
    want = ft.jit(f, backend="numpy")(x, idx, u)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_scatter_set_is_deterministic_last_update_wins():
    x = np.zeros(5)
    idx = np.repeat(np.arange(5), 400)  # 400 writes per position
    u = RNG.standard_normal(2000)
    f = _compiled(lambda x, i, u: fnp.asarray(x).at[i].set(u), x, idx, u)
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(f(x, idx, u)), u[399::400])


def test_scatter_and_sort_in_gradients_and_vmap_run_as_kernels():
    x = RNG.standard_normal((3, 6))
    idx = np.array([0, 2, 2, 5])
    g = lambda x: ft.grad(lambda x: fnp.sum(fnp.sort(x, axis=1) ** 2 * fnp.asarray(x).at[:, idx].max(1.0)))(x)
    np.testing.assert_allclose(np.asarray(_compiled(g, x)(x)), ft.jit(g, backend="numpy")(x), rtol=1e-12)
    v = ft.vmap(lambda r, i: fnp.asarray(r).at[i].set(-1.0))
    ii = RNG.integers(0, 6, (3, 2))
    np.testing.assert_array_equal(np.asarray(_compiled(v, x, ii)(x, ii)), ft.jit(v, backend="numpy")(x, ii))


def test_sorts_and_scatters_of_several_types_share_one_program():
    """Each kernel's C helpers are named per key type / direction / op: two in one program build."""
    x = RNG.standard_normal((3, 37))
    b = x > 0
    i = RNG.integers(0, 37, 9)

    def f(x, b, i):
        xf = x.astype(np.float32)
        return (fnp.argsort(x), fnp.sort(x, descending=True), fnp.argsort(b), fnp.sort(xf),
                fnp.asarray(x).at[:, i].min(0.0), fnp.asarray(xf).at[:, i].min(0.0), fnp.asarray(x).at[:, i].max(0.0))
    got = _compiled(f, x, b, i)(x, b, i)
    for g, w in zip(got, ft.jit(f, backend="numpy")(x, b, i)):
        np.testing.assert_array_equal(np.asarray(g), w)


@pytest.mark.parametrize("kind", ["cpu", "gpu"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_repeated_indices_add_and_multiply_in_index_order(kind, dtype, monkeypatch):
    """``x.at[i].add`` / ``.multiply`` (and an embedding's gradient) with many repeated indices, some
    out of range (clipped): each position combines its updates in the order of their index, as
    ``np.add.at`` does, so the result equals the numpy backend's bit for bit, on every call -- no
    atomics, whose order of additions would change the last bits from call to call on a GPU."""
    monkeypatch.setattr(ft.config, "opencl_device_kind", kind)
    table = RNG.standard_normal((37, 6)).astype(dtype)
    ids = RNG.integers(-2, 40, 3001)
    upd = (RNG.standard_normal((3001, 6)) * 0.1 + 1).astype(dtype)
    f = lambda t, u, i: (t.at[i].add(u, mode="clip"), t[:, 0].at[i].multiply(u[:, 1], mode="clip"),
                         ft.grad(lambda t: fnp.sum(t[fnp.clip(i, 0, 36)] * u))(t))
    compiled = _compiled(f, table, upd, ids)
    want = ft.jit(f, backend="numpy")(table, upd, ids)
    first = compiled(table, upd, ids)
    for got, ref in zip(first, want):
        assert np.array_equal(np.asarray(got), np.asarray(ref))
    assert all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(compiled(table, upd, ids), first))
    assert "in index order" in compiled.report()
