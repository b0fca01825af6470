"""JAX names a user reaches for (issue 35, part 4): ``jit(donate_argnums=...)``, ``grad(allow_int=True)``
with ``ft.dtypes.float0``, ``ft.clear_caches`` / ``jitted.clear_cache``, ``ft.typing``."""
import typing

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp

RNG = np.random.default_rng(61)


def test_donated_arguments_give_the_same_results_and_stay_valid():
    step = ft.jit(lambda w, g: w - 0.1 * g, donate_argnums=(0,))
    named = ft.jit(lambda w, g: w - 0.1 * g, donate_argnames=("w",))
    w, g = RNG.standard_normal(5), RNG.standard_normal(5)
    dw = ft.device_put(w)
    for f in (step, named):
        np.testing.assert_allclose(np.asarray(f(dw, g)), w - 0.1 * g)
        np.testing.assert_array_equal(np.asarray(dw), w)  # (nothing reused: the donated array is intact)


def test_donating_a_static_argument_or_a_non_integer_is_an_error():
    with pytest.raises(ValueError, match=r"both static and donated"):
        ft.jit(lambda x, n: x * n, static_argnums=1, donate_argnums=1)
    with pytest.raises(TypeError, match=r"donate_argnums must be ints"):
        ft.jit(lambda x: x, donate_argnums="x")


def test_allow_int_gives_float0_zeros_for_integer_and_boolean_inputs():
    f = lambda x, n, flag: fnp.sum(x * n) * fnp.where(flag, 2.0, 1.0)
    x, n = RNG.standard_normal(3), np.array([1, 2, 3])
    gx, gn, gflag = ft.grad(f, argnums=(0, 1, 2), allow_int=True)(x, n, True)
    np.testing.assert_allclose(np.asarray(gx), 2.0 * n)
    assert gn.dtype == ft.dtypes.float0 and gn.shape == (3,)
    assert gflag.dtype == ft.dtypes.float0 and gflag.shape == ()
    value, (gx2, _, _) = ft.value_and_grad(f, argnums=(0, 1, 2), allow_int=True)(x, n, True)
    np.testing.assert_allclose(float(value), 2.0 * float(np.sum(x * n)))
    np.testing.assert_array_equal(np.asarray(gx2), np.asarray(gx))
    with pytest.raises(ft.DtypeError, match=r"floating-point inputs"):
        ft.grad(f, argnums=(0, 1))(x, n, True)


def test_allow_int_float_gradients_under_jit_and_float0_outputs_said_missing():
    f = lambda p: fnp.sum(p["w"] * p["k"])
    params = {"w": RNG.standard_normal(4), "k": np.array([3, 1, 4, 1])}
    float_grads = ft.jit(lambda p: ft.grad(f, allow_int=True)(p)["w"])(params)
    np.testing.assert_allclose(np.asarray(float_grads), params["k"])
    with pytest.raises(NotImplementedError, match=r"float0 gradient.*outside jit"):
        ft.jit(ft.grad(f, allow_int=True))(params)


def test_allow_int_matches_jax_live():
    jax = pytest.importorskip("jax", reason="optional comparison with JAX")
    f_ft = lambda x, n: ft.numpy.sum(x * n)
    f_jax = lambda x, n: jax.numpy.sum(x * n)
    x, n = RNG.standard_normal(3).astype(np.float32), np.array([2, 5, 7], np.int32)
    ours = ft.grad(f_ft, argnums=(0, 1), allow_int=True)(x, n)
    theirs = jax.grad(f_jax, argnums=(0, 1), allow_int=True)(x, n)
    np.testing.assert_allclose(np.asarray(ours[0]), np.asarray(theirs[0]))
    assert ours[1].dtype == theirs[1].dtype and ours[1].shape == theirs[1].shape


def test_clear_caches_forgets_every_compiled_signature():
    f, g = ft.jit(lambda x: x + 1), ft.jit(lambda x: x * 2)
    x = RNG.standard_normal(3)
    f(x), g(x), g(x[:2])
    assert f.cache_size() == 1 and g.cache_size() == 2
    g.clear_cache()
    assert f.cache_size() == 1 and g.cache_size() == 0
    f(x), g(x)
    ft.clear_caches()
    assert f.cache_size() == 0 and g.cache_size() == 0
    np.testing.assert_allclose(np.asarray(f(x)), x + 1)  # (traced and compiled again)


def test_typing_names_annotate_functions():
    def scale(x: ft.typing.ArrayLike, dtype: ft.typing.DTypeLike = np.float32) -> ft.typing.Array:
        return fnp.asarray(x, dtype) * 2
    hints = typing.get_type_hints(scale)
    assert hints["return"] is ft.Array
    assert ft.Array in typing.get_args(hints["x"]) and np.ndarray in typing.get_args(hints["x"])
    assert np.dtype in typing.get_args(hints["dtype"])
    np.testing.assert_array_equal(np.asarray(scale([1, 2])), [2.0, 4.0])
