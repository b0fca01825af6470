"""A JAX user's habits (issue 26): JAX's names for precision, convolution shape helpers, the
deprecated top-level pytree aliases, and what ``ft.<name>`` / ``ft.lax.<name>`` say for JAX names
functrace does not have.  The layers below are written the way ``jax.example_libraries.stax``
writes its Conv / Dense / pooling layers, with ``jax`` spelled ``functrace``."""
import warnings

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as jnp
from functrace import lax, random

glorot_normal, normal = ft.nn.initializers.glorot_normal, ft.nn.initializers.normal  # (stax imports them)

# --------------------------------------------------------------------------- stax-like layers


def GeneralConv(dimension_numbers, out_chan, filter_shape, strides=None, padding="VALID", as_numbers=False):
    """stax.GeneralConv: the kernel shape from the specs, the output shape from
    ``conv_general_shape_tuple``; ``as_numbers`` passes ConvDimensionNumbers instead of strings."""
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    one = (1,) * len(filter_shape)
    strides = strides or one
    W_init = glorot_normal(rhs_spec.index("I"), rhs_spec.index("O"))

    def init_fun(rng, input_shape):
        filter_iter = iter(filter_shape)
        kernel_shape = [out_chan if c == "O" else input_shape[lhs_spec.index("C")] if c == "I" else next(filter_iter)
                        for c in rhs_spec]
        output_shape = lax.conv_general_shape_tuple(input_shape, kernel_shape, strides, padding, dimension_numbers)
        bias_shape = [out_chan if c == "C" else 1 for c in out_spec]
        k1, k2 = random.split(rng)
        return output_shape, (W_init(k1, kernel_shape, np.float64), normal(0.1)(k2, bias_shape, np.float64))

    def apply_fun(params, inputs, **kwargs):
        W, b = params
        dn = lax.conv_dimension_numbers(inputs.shape, W.shape, dimension_numbers) if as_numbers else dimension_numbers
        return lax.conv_general_dilated(inputs, W, strides, padding, one, one, dimension_numbers=dn,
                                        precision=lax.Precision.HIGHEST) + b

    return init_fun, apply_fun


def Dense(out_dim):
    """stax.Dense, with a precision as JAX programs pass it."""
    def init_fun(rng, input_shape):
        k1, k2 = random.split(rng)
        return input_shape[:-1] + (out_dim,), (glorot_normal()(k1, (input_shape[-1], out_dim), np.float64),
                                               normal(0.1)(k2, (out_dim,), np.float64))

    def apply_fun(params, inputs, **kwargs):
        W, b = params
        return jnp.dot(inputs, W, precision=lax.Precision.HIGHEST) + b

    return init_fun, apply_fun


def MaxPool(window_shape, strides, padding="VALID"):
    """stax.MaxPool over NHWC: pads from ``padtype_to_pads``, shape from ``reduce_window_shape_tuple``."""
    window_shape, strides = (1,) + window_shape + (1,), (1,) + strides + (1,)

    def init_fun(rng, input_shape):
        pads = lax.padtype_to_pads(input_shape, window_shape, strides, padding)
        ones = (1,) * len(window_shape)
        return lax.reduce_window_shape_tuple(input_shape, window_shape, strides, pads, ones, ones), ()

    def apply_fun(params, inputs, **kwargs):
        return lax.reduce_window(inputs, -jnp.inf, lax.max, window_shape, strides, padding)

    return init_fun, apply_fun


def elementwise(fun):
    return (lambda rng, input_shape: (input_shape, ())), (lambda params, inputs, **kwargs: fun(inputs))


def Flatten():
    def init_fun(rng, input_shape):
        return (input_shape[0], int(np.prod(input_shape[1:]))), ()

    return init_fun, lambda params, inputs, **kwargs: jnp.reshape(inputs, (inputs.shape[0], -1))


def serial(*layers):
    init_funs, apply_funs = zip(*layers)

    def init_fun(rng, input_shape):
        params = []
        for init in init_funs:
            rng, layer_rng = random.split(rng)
            input_shape, param = init(layer_rng, input_shape)
            params.append(param)
        return input_shape, params

    def apply_fun(params, inputs, **kwargs):
        for fun, param in zip(apply_funs, params):
            inputs = fun(param, inputs, **kwargs)
        return inputs

    return init_fun, apply_fun


# --------------------------------------------------------------------------- the numpy reference


def _np_conv_nhwc(x, w, strides, pads):
    """Cross-correlation of NHWC ``x`` with HWIO ``w``: a sum over the kernel taps."""
    x = np.pad(x, [(0, 0), *pads, (0, 0)])
    kh, kw = w.shape[:2]
    oh = (x.shape[1] - kh) // strides[0] + 1
    ow = (x.shape[2] - kw) // strides[1] + 1
    out = np.zeros((x.shape[0], oh, ow, w.shape[3]))
    for i in range(kh):
        for j in range(kw):
            patch = x[:, i:i + strides[0] * (oh - 1) + 1:strides[0], j:j + strides[1] * (ow - 1) + 1:strides[1]]
            out += patch @ w[i, j]
    return out


def _np_maxpool_nhwc(x, window, strides):
    oh = (x.shape[1] - window[0]) // strides[0] + 1
    ow = (x.shape[2] - window[1]) // strides[1] + 1
    out = np.full((x.shape[0], oh, ow, x.shape[3]), -np.inf)
    for i in range(window[0]):
        for j in range(window[1]):
            out = np.maximum(out, x[:, i:i + strides[0] * (oh - 1) + 1:strides[0],
                                    j:j + strides[1] * (ow - 1) + 1:strides[1]])
    return out


def _np_model(params, x):
    (w1, b1), _, _, (w2, b2), _, _, (w3, b3) = params
    h = np.maximum(_np_conv_nhwc(x, w1, (1, 1), [(1, 1), (1, 1)]) + b1, 0)  # 3x3 SAME
    h = _np_maxpool_nhwc(h, (2, 2), (2, 2))
    h = np.tanh(_np_conv_nhwc(h, w2, (2, 1), [(0, 0), (0, 0)]) + b2)     # 2x2 VALID, strides (2, 1)
    return h.reshape(h.shape[0], -1) @ w3 + b3


def _model(as_numbers=False):
    dn = ("NHWC", "HWIO", "NHWC")
    return serial(GeneralConv(dn, 4, (3, 3), padding="SAME", as_numbers=as_numbers), elementwise(ft.nn.relu),
                  MaxPool((2, 2), (2, 2)),
                  GeneralConv(dn, 5, (2, 2), strides=(2, 1), padding="VALID", as_numbers=as_numbers),
                  elementwise(jnp.tanh), Flatten(), Dense(3))


@pytest.mark.parametrize("as_numbers", [False, True], ids=["spec-strings", "ConvDimensionNumbers"])
def test_a_stax_style_cnn_runs_eagerly_and_under_jit_and_matches_numpy(as_numbers):
    init_fun, apply_fun = _model(as_numbers)
    x = np.random.default_rng(0).normal(size=(2, 8, 7, 3))
    out_shape, params = init_fun(random.PRNGKey(0), x.shape)
    # 8x7 SAME conv -> 8x7, pool 2x2/2 -> 4x3, 2x2 VALID conv strides (2, 1) -> 2x2 with 5 channels
    assert out_shape == (2, 3)
    assert [np.shape(p[0]) for p in params if p] == [(3, 3, 3, 4), (2, 2, 4, 5), (20, 3)]
    want = _np_model(params, x)
    eager = apply_fun(params, x)
    jitted = ft.jit(apply_fun)(params, x)
    assert eager.shape == jitted.shape == out_shape
    np.testing.assert_allclose(eager, want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(jitted), want, rtol=1e-10, atol=1e-12)


def test_a_stax_style_cnn_trains_under_jit_with_grad():
    init_fun, apply_fun = _model()
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(4, 8, 7, 3)), rng.normal(size=(4, 3))
    _, params = init_fun(random.PRNGKey(1), x.shape)

    def loss(params, x, y):
        return jnp.mean((apply_fun(params, x) - y) ** 2)

    @ft.jit
    def step(params, x, y):
        value, grads = ft.value_and_grad(loss)(params, x, y)
        return value, ft.tree.map(lambda p, g: p - 0.05 * g, params, grads)

    first, params = step(params, x, y)
    for _ in range(20):
        last, params = step(params, x, y)
    assert float(last) < 0.9 * float(first)
    ft.test_util.check_grads(lambda p: loss(p, x, y), (params,), order=1, modes=("rev",))


# --------------------------------------------------------------------------- shape helpers

NHWC = ("NHWC", "HWIO", "NHWC")
NCHW = ("NCHW", "OIHW", "NCHW")

# (lhs_shape, rhs_shape, strides, padding, dimension_numbers, hand-computed output shape)
CONV_SHAPES = [
    ((8, 32, 32, 3), (3, 3, 3, 16), (1, 1), "SAME", NHWC, (8, 32, 32, 16)),
    ((8, 32, 32, 3), (5, 5, 3, 16), (2, 2), "VALID", NHWC, (8, 14, 14, 16)),       # (32 - 5) // 2 + 1
    ((2, 3, 10, 7), (4, 3, 3, 2), (2, 1), "SAME", NCHW, (2, 4, 5, 7)),             # ceil(10 / 2), 7
    ((2, 3, 10, 7), (4, 3, 3, 2), (2, 1), [(1, 2), (0, 0)], NCHW, (2, 4, 6, 6)),   # (10+3-3)//2+1, 7-2+1
    ((2, 10, 7, 3), (2, 3, 3, 4), (1, 1), "VALID", ("NHWC", "WHIO", "NHWC"), (2, 8, 6, 4)),  # rhs W before H
    ((1, 9, 2), (4, 2, 6), (3,), "SAME", ("NWC", "WIO", "NWC"), (1, 3, 6)),
]


@pytest.mark.parametrize("lhs,rhs,strides,padding,dn,want", CONV_SHAPES)
def test_conv_general_shape_tuple_gives_hand_computed_shapes_and_the_conv_agrees(lhs, rhs, strides, padding, dn, want):
    got = lax.conv_general_shape_tuple(lhs, rhs, strides, padding, dn)
    assert got == want and all(type(d) is int for d in got)
    out = lax.conv_general_dilated(np.ones(lhs, np.float32), np.ones(rhs, np.float32), strides, padding,
                                   dimension_numbers=dn)
    assert out.shape == want


def test_padtype_to_pads_puts_the_odd_pad_high_for_same_and_low_for_same_lower():
    assert lax.padtype_to_pads((10, 7), (3, 2), (2, 1), "SAME") == [(0, 1), (0, 1)]
    assert lax.padtype_to_pads((10, 7), (3, 2), (2, 1), "SAME_LOWER") == [(1, 0), (1, 0)]
    assert lax.padtype_to_pads((5,), (4,), (1,), "SAME") == [(1, 2)]
    assert lax.padtype_to_pads((5,), (4,), (1,), "same") == [(1, 2)]
    assert lax.padtype_to_pads((10, 7), (3, 2), (2, 1), "VALID") == [(0, 0), (0, 0)]
    assert lax.padtype_to_pads((4,), (7,), (1,), "SAME") == [(3, 3)]          # window wider than the input
    with pytest.raises(RuntimeError, match="FULL"):
        lax.padtype_to_pads((4,), (2,), (1,), "FULL")


def test_reduce_window_shape_tuple_gives_hand_computed_shapes():
    shape, window, strides = (8, 32, 32, 3), (1, 3, 3, 1), (1, 2, 2, 1)
    same = lax.padtype_to_pads(shape, window, strides, "SAME")
    assert lax.reduce_window_shape_tuple(shape, window, strides, same) == (8, 16, 16, 3)
    assert lax.reduce_window_shape_tuple(shape, window, strides, [(0, 0)] * 4) == (8, 15, 15, 3)
    # dilations: 5 elements dilated by 2 are 9 long, a window of 3 dilated by 2 is 5 wide
    assert lax.reduce_window_shape_tuple((5,), (3,), (1,), [(0, 0)], (2,), (2,)) == (5,)
    assert lax.reduce_window_shape_tuple((5,), (3,), (2,), [(1, 0)], None, None) == (2,)
    out = lax.reduce_window(np.ones(shape), 0.0, lax.add, window, strides, "SAME")
    assert out.shape == (8, 16, 16, 3)


def test_conv_dimension_numbers_is_jaxs_named_tuple():
    dn = lax.conv_dimension_numbers((1, 5, 5, 3), (3, 3, 3, 8), NHWC)
    assert isinstance(dn, lax.ConvDimensionNumbers) and isinstance(dn, tuple)
    assert dn == ((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))
    assert dn.lhs_spec == (0, 3, 1, 2) and dn.rhs_spec == (3, 2, 0, 1) and dn.out_spec == (0, 3, 1, 2)
    assert lax.ConvDimensionNumbers._fields == ("lhs_spec", "rhs_spec", "out_spec")
    # spatial axes in the order the rhs spec names them (W before H here)
    assert lax.conv_dimension_numbers((1, 5, 6, 3), (2, 3, 3, 8), ("NHWC", "WHIO", "NHWC")) == \
        ((0, 3, 2, 1), (3, 2, 0, 1), (0, 3, 2, 1))
    assert lax.conv_dimension_numbers((1, 3, 5), (2, 3, 2), None) == ((0, 1, 2),) * 3
    assert lax.conv_dimension_numbers((1,), (1,), dn) is dn
    with pytest.raises(TypeError, match="same rank"):
        lax.conv_dimension_numbers((1, 5, 5, 3), (3, 3, 8), NHWC)
    with pytest.raises(TypeError, match="one letter per axis"):
        lax.conv_dimension_numbers((1, 5, 3), (3, 3, 8), NHWC)


def test_conv_general_dilated_takes_conv_dimension_numbers_like_strings():
    rng = np.random.default_rng(2)
    x, w = rng.normal(size=(2, 6, 5, 3)), rng.normal(size=(3, 2, 3, 4))
    dn = lax.conv_dimension_numbers(x.shape, w.shape, NHWC)
    by_strings = lax.conv_general_dilated(x, w, (2, 1), "SAME", dimension_numbers=NHWC)
    by_numbers = lax.conv_general_dilated(x, w, (2, 1), "SAME", dimension_numbers=dn)
    jitted = ft.jit(lambda x, w: lax.conv_general_dilated(x, w, (2, 1), "SAME", dimension_numbers=dn))(x, w)
    want = _np_conv_nhwc(x, w, (2, 1), [(0, 1), (0, 1)])  # SAME: (3 - 1) * 2 + 3 - 6 = 1 pad, then 4 + 2 - 5
    np.testing.assert_allclose(by_strings, want, rtol=1e-12)
    np.testing.assert_allclose(by_numbers, want, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(jitted), want, rtol=1e-12)


@pytest.mark.parametrize("padding,want_hw", [("SAME", (10, 10)), ("VALID", (11, 11))])
def test_conv_transpose_shape_and_values_are_the_gradient_of_the_forward_conv(padding, want_hw):
    rng = np.random.default_rng(3)
    y, w = rng.normal(size=(2, 5, 5, 8)), rng.normal(size=(3, 3, 4, 8))   # forward conv: 4 -> 8 channels
    want_shape = (2, *want_hw, 4)
    assert lax.conv_transpose_shape_tuple((2, 5, 5, 8), (3, 3, 8, 4), (2, 2), padding, NHWC) == want_shape
    out = lax.conv_transpose(y, w, (2, 2), padding, dimension_numbers=NHWC, transpose_kernel=True)
    assert out.shape == want_shape
    x = np.zeros(want_shape)
    _, vjp = ft.vjp(lambda x: lax.conv_general_dilated(x, w, (2, 2), padding, dimension_numbers=NHWC), x)
    np.testing.assert_allclose(out, vjp(y)[0], rtol=1e-10, atol=1e-12)


def _jax():
    return pytest.importorskip("jax", reason="JAX is not installed: the shape helpers are checked against "
                                             "hand-computed shapes only")


@pytest.mark.parametrize("lhs,rhs,strides,padding,dn,want", CONV_SHAPES)
def test_shape_helpers_match_jax_live(lhs, rhs, strides, padding, dn, want):
    jlax = _jax().lax
    assert lax.conv_general_shape_tuple(lhs, rhs, strides, padding, dn) == \
        tuple(int(d) for d in jlax.conv_general_shape_tuple(lhs, rhs, strides, padding, dn))
    assert lax.conv_dimension_numbers(lhs, rhs, dn) == jlax.conv_dimension_numbers(lhs, rhs, dn)
    spatial = [lhs[dn[0].index(c)] for c in dn[1] if c not in "OI"]
    window = [rhs[dn[1].index(c)] for c in dn[1] if c not in "OI"]
    for mode in ("SAME", "SAME_LOWER", "VALID"):
        assert lax.padtype_to_pads(spatial, window, strides, mode) == \
            [tuple(int(v) for v in p) for p in jlax.padtype_to_pads(spatial, window, strides, mode)]
    pads = [(1, 0)] * len(lhs)
    assert lax.reduce_window_shape_tuple(lhs, rhs, (1,) * len(lhs), pads, (2,) * len(lhs)) == tuple(
        int(d) for d in jlax.reduce_window_shape_tuple(lhs, rhs, (1,) * len(lhs), pads, (2,) * len(lhs)))
    if padding in ("SAME", "VALID"):
        t_rhs = [rhs[i] for i in np.argsort([dn[1].index(c) for c in dn[1]])]  # any kernel of that rank
        assert lax.conv_transpose_shape_tuple(lhs, t_rhs, strides, padding, dn) == tuple(
            int(d) for d in jlax.conv_transpose_shape_tuple(lhs, t_rhs, strides, padding, dn))


@pytest.mark.parametrize("padding", ["SAME", "VALID", [(1, 2), (0, 1)]], ids=repr)
@pytest.mark.parametrize("transpose_kernel", [False, True])
def test_conv_transpose_matches_jax_live(padding, transpose_kernel):
    jax = _jax()
    rng = np.random.default_rng(7)
    x, w = rng.normal(size=(2, 5, 4, 3)).astype(np.float32), rng.normal(size=(3, 2, 3, 3)).astype(np.float32)
    for dn in (NHWC, ("NHWC", "WHIO", "NHWC")):
        got = lax.conv_transpose(x, w, (2, 3), padding, dimension_numbers=dn, transpose_kernel=transpose_kernel)
        want = jax.lax.conv_transpose(x, w, (2, 3), padding, dimension_numbers=dn, transpose_kernel=transpose_kernel,
                                      precision=jax.lax.Precision.HIGHEST)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-5, atol=1e-5)


def test_precision_names_match_jax_live():
    jlax = _jax().lax
    for name in ("default", "fastest", "bfloat16", "high", "bfloat16_3x", "tensorfloat32", "highest", "float32"):
        assert lax.Precision(name).name == jlax.Precision(name).name
    assert [p.name for p in lax.Precision] == [p.name for p in jlax.Precision]


# --------------------------------------------------------------------------- precision


def test_precision_is_jaxs_enum_and_takes_jaxs_names():
    P = lax.Precision
    assert [p.name for p in P] == ["DEFAULT", "HIGH", "HIGHEST"]
    assert P("highest") is P.HIGHEST and P("float32") is P.HIGHEST
    assert P("high") is P.HIGH and P("tensorfloat32") is P.HIGH and P("bfloat16_3x") is P.HIGH
    assert P("default") is P.DEFAULT and P("bfloat16") is P.DEFAULT and P("fastest") is P.DEFAULT
    assert P(2) is P.HIGHEST and P["HIGH"] is P.HIGH
    assert repr(P.HIGHEST) == "Precision.HIGHEST" and str(P.HIGH) == "HIGH"
    with pytest.raises(ValueError):
        P("fast")


PRECISIONS = [None, lax.Precision.HIGHEST, "highest", "float32", "tensorfloat32", "bfloat16", "default",
              (lax.Precision.HIGH, "highest")]


@pytest.mark.parametrize("precision", PRECISIONS, ids=repr)
def test_every_product_takes_precision_and_computes_the_same(precision):
    rng = np.random.default_rng(4)
    a, b, v = rng.normal(size=(3, 4)), rng.normal(size=(4, 5)), rng.normal(size=4)
    x, w = rng.normal(size=(1, 2, 6, 6)), rng.normal(size=(3, 2, 3, 3))
    calls = {
        "dot": (lambda a, b: jnp.dot(a, b, precision=precision), a @ b),
        "matmul": (lambda a, b: jnp.matmul(a, b, precision=precision), a @ b),
        "linalg.matmul": (lambda a, b: jnp.linalg.matmul(a, b, precision=precision), a @ b),
        "einsum": (lambda a, b: jnp.einsum("ij,jk->ik", a, b, precision=precision), a @ b),
        "tensordot": (lambda a, b: jnp.tensordot(a, b, 1, precision=precision), a @ b),
        "inner": (lambda a, b: jnp.inner(a, b.T, precision=precision), a @ b),
        "vdot": (lambda a, b: jnp.vdot(a[0], b[:, 0], precision=precision), a[0] @ b[:, 0]),
        "lax.dot": (lambda a, b: lax.dot(a, b, precision=precision), a @ b),
        "lax.dot_general": (lambda a, b: lax.dot_general(a, b, (((1,), (0,)), ((), ())), precision=precision), a @ b),
        "lax.dot (vector)": (lambda a, b: lax.dot(a, v, precision), a @ v),
    }
    for name, (f, want) in calls.items():
        np.testing.assert_allclose(f(a, b), want, rtol=1e-12, err_msg=name)
        np.testing.assert_allclose(np.asarray(ft.jit(f)(a, b)), want, rtol=1e-12, err_msg=name)
    conv_want = lax.conv_general_dilated(x, w, (1, 1), "SAME")
    for f in (lambda: lax.conv_general_dilated(x, w, (1, 1), "SAME", precision=precision),
              lambda: lax.conv(x, w, (1, 1), "SAME", precision=precision),
              lambda: lax.conv_with_general_padding(x, w, (1, 1), [(1, 1), (1, 1)], None, None, precision=precision)):
        np.testing.assert_allclose(f(), conv_want, rtol=1e-12)


@pytest.mark.parametrize("call", [
    lambda a, p: jnp.dot(a, a, precision=p), lambda a, p: jnp.matmul(a, a, precision=p),
    lambda a, p: jnp.einsum("ij,jk", a, a, precision=p), lambda a, p: jnp.tensordot(a, a, precision=p),
    lambda a, p: jnp.inner(a, a, precision=p), lambda a, p: lax.dot(a, a, precision=p),
    lambda a, p: lax.dot_general(a, a, (((1,), (0,)), ((), ())), precision=p),
    lambda a, p: lax.conv_general_dilated(a[None, None], a[None, None], (1, 1), "SAME", precision=p),
])
def test_a_wrong_precision_is_an_error(call):
    a = np.ones((2, 2))
    with pytest.raises(ValueError, match="unknown precision 'fast'"):
        call(a, "fast")
    with pytest.raises(TypeError, match="precision must be"):
        call(a, 3)
    with pytest.raises(TypeError, match="two entries"):
        call(a, ("highest",) * 3)


def test_preferred_element_type_accumulates_in_a_wider_dtype_and_casts_to_a_narrower_one():
    a = np.full((2, 3), 100, np.int8)
    for f in (lambda a, t: jnp.dot(a, a.T, preferred_element_type=t),
              lambda a, t: jnp.matmul(a, a.T, preferred_element_type=t),
              lambda a, t: jnp.einsum("ij,kj->ik", a, a, preferred_element_type=t),
              lambda a, t: jnp.inner(a, a, preferred_element_type=t),
              lambda a, t: lax.dot_general(a, a, (((1,), (1,)), ((), ())), preferred_element_type=t)):
        out = f(a, np.int32)  # int8 products would overflow: 3 * 100 * 100
        assert out.dtype == np.int32 and (np.asarray(out) == 30000).all()
        jitted = ft.jit(lambda a: f(a, np.int32))(a)
        assert jitted.dtype == np.int32 and (np.asarray(jitted) == 30000).all()
        out = f(a, np.float32)                              # integers to floats: exact, as in JAX
        assert out.dtype == np.float32 and (np.asarray(out) == 30000).all()
        assert f(a, np.int8).dtype == np.int8               # the operands' own dtype: nothing changes
    x = np.random.default_rng(5).normal(size=(3, 3))
    x32 = x.astype(np.float32)
    wide = jnp.dot(x32, x32, preferred_element_type=np.float64)
    assert wide.dtype == np.float64
    np.testing.assert_allclose(wide, x32.astype(np.float64) @ x32.astype(np.float64), rtol=1e-15)
    narrow = jnp.tensordot(x, x, 1, preferred_element_type=np.float32)  # computed in float64, then cast
    assert narrow.dtype == np.float32 and np.array_equal(narrow, (x @ x).astype(np.float32))
    ints = jnp.matmul(3 * x, x, preferred_element_type=np.int32)
    assert ints.dtype == np.int32 and np.array_equal(ints, (3 * x @ x).astype(np.int32))
    conv = lax.conv(x32[None, None], x32[None, None], (1, 1), "SAME", preferred_element_type=np.float64)
    assert conv.dtype == np.float64
    np.testing.assert_allclose(conv, lax.conv(x32[None, None].astype(np.float64), x32[None, None].astype(np.float64),
                                              (1, 1), "SAME"), rtol=1e-15)
    assert lax.conv(x[None, None], x[None, None], (1, 1), "SAME", preferred_element_type=np.float32).dtype == np.float32
    with pytest.raises(TypeError, match="preferred_element_type must be a numeric dtype"):
        jnp.dot(x, x, preferred_element_type=str)


def test_lax_dot_and_dot_general_follow_jax():
    rng = np.random.default_rng(6)
    x, y = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 5, 4))
    out = lax.dot_general(x, y, (((2,), (2,)), ((0,), (0,))))
    np.testing.assert_allclose(out, np.einsum("bik,bjk->bij", x, y), rtol=1e-12)
    np.testing.assert_allclose(lax.dot(x[0], y[0].T), x[0] @ y[0].T, rtol=1e-12)
    with pytest.raises(TypeError, match="incompatible shapes"):
        lax.dot(x, y)
    with pytest.raises(TypeError, match="differ in size"):
        lax.dot_general(x, y, (((1,), (1,)), ((), ())))
    with pytest.raises(TypeError, match="distinct axes"):
        lax.dot_general(x, y, (((3,), (2,)), ((), ())))


# --------------------------------------------------------------------------- names on functrace itself


@pytest.mark.parametrize("alias,short", [("tree_map", "map"), ("tree_flatten", "flatten"),
                                         ("tree_unflatten", "unflatten"), ("tree_leaves", "leaves"),
                                         ("tree_structure", "structure"), ("tree_transpose", "transpose")])
def test_jaxs_deprecated_tree_aliases_work_and_warn(alias, short):
    with pytest.warns(DeprecationWarning, match=rf"ft\.tree\.{short}\b.*ft\.tree_util\.{alias}\b"):
        fun = getattr(ft, alias)
    assert fun is getattr(ft.tree, short)
    tree = {"a": [1.0, 2.0], "b": (3.0,)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        leaves, treedef = ft.tree_flatten(tree)
        assert ft.tree_map(lambda x: 2 * x, tree) == {"a": [2.0, 4.0], "b": (6.0,)}
        assert ft.tree_unflatten(treedef, leaves) == tree and ft.tree_leaves(tree) == leaves
        assert ft.tree_structure(tree) == treedef


@pytest.mark.parametrize("name,says", [
    ("pmap", r"use ft\.vmap\(\.\.\., axis_name=\.\.\.\) and, across processes, the 'processes' axis name with mpiexec"),
    ("xla_computation", r"ft\.make_jaxpr"),
    ("named_call", "call the function itself"),
    ("local_device_count", r"ft\.devices\(\)"),
    ("process_index", r"ft\.distributed\.process_index\(\)"),
    ("process_count", r"ft\.distributed\.process_count\(\)"),
    ("pjit", "no sharding"),
    ("default_matmul_precision", r"ft\.lax\.Precision"),
])
def test_jax_names_functrace_lacks_say_what_to_use(name, says):
    with pytest.raises(AttributeError, match=f"functrace has no {name}\\b.*: .*{says}"):
        getattr(ft, name)
    assert not hasattr(ft, name)


def test_an_unknown_name_is_a_plain_attribute_error():
    with pytest.raises(AttributeError, match=r"^module 'functrace' has no attribute 'no_such_thing'$"):
        ft.no_such_thing
    assert not hasattr(ft, "no_such_thing")
    with pytest.raises(AttributeError, match=r"^module 'functrace\.lax' has no attribute 'no_such_thing'$"):
        ft.lax.no_such_thing


def test_missing_lax_names_point_at_functrace_numpy():
    with pytest.raises(AttributeError, match=r"'functrace\.lax' has no attribute 'exp': use fnp\.exp"):
        ft.lax.exp
    with pytest.raises(AttributeError, match=r"'mul': use fnp\.multiply"):
        ft.lax.mul
    with pytest.raises(AttributeError, match=r"'ragged_dot': functrace does not provide it"):
        ft.lax.ragged_dot
    assert not hasattr(ft.lax, "convert_element_type")
    assert ft.lax.max is jnp.maximum and ft.lax.add is jnp.add   # (the names reduce_window takes)


def test_device_get_returns_numpy_arrays_and_leaves_the_rest():
    out = ft.jit(lambda x: {"y": 2 * x, "n": x.shape[0]})(np.arange(3.0))
    got = ft.device_get({"out": out, "scale": 0.5, "host": np.ones(2), "name": "run"})
    assert type(got["out"]["y"]) is np.ndarray and np.array_equal(got["out"]["y"], [0.0, 2.0, 4.0])
    assert got["scale"] == 0.5 and type(got["scale"]) is float and got["name"] == "run"
    assert type(got["host"]) is np.ndarray
    eager = ft.device_get(jnp.arange(3) + 1)
    assert type(eager) is np.ndarray and eager.tolist() == [1, 2, 3]
    # under a transformation, traced values pass through (as jax.device_get leaves tracers)
    np.testing.assert_allclose(ft.grad(lambda x: jnp.sum(ft.device_get(x) ** 2))(np.ones(2)), [2.0, 2.0])
