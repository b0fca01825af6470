"""ft.scipy.optimize.minimize (BFGS) against known minima (Rosenbrock's ones, a quadratic's
A^-1 b), against scipy.optimize when installed, under jit on both backends, under vmap, and its
options, statuses and errors."""
from __future__ import annotations

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp

minimize = ft.scipy.optimize.minimize

A = np.array([[4.0, 1.0, 0.0], [1.0, 3.0, 0.5], [0.0, 0.5, 2.0]])
B = np.array([1.0, -2.0, 0.5])
QUADRATIC_MIN = np.array([10 / 21, -19 / 21, 10 / 21])  # A^-1 b, worked by hand
QUADRATIC_MIN_VALUE = -53 / 42  # -b.A^-1.b / 2


def rosenbrock(x):
    return fnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def quadratic(x, a, b):
    return 0.5 * fnp.dot(x, fnp.matmul(a, x)) - fnp.dot(b, x)


ROSENBROCK_STARTS = [np.array([-1.2, 1.0]), np.array([-1.2, 1.0, -0.5, 0.8, 1.5]), np.array([2.0, 2.0, 2.0])]


@pytest.mark.parametrize("x0", ROSENBROCK_STARTS, ids=["2d", "5d", "3d"])
def test_rosenbrock_reaches_its_minimum_at_ones(x0):
    r = minimize(rosenbrock, x0, method="BFGS")
    assert bool(r.success) and int(r.status) == 0
    np.testing.assert_allclose(r.x, np.ones_like(x0), atol=1e-5)
    assert float(r.fun) < 1e-10
    assert np.max(np.abs(r.jac)) < 1e-5  # the default gtol, in the infinity norm
    np.testing.assert_allclose(r.jac, ft.grad(rosenbrock)(r.x), rtol=1e-6, atol=1e-12)  # the gradient at x
    assert 0 < int(r.nit) < 200 * x0.size and int(r.nfev) >= int(r.nit) + 1 and int(r.njev) == int(r.nfev)
    assert r.hess_inv.shape == (x0.size, x0.size)


def test_quadratic_reaches_the_solution_of_a_linear_system():
    r = minimize(quadratic, np.zeros(3), args=(A, B), method="BFGS")
    assert bool(r.success) and int(r.status) == 0
    np.testing.assert_allclose(r.x, QUADRATIC_MIN, rtol=1e-6)
    np.testing.assert_allclose(r.fun, QUADRATIC_MIN_VALUE, rtol=1e-12)
    H = np.asarray(r.hess_inv)  # the inverse Hessian estimate stays symmetric positive definite
    np.testing.assert_allclose(H, H.T, atol=1e-12)
    assert np.all(np.linalg.eigvalsh(H) > 0)
    assert int(r.nit) <= 10


@pytest.mark.parametrize("case", ["rosenbrock", "quadratic"])
def test_agrees_with_scipy(case):
    so = pytest.importorskip("scipy.optimize", reason="scipy is not installed: the known minima are checked instead")
    if case == "rosenbrock":
        x0 = ROSENBROCK_STARTS[1]
        want = so.minimize(so.rosen, x0, jac=so.rosen_der, method="BFGS")
        got = minimize(rosenbrock, x0, method="BFGS")
    else:
        x0 = np.zeros(3)
        want = so.minimize(lambda x: 0.5 * x @ A @ x - B @ x, x0, jac=lambda x: A @ x - B, method="BFGS")
        got = minimize(quadratic, x0, args=(A, B), method="BFGS")
    assert want.success and bool(got.success)
    np.testing.assert_allclose(got.x, want.x, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got.fun, want.fun, rtol=1e-6, atol=1e-10)


@pytest.mark.parametrize("backend", ["numpy", None])
def test_runs_under_jit_on_both_backends(backend):
    x0 = ROSENBROCK_STARTS[1]
    eager = minimize(rosenbrock, x0, method="BFGS")
    jitted = ft.jit(lambda x: minimize(rosenbrock, x, method="BFGS"), backend=backend)(x0)
    assert type(jitted) is ft.scipy.optimize.OptimizeResults
    assert bool(jitted.success) and int(jitted.status) == 0
    np.testing.assert_allclose(jitted.x, np.ones(5), atol=1e-5)
    np.testing.assert_allclose(jitted.x, eager.x, rtol=1e-7)
    assert abs(int(jitted.nit) - int(eager.nit)) <= 2
    quad = ft.jit(lambda x, a, b: minimize(quadratic, x, args=(a, b), method="BFGS"), backend=backend)(np.zeros(3), A, B)
    np.testing.assert_allclose(quad.x, QUADRATIC_MIN, rtol=1e-6)


def test_float32_stays_float32():
    r = minimize(rosenbrock, np.array([-1.2, 1.0], np.float32), method="BFGS")
    assert np.asarray(r.x).dtype == np.float32 and np.asarray(r.fun).dtype == np.float32
    assert np.asarray(r.hess_inv).dtype == np.float32
    np.testing.assert_allclose(r.x, [1, 1], atol=1e-3)


def test_vmap_over_starting_points_matches_a_loop():
    x0s = np.array([[-1.2, 1.0], [0.0, 0.0], [2.0, 2.0]])
    batched = ft.vmap(lambda x: minimize(rosenbrock, x, method="BFGS"))(x0s)
    for i, x0 in enumerate(x0s):
        one = minimize(rosenbrock, x0, method="BFGS")
        np.testing.assert_allclose(batched.x[i], one.x, rtol=1e-12)
        assert int(batched.nit[i]) == int(one.nit)
    np.testing.assert_allclose(batched.x, np.ones((3, 2)), atol=1e-5)


def test_x0_of_any_shape_comes_back_in_its_shape():
    target = np.array([[1.0, -2.0], [0.5, 3.0]])
    r = minimize(lambda x: fnp.sum((x - target) ** 2), np.zeros((2, 2)), method="BFGS")
    assert r.x.shape == (2, 2) and r.jac.shape == (2, 2) and r.hess_inv.shape == (4, 4)
    np.testing.assert_allclose(r.x, target, rtol=1e-8)


def test_maxiter_stops_early_with_status_1():
    r = minimize(rosenbrock, np.array([-1.2, 1.0]), method="BFGS", options={"maxiter": 3})
    assert int(r.nit) == 3 and int(r.status) == 1 and not bool(r.success)


def test_tol_sets_the_gradient_tolerance():
    loose = minimize(quadratic, np.zeros(3), args=(A, B), method="BFGS", tol=1e-1)
    tight = minimize(quadratic, np.zeros(3), args=(A, B), method="BFGS", options={"gtol": 1e-10})
    assert bool(loose.success) and np.max(np.abs(loose.jac)) < 1e-1
    assert bool(tight.success) and np.max(np.abs(tight.jac)) < 1e-10
    assert int(loose.nit) < int(tight.nit)


def test_a_failed_line_search_is_reported():
    r = minimize(lambda x: fnp.sum(fnp.abs(x)), np.array([1.0, -2.0]), method="BFGS")  # a kink at the minimum
    assert not bool(r.success) and int(r.status) in (3, 5)
    assert float(r.fun) < 3.0  # it still returns the best point it found
    unbounded = minimize(lambda x: -fnp.sum(x ** 2), np.array([1.0, 2.0]), method="BFGS")
    assert not bool(unbounded.success) and int(unbounded.status) == 5


def test_results_have_jaxs_fields():
    assert ft.scipy.optimize.OptimizeResults._fields == (
        "x", "success", "status", "fun", "jac", "hess_inv", "nfev", "njev", "nit")


def test_bad_input_raises_clear_errors():
    with pytest.raises(ValueError, match="method 'Nelder-Mead' is not provided: only 'BFGS' is provided"):
        minimize(rosenbrock, np.zeros(2), method="Nelder-Mead")
    with pytest.raises(TypeError, match="args must be a tuple"):
        minimize(quadratic, np.zeros(3), args=[A, B], method="BFGS")
    with pytest.raises(TypeError, match=r"unknown BFGS option\(s\) \['maxfun'\]"):
        minimize(rosenbrock, np.zeros(2), method="BFGS", options={"maxfun": 10})
    with pytest.raises(TypeError, match="expects a function"):
        minimize(3.0, np.zeros(2), method="BFGS")


@pytest.mark.parametrize("name, hint", [("integrate", "trapezoid"), ("fft", "functrace.numpy.fft"),
                                        ("nonexistent", "provides only")])
def test_missing_scipy_names_raise_attribute_errors_that_say_what_to_use(name, hint):
    assert not hasattr(ft.scipy, name)
    with pytest.raises(AttributeError, match=hint):
        getattr(ft.scipy, name)
