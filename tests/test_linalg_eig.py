"""functrace.numpy.linalg.eig / eigvals (general matrices, complex results): values against numpy
(and JAX), derivatives (check_grads order 2, forward and reverse) of real functions of them, vmap
against a loop, jit on both backends, degenerate and defective matrices."""
from __future__ import annotations

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.test_util import check_grads

LA = fnp.linalg
rng = np.random.default_rng(11)

# Eigenvalues 0.55 +- 1.99i, 2.10, -0.11 (a complex pair and two real ones); B's are real: 3.02, -1.41, 0.89.
_A = np.array([[1.0, 2.0, 0.5, -0.3], [-1.5, 0.4, 0.8, 0.2], [0.3, -0.7, 2.2, 1.1], [0.6, 0.1, -0.9, -0.5]])
_B = np.array([[3.0, 0.4, -0.2], [0.1, 1.0, 0.6], [0.2, -0.3, -1.5]])


def _eigenvalue_loss(w, np_):
    return np_.sum(np_.real(w) ** 3) + np_.sum(np_.imag(w) ** 2)


# Real functions of the results.  An eigenvector is defined up to a complex factor; LAPACK fixes it
# (unit norm, real largest-magnitude component) and the derivative follows that choice, so the raw
# parts of v differentiate too; |v| does not depend on the choice at all.
GRAD_CASES = {
    "eigvals": (lambda a: [fnp.real(LA.eigvals(a)), fnp.imag(LA.eigvals(a))], _A),
    "eigvals-real_spectrum": (lambda a: fnp.real(LA.eigvals(a)), _B),
    "eig-abs_vectors": (lambda a: fnp.abs(LA.eig(a)[1]) ** 2, _A),
    "eig-vector_parts": (lambda a: [fnp.real(LA.eig(a)[1]), fnp.imag(LA.eig(a)[1])], _A),
    "eig-real_spectrum_vectors": (lambda a: LA.eig(a)[1].real * LA.eig(a)[0].real, _B),
    "eig-random": (lambda a: fnp.abs(LA.eig(a)[1]) * fnp.abs(LA.eig(a)[0]), rng.standard_normal((5, 5))),
}


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_grads(name):
    f, a = GRAD_CASES[name]
    check_grads(f, (a,), order=2, modes=("fwd", "rev"))


def test_grads_of_a_large_matrix_keep_the_eigenvalue_order():
    """numpy.linalg.eigvals orders the eigenvalues of large matrices differently from eig; eigvals
    is eig's first result, so its derivative pairs each eigenvalue with its own eigenvectors.  (The
    loss does not depend on the order: LAPACK's order can change under the finite-difference step.)"""
    a = np.random.default_rng(0).standard_normal((160, 160))
    assert not np.allclose(np.linalg.eigvals(a), np.linalg.eig(a)[0])  # the case this test is about
    check_grads(lambda a: _eigenvalue_loss(LA.eigvals(a), fnp), (a,), order=1, modes=("fwd", "rev"))


def test_grads_in_float32():
    check_grads(lambda a: [fnp.real(LA.eigvals(a)), fnp.abs(LA.eig(a)[1])], (_A.astype(np.float32),),
                order=1, modes=("fwd", "rev"))


def test_grads_of_a_batch():
    check_grads(lambda a: fnp.abs(LA.eig(a)[1]) * fnp.real(LA.eig(a)[0])[..., None, :],
                (rng.standard_normal((2, 3, 3)),), order=1, modes=("fwd", "rev"))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_values_match_numpy(dtype):
    a = rng.standard_normal((2, 5, 5)).astype(dtype)
    w, v = LA.eig(a)
    want_w, want_v = np.linalg.eig(a)
    complex_dtype = np.complex128 if dtype == np.float64 else np.complex64
    assert w.dtype == v.dtype == LA.eigvals(a).dtype == complex_dtype
    tol = dict(rtol=1e-10, atol=1e-12) if dtype == np.float64 else dict(rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(w, want_w, **tol)
    np.testing.assert_allclose(v, want_v, **tol)
    np.testing.assert_allclose(LA.eigvals(a), want_w, **tol)
    np.testing.assert_allclose(a @ v, v * w[..., None, :], **tol)  # A v_j = w_j v_j
    np.testing.assert_allclose(np.linalg.norm(v, axis=-2), 1, **tol)  # unit columns
    result = LA.eig(a)
    assert np.array_equal(result.eigenvalues, w) and np.array_equal(result.eigenvectors, v)


def test_real_spectrum_is_still_complex():
    """numpy returns real arrays when every eigenvalue is real; functrace (as JAX) always complex."""
    w, v = LA.eig(np.diag([1.0, 2.0]))
    assert w.dtype == v.dtype == np.complex128
    np.testing.assert_array_equal(w, [1, 2])


@pytest.mark.parametrize("backend", ["numpy", "opencl"])
def test_jit_matches_eager(backend):
    a = rng.standard_normal((2, 4, 4))
    f = lambda a: (tuple(LA.eig(a)), LA.eigvals(a))  # noqa: E731
    got, want = ft.jit(f, backend=backend)(a), f(a)
    for g, w in zip(ft.tree_util.tree_leaves(got), ft.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-12)


def _loss(a):
    w, v = LA.eig(a)
    return fnp.sum(fnp.abs(v) ** 2 * fnp.real(w)) + _eigenvalue_loss(LA.eigvals(a), fnp)


def test_opencl_runs_eig_and_its_gradient_as_host_steps(monkeypatch):
    monkeypatch.setattr(ft.config, "opencl_small_program_elements", 0)
    monkeypatch.setattr(ft.config, "opencl_host_step_elements", 0)
    exe = ft.jit(ft.grad(_loss), backend="opencl").lower(_A).compile()
    hosted = [line for line in str(exe.report()).splitlines() if line.strip().startswith("host    eig ")]
    assert hosted and all("LAPACK" in line for line in hosted), exe.report()
    np.testing.assert_allclose(np.asarray(exe(_A)), ft.grad(_loss)(_A), rtol=1e-10)


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("f", [lambda a: tuple(LA.eig(a)), LA.eigvals, ft.grad(_loss)], ids=["eig", "eigvals", "grad"])
def test_vmap_matches_a_loop(f, axis):
    x = np.moveaxis(rng.standard_normal((3, 4, 4)), 0, axis)
    got = ft.vmap(f, in_axes=axis)(x)
    want = ft.tree_util.tree_map(lambda *v: np.stack(v), *[f(np.take(x, i, axis=axis)) for i in range(3)])
    for g, w in zip(ft.tree_util.tree_leaves(got), ft.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-10, atol=1e-12)


def test_degenerate_and_defective_matrices():
    """Repeated eigenvalues: eigenvalue derivatives stay finite (as JAX); the eigenvector derivative's
    1 / (w_j - w_i) factor is taken as 0 where eigenvalues coincide exactly, as for eigh (JAX: NaN).
    A defective matrix ([[1, 1], [0, 1]]: eigenvalues 1 +- sqrt(t) under a perturbation t of its
    corner) has no eigenvalue derivative; the formula gives the same finite value as JAX there."""
    eigenvalue_grad = ft.grad(lambda a: _eigenvalue_loss(LA.eigvals(a), fnp))
    np.testing.assert_allclose(eigenvalue_grad(np.eye(3)), 3 * np.eye(3))
    np.testing.assert_allclose(eigenvalue_grad(np.array([[1.0, 1.0], [0.0, 1.0]])), 3 * np.eye(2))
    vector_grad = ft.grad(lambda a: fnp.sum(fnp.abs(LA.eig(a)[1]) ** 2 * fnp.arange(3.0)))
    np.testing.assert_array_equal(vector_grad(np.eye(3)), np.zeros((3, 3)))


def test_a_matrix_lapack_cannot_decompose_gives_nan():
    a = np.stack([np.eye(2), [[np.nan, 1.0], [0.0, 1.0]]])
    w, v = LA.eig(a)
    np.testing.assert_array_equal(w[0], [1, 1])
    assert np.isnan(w[1]).all() and np.isnan(v[1]).all()


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="square"):
        LA.eig(np.ones((2, 3)))
    with pytest.raises(NotImplementedError, match="complex matrices"):
        LA.eigvals(np.eye(2) * 1j)


# Computed once with JAX 0.10 (x64, jax.lax.linalg.eig with enable_eigvec_derivs=True): checked here
# without JAX installed.  The functions do not depend on the order of the eigenvalues.
def _jax_style_cases(np_, eig):
    return {
        "eigvals": (lambda a: _eigenvalue_loss(eig(a)[0], np_), _A),
        "eig-vectors": (lambda a: np_.sum(np_.abs(eig(a)[1]) ** 2 * np_.real(eig(a)[0]))
                        + np_.sum(np_.abs(eig(a)[1][0])), _A),
        "eig-real": (lambda a: np_.sum(np_.abs(eig(a)[1]) ** 3 * np_.real(eig(a)[0])), _B),
    }


JAX_VALUES = {
    "eigvals": (17.567625017108888, [[2.7759948567230417, 3.01140771770523, 4.754267510695738, -2.2996663605253254], [-3.5263374330384507, 1.000904432028049, 2.702993841934754, -1.3194583659031751], [6.069385826712566, -1.8038142707334213, 11.794066595151941, -1.9716497195334086], [3.299212002240787, -0.9747587499901346, 4.027619758728045, -0.4171602767142789]]),
    "eig-vectors": (4.875602891344224, [[1.0524163906555692, 0.15893708459875297, 0.3104275003494645, -0.29246790784307725], [0.24868906154755863, 1.0924704299482757, 0.082823305118724, 0.346686847342673], [-0.2005759677381314, 0.08105965928822054, 1.0378616818634605, -0.22213758148496235], [-0.18026733991191582, -0.05984546626582825, 0.12450487211677587, 0.8172514975326939]]),
    "eig-real": (2.5208837305021436, [[1.0444890880722393, -0.16777255712862515, -0.03228870921351986], [-0.19785514999829493, 0.815211999754524, 0.29397060908063993], [-0.13064620671368146, 0.10295782074444024, 0.9778163435618914]]),
}


@pytest.mark.parametrize("name", sorted(JAX_VALUES))
def test_values_and_grads_match_stored_jax_results(name):
    f, x = _jax_style_cases(fnp, LA.eig)[name]
    value, grad = ft.value_and_grad(f)(x)
    want_value, want_grad = JAX_VALUES[name]
    np.testing.assert_allclose(value, want_value, rtol=1e-11)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("name", sorted(JAX_VALUES))
def test_values_and_grads_match_jax(name, jax_x64):
    jax = jax_x64
    import jax.numpy as jnp

    def jax_eig(a):
        return jax.lax.linalg.eig(a, compute_left_eigenvectors=False, enable_eigvec_derivs=True)
    f, x = _jax_style_cases(fnp, LA.eig)[name]
    jf, _ = _jax_style_cases(jnp, jax_eig)[name]
    for got, want in zip(ft.value_and_grad(f)(x), jax.value_and_grad(jf)(x)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(np.sort_complex(LA.eigvals(x)), np.sort_complex(np.asarray(jnp.linalg.eigvals(x))),
                               rtol=1e-12)


def test_batched_tangents_jacobians_and_hessian():
    """jacfwd (vmapped tangents) agrees with jacrev (vmapped cotangents); the Hessian is symmetric."""
    f = lambda a: fnp.abs(LA.eig(a)[1])  # noqa: E731
    np.testing.assert_allclose(ft.jacfwd(f)(_A), ft.jacrev(f)(_A), rtol=1e-10, atol=1e-12)
    hessian = np.asarray(ft.hessian(lambda a: _eigenvalue_loss(LA.eigvals(a), fnp))(_A)).reshape(16, 16)
    np.testing.assert_allclose(hessian, hessian.T, rtol=1e-10, atol=1e-12)
