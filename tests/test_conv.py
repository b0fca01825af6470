"""ft.lax.conv_general_dilated against JAX (stored values in tests/data/conv_jax.npz, and live where
JAX is importable): 1-D/2-D/3-D, strides, padding strings and pairs, dilations, feature and batch
groups, dimension numbers; derivatives (check_grads order 2), vmap vs a loop, jit on both
backends (OpenCL with no host step), ft.nn.conv2d on top of it, and errors."""
import pathlib

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.test_util import check_grads

DATA = pathlib.Path(__file__).parent / "data" / "conv_jax.npz"

# (name, lhs shape, rhs shape, keyword arguments of conv_general_dilated)
CASES = [
    ("1d-stride2-same", (2, 3, 9), (4, 3, 3), dict(window_strides=(2,), padding="SAME")),
    ("1d-valid-rhs_dilation", (2, 3, 11), (2, 3, 3), dict(window_strides=(1,), padding="VALID", rhs_dilation=(3,))),
    ("2d-same_lower-strides", (2, 3, 9, 8), (4, 3, 3, 2), dict(window_strides=(2, 3), padding="SAME_LOWER")),
    ("2d-pairs-negative", (2, 3, 7, 8), (4, 3, 3, 3), dict(window_strides=(1, 1), padding=((2, 1), (-1, 2)))),
    ("2d-lhs_and_rhs_dilation", (2, 3, 6, 5), (4, 3, 3, 2),
     dict(window_strides=(2, 1), padding=((2, 0), (1, 1)), lhs_dilation=(2, 1), rhs_dilation=(1, 2))),
    ("2d-depthwise", (2, 4, 7, 6), (8, 1, 3, 3), dict(window_strides=(1, 1), padding="SAME", feature_group_count=4)),
    ("2d-feature_groups", (2, 4, 7, 8), (6, 2, 3, 3),
     dict(window_strides=(1, 2), padding=((1, 2), (0, 1)), feature_group_count=2)),
    ("2d-batch_groups", (4, 3, 7, 8), (6, 3, 3, 3),
     dict(window_strides=(1, 2), padding=((1, 2), (0, 1)), batch_group_count=2)),
    ("2d-nhwc-hwio", (2, 7, 6, 3), (3, 2, 3, 5),
     dict(window_strides=(1, 1), padding="SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))),
    ("2d-nchw-hwio-nhwc", (2, 3, 7, 6), (3, 2, 3, 4),
     dict(window_strides=(2, 1), padding="VALID", dimension_numbers=("NCHW", "HWIO", "NHWC"))),
    ("2d-spatial_order_from_rhs", (2, 3, 7, 6), (4, 3, 2, 3),
     dict(window_strides=(2, 1), padding="SAME", dimension_numbers=("NCWH", "OIHW", "NCWH"))),
    ("3d-same-rhs_dilation", (1, 2, 5, 6, 4), (3, 2, 2, 3, 2),
     dict(window_strides=(1, 2, 1), padding="SAME", rhs_dilation=(2, 1, 1))),
    ("3d-ndhwc", (1, 5, 4, 6, 2), (2, 3, 2, 2, 4),
     dict(window_strides=(2, 1, 1), padding="VALID", dimension_numbers=("NDHWC", "DHWIO", "NDHWC"))),
]
IDS = [c[0] for c in CASES]


def _inputs(index: int, lhs_shape, rhs_shape):
    rng = np.random.default_rng(100 + index)
    return rng.standard_normal(lhs_shape), rng.standard_normal(rhs_shape)


def _store_jax_values():
    """Write tests/data/conv_jax.npz (run by hand where JAX is installed, from tests/ with
    PYTHONPATH=..: ``python -c "import test_conv as t; t._store_jax_values()"``)."""
    import jax
    with jax.enable_x64(True):  # (restored after: other tests compare float32)
        out = {}
        for i, (name, ls, rs, kwargs) in enumerate(CASES):
            x, w = _inputs(i, ls, rs)
            y, vjp = jax.vjp(lambda x, w, kwargs=kwargs: jax.lax.conv_general_dilated(x, w, **kwargs), x, w)
            cot = np.random.default_rng(7).standard_normal(y.shape)
            dx, dw = vjp(cot)
            out.update({f"{name}:out": np.asarray(y), f"{name}:dx": np.asarray(dx), f"{name}:dw": np.asarray(dw)})
    np.savez_compressed(DATA, **out)


def _ours(x, w, kwargs):
    y, vjp = ft.vjp(lambda x, w: ft.lax.conv_general_dilated(x, w, **kwargs), x, w)
    cot = np.random.default_rng(7).standard_normal(np.shape(y))
    return (np.asarray(y), *map(np.asarray, vjp(cot)))


@pytest.mark.parametrize("index", range(len(CASES)), ids=IDS)
def test_matches_stored_jax_values(index):
    name, ls, rs, kwargs = CASES[index]
    stored = np.load(DATA)
    got = _ours(*_inputs(index, ls, rs), kwargs)
    for part, g in zip(("out", "dx", "dw"), got):
        np.testing.assert_allclose(g, stored[f"{name}:{part}"], rtol=1e-12, atol=1e-12, err_msg=part)


def test_matches_jax_where_importable():
    jax = pytest.importorskip("jax", reason="optional live comparison with JAX")
    with jax.enable_x64(True):  # (restored after: other tests compare float32; a few cases: JAX compiles each; the stored values cover them all)
        for i, (name, ls, rs, kwargs) in enumerate(CASES):
            if name not in ("1d-stride2-same", "2d-lhs_and_rhs_dilation", "2d-batch_groups", "3d-ndhwc"):
                continue
            x, w = _inputs(i, ls, rs)
            y, vjp = jax.vjp(lambda x, w, kwargs=kwargs: jax.lax.conv_general_dilated(x, w, **kwargs), x, w)
            want = (y, *vjp(np.random.default_rng(7).standard_normal(y.shape)))
            for g, wt in zip(_ours(x, w, kwargs), want):
                np.testing.assert_allclose(g, np.asarray(wt), rtol=1e-12, atol=1e-12, err_msg=name)
        x32, w32 = (a.astype(np.float32) for a in _inputs(0, (2, 3, 9), (4, 3, 3)))
        got = ft.lax.conv_general_dilated(x32, w32, (1,), "SAME", preferred_element_type=np.float64)
        want = jax.lax.conv_general_dilated(x32, w32, (1,), "SAME", preferred_element_type=np.float64)
        assert got.dtype == want.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("index", range(len(CASES)), ids=IDS)
def test_check_grads_order2(index):
    name, ls, rs, kwargs = CASES[index]
    check_grads(lambda x, w: ft.lax.conv_general_dilated(x, w, **kwargs), _inputs(index, ls, rs), order=2,
                modes=("fwd", "rev"))


VMAP_CASES = [c for c in CASES if c[0] in ("1d-stride2-same", "2d-lhs_and_rhs_dilation", "2d-feature_groups",
                                           "2d-batch_groups", "2d-nhwc-hwio", "3d-same-rhs_dilation")]


@pytest.mark.parametrize("in_axes", [(0, None), (None, 0), (0, 0), (2, 1)])
@pytest.mark.parametrize("name,ls,rs,kwargs", VMAP_CASES, ids=[c[0] for c in VMAP_CASES])
def test_vmap_matches_a_loop(name, ls, rs, kwargs, in_axes):
    rng = np.random.default_rng(3)
    xs = rng.standard_normal(ls[:in_axes[0]] + (3,) + ls[in_axes[0]:]) if in_axes[0] is not None \
        else rng.standard_normal(ls)
    ws = rng.standard_normal(rs[:in_axes[1]] + (3,) + rs[in_axes[1]:]) if in_axes[1] is not None \
        else rng.standard_normal(rs)
    f = lambda x, w: ft.lax.conv_general_dilated(x, w, **kwargs)
    got = ft.vmap(f, in_axes=in_axes)(xs, ws)
    pick = lambda a, axis, i: a if axis is None else np.take(a, i, axis=axis)
    want = np.stack([f(pick(xs, in_axes[0], i), pick(ws, in_axes[1], i)) for i in range(3)])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_vmap_of_grad_and_grad_of_vmap():
    rng = np.random.default_rng(4)
    xs, w = rng.standard_normal((3, 2, 4, 6, 5)), rng.standard_normal((4, 2, 3, 2))
    loss = lambda x, w: fnp.sum(fnp.tanh(ft.lax.conv_general_dilated(x, w, (2, 1), "SAME", feature_group_count=2)))
    got = ft.vmap(ft.grad(loss, argnums=(0, 1)), in_axes=(0, None))(xs, w)
    want = [ft.grad(loss, argnums=(0, 1))(x, w) for x in xs]
    np.testing.assert_allclose(got[0], np.stack([g[0] for g in want]), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got[1], np.stack([g[1] for g in want]), rtol=1e-12, atol=1e-12)


def test_jit_numpy_backend_matches_eager():
    for i, (name, ls, rs, kwargs) in enumerate(CASES[:6]):
        x, w = _inputs(i, ls, rs)
        f = ft.value_and_grad(lambda x, w: fnp.sum(ft.lax.conv_general_dilated(x, w, **kwargs) ** 2), argnums=(0, 1))
        got, want = ft.jit(f, backend="numpy")(x, w), f(x, w)
        for g, wt in zip(ft.tree_util.tree_leaves(got), ft.tree_util.tree_leaves(want)):
            np.testing.assert_allclose(g, wt, rtol=1e-12, atol=1e-12, err_msg=name)


@pytest.fixture
def opencl(monkeypatch):
    """The OpenCL runtime with small programs on the device (not the host) and guard canaries, as
    tests/conftest.py sets for test_opencl*.py."""
    from functrace.backends.opencl import runtime
    if runtime.get_runtime() is None:
        pytest.skip("no usable OpenCL device on this machine")
    settings = {"opencl_small_program_elements": 0, "opencl_host_step_elements": 0, "opencl_debug_canaries": True}
    for name, value in settings.items():
        monkeypatch.setattr(ft.config, name, value)


# (case, dtype): every configuration in float64, two in float32 too; all in one program (one compile)
OPENCL_CASES = [(c, np.float64) for c in CASES if c[0] in (
    "1d-stride2-same", "2d-pairs-negative", "2d-lhs_and_rhs_dilation", "2d-batch_groups", "3d-same-rhs_dilation")] + [(c, np.float32) for c in CASES if c[0] == "2d-same_lower-strides"]


# configurations with >= 8 output features per group and >= 16 taps: the im2col + matmul path
# (their kernel gradients too; their input gradients take the direct kernel)
OPENCL_MATMUL_CASES = [
    ("1d-matmul", (3, 4, 11), (8, 4, 5), dict(window_strides=(3,), padding=((1, 2),), rhs_dilation=(2,))),
    ("2d-matmul-dilated", (2, 3, 9, 8), (8, 3, 3, 3),
     dict(window_strides=(2, 1), padding=((2, 1), (0, -1)), lhs_dilation=(1, 2), rhs_dilation=(2, 1))),
    ("2d-matmul-feature_groups", (2, 4, 7, 6), (16, 2, 3, 3), dict(window_strides=(1, 1), padding="SAME",
                                                                   feature_group_count=2)),
    ("2d-matmul-batch_groups", (4, 3, 5, 6), (16, 3, 2, 3), dict(window_strides=(1, 2), padding="VALID",
                                                                 batch_group_count=2)),
    ("3d-matmul", (1, 2, 4, 5, 6), (8, 2, 2, 2, 2), dict(window_strides=(1, 1, 2), padding="SAME")),
]
OPENCL_CASES += [(c, np.float32 if c[0] == "2d-matmul-feature_groups" else np.float64) for c in OPENCL_MATMUL_CASES]


def test_opencl_value_and_vjp_with_no_host_step(opencl):
    """Values and both cotangents against the numpy backend, float32 and float64, both paths; one
    program of only the convolutions (3 kernels a case, so the cold compile stays short)."""
    args = []
    for c, dtype in OPENCL_CASES:
        x, w = _inputs(CASES.index(c) if c in CASES else 50 + OPENCL_MATMUL_CASES.index(c), c[1], c[2])
        y = np.asarray(ft.lax.conv_general_dilated(x, w, **c[3]))
        args += [a.astype(dtype) for a in (x, w, np.random.default_rng(9).standard_normal(y.shape))]

    def f(*args):
        outs = []
        for (c, _), x, w, cot in zip(OPENCL_CASES, args[::3], args[1::3], args[2::3]):
            y, vjp = ft.vjp(lambda x, w, kwargs=c[3]: ft.lax.conv_general_dilated(x, w, **kwargs), x, w)
            outs.append((y, *vjp(cot)))
        return outs

    exe = ft.jit(f, backend="opencl").lower(*args).compile()
    assert exe.num_host_steps == 0, exe.report()
    assert "conv.cl: direct" in exe.report() and "conv.cl: im2col" in exe.report()
    got, want = exe(*args), ft.jit(f, backend="numpy")(*args)
    for (c, dtype), g3, w3 in zip(OPENCL_CASES, got, want):
        tol = 2e-5 if dtype == np.float32 else 1e-12
        for g, wt in zip(g3, w3):
            assert np.asarray(g).dtype == dtype
            np.testing.assert_allclose(np.asarray(g), np.asarray(wt), rtol=tol, atol=tol, err_msg=c[0])


def test_opencl_im2col_with_the_opencl_matmul(opencl):
    """The im2col path with the matmul on OpenCL tiles (by default a CPU device may pick host BLAS)."""
    name, ls, rs, kwargs = OPENCL_MATMUL_CASES[1]
    x, w = (a.astype(np.float32) for a in _inputs(60, ls, rs))
    f = lambda x, w: ft.lax.conv_general_dilated(x, w, **kwargs)
    saved = ft.config.matmul
    ft.config.update("matmul", "opencl")
    try:
        exe = ft.jit(f, backend="opencl").lower(x, w).compile()
        got = exe(x, w)
    finally:
        ft.config.update("matmul", saved)
    assert exe.num_host_steps == 0 and "im2col" in exe.report() and "BLAS" not in exe.report(), exe.report()
    np.testing.assert_allclose(np.asarray(got), ft.jit(f, backend="numpy")(x, w), rtol=2e-5, atol=2e-5)


def test_opencl_second_derivative_and_vmap(opencl):
    """grad of grad (a batch-grouped convolution appears) and a vmapped kernel, on OpenCL."""
    rng = np.random.default_rng(5)
    x, w, ws = rng.standard_normal((2, 4, 6, 5)), rng.standard_normal((4, 2, 3, 2)), rng.standard_normal((3, 4, 2, 3, 2))
    conv = lambda x, w: ft.lax.conv_general_dilated(x, w, (1, 2), ((1, 1), (0, 1)), feature_group_count=2)
    inner = lambda x, w: fnp.sum(fnp.sin(conv(x, w)))
    f = lambda x, w, ws: (ft.grad(lambda w: fnp.sum(ft.grad(inner)(x, w) ** 2))(w),
                          ft.vmap(conv, in_axes=(None, 0))(x, ws))
    exe = ft.jit(f, backend="opencl").lower(x, w, ws).compile()
    assert exe.num_host_steps == 0, exe.report()
    for g, wt in zip(exe(x, w, ws), ft.jit(f, backend="numpy")(x, w, ws)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(wt), rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------- conv, conv2d, errors


def test_conv_and_conv_with_general_padding():
    x, w = _inputs(0, (2, 3, 7, 6), (4, 3, 3, 2))
    full = ft.lax.conv_general_dilated(x, w, (2, 1), ((1, 0), (2, 1)), lhs_dilation=(1, 2), rhs_dilation=(2, 1))
    np.testing.assert_array_equal(ft.lax.conv_with_general_padding(x, w, (2, 1), ((1, 0), (2, 1)), (1, 2), (2, 1)), full)
    np.testing.assert_array_equal(ft.lax.conv(x, w, (1, 2), "SAME"), ft.lax.conv_general_dilated(x, w, (1, 2), "SAME"))


@pytest.mark.parametrize("stride,padding,pairs", [
    (1, "SAME", ((4, 4), (1, 1))), (2, "SAME", ((4, 4), (0, 1))), (1, "VALID", ((0, 0), (0, 0))),
    ((2, 1), ((1, 3), (0, 2)), ((1, 3), (0, 2))), (1, (2, 1), ((2, 2), (1, 1)))])
def test_conv2d_padding_forms(stride, padding, pairs):
    x, w = _inputs(1, (2, 3, 11, 8), (4, 3, 9, 3))
    got = ft.nn.conv2d(x, w, stride=stride, padding=padding)
    strides = (stride, stride) if isinstance(stride, int) else stride
    np.testing.assert_allclose(got, ft.lax.conv_general_dilated(x, w, strides, pairs), rtol=1e-14, atol=1e-14)


def test_conv2d_gradient_is_three_convolutions_not_a_pad_per_tap():
    x, k = np.ones((1, 1, 16, 16)), np.ones((1, 1, 9, 9))
    jaxpr = ft.make_jaxpr(ft.grad(lambda x, k: fnp.sum((ft.nn.conv2d(x, k, padding=4) - 1.0) ** 2), (0, 1)))(x, k)
    names = [e.primitive.name for e in jaxpr.eqns]
    assert names.count("conv_general_dilated") == 3 and "pad" not in names and len(names) < 20, names


@pytest.mark.parametrize("call,error,match", [
    (lambda x, w: ft.lax.conv_general_dilated(x, w, (1, 1), "FULL"), ValueError, "'SAME', 'SAME_LOWER', 'VALID'"),
    (lambda x, w: ft.lax.conv_general_dilated(x, w, (1,), "SAME"), ValueError, "window_strides must be 2 ints"),
    (lambda x, w: ft.lax.conv_general_dilated(x, w, (1, 1), ((1, 1),)), ValueError, r"2 \(low, high\) int pairs"),
    (lambda x, w: ft.lax.conv_general_dilated(x, w, (1, 1), "SAME", lhs_dilation=(2, 1)), ValueError, "ambiguous"),
    (lambda x, w: ft.lax.conv_general_dilated(x, w[:, :2], (1, 1), "SAME"), ft.ShapeError, "feature_group_count"),
    (lambda x, w: ft.lax.conv_general_dilated(x, w[0], (1, 1), "SAME"), ft.ShapeError, "same rank"),
    (lambda x, w: ft.lax.conv_general_dilated(x, w, (1, 1), "SAME", feature_group_count=2), ft.ShapeError,
     "feature_group_count"),
    (lambda x, w: ft.lax.conv_general_dilated(fnp.concatenate([x, x]), w, (1, 1), "SAME", batch_group_count=2),
     ft.ShapeError, "group count"),
    (lambda x, w: ft.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHW")),
     TypeError, "distinct letters"),
    (lambda x, w: ft.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "DWIO", "NHWC")),
     TypeError, "same spatial letters"),
])
def test_errors_name_the_problem(call, error, match):
    x, w = np.ones((2, 3, 5, 5)), np.ones((3, 3, 2, 2))
    with pytest.raises(error, match=match):
        call(x, w)
