"""ft.nn: values against plain numpy, derivatives (order 2, both modes), batching and jit."""
import math

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.test_util import check_grads

RNG = np.random.default_rng(0)


def normal(*shape):
    return RNG.standard_normal(shape)


def np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def np_attention(q, k, v, mask=None, causal=False, scale=None):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = np.einsum("...tnh,...snh->...nts", q, k) * scale
    T, S = q.shape[-3], k.shape[-3]
    keep = np.ones((T, S), bool) if not causal else np.tril(np.ones((T, S), bool))
    if mask is not None:
        keep = keep & mask
    s = np.where(keep, s, -np.inf)
    return np.einsum("...nts,...snh->...tnh", np_softmax(s), v)


def test_activations_match_numpy():
    x = normal(4, 5)
    np.testing.assert_allclose(ft.nn.relu(x), np.maximum(x, 0))
    np.testing.assert_allclose(ft.nn.silu(x), x / (1 + np.exp(-x)))
    g, u = normal(3), normal(3)
    np.testing.assert_allclose(ft.nn.swiglu(g, u), g / (1 + np.exp(-g)) * u)
    c = math.sqrt(2 / math.pi)
    np.testing.assert_allclose(ft.nn.gelu(x), 0.5 * x * (1 + np.tanh(c * (x + 0.044715 * x ** 3))))
    exact = 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    np.testing.assert_allclose(ft.nn.gelu(x, approximate=False), exact)
    assert ft.grad(lambda x: ft.nn.relu(x))(0.0) == 0.0
    special = np.array([np.nan, np.inf, -np.inf, -1.0, 0.0])
    np.testing.assert_array_equal(ft.nn.relu(special), np.maximum(special, 0))  # NaN stays NaN


def test_softmax_family_on_empty_axes():
    """As numpy/JAX: softmax of an empty axis is empty, logsumexp of nothing is -inf."""
    with np.errstate(divide="ignore"):
        for run in (lambda f, *a: f(*a), lambda f, *a: ft.jit(f)(*a)):
            assert np.asarray(run(ft.nn.softmax, np.zeros((3, 0)))).shape == (3, 0)
            assert np.asarray(run(lambda x: ft.nn.log_softmax(x, axis=0), np.zeros((0, 3)))).shape == (0, 3)
            assert float(np.asarray(run(ft.nn.logsumexp, np.zeros(0)))) == -np.inf
            np.testing.assert_array_equal(np.asarray(run(lambda x: ft.nn.logsumexp(x, axis=1), np.zeros((2, 0)))),
                                          [-np.inf, -np.inf])


def test_softmax_family():
    x = normal(3, 6) * 10
    np.testing.assert_allclose(ft.nn.softmax(x), np_softmax(x))
    np.testing.assert_allclose(ft.nn.softmax(x, axis=0), np_softmax(x, axis=0))
    np.testing.assert_allclose(ft.nn.log_softmax(x), np.log(np_softmax(x)), atol=1e-12)
    lse = np.log(np.exp(x - x.max()).sum()) + x.max()
    np.testing.assert_allclose(ft.nn.logsumexp(x), lse)
    np.testing.assert_allclose(ft.nn.logsumexp(x, axis=1, keepdims=True), np.log(np.exp(x).sum(1, keepdims=True)))
    big = np.array([1000.0, 1000.0])
    np.testing.assert_allclose(ft.nn.logsumexp(big), 1000 + np.log(2))
    with np.errstate(divide="ignore"):
        assert ft.nn.logsumexp(np.array([-np.inf, -np.inf])) == -np.inf
    np.testing.assert_allclose(ft.grad(ft.nn.logsumexp)(big), [0.5, 0.5])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_int_and_prob_labels(reduction):
    logits, labels = normal(5, 4), np.array([0, 3, 1, 1, 2])
    want = -np.log(np_softmax(logits))[np.arange(5), labels]
    red = {"mean": np.mean, "sum": np.sum, "none": lambda a: a}[reduction]
    np.testing.assert_allclose(ft.nn.cross_entropy(logits, labels, reduction), red(want))
    onehot = np.eye(4)[labels]
    np.testing.assert_allclose(ft.nn.cross_entropy(logits, onehot, reduction), red(want))
    g = ft.grad(lambda l: fnp.sum(ft.nn.cross_entropy(l, labels, reduction)))(logits)
    scale = 1 / 5 if reduction == "mean" else 1
    np.testing.assert_allclose(g, (np_softmax(logits) - onehot) * scale, atol=1e-12)
    with pytest.raises(ft.ShapeError, match="labels"):
        ft.nn.cross_entropy(logits, labels[:3])
    with pytest.raises(ValueError, match="reduction"):
        ft.nn.cross_entropy(logits, labels, "avg")


def test_norms():
    x, w, b = normal(3, 7), normal(7), normal(7)
    rms = x / np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(ft.nn.rms_norm(x, w), rms)
    ln = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(ft.nn.layer_norm(x, w, b), ln)
    normalized = (ln - b) / w
    np.testing.assert_allclose(ft.nn.layer_norm(x, None, b), normalized + b)  # None: no scale / no shift
    np.testing.assert_allclose(ft.nn.layer_norm(x, w, None), ln - b)
    np.testing.assert_allclose(ft.nn.layer_norm(x, None, None), normalized)
    with pytest.raises(ft.ShapeError, match="weight"):
        ft.nn.rms_norm(x, np.ones(6))
    assert ft.nn.rms_norm(x.astype(np.float32), w.astype(np.float32)).dtype == np.float32


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [((2, 5, 3, 4), (2, 5, 3, 4)), ((3, 2, 4), (6, 2, 4)), ((2, 1, 7, 1, 2), (2, 1, 7, 1, 2))])
def test_attention_matches_naive(shape, causal):
    (qs, ks) = shape
    q, k, v = normal(*qs), normal(*ks), normal(*ks)
    np.testing.assert_allclose(ft.nn.attention(q, k, v, causal=causal), np_attention(q, k, v, causal=causal),
                               atol=1e-12)
    mask = RNG.random((qs[-2], qs[-3], ks[-3])) > 0.3
    mask[..., 0] = True
    np.testing.assert_allclose(ft.nn.attention(q, k, v, mask=mask, scale=0.3),
                               np_attention(q, k, v, mask=mask, scale=0.3), atol=1e-12)


@pytest.mark.parametrize("T,S", [(4, 6), (6, 4), (5, 5)])
def test_causal_attention_matches_jax_when_installed(T, S):
    """Optional comparison (JAX is not a dependency): causal masking aligned as
    ``jax.nn.dot_product_attention(is_causal=True)``, also when T != S."""
    jax = pytest.importorskip("jax")
    q, k, v = normal(2, T, 3, 8), normal(2, S, 3, 8), normal(2, S, 3, 8)
    want = jax.nn.dot_product_attention(*(np.float32(a) for a in (q, k, v)), is_causal=True)
    got = ft.nn.attention(*(np.float32(a) for a in (q, k, v)), causal=True)
    np.testing.assert_allclose(got, np.asarray(want), atol=1e-5)


def test_attention_bad_shapes():
    with pytest.raises(ft.ShapeError, match="attention"):
        ft.nn.attention(normal(2, 3, 4), normal(2, 3, 5), normal(2, 3, 5))


def test_embedding_and_its_scatter_add_gradient():
    table, ids = normal(6, 3), np.array([[1, 4], [1, 0]])
    np.testing.assert_allclose(ft.nn.embedding(table, ids), table[ids])
    g = ft.grad(lambda t: fnp.sum(ft.nn.embedding(t, ids) * 2.0))(table)
    want = np.zeros_like(table)
    np.add.at(want, ids, 2.0)
    np.testing.assert_allclose(g, want)
    assert "scatter_add" in str(ft.make_jaxpr(ft.grad(lambda t: fnp.sum(ft.nn.embedding(t, ids) ** 2)))(table))


@pytest.mark.parametrize("stride,padding", [(1, 0), (2, 1), ((1, 2), (2, 0))])
def test_conv2d_matches_loops(stride, padding):
    x, w = normal(2, 3, 6, 5), normal(4, 3, 3, 2)
    sh, sw = (stride, stride) if isinstance(stride, int) else stride
    ph, pw = (padding, padding) if isinstance(padding, int) else padding
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh, ow = (xp.shape[2] - 3) // sh + 1, (xp.shape[3] - 2) // sw + 1
    want = np.zeros((2, 4, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, i * sh:i * sh + 3, j * sw:j * sw + 2]
            want[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w)
    np.testing.assert_allclose(ft.nn.conv2d(x, w, stride, padding), want, atol=1e-12)


GRAD_CASES = [
    ("relu", lambda x: ft.nn.relu(x), (np.array([-1.0, 0.5, 2.0]),)),
    ("silu", ft.nn.silu, (normal(4),)),
    ("swiglu", ft.nn.swiglu, (normal(4), normal(4))),
    ("gelu-tanh", ft.nn.gelu, (normal(4),)),
    ("gelu-erf", lambda x: ft.nn.gelu(x, approximate=False), (normal(4),)),
    ("softmax", lambda x: ft.nn.softmax(x, axis=0), (normal(3, 2),)),
    ("log_softmax", ft.nn.log_softmax, (normal(2, 5),)),
    ("softmax-last-axis", lambda x: ft.nn.softmax(x) * x, (normal(2, 3, 4),)),
    ("log_softmax-axis0", lambda x: ft.nn.log_softmax(x, axis=0), (normal(3, 2),)),
    ("logsumexp", lambda x: ft.nn.logsumexp(x, axis=-1), (normal(3, 4),)),
    ("cross_entropy-int", lambda x: ft.nn.cross_entropy(x, np.array([2, 0, 1])), (normal(3, 4),)),
    ("cross_entropy-prob", lambda x, p: ft.nn.cross_entropy(x, ft.nn.softmax(p)), (normal(3, 4), normal(3, 4))),
    ("layer_norm", ft.nn.layer_norm, (normal(2, 5), normal(5), normal(5))),
    ("rms_norm", ft.nn.rms_norm, (normal(3, 5), normal(5))),
    ("rms_norm-4d", ft.nn.rms_norm, (normal(2, 1, 2, 3), normal(3))),
    ("attention", lambda q, k, v: ft.nn.attention(q, k, v), (normal(2, 3, 2, 2), normal(2, 4, 2, 2), normal(2, 4, 2, 2))),
    ("attention-causal", lambda q, k, v: ft.nn.attention(q, k, v, causal=True),
     (normal(3, 2, 2), normal(3, 2, 2), normal(3, 2, 2))),
    # a fully masked query row averages v over every key: its dV was left out (P taken as 0 there)
    ("attention-fully-masked-row", lambda q, k, v: ft.nn.attention(q, k, v, mask=np.array([[1, 1, 0, 1], [0, 0, 0, 0],
                                                                                          [1, 0, 1, 1]], bool)),
     (normal(3, 2, 2), normal(4, 2, 2), normal(4, 2, 2))),
    ("embedding", lambda t: ft.nn.embedding(t, np.array([0, 2, 2])), (normal(3, 2),)),
    ("conv2d", lambda x, w: ft.nn.conv2d(x, w, stride=2, padding=1), (normal(1, 2, 4, 4), normal(2, 2, 3, 3))),
]


@pytest.mark.parametrize("name,f,args", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_check_grads_order2(name, f, args):
    check_grads(f, args, order=2, modes=("fwd", "rev"))


def test_fused_primitives_appear_once_in_the_ir():
    q = normal(2, 3, 2, 2)
    fwd = ft.make_jaxpr(lambda q: ft.nn.attention(q, q, q, causal=True))(q)
    assert [e.primitive.name for e in fwd.eqns].count("attention") == 1
    bwd = ft.make_jaxpr(ft.grad(lambda q: fnp.sum(ft.nn.attention(q, q, q))))(q)
    assert "attention_bwd" in [e.primitive.name for e in bwd.eqns]
    x, w = normal(3, 4), normal(4)
    names = [e.primitive.name for e in ft.make_jaxpr(ft.grad(lambda x: fnp.sum(ft.nn.rms_norm(x, w))))(x).eqns]
    assert "rms_norm_bwd" in names


def test_hessian_through_fused_ops():
    w = normal(4)
    f = lambda x: fnp.sum(ft.nn.rms_norm(x, w) ** 3)
    x = normal(4)
    H = ft.hessian(f)(x)
    num = np.stack([(ft.grad(f)(x + e * 1e-6) - ft.grad(f)(x - e * 1e-6)) / 2e-6 for e in np.eye(4)])
    np.testing.assert_allclose(H, num, rtol=1e-5, atol=1e-6)


def test_vmap_and_jit_of_fused_ops():
    q, k, v = normal(5, 3, 2, 2), normal(5, 4, 2, 2), normal(5, 4, 2, 2)
    batched = ft.vmap(lambda q, k, v: ft.nn.attention(q, k, v, causal=True))(q, k, v)
    np.testing.assert_allclose(batched, np_attention(q, k, v, causal=True), atol=1e-12)
    unbatched_kv = ft.vmap(lambda q: ft.nn.attention(q, k[0], v[0]), in_axes=0)(q)
    np.testing.assert_allclose(unbatched_kv, [np_attention(qi, k[0], v[0]) for qi in q], atol=1e-12)
    x, w = normal(5, 3), normal(5, 3)
    per_w = ft.vmap(ft.nn.rms_norm)(x, w)  # batched weight: falls back to the reference
    np.testing.assert_allclose(per_w, [ft.nn.rms_norm(a, b) for a, b in zip(x, w)])
    g = ft.jit(ft.grad(lambda x: fnp.sum(ft.nn.rms_norm(x, w[0]) ** 2)))(x)
    np.testing.assert_allclose(g, ft.grad(lambda x: fnp.sum(ft.nn.rms_norm(x, w[0]) ** 2))(x))
    per_example = ft.vmap(ft.grad(lambda x: fnp.sum(ft.nn.rms_norm(x, w[0]) ** 2)))(x)
    np.testing.assert_allclose(per_example, g)


def test_float32_preserved():
    x = normal(2, 3, 2, 2).astype(np.float32)
    assert ft.nn.attention(x, x, x).dtype == np.float32
    assert ft.grad(lambda x: fnp.sum(ft.nn.attention(x, x, x)))(x).dtype == np.float32
    assert ft.nn.softmax(x).dtype == np.float32 and ft.nn.gelu(x).dtype == np.float32


@pytest.mark.parametrize("shape", [(3, 0), (0, 4), (2, 0, 0)])
def test_rms_norm_grad_with_empty_axes(shape):
    """grad through rms_norm with an empty last axis raised numpy's reshape error from inside the
    fused backward; now empty gradients, as in JAX, eager and jitted, with no warnings."""
    import warnings
    x, w = np.ones(shape, np.float32), np.ones(shape[-1:], np.float32)
    g = ft.grad(lambda x, w: fnp.sum(ft.nn.rms_norm(x, w)), argnums=(0, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "Mean of empty slice" included
        for run in (g, ft.jit(g, backend="numpy"), ft.jit(g)):
            dx, dw = run(x, w)
            assert np.shape(dx) == shape and np.shape(dw) == shape[-1:]
            assert np.asarray(dx).dtype == np.float32 and not np.asarray(dw).any()


def test_erf_and_exact_gelu_of_scalars():
    """numpy's frompyfunc returns a Python float for a 0-d array: erf of a scalar raised
    AttributeError ('float' object has no attribute 'astype'; the fuzzer's reference hit it 28
    times in 5,000 programs)."""
    import math
    for x in (np.float64(0.5), np.array(0.5), np.float32(-1.25)):
        got = ft.nn.erf(x)
        assert np.asarray(got).shape == () and np.asarray(got).dtype == np.asarray(x).dtype
        np.testing.assert_allclose(got, math.erf(float(x)), rtol=1e-6)
    np.testing.assert_allclose(ft.nn.gelu(np.float32(0.3), approximate=False), 0.3 * 0.5 * (1 + math.erf(0.3 / math.sqrt(2))),
                               rtol=1e-6)
    np.testing.assert_allclose(ft.grad(ft.nn.erf)(0.5), 2 / math.sqrt(math.pi) * math.exp(-0.25), rtol=1e-12)
