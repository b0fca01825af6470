"""User-defined derivative rules and rematerialization: ``ft.custom_jvp``, ``ft.custom_vjp``
and ``ft.checkpoint`` (with ``ft.checkpoint_policies``).

Every test checks that the *rule is actually used* (a result autodiff of the primal would
not give), under each transformation and their compositions, against numpy references; and
for checkpoint, the structure of the IR: what is recomputed inside the backward ``checkpoint``
sub-jaxpr and what is passed as a saved residual.

Order-2 ``check_grads`` cases for each construct live in ``test_grads_systematic.py``.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace import lax
from functrace.test_util import numerical_grad

RNG = np.random.default_rng(4321)


def rn(*shape):
    return RNG.standard_normal(shape)




def sigmoid(x):
    return np.where(x >= 0, 1 / (1 + np.exp(-np.abs(x))), np.exp(-np.abs(x)) / (1 + np.exp(-np.abs(x))))


# =========================================================================== custom_jvp

# A numerically safe softplus: the primal is finite everywhere, but autodiff of it is not
# (d/dx log1p(exp(x)) = exp(x) / (1 + exp(x)) = inf / inf at x = 1000, and the where()
# cotangent of the untaken branch is 0 * nan).  The custom rule gives sigmoid(x).


def _softplus_primal(x):
    return fnp.where(x > 0, x + fnp.log1p(fnp.exp(-x)), fnp.log1p(fnp.exp(x)))


@ft.custom_jvp
def softplus(x):
    return _softplus_primal(x)


@softplus.defjvp
def _softplus_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return softplus(x), t * fnp.sigmoid(x)


XS = np.array([-1000.0, -30.0, -1.0, 0.0, 0.5, 2.0, 30.0, 1000.0])


def test_custom_jvp_primal_values():
    want = np.logaddexp(0.0, XS)
    with np.errstate(over="ignore"):  # where() evaluates both branches
        np.testing.assert_allclose(softplus(XS), want, rtol=1e-12)
        np.testing.assert_allclose(ft.jit(softplus)(XS), want, rtol=1e-12)
        np.testing.assert_allclose(ft.vmap(softplus)(XS), want, rtol=1e-12)


def test_custom_jvp_rule_is_used_under_grad_where_autodiff_gives_nan():
    loss_naive = lambda x: fnp.sum(_softplus_primal(x))
    loss = lambda x: fnp.sum(softplus(x))
    with np.errstate(all="ignore"):
        naive = ft.grad(loss_naive)(XS)
        got = ft.grad(loss)(XS)
    assert np.isnan(naive).any()  # the point of the custom rule
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, sigmoid(XS), rtol=1e-12, atol=1e-300)
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(ft.jit(ft.grad(loss))(XS), sigmoid(XS), rtol=1e-12, atol=1e-300)
        np.testing.assert_allclose(ft.grad(ft.jit(loss))(XS), sigmoid(XS), rtol=1e-12, atol=1e-300)


def test_custom_jvp_under_jvp_and_jacfwd():
    t = rn(len(XS))
    with np.errstate(all="ignore"):
        y, ty = ft.jvp(softplus, (XS,), (t,))
        jac = ft.jacfwd(softplus)(XS[2:6])
    np.testing.assert_allclose(y, np.logaddexp(0.0, XS), rtol=1e-12)
    np.testing.assert_allclose(ty, t * sigmoid(XS), rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(jac, np.diag(sigmoid(XS[2:6])), rtol=1e-12)


def test_custom_jvp_under_vmap():
    with np.errstate(all="ignore"):
        per_example = ft.vmap(ft.grad(softplus))(XS)
        np.testing.assert_allclose(per_example, sigmoid(XS), rtol=1e-12, atol=1e-300)
        tangents = ft.vmap(lambda x: ft.jvp(softplus, (x,), (np.float64(2.0),))[1])(XS)
        np.testing.assert_allclose(tangents, 2.0 * sigmoid(XS), rtol=1e-12, atol=1e-300)
        # grad of vmap, and vmap over a 2-D batch with the rule inside
        np.testing.assert_allclose(ft.grad(lambda x: fnp.sum(ft.vmap(softplus)(x)))(XS), sigmoid(XS),
                                   rtol=1e-12, atol=1e-300)
        X = XS.reshape(2, 4)
        np.testing.assert_allclose(ft.vmap(ft.grad(lambda r: fnp.sum(softplus(r))))(X), sigmoid(X),
                                   rtol=1e-12, atol=1e-300)


def test_custom_jvp_second_order_hessian_and_grad_of_grad():
    """Second derivatives differentiate the rule itself: d sigmoid = sigmoid * (1 - sigmoid),
    finite even at |x| = 1000."""
    d2 = sigmoid(XS) * (1 - sigmoid(XS))
    loss = lambda x: fnp.sum(softplus(x))
    with np.errstate(all="ignore"):
        hess = ft.hessian(loss)(XS)  # forward-over-reverse
        gg = ft.vmap(ft.grad(ft.grad(softplus)))(XS)  # reverse-over-reverse
        fr = ft.jacrev(ft.jacfwd(loss))(XS)  # reverse-over-forward
        jh = ft.jit(ft.hessian(loss))(XS)
    assert np.all(np.isfinite(hess))
    for got in (hess, fr, jh):
        np.testing.assert_allclose(got, np.diag(d2), rtol=1e-10, atol=1e-15)
    np.testing.assert_allclose(gg, d2, rtol=1e-10, atol=1e-15)


# A straight-through estimator: the primal rounds (true derivative 0), the rule passes the
# tangent through unchanged (derivative 1), so any nonzero gradient proves the rule ran.


@ft.custom_jvp
def round_ste(x):
    return fnp.round(x)


@round_ste.defjvp
def _round_ste_jvp(primals, tangents):
    return round_ste(primals[0]), tangents[0]


def test_custom_jvp_straight_through_rule_is_used_everywhere():
    x = np.array([0.2, 1.7, -2.4])
    w = np.array([1.0, 2.0, 3.0])
    loss = lambda x: fnp.sum(round_ste(x) * w)
    np.testing.assert_allclose(loss(x), np.sum(np.round(x) * w))
    np.testing.assert_allclose(ft.grad(loss)(x), w)
    np.testing.assert_allclose(ft.grad(lambda x: fnp.sum(fnp.round(x) * w))(x), 0.0)  # without the rule
    np.testing.assert_allclose(ft.jit(ft.grad(loss))(x), w)
    np.testing.assert_allclose(ft.jacfwd(loss)(x), w)
    np.testing.assert_allclose(ft.vmap(ft.grad(lambda v: round_ste(v) * 5.0))(x), 5.0)
    # inside control flow under grad
    in_scan = lambda x: fnp.sum(lax.scan(lambda c, _: (round_ste(c) * 1.5, None), x, None, length=3)[0])
    np.testing.assert_allclose(ft.grad(in_scan)(x), 1.5 ** 3)
    in_cond = lambda x: fnp.sum(lax.cond(True, lambda v: round_ste(v) * w, lambda v: v, x))
    np.testing.assert_allclose(ft.grad(in_cond)(x), w)


@ft.custom_jvp
def sin_times(x, y):
    return fnp.sin(x) * y


sin_times.defjvps(lambda tx, ans, x, y: fnp.cos(x) * y * tx,
                  lambda ty, ans, x, y: fnp.sin(x) * ty * 10.0)  # deliberately scaled: proves it ran


def test_custom_jvp_defjvps():
    x, y = rn(3), rn(3)
    gx, gy = ft.grad(lambda x, y: fnp.sum(sin_times(x, y)), argnums=(0, 1))(x, y)
    np.testing.assert_allclose(gx, np.cos(x) * y, rtol=1e-12)
    np.testing.assert_allclose(gy, np.sin(x) * 10.0, rtol=1e-12)
    tx, ty = rn(3), rn(3)
    out, t_out = ft.jvp(sin_times, (x, y), (tx, ty))
    np.testing.assert_allclose(out, np.sin(x) * y, rtol=1e-12)
    np.testing.assert_allclose(t_out, np.cos(x) * y * tx + np.sin(x) * ty * 10.0, rtol=1e-12)
    # None for an argument: that argument contributes no tangent
    @ft.custom_jvp
    def first_only(x, y):
        return x * y

    first_only.defjvps(lambda tx, ans, x, y: tx * y, None)
    gx, gy = ft.grad(lambda x, y: fnp.sum(first_only(x, y)), argnums=(0, 1))(x, y)
    np.testing.assert_allclose(gx, y)
    np.testing.assert_allclose(gy, 0.0)


@functools.partial(ft.custom_jvp, nondiff_argnums=(0,))
def repeated_sin(n, x):
    for _ in range(n):  # n is a Python int: usable in Python control flow
        x = fnp.sin(x)
    return x


@repeated_sin.defjvp
def _repeated_sin_jvp(n, primals, tangents):
    (x,), (t,) = primals, tangents
    return repeated_sin(n, x), t * float(n)  # a deliberately "wrong" derivative: n


def test_custom_jvp_nondiff_argnums():
    x = rn(3)
    np.testing.assert_allclose(repeated_sin(2, x), np.sin(np.sin(x)), rtol=1e-12)
    np.testing.assert_allclose(ft.grad(lambda x: fnp.sum(repeated_sin(3, x)))(x), 3.0)
    np.testing.assert_allclose(ft.jvp(lambda x: repeated_sin(4, x), (x,), (np.ones(3),))[1], 4.0)
    np.testing.assert_allclose(ft.vmap(ft.grad(lambda x: repeated_sin(2, x)))(x), 2.0)
    jf = ft.jit(ft.grad(lambda x, n: fnp.sum(repeated_sin(n, x))), static_argnums=1)
    np.testing.assert_allclose(jf(x, 5), 5.0)
    np.testing.assert_allclose(jf(x, 2), 2.0)


@functools.partial(ft.custom_jvp, nondiff_argnums=(0,))
def scale_by(s, x):
    return x * s


scale_by.defjvp(lambda s, p, t: (scale_by(s, p[0]), t[0] * s * 10.0))  # 10x: proves the rule ran


def test_custom_jvp_nondiff_argument_batched_by_vmap_in_every_order():
    """An array nondiff argument that vmap batches reaches the rule per example, whether the
    rule runs inside the vmap (vmap of grad) or after it (grad of vmap, jvp of vmap)."""
    s, x = np.array([1.0, 2.0, 3.0]), rn(3)
    per_example = lambda s, x: scale_by(s, x)
    np.testing.assert_allclose(ft.vmap(per_example)(s, x), s * x)
    np.testing.assert_allclose(ft.vmap(ft.grad(per_example, argnums=1))(s, x), 10.0 * s)
    np.testing.assert_allclose(ft.grad(lambda x: fnp.sum(ft.vmap(per_example)(s, x)))(x), 10.0 * s)
    np.testing.assert_allclose(ft.jvp(lambda x: ft.vmap(per_example)(s, x), (x,), (np.ones(3),))[1], 10.0 * s)
    np.testing.assert_allclose(ft.jit(ft.grad(lambda x, s: fnp.sum(ft.vmap(per_example)(s, x))))(x, s), 10.0 * s)
    with pytest.raises(TypeError, match="scale_by.*nondiff_argnums"):
        ft.grad(lambda s: fnp.sum(scale_by(s, x)))(s)


def test_custom_jvp_rule_closing_over_a_vmap_batched_value():
    def per_example(w, x):
        @ft.custom_jvp
        def times_w(v):
            return v * w

        times_w.defjvp(lambda p, t: (times_w(p[0]), t[0] * w * 10.0))
        return times_w(x)

    w, x = np.array([1.0, 2.0, 3.0]), rn(3)
    # the rule runs inside the vmap: fine
    np.testing.assert_allclose(ft.vmap(per_example)(w, x), w * x)
    np.testing.assert_allclose(ft.vmap(ft.grad(per_example, argnums=1))(w, x), 10.0 * w)
    # the rule would run after the vmap: a clear error, not a leaked tracer or a wrong value
    with pytest.raises(ft.UnexpectedTracerError, match="times_w.*closes over a value batched by an enclosing vmap"):
        ft.grad(lambda x: fnp.sum(ft.vmap(per_example)(w, x)))(x)
    with pytest.raises(ft.UnexpectedTracerError, match="times_w.*batched by an enclosing vmap"):
        ft.jvp(lambda x: ft.vmap(per_example)(w, x), (x,), (np.ones(3),))


@ft.custom_jvp
def scaled_norm(p):
    return {"n": fnp.sqrt(fnp.sum(p["a"] ** 2) + p["b"][0] ** 2), "a2": p["a"] * 2.0}


@scaled_norm.defjvp
def _scaled_norm_jvp(primals, tangents):
    (p,), (t,) = primals, tangents
    out = scaled_norm(p)
    dn = (fnp.sum(p["a"] * t["a"]) + p["b"][0] * t["b"][0]) / out["n"]
    return out, {"n": dn, "a2": t["a"] * 2.0}


def test_custom_jvp_pytree_arguments_and_outputs():
    p = {"a": rn(3), "b": (np.float64(0.7),)}
    out = scaled_norm(p)
    norm = np.sqrt(np.sum(p["a"] ** 2) + 0.49)
    np.testing.assert_allclose(out["n"], norm, rtol=1e-12)
    g = ft.grad(lambda p: scaled_norm(p)["n"] + fnp.sum(scaled_norm(p)["a2"]))(p)
    np.testing.assert_allclose(g["a"], p["a"] / norm + 2.0, rtol=1e-12)
    np.testing.assert_allclose(g["b"][0], 0.7 / norm, rtol=1e-12)


def test_custom_jvp_in_make_jaxpr():
    text = str(ft.make_jaxpr(softplus)(XS))
    assert "custom_jvp_call" in text


def test_custom_jvp_without_rule_raises():
    @ft.custom_jvp
    def no_rule_fn(x):
        return x * 2.0

    with pytest.raises(AttributeError, match="no_rule_fn.*defjvp"):
        no_rule_fn(np.ones(2))


def test_custom_jvp_differentiating_a_closed_over_value_raises():
    def outer(w, x):
        @ft.custom_jvp
        def scale_by_w(v):
            return v * w

        scale_by_w.defjvp(lambda p, t: (scale_by_w(*p), t[0] * w))
        return fnp.sum(scale_by_w(x))

    w, x = np.float64(2.0), rn(3)
    with pytest.raises(TypeError, match="scale_by_w.*closes over"):
        ft.grad(outer)(w, x)
    with pytest.raises(TypeError, match="closes over"):
        ft.jvp(lambda w: outer(w, x), (w,), (np.float64(1.0),))
    # differentiating only the explicit argument is fine (the closure is a constant)
    np.testing.assert_allclose(ft.grad(outer, argnums=1)(w, x), 2.0)
    np.testing.assert_allclose(ft.jit(ft.grad(outer, argnums=1))(w, x), 2.0)


def test_custom_jvp_rule_output_type_errors():
    @ft.custom_jvp
    def bad_shape(x):
        return fnp.sin(x)

    bad_shape.defjvp(lambda p, t: (bad_shape(*p), np.ones(3)))
    with pytest.raises(TypeError, match=r"bad_shape.*f64\[3\].*f64\[\]"):
        ft.jvp(bad_shape, (np.float64(1.0),), (np.float64(1.0),))
    with pytest.raises(TypeError, match=r"bad_shape.*f64\[3\]"):
        ft.grad(bad_shape)(np.float64(1.0))

    @ft.custom_jvp
    def bad_structure(x):
        return fnp.sin(x)

    bad_structure.defjvp(lambda p, t: (bad_structure(*p), (t[0], t[0])))
    with pytest.raises(TypeError, match="bad_structure.*structure"):
        ft.grad(bad_structure)(np.float64(1.0))


# =========================================================================== custom_vjp


@functools.partial(ft.custom_vjp, nondiff_argnums=(0, 1))
def clip_gradient(lo, hi, x):
    return x  # identity in the forward pass


def _clip_fwd(lo, hi, x):
    return x, None


def _clip_bwd(lo, hi, _, g):
    return (fnp.clip(g, lo, hi),)


clip_gradient.defvjp(_clip_fwd, _clip_bwd)

W = np.array([5.0, -0.5, -7.0, 0.25])


def _clipped_loss(x):
    return fnp.sum(clip_gradient(-1.0, 1.0, x) * W)


def test_custom_vjp_gradient_clipping():
    x = rn(4)
    np.testing.assert_allclose(_clipped_loss(x), np.sum(x * W))
    np.testing.assert_allclose(ft.grad(_clipped_loss)(x), np.clip(W, -1.0, 1.0))
    np.testing.assert_allclose(ft.grad(lambda x: fnp.sum(x * W))(x), W)  # without the rule
    np.testing.assert_allclose(ft.jit(ft.grad(_clipped_loss))(x), np.clip(W, -1.0, 1.0))
    np.testing.assert_allclose(ft.grad(ft.jit(_clipped_loss))(x), np.clip(W, -1.0, 1.0))
    np.testing.assert_allclose(ft.jacrev(lambda x: clip_gradient(-1.0, 1.0, x) * W)(x),
                               np.diag(np.clip(W, -1.0, 1.0)))
    # different nondiff values give different rules
    np.testing.assert_allclose(ft.grad(lambda x: fnp.sum(clip_gradient(-0.1, 2.0, x) * W))(x),
                               np.clip(W, -0.1, 2.0))


def test_custom_vjp_under_vmap():
    X = rn(3, 4)
    np.testing.assert_allclose(ft.vmap(_clipped_loss)(X), X @ W)
    per_example = ft.vmap(ft.grad(_clipped_loss))(X)
    np.testing.assert_allclose(per_example, np.broadcast_to(np.clip(W, -1, 1), (3, 4)))
    total = lambda X: fnp.sum(ft.vmap(_clipped_loss)(X))
    np.testing.assert_allclose(ft.grad(total)(X), np.broadcast_to(np.clip(W, -1, 1), (3, 4)))
    np.testing.assert_allclose(ft.jit(ft.vmap(ft.grad(_clipped_loss)))(X), np.broadcast_to(np.clip(W, -1, 1), (3, 4)))


@ft.custom_vjp
def bilinear(params, x):
    """params is a pytree; residuals are a pytree too."""
    return fnp.sum(params["w"] * x) * params["s"][0]


def _bilinear_fwd(params, x):
    return bilinear(params, x), {"p": params, "x": x}


def _bilinear_bwd(res, g):
    p, x = res["p"], res["x"]
    return ({"w": g * x * p["s"][0], "s": (g * fnp.sum(p["w"] * x) * 100.0,)},  # 100x: proves bwd ran
            g * p["w"] * p["s"][0])


bilinear.defvjp(_bilinear_fwd, _bilinear_bwd)


def test_custom_vjp_pytree_arguments_and_residuals():
    params = {"w": rn(3), "s": (np.float64(1.5),)}
    x = rn(3)
    np.testing.assert_allclose(bilinear(params, x), np.sum(params["w"] * x) * 1.5)
    gp, gx = ft.grad(bilinear, argnums=(0, 1))(params, x)
    np.testing.assert_allclose(gp["w"], x * 1.5)
    np.testing.assert_allclose(gp["s"][0], np.sum(params["w"] * x) * 100.0)
    np.testing.assert_allclose(gx, params["w"] * 1.5)
    gp_j = ft.jit(ft.grad(bilinear))(params, x)
    np.testing.assert_allclose(gp_j["s"][0], np.sum(params["w"] * x) * 100.0)
    X = rn(4, 3)
    gx_b = ft.vmap(ft.grad(bilinear, argnums=1), in_axes=(None, 0))(params, X)
    np.testing.assert_allclose(gx_b, np.broadcast_to(params["w"] * 1.5, (4, 3)))


@ft.custom_vjp
def sin_with_linear_bwd(x):
    return fnp.sin(x)


# the bwd rule is differentiable and deliberately not the true derivative: d/dx = 2x
sin_with_linear_bwd.defvjp(lambda x: (sin_with_linear_bwd(x), x), lambda x, g: (g * 2.0 * x,))


def test_custom_vjp_grad_of_grad_differentiates_bwd():
    x = rn(3)
    np.testing.assert_allclose(sin_with_linear_bwd(x), np.sin(x))
    np.testing.assert_allclose(ft.vmap(ft.grad(sin_with_linear_bwd))(x), 2.0 * x)
    np.testing.assert_allclose(ft.vmap(ft.grad(ft.grad(sin_with_linear_bwd)))(x), 2.0)
    np.testing.assert_allclose(ft.jacrev(ft.jacrev(lambda v: fnp.sum(sin_with_linear_bwd(v) ** 2)))(x),
                               _jac_of_2sinx_2x(x))
    np.testing.assert_allclose(ft.jit(ft.grad(ft.grad(sin_with_linear_bwd)))(np.float64(0.3)), 2.0)


def _jac_of_2sinx_2x(x):
    # d/dx [sum sin(x)^2] with the custom bwd = 2 sin(x) * 2x; its own derivative goes through
    # the bwd again for sin(x): 2 * (2x) * 2x + 2 sin(x) * 2
    return np.diag(8.0 * x * x + 4.0 * np.sin(x))


@functools.partial(ft.custom_vjp, nondiff_argnums=(1,))
def power(x, n):
    return x ** n


power.defvjp(lambda x, n: (power(x, n), x), lambda n, x, g: (g * n * x ** (n - 1),))


def test_custom_vjp_nondiff_argnums():
    x = rn(3)
    np.testing.assert_allclose(power(x, 3), x ** 3)
    np.testing.assert_allclose(ft.grad(lambda x: fnp.sum(power(x, 3)))(x), 3 * x ** 2, rtol=1e-12)
    np.testing.assert_allclose(ft.vmap(ft.grad(lambda x: power(x, 2)))(x), 2 * x, rtol=1e-12)


def test_custom_vjp_nondiff_argument_batched_by_vmap_in_every_order():
    lo = np.array([-1.0, -0.1, -3.0])
    x = np.ones(3)
    per_example = lambda lo, x: clip_gradient(lo, -lo, x) * 2.0
    want = np.minimum(2.0, -lo)
    np.testing.assert_allclose(ft.vmap(ft.grad(per_example, argnums=1))(lo, x), want)
    np.testing.assert_allclose(ft.grad(lambda x: fnp.sum(ft.vmap(per_example)(lo, x)))(x), want)
    np.testing.assert_allclose(ft.jit(ft.grad(lambda x, lo: fnp.sum(ft.vmap(per_example)(lo, x))))(x, lo), want)
    with pytest.raises(TypeError, match="clip_gradient.*nondiff_argnums"):
        ft.grad(lambda lo: fnp.sum(clip_gradient(lo, 1.0, x)))(np.float64(-1.0))


def test_custom_vjp_rule_closing_over_a_vmap_batched_value():
    def per_example(w, x):
        @ft.custom_vjp
        def times_w(v):
            return v * w

        times_w.defvjp(lambda v: (times_w(v), None), lambda _, g: (g * w * 10.0,))
        return times_w(x)

    w, x = np.array([1.0, 2.0, 3.0]), rn(3)
    np.testing.assert_allclose(ft.vmap(ft.grad(per_example, argnums=1))(w, x), 10.0 * w)
    with pytest.raises(ft.UnexpectedTracerError, match="times_w.*closes over a value batched by an enclosing vmap"):
        ft.grad(lambda x: fnp.sum(ft.vmap(per_example)(w, x)))(x)


def test_custom_vjp_none_cotangent_is_zero():
    @ft.custom_vjp
    def mul(x, y):
        return x * y

    mul.defvjp(lambda x, y: (mul(x, y), y), lambda y, g: (g * y, None))
    gx, gy = ft.grad(lambda x, y: fnp.sum(mul(x, y)), argnums=(0, 1))(rn(3), np.full(3, 2.0))
    np.testing.assert_allclose(gx, 2.0)
    np.testing.assert_allclose(gy, np.zeros(3))
    assert gy.shape == (3,)


@pytest.mark.parametrize("transform", [
    lambda f: (lambda x: ft.jvp(f, (x,), (np.ones_like(x),))),
    ft.jacfwd,
    lambda f: ft.hessian(lambda x: fnp.sum(f(x))),
], ids=["jvp", "jacfwd", "hessian"])
def test_custom_vjp_forward_mode_raises_type_error(transform):
    with pytest.raises(TypeError, match=r"forward-mode.*custom_vjp.*sin_with_linear_bwd"):
        transform(sin_with_linear_bwd)(rn(3))


def test_custom_vjp_bwd_wrong_structure_raises_clear_error():
    def make(bwd, name):
        def f(x, y):
            return x * y

        f.__qualname__ = name
        cf = ft.custom_vjp(f)
        cf.defvjp(lambda x, y: (cf(x, y), (x, y)), bwd)
        return lambda x, y: fnp.sum(cf(x, y))

    x, y = rn(3), rn(3)
    with pytest.raises(TypeError, match=r"returns_array.*tuple.*2.*Array"):
        ft.grad(make(lambda r, g: g * r[1], "returns_array"))(x, y)
    with pytest.raises(TypeError, match=r"too_short.*\(2\).*length 1"):
        ft.grad(make(lambda r, g: (g * r[1],), "too_short"))(x, y)
    with pytest.raises(TypeError, match=r"nested_wrong.*argument 1.*structure"):
        ft.grad(make(lambda r, g: (g * r[1], (g, g)), "nested_wrong"))(x, y)
    with pytest.raises(TypeError, match=r"bad_shape.*f64\[1\].*f64\[3\]"):
        ft.grad(make(lambda r, g: (g * r[1], fnp.sum(g, keepdims=True)), "bad_shape"))(x, y)
    with pytest.raises(TypeError, match=r"bad_dtype.*f32\[3\].*f64\[3\]"):
        ft.grad(make(lambda r, g: (g * r[1], (g * r[0]).astype(np.float32)), "bad_dtype"))(x, y)
    with pytest.raises(TypeError, match=r"bad_shape_jit.*f64\[1\]"):
        ft.jit(ft.grad(make(lambda r, g: (g * r[1], fnp.sum(g, keepdims=True)), "bad_shape_jit")))(x, y)


def test_custom_vjp_fwd_must_return_pair_and_rule_must_exist():
    @ft.custom_vjp
    def no_rule_vjp(x):
        return x

    with pytest.raises(AttributeError, match="no_rule_vjp.*defvjp"):
        no_rule_vjp(np.ones(2))

    @ft.custom_vjp
    def fwd_not_pair(x):
        return x

    fwd_not_pair.defvjp(lambda x: x, lambda r, g: (g,))
    with pytest.raises(TypeError, match=r"fwd_not_pair.*pair"):
        ft.grad(lambda x: fnp.sum(fwd_not_pair(x)))(np.ones(2))


def test_custom_vjp_differentiating_a_closed_over_value_raises():
    def outer(w, x):
        @ft.custom_vjp
        def times_w(v):
            return v * w

        times_w.defvjp(lambda v: (times_w(v), None), lambda _, g: (g * w,))
        return fnp.sum(times_w(x))

    with pytest.raises(TypeError, match="times_w.*closes over"):
        ft.grad(outer)(np.float64(2.0), rn(3))
    np.testing.assert_allclose(ft.grad(outer, argnums=1)(np.float64(2.0), rn(3)), 2.0)


def test_custom_vjp_inside_scan_and_checkpoint():
    x = rn(4)
    in_scan = lambda x: fnp.sum(lax.scan(lambda c, _: (clip_gradient(-1.0, 1.0, c) * 3.0, None), x, None,
                                         length=2)[0])
    # backward: g = 1 -> *3 -> clip 1 -> *3 -> clip 1
    np.testing.assert_allclose(ft.grad(in_scan)(x), 1.0)
    np.testing.assert_allclose(ft.grad(ft.checkpoint(_clipped_loss))(x), np.clip(W, -1.0, 1.0))


# =========================================================================== checkpoint


def _chain(x):
    return fnp.sum(fnp.sin(fnp.cos(x) * 2.0) * x)


def _mlp(W1, W2, x):
    h = fnp.tanh(x @ W1)
    return fnp.sum(fnp.sin(h @ W2))


MLP_ARGS = (rn(3, 4), rn(4, 2), rn(5, 3))


def _checkpoint_eqns(closed):
    return [e for e in closed.eqns if e.primitive.name == "checkpoint"]


def _prims(closed_sub):
    return [e.primitive.name for e in closed_sub.jaxpr.eqns]


@pytest.mark.parametrize("policy", [None, ft.checkpoint_policies.nothing_saveable,
                                    ft.checkpoint_policies.dots_saveable,
                                    ft.checkpoint_policies.everything_saveable],
                         ids=["default", "nothing", "dots", "everything"])
def test_checkpoint_same_values_and_gradients(policy):
    x = rn(3)
    remat = ft.checkpoint(_chain, policy=policy)
    np.testing.assert_allclose(remat(x), _chain(x), rtol=1e-12)
    v, g = ft.value_and_grad(remat)(x)
    v0, g0 = ft.value_and_grad(_chain)(x)
    np.testing.assert_allclose(v, v0, rtol=1e-12)
    np.testing.assert_allclose(g, g0, rtol=1e-12)
    np.testing.assert_allclose(g, numerical_grad(lambda z: np.sum(np.sin(np.cos(z) * 2.0) * z), x),
                               rtol=1e-6, atol=1e-8)
    remat_mlp = ft.checkpoint(_mlp, policy=policy)
    got = ft.grad(remat_mlp, argnums=(0, 1, 2))(*MLP_ARGS)
    want = ft.grad(_mlp, argnums=(0, 1, 2))(*MLP_ARGS)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_checkpoint_backward_pass_recomputes_inside_a_checkpoint_sub_jaxpr():
    x = rn(3)
    closed = ft.make_jaxpr(ft.value_and_grad(ft.checkpoint(_chain)))(x)
    eqns = _checkpoint_eqns(closed)
    assert len(eqns) == 2, str(closed)  # the forward and the backward (recomputing) pass
    fwd, bwd = eqns
    assert fwd.phase == "forward" and bwd.phase == "backward"
    # nothing is saved: the forward checkpoint returns only the value
    assert len(fwd.out_vars) == 1
    # the backward sub-jaxpr recomputes the forward ops (cos, sin of the forward) itself
    bwd_prims = _prims(bwd.params["jaxpr"])
    assert bwd_prims.count("cos") >= 2 and "sin" in bwd_prims  # cos(x), cos(2 cos x) and sin(x)
    # it reads only the primal inputs and the output cotangent, no saved intermediates
    assert all(getattr(v, "aval", None) is None or v.aval.shape in ((3,), ()) for v in bwd.inputs)
    # no forward op is left at the top level to be saved
    assert not {"sin", "cos", "mul"} & {e.primitive.name for e in closed.eqns}
    # grad alone (the forward value is dead): one checkpoint eqn that recomputes everything
    (only,) = _checkpoint_eqns(ft.make_jaxpr(ft.grad(ft.checkpoint(_chain)))(x))
    assert {"sin", "cos"} <= set(_prims(only.params["jaxpr"]))
    # without checkpoint, the same ops are ordinary top-level equations
    plain = ft.make_jaxpr(ft.value_and_grad(_chain))(x)
    assert not _checkpoint_eqns(plain) and "cos" in [e.primitive.name for e in plain.eqns]


def _forward_and_backward(policy):
    """The forward and backward checkpoint equations of value_and_grad w.r.t. W1 of the MLP:
    the forward pass has two matmuls (x @ W1, h @ W2), the backward pass two more
    (g @ W2.T, x.T @ dh)."""
    closed = ft.make_jaxpr(ft.value_and_grad(ft.checkpoint(_mlp, policy=policy)))(*MLP_ARGS)
    fwd, bwd = _checkpoint_eqns(closed)
    return fwd, bwd


def test_checkpoint_dots_saveable_saves_matmuls_and_recomputes_elementwise():
    fwd, bwd = _forward_and_backward(ft.checkpoint_policies.dots_saveable)
    # residuals: the two forward dot_general outputs, (5, 4) and (5, 2)
    residual_shapes = sorted(v.aval.shape for v in fwd.out_vars[1:])
    assert residual_shapes == [(5, 2), (5, 4)], residual_shapes
    assert {tuple(v.aval.shape) for v in bwd.inputs if hasattr(v, "aval")} >= {(5, 2), (5, 4)}
    bwd_prims = _prims(bwd.params["jaxpr"])
    # elementwise ops are recomputed from the saved matmul results ...
    assert "tanh" in bwd_prims and "cos" in bwd_prims
    # ... but the forward matmuls are not: only the two cotangent matmuls remain
    assert bwd_prims.count("dot_general") == 2, bwd_prims
    # with nothing saveable, the forward matmuls are recomputed as well
    _, bwd_nothing = _forward_and_backward(ft.checkpoint_policies.nothing_saveable)
    assert _prims(bwd_nothing.params["jaxpr"]).count("dot_general") == 4


def test_checkpoint_everything_saveable_recomputes_nothing():
    fwd, bwd = _forward_and_backward(ft.checkpoint_policies.everything_saveable)
    bwd_prims = _prims(bwd.params["jaxpr"])
    assert not {"tanh", "sin", "cos"} & set(bwd_prims), bwd_prims
    assert bwd_prims.count("dot_general") == 2  # only the cotangent matmuls
    assert len(fwd.out_vars) > 1  # residuals are passed from the forward pass
    fwd_prims = _prims(fwd.params["jaxpr"])
    assert "tanh" in fwd_prims and "cos" in fwd_prims  # derivative factors computed forward


def test_checkpoint_custom_policy():
    save_tanh = lambda eqn: eqn.primitive.name == "tanh"
    fwd, bwd = _forward_and_backward(save_tanh)
    bwd_prims = _prims(bwd.params["jaxpr"])
    assert "tanh" not in bwd_prims and bwd_prims.count("dot_general") == 3  # h @ W2 is recomputed
    got = ft.grad(ft.checkpoint(_mlp, policy=save_tanh))(*MLP_ARGS)
    np.testing.assert_allclose(got, ft.grad(_mlp)(*MLP_ARGS), rtol=1e-12)



def _saved_bytes(f, *args) -> int:
    """Bytes the jitted program keeps from its forward phase for its backward phase."""
    analysis = ft.jit(f).lower(*args).report().analysis
    return sum(v.aval.dtype.itemsize * int(np.prod(v.aval.shape)) for v in analysis.saved_for_backward)


@pytest.mark.parametrize("activation", ["tanh_residual", "exp"])
def test_checkpoint_policies_save_no_more_than_no_checkpoint(activation):
    """Saved bytes of value_and_grad of a small MLP: everything_saveable <= no checkpoint, and
    nothing_saveable < dots_saveable <= everything_saveable.  everything_saveable used to save
    more: the backward call also took the primals it does not read (the first layer's weight and
    input), and a residual that is also the output (exp's result) was returned twice."""
    layers = {"tanh_residual": lambda w, h: h + fnp.tanh(h @ w), "exp": lambda w, h: fnp.exp(h @ w)}
    layer = layers[activation]
    weights = [rn(6, 6) / 4 for _ in range(3)]
    x = rn(10, 6)

    def loss_with(policy):
        block = layer if policy is None else ft.checkpoint(layer, policy=policy)

        def loss(weights, x):
            h = x
            for w in weights:
                h = block(w, h)
            return fnp.mean(h ** 2)
        return ft.value_and_grad(loss)

    policies = ft.checkpoint_policies
    saved = {name: _saved_bytes(loss_with(policy), weights, x) for name, policy in
             [("none", None), ("everything", policies.everything_saveable),
              ("dots", policies.dots_saveable), ("nothing", policies.nothing_saveable)]}
    assert saved["everything"] <= saved["none"], saved
    if activation == "tanh_residual":  # each layer's input is needed anyway: remat saves less
        assert saved["nothing"] < saved["dots"] <= saved["everything"], saved
    # (exp without the residual: no checkpoint keeps only each layer's output, which the next
    # layer's input is anyway; recomputing the first layer needs its weight, saving more)
    want_value, want_grads = loss_with(None)(weights, x)
    value, grads = ft.jit(loss_with(policies.everything_saveable))(weights, x)
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    for g, w in zip(grads, want_grads):
        np.testing.assert_allclose(g, w, rtol=1e-10)

def test_nested_checkpoint():
    def inner(x):
        return fnp.sin(fnp.cos(x)) * x

    def outer(x):
        y = ft.checkpoint(lambda v: fnp.exp(v) * 0.5)(x)
        return fnp.sum(ft.checkpoint(inner)(y) ** 2)

    def reference(x):
        y = np.exp(x) * 0.5
        return np.sum((np.sin(np.cos(y)) * y) ** 2)

    x = rn(3)
    np.testing.assert_allclose(outer(x), reference(x), rtol=1e-12)
    want = numerical_grad(reference, x)
    np.testing.assert_allclose(ft.grad(outer)(x), want, rtol=1e-6, atol=1e-8)
    twice = ft.checkpoint(outer)
    np.testing.assert_allclose(ft.grad(twice)(x), want, rtol=1e-6, atol=1e-8)
    closed = ft.make_jaxpr(ft.grad(twice))(x)
    (bwd,) = [e for e in _checkpoint_eqns(closed) if e.phase == "backward"]
    inner_prims = _prims(bwd.params["jaxpr"])
    assert inner_prims.count("checkpoint") >= 2, str(closed)  # checkpoints inside the checkpoint
    np.testing.assert_allclose(ft.hessian(twice)(x), ft.hessian(outer)(x), rtol=1e-10, atol=1e-12)


def test_checkpoint_under_vmap_and_jit():
    X = rn(4, 3)
    remat = ft.checkpoint(_chain)
    np.testing.assert_allclose(ft.vmap(remat)(X), [_chain(x) for x in X], rtol=1e-12)
    per_example = ft.vmap(ft.grad(remat))(X)
    np.testing.assert_allclose(per_example, ft.vmap(ft.grad(_chain))(X), rtol=1e-12)
    np.testing.assert_allclose(ft.grad(lambda X: fnp.sum(ft.vmap(remat)(X)))(X), per_example, rtol=1e-12)
    np.testing.assert_allclose(ft.jit(ft.grad(remat))(X[0]), per_example[0], rtol=1e-12)
    np.testing.assert_allclose(ft.grad(ft.jit(remat))(X[0]), per_example[0], rtol=1e-12)
    np.testing.assert_allclose(ft.jit(ft.vmap(ft.grad(remat)))(X), per_example, rtol=1e-12)
    # a batched and an unbatched argument
    pair = ft.checkpoint(lambda a, b: fnp.sum(fnp.sin(a * b)))
    x = rn(3)
    got = ft.vmap(ft.grad(pair), in_axes=(0, None))(X, x)
    np.testing.assert_allclose(got, np.cos(X * x) * x, rtol=1e-12)
    # the jitted backward pass still contains the recomputing checkpoint
    lowered = ft.jit(ft.grad(remat)).lower(X[0]).jaxpr
    assert any(e.primitive.name == "checkpoint" for e in lowered.eqns)


def test_checkpoint_jvp_and_second_order():
    x, t = rn(3), rn(3)
    remat = ft.checkpoint(_chain)
    np.testing.assert_allclose(ft.jvp(remat, (x,), (t,))[1], ft.jvp(_chain, (x,), (t,))[1], rtol=1e-12)
    np.testing.assert_allclose(ft.hessian(remat)(x), ft.hessian(_chain)(x), rtol=1e-10, atol=1e-12)
    gg = lambda f: ft.grad(lambda v: fnp.sum(ft.grad(f)(v) ** 2))
    np.testing.assert_allclose(gg(remat)(x), gg(_chain)(x), rtol=1e-10, atol=1e-12)


def test_checkpoint_static_argnums():
    calls = []

    def layers(x, n, kind):
        calls.append((n, kind))
        for _ in range(n):  # Python control flow on the static arguments
            x = fnp.sin(x) if kind == "sin" else fnp.tanh(x)
        return fnp.sum(x)

    def reference(x, n, kind):
        for _ in range(n):
            x = np.sin(x) if kind == "sin" else np.tanh(x)
        return np.sum(x)

    remat = ft.checkpoint(layers, static_argnums=(1, 2))
    x = rn(3)
    for n, kind in ((3, "sin"), (2, "tanh")):
        np.testing.assert_allclose(remat(x, n, kind), reference(x, n, kind), rtol=1e-12)
        np.testing.assert_allclose(ft.grad(remat)(x, n, kind), numerical_grad(lambda z: reference(z, n, kind), x),
                                   rtol=1e-6, atol=1e-8)
        jf = ft.jit(ft.grad(remat), static_argnums=(1, 2))
        np.testing.assert_allclose(jf(x, n, kind), ft.grad(layers)(x, n, kind), rtol=1e-12)


def test_checkpoint_pytree_arguments_and_closure():
    def block(p, x):
        return {"out": fnp.tanh(x @ p["w"] + p["b"]), "aux": fnp.sum(x)}

    p = {"w": rn(3, 2), "b": rn(2)}
    x = rn(4, 3)
    loss = lambda p, x, f: fnp.sum(f(p, x)["out"] ** 2) + f(p, x)["aux"]
    got = ft.grad(loss, argnums=(0, 1))(p, x, ft.checkpoint(block))
    want = ft.grad(loss, argnums=(0, 1))(p, x, block)
    for a, b in zip(ft.tree_util.tree_leaves(got), ft.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(a, b, rtol=1e-12)

    # the checkpointed function closes over an outer tracer (w)
    def closure_loss(w, x):
        return fnp.sum(ft.checkpoint(lambda v: fnp.sin(v * w))(x))

    w = np.float64(0.7)
    gw, gx = ft.grad(closure_loss, argnums=(0, 1))(w, x[0])
    np.testing.assert_allclose(gw, np.sum(np.cos(x[0] * w) * x[0]), rtol=1e-12)
    np.testing.assert_allclose(gx, np.cos(x[0] * w) * w, rtol=1e-12)


def test_checkpoint_decorator_forms_and_remat_alias():
    @ft.checkpoint
    def f1(x):
        return fnp.sum(fnp.exp(x))

    @ft.checkpoint(policy=ft.checkpoint_policies.dots_saveable)
    def f2(x):
        return fnp.sum(fnp.exp(x))

    x = rn(3)
    np.testing.assert_allclose(ft.grad(f1)(x), np.exp(x), rtol=1e-12)
    np.testing.assert_allclose(ft.grad(f2)(x), np.exp(x), rtol=1e-12)
    np.testing.assert_allclose(ft.grad(ft.remat(lambda v: fnp.sum(v ** 3)))(x), 3 * x ** 2, rtol=1e-12)
    assert f1.__name__ == "f1"


def test_custom_jvp_rule_that_does_not_return_a_pair():
    @ft.custom_jvp
    def odd_rule(x):
        return fnp.sin(x)

    @odd_rule.defjvp
    def odd_rule_jvp(primals, tangents):
        return fnp.sin(primals[0])  # forgot the tangent
    with pytest.raises(TypeError, match=r"custom_jvp rule of `.*odd_rule` must return a pair .* got Array"):
        ft.grad(odd_rule)(0.5)
