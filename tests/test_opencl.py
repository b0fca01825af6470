"""The OpenCL backend against the numpy backend: every lowering on random shapes (sizes 1, 7,
127, 1000; broadcasting; float32 and float64), fusion, whole programs, device arrays, cache.

Many operations share one jitted function (one OpenCL program) to keep compile time small."""
import re
import warnings

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.backends.opencl import group_loops
from functrace.backends.opencl import runtime as cl_runtime

rt = cl_runtime.get_runtime()
pytestmark = pytest.mark.skipif(rt is None, reason="no usable OpenCL device on this machine")

RNG = np.random.default_rng(0)
SIZES = [1, 7, 127, 1000]
DTYPES = [np.float32, np.float64]


def kind() -> str:
    """The device kind programs compile for now (``opencl_device_kind``; tests force "gpu" on PoCL)."""
    return cl_runtime.get_runtime().kind


def both(f, *args, **jit_kwargs):
    """(OpenCL result, numpy-backend result) of jit(f)."""
    out_cl = ft.jit(f, backend="opencl", **jit_kwargs)(*args)
    out_np = ft.jit(f, backend="numpy", **jit_kwargs)(*args)
    return ft.tree_util.tree_map(np.asarray, out_cl), ft.tree_util.tree_map(np.asarray, out_np)


def assert_close(got, want, dtype):
    tol = 2e-5 if dtype == np.float32 else 1e-12
    for g, w in zip(ft.tree_util.tree_leaves(got), ft.tree_util.tree_leaves(want)):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


UNARY = [fnp.sin, fnp.cos, fnp.tan, fnp.tanh, fnp.exp, fnp.expm1, fnp.negative, fnp.abs, fnp.sign,
         fnp.floor, fnp.ceil, fnp.rint, fnp.sigmoid, fnp.square, lambda x: x ** 3, lambda x: x ** -2,
         lambda x: fnp.log(fnp.abs(x) + 0.5), lambda x: fnp.log1p(fnp.abs(x)), lambda x: fnp.sqrt(fnp.abs(x)),
         lambda x: 1.0 / fnp.sqrt(fnp.abs(x) + 1.0), lambda x: ft.nn.relu(x), lambda x: ft.nn.gelu(x),
         lambda x: fnp.where(x > 0.2, x, -x * 2.0), lambda x: (x > 0).astype(x.dtype),
         lambda x: fnp.isfinite(x), lambda x: fnp.logical_not(x < 0.5), fnp.sinh, fnp.cosh, fnp.arcsinh,
         lambda x: fnp.arccosh(fnp.abs(x) + 1.0), fnp.exp2]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_unary_elementwise(n, dtype):
    x = RNG.standard_normal(n).astype(dtype)
    x[::97][:5] = [np.nan, np.inf, -np.inf, -0.0, 0.0][:len(x[::97][:5])]  # NaN stays NaN, as numpy
    f = lambda x: tuple(u(x) for u in UNARY)
    with np.errstate(all="ignore"):
        got, want = both(f, x)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    assert_close(got, want, dtype)


BINARY = [fnp.add, fnp.subtract, fnp.multiply, fnp.divide, fnp.maximum, fnp.minimum, fnp.arctan2,
          lambda x, y: fnp.power(fnp.abs(x) + 0.1, y), lambda x, y: fnp.remainder(x, fnp.abs(y) + 0.5),
          lambda x, y: x < y, lambda x, y: x == y, lambda x, y: fnp.where(x > y, x * 2, y - 1),
          lambda x, y: fnp.logical_and(x > 0, y > 0), lambda x, y: x * y + x - y * 0.5, fnp.hypot, fnp.logaddexp,
          fnp.logaddexp2]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", [((7,), (7,)), ((127, 1), (1, 8)), ((3, 1000), (1000,)), ((1,), (5, 1)),
                                    ((2, 1, 7), (3, 1)), ((), (9,))])
def test_binary_broadcasting(shapes, dtype):
    x = RNG.standard_normal(shapes[0]).astype(dtype)
    y = RNG.standard_normal(shapes[1]).astype(dtype)
    got, want = both(lambda x, y: tuple(b(x, y) for b in BINARY), x, y)
    assert_close(got, want, dtype)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("n", [7, 1000])
def test_integer_division_rounds_down_and_survives_zero(n, dtype):
    """numpy's integer % and //: toward -inf, and 0 (not a trap) for a zero divisor."""
    x = RNG.integers(-50, 50, n).astype(dtype)
    y = RNG.integers(-4, 5, n).astype(dtype)
    f = lambda x, y: (x % y, x // y, x % 4, x // -3, (x * 7) % (y + 10))
    assert ft.jit(f, backend="opencl").lower(x, y).compile().num_host_steps == 0
    with np.errstate(divide="ignore", invalid="ignore"):
        got, want = both(f, x, y)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1,), (7, 1), (127, 9), (3, 1000), (5, 4, 3)])
def test_reductions_any_axes(shape, dtype):
    x = RNG.standard_normal(shape).astype(dtype)
    nd = len(shape)
    axes = [None] + list(range(nd)) + ([(0, nd - 1)] if nd > 1 else [])

    def f(x):
        outs = []
        for ax in axes:
            outs += [fnp.sum(x, axis=ax), fnp.max(x, axis=ax), fnp.min(x * 2.0, axis=ax),
                     fnp.sum(fnp.exp(x) * x, axis=ax), fnp.prod(1.0 + 0.01 * x, axis=ax)]
        return tuple(outs)
    got, want = both(f, x)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-11)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, **tol)


def test_large_reduction_two_pass():
    x = RNG.standard_normal(300_001)
    f = lambda x: (fnp.sum(x * x), fnp.max(x), fnp.min(x), fnp.prod(1.0 + 1e-3 * x), fnp.max((x * 100).astype(np.int32)))
    exe = ft.jit(f, backend="opencl").lower(x).compile()
    assert exe.num_host_steps == 0
    got, want = both(f, x)
    assert_close(got, want, np.float64)


@pytest.mark.parametrize("dtype", DTYPES + [np.int32])
@pytest.mark.parametrize("shape", [(1,), (7, 1), (127, 9), (3, 1000), (5, 4, 3)])
def test_cumsum_and_arg_reductions_are_kernels(shape, dtype):
    """cumsum (both directions: its VJP runs in reverse) and argmax/argmin along every axis,
    with ties and, for floats, NaNs (numpy: the first NaN's index)."""
    from functrace.primitives import cumsum
    x = RNG.integers(-3, 4, shape).astype(dtype) if dtype == np.int32 else RNG.standard_normal(shape).astype(dtype)
    if dtype != np.int32 and x.size > 4:
        x.flat[[0, 3, x.size - 2]] = np.nan  # a line starting with NaN, NaNs inside lines

    def f(x):
        return tuple(out for ax in range(x.ndim) for out in (
            cumsum(x, ax), cumsum(x, ax, reverse=True), fnp.argmax(x, axis=ax), fnp.argmin(x, axis=ax)))
    exe = ft.jit(f, backend="opencl").lower(x).compile()
    assert exe.num_host_steps == 0 and exe.num_kernel_launches == 4 * x.ndim
    assert "cumsum" in exe.as_text() and "argmax" in exe.as_text()
    got, want = both(f, x)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)


def test_cumsum_gradient_on_opencl():
    x, w = RNG.standard_normal((6, 9)), RNG.standard_normal((6, 9))
    f = lambda x: fnp.sum(fnp.cumsum(x, axis=1) ** 2 * w)
    g_cl, g_np = both(ft.grad(f), x)
    assert_close(g_cl, g_np, np.float64)
    assert ft.jit(ft.grad(f), backend="opencl").lower(x).compile().num_host_steps == 0


@pytest.mark.parametrize("dtype", DTYPES + [np.int32, np.bool_])
@pytest.mark.parametrize("shape", [(1,), (7, 1), (127, 9), (3, 1000), (5, 4, 3)])
def test_pad_and_concatenate_are_kernels(shape, dtype):
    """pad (edges, interior, a traced fill value) and concatenate (any axis, views as operands:
    slices, transposes, broadcasts read in place) against numpy, with no host steps."""
    from functrace.primitives import pad
    x = RNG.standard_normal(shape) * 3
    x = (x > 0) if dtype == np.bool_ else x.astype(dtype)
    nd = len(shape)

    def f(x, fill):
        outs = [pad(x, fill, tuple((d % 3, (d + 1) % 2, d % 2) for d in range(nd))),
                pad(x, np.zeros((), x.dtype), ((2, 1, 0),) + ((0, 0, 0),) * (nd - 1)),
                fnp.pad(x[..., ::2], 1)]
        for ax in range(nd):
            outs.append(fnp.concatenate([x, x[::-1], fnp.flip(x, axis=ax)], axis=ax))
        outs.append(fnp.stack([x.T, x.T], axis=0))
        outs.append(fnp.concatenate([fnp.broadcast_to(x[:1], (2,) + shape[1:]), x], axis=0))
        corner = fnp.broadcast_to(fnp.reshape(fnp.reshape(x, (-1,))[-1:], (1,) * nd), (3,) + shape[1:])
        outs.append(fnp.concatenate([x, corner], axis=0))  # a broadcast scalar (stride-0 view)
        outs.append(fnp.reshape(x.T[::-1], (-1,)))  # a reshape no view expresses: copied
        return tuple(outs)
    fill = np.asarray(x.flat[0])
    exe = ft.jit(f, backend="opencl").lower(x, fill).compile()
    assert exe.num_host_steps == 0 and "pad" in exe.as_text() and "concatenate" in exe.as_text()
    if sum(d > 1 for d in shape) > 1:  # a transposed, reversed matrix: no view flattens it
        assert "void reshape" in exe.as_text()
    got, want = both(f, x, fill)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("stride, padding", [(1, 1), (2, 0), (2, 2)])
def test_conv2d_and_its_gradient_on_opencl(stride, padding):
    x, w = RNG.standard_normal((2, 3, 11, 9)), RNG.standard_normal((4, 3, 3, 2))
    f = lambda x, w: fnp.sum(fnp.tanh(ft.nn.conv2d(x, w, stride=stride, padding=padding)) ** 2)
    got, want = both(ft.value_and_grad(f, argnums=(0, 1)), x, w)
    assert_close(got, want, np.float64)
    exe = ft.jit(ft.value_and_grad(f, argnums=(0, 1)), backend="opencl").lower(x, w).compile()
    hosted = [line for line in exe.report().splitlines() if line.strip().startswith("host")]
    assert not any("no OpenCL lowering" in line for line in hosted), hosted


@pytest.mark.parametrize("dtype", DTYPES)
def test_mixed_program_has_no_host_steps(dtype):
    x = RNG.standard_normal((7, 5)).astype(dtype)
    w = RNG.standard_normal((5, 3)).astype(dtype)
    idx = np.array([4, 0, 4, 6])

    def f(x, w):
        return (x @ w, fnp.cumsum(x, axis=0), x[idx], fnp.concatenate([x, x * 2], axis=1), x.T + 1.0,
                fnp.pad(x, 1), x[::2, 1:4], fnp.argmax(x, axis=1), fnp.reshape(x, (5, 7)) * 3.0,
                fnp.broadcast_to(x[:, :1], (7, 4)) + 1.0, ft.nn.softmax(x), ft.nn.rms_norm(x, w[:, 0]),
                fnp.isfinite(x / (x - x[0])))
    assert ft.jit(f, backend="opencl").lower(x, w).compile().num_host_steps == 0
    with np.errstate(divide="ignore", invalid="ignore"):
        got, want = both(f, x, w)
    assert_close(got, want, dtype)


def test_custom_rules_and_checkpoints_are_inlined_into_kernels():
    """Under jit the bodies of custom_jvp / custom_vjp functions and checkpoints are plain code
    (one fused kernel here), while differentiating the jitted function still uses the rules."""
    @ft.custom_jvp
    def twice_sin(x):
        return fnp.sin(x) * 2.0
    twice_sin.defjvp(lambda p, t: (twice_sin(p[0]), t[0] * 3.0))  # deliberately not the derivative

    @ft.custom_vjp
    def cube(x):
        return x * x * x
    cube.defvjp(lambda x: (cube(x), x), lambda x, g: (g * 5.0,))  # likewise

    f = lambda x: fnp.sum(ft.checkpoint(lambda y: fnp.tanh(y) * y)(twice_sin(x)) + cube(x))
    x = RNG.standard_normal(300)
    exe = ft.jit(f, backend="opencl").lower(x).compile()
    assert exe.num_host_steps == 0 and exe.num_kernel_launches == 1
    got, want = both(f, x)
    assert_close(got, want, np.float64)
    y = twice_sin(x)
    rule_grad = (1 / np.cosh(y) ** 2 * y + np.tanh(y)) * 3.0 + 5.0
    for grad_f in (ft.grad(ft.jit(f, backend="opencl")), ft.jit(ft.grad(f), backend="opencl")):
        np.testing.assert_allclose(np.asarray(grad_f(x)), rule_grad, rtol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_control_flow_runs_its_bodies_as_kernels(dtype):
    """scan (both directions, consts, xs, ys, a literal init), while_loop, fori_loop and
    switch/cond: with small values the whole program is one work-group's kernel; without
    work-group loops each body is compiled once, the carry kept in device arrays, no host steps."""
    lax = ft.lax
    w = RNG.standard_normal((6, 6)).astype(dtype) * 0.3
    xs = RNG.standard_normal((9, 6)).astype(dtype)

    def f(w, xs):
        def step(h, x):
            h = fnp.tanh(h @ w + x)
            return h, fnp.sum(h * h)
        h, ys = lax.scan(step, fnp.zeros(6, dtype), xs)
        hr, ysr = lax.scan(step, h, xs, reverse=True)
        n, acc = lax.while_loop(lambda c: c[0] < 5, lambda c: (c[0] + 1, c[1] * 0.5 + fnp.sin(c[1])), (0, h))
        total = lax.fori_loop(0, 4, lambda i, a: a + i * fnp.exp(-a), hr)
        picked = lax.switch(n % 3, [lambda v: v * 2.0, lambda v: v - 1.0, lambda v: fnp.cos(v)], total)
        passthrough = lax.cond(n > 100, lambda v: v * 3.0, lambda v: v, acc)
        return ys, ysr, acc, total, picked, passthrough
    whole = ft.jit(f, backend="opencl").lower(w, xs).compile()  # small values: one work-group's kernel
    assert whole.num_kernel_launches == 1 and "kernel  program: the program compiled whole" in whole.report()
    assert_close(ft.tree_util.tree_map(np.asarray, whole(w, xs)), ft.jit(f, backend="numpy")(w, xs), dtype)
    with pytest.MonkeyPatch.context() as patch:  # the designs for bodies too large for one work-group
        patch.setattr(group_loops, "GROUP_ELEMENTS", 0)
        exe = ft.jit(f, backend="opencl").lower(w, xs).compile()
        assert exe.num_host_steps == 0
        assert any(line.strip().startswith("kernel  scan") for line in exe.report().splitlines())
        got, want = both(f, w, xs)
    assert_close(got, want, dtype)

    def loss(w, xs):  # reverse mode through scan and fori_loop (not while_loop: as in JAX)
        h, ys = lax.scan(lambda h, x: (fnp.tanh(h @ w + x), fnp.sum(h * x)), fnp.zeros(6, dtype), xs)
        return fnp.sum(ys) + fnp.sum(lax.fori_loop(0, 3, lambda i, a: fnp.sin(a) * w[0], h))
    got, want = both(ft.grad(loss), w, xs)
    np.testing.assert_allclose(got, want, rtol=1e-4 if dtype == np.float32 else 1e-11, atol=1e-5)


def test_control_flow_outputs_that_alias_inputs_or_each_other():
    """A body or branch may return its x row as the carry, an input, a constant, or one value
    twice: the scan kept recycling the row its carry held ('ft.Array' object has no attribute
    'buffer'; for a length-1 scan the output's storage was gone), and two outputs sharing one
    array were recycled at the first one's last use.  Each output consumed, then the buffers
    reused, then the other output read (the order that exposed the sharing)."""
    lax = ft.lax
    n = 8
    w = (RNG.standard_normal((n, n)) / 3).astype(np.float32)
    c = RNG.standard_normal(n).astype(np.float32)
    init = RNG.standard_normal(n).astype(np.float32)
    xs = RNG.standard_normal((3, n)).astype(np.float32)
    twice = lambda v: (v, v)

    def use(a, b):  # a's last use, then allocations of its size, then b
        return fnp.tanh(a @ w) @ w + b * 3.0

    def f(init, xs):
        return [
            lax.scan(lambda h, x: (x, h * 2.0), init, xs),
            lax.scan(lambda h, x: (x, h * 2.0), init, xs[:1]),
            lax.scan(lambda h, x: (x, x), init, xs),
            use(*lax.scan(lambda h, x: ((x, x), h[0] * 2.0), (init, init), xs)[0]),
            use(*lax.scan(lambda h, x: (twice(x * 2.0 + h[0]), h[1]), (init, init), xs)[0]),
            lax.scan(lambda h, x: (init, h + x), init * 3.0, xs),
            lax.scan(lambda h, x: (fnp.asarray(c), h + x), init, xs),
            use(*lax.cond(init[0] > -100, lambda v: twice(v * 2.0), twice, init)),
            use(*lax.cond(init[0] > 100, lambda v: twice(v * 2.0), twice, init)),
            use(*lax.cond(init[0] > -100, lambda v: twice(fnp.asarray(c)), twice, init)),
            use(*lax.while_loop(lambda h: h[0][0] < 100, lambda h: twice(h[0] * 2.0 + 1.0),
                                (fnp.abs(init) + 1.0, init))),
            use(*lax.while_loop(lambda h: h[0][0] < 100, lambda h: (h[0] * 2.0 + 1.0, h[1]),
                                (fnp.abs(init) + 1.0, init))),
            use(*lax.fori_loop(0, 3, lambda i, h: twice(h[1] + 1.0), (init, init))),
        ]
    jf = ft.jit(f, backend="opencl")
    want = ft.jit(f, backend="numpy")(init, xs)
    for _ in range(2):  # the second call runs on pooled buffers
        assert_close(ft.tree_util.tree_map(np.asarray, jf(init, xs)), want, np.float32)


def test_device_put_keeps_a_training_loop_on_the_device():
    params = {"w": RNG.standard_normal((5, 3)), "b": np.zeros(3)}
    x = RNG.standard_normal((8, 5))
    dparams, dx = ft.device_put((params, x))
    assert all(isinstance(v, ft.Array) for v in ft.tree_util.tree_leaves((dparams, dx)))
    loss = lambda p, x: fnp.sum(fnp.tanh(x @ p["w"] + p["b"]) ** 2)
    step = ft.jit(ft.value_and_grad(loss), backend="opencl")
    want = ft.jit(ft.value_and_grad(loss), backend="numpy")(params, x)
    for _ in range(2):  # gradients come back as device arrays and feed the next call
        got = step(dparams, dx)
        assert isinstance(got[1]["w"], ft.Array)
        dparams = step(dparams, dx)[1]
    got = step(ft.device_put(params), dx)
    assert_close(ft.tree_util.tree_map(np.asarray, got), want, np.float64)
    with pytest.raises(TypeError, match="str is not a valid array type"):
        ft.device_put({"name": "w"})
    w = got[1]["w"]  # numpy's methods work on device arrays (on a host copy)
    np.testing.assert_allclose(w.sum(), np.asarray(w).sum())
    assert w.T.shape == (3, 5) and w.reshape(-1).shape == (15,) and w.astype(np.float32).dtype == np.float32
    assert w.tolist() == np.asarray(w).tolist() and w.ndim == 2
    with pytest.raises(AttributeError, match="no attribute 'frobnicate'"):
        w.frobnicate()
    with pytest.raises(TypeError, match="complex128 cannot go to an OpenCL device"):
        ft.device_put(np.ones(2, complex))


def test_block_until_ready_waits_for_a_whole_tree(monkeypatch):
    """``ft.block_until_ready(tree)`` (as ``jax.block_until_ready``): one wait per runtime for all
    the tree's device arrays, other leaves untouched, the tree itself returned."""
    f = ft.jit(lambda x: {"y": (x * 2.0, x + 1.0), "n": 3}, backend="opencl")
    out = f(rt.to_device(np.arange(5.0, dtype=np.float32)))
    waits = []
    monkeypatch.setattr(rt, "finish", lambda: waits.append(1) or cl_runtime.Runtime.finish(rt))
    tree = {"out": out, "host": np.ones(2), "none": None}
    assert ft.block_until_ready(tree) is tree
    assert len(waits) == 1
    assert ft.block_until_ready(np.ones(3)).shape == (3,) and len(waits) == 1  # no device arrays: no wait
    np.testing.assert_array_equal(np.asarray(out["y"][0]), np.arange(5.0) * 2.0)


def test_dropped_outputs_return_to_the_pool_at_once(monkeypatch):
    """Without waiting for Python's cycle collector (pytree flattening once kept outputs in a
    reference cycle: every call then allocated, and page-faulted, fresh output memory)."""
    import gc
    x = rt.to_device(RNG.standard_normal(100_000).astype(np.float32))
    f = ft.jit(lambda x: {"y": (x * 2.0 + 1.0,)}, backend="opencl")
    f(x)["y"][0].block_until_ready()
    made = []
    monkeypatch.setattr(rt, "empty", lambda shape, dtype: made.append(shape) or cl_runtime.Runtime.empty(rt, shape, dtype))
    gc.disable()
    try:
        for _ in range(5):
            f(x)["y"][0].block_until_ready()
    finally:
        gc.enable()
    assert made == []


def test_float32_transcendentals_are_accurate_everywhere():
    """functrace's own float32 exp / tanh / log / log1p (faster than PoCL's): within 2 ulp (3 for
    log1p) over the whole range, overflow, subnormals and special values included, in the vector
    body and the masked last vector."""
    special = [0.0, -0.0, -1.0, -1.5, np.inf, -np.inf, np.nan, 1e-40, 1.17e-38, 3e38, 1e-30, -1e-30, -0.999999,
               0.3, -0.3, 0.29999998, 9.0, 88.72, 88.7228, 88.73, 89.0, 100.0, -87.33, -88.0, -103.9, -104.0, -200.0]
    wide = np.exp(RNG.uniform(-87, 88, 3000)) * RNG.choice([-1.0, 1.0], 3000)
    x = np.concatenate([special, wide, RNG.uniform(-1, 1, 1000), RNG.uniform(-110, 95, 2000)]).astype(np.float32)
    assert len(x) % 16  # a scalar tail
    fns = {"exp": (fnp.exp, np.exp, 1), "tanh": (fnp.tanh, np.tanh, 2), "log": (fnp.log, np.log, 2),
           "log1p": (fnp.log1p, np.log1p, 3)}
    f = lambda x: [fn(x) for fn, _, _ in fns.values()]
    text = ft.jit(f, backend="opencl").lower(x).compile().as_text()
    assert all(re.search(rf"ft_{name}_float\d*\(", text) for name in fns)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        got = [np.asarray(a).astype(np.float64) for a in ft.jit(f, backend="opencl")(x)]
        want = [ref(x.astype(np.float64)) for _, ref, _ in fns.values()]
        want32 = [w.astype(np.float32) for w in want]
    for name, g, w, w32, ulps in zip(fns, got, want, want32, [u for _, _, u in fns.values()]):
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=name)
        np.testing.assert_array_equal(g[np.isinf(w32)], w32[np.isinf(w32)], err_msg=name)
        ok = np.isfinite(w32)
        ulp = np.spacing(np.abs(w32[ok])).astype(np.float64)  # subnormal results: the subnormal spacing
        err = np.abs(g[ok] - w[ok]) / ulp
        assert err.max() <= ulps, (name, err.max(), x[ok][err.argmax()])


def test_programs_on_a_device_without_unified_memory(monkeypatch):
    """What a discrete GPU does: buffers are device memory, host steps and results go through
    copies.  Whole programs (views, layout kernels, permuted matmuls, control flow, softmax,
    gather) against numpy with the CPU device told it has no unified memory."""
    monkeypatch.setattr(rt, "unified", False)
    x, w = RNG.standard_normal((2, 3, 9, 8)), RNG.standard_normal((4, 3, 3, 3))
    xs, idx = RNG.standard_normal((7, 5)), np.array([4, 0, 4, 6])

    def f(x, w, xs):
        conv = ft.nn.conv2d(x, w, stride=1, padding=1)
        h, ys = ft.lax.scan(lambda h, r: (fnp.tanh(h * 0.5 + r), fnp.sum(h)), fnp.zeros(5), xs)
        mixed = (fnp.concatenate([xs[idx], xs[::-2][:4]], axis=1), fnp.cumsum(xs.T, axis=1), ft.nn.log_softmax(xs))
        return fnp.sum(conv ** 2) + fnp.sum(h) + fnp.sum(ys), mixed

    loss = lambda x, w, xs: f(x, w, xs)[0]
    got, want = both(lambda x, w, xs: (f(x, w, xs), ft.grad(loss, argnums=(0, 1, 2))(x, w, xs)), x, w, xs)
    assert_close(got, want, np.float64)


def test_float64_on_a_device_without_fp64(monkeypatch):
    """Many GPUs lack cl_khr_fp64: float64 work then runs on the host (said in the report),
    float32 work of the same program still in kernels, and every result is right."""
    monkeypatch.setattr(rt, "supports_fp64", False)
    x64, x32 = RNG.standard_normal((9, 300)), RNG.standard_normal((9, 300)).astype(np.float32)

    def f(a, b):
        return (fnp.sum(fnp.exp(a) * a, axis=1), fnp.tanh(b) * 2.0, ft.nn.softmax(a), fnp.cumsum(a, axis=0),
                fnp.concatenate([a, a * 2.0]), a @ a.T, fnp.argmax(b, axis=1))
    exe = ft.jit(f, backend="opencl").lower(x64, x32).compile()
    assert "double" not in exe.as_text().replace("cl_khr_fp64", "")
    assert "without cl_khr_fp64" in exe.report() and exe.num_kernel_launches >= 2
    got, want = both(f, x64, x32)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
def test_small_steps_run_as_one_batched_launch(monkeypatch, dtype):
    """On a device that runs kernels in the calling thread, consecutive steps too small for a
    launch of their own (a loss tail) run in one launch: elementwise groups with broadcasting and
    a masked partial vector, reductions along either axis, layout copies, integer division, bool
    outputs, all against the numpy backend."""
    from functrace.backends.opencl import planner
    monkeypatch.setattr(ft.config, "opencl_host_step_elements", 10**6)
    monkeypatch.setattr(planner, "_batch_min_eqns", lambda rt: 2)

    def tail(x, y, i):
        a = fnp.exp(x - fnp.max(x, axis=1, keepdims=True))
        b = a / fnp.sum(a, axis=1, keepdims=True)
        c = fnp.where(x > y, b, -b)
        d = fnp.sum(c, axis=0) + fnp.mean(x)
        e = fnp.pad(fnp.concatenate([x, x * 2.0], axis=0), ((1, 0), (0, 2)))
        k = fnp.floor_divide(i, 4) + fnp.remainder(i, 3) * 2
        return c, d, e, k, x > 0.5

    x = RNG.standard_normal((7, 5)).astype(dtype)
    y = RNG.standard_normal(5).astype(dtype)
    i = RNG.integers(-20, 20, (7, 5)).astype(np.int32)
    exe = ft.jit(tail, backend="opencl").lower(x, y, i).compile()
    assert exe.num_host_steps == 0, exe.report()
    if kind() == "cpu":  # (the gpu kind launches each step: it has no host steps to batch against)
        assert exe.num_kernel_launches == 1 and "small steps in one launch" in exe.report(), exe.report()
    got, want = both(tail, x, y, i)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-6)
    monkeypatch.setattr(planner, "_batch_min_eqns", lambda rt: 10**9)  # too little work: the host
    exe = ft.jit(tail, backend="opencl").lower(x, y, i).compile()
    if kind() == "cpu":
        assert exe.num_kernel_launches == 0 and exe.num_host_steps > 0


def test_ten_op_chain_is_one_launch():
    f = lambda x: fnp.tanh(x) * x + fnp.exp(-x * x) + fnp.sin(x) * 0.5 - fnp.log1p(x * x)
    x = RNG.standard_normal(1000).astype(np.float32)
    exe = ft.jit(f, backend="opencl").lower(x).compile()
    assert exe.num_kernel_launches == 1
    src = exe.as_text()
    lanes = "8|16" if kind() == "cpu" else "4"  # the cpu kind: the device's width (16 on AVX-512)
    assert re.search(rf"float({lanes}) ", src) and re.search(rf"vload({lanes})\(", src) and "fma(" not in src
    got, want = both(f, x)
    assert_close(got, want, np.float32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kernels_larger_than_the_cache_stream_their_stores(monkeypatch, dtype):
    """Data past the device's cache: outputs are non-temporal vector stores (the ragged last
    vector keeps plain ones); results are the same, broadcasting and a bool output included."""
    from functrace.backends.opencl import executable, planner
    f = lambda x, y: (x * y + 0.5 * x - y, x > y)
    for n in (4096 * 16, 4096 * 16 + 7):
        x, y = RNG.standard_normal((n // 16, 16)).astype(dtype), RNG.standard_normal(16).astype(dtype)
        monkeypatch.setattr(planner, "cache_bytes", lambda rt: 64 * 1024)
        exe = ft.jit(f, backend="opencl").lower(x, y).compile()
        streams = "FT_STREAM_STORE(" in exe.as_text().replace(executable.PREAMBLE, "")  # used, not just defined
        assert streams == (kind() == "cpu")  # (the gpu kind: plain stores)
        got = [np.asarray(a) for a in exe(x, y)]
        np.testing.assert_array_equal(got[1], x > y)
        np.testing.assert_allclose(got[0], x * y + 0.5 * x - y, rtol=1e-6 if dtype == np.float32 else 1e-14)
        monkeypatch.setattr(planner, "cache_bytes", lambda rt: 1 << 40)
        src = ft.jit(f, backend="opencl").lower(x, y).compile().as_text()
        assert "FT_STREAM_STORE(" not in src.replace(executable.PREAMBLE, "")


def test_a_reduced_value_that_is_also_an_output_is_kept():
    """A reduction absorbs its elementwise producer only when nothing else needs that value: here
    the program returns it too (this crashed with a KeyError once)."""
    f = lambda x: (fnp.sin(x) * 2.0, fnp.sum(fnp.sin(x) * 2.0, axis=0))
    x = RNG.standard_normal((37, 129)).astype(np.float32)
    got, want = both(f, x)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_sum_of_product_is_one_launch():
    f = lambda x, y: fnp.sum(x * y, axis=1)
    x, y = RNG.standard_normal((37, 129)), RNG.standard_normal((37, 129))
    exe = ft.jit(f, backend="opencl").lower(x, y).compile()
    assert exe.num_kernel_launches == 1
    assert "reduce_sum" in exe.as_text()
    got, want = both(f, x, y)
    assert_close(got, want, np.float64)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(33, 100), (128, 512), (3, 4, 37), (1, 16)])
def test_leading_axis_reductions_absorb_producers(shape, dtype):
    """Column sums (bias gradients) are one vectorized kernel with the producer inline, NaNs kept."""
    x = RNG.standard_normal(shape).astype(dtype)
    b = RNG.standard_normal(shape[-1]).astype(dtype)
    x.flat[5] = np.nan
    lead = tuple(range(len(shape) - 1))
    f = lambda x, b: (fnp.sum(x * b + 1.0, axis=lead), fnp.max(x - b, axis=lead), fnp.min(x * 2.0, axis=0),
                      fnp.prod(1.0 + 0.01 * x, axis=lead))
    exe = ft.jit(f, backend="opencl").lower(x, b).compile()
    assert exe.num_kernel_launches == 4
    got, want = both(f, x, b)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-4)


def test_report_names_kernels_and_host_steps():
    exe = ft.jit(lambda x, w: fnp.tanh(x @ w) * 2.0, backend="opencl").lower(np.ones((3, 4)), np.ones((4, 2))).compile()
    report = exe.report()
    assert "kernel" in report and "host" in report and "dot_general" in report and "peak" in report


@pytest.fixture(params=["kernels", "batched"])
def small_steps(request, monkeypatch):
    """Whole programs run once with every step a kernel of its own and once with the batching of
    small steps into one launch (what a CPU device running kernels in the calling thread does)
    forced on: every step here is small."""
    if request.param == "batched":
        from functrace.backends.opencl import planner
        monkeypatch.setattr(ft.config, "opencl_host_step_elements", 10**6)
        monkeypatch.setattr(planner, "_batch_min_eqns", lambda rt: 2)
    return request.param


def _assert_batched(small_steps, f, *args):
    report = ft.jit(f, backend="opencl").lower(*args).compile().report()
    assert ("small steps in one launch" in report) == (small_steps == "batched" and kind() == "cpu"), report


def test_mlp_grad_with_cross_entropy(small_steps):
    params = [{"w": RNG.standard_normal((20, 16)) * 0.3, "b": np.zeros(16)},
              {"w": RNG.standard_normal((16, 5)) * 0.3, "b": np.zeros(5)}]
    x, labels = RNG.standard_normal((9, 20)), RNG.integers(0, 5, 9)

    def loss(p, x, labels):
        h = fnp.tanh(x @ p[0]["w"] + p[0]["b"])
        return ft.nn.cross_entropy(h @ p[1]["w"] + p[1]["b"], labels)
    _assert_batched(small_steps, ft.value_and_grad(loss), params, x, labels)
    got, want = both(ft.value_and_grad(loss), params, x, labels)
    assert_close(got, want, np.float64)


def test_transformer_block_grad(small_steps):
    B, T, D, H = 2, 5, 8, 2
    p = {"wq": RNG.standard_normal((D, D)) * 0.3, "wk": RNG.standard_normal((D, D)) * 0.3,
         "wv": RNG.standard_normal((D, D)) * 0.3, "wo": RNG.standard_normal((D, D)) * 0.3,
         "g1": np.ones(D), "g2": np.ones(D), "w1": RNG.standard_normal((D, 12)) * 0.3,
         "w3": RNG.standard_normal((D, 12)) * 0.3, "w2": RNG.standard_normal((12, D)) * 0.3}
    x = RNG.standard_normal((B, T, D)).astype(np.float32)
    p = ft.tree_util.tree_map(lambda a: a.astype(np.float32), p)

    def block(p, x):
        h = ft.nn.rms_norm(x, p["g1"])
        split = lambda a: fnp.reshape(a, (B, T, H, D // H))
        att = ft.nn.attention(split(h @ p["wq"]), split(h @ p["wk"]), split(h @ p["wv"]), causal=True)
        x = x + fnp.reshape(att, (B, T, D)) @ p["wo"]
        h = ft.nn.rms_norm(x, p["g2"])
        x = x + ft.nn.swiglu(h @ p["w1"], h @ p["w3"]) @ p["w2"]
        return fnp.mean(x ** 2)
    _assert_batched(small_steps, ft.value_and_grad(block), p, x)
    got, want = both(ft.value_and_grad(block), p, x)
    for g, w in zip(ft.tree_util.tree_leaves(got), ft.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-5)


def test_hessian():
    A = RNG.standard_normal((6, 6))
    f = lambda x: fnp.sum(fnp.tanh(A @ x) ** 2) + 0.5 * fnp.sum(x ** 4)
    got, want = both(ft.hessian(f), RNG.standard_normal(6))
    assert_close(got, want, np.float64)


def test_device_arrays_stay_on_device_in_a_training_loop():
    step = ft.jit(lambda w, x: w - 0.1 * ft.grad(lambda w: fnp.sum((x @ w) ** 2))(w), backend="opencl")
    w, x = RNG.standard_normal((4, 3)), RNG.standard_normal((5, 4))
    w_dev, w_ref = w, w
    for _ in range(3):
        w_dev = step(w_dev, x)
        w_ref = w_ref - 0.1 * 2 * x.T @ (x @ w_ref)
        assert isinstance(w_dev, ft.Array)
    np.testing.assert_allclose(np.asarray(w_dev), w_ref, rtol=1e-10)
    assert w_dev.shape == (4, 3) and w_dev.dtype == np.float64


def test_no_binary_is_fetched_from_a_driver_with_its_own_cache(tmp_path, monkeypatch):
    """On a driver with its own source cache (PoCL) no binary is written, however often a program
    runs (fetching one compiles every kernel again: a seconds-long stall); on other drivers it is
    written at the build, and a later process (here: an emptied in-memory cache) loads it."""
    monkeypatch.setattr(ft.config, "cache_dir", str(tmp_path))
    x = RNG.standard_normal(5000)
    for driver_caches in (True, False):
        monkeypatch.setattr(rt, "driver_caches_programs", driver_caches)
        monkeypatch.setattr(rt, "_programs", {})
        f = ft.jit(lambda x: fnp.exp(x) * 3.0 - 1.0, backend="opencl")
        for _ in range(3):
            np.testing.assert_allclose(np.asarray(f(x)), np.exp(x) * 3.0 - 1.0, rtol=1e-12)
        assert len(list(tmp_path.glob("opencl/*.bin"))) == (0 if driver_caches else 1)
    (entry,) = (tmp_path / "opencl").glob("*.bin")
    monkeypatch.setattr(rt, "_programs", {})
    loaded = []
    real_program = rt.cl.Program

    def counting_program(*args):
        if len(args) == 3:
            loaded.append(args)
        return real_program(*args)
    monkeypatch.setattr(rt.cl, "Program", counting_program)
    g = ft.jit(lambda x: fnp.exp(x) * 3.0 - 1.0, backend="opencl")
    np.testing.assert_allclose(np.asarray(g(x)), np.exp(x) * 3.0 - 1.0, rtol=1e-12)
    assert len(loaded) == 1 and list((tmp_path / "opencl").glob("*.bin")) == [entry]


def test_no_platform_falls_back_to_numpy_with_one_warning(monkeypatch):
    monkeypatch.setattr(cl_runtime, "devices", lambda: [])
    monkeypatch.setattr(cl_runtime, "_state", {})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = ft.jit(lambda x: x * 2, backend="opencl")(np.ones(3))
        ft.jit(lambda x: x * 3, backend="opencl")(np.ones(3))
    assert isinstance(out, np.ndarray)
    assert sum("no usable OpenCL device" in str(w.message) for w in caught) == 1


def _jit_sin_warnings(n: int) -> tuple:
    """(jit(sin(x) * 2)(x) checked against numpy, the warnings it gave) on n random numbers."""
    x = RNG.standard_normal(n)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = ft.jit(lambda x: fnp.sin(x) * 2.0, backend="opencl")(x)
    np.testing.assert_allclose(np.asarray(out), np.sin(x) * 2.0)
    return out, [str(w.message) for w in caught]


def test_a_device_that_cannot_build_is_dropped(monkeypatch, tmp_path):
    """No probe build at start-up: a driver whose compiler fails on everything (e.g. a PoCL whose
    LLVM does not know the CPU) shows at its first build, is confirmed by the probe, and jit
    moves on to the next device (here none: numpy), warning; a build error on a device that
    works is raised as it is."""
    with pytest.raises(Exception, match="(?i)build") as e:
        rt._build(rt.cl.Program(rt.context, "__kernel void broken( {"), "")
    assert not isinstance(e.value, cl_runtime.DeviceUnusable)

    broken = cl_runtime.Runtime(rt.device)

    def failing_build(self, *args, **kwargs):
        raise RuntimeError("clBuildProgram failed: unknown target CPU 'generic'")
    monkeypatch.setattr(rt.cl.Program, "build", failing_build)
    monkeypatch.setattr(cl_runtime, "_marker", lambda device, kind="usable": str(tmp_path / f"no-{kind}"))
    monkeypatch.setattr(cl_runtime, "devices", lambda: [rt.device])
    monkeypatch.setattr(cl_runtime, "_state", {"want": ft.config.device, "runtime": broken})
    out, messages = _jit_sin_warnings(50)
    assert any("cannot build programs" in m and "next OpenCL device" in m for m in messages), messages
    assert any("no usable OpenCL device" in m for m in messages), messages


def test_the_wide_vector_probe_passes_on_this_device(monkeypatch, tmp_path):
    """The child-process probe (512-bit vector code built and run) on the device the suite uses:
    a sound driver passes, and the verdict is kept on disk."""
    monkeypatch.setattr(ft.config, "cache_dir", str(tmp_path))
    monkeypatch.setattr(cl_runtime, "_state", {})
    assert cl_runtime.crash_reason(rt.device, force=True) is None
    assert cl_runtime._read_verdict(rt.device, cl_runtime._WIDE_MARKER) == "ok"


class _FakeDevice:
    def __init__(self, platform: str, version: str, width: int = 16, cpu: bool = True):
        self.platform = type("Platform", (), {"name": platform, "version": version})()
        self.type = rt.cl.device_type.CPU if cpu else rt.cl.device_type.GPU
        self.preferred_vector_width_float = width
        self.name, self.int_ptr = "fake", -1


def test_which_drivers_are_probed_in_a_child_process():
    pocl = "Portable Computing Language"
    assert cl_runtime._may_crash_process(_FakeDevice(pocl, "OpenCL 3.0 PoCL 3.0-rc2  Linux, Release, LLVM 14.0.6"))
    assert cl_runtime._may_crash_process(_FakeDevice(pocl, "OpenCL 1.2 pocl 1.8 LLVM 11.1.0"))
    assert not cl_runtime._may_crash_process(_FakeDevice(pocl, "OpenCL 3.0 PoCL 3.1+debian LLVM 15.0.6"))
    assert not cl_runtime._may_crash_process(_FakeDevice(pocl, "OpenCL 3.0 PoCL 3.0 LLVM 14.0.6", width=8))
    assert not cl_runtime._may_crash_process(_FakeDevice(pocl, "OpenCL 3.0 PoCL 3.0 LLVM 14.0.6", cpu=False))
    assert not cl_runtime._may_crash_process(_FakeDevice("NVIDIA CUDA", "OpenCL 3.0 CUDA 12.4"))


def _probe_with(monkeypatch, tmp_path, child: str):
    """crash_reason(rt.device) with ``child`` as the probe's child script; (reason, saved verdicts)."""
    monkeypatch.setattr(ft.config, "cache_dir", str(tmp_path))
    monkeypatch.setattr(cl_runtime, "_WIDE_PROBE_CHILD", child)
    monkeypatch.setattr(cl_runtime, "_state", {})
    reason = cl_runtime.crash_reason(rt.device, force=True)
    saved = cl_runtime._read_verdict(rt.device, cl_runtime._WIDE_MARKER)
    return reason, [] if saved is None else [saved]


READY = "import os, sys, time; print('ready', flush=True); "


@pytest.mark.parametrize("case", ["abort", "build error", "hang", "dies before ready", "cannot start",
                                  "killed by another signal"])
def test_what_a_probe_child_process_tells(case, monkeypatch, tmp_path):
    """The driver's doing (a crash signal, a failed build, a hang once the child holds the
    device) is a verdict kept on disk, its LLVM error line quoted; anything else (the child cannot
    start, dies before it holds the device, is killed by another signal) counts for this
    process only."""
    import signal
    child = {
        "abort": READY + "print('LLVM ERROR: Cannot select: v16i32', file=sys.stderr); "
                         "print('In function: _Z14_cl_native_sinDv16_f', file=sys.stderr); sys.stderr.flush(); os.abort()",
        "build error": READY + "raise RuntimeError('clBuildProgram failed: BUILD_PROGRAM_FAILURE')",
        "hang": READY + "time.sleep(30)",
        "dies before ready": "import sys; sys.exit('no module named pyopencl')",
        "cannot start": "",
        "killed by another signal": READY + f"os.kill(os.getpid(), {int(signal.SIGTERM)})",
    }[case]
    if case == "hang":
        monkeypatch.setattr(cl_runtime, "WIDE_PROBE_SECONDS", 0.5)
    if case == "cannot start":
        monkeypatch.setattr("sys.executable", str(tmp_path / "no-such-python"))
    reason, saved = _probe_with(monkeypatch, tmp_path, child)
    expected = {"abort": "killed by SIGABRT (LLVM ERROR: Cannot select: v16i32)",
                "build error": "failed (RuntimeError: clBuildProgram failed",
                "hang": "did not finish in 0.5 s", "dies before ready": "failed (no module named pyopencl)",
                "cannot start": "could not start", "killed by another signal": "killed by SIGTERM"}[case]
    assert expected in reason
    assert saved == ([reason] if case in ("abort", "build error", "hang") else [])


def test_an_interrupted_probe_leaves_no_child_behind(monkeypatch, tmp_path):
    """A Ctrl-C while the probe runs reaches the caller, and the child (which may hang in a broken
    compiler, in its own process group) is killed."""
    import subprocess
    children = []
    communicate = subprocess.Popen.communicate

    def interrupted(self, *args, timeout=None, **kwargs):
        if timeout is not None:
            children.append(self)
            raise KeyboardInterrupt
        return communicate(self, *args, **kwargs)
    monkeypatch.setattr(subprocess.Popen, "communicate", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _probe_with(monkeypatch, tmp_path, READY + "time.sleep(30)")
    assert children and children[0].wait(timeout=10) != 0


def test_a_device_that_may_crash_the_process_is_skipped_or_refused(monkeypatch, tmp_path):
    """A driver that may abort the process (PoCL with LLVM 14 on a CPU newer than it) is probed
    in a child process before any build here: when the child dies, the default choice skips the
    device with a warning naming the reason (and takes the next, here none: numpy); a device the
    user chose is refused with a clear error; the verdict is kept on disk, so later processes do
    not probe."""
    monkeypatch.setattr(ft.config, "cache_dir", str(tmp_path))
    monkeypatch.setattr(cl_runtime, "_may_crash_process", lambda device: True)
    monkeypatch.setattr(cl_runtime, "_WIDE_PROBE_CHILD", READY + "os.abort()")
    monkeypatch.setattr(cl_runtime, "devices", lambda: [rt.device])
    monkeypatch.setattr(cl_runtime, "_state", {})
    out, messages = _jit_sin_warnings(5000)
    assert any("skipping OpenCL device" in m and "SIGABRT" in m for m in messages), messages
    assert isinstance(out, np.ndarray)
    assert "SIGABRT" in cl_runtime._read_verdict(rt.device, cl_runtime._WIDE_MARKER)

    def no_probe(device):
        raise AssertionError("probed again although the verdict is on disk")
    monkeypatch.setattr(cl_runtime, "_run_wide_probe", no_probe)
    monkeypatch.setattr(cl_runtime, "_state", {})
    chosen_before = ft.config.device
    ft.config.update("device", "0")
    try:
        with pytest.raises(cl_runtime.DeviceUnusable, match="may crash the process.*SIGABRT"):
            ft.jit(lambda x: x + 1.0, backend="opencl")(np.ones(5000))
    finally:
        ft.config.update("device", chosen_before)
        cl_runtime._state.clear()


def test_the_default_choice_moves_past_a_device_that_may_crash(monkeypatch):
    risky = _FakeDevice("Portable Computing Language", "OpenCL 3.0 PoCL 3.0 LLVM 14.0.6")
    risky.type = rt.device.type  # (of this machine's type: GPUs come first, so a CPU would not be reached)
    monkeypatch.setattr(cl_runtime, "crash_reason", lambda d: "a probe was killed by SIGABRT" if d is risky else None)
    monkeypatch.setattr(cl_runtime.config, "device", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cl_runtime._choose([risky, rt.device]) is rt.device
    assert any("skipping OpenCL device 'fake'" in str(w.message) for w in caught)


def test_bad_device_choice(monkeypatch):
    monkeypatch.setattr(cl_runtime, "_state", {})
    ft.config.update("device", "no-such-device")
    try:
        with pytest.raises(ValueError, match="no OpenCL device matches"):
            cl_runtime.get_runtime()
    finally:
        ft.config.update("device", None)
        cl_runtime._state.clear()


# Primitives that never reach the OpenCL planner, and why.
NOT_PLANNED = {name: "inlined before planning (optimize.inline_calls): its body's equations run as kernels"
               for name in ("checkpoint", "custom_jvp_call", "custom_vjp_call")}
NOT_PLANNED["iota"] = "no operands, so never staged: computed when traced, a constant of the program"
# Primitives that run on the host by design, and why (the report names each such step's reason).
HOST_ONLY = {"debug_callback": "effectful: ft.debug.print / callback call back into Python"}
HOST_ONLY.update({name: "effectful: a collective calls MPI on host buffers, in program order"
                  for name in ("psum", "pmax", "pmin", "all_gather", "psum_scatter", "ppermute", "all_to_all",
                               "axis_index")})
HOST_ONLY["pure_callback"] = "calls the user's Python function"

# linear algebra (the reason is what report() says): host LAPACK, fast on CPU devices; no GPU kernels yet
HOST_ONLY.update({name: "LAPACK through numpy.linalg on the host"
                  for name in ("cholesky", "triangular_solve", "lu_factor", "lu_solve", "lu", "det", "slogdet", "eigh",
                               "svd", "qr", "eig")})
HOST_ONLY["lu_pivots_to_permutation"] = "a sequential loop of row swaps"
HOST_ONLY.update({name: "no type for it in generated kernels"  # complex values: numpy (numpy.fft) on the host
                  for name in ("fft", "real", "imag", "conj", "complex")})

_X, _Y = RNG.standard_normal(5000), RNG.standard_normal(5000)
_Y[::3] = _X[::3]  # some ties for the comparisons
# Programs for the primitives that no systematic gradient case leaves in an optimized program
# (comparisons, logic, piecewise-constant ops, conversions).  Float64 (the device has
# cl_khr_fp64: float64 work on a device without it is a host step, said in the report).
EXTRA_CASES = {
    "eq": lambda x, y: fnp.where(x == y, x, y * 2), "ne": lambda x, y: x != y,
    "le": lambda x, y: x <= y, "ge": lambda x, y: x >= y,
    "and": lambda x, y: (x > 0) & (y > 0), "or": lambda x, y: (x > 0) | (y > 0),
    "xor": lambda x, y: (x > 0) ^ (y > 0), "not": lambda x, y: fnp.logical_not(x > y),
    "floor": lambda x, y: fnp.floor(x * 3), "ceil": lambda x, y: fnp.ceil(x * 3), "round": lambda x, y: fnp.rint(x * 3),
    "sign": lambda x, y: fnp.sign(x - y), "floor_div": lambda x, y: x // (fnp.abs(y) + 0.5),
    "convert_element_type": lambda x, y: (x * 4).astype(np.int32) * 3 + (y > 0).astype(np.float64),
    "debug_callback": lambda x, y: (ft.debug.callback(lambda a: None, x * y), x + y)[1],
    "axis_index": lambda x, y: x * (ft.lax.axis_index("processes") + 1.0),
    "signbit": lambda x, y: fnp.signbit(x - y),
    "pure_callback": lambda x, y: ft.pure_callback(lambda a: a * 2, ft.ShapeDtypeStruct(x.shape, x.dtype), x) + y,
}


def _random_program(x, y):
    """ft.random on OpenCL: the threefry kernel, then 64-bit words to float64 normals (shifts, or,
    bitcast, erf_inv) and 32-bit words shifted by up to 39 places (0 past the width)."""
    key = (fnp.abs(x[:2]) * 1e6).astype(np.uint32)
    words = ft.random.bits(key, (5000,))
    shifts = ft.primitives.rem_p.bind((fnp.abs(y) * 100).astype(np.uint32), np.uint32(40))
    return (ft.random.normal(key, (5000,), np.float64) + y, ft.lax.shift_left(words, shifts),
            ft.lax.shift_right_logical(words, shifts))


EXTRA_CASES.update({name: _random_program for name in
                    ("threefry2x32", "shift_left", "shift_right_logical", "bitcast_convert_type")})


def _primitive_names(closed) -> set:
    """The primitives of a program, sub-programs (cond branches, loop bodies) included."""
    names, stack = set(), [closed.jaxpr]
    while stack:
        for e in stack.pop().eqns:
            names.add(e.primitive.name)
            for v in e.params.values():
                stack.extend(s.jaxpr for s in (v if isinstance(v, tuple) else (v,)) if isinstance(s, ft.ClosedJaxpr))
    return names


def _one_case_per_primitive():
    """For every primitive in the registry, a program using it: from EXTRA_CASES, else the first
    systematic gradient case that uses it."""
    import test_grads_systematic as sysgrads

    import functrace.primitives as P
    chosen = {name: pytest.param(name, f, (_X, _Y), id=f"{name}:extra") for name, f in EXTRA_CASES.items()}
    chosen["iota"] = pytest.param("iota", lambda x: x * ft.primitives.iota(x.dtype, x.shape, 0), (_X,), id="iota")
    for param in sysgrads.CASES + sysgrads.FWD_ONLY_CASES + sysgrads.REV_ONLY_CASES:
        f, args = param.values
        try:
            names = {e.primitive.name for e in ft.make_jaxpr(f)(*args).eqns}
        except Exception:
            continue
        for n in sorted(names - set(chosen)):
            chosen[n] = pytest.param(n, f, args, id=f"{n}:{param.id}")
    return [chosen[name] for name in sorted(chosen) if name in P.registry]


@pytest.mark.parametrize("name,f,args", _one_case_per_primitive())
def test_every_primitive_runs_as_kernels_and_matches_numpy(name, f, args):
    """Each primitive's program on OpenCL (small-program and host-step shortcuts off, see
    conftest): the primitive reaches the planner, no equation runs on the host, numpy's values."""
    compiled = ft.jit(f, backend="opencl").lower(*args).compile()
    if name not in NOT_PLANNED:
        assert name in _primitive_names(compiled.closed), f"the case no longer exercises {name}"
    if name in HOST_ONLY:
        prim = ft.primitives.registry[name]
        reason = "effectful" if prim.effectful else getattr(prim, "host_step_reason", None) or HOST_ONLY[name]
        hosted = [line for line in compiled.report().splitlines() if line.strip().startswith(f"host    {name} ")]
        assert hosted and all(reason in line for line in hosted), compiled.report()
    else:
        assert compiled.num_host_steps == 0, compiled.report()
    got = ft.tree_util.tree_map(np.asarray, compiled(*args))
    want = ft.jit(f, backend="numpy")(*args)
    for g, w in zip(ft.tree_util.tree_leaves(got), ft.tree_util.tree_leaves(want)):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-10)


def test_every_primitive_and_lowering_has_an_opencl_case():
    """Registry coverage: every primitive (so every hand-written lowering) has a program above,
    and the primitives never planned are the ones listed, each with its reason."""
    import functrace.backends.opencl.executable  # noqa: F401 (imports every module of lowerings)
    import functrace.primitives as P
    from functrace.backends.opencl.lowerings import LOWERINGS
    lowered = {p.name for p in LOWERINGS}
    assert all(P.registry[p.name] is p for p in LOWERINGS)  # registered primitives, keyed by object
    covered = {p.values[0] for p in _one_case_per_primitive()}
    assert set(P.registry) - covered - set(HOST_ONLY) == set(), sorted(set(P.registry) - covered - set(HOST_ONLY))
    assert lowered <= covered, sorted(lowered - covered)
    assert set(NOT_PLANNED) <= set(P.registry) and not set(NOT_PLANNED) & lowered
    assert set(HOST_ONLY) <= set(P.registry) and not set(HOST_ONLY) & lowered


def test_device_array_arithmetic_is_eager_numpy():
    a = ft.jit(lambda x: x * 2, backend="opencl")(np.arange(4.0))
    np.testing.assert_allclose(a + 1, [1, 3, 5, 7])
    np.testing.assert_allclose(1 - a, [1, -1, -3, -5])
    np.testing.assert_allclose(a[1:3], [2, 4])
    assert float(np.sum(a)) == 12.0


def test_small_programs_run_on_the_host_of_a_cpu_device():
    ft.config.update("opencl_small_program_elements", 16384)
    f = ft.jit(lambda x: fnp.sin(x) * 2.0 + 1.0, backend="opencl")
    x = RNG.standard_normal(100)
    exe = f.lower(x).compile()
    if kind() == "cpu":  # (the cpu kind's plan)
        assert exe.num_kernel_launches == 0 and "host" in exe.report()
    out = f(x)
    assert isinstance(out, ft.Array)
    np.testing.assert_allclose(np.asarray(out), np.sin(x) * 2 + 1)
    big = RNG.standard_normal(20000)
    assert f.lower(big).compile().num_kernel_launches == 1
    np.testing.assert_allclose(np.asarray(f(big)), np.sin(big) * 2 + 1)
    np.testing.assert_allclose(np.asarray(f(out)), np.sin(np.sin(x) * 2 + 1) * 2 + 1)  # host-backed input


def test_host_results_never_alias_recycled_device_buffers():
    """On unified memory a pooled buffer is numpy memory that later kernels overwrite: results of
    host programs and host steps that are numpy views of such a buffer must be copies."""
    x = RNG.standard_normal((64, 8))
    make = ft.jit(lambda x: x * 2.0 + 1.0, backend="opencl")  # kernels: a pooled output buffer
    a = make(x)
    ft.config.update("opencl_small_program_elements", 16384)
    views = ft.jit(lambda a: (a.reshape(8, 64), a, a[:, 1:3]), backend="opencl")  # host program: numpy views
    reshaped, same, sliced = views(a)
    steps = ft.jit(lambda a: (fnp.cumsum(a.reshape(512), axis=0)[:5], a.T), backend="opencl")  # host steps
    ft.config.update("opencl_small_program_elements", 0)
    head, transposed = steps(a)
    del a
    for _ in range(3):
        make(RNG.standard_normal((64, 8)))  # reuses (overwrites) the dropped buffer
    want = x * 2.0 + 1.0
    np.testing.assert_allclose(np.asarray(reshaped), want.reshape(8, 64))
    np.testing.assert_allclose(np.asarray(same), want)
    np.testing.assert_allclose(np.asarray(sliced), want[:, 1:3])
    np.testing.assert_allclose(np.asarray(head), np.cumsum(want.reshape(512))[:5])
    np.testing.assert_allclose(np.asarray(transposed), want.T)


@pytest.mark.no_canaries
def test_inputs_dropped_right_after_the_call_stay_valid_until_kernels_ran():
    f = ft.jit(lambda x: fnp.sin(x) * x, backend="opencl")
    outs = [f(RNG.standard_normal(10000)) for _ in range(5)]  # each input dies at once
    xs = RNG.standard_normal(10000)
    out = f(xs.copy())
    np.testing.assert_allclose(np.asarray(out), np.sin(xs) * xs)
    assert all(np.all(np.isfinite(np.asarray(o))) for o in outs)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(7, 5), (127, 33), (1, 16), (4, 6, 9)])
def test_transposes_slices_and_reversals_are_views_read_by_kernels(shape, dtype):
    """No copies and no host steps: strided index arithmetic inside the fused kernels."""
    x = RNG.standard_normal(shape).astype(dtype)
    y = RNG.standard_normal(shape[::-1]).astype(dtype)

    def f(x, y):
        t = fnp.swapaxes(x, 0, -1)
        return (t * 2.0 + y, x[::2, 1:] - 1.0, fnp.flip(x, axis=0) * x, fnp.sum(fnp.flip(t, axis=-1) * y, axis=0),
                fnp.max(x[1:, ::-3], axis=-1), fnp.exp(y[..., ::2]).T)
    exe = ft.jit(f, backend="opencl").lower(x, y).compile()
    assert exe.num_host_steps == 0
    got, want = both(f, x, y)
    assert_close(got, want, dtype)


def test_debug_nans_on_opencl_kernels_names_the_primitive():
    """Kernels cannot stop at a NaN: a NaN output makes the program re-run op by op on the host,
    which raises at the primitive that made it (as JAX's debug_nans under jit)."""
    def nan_maker(x, w):
        return fnp.sum(fnp.sqrt(x @ w - 1.0) * 2.0, axis=1)
    x, w = RNG.standard_normal((9, 5)), RNG.standard_normal((5, 3))
    f = ft.jit(nan_maker, backend="opencl")
    assert f.lower(x, w).compile().num_kernel_launches >= 1
    ft.config.update("debug_nans", True)
    try:
        with pytest.raises(FloatingPointError, match="'sqrt'"):
            f(x, w)
        ok = np.abs(x) + 2.0, np.abs(w) + 1.0
        np.testing.assert_allclose(np.asarray(f(*ok)), nan_maker(*ok))
    finally:
        ft.config.update("debug_nans", False)
    with np.errstate(invalid="ignore"):
        assert np.isnan(np.asarray(f(x, w))).any()  # off: numpy semantics, NaN returned


def test_report_names_the_dtype_that_kept_an_equation_on_the_host():
    z = np.ones(300, np.complex64)
    report = ft.jit(lambda z: z * 2.0 + 1.0, backend="opencl").lower(z).compile().report()
    assert "complex64: no type for it in generated kernels" in report and "cl_khr_fp64" not in report


# --------------------------------------------------------------------------- found by fuzzing

def _same_as_numpy_backend(f, *args, rtol=1e-5):
    with np.errstate(all="ignore"):
        got, want = both(f, *args)
    for g, w in zip(ft.tree_util.tree_leaves(got), ft.tree_util.tree_leaves(want)):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol)


def test_bool_reductions_and_selects_of_fused_comparisons():
    """any/all over a fused comparison (the combine used isnan on ints: did not build) and
    where with bool branches (no select mask type for bool lanes)."""
    x = RNG.standard_normal((300, 70)).astype(np.float32)
    c, a, b = (RNG.random((300, 70)) < 0.5 for _ in range(3))
    _same_as_numpy_backend(lambda x: (fnp.any(x > 2.0, axis=1), fnp.all(x > -3.0), fnp.all(x, axis=0),
                                      fnp.any(x < -1.0, axis=0)), x)
    _same_as_numpy_backend(lambda c, a, b: (fnp.where(c, a, b), fnp.where(c, a, True),
                                            fnp.where(a, a, fnp.logical_not(a))), c, a, b)


def test_fused_max_min_reductions_keep_nan():
    """The vector accumulator kept NaN, but its lanes were folded with fmax / fmin."""
    x = RNG.standard_normal((30, 1000)).astype(np.float32)
    x[:, 5] = np.nan
    x[3] = 1.0
    _same_as_numpy_backend(lambda x: (fnp.max(x * 2, axis=-1), fnp.min(x * 2, axis=-1), fnp.max(x * 2)), x)


def test_view_next_to_a_host_step_is_planned(monkeypatch):
    """A reshape that could not be a view (here tile's broadcast) was looked up as one, next to
    the small gather's index fix-up run on the host (the default threshold, not this file's 0)."""
    monkeypatch.setattr(ft.config, "opencl_host_step_elements", None)
    x = RNG.standard_normal(20000).astype(np.float32)
    table = RNG.standard_normal((100, 16)).astype(np.float32)
    ids = RNG.integers(0, 100, 129).astype(np.int32)
    _same_as_numpy_backend(lambda x, t, i: fnp.tile(x, 2) * fnp.sum(t[i]), x, table, ids)


def test_empty_value_inside_a_batched_launch(small_steps):
    """An empty intermediate got a place in the batch's scratch buffer of size 0: no parameter."""
    def loss(a):
        v = 1 / (fnp.abs(a) + 1)
        return fnp.sum(v * (0.5 + 0.1 * v))
    _same_as_numpy_backend(ft.value_and_grad(loss), np.zeros(0), rtol=1e-12)


def test_two_products_permuting_the_same_operand_share_its_copy_kernel():
    """Two einsums whose operand k needs the same permutation emitted the copy kernel twice."""
    q1, q2, k = (RNG.standard_normal(s).astype(np.float32) for s in ((2, 16, 4, 8), (2, 5, 4, 8), (2, 16, 4, 8)))
    f = lambda q1, q2, k: (fnp.einsum("bthd,bshd->bhts", q1, k), fnp.einsum("bthd,bshd->bhts", q2, k))
    _same_as_numpy_backend(f, q1, q2, k, rtol=1e-4)


@pytest.mark.no_canaries
def test_host_memory_a_buffer_wraps_outlives_its_array_until_the_queue_ran():
    """A host-backed array (a host step's or a host-run loop body's result) whose buffer wraps its
    own memory: when the array dies, a kernel or copy still queued on that buffer may not have
    read it yet, so the memory is held until the queue has run.  Found by the fuzzer (seed 7000,
    program 1314, about 1 run in 150 under load): a scan copied each host-run body output into
    its ``ys`` with a queued copy, and the output died first; the copy read freed memory and a
    gradient came out -0.0 instead of -2.67."""
    import gc
    import weakref
    if not rt.unified:
        pytest.skip("the device does not use host memory in place")
    host = cl_runtime._aligned_empty((1024,), np.dtype(np.float32))
    host[:] = 1.0
    assert rt.wraps_host_memory(host)
    alive = weakref.ref(host)
    arr = cl_runtime.Array.from_host(rt, host)
    arr.buffer  # noqa: B018 -- a kernel's use makes the buffer, wrapping ``host``
    del host, arr
    gc.collect()
    assert alive() is not None  # what a queued command may still read
    rt.finish()
    gc.collect()
    assert alive() is None  # and no longer than that


def test_a_view_of_a_strided_host_result_reads_the_right_elements(monkeypatch):
    """A host step's reshape of a slice can be a strided numpy view (stride 2 elements here); a
    view of that value (a flip) fed to a kernel was addressed as if it were contiguous: the
    cumsum read every other element, a gradient was off by 3e3 (found by the fuzzer: seed 7000,
    program 2074).  Host results are now kept contiguous."""
    monkeypatch.setattr(ft.config, "opencl_host_step_elements", 10 ** 6)  # the reshape on the host
    s = np.random.default_rng(0).standard_normal((17, 1, 32, 2))
    f = lambda s: fnp.flip((s * 2.0)[..., 0:1].reshape(17, 1, 32), 2).cumsum(axis=2)
    jf = ft.jit(f, backend="opencl")
    np.testing.assert_allclose(np.asarray(jf(s)), np.cumsum(2.0 * s[..., ::-1, 0], axis=2), rtol=1e-12)
    report = jf.lower(s).compile().report()
    assert "kernel  cumsum" in report and ("host    reshape" in report) == (kind() == "cpu"), report
