"""ft.random: JAX's numbers for the same key (stored vectors from tests/data/random_vectors.npz,
made by tests/data/make_random_vectors.py with JAX 0.10.2; a live comparison when JAX is
installed), jit on the numpy backend equal to eager, vmap over keys equal to a loop, statistics
with fixed seeds, errors.  OpenCL runs are in tests/test_opencl_random.py."""
import importlib.util
import math
import os

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace import random as R

VECTORS = np.load(os.path.join(os.path.dirname(__file__), "data", "random_vectors.npz"))


def _generator():
    """tests/data/make_random_vectors.py, whose table of calls made the stored vectors."""
    spec = importlib.util.spec_from_file_location(
        "make_random_vectors", os.path.join(os.path.dirname(__file__), "data", "make_random_vectors.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATOR = _generator()
SEEDS, COV = GENERATOR.SEEDS, GENERATOR.COV
CASES = GENERATOR.cases(R, ft.nn.initializers)  # name -> the same call as the stored JAX call, over ft.random
# Floats through erf_inv, log or a QR may differ from XLA's in the last bit (its log1p and
# polynomial evaluation are its own; it fuses u * (maxval - minval) + minval into one rounding):
# compared to a few float32 ulps.  Everything else is exact.
ROUNDED = {"uniform_range", "normal", "truncated_normal", "gumbel", "gumbel_high", "exponential", "multivariate_normal",
           "multivariate_normal_eigh", "multivariate_normal_svd",
           "init_glorot_normal", "init_he_normal", "init_lecun_normal", "init_orthogonal", "init_orthogonal_tall",
           "init_normal", "init_truncated_normal", "init_variance_scaling", "x64_normal", "x64_truncated_normal"}


def assert_matches(name, got, want):
    got = np.asarray(got)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    if name not in ROUNDED:
        np.testing.assert_array_equal(got, want)
    elif want.dtype == np.float64:
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-15)
    else:
        np.testing.assert_allclose(got, want, rtol=4e-7, atol=3e-7)


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_numbers_as_jax_for_the_same_key(name):
    for seed in SEEDS:
        assert_matches(name, CASES[name](R.PRNGKey(seed)), VECTORS[f"{name}/{seed}"])


def test_every_stored_vector_is_checked():
    assert {k.split("/")[0] for k in VECTORS.files} - {"x64_key", "permutation_10000"} == set(CASES)


def test_seeds_split_into_two_words():
    """int32 seeds give (0, bits); wider ones their high and low words (JAX with x64)."""
    np.testing.assert_array_equal(R.PRNGKey(-1), VECTORS["x64_key/-1"])
    np.testing.assert_array_equal(R.PRNGKey(2 ** 40 + 5), VECTORS["x64_key/1099511627781"])
    np.testing.assert_array_equal(R.PRNGKey(np.int32(-1)), [0, 2 ** 32 - 1])
    traced = ft.jit(R.PRNGKey, backend="numpy")
    for seed in (np.int32(-1), np.int64(-1), np.int64(2 ** 40 + 5), np.uint32(7)):
        np.testing.assert_array_equal(traced(seed), R.PRNGKey(seed))
    assert R.key is R.PRNGKey


def test_live_jax_comparison():
    jax = pytest.importorskip("jax", reason="optional: compares with the installed jax.random live")
    with jax.enable_x64(False):  # JAX's defaults, whatever other test modules switched on
        _compare_with_jax(jax)


def _compare_with_jax(jax):
    rng = np.random.default_rng(7)
    for seed in rng.integers(0, 2 ** 31 - 1, 1):  # (JAX compiles each call: one fresh seed and shape)
        seed = int(seed)
        shape = tuple(int(n) for n in rng.integers(1, 9, 2))
        k, jk = R.PRNGKey(seed), jax.random.PRNGKey(seed)
        np.testing.assert_array_equal(R.split(k, 5), jax.random.split(jk, 5))
        np.testing.assert_array_equal(R.uniform(k, shape), jax.random.uniform(jk, shape))
        np.testing.assert_array_equal(R.randint(k, shape, -7, 1000), jax.random.randint(jk, shape, -7, 1000))
        np.testing.assert_array_equal(R.permutation(k, 33), jax.random.permutation(jk, 33))
        np.testing.assert_allclose(R.normal(k, shape), jax.random.normal(jk, shape), rtol=4e-7, atol=3e-7)
        np.testing.assert_allclose(ft.nn.erf_inv(np.linspace(-0.999, 0.999, 101, dtype=np.float32)),
                                   jax.lax.erf_inv(np.linspace(-0.999, 0.999, 101, dtype=np.float32)), rtol=4e-7)


# --------------------------------------------------------------------------- transformations

TRANSFORM_CASES = ["split3", "fold_in7", "bits", "uniform_range", "normal", "truncated_normal", "bernoulli",
                   "categorical_shape", "categorical_noreplace", "randint", "randint_int8", "permutation", "permutation_independent",
                   "choice_noreplace", "choice_p", "choice_p_noreplace", "choice_rows", "gumbel_high",
                   "exponential", "init_glorot_normal", "x64_normal", "x64_bits", "x64_randint"]


@pytest.mark.parametrize("name", TRANSFORM_CASES)
def test_jit_equals_eager_and_vmap_over_keys_equals_a_loop(name):
    """Under jit every array is traced (the sorts of permutation and choice included: the
    argsort primitive), and under vmap the keys are batched: the same numbers."""
    f = CASES[name]
    key = R.PRNGKey(11)
    np.testing.assert_array_equal(ft.jit(f, backend="numpy")(key), f(key))
    keys = R.split(key, 3)
    np.testing.assert_array_equal(ft.vmap(f)(keys), np.stack([np.asarray(f(k)) for k in np.asarray(keys)]))


def test_traced_permutation_of_10000_elements():
    """A long shuffle (two stable sorting rounds, as JAX) under jit and vmap: JAX's stored
    numbers; Gumbel-top-k choice of 3000 of 10000 traced equal to eager."""
    key, other = R.PRNGKey(0), R.PRNGKey(5)
    want = VECTORS["permutation_10000/0"]
    f = lambda k: R.permutation(k, 10000)
    np.testing.assert_array_equal(f(key), want)
    np.testing.assert_array_equal(ft.jit(f, backend="numpy")(key), want)
    batched = np.asarray(ft.vmap(f)(np.stack([key, other])))
    np.testing.assert_array_equal(batched[0], want)
    np.testing.assert_array_equal(batched[1], f(other))
    p = np.asarray(R.uniform(other, (10000,)))
    g = lambda k, p: R.choice(k, 10000, (3000,), replace=False, p=p)
    picked = np.asarray(ft.jit(g, backend="numpy")(key, p))
    np.testing.assert_array_equal(picked, g(key, p))
    assert len(set(picked.tolist())) == 3000


@pytest.mark.parametrize("method", ["cholesky", "eigh", "svd"])
def test_multivariate_normal_with_a_traced_cov(method):
    """cov traced (functrace.numpy.linalg's decompositions): jit and vmap over covariances equal
    eager; derivatives through mean and cov match finite differences."""
    f = lambda k, mean, cov: R.multivariate_normal(k, mean, cov, (4, 2), method=method)
    key, mean, covs = R.PRNGKey(9), np.array([1.0, -1.0, 0.5], np.float32), GENERATOR.COV_BATCH
    np.testing.assert_array_equal(ft.jit(f, backend="numpy")(key, mean, covs), f(key, mean, covs))
    keys = R.split(key, 2)
    looped = np.stack([np.asarray(f(k, mean, c)) for k, c in zip(np.asarray(keys), covs)])
    np.testing.assert_array_equal(ft.vmap(f, in_axes=(0, None, 0))(keys, mean, covs), looped)
    ft.test_util.check_grads(lambda m, c: R.multivariate_normal(key, m, c, (3,), method=method),
                             (mean.astype(np.float64), COV), order=2, modes=("fwd", "rev"))


def test_orthogonal_initializer_with_a_traced_key():
    """The QR of traced normal samples (functrace.numpy.linalg.qr): jit and vmap equal eager,
    and JAX's stored matrices."""
    for name in ("init_orthogonal", "init_orthogonal_tall"):
        f, key = CASES[name], R.PRNGKey(SEEDS[2])
        np.testing.assert_array_equal(ft.jit(f, backend="numpy")(key), f(key))
        assert_matches(name, ft.jit(f, backend="numpy")(key), VECTORS[f"{name}/{SEEDS[2]}"])
        keys = R.split(key, 3)
        np.testing.assert_array_equal(ft.vmap(f)(keys), np.stack([np.asarray(f(k)) for k in np.asarray(keys)]))


def test_vmap_over_keys_and_a_parameter_and_jit_of_vmap():
    keys = R.split(R.PRNGKey(3), 4)
    highs = np.array([1.0, 2.0, 5.0, 10.0], np.float32)
    f = lambda k, hi: R.uniform(k, (3,), maxval=hi)
    want = np.stack([np.asarray(f(k, h)) for k, h in zip(np.asarray(keys), highs)])
    np.testing.assert_array_equal(ft.vmap(f)(keys, highs), want)
    np.testing.assert_array_equal(ft.jit(ft.vmap(f), backend="numpy")(keys, highs), want)
    np.testing.assert_array_equal(ft.vmap(lambda k: R.split(k, 2))(keys), np.stack([R.split(k) for k in np.asarray(keys)]))


def test_threefry_batching_with_batched_counters():
    """The batching rule moves any batch axis to the front (keys and counters both batched)."""
    k = np.array([[1, 2], [3, 4], [5, 6]], np.uint32)
    x = np.arange(12, dtype=np.uint32).reshape(4, 3)
    f = lambda k, x: R.threefry2x32_p.bind(k[0], k[1], np.uint32(9), x)
    got = ft.vmap(f, in_axes=(0, 1))(k, x)
    for i in range(3):
        want = R.threefry2x32_reference(k[i, 0], k[i, 1], np.uint32(9), x[:, i])
        np.testing.assert_array_equal(got[0][i], want[0])
        np.testing.assert_array_equal(got[1][i], want[1])


def test_threefry_known_answer():
    """Random123's known-answer vector for Threefry-2x32 with 20 rounds."""
    out = R.threefry2x32_reference(np.uint32(0x13198A2E), np.uint32(0x03707344),
                                   np.uint32(0x243F6A88), np.uint32(0x85A308D3))
    assert [int(o) for o in out] == [0xC4923A9C, 0x483DF7A0]


def test_parameters_carry_derivatives_as_in_jax():
    """The bits carry none; minval / maxval do: d/dmaxval sum(uniform) = sum(unit floats)."""
    key = R.PRNGKey(4)
    unit = np.asarray(R.uniform(key, (6,), np.float64))
    g = ft.grad(lambda lo, hi: fnp.sum(R.uniform(key, (6,), np.float64, lo, hi)), (0, 1))(0.5, 2.0)
    np.testing.assert_allclose(g, (6 - unit.sum(), unit.sum()), rtol=1e-12)
    ft.test_util.check_grads(lambda lo, hi: R.truncated_normal(key, lo, hi, (5,), np.float64),
                             (np.array(-1.2), np.array(0.9)), order=1, modes=("fwd", "rev"))


# --------------------------------------------------------------------------- statistics (fixed seeds)


def test_moments_with_fixed_seeds():
    n = 20000
    k = R.PRNGKey(2024)
    u = np.asarray(R.uniform(k, (n,)))
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.003
    z = np.asarray(R.normal(k, (n,), np.float64))
    assert abs(z.mean()) < 0.03 and abs(z.var() - 1) < 0.04
    t = np.asarray(R.truncated_normal(k, -1.0, 2.0, (n,)))
    assert t.min() > -1.0 and t.max() < 2.0
    assert abs(np.asarray(R.bernoulli(k, 0.3, (n,))).mean() - 0.3) < 0.015
    assert abs(np.asarray(R.exponential(k, (n,))).mean() - 1.0) < 0.03
    assert abs(np.asarray(R.gumbel(k, (n,))).mean() - 0.5772156649) < 0.03
    counts = np.bincount(np.asarray(R.randint(k, (n,), 3, 8)) - 3, minlength=5)
    assert counts.sum() == n and np.all(np.abs(counts / n - 0.2) < 0.015)
    logits = np.log(np.array([0.2, 0.5, 0.3], np.float32))
    freq = np.bincount(np.asarray(R.categorical(k, logits, shape=(n,))), minlength=3) / n
    np.testing.assert_allclose(freq, [0.2, 0.5, 0.3], atol=0.015)
    m = np.asarray(R.multivariate_normal(k, np.zeros(3), COV, (n,)))
    np.testing.assert_allclose(np.cov(m.T), COV, atol=0.08)
    perm = np.asarray(R.permutation(k, 3000))  # two sorting rounds above 1625 elements, as JAX
    np.testing.assert_array_equal(np.sort(perm), np.arange(3000))
    picked = np.asarray(R.choice(k, 50, (20,), replace=False, p=np.full(50, 0.02)))
    assert len(set(picked.tolist())) == 20


def test_split_keys_are_independent_streams():
    a, b = (np.asarray(R.normal(k, (5000,))) for k in np.asarray(R.split(R.PRNGKey(0))))
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.05


# --------------------------------------------------------------------------- errors


def test_bad_keys_and_arguments_are_named():
    with pytest.raises(TypeError, match=r"ft.random.normal: the key must be a uint32\[2\]"):
        R.normal(np.zeros(2), (3,))
    with pytest.raises(TypeError, match="use ft.vmap"):
        R.uniform(R.split(R.PRNGKey(0), 3), (2,))
    with pytest.raises(TypeError, match="ft.random.uniform: dtype must be float32 or float64"):
        R.uniform(R.PRNGKey(0), (2,), np.int32)
    with pytest.raises(TypeError, match="ft.random.randint: dtype must be an integer"):
        R.randint(R.PRNGKey(0), (2,), 0, 5, np.float32)
    with pytest.raises(ft.ShapeError, match="does not broadcast to the sample shape"):
        R.uniform(R.PRNGKey(0), (2,), minval=np.zeros(3))
    with pytest.raises(ValueError, match="cannot take 6 samples from 5 without replacement"):
        R.choice(R.PRNGKey(0), 5, (6,), replace=False)
    with pytest.raises(TypeError, match="PRNGKey: the seed must be an integer scalar"):
        R.PRNGKey(1.5)


def test_categorical_shape_errors_name_the_logits_and_the_caller():
    key = R.PRNGKey(0)

    def sample_actions(logits):
        return R.categorical(key, logits, shape=(3, 4))

    with pytest.raises(ft.ShapeError, match=r"batch shape \(5,\) of logits of shape \(5, 7\) \(without axis 1, "
                                            r"the categories\) does not broadcast to shape \(3, 4\) in function `sample_actions`"):
        ft.jit(sample_actions, backend="numpy")(np.zeros((5, 7), np.float32))
    with pytest.raises(ft.ShapeError, match=r"axis -1 is out of range for logits of shape \(\)"):
        R.categorical(key, np.float32(1.0))
    with pytest.raises(ft.ShapeError, match=r"axis 2 is out of range for logits of shape \(2, 3\)"):
        R.categorical(key, np.zeros((2, 3), np.float32), axis=2)
    with pytest.raises(ValueError, match=r"have no categories along axis 1"):
        R.categorical(key, np.zeros((3, 0), np.float32))
    with pytest.raises(ValueError, match="cannot draw 5 samples from 3 categories without replacement in function"):
        R.categorical(key, np.zeros(3, np.float32), shape=(5,), replace=False)
    assert R.categorical(key, np.zeros((2, 3), np.float32), axis=-2).shape == (3,)


@pytest.mark.parametrize("sampler, args, kwargs", [
    (R.bits, ((2,), np.int32), {}), (R.gumbel, (), {"mode": "mid"}), (R.fold_in, (np.arange(2),), {}),
    (R.choice, (3,), {"p": np.ones(4)}), (ft.nn.initializers.glorot_uniform(), ((3,),), {}),
    (R.uniform, ("3",), {}), (R.normal, ((2.5,),), {}), (R.split, (-1,), {}),
    (ft.nn.initializers.glorot_normal(), ((3, 3), np.int32), {})],
    ids=["bits", "gumbel", "fold_in", "choice", "initializer", "shape_str", "shape_float", "shape_negative",
         "initializer_int"])
def test_argument_errors_name_the_callers_function(sampler, args, kwargs):
    def user_code():
        return sampler(R.PRNGKey(0), *args, **kwargs)
    with pytest.raises((TypeError, ValueError), match="in function `user_code`"):
        user_code()


# --------------------------------------------------------------------------- ft.nn extras


def test_dropout_keeps_with_bernoulli_bits_and_rescales():
    x = np.arange(1.0, 49.0, dtype=np.float32).reshape(6, 8)
    for seed in SEEDS:
        keep = VECTORS[f"bernoulli_keep/{seed}"]  # jax.random.bernoulli(key, 0.75, (6, 8))
        got = np.asarray(ft.nn.dropout(R.PRNGKey(seed), 0.25, x))
        np.testing.assert_array_equal(got, np.where(keep, x / np.float32(0.75), 0))
    np.testing.assert_array_equal(ft.nn.dropout(R.PRNGKey(0), 0.5, x, deterministic=True), x)
    np.testing.assert_array_equal(ft.nn.dropout(R.PRNGKey(0), 1.0, x), np.zeros_like(x))
    f = ft.jit(lambda k, x: ft.nn.dropout(k, 0.25, x), backend="numpy")
    np.testing.assert_array_equal(f(R.PRNGKey(3), x), ft.nn.dropout(R.PRNGKey(3), 0.25, x))
    with pytest.raises(ValueError, match="dropout: rate must be in"):
        ft.nn.dropout(R.PRNGKey(0), 1.5, x)


# (the values jax.nn gives, float64 on these inputs; the activations' derivatives are checked in
# tests/test_grads_systematic.py)
_X = np.array([-7.0, -3.5, -1.0, -0.25, 0.0, 0.5, 1.0, 2.5, 4.0, 6.5])


def _reference_activations():
    sig = 1 / (1 + np.exp(-_X))
    elu = np.where(_X > 0, _X, np.expm1(np.minimum(_X, 0)))
    relu6 = np.clip(_X, 0, 6)
    return {
        "leaky_relu": np.where(_X >= 0, _X, 0.01 * _X), "elu": elu,
        "selu": 1.0507009873554804934193349852946 * np.where(_X > 0, _X, 1.6732632423543772848170429916717
                                                              * np.expm1(np.minimum(_X, 0))),
        "celu": np.where(_X > 0, _X, 2.0 * np.expm1(np.minimum(_X, 0) / 2.0)), "relu6": relu6,
        "hard_tanh": np.clip(_X, -1, 1), "hard_sigmoid": np.clip(_X + 3, 0, 6) / 6,
        "hard_silu": _X * np.clip(_X + 3, 0, 6) / 6, "softplus": np.log1p(np.exp(_X)),
        "log_sigmoid": np.log(sig), "sigmoid": sig,
    }


@pytest.mark.parametrize("name", sorted(_reference_activations()))
def test_activations(name):
    f = (lambda x: ft.nn.celu(x, alpha=2.0)) if name == "celu" else getattr(ft.nn, name)
    np.testing.assert_allclose(f(_X), _reference_activations()[name], rtol=1e-13, atol=1e-15)
    assert np.asarray(f(_X.astype(np.float32))).dtype == np.float32
    np.testing.assert_allclose(ft.jit(f, backend="numpy")(_X), f(_X), rtol=1e-15)


def test_glu_standardize_one_hot():
    x = np.random.default_rng(0).standard_normal((3, 8))
    np.testing.assert_allclose(ft.nn.glu(x), x[:, :4] / (1 + np.exp(-x[:, 4:])), rtol=1e-13)
    np.testing.assert_allclose(ft.nn.glu(x.T, axis=0), (x[:, :4] / (1 + np.exp(-x[:, 4:]))).T, rtol=1e-13)
    with pytest.raises(ft.ShapeError, match="glu: axis -1 has odd length 3"):
        ft.nn.glu(np.ones((2, 3)))
    s = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(ft.nn.standardize(x), s, rtol=1e-10)
    np.testing.assert_allclose(ft.nn.standardize(x, axis=0, mean=0.0, variance=4.0), x / np.sqrt(4 + 1e-5), rtol=1e-13)
    labels = np.array([[0, 3], [2, 7]])
    want = (labels[..., None] == np.arange(4)).astype(np.float32)
    np.testing.assert_array_equal(ft.nn.one_hot(labels, 4), want)
    np.testing.assert_array_equal(ft.nn.one_hot(labels, 4, axis=0), np.moveaxis(want, -1, 0))
    assert np.asarray(ft.nn.one_hot(labels, 4, dtype=np.int32)).dtype == np.int32
    np.testing.assert_array_equal(ft.vmap(lambda l: ft.nn.one_hot(l, 4))(labels), want)


def test_erf_inv_inverts_erf():
    x = np.concatenate([np.linspace(-0.999999, 0.999999, 2001), 1 - np.logspace(-16, -1, 50), np.logspace(-300, -1, 20)])
    y = np.asarray(ft.nn.erf_inv(x))
    np.testing.assert_allclose([math.erf(v) for v in y], x, rtol=2e-16, atol=2e-16)
    tail = 1 - np.logspace(-16, -1, 50)
    np.testing.assert_allclose([math.erfc(v) for v in np.asarray(ft.nn.erf_inv(tail))], 1 - tail, rtol=1e-14)
    x32 = x[:2001].astype(np.float32)
    y32 = np.asarray(ft.nn.erf_inv(x32))
    assert y32.dtype == np.float32
    np.testing.assert_allclose(y32, ft.nn.erf_inv(x32.astype(np.float64)), rtol=3e-6, atol=1e-7)
    np.testing.assert_array_equal(ft.nn.erf_inv(np.array([1.0, -1.0, 1.5, 0.0])), [np.inf, -np.inf, np.nan, 0.0])
    assert ft.lax.erf_inv is ft.nn.erf_inv
