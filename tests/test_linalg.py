"""functrace.numpy.linalg and functrace.scipy.linalg: values against numpy (and JAX), derivatives
(check_grads order 2, forward and reverse), vmap against a loop, jit on both backends."""
from __future__ import annotations

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.test_util import check_grads

LA = fnp.linalg
rng = np.random.default_rng(7)


def spd(*shape):
    """Symmetric positive definite matrices of shape (..., n, n)."""
    a = rng.standard_normal(shape)
    return a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])


def well_conditioned(*shape):
    return rng.standard_normal(shape) + 3 * np.eye(shape[-1])


# A function of each decomposition that does not depend on the signs LAPACK picks for vectors.
GRAD_CASES = {
    "solve": (lambda a, b: LA.solve(a, b), lambda: (well_conditioned(3, 3), rng.standard_normal((3, 2)))),
    "solve-vector": (lambda a, b: LA.solve(a, b), lambda: (well_conditioned(3, 3), rng.standard_normal(3))),
    "inv": (LA.inv, lambda: (well_conditioned(3, 3),)),
    "det": (LA.det, lambda: (well_conditioned(3, 3),)),
    "slogdet": (lambda a: LA.slogdet(a)[1], lambda: (well_conditioned(3, 3),)),
    "cholesky": (LA.cholesky, lambda: (spd(3, 3),)),
    "eigh-vectors": (lambda a: LA.eigh(a)[1] ** 2 * LA.eigh(a)[0], lambda: (spd(3, 3),)),
    "eigvalsh": (LA.eigvalsh, lambda: (spd(4, 4),)),
    "svd-tall": (lambda a: [v ** 2 for v in LA.svd(a, full_matrices=False)], lambda: (rng.standard_normal((4, 3)),)),
    "svd-wide": (lambda a: [v ** 2 for v in LA.svd(a, full_matrices=False)], lambda: (rng.standard_normal((2, 4)),)),
    "svd-square-full": (lambda a: [v ** 2 for v in LA.svd(a)], lambda: (rng.standard_normal((3, 3)),)),
    "svdvals": (lambda a: LA.svd(a, compute_uv=False), lambda: (rng.standard_normal((3, 4)),)),
    "qr": (lambda a: list(LA.qr(a)), lambda: (rng.standard_normal((4, 3)),)),
    "qr-square": (lambda a: LA.qr(a, mode="r"), lambda: (rng.standard_normal((3, 3)),)),
    "triangular_solve": (lambda a, b: LA.triangular_solve(a, b, lower=True, transpose_a=True),
                         lambda: (well_conditioned(3, 3), rng.standard_normal((3, 2)))),
    "triangular_solve-unit": (lambda a, b: LA.triangular_solve(a, b, lower=False, unit_diagonal=True),
                              lambda: (rng.standard_normal((3, 3)), rng.standard_normal((3, 2)))),
    "pinv": (LA.pinv, lambda: (rng.standard_normal((4, 3)),)),
    "lstsq": (lambda a, b: LA.lstsq(a, b)[0], lambda: (rng.standard_normal((4, 3)), rng.standard_normal(4))),
    "matrix_power-3": (lambda a: LA.matrix_power(a, 3), lambda: (rng.standard_normal((3, 3)),)),
    "matrix_power--2": (lambda a: LA.matrix_power(a, -2), lambda: (well_conditioned(3, 3),)),
    "multi_dot": (lambda a, b, c: LA.multi_dot([a, b, c]),
                  lambda: (rng.standard_normal(3), rng.standard_normal((3, 4)), rng.standard_normal((4, 2)))),
    "cond": (LA.cond, lambda: (well_conditioned(3, 3),)),
    "cond-fro": (lambda a: LA.cond(a, "fro"), lambda: (well_conditioned(3, 3),)),
}
for _ord in (None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf):
    GRAD_CASES[f"norm-matrix-{_ord}"] = (lambda a, o=_ord: LA.norm(a, o), lambda: (rng.standard_normal((3, 4)),))
for _ord in (None, 1, 2, 3, 0.5, -1.5, np.inf, -np.inf):
    GRAD_CASES[f"norm-vector-{_ord}"] = (lambda a, o=_ord: LA.norm(a, o, axis=-1),
                                         lambda: (rng.uniform(0.5, 2, (2, 5)) * rng.choice([-1, 1], (2, 5)),))


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_grads(name):
    f, make_args = GRAD_CASES[name]
    check_grads(f, make_args(), order=2, modes=("fwd", "rev"))


def _leaves(x):
    return [np.asarray(v) for v in ft.tree_util.tree_leaves(x)]


def _assert_trees_close(got, want, rtol=1e-9, atol=1e-10):
    got, want = _leaves(got), _leaves(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape, (g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


VALUE_CASES = [  # (name, functrace function, numpy function, args)
    ("solve", LA.solve, np.linalg.solve, (well_conditioned(2, 4, 4), rng.standard_normal((2, 4, 3)))),
    ("solve-broadcast", LA.solve, np.linalg.solve, (well_conditioned(2, 4, 4), rng.standard_normal((4, 3)))),
    ("solve-vector", LA.solve, np.linalg.solve, (well_conditioned(4, 4), rng.standard_normal(4))),
    ("inv", LA.inv, np.linalg.inv, (well_conditioned(3, 5, 5),)),
    ("det", LA.det, np.linalg.det, (well_conditioned(3, 5, 5),)),
    ("slogdet", lambda a: tuple(LA.slogdet(a)), lambda a: tuple(np.linalg.slogdet(a)), (rng.standard_normal((3, 4, 4)),)),
    ("cholesky", LA.cholesky, np.linalg.cholesky, (spd(2, 5, 5),)),
    ("cholesky-upper", lambda a: LA.cholesky(a, upper=True), lambda a: np.linalg.cholesky(a, upper=True), (spd(5, 5),)),
    ("eigh", lambda a: tuple(LA.eigh(a)), lambda a: tuple(np.linalg.eigh(a)), (spd(2, 5, 5),)),
    ("eigvalsh", LA.eigvalsh, np.linalg.eigvalsh, (spd(5, 5),)),
    ("eigh-upper_triangle", lambda a: LA.eigh(a, "U", symmetrize_input=False)[0], lambda a: np.linalg.eigh(a, "U")[0],
     (rng.standard_normal((2, 4, 4)),)),
    ("svd", lambda a: tuple(LA.svd(a)), lambda a: tuple(np.linalg.svd(a)), (rng.standard_normal((2, 5, 3)),)),
    ("svd-reduced", lambda a: tuple(LA.svd(a, False)), lambda a: tuple(np.linalg.svd(a, False)), (rng.standard_normal((3, 6)),)),
    ("svdvals", LA.svdvals, np.linalg.svdvals, (rng.standard_normal((4, 3)),)),
    ("qr", lambda a: tuple(LA.qr(a)), lambda a: tuple(np.linalg.qr(a)), (rng.standard_normal((2, 5, 3)),)),
    ("qr-complete", lambda a: tuple(LA.qr(a, "complete")), lambda a: tuple(np.linalg.qr(a, "complete")), (rng.standard_normal((5, 3)),)),
    ("qr-r", lambda a: LA.qr(a, "r"), lambda a: np.linalg.qr(a, "r"), (rng.standard_normal((3, 5)),)),
    ("pinv", LA.pinv, np.linalg.pinv, (rng.standard_normal((2, 5, 3)),)),
    ("pinv-rank_deficient", LA.pinv, np.linalg.pinv, (np.outer(np.arange(1.0, 5), np.arange(1.0, 4)),)),
    ("lstsq", lambda a, b: LA.lstsq(a, b)[:2], lambda a, b: np.linalg.lstsq(a, b)[:2],
     (rng.standard_normal((6, 3)), rng.standard_normal((6, 2)))),
    ("matrix_rank", LA.matrix_rank, np.linalg.matrix_rank, (np.outer(np.arange(1.0, 5), np.arange(1.0, 4)),)),
    ("matrix_power", lambda a: LA.matrix_power(a, 5), lambda a: np.linalg.matrix_power(a, 5), (rng.standard_normal((2, 3, 3)),)),
    ("matrix_power-0", lambda a: LA.matrix_power(a, 0), lambda a: np.linalg.matrix_power(a, 0), (rng.standard_normal((3, 3)),)),
    ("matrix_power-neg", lambda a: LA.matrix_power(a, -3), lambda a: np.linalg.matrix_power(a, -3), (well_conditioned(3, 3),)),
    ("multi_dot", lambda *a: LA.multi_dot(a), lambda *a: np.linalg.multi_dot(a),
     (rng.standard_normal((2, 7)), rng.standard_normal((7, 3)), rng.standard_normal((3, 9)), rng.standard_normal(9))),
    ("cond", LA.cond, np.linalg.cond, (well_conditioned(2, 4, 4),)),
    ("cond-inf", lambda a: LA.cond(a, np.inf), lambda a: np.linalg.cond(a, np.inf), (well_conditioned(4, 4),)),
    ("trace", lambda a: LA.trace(a, offset=1), lambda a: np.linalg.trace(a, offset=1), (rng.standard_normal((2, 3, 4)),)),
    ("diagonal", LA.diagonal, np.linalg.diagonal, (rng.standard_normal((2, 3, 4)),)),
    ("outer", LA.outer, np.linalg.outer, (rng.standard_normal(3), rng.standard_normal(4))),
    ("vector_norm", lambda a: LA.vector_norm(a, axis=(0, 2), ord=3), lambda a: np.linalg.vector_norm(a, axis=(0, 2), ord=3),
     (rng.standard_normal((2, 3, 4)),)),
    ("matrix_norm", lambda a: LA.matrix_norm(a, ord="nuc"), lambda a: np.linalg.matrix_norm(a, ord="nuc"),
     (rng.standard_normal((2, 3, 4)),)),
]
for _ord in (None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf):
    VALUE_CASES.append((f"norm-matrix-{_ord}", lambda a, o=_ord: LA.norm(a, o, axis=(2, 0), keepdims=True),
                        lambda a, o=_ord: np.linalg.norm(a, o, axis=(2, 0), keepdims=True), (rng.standard_normal((3, 2, 4)),)))
for _ord in (None, 0, 1, 2, 3, -1, np.inf, -np.inf):
    VALUE_CASES.append((f"norm-vector-{_ord}", lambda a, o=_ord: LA.norm(a, o, axis=1),
                        lambda a, o=_ord: np.linalg.norm(a, o, axis=1), (np.array([[0.0, 1.5, -2.0], [3.0, 0.0, 0.5]]),)))


@pytest.mark.parametrize("name,f,ref,args", VALUE_CASES, ids=[c[0] for c in VALUE_CASES])
def test_values_match_numpy(name, f, ref, args):
    _assert_trees_close(f(*args), ref(*args))


@pytest.mark.parametrize("backend", ["numpy", "opencl"])
@pytest.mark.parametrize("name,f,ref,args", VALUE_CASES[:18], ids=[c[0] for c in VALUE_CASES[:18]])
def test_jit_matches_eager(name, f, ref, args, backend):
    _assert_trees_close(ft.jit(f, backend=backend)(*args), f(*args))


BATCH_CASES = {  # functions of one (..., n, n) or (..., m, n) argument, vmapped over axis 0 or 1
    "solve": lambda a: LA.solve(a, a[..., :, :2] + 1.0),
    "inv": LA.inv, "det": LA.det, "slogdet": lambda a: tuple(LA.slogdet(a)),
    "cholesky": lambda a: LA.cholesky(a @ a.T + 4 * fnp.eye(4)),
    "eigh": lambda a: LA.eigh(a + a.T)[0], "svd": lambda a: LA.svd(a, compute_uv=False),
    "qr": lambda a: LA.qr(a)[1],
    "triangular_solve": lambda a: LA.triangular_solve(a + 4 * fnp.eye(4), a, lower=True),
    "grad-cholesky": ft.grad(lambda a: fnp.sum(fnp.sin(LA.cholesky(a @ a.T + 4 * fnp.eye(4))))),
    "grad-eigh": ft.grad(lambda a: fnp.sum(LA.eigh(a + a.T)[1] ** 2 * fnp.arange(4.0))),
    "grad-svd": ft.grad(lambda a: fnp.sum(LA.svd(a, full_matrices=False)[0] ** 2 * fnp.arange(4.0))),
    "grad-qr": ft.grad(lambda a: fnp.sum(LA.qr(a)[1] ** 2)),
    "grad-solve": ft.grad(lambda a: fnp.sum(LA.solve(a + 4 * fnp.eye(4), fnp.arange(4.0)))),
}


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("name", sorted(BATCH_CASES))
def test_vmap_matches_a_loop(name, axis):
    f = BATCH_CASES[name]
    x = rng.standard_normal((3, 4, 4)) + 3 * np.eye(4)
    x = np.moveaxis(x, 0, axis)
    got = ft.vmap(f, in_axes=axis)(x)
    want = [f(np.take(x, i, axis=axis)) for i in range(3)]
    want = ft.tree_util.tree_map(lambda *v: np.stack(v), *want)
    _assert_trees_close(got, want)


def test_vmap_of_solve_with_an_unbatched_matrix():
    a, b = well_conditioned(3, 3), rng.standard_normal((5, 3))
    _assert_trees_close(ft.vmap(LA.solve, in_axes=(None, 0))(a, b), np.linalg.solve(a, b.T).T)


def test_degenerate_eigenvalues_give_finite_eigenvalue_derivatives():
    """Repeated eigenvalues / singular values: eigenvalue-only functions keep finite derivatives,
    as in JAX (the identity has every eigenvalue equal)."""
    eye = np.eye(3)
    np.testing.assert_allclose(ft.grad(lambda a: fnp.sum(LA.eigvalsh(a) ** 2))(eye), 2 * eye)
    np.testing.assert_allclose(ft.grad(lambda a: LA.norm(a, "nuc"))(eye), eye)
    np.testing.assert_allclose(ft.jvp(LA.eigvalsh, (eye,), (eye,))[1], np.ones(3))
    assert np.all(np.isfinite(ft.grad(lambda a: fnp.sum(LA.eigh(a)[1] ** 2))(eye)))


def test_cholesky_of_an_indefinite_matrix_is_nan():
    out = LA.cholesky(np.stack([np.eye(2), -np.eye(2)]))
    np.testing.assert_allclose(out[0], np.eye(2))
    assert np.isnan(out[1]).all()


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="square"):
        LA.inv(np.ones((2, 3)))
    with pytest.raises(ValueError, match="does not match"):
        LA.solve(np.eye(3), np.ones(4))
    with pytest.raises(NotImplementedError, match="full_matrices"):
        ft.grad(lambda a: fnp.sum(LA.svd(a)[0]))(np.ones((3, 2)) + np.eye(3, 2))
    with pytest.raises(NotImplementedError, match="m >= n"):
        ft.grad(lambda a: fnp.sum(LA.qr(a)[1]))(rng.standard_normal((2, 3)))
    with pytest.raises(NotImplementedError, match="complex matrices"):
        LA.eigvalsh(np.eye(2) * 1j)
    assert not hasattr(LA, "no_such_function")


def test_opencl_runs_lapack_as_host_steps_with_a_reason(monkeypatch):
    monkeypatch.setattr(ft.config, "opencl_small_program_elements", 0)
    monkeypatch.setattr(ft.config, "opencl_host_step_elements", 0)
    a = spd(4, 4)
    exe = ft.jit(ft.grad(lambda a: fnp.sum(LA.cholesky(a) ** 2)), backend="opencl").lower(a).compile()
    report = exe.report()
    assert exe.num_host_steps > 0 and "LAPACK" in report, report
    np.testing.assert_allclose(np.asarray(exe(a)), ft.grad(lambda a: fnp.sum(LA.cholesky(a) ** 2))(a), rtol=1e-10)


# Values and gradients computed once with JAX 0.4 (x64): checked here without JAX installed.
_A = np.array([[2.0, 0.5, -0.3], [0.1, 1.5, 0.7], [-0.4, 0.2, 1.8]])
_S = _A @ _A.T + np.eye(3)
_R = np.array([[1.0, 0.2], [0.3, -1.1], [0.5, 0.4], [-0.7, 0.9]])


def _jax_style_cases(np_):
    """The functions compared with JAX, written once for functrace.numpy (``np_``) and jax.numpy."""
    la = np_.linalg
    return {
        "cholesky": (lambda a: np_.sum(np_.sin(la.cholesky(a))), _S),
        "eigh": (lambda a: np_.sum(la.eigh(a)[0] ** 3) + np_.sum(la.eigh(a)[1][:, 0] ** 2 * np_.arange(3.0)), _S),
        "svd": (lambda a: np_.sum(la.svd(a, full_matrices=False)[1] ** 3)
                + np_.sum(np_.abs(la.svd(a, full_matrices=False)[2][0])), _R),
        "qr": (lambda a: np_.sum(la.qr(a)[1] ** 2 * np_.arange(2.0)) + np_.sum(la.qr(a)[0][:, 1] ** 3), _R),
        "slogdet": (lambda a: la.slogdet(a)[1], _A),
        "det": (lambda a: la.det(a), _A),
        "inv": (lambda a: np_.sum(la.inv(a) ** 2), _A),
        "pinv": (lambda a: np_.sum(la.pinv(a) ** 2), _R),
        "norm_nuc": (lambda a: la.norm(a, "nuc"), _R),
        "norm_2": (lambda a: la.norm(a, 2), _R),
        "solve": (lambda a: np_.sum(la.solve(a, np_.arange(3.0))), _A),
    }


JAX_VALUES = {
    "cholesky": (3.2248306374274875, [[-0.15124385236990828, 0.27632899751402507, 0.14191052567968018], [0.27632899751402507, -0.1792027694581126, 0.19863119969094192], [0.14191052567968018, 0.19863119969094192, -0.07116122598468654]]),
    "eigh": (402.217236957193, [[91.88402792119773, 14.435732883629681, -32.98333816716906], [14.435732883629681, 50.81808416235159, 34.64539691466893], [-32.98333816716906, 34.64539691466893, 70.54658791645072]]),
    "svd": (7.344004054303153, [[4.069535076477674, 0.1861534731310342], [1.9890840620963317, -4.864961797985838], [1.8360890367337432, 1.3656994537875382], [-3.5374266920853636, 4.281451321844617]]),
    "qr": (2.0823648602500135, [[-0.06326299204510101, 0.5488891392873716], [0.4531387706267574, -1.427766052095222], [-0.021983796435238897, 1.1168113275253728], [0.08812391560758126, 2.5699499820307024]]),
    "slogdet": (1.5484132105963258, [[0.54421768707483, -0.0977891156462585, 0.13180272108843538], [-0.20408163265306123, 0.7397959183673469, -0.1275510204081633], [0.17006802721088438, -0.3039965986394558, 0.6271258503401361]]),
    "det": (4.704, [[2.56, -0.45999999999999996, 0.6200000000000001], [-0.96, 3.48, -0.6000000000000001], [0.7999999999999999, -1.43, 2.95]]),
    "inv": (1.4429480338053589, [[-0.5031112733167681, 0.48403846790086985, -0.39329397994186577], [0.5804622105679701, -1.1411029437198312, 0.6331072023856746], [-0.5367141259877547, 0.8554294685843412, -0.7861218556495383]]),
    "pinv": (1.080288076820485, [[-0.8104730835664823, -0.42696546232903076], [0.1312273119012937, 0.4764638579534779], [-0.5020561720344234, -0.36983277340215004], [0.23168977362577217, -0.24313765612681176]]),
    "norm_nuc": (2.8146877116292695, [[0.7831775475751982, 0.24096744789000643], [0.1157582530271756, -0.7293459071681159], [0.4224150697993363, 0.32780341572132676], [-0.4413597904619497, 0.5500310513015839]]),
    "norm_2": (1.618017232160097, [[0.14903294788119384, -0.20970526256271305], [0.38323664491584447, -0.5392548586625099], [-0.013033550339959885, 0.01833959627735796], [-0.4078298143560993, 0.5738600726641093]]),
    "solve": (1.394557823129252, [[-0.07867092415197376, -0.07621245777222448, -0.6514935906335324], [-0.055532417048452055, -0.05379702901568786, -0.4598778286824935], [-0.06710167060021292, -0.06500474339395619, -0.5556857096580131]]),
}


@pytest.mark.parametrize("name", sorted(JAX_VALUES))
def test_values_and_grads_match_stored_jax_results(name):
    f, x = _jax_style_cases(fnp)[name]
    value, grad = ft.value_and_grad(f)(x)
    want_value, want_grad = JAX_VALUES[name]
    np.testing.assert_allclose(value, want_value, rtol=1e-11)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("name", sorted(JAX_VALUES))
def test_values_and_grads_match_jax(name, jax_x64):
    jax = jax_x64
    import jax.numpy as jnp
    f, x = _jax_style_cases(fnp)[name]
    jf, _ = _jax_style_cases(jnp)[name]
    _assert_trees_close(ft.value_and_grad(f)(x), jax.jit(jax.value_and_grad(jf))(x), rtol=1e-9, atol=1e-11)


# Matrices of order >= _lapack.MIN_ORDER go to the LAPACK routines numpy ships (when present);
# smaller ones, and every matrix with MIN_ORDER raised, to numpy.linalg: both paths must agree.
_LARGE = 40


@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_direct_lapack_routines_match_numpy(direct, dtype, monkeypatch):
    from functrace.primitives import lapack as _lapack
    if not direct:
        monkeypatch.setattr(_lapack, "MIN_ORDER", 10**9)
    tol = dict(rtol=1e-9, atol=1e-10) if dtype == np.float64 else dict(rtol=2e-3, atol=2e-3)
    a = (rng.standard_normal((2, _LARGE, _LARGE)) / np.sqrt(_LARGE) + 2 * np.eye(_LARGE)).astype(dtype)
    s = spd(2, _LARGE, _LARGE).astype(dtype)
    b = rng.standard_normal((2, _LARGE, 3)).astype(dtype)
    np.testing.assert_allclose(LA.solve(a, b), np.linalg.solve(a, b), **tol)
    np.testing.assert_allclose(LA.cholesky(s), np.linalg.cholesky(s), **tol)
    nonsymmetric = s + rng.standard_normal(s.shape).astype(dtype) * 0.1
    np.testing.assert_allclose(LA.cholesky(nonsymmetric),
                               np.linalg.cholesky((nonsymmetric + np.swapaxes(nonsymmetric, -1, -2)) / 2), **tol)
    assert np.isnan(LA.cholesky(-s)).all()
    for lower in (True, False):
        for transpose in (True, False):
            for unit in (True, False):
                t = (np.tril(a) if lower else np.triu(a)) * (0.1 if unit else 1.0)
                if unit:
                    t[..., range(_LARGE), range(_LARGE)] = 1
                op = np.swapaxes(t, -1, -2) if transpose else t
                got = LA.triangular_solve(t, b, lower=lower, transpose_a=transpose, unit_diagonal=unit)
                np.testing.assert_allclose(got, np.linalg.solve(op, b), **tol)
    assert LA.solve(a, b).dtype == dtype and LA.cholesky(s).dtype == dtype


@pytest.mark.parametrize("name", ["solve", "cholesky", "triangular_solve", "inv"])
def test_grads_of_large_matrices(name):
    a, b = rng.standard_normal((_LARGE, _LARGE)) / np.sqrt(_LARGE) + 2 * np.eye(_LARGE), rng.standard_normal((_LARGE, 2))
    f = {"solve": lambda a, b: LA.solve(a, b), "cholesky": lambda a, b: LA.cholesky(a @ a.T) @ b,
         "triangular_solve": lambda a, b: LA.triangular_solve(a, b, lower=False, transpose_a=True),
         "inv": lambda a, b: LA.inv(a) @ b}[name]
    check_grads(f, (a, b), order=2, modes=("fwd", "rev"))


def test_direct_routines_leave_their_operands_unchanged():
    """LAPACK overwrites its right-hand sides: an F-ordered b (whose transpose is already C-ordered,
    so a no-copy view) was once solved in place, corrupting second derivatives."""
    a = rng.standard_normal((_LARGE, _LARGE)) / np.sqrt(_LARGE) + 2 * np.eye(_LARGE)
    b = np.asfortranarray(rng.standard_normal((_LARGE, 3)))
    s = np.asfortranarray(spd(_LARGE, _LARGE))
    saved = [a.copy(), b.copy(), s.copy()]
    want = np.linalg.solve(a, b)
    np.testing.assert_allclose(LA.solve(a, b), want, rtol=1e-10)
    np.testing.assert_allclose(LA.solve(a, b), want, rtol=1e-10)
    LA.triangular_solve(a, b, lower=True)
    LA.cholesky(s)
    for before, after in zip(saved, [a, b, s]):
        np.testing.assert_array_equal(before, after)


@pytest.mark.parametrize("backend", ["numpy", "opencl"])
def test_named_results_are_pytrees_that_transformations_return(backend):
    """slogdet / eigh / svd / qr return named tuples (as numpy and JAX): a jitted or vmapped
    function may return them whole, and the fields keep their names."""
    a = np.array([[2.0, 1.0, 0.0], [1.0, 3.0, 0.0], [0.0, 0.0, 1.0]])
    eigh = ft.jit(LA.eigh, backend=backend)(a)
    np.testing.assert_allclose(np.asarray(eigh.eigenvalues), np.linalg.eigvalsh(a), rtol=1e-12)
    svd = ft.jit(LA.svd, backend=backend)(a)
    np.testing.assert_allclose(np.asarray(svd.S), np.linalg.svd(a)[1], rtol=1e-12)
    qr = ft.jit(LA.qr, backend=backend)(a)
    np.testing.assert_allclose(np.asarray(qr.Q) @ np.asarray(qr.R), a, atol=1e-12)
    sign, logdet = ft.vmap(LA.slogdet)(np.stack([a, 2 * a]))
    np.testing.assert_allclose(np.asarray(logdet), np.log([5.0, 40.0]), rtol=1e-12)
    assert list(np.asarray(sign)) == [1.0, 1.0]
    assert type(LA.slogdet(a))._fields == ("sign", "logabsdet")
