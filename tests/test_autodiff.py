"""Transformations: grad/vjp/jvp/linearize/jacobians on pytrees, nesting, dtypes, control flow."""
import collections

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.test_util import check_grads, numerical_grad


def test_mlp_grad_matches_pytree_and_numbers():
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((3, 2)), "b": rng.standard_normal(2)}
    x, y = rng.standard_normal((5, 3)), rng.standard_normal((5, 2))
    loss = lambda p, x, y: fnp.mean((fnp.tanh(x @ p["w"] + p["b"]) - y) ** 2)
    g = ft.grad(loss)(params, x, y)
    assert set(g) == {"w", "b"} and g["w"].shape == (3, 2) and g["b"].shape == (2,)
    for k in params:
        def partial(v, k=k):
            p = dict(params)
            p[k] = v
            return float(loss(p, x, y))
        np.testing.assert_allclose(g[k], numerical_grad(partial, params[k]), rtol=1e-6, atol=1e-8)


def test_hessian_matches_analytic():
    f = lambda x: fnp.sum(fnp.sin(x) * x ** 3)
    x = np.linspace(0.3, 1.2, 4)
    want = np.diag(-np.sin(x) * x ** 3 + 6 * np.cos(x) * x ** 2 + 6 * x * np.sin(x))
    np.testing.assert_allclose(ft.hessian(f)(x), want, rtol=1e-10)


def test_hessian_dense_matches_numerical():
    A = np.random.default_rng(1).standard_normal((4, 4))
    f = lambda x: fnp.sum(fnp.tanh(A @ x) ** 2) + 0.5 * fnp.sum(x ** 4)
    x = np.random.default_rng(2).standard_normal(4)
    H = ft.hessian(f)(x)
    num = np.stack([numerical_grad(lambda z: float(ft.grad(f)(z)[i]), x) for i in range(4)])
    np.testing.assert_allclose(H, num, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(H, H.T, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ft.jacrev(ft.jacfwd(f))(x), H, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ft.jacrev(ft.jacrev(f))(x), H, rtol=1e-10, atol=1e-12)


def test_third_derivative_by_nesting_grad():
    f = lambda x: fnp.sin(x) * x
    d3 = ft.grad(ft.grad(ft.grad(f)))(0.7)
    assert np.isclose(d3, -np.cos(0.7) * 0.7 - 3 * np.sin(0.7))
    d4 = ft.grad(ft.grad(ft.grad(ft.grad(fnp.exp))))(0.3)
    assert np.isclose(d4, np.exp(0.3))


def test_forward_over_reverse_hvp():
    f = lambda x: fnp.sum(x ** 3 * fnp.cos(x))
    x, v = np.array([0.1, 0.5, 1.0]), np.array([1.0, -2.0, 0.5])
    g, hvp = ft.jvp(ft.grad(f), (x,), (v,))
    np.testing.assert_allclose(hvp, ft.hessian(f)(x) @ v, rtol=1e-10)
    np.testing.assert_allclose(g, ft.grad(f)(x), rtol=1e-12)


@pytest.mark.parametrize("outer", ["grad", "jvp"])
def test_perturbation_confusion(outer):
    # d/dx [x * d/dy (x + y)] = d/dx [x * 1] = 1; a confused implementation gives 2.
    def f(x):
        return x * ft.grad(lambda y: x + y)(1.0)
    if outer == "grad":
        assert ft.grad(f)(3.0) == 1.0
    else:
        assert ft.jvp(f, (3.0,), (1.0,))[1] == 1.0
    # the classic Siskind–Pearlmutter example with nested jvp
    def g(x):
        inner = lambda y: x + y
        return x * ft.jvp(inner, (1.0,), (1.0,))[1]
    assert ft.jvp(g, (3.0,), (1.0,))[1] == 1.0


def test_grad_argnums_tuple_and_has_aux():
    f = lambda a, b: (fnp.sum(a * b ** 2), {"aux": a + 1})
    a, b = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    (ga, gb), aux = ft.grad(f, argnums=(0, 1), has_aux=True)(a, b)
    np.testing.assert_allclose(ga, b ** 2)
    np.testing.assert_allclose(gb, 2 * a * b)
    np.testing.assert_allclose(aux["aux"], a + 1)
    (val, aux2), g = ft.value_and_grad(f, argnums=1, has_aux=True)(a, b)
    assert np.isclose(val, np.sum(a * b ** 2))
    np.testing.assert_allclose(g, 2 * a * b)


def test_pytree_nodes_list_tuple_namedtuple_registered():
    Pair = collections.namedtuple("Pair", "x y")

    class Box:
        def __init__(self, v):
            self.v = v
    ft.tree_util.register_pytree_node(Box, lambda b: ((b.v,), None), lambda _, c: Box(c[0]))
    p = [np.array(1.0), (np.array([2.0, 3.0]), Pair(np.array(4.0), Box(np.array(5.0))))]
    f = lambda p: p[0] * fnp.sum(p[1][0]) + p[1][1].x ** 2 * p[1][1].y.v
    g = ft.grad(f)(p)
    assert isinstance(g, list) and isinstance(g[1][1], Pair) and isinstance(g[1][1].y, Box)
    assert g[0] == 5.0
    np.testing.assert_allclose(g[1][0], [1.0, 1.0])
    assert g[1][1].x == 2 * 4.0 * 5.0 and g[1][1].y.v == 16.0
    leaves, tree = ft.tree_util.tree_flatten(p)
    assert len(leaves) == 4
    rebuilt = ft.tree_util.tree_unflatten(tree, leaves)
    assert rebuilt[1][1].y.v == 5.0
    doubled = ft.tree_util.tree_map(lambda v: v * 2, {"a": 1, "b": (2, 3)})
    assert doubled == {"a": 2, "b": (4, 6)}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_preserved(dtype):
    x = np.linspace(0.1, 1, 5).astype(dtype)
    f = lambda x: fnp.sum(fnp.tanh(x) * 2.0 + x ** 2 / 3 + fnp.exp(-x) * fnp.sqrt(x))
    assert f(x).dtype == dtype
    assert ft.grad(f)(x).dtype == dtype
    assert ft.hessian(f)(x).dtype == dtype
    _, t = ft.jvp(f, (x,), (np.ones_like(x),))
    assert np.asarray(t).dtype == dtype
    closed = ft.make_jaxpr(ft.grad(f))(x)
    assert all(v.aval.dtype == dtype for e in closed.eqns for v in e.out_vars if v.aval.dtype.kind == "f")


def test_python_control_flow_under_grad_with_concrete_values():
    def f(x):
        if x > 0:
            return x ** 2
        return -x * 3.0
    assert ft.grad(f)(2.0) == 4.0
    assert ft.grad(f)(-1.0) == -3.0

    def loop(x):
        y = x
        while fnp.abs(y) < 100:
            y = y * 3
        return y
    assert ft.grad(loop)(2.0) == 81.0
    assert ft.grad(ft.grad(f))(2.0) == 2.0


def test_stop_gradient():
    f = lambda x: x * ft.stop_gradient(x) ** 2
    assert ft.grad(f)(3.0) == 9.0
    assert ft.grad(ft.grad(lambda x: ft.stop_gradient(x ** 3) + x ** 2))(2.0) == 2.0


def test_vjp_and_linearize():
    f = lambda x, y: (fnp.sin(x) * y, x ** 2)
    x, y = np.array([0.1, 0.2]), np.array([3.0, 4.0])
    out, pull = ft.vjp(f, x, y)
    cx, cy = pull((np.ones(2), np.ones(2)))
    np.testing.assert_allclose(cx, np.cos(x) * y + 2 * x)
    np.testing.assert_allclose(cy, np.sin(x))
    out2, f_jvp = ft.linearize(lambda x: fnp.sin(x) * x, x)
    np.testing.assert_allclose(out2, np.sin(x) * x)
    np.testing.assert_allclose(f_jvp(np.ones(2)), np.cos(x) * x + np.sin(x))
    np.testing.assert_allclose(f_jvp(np.array([2.0, 0.0])), [2 * (np.cos(0.1) * 0.1 + np.sin(0.1)), 0.0])


def test_linearize_does_not_recompute_primal():
    calls = []

    def f(x):
        calls.append(1)
        return fnp.sin(x)
    _, f_jvp = ft.linearize(f, np.ones(3))
    n = len(calls)
    f_jvp(np.ones(3))
    f_jvp(np.ones(3))
    assert len(calls) == n


def test_jacobians_of_pytree_inputs_and_outputs():
    f = lambda p: {"a": p["x"] * p["y"][0], "b": fnp.sum(p["x"] ** 2)}
    p = {"x": np.array([1.0, 2.0, 3.0]), "y": np.array([2.0, 5.0])}
    for jac in (ft.jacfwd, ft.jacrev):
        J = jac(f)(p)
        np.testing.assert_allclose(J["a"]["x"], np.diag([2.0, 2.0, 2.0]))
        np.testing.assert_allclose(J["a"]["y"], [[1, 0], [2, 0], [3, 0]])
        np.testing.assert_allclose(J["b"]["x"], 2 * p["x"])
        np.testing.assert_allclose(J["b"]["y"], [0, 0])


def test_jacobian_argnums():
    f = lambda a, b: a * b[0]
    a, b = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    ja, jb = ft.jacrev(f, argnums=(0, 1))(a, b)
    np.testing.assert_allclose(ja, 3 * np.eye(2))
    np.testing.assert_allclose(jb, [[1, 0], [2, 0]])
    np.testing.assert_allclose(ft.jacfwd(f, argnums=1)(a, b), jb)


def test_long_chain_no_recursion_error():
    def f(x):
        for _ in range(5000):
            x = fnp.sin(x) * 0.999 + 0.001
        return fnp.sum(x)
    g = ft.grad(f)(np.ones(2))
    assert np.all(np.isfinite(g))
    closed = ft.make_jaxpr(ft.grad(f))(np.ones(2))
    assert len(closed.eqns) > 10000


def test_check_grads_detects_a_wrong_rule():
    import functrace.primitives as P
    saved = P.sin_p.vjp
    P.sin_p.vjp = [lambda g, ans, x: P.mul(g, P.sin(x))]  # deliberately wrong
    try:
        with pytest.raises(AssertionError):
            check_grads(fnp.sin, (np.array([0.3, 0.5]),), order=1, modes=("rev",))
    finally:
        P.sin_p.vjp = saved
    check_grads(fnp.sin, (np.array([0.3, 0.5]),), order=2)


def test_grad_of_closure_over_outer_tracer_in_hessian():
    def f(x):
        g = ft.grad(lambda y: fnp.sum(x * y ** 2))
        return fnp.sum(g(x))
    x = np.array([1.0, 2.0])
    # f(x) = sum(2 x^2) -> grad = 4x
    np.testing.assert_allclose(ft.grad(f)(x), 4 * x)


def test_deeply_nested_pytrees():
    """A pytree nested 5,000 deep hit RecursionError in tree_flatten; every walk is a loop now."""
    deep = np.ones(2)
    for _ in range(5000):
        deep = [deep]

    def innermost(t):
        while isinstance(t, list):
            t = t[0]
        return t
    leaves, tree = ft.tree_util.tree_flatten(deep)
    assert len(leaves) == 1 and tree == ft.tree_util.tree_structure(deep) and hash(tree) == hash(
        ft.tree_util.tree_structure(deep)) and repr(tree).startswith("PyTreeDef(list[None](PyTreeDef(")
    assert innermost(ft.tree_util.tree_unflatten(tree, [3.0])) == 3.0
    assert innermost(ft.tree_util.tree_map(lambda v: v * 2, deep)).tolist() == [2.0, 2.0]
    assert float(ft.jit(lambda t: fnp.sum(innermost(t)), backend="numpy")(deep)) == 2.0
    g = ft.grad(lambda t: fnp.sum(innermost(t) ** 2))(deep)
    assert innermost(g).tolist() == [2.0, 2.0]


def test_pytree_structures_compare_and_print():
    Pair = collections.namedtuple("Pair", "x y")
    Other = collections.namedtuple("Other", "x y")
    s = ft.tree_util.tree_structure
    assert s((1, [2, None])) == s((5, [6, None])) and s((1, [2, None])) != s((1, [2]))
    assert s(Pair(1, 2)) != s(Other(1, 2)) and s({"a": 1}) != s({"b": 1}) and s(1) != s((1,))
    assert repr(s((1, [2, None], {"k": 3}))) == ("PyTreeDef(tuple[None](*, PyTreeDef(list[None](*, "
                                                 "PyTreeDef(NoneType[None]()))), PyTreeDef(dict[('k',)](*))))")
    assert repr(s(1)) == "*"
    with pytest.raises(ValueError, match="has 2 leaves, got 3"):
        ft.tree_util.tree_unflatten(s((1, 2)), [1, 2, 3])


# Complex derivatives follow JAX's convention: a real function's gradient with respect to a
# complex input is df/dx - i df/dy (the transpose of the linear map, no conjugation), and with
# holomorphic=True grad / jacfwd / jacrev give the complex derivative.  The numbers below are
# JAX 0.10.2's (x64); test_complex_derivatives_match_jax_live recomputes them when jax is installed.
_Z = np.array([1 + 2j, 0.5 - 1j])


def _pair(m):
    return lambda z: m.stack([z[0] * z[1], z[0] ** 2 + m.sin(z[1])])


def _complex_cases(api, m):
    """(name, thunk) pairs computing each case with ``api`` (ft or jax) and ``m`` (fnp or jnp)."""
    return [
        ("grad |z|^2", lambda: api.grad(lambda z: m.abs(z) ** 2)(1 + 1j)),
        ("grad re z^2", lambda: api.grad(lambda z: m.real(z ** 2))(1 + 2j)),
        ("grad im z^2", lambda: api.grad(lambda z: m.imag(z ** 2))(1 + 2j)),
        ("grad sum |z|^2 re z", lambda: api.grad(lambda z: m.sum(m.abs(z) ** 2 * m.real(z)))(_Z)),
        ("grad holomorphic z^2", lambda: api.grad(lambda z: z ** 2, holomorphic=True)(1 + 2j)),
        ("grad holomorphic sin", lambda: api.grad(m.sin, holomorphic=True)(0.5 + 0.3j)),
        ("value_and_grad holomorphic", lambda: api.value_and_grad(lambda z: z ** 3, holomorphic=True)(1 - 1j)),
        ("vjp complex cotangent", lambda: api.vjp(lambda z: z ** 2, 1 + 2j)[1](1j)),
        ("jacfwd holomorphic", lambda: api.jacfwd(_pair(m), holomorphic=True)(_Z)),
        ("jacrev holomorphic", lambda: api.jacrev(_pair(m), holomorphic=True)(_Z)),
        ("jacrev of a real function", lambda: api.jacrev(lambda z: m.abs(z) ** 2)(_Z)),
        ("hessian holomorphic", lambda: api.hessian(lambda z: m.sum(z ** 3), holomorphic=True)(_Z)),
        ("grad of jit", lambda: api.grad(api.jit(lambda z: m.abs(z) ** 2))(1 + 1j)),
        ("jit of grad", lambda: api.jit(api.grad(lambda z: m.abs(z) ** 2))(1 + 1j)),
    ]


_COMPLEX_WANT = {
    "grad |z|^2": 2 - 2j,
    "grad re z^2": 2 + 4j,
    "grad im z^2": 4 - 2j,
    "grad sum |z|^2 re z": np.array([7 - 4j, 1.75 + 1j]),
    "grad holomorphic z^2": 2 + 4j,
    "grad holomorphic sin": 0.917370851271881 - 0.14599480570180629j,  # cos(0.5 + 0.3j)
    "value_and_grad holomorphic": (-2 - 2j, -6j),
    "vjp complex cotangent": (-4 + 2j,),
    "jacfwd holomorphic": np.array([[0.5 - 1j, 1 + 2j], [2 + 4j, np.cos(0.5 - 1j)]]),  # cos: 1.35418066+0.56342147j
    "jacrev holomorphic": np.array([[0.5 - 1j, 1 + 2j], [2 + 4j, np.cos(0.5 - 1j)]]),
    "jacrev of a real function": np.array([[2 - 4j, 0], [0, 1 + 2j]]),
    "hessian holomorphic": np.array([[6 + 12j, 0], [0, 3 - 6j]]),
    "grad of jit": 2 - 2j,
    "jit of grad": 2 - 2j,
}


def _assert_close(got, want):
    if isinstance(want, tuple):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _assert_close(g, w)
        return
    got = np.asarray(got)
    assert got.dtype == np.complex128, got.dtype
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", sorted(_COMPLEX_WANT))
def test_complex_derivatives_follow_jax(name):
    thunk = dict(_complex_cases(ft, fnp))[name]
    _assert_close(thunk(), _COMPLEX_WANT[name])


def test_complex_derivatives_match_jax_live(jax_x64):
    import jax.numpy as jnp
    for name, thunk in _complex_cases(jax_x64, jnp):
        want = thunk()
        want = tuple(np.asarray(w) for w in want) if isinstance(want, tuple) else np.asarray(want)
        _assert_close(dict(_complex_cases(ft, fnp))[name](), want)
        _assert_close(want, _COMPLEX_WANT[name])


def test_grad_of_a_complex_output_raises_instead_of_taking_its_real_part():
    def phase(x):
        return fnp.exp(1j * x)
    with pytest.raises(TypeError, match=r"grad of `.*phase` requires real-valued outputs \(output dtype is complex128\); "
                                        r"for holomorphic functions pass holomorphic=True"):
        ft.grad(phase)(1.0)
    assert ft.grad(lambda x: fnp.real(fnp.exp(1j * x)))(1.0) == pytest.approx(-np.sin(1.0))


def test_hessian_with_aux_as_jax():
    f = lambda x: (fnp.sum(x ** 3), {"s": fnp.sum(x)})
    h, aux = ft.hessian(f, has_aux=True)(np.array([1.0, 2.0]))
    np.testing.assert_allclose(h, [[6.0, 0.0], [0.0, 12.0]])
    assert float(aux["s"]) == 3.0
