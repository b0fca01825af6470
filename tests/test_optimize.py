"""IR passes: each one does its job and preserves the program's values."""
import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.transforms.optimize import cse, dce, fold_constants, optimize, partial_eval, simplify

RNG = np.random.default_rng(0)


def names(closed):
    return [e.primitive.name for e in closed.eqns]


def trace_raw(f, *args):
    from functrace.core import get_aval
    from functrace.transforms.staging import trace_to_jaxpr
    return trace_to_jaxpr(lambda *a: [f(*a)], [get_aval(a) for a in args])


def test_dce_removes_unused():
    closed = trace_raw(lambda x: (fnp.exp(x), fnp.sin(x))[1], np.ones(2))
    assert names(closed) == ["exp", "sin"]
    assert names(dce(closed)) == ["sin"]


def test_cse_merges_duplicates_including_literals():
    def f(x):
        a = fnp.exp(x) * 2.0
        return a + fnp.exp(x) * 2.0
    closed = trace_raw(f, np.ones(2))  # trace-time CSE merges exp; the literal multiplies differ
    assert names(closed).count("mul") == 2
    out = cse(closed)
    assert names(out).count("mul") == 1 and names(out).count("exp") == 1
    x = RNG.standard_normal(2)
    np.testing.assert_allclose(out(x)[0], f(x))



@pytest.mark.parametrize("index", [-5, 0, 1, 2, 9])
def test_fold_constants_inlines_the_branch_a_known_index_takes(index):
    """``switch`` on a constant index runs the clamped branch's equations inline (no ``cond``
    left for a backend to run as separate sub-programs); a traced index keeps the ``cond``."""
    branches = [lambda v: v * 10.0, lambda v: fnp.sin(v) + 1.0, lambda v: fnp.exp(v) * v]
    refs = [lambda v: v * 10.0, lambda v: np.sin(v) + 1.0, lambda v: np.exp(v) * v]
    f = lambda x: ft.lax.switch(index, branches, x) * 2.0
    closed = trace_raw(f, np.ones(3))
    assert "cond" in names(closed)
    folded = fold_constants(closed)
    assert "cond" not in names(folded)
    x = RNG.standard_normal(3)
    want = refs[int(np.clip(index, 0, 2))](x) * 2.0
    np.testing.assert_allclose(folded(x)[0], want, rtol=1e-12)
    np.testing.assert_allclose(ft.jit(f)(x), want, rtol=1e-12)
    traced_index = trace_raw(lambda i, x: ft.lax.switch(i, branches, x), np.int32(index), np.ones(3))
    assert "cond" in names(fold_constants(traced_index))

def test_fold_constants_and_growth_limit():
    c = np.arange(3.0)

    def f(x):
        return x + fnp.exp(c) * 2.0 + fnp.broadcast_to(np.float64(1.0), (100000,))[:3]
    closed = trace_raw(f, np.ones(3))
    folded = fold_constants(closed)
    assert "exp" not in names(folded)
    np.testing.assert_allclose(folded(np.ones(3))[0], f(np.ones(3)))
    big = trace_raw(lambda x: x + fnp.broadcast_to(fnp.sum(x) * 0 + np.float64(1.0), (50000,)), np.ones(50000))
    assert "broadcast_in_dim" in names(fold_constants(big))  # depends on x: nothing to fold


def test_simplify_algebra():
    def f(x):
        y = -(-x) * 1.0 + 0.0  # noqa: B002 (a double negation, to be simplified away)
        z = fnp.reshape(fnp.reshape(y, (2, 3)), (3, 2))
        return fnp.transpose(fnp.transpose(z))
    closed = trace_raw(f, np.ones(6))
    out = dce(simplify(closed))
    assert "neg" not in names(out) and "mul" not in names(out) and "add" not in names(out)
    assert names(out).count("reshape") == 1 and "transpose" not in names(out)
    x = RNG.standard_normal(6)
    np.testing.assert_allclose(out(x)[0], f(x))


@pytest.mark.parametrize("seed", range(5))
def test_pipeline_preserves_values_of_gradients(seed):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((4, 4))
    f = lambda x: fnp.sum(fnp.tanh(A @ x) ** 2) + 0.5 * fnp.sum(x ** 4)
    x = rng.standard_normal(4)
    for g in (ft.grad(f), ft.hessian(f)):
        raw = ft.make_jaxpr(g)(x)
        opt, report = optimize(raw)
        np.testing.assert_allclose(opt(x)[0], raw(x)[0], rtol=1e-12, atol=1e-12)
        assert report.counts[-1][1] <= report.counts[0][1]


def test_analysis_saved_values_and_last_use():
    f = lambda w, x: fnp.sum(fnp.tanh(x @ w))
    lowered = ft.jit(ft.grad(f)).lower(np.ones((3, 2)), np.ones((4, 3)))
    a = lowered.report().analysis
    closed = lowered.jaxpr
    saved_names = {e.primitive.name for e in closed.eqns for v in e.out_vars if v in a.saved_for_backward}
    assert "tanh" in saved_names            # tanh(x @ w) is needed by its derivative
    assert a.peak_bytes > 0
    for i in a.last_use.values():
        assert i <= len(closed.eqns)
    assert all(e.phase in ("forward", "backward") for e in closed.eqns)
    assert any(e.phase == "backward" for e in closed.eqns)


def test_partial_eval_splits_known_and_unknown():
    def f(x, t):
        a = fnp.sin(x)
        b = a * 2.0
        return [b, b * t + fnp.cos(x) * t]
    from functrace.core import get_aval
    from functrace.transforms.staging import trace_to_jaxpr
    closed = trace_to_jaxpr(f, [get_aval(np.ones(2)), get_aval(np.ones(2))])
    keep_all = lambda eqn: True
    known, unknown, mask = partial_eval(closed, [False, True], keep_all)
    assert mask == [True, False]
    x, t = np.array([0.3, 0.4]), np.array([1.0, 2.0])
    kout = known(x)
    np.testing.assert_allclose(kout[0], 2 * np.sin(x))
    res = kout[1:]
    np.testing.assert_allclose(unknown(x, *res, t)[0], 2 * np.sin(x) * t + np.cos(x) * t)
    # with nothing saveable the unknown side recomputes sin/cos from x
    known2, unknown2, _ = partial_eval(closed, [False, True], lambda eqn: False)
    assert len(known2.jaxpr.outs) == 1 and "sin" in names(unknown2)
    np.testing.assert_allclose(unknown2(x, t)[0], 2 * np.sin(x) * t + np.cos(x) * t)


def test_transposes_fold_into_dot_general():
    x, y = RNG.standard_normal((5, 3)), RNG.standard_normal((5, 4))
    for f in (lambda x, y: x.T @ y, lambda x, y: fnp.einsum("ij,ik->jk", x, y), lambda x, y: (y.T @ x).T):
        lowered = ft.jit(f).lower(x, y)
        assert "transpose" not in [e.primitive.name for e in lowered.jaxpr.eqns], str(lowered.jaxpr)
        np.testing.assert_allclose(ft.jit(f)(x, y), x.T @ y, rtol=1e-12)
    b = RNG.standard_normal((2, 3, 4))
    g = lambda b: fnp.einsum("bij,bkj->bik", b, fnp.transpose(b, (0, 2, 1)).transpose(0, 2, 1))
    np.testing.assert_allclose(ft.jit(g)(b), g(b), rtol=1e-12)


def test_implicit_broadcast_keeps_the_output_rank():
    """grad of prod over an axis of size 1 broadcasts into a middle axis; letting numpy broadcast
    the operand instead dropped the leading axis that only that broadcast provided."""
    for shape, axis in (((5, 1), 0), ((1,), 0), ((3, 1, 4), 1)):
        x = np.random.default_rng(0).standard_normal(shape)
        f = lambda x: fnp.sum(fnp.prod(1 + 0.01 * x, axis=axis))
        np.testing.assert_allclose(ft.jit(ft.grad(f), backend="numpy")(x), ft.grad(f)(x), rtol=1e-12)
