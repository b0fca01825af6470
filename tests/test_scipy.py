"""functrace.scipy: special functions and normal distributions against stored scipy values (and
scipy itself when installed, over wide ranges), derivatives (check_grads order 2, forward and
reverse), vmap against a loop, jit on both backends, stored JAX gradients."""
from __future__ import annotations

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.test_util import check_grads

S = ft.scipy.special
ST = ft.scipy.stats
rng = np.random.default_rng(11)

# (points, scipy 1.x's values there): checked without scipy installed
SCIPY_VALUES = {
    "gammaln": ([-7.3, -2.5, -0.3, 1e-08, 0.5, 1.0, 1.4616321449683622, 2.0, 3.7, 14.99, 15.0, 22.5, 170.3, 100000.0, 1e15],
                [-7.779101629826853, -0.05624371649767401, 1.4648400508576027, 18.42068073818021, 0.5723649429247, 0.0,
                 -0.1214862905358497, 0.0, 1.428072326665388, 25.164481163825506, 25.191221182738683, 46.91997879580878,
                 702.9773854513281, 1051287.7089736569, 3.3538776394910668e+16]),
    "digamma": ([-7.3, -2.5, -0.3, 1e-08, 0.5, 1.0, 1.4616321449683622, 2.0, 3.7, 14.99, 15.0, 22.5, 170.3, 100000.0, 1e15],
                [4.33730730551005, 1.1031566406452433, 2.1133097796353972, -100000000.57721564, -1.9635100260214235,
                 -0.5772156649015329, -9.241265521729427e-17, 0.42278433509846713, 1.1671535393615113,
                 2.6736570417430445, 2.6743466616607936, 3.091128510419501, 5.134622719020004, 11.512920464961896,
                 34.538776394910684]),
    "ndtri": ([1e-300, 1e-100, 1e-20, 1e-05, 0.02, 0.0243, 0.3, 0.5, 0.7, 0.97, 0.9999999999],
              [-37.0470962993612, -21.273453560965322, -9.262340089798409, -4.264890793922825, -2.053748910631823,
               -1.9720841590292884, -0.5244005127080409, 0.0, 0.5244005127080407, 1.8807936081512509, 6.361340889697422]),
    "erfinv": ([-0.999999999999, -0.999, -0.5, -1e-20, 1e-09, 0.3, 0.95, 0.99999],
               [-5.042031898572696, -2.326753765513524, -0.4769362762044699, -8.86226925452758e-21, 8.86226925452758e-10,
                0.2724627147267544, 1.3859038243496775, 3.123413274341571]),
    "log_ndtr": ([-1000.0, -50.0, -20.1, -19.9, -5.0, -1.0, 0.0, 1.5, 6.0, 10.0, 30.0],
                 [-500007.8266948122, -1254.8313611394199, -205.92711840194826, -201.91716770733265, -15.064998393988727,
                  -1.8410216450092634, -0.6931471805599453, -0.06914345561223399, -9.86587645524372e-10,
                  -7.61985302416047e-24, -4.906713927147908e-198]),
    "ndtr": ([-10.0, -1.0, 0.0, 2.0, 8.0],
             [7.61985302416047e-24, 0.15865525393145707, 0.5, 0.9772498680518208, 0.9999999999999993]),
    "erfc": ([-3.0, -0.1, 0.0, 0.7, 5.0, 26.0],
             [1.9999779095030015, 1.1124629160182848, 1.0, 0.3221988061625817, 1.5374597944280347e-12, 5.663192408856145e-296]),
}


@pytest.mark.parametrize("name", sorted(SCIPY_VALUES))
def test_values_match_stored_scipy_values(name):
    x, want = (np.array(v) for v in SCIPY_VALUES[name])
    got = getattr(S, name)(x)
    np.testing.assert_allclose(got, want, rtol=5e-13, atol=1e-14 if name in ("gammaln", "digamma") else 0)


_WIDE = {  # name: (arguments over the whole domain), compared with scipy when it is installed
    "gammaln": (np.concatenate([rng.uniform(-40, 40, 400), rng.uniform(0, 3, 200), 10.0 ** rng.uniform(-10, 30, 50)]),),
    "digamma": (np.concatenate([rng.uniform(-40, 40, 400), rng.uniform(0, 3, 200), 10.0 ** rng.uniform(-10, 30, 50)]),),
    "ndtri": (np.concatenate([rng.uniform(0, 1, 400), 10.0 ** -rng.uniform(1, 300, 100), 1 - 10.0 ** -rng.uniform(1, 15, 50)]),),
    "erfinv": (np.concatenate([rng.uniform(-1, 1, 400), 10.0 ** -rng.uniform(1, 30, 50)]),),
    "log_ndtr": (rng.uniform(-60, 40, 500),),
    "ndtr": (rng.uniform(-30, 30, 500),),
    "erfc": (rng.uniform(-6, 26, 500),),
    "erf": (rng.uniform(-6, 6, 200),),
    "expit": (rng.uniform(-50, 50, 200),),
    "logit": (rng.uniform(0, 1, 200),),
    "entr": (rng.uniform(0, 5, 200),),
    "xlogy": (rng.uniform(0, 5, 200), rng.uniform(0, 5, 200)),
    "xlog1py": (rng.uniform(0, 5, 200), rng.uniform(-0.9, 5, 200)),
    "betaln": (rng.uniform(0.1, 30, 200), rng.uniform(0.1, 30, 200)),
}


@pytest.mark.parametrize("name", sorted(_WIDE))
def test_values_match_scipy(name):
    special = pytest.importorskip("scipy.special", reason="optional comparison with scipy")
    args = _WIDE[name]
    got, want = getattr(S, name)(*args), getattr(special, name)(*args)
    scale = np.maximum(1.0, np.abs(want)) if name in ("gammaln", "digamma", "betaln") else np.abs(want)
    # (the far tails of erfc, ndtr, log_ndtr: math.erfc and scipy's Cephes differ by ~1e-13 there)
    np.testing.assert_array_less(np.abs(got - want), 1e-12 * scale + 1e-300)


def test_special_values_at_the_edges():
    np.testing.assert_array_equal(S.gammaln(np.array([0.0, -1.0, -7.0])), np.inf)
    np.testing.assert_array_equal(S.digamma(np.array([0.0, -1.0])), [-np.inf, np.nan])
    np.testing.assert_array_equal(S.ndtri(np.array([0.0, 1.0, -0.1, 1.1])), [-np.inf, np.inf, np.nan, np.nan])
    np.testing.assert_array_equal(S.erfinv(np.array([-1.0, 1.0, 1.5])), [-np.inf, np.inf, np.nan])
    np.testing.assert_array_equal(S.entr(np.array([-1.0, 0.0])), [-np.inf, 0.0])
    assert S.xlogy(0.0, 0.0) == 0.0 and S.xlog1py(0.0, -1.0) == 0.0
    np.testing.assert_array_equal(S.logit(np.array([0.0, 1.0])), [-np.inf, np.inf])


def test_logsumexp_matches_numpy():
    a = rng.standard_normal((3, 4))
    b = rng.uniform(-1, 2, (3, 4))
    np.testing.assert_allclose(S.logsumexp(a), np.log(np.sum(np.exp(a))))
    np.testing.assert_allclose(S.logsumexp(a, axis=0, keepdims=True), np.log(np.sum(np.exp(a), 0, keepdims=True)))
    value, sign = S.logsumexp(a, axis=1, b=b, return_sign=True)
    total = np.sum(b * np.exp(a), axis=1)
    np.testing.assert_allclose(value, np.log(np.abs(total)))
    np.testing.assert_array_equal(sign, np.sign(total))
    assert np.isnan(S.logsumexp(np.zeros(2), b=np.array([1.0, -2.0])))
    np.testing.assert_array_equal(S.logsumexp(np.full(3, -np.inf)), -np.inf)
    np.testing.assert_allclose(S.logsumexp(np.array([1000.0, 1000.0])), 1000 + np.log(2))


def test_norm_matches_closed_forms():
    x = rng.standard_normal(6) * 3
    loc, scale = 0.7, 1.9
    z = (x - loc) / scale
    np.testing.assert_allclose(ST.norm.logpdf(x, loc, scale), -z * z / 2 - np.log(scale * np.sqrt(2 * np.pi)))
    np.testing.assert_allclose(ST.norm.pdf(x, loc, scale), np.exp(-z * z / 2) / (scale * np.sqrt(2 * np.pi)))
    np.testing.assert_allclose(ST.norm.cdf(x, loc, scale), S.ndtr(z))
    np.testing.assert_allclose(ST.norm.sf(x, loc, scale), 1 - S.ndtr(z))
    np.testing.assert_allclose(ST.norm.logcdf(x, loc, scale), np.log(S.ndtr(z)))
    q = rng.uniform(0, 1, 6)
    np.testing.assert_allclose(ST.norm.cdf(ST.norm.ppf(q, loc, scale), loc, scale), q, rtol=1e-13)
    np.testing.assert_allclose(ST.norm.isf(q, loc, scale), ST.norm.ppf(1 - q, loc, scale), rtol=1e-12)


def test_multivariate_normal_logpdf_matches_the_formula():
    d = 3
    a = rng.standard_normal((d, d))
    cov, mean = a @ a.T + np.eye(d), rng.standard_normal(d)
    x = rng.standard_normal((2, 4, d))
    r = x - mean
    want = -0.5 * (d * np.log(2 * np.pi) + np.linalg.slogdet(cov)[1] + np.einsum("...i,ij,...j", r, np.linalg.inv(cov), r))
    got = ST.multivariate_normal.logpdf(x, mean, cov)
    assert got.shape == (2, 4)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(ST.multivariate_normal.logpdf(x[0, 0], mean, cov), want[0, 0], rtol=1e-12)
    with pytest.raises(ValueError, match="dimension"):
        ST.multivariate_normal.logpdf(x, mean[:2], cov)


GRAD_CASES = {
    "gammaln": (S.gammaln, (np.array([0.3, 1.7, 12.0, 20.0, -2.5, -0.3]),)),
    "digamma": (S.digamma, (np.array([0.3, 1.7, 12.0, 20.0, -2.5, -0.3]),)),
    "ndtri": (S.ndtri, (np.array([2e-3, 0.01, 0.3, 0.5, 0.8, 0.995]),)),
    "erfinv": (S.erfinv, (np.array([-0.99, -0.3, 0.01, 0.5, 0.9]),)),
    "log_ndtr": (S.log_ndtr, (np.array([-30.0, -20.5, -19.5, -3.0, 0.5, 4.0, 9.0]),)),
    "ndtr": (S.ndtr, (np.array([-3.0, 0.5, 4.0]),)),
    "erf": (S.erf, (np.array([-1.0, 0.5, 2.0]),)),
    "erfc": (S.erfc, (np.array([-1.0, 0.5, 2.0]),)),
    "xlogy": (S.xlogy, (np.array([0.5, 2.0]), np.array([0.3, 1.5]))),
    "xlog1py": (S.xlog1py, (np.array([0.5, 2.0]), np.array([0.3, 1.5]))),
    "entr": (S.entr, (np.array([0.5, 2.0]),)),
    "logit": (S.logit, (np.array([0.2, 0.7]),)),
    "expit": (S.expit, (np.array([0.2, -0.7]),)),
    "betaln": (S.betaln, (np.array([0.5, 2.0]), np.array([1.3, 4.0]))),
    "logsumexp-b": (lambda a, b: S.logsumexp(a, axis=1, b=b), (rng.standard_normal((2, 3)), rng.uniform(0.5, 2, (2, 3)))),
    "logsumexp-sign": (lambda a, b: S.logsumexp(a, b=b, return_sign=True)[0],
                       (rng.standard_normal(3), np.array([1.0, -3.0, 0.5]))),
    "norm": (lambda x, m, s: [ST.norm.logpdf(x, m, s), ST.norm.cdf(x, m, s), ST.norm.logcdf(x, m, s),
                              ST.norm.pdf(x, m, s), ST.norm.sf(x, m, s)],
             (rng.standard_normal(3), np.array(0.3), np.array(1.4))),
    "norm-ppf": (ST.norm.ppf, (np.array([0.1, 0.5, 0.97]), np.array(0.3), np.array(1.4))),
    "multivariate_normal": (lambda x, m, a: ST.multivariate_normal.logpdf(x, m, a @ a.T + np.eye(3)),
                            (rng.standard_normal((4, 3)), rng.standard_normal(3), rng.standard_normal((3, 3)))),
}


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_grads(name):
    f, args = GRAD_CASES[name]
    check_grads(f, args, order=2, modes=("fwd", "rev"))


_BATCHED = ["gammaln", "digamma", "ndtri", "erfinv", "log_ndtr", "logsumexp-b", "norm-ppf", "multivariate_normal"]


@pytest.mark.parametrize("name", _BATCHED)
def test_vmap_matches_a_loop(name):
    f, args = GRAD_CASES[name]
    stacked = [np.stack([a, a * 0.9 + 0.01, a * 1.05]) for a in args]
    got = ft.vmap(f)(*stacked)
    want = np.stack([np.asarray(f(*[s[i] for s in stacked])) for i in range(3)])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("backend", ["numpy", "opencl"])
@pytest.mark.parametrize("name", _BATCHED + ["norm"])
def test_jit_matches_eager(name, backend):
    f, args = GRAD_CASES[name]
    got, want = ft.jit(f, backend=backend)(*args), f(*args)
    for g, w in zip(ft.tree_util.tree_leaves(got), ft.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-9, atol=1e-12)


def test_erfc_runs_in_generated_kernels(monkeypatch):
    monkeypatch.setattr(ft.config, "opencl_small_program_elements", 0)
    monkeypatch.setattr(ft.config, "opencl_host_step_elements", 0)
    x = rng.uniform(-5, 25, 1001)
    exe = ft.jit(lambda v: S.log_ndtr(v) * 2.0, backend="opencl").lower(x).compile()
    assert exe.num_host_steps == 0, exe.report()
    np.testing.assert_allclose(np.asarray(exe(x)), S.log_ndtr(x) * 2.0, rtol=1e-12)


# scipy.linalg
LA = ft.scipy.linalg


def test_scipy_linalg_matches_numpy():
    a = rng.standard_normal((4, 4))
    spd = a @ a.T + 4 * np.eye(4)
    b = rng.standard_normal((4, 2))
    upper = np.triu(a) + 4 * np.eye(4)
    np.testing.assert_allclose(LA.solve_triangular(upper, b), np.linalg.solve(upper, b))
    np.testing.assert_allclose(LA.solve_triangular(upper, b[:, 0], trans=1), np.linalg.solve(upper.T, b[:, 0]))
    np.testing.assert_allclose(LA.solve_triangular(upper.T, b, lower=True, unit_diagonal=True),
                               np.linalg.solve(np.tril(upper.T, -1) + np.eye(4), b))
    np.testing.assert_allclose(LA.cholesky(spd), np.linalg.cholesky(spd).T)
    np.testing.assert_allclose(LA.cho_solve(LA.cho_factor(spd), b), np.linalg.solve(spd, b))
    np.testing.assert_allclose(LA.cho_solve(LA.cho_factor(spd, lower=True), b), np.linalg.solve(spd, b))
    np.testing.assert_allclose(LA.solve(spd, b, assume_a="pos"), np.linalg.solve(spd, b))
    np.testing.assert_allclose(LA.det(a), np.linalg.det(a))
    np.testing.assert_allclose(LA.inv(spd), np.linalg.inv(spd))
    np.testing.assert_allclose(LA.eigh(spd, eigvals_only=True), np.linalg.eigvalsh(spd))
    np.testing.assert_allclose(LA.qr(a)[1], np.linalg.qr(a)[1])
    np.testing.assert_allclose(LA.svd(a, compute_uv=False), np.linalg.svd(a, compute_uv=False))


@pytest.mark.parametrize("shape", [(4, 4), (40, 40), (2, 5, 5)])
def test_lu_matches_the_factorization(shape):
    a = rng.standard_normal(shape)
    b = rng.standard_normal(shape[:-1])
    factors, pivots = LA.lu_factor(a)
    p, lower, upper = LA.lu(a)
    np.testing.assert_allclose(p @ lower @ upper, a, rtol=1e-12, atol=1e-12)
    assert np.all(np.abs(np.tril(lower, -1)) <= 1 + 1e-12)  # partial pivoting
    np.testing.assert_allclose(np.tril(factors, -1) + np.eye(shape[-1]), lower, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(np.triu(factors), upper, rtol=1e-12, atol=1e-15)
    solve = np.vectorize(np.linalg.solve, signature="(n,n),(n)->(n)")
    np.testing.assert_allclose(LA.lu_solve((factors, pivots), b), solve(a, b), rtol=1e-10)
    np.testing.assert_allclose(LA.lu_solve((factors, pivots), b, trans=1), solve(np.swapaxes(a, -1, -2), b), rtol=1e-10)
    np.testing.assert_allclose(ft.jit(lambda a, b: LA.lu_solve(LA.lu_factor(a), b), backend="opencl")(a, b), solve(a, b),
                               rtol=1e-10)


def test_lu_matches_scipy():
    linalg = pytest.importorskip("scipy.linalg", reason="optional comparison with scipy")
    for shape in [(4, 4), (40, 40), (5, 3), (3, 5)]:
        a = rng.standard_normal(shape)
        for got, want in zip(LA.lu(a), linalg.lu(a)):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    a = rng.standard_normal((6, 6))
    factors, pivots = LA.lu_factor(a)
    want_factors, want_pivots = linalg.lu_factor(a)
    np.testing.assert_allclose(factors, want_factors, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(pivots, want_pivots)


def test_lu_grads_and_vmap():
    a, b = rng.standard_normal((4, 4)), rng.standard_normal(4)
    for f in (lambda a, b: LA.lu_factor(a)[0] * b, lambda a, b: LA.lu_solve(LA.lu_factor(a), b, trans=1),
              lambda a, b: [v * b for v in LA.lu(a)[1:]]):
        check_grads(f, (a, b), order=2, modes=("fwd", "rev"))
    stack = np.stack([a, a.T, a * 2])
    got = ft.vmap(lambda m: LA.lu_solve(LA.lu_factor(m), b))(stack)
    np.testing.assert_allclose(got, [np.linalg.solve(m, b) for m in stack], rtol=1e-12)


def _expm_by_series(a, terms=60):
    out, term = np.eye(a.shape[-1]), np.eye(a.shape[-1])
    for k in range(1, terms):
        term = term @ a / k
        out = out + term
    return out


@pytest.mark.parametrize("scale", [0.1, 1.0, 20.0])
def test_expm_matches_the_series(scale):
    a = rng.standard_normal((4, 4)) * scale / 4
    want = _expm_by_series(a / 2 ** 8, 30)
    for _ in range(8):
        want = want @ want
    np.testing.assert_allclose(LA.expm(a), want, rtol=1e-11)
    np.testing.assert_allclose(ft.jit(LA.expm)(a), want, rtol=1e-10)  # traced: a fixed 2^20 scaling


def test_scipy_linalg_grads():
    a, b = rng.standard_normal((3, 3)), rng.standard_normal((3, 2))
    check_grads(lambda a, b: LA.cho_solve(LA.cho_factor(a @ a.T + np.eye(3)), b), (a, b), order=2, modes=("fwd", "rev"))
    check_grads(lambda a, b: LA.solve_triangular(a + 3 * np.eye(3), b, trans=1), (a, b), order=2, modes=("fwd", "rev"))
    check_grads(LA.expm, (a * 0.5,), order=2, modes=("fwd", "rev"))


def test_scipy_linalg_unsupported_options_say_so():
    with pytest.raises(NotImplementedError, match="pivoting"):
        LA.qr(np.eye(2), pivoting=True)
    with pytest.raises(NotImplementedError, match="generalized"):
        LA.eigh(np.eye(2), np.eye(2))


# Values and gradients computed once with jax.scipy (JAX 0.4, x64).
_X = np.array([[0.3, -1.2, 0.8], [1.1, 0.4, -0.6]])
_M = np.array([0.1, -0.2, 0.3])
_C = np.array([[2.0, 0.3, -0.2], [0.3, 1.5, 0.4], [-0.2, 0.4, 1.2]])
_E = np.array([[0.1, 0.5, -0.3], [0.2, -0.4, 0.6], [0.0, 0.3, 0.2]])


def _jax_cases(scipy_, np_):
    """The functions compared with JAX, for functrace (ft.scipy, fnp) and JAX (jax.scipy, jnp)."""
    return {
        "multivariate_normal": (lambda x, m, c: np_.sum(scipy_.stats.multivariate_normal.logpdf(x, m, c)), (_X, _M, _C)),
        "norm.ppf": (lambda q: np_.sum(scipy_.stats.norm.ppf(q, 0.5, 2.0) ** 2), (np.array([0.01, 0.3, 0.9]),)),
        "logsumexp": (lambda a, b: np_.sum(scipy_.special.logsumexp(a, axis=1, b=b, return_sign=True)[0]),
                      (np.array([[0.5, -1.0, 2.0], [0.1, 0.2, -0.3]]), np.array([[1.0, 2.0, 0.5], [0.3, -1.0, 2.0]]))),
        "gammaln*digamma": (lambda x: np_.sum(scipy_.special.gammaln(x) * scipy_.special.digamma(x)),
                            (np.array([0.3, 2.5, 7.0, -1.5]),)),
        "log_ndtr": (lambda x: np_.sum(scipy_.special.log_ndtr(x)), (np.array([-25.0, -3.0, 0.5, 7.0]),)),
        "expm": (lambda a: np_.sum(scipy_.linalg.expm(a) ** 2), (_E,)),
    }


JAX_VALUES = {
    "multivariate_normal": (-8.063607020296983, [
        [[-0.31919060052219317, 0.939295039164491, -0.7829634464751959], [-0.3257180156657963, -0.5711488250652743, 0.8860966057441254]],
        [0.6449086161879894, -0.36814621409921666, -0.10313315926892952],
        [[-0.43126060917996567, 0.08671279032510959, -0.15642724573758085], [0.08671279032510959, -0.16599191145893682, -0.3400845070182496],
         [-0.15642724573758085, -0.3400845070182496, -0.25063942678046747]]]),
    "norm.ppf": (26.928665333321888, [[-623.2438227862796, -6.313634549628752, 69.81497994562271]]),
    "logsumexp": (1.28022960243233, [
        [[0.27121550354543494, 0.12103271748165988, 0.6077517789729052], [0.5602563407365215, -2.063930048164948, 2.5036737074284265]],
        [[0.27121550354543494, 0.06051635874082994, 1.2155035579458104], [1.8675211357884052, 2.063930048164948, 1.2518368537142133]]]),
    "gammaln*digamma": (9.288384008021557, [[25.686121842539848, 0.6340257148487791, 4.517533463977487, 8.561022344786268]]),
    "log_ndtr": (-323.61608064549995, [[25.039873029070204, 3.283098654930443, 0.5091604338370335, 9.134720408376265e-12]]),
    "expm": (4.28769117917344, [[[2.9036922358018353, 1.0201820330355513, -0.21563009876019584],
                                 [1.074479793022594, 1.7932039497103311, 1.626250648935915],
                                 [-0.295026742198788, 1.7337297059020085, 3.878486172834714]]]),
}


@pytest.mark.parametrize("name", sorted(JAX_VALUES))
def test_values_and_grads_match_stored_jax_results(name):
    f, args = _jax_cases(ft.scipy, fnp)[name]
    argnums = tuple(range(len(args)))
    value, grads = ft.value_and_grad(f, argnums)(*args)
    want_value, want_grads = JAX_VALUES[name]
    # JAX's log_ndtr(-25) is 7e-10 below scipy's (and ours, which agree to 6e-14)
    np.testing.assert_allclose(value, want_value, rtol=1e-11 if name == "log_ndtr" else 1e-12)
    for g, w in zip(grads, want_grads):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", sorted(JAX_VALUES))
def test_values_and_grads_match_jax(name, jax_x64):
    jax = jax_x64
    import jax.numpy as jnp
    import jax.scipy as jsp
    f, args = _jax_cases(ft.scipy, fnp)[name]
    jf, _ = _jax_cases(jsp, jnp)[name]
    argnums = tuple(range(len(args)))
    got, want = ft.value_and_grad(f, argnums)(*args), jax.jit(jax.value_and_grad(jf, argnums))(*args)
    for g, w in zip(ft.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-9, atol=1e-9 if name == "log_ndtr" else 1e-12)


def test_lax_lgamma_and_digamma_are_the_special_functions():
    """ft.lax.lgamma / ft.lax.digamma (jax.lax's names; log |Gamma|, as XLA's) are gammaln / digamma."""
    assert ft.lax.lgamma is S.gammaln and ft.lax.digamma is S.digamma
    x, want = (np.array(v) for v in SCIPY_VALUES["gammaln"])
    np.testing.assert_allclose(ft.jit(ft.lax.lgamma, backend="numpy")(x), want, rtol=1e-13, atol=1e-14)
    x, want = (np.array(v) for v in SCIPY_VALUES["digamma"])
    np.testing.assert_allclose(ft.lax.digamma(x), want, rtol=1e-12, atol=1e-15)
