"""jit: one trace per signature, composition with every transformation, lowering and errors."""
import re

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.backends.opencl import get_runtime


def test_traced_once_per_signature():
    traces = []

    def f(x, y):
        traces.append(1)
        return fnp.sin(x) * y

    jf = ft.jit(f)
    x = np.ones(3)
    np.testing.assert_allclose(jf(x, 2.0), np.sin(x) * 2)
    jf(x + 1, 3.0)
    assert len(traces) == 1
    jf(np.ones(4), 2.0)                       # new shape
    assert len(traces) == 2
    jf(np.ones(4, np.float32), 2.0)           # new dtype
    assert len(traces) == 3
    jf(np.ones(4, np.float32), np.float32(2))  # strong float32 scalar instead of a weak Python float
    assert len(traces) == 4
    jf(np.ones(4), 5.0)
    assert len(traces) == 4 and jf.cache_size() == 4


def test_pytree_structure_is_part_of_signature():
    traces = []

    def f(p):
        traces.append(1)
        return sum(fnp.sum(v) for v in ft.tree_util.tree_leaves(p))
    jf = ft.jit(f)
    assert jf({"a": np.ones(2)}) == 2.0
    assert jf({"a": np.ones(2), "b": np.ones(3)}) == 5.0
    assert jf({"a": np.zeros(2)}) == 0.0
    assert len(traces) == 2


def test_static_argnums_and_argnames():
    traces = []

    def f(x, n, *, mode="sin"):
        traces.append(1)
        y = x ** n
        return fnp.sin(y) if mode == "sin" else fnp.cos(y)
    jf = ft.jit(f, static_argnums=1, static_argnames="mode")
    x = np.array([0.5, 1.5])
    np.testing.assert_allclose(jf(x, 2), np.sin(x ** 2))
    np.testing.assert_allclose(jf(x, 3), np.sin(x ** 3))
    np.testing.assert_allclose(jf(x, 3, mode="cos"), np.cos(x ** 3))
    jf(x * 2, 3, mode="cos")
    assert len(traces) == 3
    with pytest.raises(TypeError, match="hashable"):
        ft.jit(lambda x, s: x, static_argnums=1)(x, [1, 2])


def test_decorator_forms():
    @ft.jit
    def f(x):
        return x * 2

    @ft.jit(static_argnums=(1,))
    def g(x, k):
        return x * k
    assert f(3.0) == 6.0 and g(3.0, 4) == 12.0


@pytest.mark.parametrize("order", ["grad(jit)", "jit(grad)", "jit(grad(jit))"])
def test_grad_and_jit_compose_in_both_orders(order):
    f = lambda w, x: fnp.sum(fnp.tanh(x @ w) ** 2)
    w, x = np.random.default_rng(0).standard_normal((3, 2)), np.random.default_rng(1).standard_normal((4, 3))
    want = ft.grad(f)(w, x)
    g = {"grad(jit)": ft.grad(ft.jit(f)), "jit(grad)": ft.jit(ft.grad(f)),
         "jit(grad(jit))": ft.jit(ft.grad(ft.jit(f)))}[order]
    np.testing.assert_allclose(g(w, x), want, rtol=1e-12)


def test_vmap_jit_hessian_compositions():
    f = lambda x: fnp.sum(fnp.sin(x) * x ** 2)
    xs = np.random.default_rng(0).standard_normal((5, 3))
    np.testing.assert_allclose(ft.vmap(ft.jit(f))(xs), [f(x) for x in xs])
    np.testing.assert_allclose(ft.jit(ft.vmap(f))(xs), [f(x) for x in xs])
    np.testing.assert_allclose(ft.jit(ft.hessian(f))(xs[0]), ft.hessian(f)(xs[0]), rtol=1e-12)
    np.testing.assert_allclose(ft.hessian(ft.jit(f))(xs[0]), ft.hessian(f)(xs[0]), rtol=1e-12)
    np.testing.assert_allclose(ft.jit(ft.jit(f))(xs[0]), f(xs[0]))
    per_example = ft.jit(ft.vmap(ft.grad(lambda w, x: fnp.sum(w * x) ** 2), in_axes=(None, 0)))
    w = np.ones(3)
    np.testing.assert_allclose(per_example(w, xs), [2 * np.sum(w * x) * x for x in xs])


def test_jit_closing_over_an_outer_tracer():
    # the inner jitted function closes over x, a tracer of the outer grad
    g = ft.grad(lambda x: ft.jit(lambda y: x * y ** 2)(3.0))
    assert g(2.0) == 9.0
    assert g(5.0) == 9.0


def test_lower_exposes_optimized_ir_and_report():
    f = lambda x: fnp.sum(fnp.exp(x) * 1.0 + 0.0)
    lowered = ft.jit(ft.grad(f)).lower(np.ones(3))
    text = str(lowered.jaxpr)
    assert "exp" in text and "mul" not in text  # x*1 and +0 are simplified away
    report = lowered.report()
    names = [n for n, _ in report.counts]
    assert names == ["input", "fold_constants", "simplify", "cse", "dce", "merge_psums"]
    assert report.counts[-1][1] < report.counts[0][1]
    assert "peak live intermediate bytes" in str(report)
    exe = lowered.compile()
    np.testing.assert_allclose(exe(np.zeros(3)), np.ones(3))


def test_value_dependent_control_flow_under_jit_names_function_and_line():
    def relu_branch(x):
        if fnp.sum(x) > 0:
            return x
        return -x
    with pytest.raises(ft.ConcretizationError) as e:
        ft.jit(relu_branch)(np.ones(2))
    msg = str(e.value)
    assert "relu_branch" in msg and "ft.lax.cond" in msg and "fnp.where" in msg
    assert re.search(r"test_jit\.py:\d+", msg)


@pytest.mark.parametrize("backend", ["numpy", None])
def test_outputs_are_arrays_and_pytrees(backend):
    out = ft.jit(lambda x: {"a": x * 2, "b": (x + 1, x.sum())}, backend=backend)(np.arange(3.0))
    # numpy backend: numpy arrays; default (OpenCL when a device exists): device arrays
    assert isinstance(out["a"], np.ndarray if backend == "numpy" or get_runtime() is None else ft.Array)
    np.testing.assert_allclose(out["b"][0], [1, 2, 3])
    assert float(out["b"][1]) == 3.0 and int(out["b"][1]) == 3 and bool(out["b"][1])
    assert list(range(10))[ft.jit(lambda: np.int64(4) + 0, backend=backend)()] == 4


def test_float32_stays_float32_under_jit_grad():
    f = lambda w: fnp.mean(fnp.tanh(w * 3.0) ** 2)
    g = ft.jit(ft.grad(f))(np.ones(4, np.float32))
    assert g.dtype == np.float32


def test_unknown_backend():
    with pytest.raises(ValueError, match="unknown backend"):
        ft.jit(lambda x: x, backend="tpu")(1.0)


def test_a_leaf_that_is_not_an_array_is_named():
    with pytest.raises(TypeError, match=r"jit of `<lambda>`: str is not a valid array type"):
        ft.jit(lambda d: d["a"] * 2)({"a": "hello"})


@pytest.mark.parametrize("backend", ["numpy", "opencl"])
def test_compiled_checks_its_signature_and_returns_the_output_tree(backend):
    """As JAX's Compiled: other shapes or dtypes than lowered for raise instead of misreading."""
    def loss_parts(p, x):
        return {"sum": fnp.sum(p["w"] * x), "scaled": p["w"] * 2.0}
    p, x = {"w": np.arange(4.0)}, np.ones(4)
    exe = ft.jit(loss_parts, backend=backend).lower(p, x).compile()
    out = exe(p, x)
    assert set(out) == {"sum", "scaled"} and float(np.asarray(out["sum"])) == 6.0
    assert exe.num_kernel_launches >= 0 and "peak live intermediate bytes" in exe.report()
    for bad in (({"w": np.arange(7.0)}, np.ones(7)), (p, np.ones(4, np.float32)), ({"v": p["w"]}, x)):
        with pytest.raises(TypeError, match=r"loss_parts.*lowered for arguments \(float64\[4\], float64\[4\]\)"):
            exe(*bad)


@pytest.mark.parametrize("backend", ["numpy", "opencl"])
def test_results_do_not_alias_the_callers_arrays(backend):
    """Identity, reshape and slices return new arrays: changing the input later changes no result."""
    x = np.arange(6.0)
    outs = ft.jit(lambda t: (t, fnp.reshape(t, (2, 3)), t[1:4]), backend=backend)(x)
    x[:] = -1.0
    np.testing.assert_array_equal(np.asarray(outs[0]), np.arange(6.0))
    np.testing.assert_array_equal(np.asarray(outs[1]), np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(np.asarray(outs[2]), [1.0, 2.0, 3.0])


@pytest.mark.parametrize("backend", ["numpy", "opencl"])
def test_results_do_not_alias_an_argument_that_is_a_view(backend):
    """Arguments that are views (of an array the caller keeps): results viewing the same memory
    are copies too, whichever view of it they are."""
    base = np.arange(8.0)
    outs = ft.jit(lambda t, u: (t[1:3], fnp.reshape(u, (2, 3)), t * 2), backend=backend)(base[2:], base[:6])
    base[:] = -1.0
    np.testing.assert_array_equal(np.asarray(outs[0]), [3.0, 4.0])
    np.testing.assert_array_equal(np.asarray(outs[1]), np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(np.asarray(outs[2]), np.arange(2.0, 8.0) * 2)


def test_python_int_argument_out_of_range_for_the_array_dtype_raises():
    """numpy raises OverflowError for ``int32_array * 2**40``; the jitted conversion must not wrap."""
    def scale(a, s):
        return a * s
    with pytest.raises(OverflowError, match=r"scale.*1099511627776.*int32"):
        ft.jit(scale)(np.ones(3, np.int32), 2**40)
    with pytest.raises(OverflowError, match=r"scale.*-1.*uint8"):
        ft.jit(scale)(np.ones(3, np.uint8), -1)
    np.testing.assert_array_equal(np.asarray(ft.jit(scale)(np.ones(3, np.int32), 5)), [5, 5, 5])


@pytest.mark.parametrize("backend", ["numpy", "opencl"])
def test_constant_outputs_are_returned_by_value(backend):
    """A constant output was returned by reference: changing the returned array changed every
    later call's result (and the captured array itself)."""
    c = np.arange(3.0)
    programs = [lambda x: c, lambda x: (x * 2, fnp.reshape(c, (3, 1))), lambda x: fnp.zeros_like(x) + 1.0,
                lambda x: fnp.asarray(np.float64(5.0))]
    for f in programs:
        jf = ft.jit(f, backend=backend)
        first = [np.asarray(v) for v in ft.tree_util.tree_leaves(jf(np.ones(3)))]
        want = [v.copy() for v in first]
        for v in first:
            v[...] = -7.0
        for got, w in zip(ft.tree_util.tree_leaves(jf(np.ones(3))), want):
            np.testing.assert_array_equal(np.asarray(got), w)
    assert c.tolist() == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("backend", ["eager", "numpy", "opencl"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_sum_of_a_huge_broadcast_is_exact_and_instant(backend, dtype):
    """A float32 sum over a 1e12-element broadcast saturated at 2^36 on OpenCL (per-lane float32
    accumulators stop growing at 2^24 additions) and took minutes; it is count * value, rounded
    once (numpy's pairwise sum is within an ulp of that), on every backend and in reverse mode."""
    import time
    x = np.array([0.1, 0.2, 0.3]).astype(dtype) if dtype != np.int64 else np.array([1, -2, 3 << 20])
    huge = (10 ** 6, 10 ** 6, 3)
    total = lambda v: fnp.sum(fnp.broadcast_to(v, huge), axis=(0, 1))
    mean = lambda v: fnp.mean(fnp.broadcast_to(v[1:], huge[:2] + (2,)))
    run = (lambda f: f) if backend == "eager" else (lambda f: ft.jit(f, backend=backend))
    start = time.perf_counter()
    got = np.asarray(run(total)(x))
    want = (x.astype(np.float64) * 1e12).astype(dtype) if dtype != np.int64 else x * 10 ** 12
    np.testing.assert_array_equal(got, want)
    assert got.dtype == dtype
    if dtype != np.int64:
        assert np.asarray(run(mean)(x)) == np.asarray(x[1:].mean(dtype=dtype))
        g = np.asarray(run(ft.grad(lambda v: fnp.sum(total(v))))(x))
        np.testing.assert_array_equal(g, np.full(3, 1e12, dtype))
    assert time.perf_counter() - start < 5.0


@pytest.mark.parametrize("backend", ["numpy", "opencl"])
def test_captured_array_is_fixed_when_traced(backend):
    """As in JAX: changing a captured numpy array in place after tracing does not change what the
    compiled program computes (it used to read the caller's array by reference)."""
    w = np.arange(6.0).reshape(2, 3)
    f = ft.jit(lambda x: fnp.sum(x * w), backend=backend)
    x = np.ones((2, 3))
    assert float(f(x)) == 15.0
    w[:] = 100.0
    assert float(f(x)) == 15.0
