"""JAX parity of linear algebra at the edges (issue 30 items 1-3): the default tolerances of ``pinv`` /
``lstsq`` / ``matrix_rank`` / ``cond`` (relative to the largest singular value, scaled by the dtype's
eps, as JAX's), the derivative of ``det`` at singular matrices (the adjugate, as JAX's; second
derivatives too), and float32 staying float32 in ``expm``, ``digamma``, ``entr``, ``ndtri`` and ``lu``.

Stored numbers are JAX 0.10.2's (x64 enabled, float32 inputs where said); with JAX installed the
``*_live_jax`` tests compare with it directly.
"""
import warnings

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.scipy import linalg as SLA
from functrace.scipy import special as SP
from functrace.test_util import check_grads

BACKENDS = ["numpy", "opencl"]

# --------------------------------------------------------------------------- item 1: tolerances

# A rank-2 5x4 matrix rounded to float32: its two smallest singular values are float32 noise
# (~5e-8, relative 4e-9), far above numpy's fixed rcond=1e-15.
_B = np.array([[0.3, 1.7], [2.9, -0.6], [0.1, 1.3], [1.9, 2.2], [-0.7, 3.1]])
_C = np.array([[1.1, 0.2, 2.3, -0.9], [0.4, 1.2, 0.7, 2.9]])
RANK2_F32 = (_B @ _C).astype(np.float32)

JAX_PINV_F32 = np.array([
    [0.006364764645695686, 0.03351502865552902, 0.0033275452442467213, 0.026222441345453262, -0.0032300977036356926],
    [0.01057596318423748, 0.0026821105275303125, 0.007811328861862421, 0.016912775114178658, 0.01662425883114338],
    [0.012168778106570244, 0.07048957049846649, 0.00608585961163044, 0.05335957929491997, -0.008835887536406517],
    [0.021757394075393677, -0.03718826174736023, 0.01790846697986126, 0.013315416872501373, 0.05191781371831894]],
    np.float32)
JAX_LSTSQ_F32 = np.array([0.1059170514345169, 0.13554014265537262, 0.2073964625597, 0.24624620378017426], np.float32)
JAX_LSTSQ_RESID_F32 = 5.2555203


def test_pinv_default_cutoff_is_jax_s_for_float32():
    p = fnp.linalg.pinv(RANK2_F32)
    assert p.dtype == np.float32
    assert np.abs(np.asarray(p)).max() < 0.1  # numpy's rcond=1e-15 gives ~2e7 here
    np.testing.assert_allclose(p, JAX_PINV_F32, atol=2e-6)
    np.testing.assert_allclose(p, np.linalg.pinv(_B @ _C), atol=2e-6)  # the rank-2 matrix's pseudo-inverse
    for backend in BACKENDS:
        np.testing.assert_allclose(ft.jit(fnp.linalg.pinv, backend=backend)(RANK2_F32), JAX_PINV_F32, atol=2e-6)


def test_pinv_rtol_and_rcond_are_the_same_relative_cutoff():
    a = RANK2_F32.astype(np.float64)
    np.testing.assert_allclose(fnp.linalg.pinv(a, rtol=1e-6), fnp.linalg.pinv(a, rcond=1e-6))
    np.testing.assert_allclose(fnp.linalg.pinv(a, 1e-6), np.linalg.pinv(a, 1e-6))
    # float64's default cutoff 10 * 5 * eps keeps float32's noise singular values (as JAX: they are real there)
    np.testing.assert_allclose(fnp.linalg.pinv(a), np.linalg.pinv(a, rcond=50 * np.finfo(np.float64).eps), rtol=1e-6)
    with pytest.raises(ValueError, match="only one of rtol and rcond"):
        fnp.linalg.pinv(a, rcond=1e-3, rtol=1e-3)
    # a per-matrix rtol of the batch shape
    batch = np.stack([a, a])
    out = fnp.linalg.pinv(batch, rtol=np.array([1e-6, 0.5]))
    np.testing.assert_allclose(out[0], np.linalg.pinv(a, 1e-6))
    np.testing.assert_allclose(out[1], np.linalg.pinv(a, 0.5))


def test_lstsq_and_matrix_rank_cutoffs_follow_the_dtype():
    assert int(fnp.linalg.matrix_rank(RANK2_F32)) == 2
    assert int(fnp.linalg.matrix_rank(RANK2_F32.astype(np.float64))) == 4  # float32's noise is signal in float64
    assert int(fnp.linalg.matrix_rank(RANK2_F32, rtol=1e-3)) == 2
    b = np.arange(5, dtype=np.float32)
    for f in (fnp.linalg.lstsq, ft.jit(fnp.linalg.lstsq, backend="numpy"), ft.jit(fnp.linalg.lstsq)):
        x, resid, rank, s = f(RANK2_F32, b)
        assert x.dtype == np.float32 and s.dtype == np.float32 and int(rank) == 2
        np.testing.assert_allclose(x, JAX_LSTSQ_F32, rtol=1e-5)
        np.testing.assert_allclose(resid, [JAX_LSTSQ_RESID_F32], rtol=1e-5)
    # rcond < 0 means eps (numpy's and JAX's rule); an explicit rcond is relative to the largest value
    assert int(fnp.linalg.lstsq(RANK2_F32, b, rcond=-1)[2]) == 2
    assert int(fnp.linalg.lstsq(RANK2_F32, b, rcond=0.8)[2]) == 1


def test_cond_of_a_singular_matrix_is_inf_for_every_order():
    s = np.array([[1.0, 2.0], [2.0, 4.0]])
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for p in (None, 2, 1, np.inf, "fro"):
            got = float(fnp.linalg.cond(s, p))
            assert got == np.inf or got > 1e15, (p, got)
        assert float(fnp.linalg.cond(np.eye(2), -2)) == 1.0
        assert float(fnp.linalg.cond(s, -2)) < 1e-15


def test_tolerances_match_live_jax(jax_x64):
    import jax.numpy as jnp
    np.testing.assert_allclose(fnp.linalg.pinv(RANK2_F32), jnp.linalg.pinv(RANK2_F32), atol=2e-6)
    assert int(fnp.linalg.matrix_rank(RANK2_F32)) == int(jnp.linalg.matrix_rank(RANK2_F32))
    b = np.arange(5, dtype=np.float32)
    got, want = fnp.linalg.lstsq(RANK2_F32, b), jnp.linalg.lstsq(RANK2_F32, b)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    assert int(got[2]) == int(want[2])


# --------------------------------------------------------------------------- item 2: det's derivative

SINGULAR = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])  # rank 2
RANK1 = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [3.0, 6.0, 9.0]])
ADJ_SINGULAR = np.array([[-3.0, 6.0, -3.0], [6.0, -12.0, 6.0], [-3.0, 6.0, -3.0]])
TANGENT = np.eye(3) + np.arange(9.0).reshape(3, 3) / 10
JAX_JVP_SINGULAR = -17.999999999999993
# jax.hessian(jnp.linalg.det) (9x9, row-major), exact integers: the 1x1 minors with their signs
JAX_HESS_SINGULAR = np.array([
    [0, 0, 0, 0, 9, -8, 0, -6, 5], [0, 0, 0, -9, 0, 7, 6, 0, -4], [0, 0, 0, 8, -7, 0, -5, 4, 0],
    [0, -9, 8, 0, 0, 0, 0, 3, -2], [9, 0, -7, 0, 0, 0, -3, 0, 1], [-8, 7, 0, 0, 0, 0, 2, -1, 0],
    [0, 6, -5, 0, -3, 2, 0, 0, 0], [-6, 0, 4, 3, 0, -1, 0, 0, 0], [5, -4, 0, -2, 1, 0, 0, 0, 0]], float)
JAX_HESS_RANK1 = np.array([
    [0, 0, 0, 0, 9, -6, 0, -6, 4], [0, 0, 0, -9, 0, 3, 6, 0, -2], [0, 0, 0, 6, -3, 0, -4, 2, 0],
    [0, -9, 6, 0, 0, 0, 0, 3, -2], [9, 0, -3, 0, 0, 0, -3, 0, 1], [-6, 3, 0, 0, 0, 0, 2, -1, 0],
    [0, 6, -4, 0, -3, 2, 0, 0, 0], [-6, 0, 2, 3, 0, -1, 0, 0, 0], [4, -2, 0, -2, 1, 0, 0, 0, 0]], float)
JAX_HESS_IDENTITY = np.array([
    [0, 0, 0, 0, 1, 0, 0, 0, 1], [0, 0, 0, -1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, -1, 0, 0],
    [0, -1, 0, 0, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 0, 0, -1, 0],
    [0, 0, -1, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, -1, 0, 0, 0], [1, 0, 0, 0, 1, 0, 0, 0, 0]], float)


def _modes(f):
    """f eagerly and under jit on both backends."""
    return [("eager", f)] + [(b, ft.jit(f, backend=b)) for b in BACKENDS]


@pytest.mark.parametrize("det", [fnp.linalg.det, SLA.det], ids=["numpy.linalg", "scipy.linalg"])
def test_det_gradient_at_a_singular_matrix_is_the_adjugate(det):
    for mode, g in _modes(ft.grad(det)):
        np.testing.assert_allclose(g(SINGULAR), ADJ_SINGULAR, atol=1e-12, err_msg=mode)
        np.testing.assert_allclose(g(RANK1), np.zeros((3, 3)), atol=1e-12, err_msg=mode)
    for mode, f in _modes(lambda a, t: ft.jvp(det, (a,), (t,))):
        value, tangent = f(SINGULAR, TANGENT)
        assert abs(float(value)) < 1e-12 and abs(float(tangent) - JAX_JVP_SINGULAR) < 1e-12, mode


@pytest.mark.parametrize("point,want", [(SINGULAR, JAX_HESS_SINGULAR), (RANK1, JAX_HESS_RANK1),
                                        (np.eye(3), JAX_HESS_IDENTITY)], ids=["rank2", "rank1", "identity"])
def test_det_second_derivatives_at_singular_and_degenerate_matrices(point, want):
    """The adjugate's own derivative is exact at zero and repeated singular values (an SVD-based
    derivative taking 1 / (s_j^2 - s_i^2) as 0 would miss the off-diagonal terms at the identity)."""
    for mode, h in _modes(ft.hessian(fnp.linalg.det)):
        np.testing.assert_allclose(np.asarray(h(point)).reshape(9, 9), want, atol=1e-12, err_msg=mode)
    w = np.arange(9.0).reshape(3, 3) - 4
    grad_of_grad = ft.grad(lambda a: fnp.sum(ft.grad(fnp.linalg.det)(a) * w))
    for mode, gg in _modes(grad_of_grad):
        np.testing.assert_allclose(gg(point), (want @ w.reshape(9)).reshape(3, 3), atol=1e-12, err_msg=mode)
    fwd_over_rev = ft.jacfwd(ft.grad(fnp.linalg.det))(point)
    np.testing.assert_allclose(np.asarray(fwd_over_rev).reshape(9, 9), want, atol=1e-12)


def test_det_derivatives_batch_and_keep_float32():
    batch = np.stack([SINGULAR, RANK1, np.eye(3) * 2])
    got = ft.vmap(ft.grad(fnp.linalg.det))(batch)
    np.testing.assert_allclose(got, [ADJ_SINGULAR, np.zeros((3, 3)), 4 * np.eye(3)], atol=1e-12)
    g32 = ft.grad(fnp.linalg.det)(SINGULAR.astype(np.float32))
    assert g32.dtype == np.float32
    np.testing.assert_allclose(g32, ADJ_SINGULAR, atol=1e-5)


@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (4, 4), (2, 3, 3)])
def test_det_and_slogdet_check_grads_at_nonsingular_matrices(shape):
    a = np.random.default_rng(sum(shape)).standard_normal(shape) + 0.5 * np.eye(shape[-1])
    check_grads(fnp.linalg.det, (a,), order=2, modes=("fwd", "rev"))
    check_grads(lambda x: fnp.linalg.slogdet(x)[1], (a,), order=2, modes=("fwd", "rev"))


def test_slogdet_gradient_at_a_singular_matrix_does_not_raise():
    """log|det| has no derivative there: JAX gives inf / NaN from its solve; here a solve of the
    singular matrix gives the same kind of numbers instead of raising LinAlgError."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for mode, g in _modes(ft.grad(lambda a: fnp.linalg.slogdet(a)[1])):
            got = np.asarray(g(SINGULAR))
            assert got.shape == (3, 3) and (not np.all(np.isfinite(got)) or np.abs(got).max() > 1e12), mode
        inv = np.asarray(fnp.linalg.inv(SINGULAR))
        assert not np.all(np.isfinite(inv)) or np.abs(inv).max() > 1e12


def test_det_derivatives_match_live_jax(jax_x64):
    import jax.numpy as jnp
    jax = jax_x64
    for point in (SINGULAR, RANK1, np.eye(3)):
        np.testing.assert_allclose(ft.grad(fnp.linalg.det)(point), jax.grad(jnp.linalg.det)(point), atol=1e-12)
        np.testing.assert_allclose(ft.hessian(fnp.linalg.det)(point), jax.hessian(jnp.linalg.det)(point), atol=1e-12)
    got = ft.jvp(fnp.linalg.det, (SINGULAR,), (TANGENT,))[1]
    np.testing.assert_allclose(got, jax.jvp(jnp.linalg.det, (SINGULAR,), (TANGENT,))[1], atol=1e-12)


# --------------------------------------------------------------------------- item 3: float32 stays float32

_X = np.array([-2.5, -0.7, 0.0, 0.3, 1.7, 16.5])
_P = np.array([0.0, 1e-30, 0.01, 0.5, 0.9, 1.0])
_M = np.array([[0.1, 2.0, -1.0], [0.5, -0.3, 1.2], [2.0, 0.0, 0.7]])

FLOAT32_CASES = {
    "expm": (SLA.expm, _M),
    "expm-squarings": (SLA.expm, _M * 6),
    "digamma": (SP.digamma, _X),
    "entr": (SP.entr, _X),
    "ndtri": (SP.ndtri, _P),
    "lu": (SLA.lu, _M),
}


@pytest.mark.parametrize("mode", ["eager"] + BACKENDS)
@pytest.mark.parametrize("name", sorted(FLOAT32_CASES))
def test_float32_in_float32_out(name, mode):
    f, x = FLOAT32_CASES[name]
    run = f if mode == "eager" else ft.jit(f, backend=mode)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        got = ft.tree_util.tree_leaves(run(x.astype(np.float32)))
        want = ft.tree_util.tree_leaves(f(x.astype(np.float32).astype(np.float64)))
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, w, rtol=3e-6, atol=3e-6 * np.abs(w[np.isfinite(w)]).max())
