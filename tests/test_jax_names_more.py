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


# --------------------------------------------------------------------------- dot_product_attention

B, T, S, N, K, H = 2, 5, 7, 4, 2, 8


def _qkv(dtype=np.float32):
    rng = np.random.default_rng(67)
    return [rng.standard_normal(shape).astype(dtype) for shape in ((B, T, N, H), (B, S, K, H), (B, S, K, H))]


def _reference(q, k, v, bias=None, keep=None, scale=None, q_lengths=None):
    """numpy: grouped heads repeated, logits (+ bias), positions not kept at JAX's large negative."""
    k, v = np.repeat(k, N // K, axis=2), np.repeat(v, N // K, axis=2)
    logits = np.einsum("btnh,bsnh->bnts", q.astype(np.float64), k) * (scale or 1 / np.sqrt(H))
    logits = logits + (0 if bias is None else bias)
    if keep is not None:
        logits = np.where(keep, logits, -0.7 * np.finfo(np.float32).max)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    out = np.einsum("bnts,bsnh->btnh", w / w.sum(-1, keepdims=True), v)
    if q_lengths is not None:
        out = np.where(np.arange(T)[None, :, None, None] < q_lengths[:, None, None, None], out, 0.0)
    return out


CASES = {
    "plain": (dict(), dict()),
    "causal": (dict(is_causal=True), dict(keep=np.tril(np.ones((T, S), bool)))),
    "mask": (dict(mask=np.arange(S) % 3 != 1), dict(keep=np.arange(S) % 3 != 1)),
    "bias and causal": (dict(bias=np.linspace(-1, 1, B * N * T * S).reshape(B, N, T, S), is_causal=True),
                        dict(bias=np.linspace(-1, 1, B * N * T * S).reshape(B, N, T, S),
                             keep=np.tril(np.ones((T, S), bool)))),
    "lengths": (dict(query_seq_lengths=np.array([5, 3]), key_value_seq_lengths=np.array([7, 4])),
                dict(keep=(np.arange(T)[:, None] < np.array([5, 3])[:, None, None, None])
                     & (np.arange(S) < np.array([7, 4])[:, None, None, None]), q_lengths=np.array([5, 3]))),
    "window and scale": (dict(local_window_size=(2, 1), scale=0.3),
                         dict(keep=(np.arange(S)[None] >= np.arange(T)[:, None] - 2)
                              & (np.arange(S)[None] <= np.arange(T)[:, None] + 1), scale=0.3)),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("jitted", [False, True])
def test_dot_product_attention_matches_a_numpy_reference(case, jitted):
    ours, ref = CASES[case]
    q, k, v = _qkv()
    f = lambda q, k, v: ft.nn.dot_product_attention(q, k, v, **ours)
    got = np.asarray((ft.jit(f) if jitted else f)(q, k, v))
    np.testing.assert_allclose(got, _reference(q, k, v, **ref), rtol=2e-5, atol=2e-5)


def test_dot_product_attention_without_a_batch_axis():
    q, k, v = _qkv()
    np.testing.assert_allclose(np.asarray(ft.nn.dot_product_attention(q[1], k[1], v[1], is_causal=True)),
                               np.asarray(ft.nn.dot_product_attention(q, k, v, is_causal=True))[1], rtol=1e-6)


@pytest.mark.parametrize("case", ["plain", "bias and causal", "lengths"])
def test_dot_product_attention_gradients_match_finite_differences(case):
    ours, _ = CASES[case]
    q, k, v = (x[:, :3].astype(np.float64) for x in _qkv())
    ours = {**ours, "bias": ours["bias"][:, :, :3, :3]} if "bias" in ours else \
        {"query_seq_lengths": np.array([3, 2]), "key_value_seq_lengths": np.array([3, 1])} if case == "lengths" else ours
    ft.test_util.check_grads(lambda q, k, v: ft.nn.dot_product_attention(q, k, v, **ours), (q, k, v), order=2,
                             modes=("fwd", "rev"))


@pytest.mark.parametrize("case", list(CASES))
def test_dot_product_attention_matches_jax_live(case):
    jax = pytest.importorskip("jax", reason="optional comparison with JAX")
    ours, _ = CASES[case]
    q, k, v = _qkv()
    theirs = {n: (x.astype(np.float32) if n == "bias" else x.astype(np.int32) if n.endswith("lengths") else x)
              for n, x in ours.items()}  # (JAX takes int32 lengths only)
    np.testing.assert_allclose(np.asarray(ft.nn.dot_product_attention(q, k, v, **ours)),
                               np.asarray(jax.nn.dot_product_attention(q, k, v, **theirs)), rtol=2e-5, atol=2e-5)


def test_dot_product_attention_errors():
    q, k, v = _qkv()
    with pytest.raises(ft.ShapeError, match=r"N a multiple of K"):
        ft.nn.dot_product_attention(q[:, :, :3], k, v)
    with pytest.raises(NotImplementedError, match=r"cudnn"):
        ft.nn.dot_product_attention(q, k, v, implementation="cudnn")
