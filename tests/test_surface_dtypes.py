"""Output dtypes of the public surface of ``ft.scipy.special``, ``ft.scipy.linalg``, ``ft.scipy.stats``
(``norm``, ``multivariate_normal``) and ``fnp.linalg`` follow JAX's rules (issue 30): float32 inputs
give float32 outputs (complex64 for complex ones), float64 give float64, integer outputs have JAX's
integer dtypes (JAX with x64) -- eagerly and under ``jit`` on both backends.

Every public function of those modules has a case here (``test_every_public_function_has_a_case``),
so a new function joins the walk.  The integer dtypes are stored from JAX 0.10.2 (x64); with JAX
installed, ``test_dtypes_match_live_jax`` compares every case that JAX has with it directly.
"""
import inspect
import warnings

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.scipy import linalg as SLA
from functrace.scipy import special as SP
from functrace.scipy.stats import multivariate_normal as MVN
from functrace.scipy.stats import norm as NORM

MODULES = {"special": SP, "linalg": SLA, "norm": NORM, "multivariate_normal": MVN, "numpy.linalg": fnp.linalg}
FLOATS = ("float32", "float64")


def _jax_modules():
    import jax.numpy as jnp
    import jax.scipy as jsp
    return {"special": jsp.special, "linalg": jsp.linalg, "norm": jsp.stats.norm,
            "multivariate_normal": jsp.stats.multivariate_normal, "numpy.linalg": jnp.linalg}


# --------------------------------------------------------------------------- inputs

_R = np.random.default_rng(30)
_SQ = _R.standard_normal((3, 3)) + 3 * np.eye(3)
_SPD = _SQ @ _SQ.T + np.eye(3)
_RECT = _R.standard_normal((5, 3))
_TRI = np.triu(_SQ)
_B = _R.standard_normal((3, 2))
_V = np.array([-1.3, -0.2, 0.4, 1.1, 2.7])
_POS = np.array([0.3, 1.7, 2.5, 7.0, 16.5])
_MIXED = np.array([-2.5, -0.7, 0.3, 1.7, 16.5])  # both sides of the reflection at 1/2
_UNIT = np.array([0.0, 0.01, 0.5, 0.9, 1.0])
_ENTR = np.array([-1.0, 0.0, 0.5, 1.0, 2.0])


def _c(dt, *xs):
    return tuple(np.asarray(x, dt) for x in xs)


# name -> (module key, function name, make(m, dt) -> (f, args)); args are arrays (jit inputs)
CASES = {}


def case(key, fname, make, label=None):
    CASES[f"{key}.{label or fname}"] = (key, fname, make)


for _f in ("erf", "erfc", "expit", "logsumexp", "ndtr", "log_ndtr"):
    case("special", _f, lambda m, dt, f=_f: (getattr(m, f), _c(dt, _V)))
for _f in ("digamma", "gammaln"):
    case("special", _f, lambda m, dt, f=_f: (getattr(m, f), _c(dt, _MIXED)))
case("special", "betaln", lambda m, dt: (m.betaln, _c(dt, _POS, _POS[::-1])))
case("special", "entr", lambda m, dt: (m.entr, _c(dt, _ENTR)))
case("special", "erfinv", lambda m, dt: (m.erfinv, _c(dt, _V / 3)))
case("special", "logit", lambda m, dt: (m.logit, _c(dt, _UNIT)))
case("special", "ndtri", lambda m, dt: (m.ndtri, _c(dt, _UNIT)))
case("special", "xlogy", lambda m, dt: (m.xlogy, _c(dt, _V, _POS)))
case("special", "xlog1py", lambda m, dt: (m.xlog1py, _c(dt, _V, _POS)))
case("special", "logsumexp", lambda m, dt: (lambda a, b: m.logsumexp(a, b=b, return_sign=True), _c(dt, _V, _V)),
     "logsumexp-b-sign")
case("special", "log_ndtr", lambda m, dt: (m.log_ndtr, _c(dt, [-40.0, -25.0, -3.0, 0.5, 6.0])), "log_ndtr-tails")

for _f in ("cdf", "logcdf", "logpdf", "pdf", "sf", "logsf"):
    case("norm", _f, lambda m, dt, f=_f: (getattr(m, f), _c(dt, _V)))
    case("norm", _f, lambda m, dt, f=_f: (getattr(m, f), _c(dt, _V, _V[::-1], _POS)), f"{_f}-loc-scale")
for _f in ("ppf", "isf"):
    case("norm", _f, lambda m, dt, f=_f: (getattr(m, f), _c(dt, _UNIT)))
    case("norm", _f, lambda m, dt, f=_f: (getattr(m, f), _c(dt, _UNIT, _V, _POS)), f"{_f}-loc-scale")
for _f in ("logpdf", "pdf"):
    case("multivariate_normal", _f, lambda m, dt, f=_f: (getattr(m, f), _c(dt, _RECT, _V[:3], _SPD)))

case("linalg", "cho_factor", lambda m, dt: (lambda a: m.cho_factor(a)[0], _c(dt, _SPD)))
case("linalg", "cho_solve", lambda m, dt: (lambda a, b: m.cho_solve((a, True), b), _c(dt, np.linalg.cholesky(_SPD), _B)))
case("linalg", "cholesky", lambda m, dt: (m.cholesky, _c(dt, _SPD)))
case("linalg", "det", lambda m, dt: (m.det, _c(dt, _SQ)))
case("linalg", "eigh", lambda m, dt: (m.eigh, _c(dt, _SPD)))
case("linalg", "expm", lambda m, dt: (m.expm, _c(dt, _SQ / 4)))
case("linalg", "expm", lambda m, dt: (m.expm, _c(dt, _SQ * 3)), "expm-squarings")
case("linalg", "inv", lambda m, dt: (m.inv, _c(dt, _SQ)))
case("linalg", "lu", lambda m, dt: (m.lu, _c(dt, _SQ)))
case("linalg", "lu", lambda m, dt: (m.lu, _c(dt, _RECT)), "lu-rect")
case("linalg", "lu", lambda m, dt: (lambda a: m.lu(a, permute_l=True), _c(dt, _SQ)), "lu-permute_l")
case("linalg", "lu_factor", lambda m, dt: (m.lu_factor, _c(dt, _SQ)))
case("linalg", "lu_solve", lambda m, dt: (lambda a, b: m.lu_solve(m.lu_factor(a), b), _c(dt, _SQ, _B)))
case("linalg", "qr", lambda m, dt: (m.qr, _c(dt, _RECT)))
case("linalg", "solve", lambda m, dt: (m.solve, _c(dt, _SQ, _B)))
case("linalg", "solve_triangular", lambda m, dt: (m.solve_triangular, _c(dt, _TRI, _B)))
case("linalg", "svd", lambda m, dt: (m.svd, _c(dt, _RECT)))

_NL = "numpy.linalg"
for _f in ("det", "inv", "eig", "eigvals", "slogdet", "svdvals", "matrix_transpose", "cond", "matrix_rank", "trace",
           "diagonal", "matrix_norm", "norm"):
    case(_NL, _f, lambda m, dt, f=_f: (getattr(m, f), _c(dt, _SQ)))
for _f in ("cholesky", "eigh", "eigvalsh"):
    case(_NL, _f, lambda m, dt, f=_f: (getattr(m, f), _c(dt, _SPD)))
for _f in ("pinv", "qr", "svd", "matrix_rank"):
    case(_NL, _f, lambda m, dt, f=_f: (getattr(m, f), _c(dt, _RECT)), f"{_f}-rect")
for _f in ("matmul", "tensordot", "solve"):
    case(_NL, _f, lambda m, dt, f=_f: (getattr(m, f), _c(dt, _SQ, _SQ.T)))
for _f in ("outer", "vecdot", "cross"):
    case(_NL, _f, lambda m, dt, f=_f: (getattr(m, f), _c(dt, _V[:3], _POS[:3])))
case(_NL, "vector_norm", lambda m, dt: (m.vector_norm, _c(dt, _V)))
case(_NL, "norm", lambda m, dt: (lambda a: m.norm(a, "nuc"), _c(dt, _SQ)), "norm-nuc")
case(_NL, "cond", lambda m, dt: (lambda a: m.cond(a, 1), _c(dt, _SQ)), "cond-1")
case(_NL, "lstsq", lambda m, dt: (m.lstsq, _c(dt, _RECT, _V)))
case(_NL, "matrix_power", lambda m, dt: (lambda a: m.matrix_power(a, 3), _c(dt, _SQ)))
case(_NL, "matrix_power", lambda m, dt: (lambda a: m.matrix_power(a, -2), _c(dt, _SQ)), "matrix_power-negative")
case(_NL, "multi_dot", lambda m, dt: (lambda a, b: m.multi_dot([a, b, a]), _c(dt, _SQ, _SQ.T)))
case(_NL, "triangular_solve", lambda m, dt: (lambda a, b: m.triangular_solve(a, b, lower=False), _c(dt, _TRI, _B)))
case(_NL, "permutation_matrix", lambda m, dt: (lambda p: m.permutation_matrix(p, dt), (np.array([2, 0, 1], np.int32),)))
case(_NL, "lu_pivots_to_permutation",
     lambda m, dt: (lambda p: m.lu_pivots_to_permutation(p, 3), (np.array([2, 2, 2], np.int32),)))

# JAX's names that differ: jnp.linalg has no triangular_solve / permutation_matrix /
# lu_pivots_to_permutation (jax.lax.linalg's are not numpy-level functions)
NOT_IN_JAX = {"numpy.linalg.triangular_solve", "numpy.linalg.permutation_matrix",
              "numpy.linalg.lu_pivots_to_permutation"}

# jax.scipy.stats.norm.ppf / isf cast their result to the default float (``jnp.asarray(..., float)``):
# float64 when x64 is on, float32 otherwise.  Here float32 stays float32 (JAX's result without x64).
JAX_X64_DEFAULT_FLOAT = {"norm.ppf", "norm.ppf-loc-scale", "norm.isf", "norm.isf-loc-scale"}

# The non-float outputs, as JAX 0.10.2 gives them with x64 (the same for float32 and float64 inputs).
STORED_INTEGER_DTYPES = {
    "linalg.lu_factor": [None, "int32"],
    "numpy.linalg.matrix_rank": ["int64"],
    "numpy.linalg.matrix_rank-rect": ["int64"],
    "numpy.linalg.lstsq": [None, None, "int64", None],
    "numpy.linalg.lu_pivots_to_permutation": ["int32"],
}


def expected_dtypes(name, dt, got):
    """The dtype of each output: the input's float dtype (complex: of its precision), else the stored
    integer dtype."""
    dt = np.dtype(dt)
    out = []
    for i, g in enumerate(got):
        kind = np.dtype(g.dtype).kind
        if kind == "f":
            out.append(dt.name)
        elif kind == "c":
            out.append(np.result_type(dt, np.complex64).name)
        else:
            out.append(STORED_INTEGER_DTYPES[name][i])
    return out


def _public_functions(module):
    return {n for n, v in vars(module).items()
            if not n.startswith("_") and inspect.isfunction(v) and v.__module__ == module.__name__}


def test_every_public_function_has_a_case():
    covered = {(key, fname) for key, fname, _ in CASES.values()}
    missing = sorted(f"{key}.{n}" for key, m in MODULES.items() for n in _public_functions(m) if (key, n) not in covered)
    assert missing == []


def _leaves(out):
    return [np.asarray(x) for x in ft.tree_util.tree_leaves(out)]


def _run(mode, f, args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            if mode == "eager":
                return _leaves(f(*args))
            return _leaves(ft.jit(f, backend=mode)(*args))


@pytest.mark.parametrize("mode", ["eager", "numpy", "opencl"])
@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_output_dtypes_follow_jax(name, dt, mode):
    key, _, make = CASES[name]
    f, args = make(MODULES[key], np.dtype(dt))
    got = _run(mode, f, args)
    assert [g.dtype.name for g in got] == expected_dtypes(name, dt, got), name


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("name", sorted(set(CASES) - NOT_IN_JAX))
def test_dtypes_match_live_jax(name, dt, jax_x64):
    key, _, make = CASES[name]
    f, args = make(MODULES[key], np.dtype(dt))
    jf, _ = make(_jax_modules()[key], np.dtype(dt))
    got = _run("eager", f, args)
    want = [np.asarray(x).dtype.name for x in jax_x64.tree_util.tree_leaves(jax_x64.jit(jf)(*args))]
    if name in JAX_X64_DEFAULT_FLOAT and dt == "float32":
        assert want == ["float64"]  # JAX's cast to the default float (float32 without x64)
        want = ["float32"]
    assert [g.dtype.name for g in got] == want
