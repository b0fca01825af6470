"""Structured control flow (``ft.lax.cond / switch / while_loop / fori_loop / scan``) against
plain Python / numpy references: pytrees, closures (over constants and over the tracers of an
enclosing grad / vmap), every transformation and their compositions, jit with traced
predicates and bounds, printing, errors, and the structural property that reverse mode
through ``scan`` does not unroll the loop in the IR.

Order-2 ``check_grads`` cases for each construct live in ``test_grads_systematic.py``.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace import lax
from functrace.test_util import numerical_grad

RNG = np.random.default_rng(1234)


def rn(*shape):
    return RNG.standard_normal(shape)




def numerical_jacobian(f, x, eps=1e-6):
    """d f(x) / d x with shape f(x).shape + x.shape (central differences)."""
    x = np.asarray(x, dtype=np.float64)
    out_shape = np.shape(f(x))
    jac = np.zeros(out_shape + x.shape)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        jac[(Ellipsis,) + i] = (np.asarray(f(x + e)) - np.asarray(f(x - e))) / (2 * eps)
    return jac


def assert_tree_allclose(got, want, **kw):
    g_leaves, g_tree = ft.tree_util.tree_flatten(got)
    w_leaves, w_tree = ft.tree_util.tree_flatten(want)
    assert g_tree == w_tree, (g_tree, w_tree)
    for g, w in zip(g_leaves, w_leaves):
        assert np.shape(g) == np.shape(w), (np.shape(g), np.shape(w))
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), **kw)


def top_level_primitives(closed):
    return [e.primitive.name for e in closed.eqns]


def all_primitives(jaxpr):
    """Primitive names in a jaxpr and, recursively, in its sub-jaxprs."""
    names = []
    for e in jaxpr.eqns:
        names.append(e.primitive.name)
        for v in e.params.values():
            for sub in (v if isinstance(v, tuple) else (v,)):
                if isinstance(sub, (ft.ClosedJaxpr, ft.Jaxpr)):
                    names += all_primitives(sub.jaxpr if isinstance(sub, ft.ClosedJaxpr) else sub)
    return names


# =========================================================================== cond / switch


def _branch_a(p):
    return {"y": p["x"] * 2.0 + p["w"][0], "n": (fnp.sum(p["w"][1]),)}


def _branch_b(p):
    return {"y": fnp.sin(p["x"]), "n": (fnp.prod(p["w"][1]),)}


def _ref_branch_a(p):
    return {"y": p["x"] * 2.0 + p["w"][0], "n": (np.sum(p["w"][1]),)}


def _ref_branch_b(p):
    return {"y": np.sin(p["x"]), "n": (np.prod(p["w"][1]),)}


@pytest.mark.parametrize("pred", [True, False])
def test_cond_pytree_operands_and_outputs(pred):
    p = {"x": rn(3), "w": (rn(3), rn(2))}
    got = lax.cond(pred, _branch_a, _branch_b, p)
    want = _ref_branch_a(p) if pred else _ref_branch_b(p)
    assert_tree_allclose(got, want, rtol=1e-12)
    # the same under jit, with the predicate traced
    jitted = ft.jit(lambda pr, p: lax.cond(pr, _branch_a, _branch_b, p))
    assert_tree_allclose(jitted(np.bool_(pred), p), want, rtol=1e-12)


def test_cond_multiple_operands_and_no_operands():
    x, y = rn(2), rn(2)
    assert np.allclose(lax.cond(True, lambda a, b: a * b, lambda a, b: a - b, x, y), x * y)
    assert np.allclose(lax.cond(False, lambda a, b: a * b, lambda a, b: a - b, x, y), x - y)
    assert float(lax.cond(False, lambda: np.float64(1.0), lambda: np.float64(2.0))) == 2.0
    f = ft.jit(lambda p: lax.cond(p, lambda: np.float64(1.0), lambda: np.float64(2.0)))
    assert float(f(np.bool_(True))) == 1.0 and float(f(np.bool_(False))) == 2.0


PREDICATES = [True, False, np.bool_(True), np.bool_(False), 0, 1, -1, 7, np.int32(0), np.int32(-3), np.int64(2)]


@pytest.mark.parametrize("pred", PREDICATES, ids=[repr(p) for p in PREDICATES])
def test_cond_bool_and_int_predicates(pred):
    """Any nonzero integer is true (as in JAX), eagerly, under jit and under vmap."""
    x = rn(2)
    want = x + 1.0 if bool(pred) else x - 1.0
    f = lambda p, x: lax.cond(p, lambda v: v + 1.0, lambda v: v - 1.0, x)
    np.testing.assert_allclose(f(pred, x), want)
    np.testing.assert_allclose(ft.jit(f)(np.asarray(pred), x), want)
    batched = ft.vmap(f, in_axes=(0, None))(np.asarray([pred, pred]), x)
    np.testing.assert_allclose(batched, np.stack([want, want]))


def test_cond_batched_integer_predicate_mixed_signs():
    preds = np.array([-2, 0, 5, 0, 1])
    xs = rn(5)
    got = ft.vmap(lambda p, x: lax.cond(p, lambda v: v * 2.0, lambda v: -v, x))(preds, xs)
    np.testing.assert_allclose(got, np.where(preds != 0, xs * 2.0, -xs))


_BRANCHES = [lambda x: x * 10.0, lambda x: fnp.sin(x), lambda x: x ** 2 - 1.0]
_REF_BRANCHES = [lambda x: x * 10.0, np.sin, lambda x: x ** 2 - 1.0]
INDICES = [-100, -1, 0, 1, 2, 3, 50]


@pytest.mark.parametrize("index", INDICES)
def test_switch_index_clamping(index):
    x = rn(3)
    want = _REF_BRANCHES[int(np.clip(index, 0, 2))](x)
    np.testing.assert_allclose(lax.switch(index, _BRANCHES, x), want)
    np.testing.assert_allclose(ft.jit(lambda i, x: lax.switch(i, _BRANCHES, x))(np.int64(index), x), want)
    np.testing.assert_allclose(ft.jit(lambda i, x: lax.switch(i, _BRANCHES, x))(np.int32(index), x), want)


def test_switch_batched_index_clamps_per_member():
    idx = np.array(INDICES)
    xs = rn(len(INDICES), 2)
    got = ft.vmap(lambda i, x: lax.switch(i, _BRANCHES, x))(idx, xs)
    want = np.stack([_REF_BRANCHES[int(np.clip(i, 0, 2))](x) for i, x in zip(idx, xs)])
    np.testing.assert_allclose(got, want)
    # batched index, unbatched operand
    x = rn(2)
    got = ft.vmap(lambda i: lax.switch(i, _BRANCHES, x))(idx)
    np.testing.assert_allclose(got, np.stack([_REF_BRANCHES[int(np.clip(i, 0, 2))](x) for i in idx]))


def test_switch_grad_through_each_branch():
    x = rn(3)
    for i in range(3):
        f = lambda v: fnp.sum(lax.switch(i, _BRANCHES, v))
        np.testing.assert_allclose(ft.grad(f)(x), numerical_grad(lambda v: np.sum(_REF_BRANCHES[i](v)), x),
                                   rtol=1e-6, atol=1e-8)



# ---- vmap of cond / switch with a batched predicate: every branch inline, then a select (as JAX)

def _sign_cond(x, w):
    return lax.cond(x > 0, lambda v: fnp.sin(v * w) * 2.0, lambda v: fnp.cos(v) * w - 1.0, x)


def _sign_cond_ref(x, w):
    return np.where(x > 0, np.sin(x * w) * 2.0, np.cos(x) * w - 1.0)


def _eqn_names(closed) -> list[str]:
    return [e.primitive.name for e in closed.jaxpr.eqns]


def test_vmap_cond_batched_predicate_is_a_select_not_a_cond_per_branch():
    """A batched predicate leaves no ``cond`` (each branch used to stay a one-branch ``cond``
    call, which kept the elementwise case from fusing); an unbatched one stays a ``cond``."""
    xs, w = rn(7), 0.8
    batched = ft.vmap(_sign_cond, in_axes=(0, None))
    names = _eqn_names(ft.make_jaxpr(batched)(xs, w))
    assert "cond" not in names and "select" in names, names
    np.testing.assert_allclose(batched(xs, w), _sign_cond_ref(xs, w), rtol=1e-12)
    np.testing.assert_allclose(ft.jit(batched)(xs, w), _sign_cond_ref(xs, w), rtol=1e-12)
    ws = rn(4)
    unbatched_pred = ft.vmap(_sign_cond, in_axes=(None, 0))
    assert "cond" in _eqn_names(ft.make_jaxpr(unbatched_pred)(np.float64(0.5), ws))
    np.testing.assert_allclose(unbatched_pred(np.float64(0.5), ws), _sign_cond_ref(0.5, ws), rtol=1e-12)


def test_vmap_cond_batched_predicate_derivatives_order_2():
    xs = np.array([-1.3, 0.7, 2.1, -0.4, 0.9])  # away from the switch at 0: both branches taken
    ws = np.array([0.5, -1.2, 0.8, 1.1, 0.3])
    ft.test_util.check_grads(ft.vmap(_sign_cond), (xs, ws), order=2, modes=("fwd", "rev"))
    ft.test_util.check_grads(ft.vmap(_sign_cond, in_axes=(0, None)), (xs, np.float64(0.7)), order=2,
                             modes=("fwd", "rev"))
    # grad of vmap (a batched predicate inside) and vmap of grad
    total = lambda w, xs: fnp.sum(ft.vmap(_sign_cond, in_axes=(0, None))(xs, w))
    want = numerical_grad(lambda w: np.sum(_sign_cond_ref(xs, w)), np.float64(0.7))
    np.testing.assert_allclose(ft.grad(total)(np.float64(0.7), xs), want, rtol=1e-6)
    np.testing.assert_allclose(ft.jit(ft.grad(total))(np.float64(0.7), xs), want, rtol=1e-6)
    per_member = ft.vmap(ft.grad(_sign_cond))(xs, ws)
    np.testing.assert_allclose(per_member, [numerical_grad(lambda x: _sign_cond_ref(x, w), x)
                                            for x, w in zip(xs, ws)], rtol=1e-6)


def test_vmap_switch_three_branches_nested_vmap_matches_python_loop():
    idx = np.array([[-3, 0, 1], [2, 9, 1]])
    xs = rn(2, 3, 4)
    ref = lambda i, x: _REF_BRANCHES[int(np.clip(i, 0, 2))](x)
    f = lambda i, x: lax.switch(i, _BRANCHES, x)
    want = np.stack([np.stack([ref(i, x) for i, x in zip(ir, xr)]) for ir, xr in zip(idx, xs)])
    nested = ft.vmap(ft.vmap(f))
    assert "cond" not in _eqn_names(ft.make_jaxpr(nested)(idx, xs))
    np.testing.assert_allclose(nested(idx, xs), want, rtol=1e-12)
    np.testing.assert_allclose(ft.jit(nested)(idx, xs), want, rtol=1e-12)
    # index batched by the outer vmap only, operands by both; batch axis not leading
    rows = np.array([0, 2, -1])
    outer_only = ft.vmap(ft.vmap(f, in_axes=(None, 0)), in_axes=(0, 1))
    want = np.stack([np.stack([ref(i, x) for x in xs[:, k]]) for k, i in enumerate(rows)])
    np.testing.assert_allclose(outer_only(rows, xs), want, rtol=1e-12)
    ft.test_util.check_grads(lambda x: nested(idx, x), (xs,), order=2, modes=("fwd", "rev"))


def test_vmap_cond_batched_predicate_runs_effects_of_every_branch(capsys):
    """With a batched predicate every branch runs (as in JAX), so a print in a branch happens for
    the whole batch, whichever branch each member takes."""
    def f(x):
        return lax.cond(x > 0, lambda v: v * 2.0, lambda v: (ft.debug.print("neg {}", v), -v)[1], x)
    xs = np.array([1.0, -2.0])
    np.testing.assert_allclose(ft.vmap(f)(xs), [2.0, 2.0])
    assert capsys.readouterr().out.split("\n")[:2] == ["neg 1.0", "neg -2.0"]


def test_vmap_cond_batched_predicate_is_one_opencl_launch():
    from functrace.backends.opencl import runtime as cl_runtime
    if cl_runtime.get_runtime() is None:
        pytest.skip("no usable OpenCL device on this machine")
    xs = rn(1001).astype(np.float32)
    f = ft.vmap(lambda x: lax.cond(x > 0, lambda v: fnp.sin(v) * 2.0, lambda v: fnp.cos(v) - 1.0, x))
    kernels_for_small_shapes = {"opencl_small_program_elements": 0, "opencl_host_step_elements": 0}
    saved = {name: getattr(ft.config, name) for name in kernels_for_small_shapes}
    for name, value in kernels_for_small_shapes.items():
        ft.config.update(name, value)
    try:
        exe = ft.jit(f, backend="opencl").lower(xs).compile()
    finally:
        for name, value in saved.items():
            ft.config.update(name, value)
    assert exe.num_kernel_launches == 1 and exe.num_host_steps == 0, exe.report()
    np.testing.assert_allclose(exe(xs), np.where(xs > 0, np.sin(xs) * 2.0, np.cos(xs) - 1.0), rtol=1e-5, atol=1e-6)

def test_cond_closure_over_outer_constants():
    table = rn(3)
    scale = 3.0

    def f(p, x):
        return lax.cond(p, lambda v: v * table, lambda v: v + table * scale, x)

    x = rn(3)
    np.testing.assert_allclose(f(True, x), x * table)
    np.testing.assert_allclose(f(False, x), x + table * scale)
    np.testing.assert_allclose(ft.jit(f)(np.bool_(False), x), x + table * scale)


def _closure_cond(w, x):
    # the branches close over ``w``, a tracer of the enclosing grad / vmap
    return lax.cond(fnp.sum(x) > 0, lambda v: fnp.sum(fnp.sin(v * w) * w),
                    lambda v: fnp.sum(v ** 2) * fnp.sum(w), x)


def _closure_cond_ref(w, x):
    return np.sum(np.sin(x * w) * w) if np.sum(x) > 0 else np.sum(x ** 2) * np.sum(w)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_cond_closure_over_outer_tracer_under_grad(sign):
    w, x = rn(3), np.abs(rn(3)) * sign
    np.testing.assert_allclose(_closure_cond(w, x), _closure_cond_ref(w, x), rtol=1e-12)
    gw, gx = ft.grad(_closure_cond, argnums=(0, 1))(w, x)
    np.testing.assert_allclose(gw, numerical_grad(lambda w_: _closure_cond_ref(w_, x), w), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gx, numerical_grad(lambda x_: _closure_cond_ref(w, x_), x), rtol=1e-6, atol=1e-8)
    # forward mode, jit of grad, and second order through the closure
    np.testing.assert_allclose(ft.jacfwd(_closure_cond)(w, x), gw, rtol=1e-10)
    np.testing.assert_allclose(ft.jit(ft.grad(_closure_cond))(w, x), gw, rtol=1e-10)
    hess = ft.hessian(_closure_cond)(w, x)
    num = numerical_jacobian(lambda w_: ft.grad(_closure_cond)(w_, x), w)
    np.testing.assert_allclose(hess, num, rtol=1e-5, atol=1e-7)


def test_cond_closure_over_outer_tracer_under_vmap():
    ws = rn(4, 3)
    xs = rn(4, 3)
    xs[:2] = np.abs(xs[:2])
    xs[2:] = -np.abs(xs[2:])  # both branches taken within one batch (a batched predicate)
    want = np.array([_closure_cond_ref(w, x) for w, x in zip(ws, xs)])
    np.testing.assert_allclose(ft.vmap(_closure_cond)(ws, xs), want, rtol=1e-12)
    # batched closure, unbatched operand (an unbatched predicate)
    x = np.abs(rn(3))
    np.testing.assert_allclose(ft.vmap(_closure_cond, in_axes=(0, None))(ws, x),
                               [_closure_cond_ref(w, x) for w in ws], rtol=1e-12)
    # unbatched closure, batched operand
    w = rn(3)
    np.testing.assert_allclose(ft.vmap(_closure_cond, in_axes=(None, 0))(w, xs),
                               [_closure_cond_ref(w, x) for x in xs], rtol=1e-12)


def test_cond_vmap_of_grad_and_grad_of_vmap():
    ws = rn(4, 3)
    xs = rn(4, 3)
    xs[::2] = np.abs(xs[::2])
    xs[1::2] = -np.abs(xs[1::2])
    per_example = ft.vmap(ft.grad(_closure_cond))(ws, xs)
    want = np.stack([numerical_grad(lambda w_: _closure_cond_ref(w_, x), w) for w, x in zip(ws, xs)])
    np.testing.assert_allclose(per_example, want, rtol=1e-6, atol=1e-8)
    w = rn(3)
    total = lambda w, xs: fnp.sum(ft.vmap(_closure_cond, in_axes=(None, 0))(w, xs))
    want = numerical_grad(lambda w_: sum(_closure_cond_ref(w_, x) for x in xs), w)
    np.testing.assert_allclose(ft.grad(total)(w, xs), want, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(ft.jit(ft.grad(total))(w, xs), want, rtol=1e-6, atol=1e-8)


def test_cond_int_outputs_pass_through_differentiation():
    f = lambda x: lax.cond(x > 0, lambda v: (v * 3.0, np.int64(1)), lambda v: (v, np.int64(2)), x)
    (y, k), (ty, tk) = ft.jvp(f, (np.float64(2.0),), (np.float64(1.0),))
    assert (float(y), int(k), float(ty), int(tk)) == (6.0, 1, 3.0, 0)
    assert float(ft.grad(lambda x: f(x)[0])(np.float64(-2.0))) == 1.0


def test_cond_branch_structure_mismatch_names_both_functions():
    def returns_pair(x):
        return x, x

    def returns_one(x):
        return x

    with pytest.raises(TypeError, match=r"returns_one.*returns_pair|returns_pair.*returns_one") as e:
        lax.cond(True, returns_pair, returns_one, 1.0)
    assert "true_fun" in str(e.value) and "false_fun" in str(e.value)


def test_cond_branch_dtype_and_shape_mismatch_names_both_functions():
    def keep(x):
        return x

    def to_f32(x):
        return x.astype(np.float32)

    def first_only(x):
        return x[:1]

    with pytest.raises(TypeError) as e:
        lax.cond(True, keep, to_f32, np.ones(2))
    msg = str(e.value)
    assert "keep" in msg and "to_f32" in msg and "f32[2]" in msg and "f64[2]" in msg
    with pytest.raises(TypeError) as e:
        ft.jit(lambda p, x: lax.cond(p, keep, first_only, x))(np.bool_(True), np.ones(2))
    msg = str(e.value)
    assert "keep" in msg and "first_only" in msg and "f64[1]" in msg
    # switch names the offending branch by position
    with pytest.raises(TypeError, match=r"branches\[0\].*keep.*branches\[2\].*first_only"):
        lax.switch(0, [keep, keep, first_only], np.ones(2))


def test_cond_non_scalar_predicate_error():
    with pytest.raises(TypeError, match=r"scalar.*bool\[2\]"):
        lax.cond(np.array([True, False]), lambda x: x, lambda x: x, 1.0)
    with pytest.raises(TypeError, match="scalar"):
        ft.jit(lambda x: lax.cond(x > 0, lambda v: v, lambda v: -v, x))(np.ones(3))
    with pytest.raises(TypeError, match=r"switch index.*scalar"):
        lax.switch(np.array([0, 1]), [lambda x: x, lambda x: x], 1.0)


def test_cond_float_predicate_and_switch_float_index_errors():
    with pytest.raises(TypeError, match=r"cond predicate.*boolean or integer.*f64"):
        lax.cond(1.0, lambda x: x, lambda x: x, 1.0)
    with pytest.raises(TypeError, match=r"switch index.*integer"):
        lax.switch(np.float64(1.0), [lambda x: x, lambda x: x], 1.0)
    with pytest.raises(ValueError, match="at least one branch"):
        lax.switch(0, [], 1.0)


def test_cond_under_jit_traces_once_for_both_predicate_values():
    calls = []

    def f(x):
        calls.append(1)
        return lax.cond(fnp.sum(x) > 0, lambda v: fnp.exp(v), lambda v: fnp.cos(v) * 2.0, x)

    jf = ft.jit(f)
    pos, neg = np.abs(rn(3)), -np.abs(rn(3))
    np.testing.assert_allclose(jf(pos), np.exp(pos))
    np.testing.assert_allclose(jf(neg), np.cos(neg) * 2.0)
    assert len(calls) == 1 and jf.cache_size() == 1


def test_jit_cond_with_python_scalar_operands():
    """Python floats are valid jit arguments (weakly typed), including as cond operands."""
    f = ft.jit(lambda p, x: lax.cond(p, lambda v: v ** 2, lambda v: v * 3.0, x))
    assert float(f(True, 3.0)) == 9.0
    assert float(f(False, 3.0)) == 9.0


# =========================================================================== while_loop


def _while_pytree(x, w):
    """Carry: a dict with an int counter and a tuple of floats; the body closes over ``w``."""
    def cond_fun(c):
        return (c["i"] < 6) & (fnp.sum(c["v"][0] ** 2) < 1e6)

    def body_fun(c):
        a, b = c["v"]
        return {"i": c["i"] + 1, "v": (a * 1.3 + w * b, fnp.sin(b) + a * 0.1)}

    return lax.while_loop(cond_fun, body_fun, {"i": 0, "v": (x, x * 0.5)})


def _while_pytree_ref(x, w):
    i, a, b = 0, x, x * 0.5
    while i < 6 and np.sum(a ** 2) < 1e6:
        i, a, b = i + 1, a * 1.3 + w * b, np.sin(b) + a * 0.1
    return {"i": i, "v": (a, b)}


def test_while_loop_pytree_carry_and_closure():
    x, w = rn(3), rn(3)
    out = _while_pytree(x, w)
    want = _while_pytree_ref(x, w)
    assert int(out["i"]) == want["i"] == 6
    assert_tree_allclose(out["v"], want["v"], rtol=1e-12)
    out_j = ft.jit(_while_pytree)(x, w)
    assert int(out_j["i"]) == 6
    assert_tree_allclose(out_j["v"], want["v"], rtol=1e-12)


def test_while_loop_early_exit_value_dependent():
    # the trip count depends on the data: stops when the norm bound is hit
    w = np.ones(3)
    for scale, trips in ((500.0, 1), (200.0, 3), (100.0, 5)):
        x = np.full(3, scale)
        out, want = _while_pytree(x, w), _while_pytree_ref(x, w)
        assert int(out["i"]) == want["i"] == trips
        assert_tree_allclose(out["v"], want["v"], rtol=1e-12)
    x = np.full(3, 200.0)
    out, want = ft.jit(_while_pytree)(x, w), _while_pytree_ref(x, w)
    assert int(out["i"]) == want["i"] == 3
    assert_tree_allclose(out["v"], want["v"], rtol=1e-12)


def test_while_loop_jvp_and_jacfwd():
    x, w = rn(3), rn(3)
    f = lambda x: _while_pytree(x, w)["v"][0]
    f_ref = lambda x: _while_pytree_ref(x, w)["v"][0]
    t = rn(3)
    y, ty = ft.jvp(f, (x,), (t,))
    np.testing.assert_allclose(y, f_ref(x), rtol=1e-12)
    np.testing.assert_allclose(ty, numerical_jacobian(f_ref, x) @ t, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(ft.jacfwd(f)(x), numerical_jacobian(f_ref, x), rtol=1e-6, atol=1e-8)
    # differentiating the closed-over value
    g = lambda w_: _while_pytree(x, w_)["v"][1]
    g_ref = lambda w_: _while_pytree_ref(x, w_)["v"][1]
    np.testing.assert_allclose(ft.jacfwd(g)(w), numerical_jacobian(g_ref, w), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(ft.jit(ft.jacfwd(g))(w), numerical_jacobian(g_ref, w), rtol=1e-6, atol=1e-8)


def test_while_loop_forward_over_forward():
    f = lambda x: lax.while_loop(lambda c: c[0] < 4, lambda c: (c[0] + 1, fnp.sin(c[1]) * c[1] + c[1]), (0, x))[1]

    def f_ref(x):
        for _ in range(4):
            x = np.sin(x) * x + x
        return x

    x = rn(2)
    h = ft.jacfwd(ft.jacfwd(f))(x)
    num = numerical_jacobian(lambda z: numerical_jacobian(f_ref, z, eps=1e-5), x, eps=1e-5)
    np.testing.assert_allclose(h, num, rtol=1e-4, atol=1e-6)


def _steps_to_exceed(x, limit):
    """How many doublings (plus one) until ``v`` reaches ``limit``: differs per member."""
    return lax.while_loop(lambda c: c[1] < limit, lambda c: (c[0] + 1, c[1] * 2.0 + 1.0), (0, x))


def _steps_to_exceed_ref(x, limit):
    n, v = 0, x
    while v < limit:
        n, v = n + 1, v * 2.0 + 1.0
    return n, v


def test_while_loop_vmap_batched_predicate_members_finish_at_different_iterations():
    xs = np.array([0.1, 3.0, 20.0, 1.0, -0.5, 9.9])
    n, v = ft.vmap(_steps_to_exceed, in_axes=(0, None))(xs, 10.0)
    want = [_steps_to_exceed_ref(x, 10.0) for x in xs]
    assert [int(k) for k in n] == [w[0] for w in want]
    assert len({w[0] for w in want}) > 2  # members really stop at different iterations
    np.testing.assert_allclose(v, [w[1] for w in want])
    # batched limit (the predicate's closure) and batched init together, under jit
    limits = np.array([1.0, 50.0, 5.0, 1000.0, 3.0, 10.0])
    n, v = ft.jit(ft.vmap(_steps_to_exceed))(xs, limits)
    want = [_steps_to_exceed_ref(x, lim) for x, lim in zip(xs, limits)]
    assert [int(k) for k in n] == [w[0] for w in want]
    np.testing.assert_allclose(v, [w[1] for w in want])
    # only the limit batched: the carry starts unbatched and becomes batched
    n, v = ft.vmap(_steps_to_exceed, in_axes=(None, 0))(np.float64(0.5), limits)
    want = [_steps_to_exceed_ref(0.5, lim) for lim in limits]
    assert [int(k) for k in n] == [w[0] for w in want]
    np.testing.assert_allclose(v, [w[1] for w in want])


def test_while_loop_vmap_of_jvp_with_batched_predicate():
    xs = np.array([0.1, 3.0, 20.0, 1.0])
    f = lambda x: _steps_to_exceed(x, 10.0)[1]
    tangents = ft.vmap(lambda x: ft.jvp(f, (x,), (np.float64(1.0),))[1])(xs)
    # d v / d x = 2 ** (number of doublings)
    want = [2.0 ** _steps_to_exceed_ref(x, 10.0)[0] for x in xs]
    np.testing.assert_allclose(tangents, want)
    np.testing.assert_allclose(ft.vmap(ft.jacfwd(f))(xs), want)


def test_while_loop_reverse_mode_raises_pointing_to_scan_and_fori_loop():
    f = lambda x: fnp.sum(_while_pytree(x, np.ones(3))["v"][0])
    for transform in (ft.grad, ft.jacrev, lambda g: (lambda x: ft.vjp(g, x)), ft.hessian):
        with pytest.raises(NotImplementedError) as e:
            transform(f)(rn(3))
        msg = str(e.value)
        assert "while_loop" in msg and "scan" in msg and "fori_loop" in msg
    with pytest.raises(NotImplementedError, match="scan"):
        ft.jit(ft.grad(f))(rn(3))


def test_while_loop_cond_fun_must_return_boolean_scalar():
    def counts_down(c):
        return c

    with pytest.raises(TypeError, match="counts_down.*boolean scalar"):
        lax.while_loop(counts_down, lambda c: c - 1, 3)
    with pytest.raises(TypeError, match=r"boolean scalar.*bool\[2\]"):
        lax.while_loop(lambda c: c > 0, lambda c: c - 1.0, np.ones(2))


def test_while_loop_body_must_keep_carry_type():
    def shrinks(c):
        return c[:1]

    def restructures(c):
        return (c, c)

    with pytest.raises(TypeError, match=r"shrinks.*f64\[1\].*f64\[2\]"):
        lax.while_loop(lambda c: fnp.sum(c) < 3.0, shrinks, np.ones(2))
    with pytest.raises(TypeError, match="restructures.*structure"):
        lax.while_loop(lambda c: fnp.sum(c) < 3.0, restructures, np.ones(2))


def test_while_loop_python_scalar_carry_is_weakly_typed():
    # 1.0 starts weakly typed and follows the float32 value it is combined with (as in JAX)
    i, v = lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * np.float32(2.0)), (0, 1.0))
    assert int(i) == 3 and np.asarray(v).dtype == np.float32 and float(v) == 8.0


# =========================================================================== fori_loop


def _fori_body(i, v):
    return fnp.sin(v) * 0.9 + v * 0.2 + i * 0.1


def _fori_ref(lo, hi, v):
    for i in range(lo, hi):
        v = np.sin(v) * 0.9 + v * 0.2 + i * 0.1
    return v


@pytest.mark.parametrize("lo, hi", [(0, 5), (2, 7), (3, 3), (5, 2), (-2, 1)])
def test_fori_loop_static_bounds_matches_python_loop(lo, hi):
    x = rn(3)
    np.testing.assert_allclose(lax.fori_loop(lo, hi, _fori_body, x), _fori_ref(lo, hi, x), rtol=1e-12)
    np.testing.assert_allclose(ft.jit(lambda x: lax.fori_loop(lo, hi, _fori_body, x))(x), _fori_ref(lo, hi, x),
                               rtol=1e-12)


def test_fori_loop_static_bounds_is_a_scan_and_reverse_differentiable():
    x = rn(3)
    f = lambda x: fnp.sum(lax.fori_loop(0, 6, _fori_body, x) ** 2)
    f_ref = lambda x: np.sum(_fori_ref(0, 6, x) ** 2)
    closed = ft.make_jaxpr(f)(x)
    assert "scan" in top_level_primitives(closed) and "while" not in top_level_primitives(closed)
    want = numerical_grad(f_ref, x)
    np.testing.assert_allclose(ft.grad(f)(x), want, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(ft.jit(ft.grad(f))(x), want, rtol=1e-6, atol=1e-8)
    jac = ft.jacrev(lambda x: lax.fori_loop(0, 6, _fori_body, x))(x)
    np.testing.assert_allclose(jac, numerical_jacobian(lambda x: _fori_ref(0, 6, x), x), rtol=1e-6, atol=1e-8)
    # a closed-over weight, differentiated in reverse mode
    g = lambda w: fnp.sum(lax.fori_loop(0, 4, lambda i, v: fnp.tanh(v * w + i), x))

    def g_ref(w):
        v = x
        for i in range(4):
            v = np.tanh(v * w + i)
        return np.sum(v)

    w = rn(3)
    np.testing.assert_allclose(ft.grad(g)(w), numerical_grad(g_ref, w), rtol=1e-6, atol=1e-8)


def test_fori_loop_bounds_concrete_inside_grad():
    # bounds computed from shapes (concrete values) keep the reverse-differentiable path
    def f(x):
        return fnp.sum(lax.fori_loop(0, x.shape[0], lambda i, v: v * fnp.cos(v), x))

    x = rn(4)
    ref = lambda x: np.sum(_loop_cos(x, 4))
    np.testing.assert_allclose(ft.grad(f)(x), numerical_grad(ref, x), rtol=1e-6, atol=1e-8)


def _loop_cos(v, n):
    for _ in range(n):
        v = v * np.cos(v)
    return v


def test_fori_loop_traced_bounds_under_jit_is_a_while_loop():
    calls = []

    def f(n, x):
        calls.append(1)
        return lax.fori_loop(1, n, _fori_body, x)

    x = rn(3)
    jf = ft.jit(f)
    for n in (0, 1, 4, 9):
        np.testing.assert_allclose(jf(np.int64(n), x), _fori_ref(1, n, x), rtol=1e-12)
    assert len(calls) == 1  # one trace serves every trip count
    closed = jf.lower(np.int64(3), x).jaxpr
    assert "while" in top_level_primitives(closed) and "scan" not in top_level_primitives(closed)
    # forward mode works through the while loop; reverse mode raises the while_loop error
    t = rn(3)
    _, ty = ft.jvp(lambda x: jf(np.int64(5), x), (x,), (t,))
    np.testing.assert_allclose(ty, numerical_jacobian(lambda x: _fori_ref(1, 5, x), x) @ t, rtol=1e-6, atol=1e-8)
    with pytest.raises(NotImplementedError, match="fori_loop with static"):
        ft.grad(lambda x: fnp.sum(jf(np.int64(5), x)))(x)


def test_fori_loop_vmap_over_traced_upper_bound():
    ns = np.array([0, 2, 3, 6])
    got = ft.vmap(lambda n: lax.fori_loop(0, n, lambda i, v: v + i * i, 0))(ns)
    assert [int(g) for g in got] == [sum(i * i for i in range(n)) for n in ns]


def test_fori_loop_index_dtype_follows_bounds():
    # Python-int bounds give a weakly typed index: a float32 / int32 carry keeps its dtype
    out = lax.fori_loop(0, 4, lambda i, v: v + i, np.float32(0.5))
    assert out.dtype == np.float32 and float(out) == 6.5
    out = ft.jit(lambda n: lax.fori_loop(0, n, lambda i, v: v * 0.5 + i, np.float32(1.0)))(3)
    assert out.dtype == np.float32 and float(out) == 2.625
    out = lax.fori_loop(0, 4, lambda i, v: v + i, np.int32(1))
    assert out.dtype == np.int32 and int(out) == 7
    # int32 bounds give an int32 index
    dtypes = []
    lax.fori_loop(np.int32(0), np.int32(2), lambda i, v: (dtypes.append(i.dtype), v)[1], 0.0)
    assert dtypes == [np.dtype(np.int32)]
    out = ft.jit(lambda n: lax.fori_loop(0, n, lambda i, v: v + i, np.int32(0)))(np.int32(5))
    assert out.dtype == np.int32 and int(out) == 10


def test_fori_loop_non_integer_bounds_error():
    with pytest.raises(TypeError, match="integer"):
        lax.fori_loop(0.0, 3.5, lambda i, v: v + i, 0.0)
    with pytest.raises(TypeError, match="integer"):
        ft.jit(lambda n: lax.fori_loop(0, n, lambda i, v: v + 1.0, 0.0))(np.float64(3.0))


def test_fori_loop_body_error_names_body():
    def my_fori_body(i, v):
        return v[:1]

    with pytest.raises(TypeError, match="my_fori_body"):
        lax.fori_loop(0, 3, my_fori_body, np.ones(2))


# =========================================================================== scan


def _scan_body(c, x):
    a, b = c["a"], c["b"]
    na = a * x["u"] + b
    nb = fnp.sin(b) + x["v"][0]
    return {"a": na, "b": nb}, (na * 2.0, {"s": fnp.sum(nb)})


def _scan_ref(init, xs, reverse=False):
    a, b = init["a"], init["b"]
    n = xs["u"].shape[0]
    ys1, ys2 = [None] * n, [None] * n
    for i in (reversed(range(n)) if reverse else range(n)):
        a, b = a * xs["u"][i] + b, np.sin(b) + xs["v"][0][i]
        ys1[i], ys2[i] = a * 2.0, np.sum(b)
    return {"a": a, "b": b}, (np.stack(ys1), {"s": np.stack(ys2)})


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_pytree_carry_and_xs(reverse):
    init = {"a": rn(2), "b": rn(2)}
    xs = {"u": rn(5, 2), "v": (rn(5, 2),)}
    got = lax.scan(_scan_body, init, xs, reverse=reverse)
    want = _scan_ref(init, xs, reverse)
    assert_tree_allclose(got, want, rtol=1e-12)
    assert got[1][0].shape == (5, 2) and got[1][1]["s"].shape == (5,)
    got_j = ft.jit(lambda i, x: lax.scan(_scan_body, i, x, reverse=reverse))(init, xs)
    assert_tree_allclose(got_j, want, rtol=1e-12)


def test_scan_xs_none_with_length():
    carry, ys = lax.scan(lambda c, _: (c * 2.0 + 1.0, c), np.float64(1.0), None, length=4)
    assert float(carry) == 31.0
    np.testing.assert_allclose(ys, [1.0, 3.0, 7.0, 15.0])
    carry, ys = lax.scan(lambda c, _: (c + 1, (c, c * 10)), np.zeros(2), None, length=3, reverse=True)
    np.testing.assert_allclose(carry, [3.0, 3.0])
    np.testing.assert_allclose(ys[0], [[2.0, 2.0], [1.0, 1.0], [0.0, 0.0]])  # stacked in xs order
    # length agrees with xs
    carry, _ = lax.scan(lambda c, x: (c + x, None), np.float64(0.0), np.arange(3.0), length=3)
    assert float(carry) == 3.0


@pytest.mark.parametrize("unroll", [1, 4, True, False])
def test_scan_accepts_jaxs_unroll(unroll):
    """JAX's ``unroll=`` is accepted (same values, eagerly and under jit); a wrong one is refused."""
    body = lambda c, x: (c * 0.5 + x, c)  # noqa: E731
    want = lax.scan(body, np.float64(1.0), np.arange(5.0))
    for got in (lax.scan(body, np.float64(1.0), np.arange(5.0), unroll=unroll),
                ft.jit(lambda x: lax.scan(body, np.float64(1.0), x, unroll=unroll))(np.arange(5.0))):
        assert_tree_allclose(got, want, rtol=0)
    with pytest.raises(ValueError, match="unroll must be"):
        lax.scan(body, np.float64(1.0), np.arange(5.0), unroll=-1)


def test_scan_reverse_matches_reversed_python_loop():
    xs = rn(6, 3)
    carry, ys = lax.scan(lambda c, x: (c * 0.5 + x, fnp.sum(c * x)), np.zeros(3), xs, reverse=True)
    c, want_ys = np.zeros(3), np.zeros(6)
    for i in range(5, -1, -1):
        want_ys[i] = np.sum(c * xs[i])
        c = c * 0.5 + xs[i]
    np.testing.assert_allclose(carry, c, rtol=1e-12)
    np.testing.assert_allclose(ys, want_ys, rtol=1e-12)


def test_scan_ys_stacking_shapes_and_dtypes():
    xs = np.arange(12.0).reshape(4, 3)
    carry, ys = lax.scan(lambda c, x: (c + 1, {"row": x * c, "n": c, "k": (x > 4.0)}), np.int64(0), xs)
    assert int(carry) == 4
    assert ys["row"].shape == (4, 3) and ys["n"].shape == (4,) and ys["k"].shape == (4, 3)
    assert ys["k"].dtype == np.bool_ and ys["n"].dtype == np.int64
    np.testing.assert_allclose(ys["row"], xs * np.arange(4)[:, None])
    # no ys at all
    carry, ys = lax.scan(lambda c, x: (c + x, None), np.float64(1.0), np.ones(3))
    assert float(carry) == 4.0 and ys is None
    # a zero-length scan
    carry, ys = lax.scan(lambda c, x: (c + x, c * 2.0), np.ones(2), np.zeros((0, 2)))
    np.testing.assert_allclose(carry, np.ones(2))
    assert ys.shape == (0, 2)


def test_scan_python_scalar_init_is_weakly_typed():
    carry, ys = lax.scan(lambda c, x: (c + x, c), 0.0, np.arange(3, dtype=np.float32))
    assert carry.dtype == np.float32 and ys.dtype == np.float32 and float(carry) == 3.0
    carry, _ = lax.scan(lambda c, x: (c + x, None), 0, np.arange(4, dtype=np.int32))
    assert carry.dtype == np.int32 and int(carry) == 6


def test_scan_errors():
    def no_pair(c, x):
        return c

    def changes_carry(c, x):
        return c[:1], x

    with pytest.raises(ValueError, match="length"):
        lax.scan(lambda c, x: (c, c), 1.0, None)
    with pytest.raises(ValueError, match=r"\[3, 4\]"):
        lax.scan(lambda c, x: (c, c), 1.0, np.zeros(3), length=4)
    with pytest.raises(ValueError, match=r"\[2, 3\]"):
        lax.scan(lambda c, x: (c, c), 1.0, (np.zeros(3), np.zeros(2)))
    with pytest.raises(TypeError, match=r"no_pair.*pair \(carry, y\)"):
        lax.scan(no_pair, np.ones(2), np.ones(3))
    with pytest.raises(TypeError, match=r"changes_carry.*f64\[1\].*f64\[2\]"):
        lax.scan(changes_carry, np.ones(2), np.ones(3))


def _scan_loss(w, xs):
    c, ys = lax.scan(lambda c, x: (fnp.tanh(c * w + x), c * x), fnp.zeros(2), xs)
    return fnp.sum(c) + fnp.sum(ys ** 2)


def _scan_loss_ref(w, xs):
    c, total = np.zeros(2), 0.0
    for x in xs:
        total += np.sum((c * x) ** 2)
        c = np.tanh(c * w + x)
    return np.sum(c) + total


def test_scan_grad_jacfwd_jacrev_hessian_match_numerical():
    w, xs = rn(2), rn(5, 2)
    want = numerical_grad(lambda w_: _scan_loss_ref(w_, xs), w)
    np.testing.assert_allclose(ft.grad(_scan_loss)(w, xs), want, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(ft.jacfwd(_scan_loss)(w, xs), want, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(ft.jacrev(_scan_loss)(w, xs), want, rtol=1e-6, atol=1e-8)
    gxs = ft.grad(_scan_loss, argnums=1)(w, xs)
    np.testing.assert_allclose(gxs, numerical_grad(lambda x_: _scan_loss_ref(w, x_), xs), rtol=1e-6, atol=1e-8)
    hess = ft.hessian(_scan_loss)(w, xs)
    num = numerical_jacobian(lambda w_: ft.grad(_scan_loss)(w_, xs), w)
    np.testing.assert_allclose(hess, num, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(hess, hess.T, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ft.jacrev(ft.jacrev(_scan_loss))(w, xs), hess, rtol=1e-10, atol=1e-12)
    # grad of grad (reverse over reverse)
    gg = ft.grad(lambda w_: fnp.sum(ft.grad(_scan_loss)(w_, xs) ** 2))(w)
    num = numerical_grad(lambda w_: np.sum(np.asarray(ft.grad(_scan_loss)(w_, xs)) ** 2), w)
    np.testing.assert_allclose(gg, num, rtol=1e-5, atol=1e-7)


def test_scan_grad_with_respect_to_pytree_init_and_xs():
    init = {"a": rn(2), "b": rn(2)}
    xs = {"u": rn(4, 2), "v": (rn(4, 2),)}

    def loss(init, xs):
        c, (y1, y2) = lax.scan(_scan_body, init, xs)
        return fnp.sum(c["a"] * c["b"]) + fnp.sum(y1 ** 2) + fnp.sum(y2["s"])

    def loss_ref(init, xs):
        c, (y1, y2) = _scan_ref(init, xs)
        return np.sum(c["a"] * c["b"]) + np.sum(y1 ** 2) + np.sum(y2["s"])

    g_init, g_xs = ft.grad(loss, argnums=(0, 1))(init, xs)
    for k in ("a", "b"):
        want = numerical_grad(lambda v: loss_ref({**init, k: v}, xs), init[k])
        np.testing.assert_allclose(g_init[k], want, rtol=1e-6, atol=1e-8)
    want = numerical_grad(lambda v: loss_ref(init, {**xs, "u": v}), xs["u"])
    np.testing.assert_allclose(g_xs["u"], want, rtol=1e-6, atol=1e-8)
    want = numerical_grad(lambda v: loss_ref(init, {**xs, "v": (v,)}), xs["v"][0])
    np.testing.assert_allclose(g_xs["v"][0], want, rtol=1e-6, atol=1e-8)


def test_scan_with_integer_carry_and_xs_under_grad():
    # an int counter in the carry and int xs (indices) alongside float values
    table = rn(5)

    def f(w):
        def step(c, i):
            k, acc = c
            return (k + 1, acc * w + fnp.take(table, i) * k), acc
        (k, acc), ys = lax.scan(step, (np.int64(0), np.float64(1.0)), np.array([4, 0, 2, 2]))
        return acc + fnp.sum(ys)

    def f_ref(w):
        k, acc, total = 0, 1.0, 0.0
        for i in [4, 0, 2, 2]:
            total += acc
            k, acc = k + 1, acc * w + table[i] * k
        return acc + total

    w = np.float64(0.7)
    np.testing.assert_allclose(f(w), f_ref(w), rtol=1e-12)
    np.testing.assert_allclose(ft.grad(f)(w), numerical_grad(f_ref, w), rtol=1e-6)


def test_scan_vmap_batched_xs_init_and_closure():
    w, xs = rn(2), rn(5, 2)
    W, XS = rn(3, 2), rn(3, 5, 2)
    np.testing.assert_allclose(ft.vmap(_scan_loss, in_axes=(None, 0))(w, XS),
                               [_scan_loss_ref(w, x) for x in XS], rtol=1e-12)
    np.testing.assert_allclose(ft.vmap(_scan_loss, in_axes=(0, None))(W, xs),  # batched closure
                               [_scan_loss_ref(w_, xs) for w_ in W], rtol=1e-12)
    np.testing.assert_allclose(ft.vmap(_scan_loss)(W, XS), [_scan_loss_ref(a, b) for a, b in zip(W, XS)], rtol=1e-12)

    def g(init, xs):
        return lax.scan(lambda c, x: (c * x + 1.0, c), init, xs)

    def g_ref(init, xs):
        c, ys = init, []
        for x in xs:
            ys.append(c)
            c = c * x + 1.0
        return c, np.stack(ys)

    inits, xs1 = rn(4), rn(3)
    c, ys = ft.vmap(g, in_axes=(0, None))(inits, xs1)  # batched init only
    for k in range(4):
        wc, wys = g_ref(inits[k], xs1)
        np.testing.assert_allclose(c[k], wc, rtol=1e-12)
        np.testing.assert_allclose(ys[k], wys, rtol=1e-12)
    xs2 = rn(3, 4)  # batched along axis 1, out_axes=1 for ys
    c, ys = ft.vmap(g, in_axes=(None, 1), out_axes=(0, 1))(np.float64(0.5), xs2)
    for k in range(4):
        wc, wys = g_ref(0.5, xs2[:, k])
        np.testing.assert_allclose(c[k], wc, rtol=1e-12)
        np.testing.assert_allclose(ys[:, k], wys, rtol=1e-12)


def test_scan_grad_of_vmap_and_vmap_of_grad():
    w, XS = rn(2), rn(3, 5, 2)
    per_example = ft.vmap(ft.grad(_scan_loss), in_axes=(None, 0))(w, XS)
    want = np.stack([numerical_grad(lambda w_: _scan_loss_ref(w_, x), w) for x in XS])
    np.testing.assert_allclose(per_example, want, rtol=1e-6, atol=1e-8)
    total = lambda w, XS: fnp.sum(ft.vmap(_scan_loss, in_axes=(None, 0))(w, XS))
    np.testing.assert_allclose(ft.grad(total)(w, XS), want.sum(0), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(ft.jit(ft.grad(total))(w, XS), want.sum(0), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(ft.jit(ft.vmap(ft.grad(_scan_loss), in_axes=(None, 0)))(w, XS), want,
                               rtol=1e-6, atol=1e-8)


def test_jit_of_grad_of_scan():
    w, xs = rn(2), rn(5, 2)
    jg = ft.jit(ft.grad(_scan_loss))
    np.testing.assert_allclose(jg(w, xs), ft.grad(_scan_loss)(w, xs), rtol=1e-12)
    np.testing.assert_allclose(jg(w * 2.0, xs), ft.grad(_scan_loss)(w * 2.0, xs), rtol=1e-12)
    assert jg.cache_size() == 1
    names = top_level_primitives(jg.lower(w, xs).jaxpr)
    assert names.count("scan") >= 2  # the forward scan and the reversed backward scan
    np.testing.assert_allclose(ft.grad(ft.jit(_scan_loss))(w, xs), ft.grad(_scan_loss)(w, xs), rtol=1e-12)


def _long_scan(x, n):
    c, ys = lax.scan(lambda c, _: (fnp.sin(c) * 1.1 + 0.1, c * c), x, None, length=n)
    return fnp.sum(c) + fnp.sum(ys)


def test_reverse_mode_through_scan_does_not_unroll():
    x = rn(3)
    sizes = {}
    for n in (5, 50):
        closed = ft.make_jaxpr(ft.grad(_long_scan), static_argnums=1)(x, n)
        names = top_level_primitives(closed)
        sizes[n] = (len(closed.eqns), len(all_primitives(closed.jaxpr)))
        assert len(closed.eqns) <= 12, str(closed)
        scans = [e for e in closed.eqns if e.primitive.name == "scan"]
        assert any(e.params["reverse"] for e in scans), names
        assert all(e.params["length"] == n for e in scans)
        assert names.count("sin") == 0  # the body stays inside the scans
    assert sizes[5] == sizes[50]  # independent of the trip count
    # the same through fori_loop with static bounds, and under jit
    for n in (5, 50):
        closed = ft.jit(ft.grad(lambda x: fnp.sum(lax.fori_loop(0, n, lambda i, v: fnp.sin(v) * 1.1, x)))).lower(x).jaxpr
        sizes[("fori", n)] = len(closed.eqns)
        assert any(e.primitive.name == "scan" and e.params["reverse"] for e in closed.eqns)
    assert sizes[("fori", 5)] == sizes[("fori", 50)]
    # and the long scan's gradient is right
    x0 = np.array([0.3, -0.2, 0.5])
    np.testing.assert_allclose(ft.grad(_long_scan)(x0, 50), numerical_grad(lambda z: _long_scan(z, 50), x0),
                               rtol=1e-5, atol=1e-8)


def _sub_jaxprs(jaxpr):
    for e in jaxpr.eqns:
        for v in e.params.values():
            for sub in (v if isinstance(v, tuple) else (v,)):
                if isinstance(sub, ft.ClosedJaxpr):
                    yield e.primitive.name, sub
                    yield from _sub_jaxprs(sub.jaxpr)


def test_differentiated_sub_jaxprs_have_no_dead_equations():
    """The jit optimizer does not enter sub-jaxprs, so the rules must not leave dead work
    there (e.g. the forward half of a body's vjp that the backward pass does not read)."""
    from functrace.transforms.optimize import dce

    def f(w, xs):
        y = lax.cond(w[0] > 0, lambda v: fnp.sin(v) * v, lambda v: fnp.exp(v), w)
        return _scan_loss(y, xs)

    w, xs = np.abs(rn(2)), rn(4, 2)
    for transform in (ft.grad, ft.jacfwd, ft.hessian):
        closed = ft.make_jaxpr(transform(f))(w, xs)
        subs = list(_sub_jaxprs(closed.jaxpr))
        assert {"cond", "scan"} <= {name for name, _ in subs}
        for name, sub in subs:
            assert len(dce(sub).eqns) == len(sub.eqns), (name, str(sub))


def test_reverse_scan_gradient_of_reverse_scan():
    # reverse=True forward pass: the backward scan runs forwards
    def f(w):
        c, ys = lax.scan(lambda c, x: (c * w + x, c * x), np.float64(0.5), np.arange(1.0, 5.0), reverse=True)
        return c + fnp.sum(ys)

    def f_ref(w):
        c, total = 0.5, 0.0
        for x in [4.0, 3.0, 2.0, 1.0]:
            total += c * x
            c = c * w + x
        return c + total

    np.testing.assert_allclose(f(0.3), f_ref(0.3), rtol=1e-12)
    np.testing.assert_allclose(ft.grad(f)(np.float64(0.3)), numerical_grad(f_ref, np.float64(0.3)), rtol=1e-6)
    closed = ft.make_jaxpr(ft.grad(f))(np.float64(0.3))
    assert sorted(e.params["reverse"] for e in closed.eqns if e.primitive.name == "scan") == [False, True]


# =========================================================================== printing


def test_printing_shows_sub_jaxprs():
    def f(x, n):
        a = lax.cond(x[0] > 0, lambda v: fnp.sin(v), lambda v: fnp.cos(v), x)
        b = lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, fnp.tanh(c[1])), (0, a))[1]
        c, ys = lax.scan(lambda c, y: (c * y, fnp.exp(c)), b, np.ones((2, 2)) * x, reverse=True)
        d = lax.fori_loop(0, n, lambda i, v: fnp.log1p(v * v), c)
        return d

    text = str(ft.make_jaxpr(f)(rn(2), np.int64(2)))
    for piece in ("cond", "branches[0]=", "branches[1]=", "sin", "cos",
                  "while", "cond_jaxpr=", "body_jaxpr=", "tanh", "lt",
                  "scan", "reverse=True", "length=2", "jaxpr=", "exp", "log1p"):
        assert piece in text, (piece, text)
    # sub-jaxprs are indented under their equation
    assert re.search(r"\n {6}branches\[0\]=\n {8}\{ lambda", text), text
    # the jit-optimized IR prints its sub-jaxprs too, and renders as HTML
    lowered = ft.jit(f).lower(rn(2), np.int64(2))
    assert "body_jaxpr=" in lowered.as_text() and "branches[1]=" in lowered.as_text()
    assert "<pre>" in ft.make_jaxpr(f)(rn(2), np.int64(2))._repr_html_()


def test_printing_grad_of_scan_shows_both_scans():
    text = str(ft.make_jaxpr(ft.grad(_long_scan), static_argnums=1)(rn(3), 7))
    assert "reverse=False" in text and "reverse=True" in text and "length=7" in text
    assert "cos" in text  # the body's derivative, inside the backward scan


# =========================================================================== jit and concretization


def test_control_flow_under_jit_with_traced_predicates():
    def f(x, k):
        y = lax.cond(fnp.max(x) > 1.0, lambda v: v / fnp.max(v), lambda v: v, x)
        z = lax.switch(k, [lambda v: v + 1.0, lambda v: v * 3.0, lambda v: -v], y)
        return lax.while_loop(lambda v: fnp.sum(v) < 10.0, lambda v: fnp.abs(v) * 2.0 + 0.5, z)

    def f_ref(x, k):
        y = x / np.max(x) if np.max(x) > 1.0 else x
        z = [y + 1.0, y * 3.0, -y][int(np.clip(k, 0, 2))]
        while np.sum(z) < 10.0:
            z = np.abs(z) * 2.0 + 0.5
        return z

    jf = ft.jit(f)
    for x in (np.array([0.2, 0.3]), np.array([5.0, 2.0]), np.array([0.9, -0.1])):
        for k in (-1, 0, 1, 2, 4):
            np.testing.assert_allclose(jf(x, np.int64(k)), f_ref(x, k), rtol=1e-12)
    assert jf.cache_size() == 1


def test_python_if_on_traced_value_under_jit_raises_concretization_error():
    def relu_with_if(x):
        if x > 0:
            return x
        return x * 0.0

    with pytest.raises(ft.ConcretizationError) as e:
        ft.jit(relu_with_if)(np.float64(1.0))
    msg = str(e.value)
    assert "ft.lax.cond" in msg and "relu_with_if" in msg
    assert re.search(r"test_control_flow\.py:\d+", msg)
    with pytest.raises(ft.ConcretizationError, match="ft.lax.cond"):
        ft.make_jaxpr(relu_with_if)(np.float64(1.0))
    # the same logic with lax.cond works under jit, and grad of the Python version works eagerly
    relu_cond = lambda x: lax.cond(x > 0, lambda v: v, lambda v: v * 0.0, x)
    assert float(ft.jit(relu_cond)(np.float64(2.0))) == 2.0
    assert float(ft.jit(relu_cond)(np.float64(-2.0))) == 0.0
    assert float(ft.grad(relu_with_if)(np.float64(2.0))) == 1.0


def test_python_loop_on_traced_bound_under_jit_raises_concretization_error():
    def loop_n(x, n):
        for _ in range(n):
            x = x * 2.0
        return x

    with pytest.raises(ft.ConcretizationError, match="ft.lax"):
        ft.jit(loop_n)(np.float64(1.0), np.int64(3))
    assert float(ft.jit(loop_n, static_argnums=1)(np.float64(1.0), 3)) == 8.0
