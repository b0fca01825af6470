"""``functrace.numpy.linalg``: differentiable, batched linear algebra.

A small set of primitives does the numerical work with host LAPACK (numpy.linalg, and for
the routines it does not expose the OpenBLAS numpy ships, see ``_lapack``): ``cholesky``,
``triangular_solve``, ``lu_factor`` / ``lu_solve``, ``det``, ``slogdet``, ``eigh``, ``eig``,
``svd`` and ``qr``.  Every other function (``inv``, ``pinv``, ``lstsq``, ``norm``, ``cond``,
``matrix_power``, ...) is built from them and from functrace.numpy, so it differentiates,
batches and jits through them.

* Matrices are the last two axes; leading axes are batch axes (the batching rule of every
  primitive moves the vmapped axis to the front, where numpy.linalg loops over it).
* Derivative rules are written with these primitives and functrace.numpy (so derivatives
  nest): the classic results (Giles 2008 for solve/inverse, Murray 2016 for Cholesky,
  the eigenvector and singular-vector formulas as JAX writes them).  ``svd`` and ``qr`` give
  their forward-mode rule; their reverse-mode rule is its transpose (``_transposed_jvp``).
* ``det``'s derivative is trace(adj(A) dA) with the adjugate from the SVD (``_adjugate``), not
  det(A) A^-1: it is right at singular matrices too (as JAX's LU-based rule), and the adjugate's
  own derivative rule is exact at zero and repeated singular values, so second derivatives are.
* Default cutoffs of ``pinv`` / ``lstsq`` / ``matrix_rank`` are relative to the largest singular
  value and scaled by the dtype's eps, as JAX's (``pinv``: 10 max(m, n) eps).  A solve of a
  singular matrix gives inf / NaN as LAPACK's (and JAX's), not an exception mid-program.
* Symmetric inputs (``cholesky``, ``eigh``) are symmetrized first, (A + A^T) / 2, as JAX
  does: the derivative then matches the function for every perturbation, not only
  symmetric ones.  Where eigenvalues (or singular values) coincide exactly, the eigenvector
  derivative's 1 / (w_j - w_i) factor is taken as 0 (JAX gives inf there); eigenvalue-only
  functions (``eigvalsh``, ``svd(compute_uv=False)``, norms) never form it, so they stay
  finite at degenerate points, as in JAX.
* ``eig`` / ``eigvals`` (general matrices) return complex arrays, as JAX: eigenvectors with
  LAPACK's normalization (unit norm, real largest-magnitude component), whose derivative JAX's
  rule follows (the vector is defined up to a complex factor: the rule keeps that choice, so it
  holds while the largest component stays the largest).  Real losses of them differentiate with
  JAX's convention for complex values.  Defective matrices (a Jordan block) have no eigenvalue
  derivative: the formula gives a finite value there, as in JAX; where eigenvalues coincide
  exactly, eigenvector derivatives use 0 for 1 / (w_j - w_i), as ``eigh`` (JAX: NaN).
* On OpenCL these primitives run as host steps (``host_step_reason`` below, shown by
  ``report()``): LAPACK on the host is what numpy offers, and is fast on CPU devices.
"""
from typing import Any as _Any
from typing import NamedTuple as _NamedTuple

import numpy as _np

from .. import arrays as _arrays
from .. import primitives as _P
from ..autodiff import vjp_flat as _vjp_flat
from ..core import ShapedArray as _ShapedArray
from ..custom import custom_jvp as _custom_jvp
from ..errors import NotInFunctrace as _NotInFunctrace
from ..errors import ShapeError as _ShapeError
from ..errors import user_frame_description as _where
from ..primitives import exclusive_products as _scan_exclusive_products
from . import _base as _fnp
from . import _lapack, _misc

_HOST_REASON = "LAPACK through numpy.linalg on the host: no OpenCL kernel for this decomposition"

# --------------------------------------------------------------------------- helpers


def _mT(x):
    """The transpose of the last two axes."""
    n = len(_P.shape_of(x))
    return _P.transpose(x, tuple(range(n - 2)) + (n - 1, n - 2))


def _mm(a, b):
    """Matrix product over the last two axes of operands with the same leading (batch) axes."""
    nb = len(_P.shape_of(a)) - 2
    batch = tuple(range(nb))
    return _P.dot_general(a, b, (((nb + 1,), (nb,)), (batch, batch)))


def _diag_part(x):
    """The diagonal of the last two axes, shape (..., n)."""
    return _fnp.diagonal(x, 0, -2, -1)


def _diag_matrix(d):
    """A (..., n, n) matrix with ``d`` (..., n) on its diagonal."""
    n = _P.shape_of(d)[-1]
    return _fnp.where(_np.eye(n, dtype=bool), _fnp.expand_dims(d, -1), _P.scalar_like(d, 0))


def _tri_mask(x, lower: bool, k: int = 0):
    """``x`` with the entries outside its lower (upper) triangle set to 0 (k: diagonal offset)."""
    n, m = _P.shape_of(x)[-2:]
    mask = _np.tri(n, m, k, dtype=bool) if lower else ~_np.tri(n, m, k - 1, dtype=bool)
    return _fnp.where(mask, x, _P.scalar_like(x, 0))


def _eye_like(x):
    """The identity broadcast to the shape of the square matrices ``x``."""
    n = _P.shape_of(x)[-1]
    return _P.broadcast_to(_np.eye(n, dtype=_P.dtype_of(x)), _P.shape_of(x))


def _symmetrize(x):
    return (x + _mT(x)) * _P.scalar_like(x, 0.5)


def _safe_reciprocal_differences(w):
    """F[..., i, j] = 1 / (w_j - w_i), and 0 where w_j == w_i (the diagonal, exact degeneracy)."""
    diff = _fnp.expand_dims(w, -2) - _fnp.expand_dims(w, -1)
    zero = diff == _P.scalar_like(diff, 0)
    return _fnp.where(zero, _P.scalar_like(diff, 0), 1 / _fnp.where(zero, _P.scalar_like(diff, 1), diff))


def _batch_leading(prim):
    """Batching: the vmapped axis becomes the first leading axis of every operand (unbatched
    operands are broadcast to it); numpy.linalg loops over leading axes."""
    def rule(vals, dims, **params):
        size = next(_P.shape_of(v)[d] for v, d in zip(vals, dims) if d is not None)
        moved = [_P.moveaxis(v, d, 0) if d is not None else
                 _P.broadcast_in_dim(v, (size,) + _P.shape_of(v), tuple(range(1, len(_P.shape_of(v)) + 1)))
                 for v, d in zip(vals, dims)]
        out = prim.bind(*moved, **params)
        return out, ([0] * len(out) if prim.multiple_results else 0)
    return rule


def _new_primitive(name: str, multiple_results: bool = False):
    p = _P.new_primitive(name)
    p.multiple_results = multiple_results
    p.host_step_reason = _HOST_REASON
    p.batch = _batch_leading(p)
    return p


def _square_aval(name: str, a, kinds: str = "f"):
    """``a`` if it is a stack of square matrices of a dtype kind in ``kinds`` ("fc": complex too)."""
    if len(a.shape) < 2 or a.shape[-1] != a.shape[-2]:
        raise _ShapeError(f"linalg.{name}: expected square matrices (..., n, n), got shape {a.shape} {_where()}")
    if a.dtype.kind not in kinds:
        raise TypeError(f"linalg.{name}: expected a float array, got {a.dtype.name} {_where()}")
    return a


def _transposed_jvp(prim, linear_jvp):
    """Set ``prim``'s rules from ``linear_jvp(primals, outs, tangents, **params) -> tangent outs``
    (linear in the tangents): forward mode applies it, reverse mode runs its transpose (the
    reverse sweep of that linear function, so its cotangents are differentiable too)."""
    def as_list(outs):
        return list(outs) if prim.multiple_results else [outs]

    def jvp_rule(primals, tangents, **params):
        outs = prim.bind(*primals, **params)
        tangents = [_P.zeros_like(p) if t is None else t for p, t in zip(primals, tangents)]
        touts = linear_jvp(primals, as_list(outs), tangents, **params)
        return outs, (touts if prim.multiple_results else touts[0])

    def vjp_rule(primals, needs, **params):
        outs = prim.bind(*primals, **params)

        def backward(cts):
            zeros = [_P.zeros_like(p) for p in primals]
            _, pull = _vjp_flat(lambda *ts: linear_jvp(primals, as_list(outs), list(ts), **params), zeros, needs)
            got = iter(pull(list(cts)))
            return [next(got) if n else None for n in needs]
        return outs, backward

    prim.jvp_rule = jvp_rule
    prim.vjp_rule = vjp_rule


# --------------------------------------------------------------------------- triangular_solve


def _triangle(a, lower: bool, unit_diagonal: bool):
    """The triangular matrix a ``triangular_solve`` of ``a`` reads (numpy)."""
    t = _np.tril(a) if lower else _np.triu(a)
    if unit_diagonal:
        idx = _np.arange(a.shape[-1])
        t[..., idx, idx] = 1
    return t


def _triangular_solve_impl(a, b, *, lower, transpose_a, unit_diagonal):
    if _lapack.usable(a):
        return _lapack.triangular_solve(a, b, lower, transpose_a, unit_diagonal)
    t = _triangle(_np.asarray(a), lower, unit_diagonal)
    if transpose_a:
        t = _np.swapaxes(t, -1, -2)
    return _np.linalg.solve(t, b)


def _solve_abstract(name, kinds: str = "f"):
    def rule(a, b, **params):
        _square_aval(name, a, kinds)
        if len(b.shape) != len(a.shape) or b.shape[:-2] != a.shape[:-2] or b.shape[-2] != a.shape[-1]:
            raise _ShapeError(f"linalg.{name}: right-hand sides of shape {b.shape} do not match "
                              f"matrices of shape {a.shape} {_where()}")
        if b.dtype != a.dtype:
            raise TypeError(f"linalg.{name}: operand dtypes differ ({a.dtype.name}, {b.dtype.name}) {_where()}")
        return b
    return rule


triangular_solve_p = _new_primitive("triangular_solve")
triangular_solve_p.impl = _triangular_solve_impl
triangular_solve_p.abstract_eval = _solve_abstract("triangular_solve")


def triangular_solve(a, b, *, lower: bool, transpose_a: bool = False, unit_diagonal: bool = False):
    """x with op(T) x = b, T the lower (upper) triangle of ``a``, op transposes if ``transpose_a``."""
    return triangular_solve_p.bind(a, b, lower=bool(lower), transpose_a=bool(transpose_a),
                                   unit_diagonal=bool(unit_diagonal))


def _read_triangle(t, lower, unit_diagonal):
    """The part of a tangent/cotangent of ``a`` that ``triangular_solve`` reads."""
    return _tri_mask(t, lower, (-1 if lower else 1) if unit_diagonal else 0)


def _tsolve_jvp_a(t, x, a, b, *, lower, transpose_a, unit_diagonal):
    dt = _read_triangle(t, lower, unit_diagonal)
    dt = _mT(dt) if transpose_a else dt
    return -triangular_solve(a, _mm(dt, x), lower=lower, transpose_a=transpose_a, unit_diagonal=unit_diagonal)


def _tsolve_vjp_a(g, x, a, b, *, lower, transpose_a, unit_diagonal):
    gb = triangular_solve(a, g, lower=lower, transpose_a=not transpose_a, unit_diagonal=unit_diagonal)
    ct = -(_mm(x, _mT(gb)) if transpose_a else _mm(gb, _mT(x)))
    return _read_triangle(ct, lower, unit_diagonal)


triangular_solve_p.jvp = [_tsolve_jvp_a,
                          lambda t, x, a, b, **kw: triangular_solve(a, t, **kw)]
triangular_solve_p.vjp = [_tsolve_vjp_a,
                          lambda g, x, a, b, *, transpose_a, **kw:
                          triangular_solve(a, g, transpose_a=not transpose_a, **kw)]

# --------------------------------------------------------------------------- solve


lu_factor_p = _new_primitive("lu_factor", multiple_results=True)
lu_factor_p.differentiable = False  # solver data for lu_solve, whose rules differentiate through its matrix
# lu_factor / lu_solve also take complex matrices (numpy.linalg.solve on the host), for eig's derivatives:
# their rules are transposes without conjugation, JAX's convention for complex values.


def _lu_factor_impl(a):
    """LAPACK's LU factors and pivots (of a^T, see ``_lapack``); matrices that numpy.linalg.solve
    serves faster get no factors (lu_solve then solves from the matrix)."""
    if _lapack.usable(a):
        return list(_lapack.lu_factor(a))
    return [_np.broadcast_to(_np.zeros((), a.dtype), a.shape), _np.zeros(a.shape[:-1], _np.int64)]


lu_factor_p.impl = _lu_factor_impl
lu_factor_p.abstract_eval = lambda a: [_square_aval("lu_factor", a, "fc"), _ShapedArray(a.shape[:-1], _np.dtype(_np.int64))]


def _lu_solve_impl(a, factors, pivots, b, *, transpose_a):
    if _lapack.usable(a):
        return _lapack.lu_solve(factors, pivots, b, transpose_a)
    a = _np.swapaxes(a, -1, -2) if transpose_a else a
    try:
        return _np.linalg.solve(a, b)
    except _np.linalg.LinAlgError:  # a singular matrix: inf / NaN as LAPACK's getrs (and JAX), no exception
        return _substitution_solve(a, b)


def _substitution_solve(a, b):
    """a^-1 b by partial-pivoting LU and substitutions in numpy, batched; a zero pivot gives inf / NaN."""
    n = a.shape[-1]
    lu, pivots = _lu_numpy(_np.asarray(a, _np.result_type(a, b)))
    perm = _pivots_to_permutation(pivots, n)
    y = _np.take_along_axis(_np.asarray(b, lu.dtype), perm[..., None], axis=-2).copy()
    with _np.errstate(all="ignore"):
        for i in range(1, n):
            y[..., i, :] -= _np.einsum("...j,...jk->...k", lu[..., i, :i], y[..., :i, :])
        for i in range(n - 1, -1, -1):
            y[..., i, :] -= _np.einsum("...j,...jk->...k", lu[..., i, i + 1:], y[..., i + 1:, :])
            y[..., i, :] /= lu[..., i, i, None]
    return y


lu_solve_p = _new_primitive("lu_solve")
lu_solve_p.impl = _lu_solve_impl


def _lu_solve_abstract(a, factors, pivots, b, *, transpose_a):
    return _solve_abstract("solve", "fc")(a, b)


lu_solve_p.abstract_eval = _lu_solve_abstract


def _lu_solve(a, factors, pivots, b, transpose_a: bool):
    """op(a)^-1 b, op transposing if ``transpose_a``, from ``lu_factor``'s (factors, pivots) of a."""
    return lu_solve_p.bind(a, factors, pivots, b, transpose_a=transpose_a)


def _lu_solve_jvp_a(t, x, a, factors, pivots, b, *, transpose_a):
    return -_lu_solve(a, factors, pivots, _mm(_mT(t) if transpose_a else t, x), transpose_a)


def _lu_solve_vjp_a(g, x, a, factors, pivots, b, *, transpose_a):
    gb = _lu_solve(a, factors, pivots, g, not transpose_a)  # the same solve as b's cotangent: CSE shares it
    return -(_mm(x, _mT(gb)) if transpose_a else _mm(gb, _mT(x)))


lu_solve_p.jvp = [_lu_solve_jvp_a, None, None,
                  lambda t, x, a, factors, pivots, b, *, transpose_a: _lu_solve(a, factors, pivots, t, transpose_a)]
lu_solve_p.vjp = [_lu_solve_vjp_a, None, None,
                  lambda g, x, a, factors, pivots, b, *, transpose_a: _lu_solve(a, factors, pivots, g, not transpose_a)]


def _solve(a, b):
    """a^-1 b for matching (..., n, n) and (..., n, k): one LU factorization, which every derivative
    of the result reuses (jvp, vjp and theirs)."""
    factors, pivots = lu_factor_p.bind(a)
    return _lu_solve(a, factors, pivots, b, False)


# --------------------------------------------------------------------------- det, slogdet


def _inverse(a):
    return _solve(a, _eye_like(a))


def _trace_of_solve(a, t):
    """trace(a^-1 t) over the last two axes."""
    return _fnp.sum(_diag_part(_solve(a, t)), axis=-1)


det_p = _new_primitive("det")
det_p.impl = lambda a: _np.asarray(_np.linalg.det(a))
det_p.abstract_eval = lambda a: _ShapedArray(_square_aval("det", a).shape[:-2], a.dtype)
# d det(A)[T] = trace(adj(A) T): the adjugate, not det(A) A^-1, so the derivative exists (and is
# right) at singular matrices too, as JAX's; its own derivative is _adjugate's rule.
det_p.jvp = [lambda t, d, a: _fnp.sum(_mT(_adjugate(a)) * t, axis=(-2, -1))]
det_p.vjp = [lambda g, d, a: _fnp.expand_dims(g, (-1, -2)) * _mT(_adjugate(a))]


def _exclusive_products(x, axis: int, reverse: bool = False):
    return _scan_exclusive_products(x, axis % len(_P.shape_of(x)), reverse)


def _products_of_others(s):
    """(c, E) from s (..., n): c_i = prod_{k != i} s_k and E_ij = prod_{k not in {i, j}} s_k (0 on the
    diagonal), without dividing by s (exact at zeros) and differentiable again: prefix and suffix
    products, and for E_ij (i < j) the product strictly between i and j as the exclusive products
    along each row of W_ik = s_k (k > i), 1 (k <= i)."""
    n = _P.shape_of(s)[-1]
    before, after = _exclusive_products(s, -1), _exclusive_products(s, -1, reverse=True)
    one = _P.scalar_like(s, 1)
    w = _fnp.where(_np.arange(n)[None, :] > _np.arange(n)[:, None], _fnp.expand_dims(s, -2), one)
    upper = _fnp.expand_dims(before, -1) * _exclusive_products(w, -1) * _fnp.expand_dims(after, -2)
    above = _np.triu(_np.ones((n, n), bool), 1)
    e = _fnp.where(above, upper, _fnp.where(above.T, _mT(upper), _P.scalar_like(s, 0)))
    return before * after, e


def _adjugate_factors(a):
    """(u, s, vt, sign) with a = u diag(s) vt and sign = det(u) det(vt) (+-1, locally constant: no
    derivative): adj(a) = adj(vt) adj(diag(s)) adj(u) = sign vt^T diag(c) u^T."""
    u, s, vt = svd_p.bind(a, full_matrices=False, compute_uv=True)
    sign = slogdet_p.bind(u)[0] * slogdet_p.bind(vt)[0]  # slogdet's sign carries no derivative
    return u, s, vt, _fnp.expand_dims(sign, (-1, -2))


@_custom_jvp
def _adjugate(a):
    """adj(a) = det(a) a^-1 for every square a (also singular), through the SVD: sign * V diag(c) U^T
    with c_i the product of the other singular values (no division).  Its derivative (below) is exact
    at every matrix, repeated or zero singular values included, so second derivatives of det are;
    higher ones differentiate the SVD (whose rule takes 1 / (s_j^2 - s_i^2) as 0 where s_i = s_j)."""
    u, s, vt, sign = _adjugate_factors(a)
    c, _ = _products_of_others(s)
    return sign * _mm(_mT(vt) * _fnp.expand_dims(c, -2), _mT(u))


@_adjugate.defjvp
def _adjugate_jvp(primals, tangents):
    """a + eps T = U (S + eps T') V^T with T' = U^T T V, so d adj(a)[T] = sign V (d adj(S)[T']) U^T and
    at the diagonal S: d adj(S)[T']_ii = sum_{k != i} E_ik T'_kk and d adj(S)[T']_ij = -E_ij T'_ij
    (i != j), E_ij the product of the singular values other than s_i and s_j."""
    (a,), (t,) = primals, tangents
    u, s, vt, sign = _adjugate_factors(a)
    c, e = _products_of_others(s)
    v = _mT(vt)
    adj = sign * _mm(v * _fnp.expand_dims(c, -2), _mT(u))
    tp = _mm(_mT(u), _mm(t, v))
    inner = _diag_matrix(_fnp.sum(e * _fnp.expand_dims(_diag_part(tp), -2), axis=-1)) - e * tp
    return adj, sign * _mm(v, _mm(inner, _mT(u)))


slogdet_p = _new_primitive("slogdet", multiple_results=True)
slogdet_p.impl = lambda a: [_np.asarray(v) for v in _np.linalg.slogdet(a)]
slogdet_p.abstract_eval = lambda a: [_ShapedArray(_square_aval("slogdet", a).shape[:-2], a.dtype)] * 2


def _slogdet_jvp(primals, tangents):
    (a,), (t,) = primals, tangents
    sign, logdet = slogdet_p.bind(a)
    return [sign, logdet], [_P.zeros_like(sign), _trace_of_solve(a, t)]


def _slogdet_vjp(primals, needs):
    (a,) = primals
    sign, logdet = slogdet_p.bind(a)
    return [sign, logdet], lambda cts: [None if cts[1] is None else
                                        _fnp.expand_dims(cts[1], (-1, -2)) * _mT(_inverse(a))]


slogdet_p.jvp_rule = _slogdet_jvp
slogdet_p.vjp_rule = _slogdet_vjp

# --------------------------------------------------------------------------- cholesky


def _cholesky_impl(a):
    """The lower factor of the symmetric part (a + a^T) / 2 (symmetrized here, in the copy that LAPACK
    factors in place); a matrix that is not positive definite gives NaNs (as in JAX), not an
    exception in the middle of a program."""
    if _lapack.usable(a):
        return _lapack.cholesky(a)
    sym = _np.add(a, _np.swapaxes(a, -1, -2))
    sym *= _P.scalar_like(sym, 0.5)
    try:
        return _np.linalg.cholesky(sym)
    except _np.linalg.LinAlgError:
        flat = sym.reshape((-1,) + a.shape[-2:])
        out = _np.full(flat.shape, _np.nan, dtype=a.dtype)
        for i, m in enumerate(flat):
            try:
                out[i] = _np.linalg.cholesky(m)
            except _np.linalg.LinAlgError:
                pass
        return out.reshape(a.shape)


def _phi(x):
    """The lower triangle with its diagonal halved (Murray's Phi)."""
    return _tri_mask(x, True) - _diag_matrix(_diag_part(x) * _P.scalar_like(x, 0.5))


def _cholesky_jvp(t, chol, a):
    """dL = L Phi(L^-1 dA L^-T), dA the symmetric part of the tangent."""
    y = triangular_solve(chol, _symmetrize(t), lower=True)
    return _mm(chol, _phi(triangular_solve(chol, _mT(y), lower=True)))


def _cholesky_vjp(g, chol, a):
    """Abar = sym(L^-T Phi(L^T Lbar) L^-1)."""
    p = _phi(_mm(_mT(chol), g))
    s = triangular_solve(chol, _mT(triangular_solve(chol, p, lower=True, transpose_a=True)),
                         lower=True, transpose_a=True)
    return _symmetrize(s)


cholesky_p = _new_primitive("cholesky")  # of the symmetric part of its operand
cholesky_p.impl = _cholesky_impl
cholesky_p.abstract_eval = lambda a: _square_aval("cholesky", a)
cholesky_p.jvp = [_cholesky_jvp]
cholesky_p.vjp = [_cholesky_vjp]

# --------------------------------------------------------------------------- eigh

eigh_p = _new_primitive("eigh", multiple_results=True)
eigh_p.impl = lambda a: list(_np.linalg.eigh(a, UPLO="L"))
eigh_p.abstract_eval = lambda a: [_ShapedArray(_square_aval("eigh", a).shape[:-1], a.dtype), a]


def _eigh_jvp(primals, tangents):
    """dw = diag(V^T dA V), dV = V (F o V^T dA V) with F_ij = 1 / (w_j - w_i)."""
    (a,), (t,) = primals, tangents
    w, v = eigh_p.bind(a)
    m = _mm(_mT(v), _mm(t, v))
    return [w, v], [_diag_part(m), _mm(v, _safe_reciprocal_differences(w) * m)]


def _eigh_vjp(primals, needs):
    (a,) = primals
    w, v = eigh_p.bind(a)

    def backward(cts):
        gw, gv = cts
        inner = _P.zeros_like(a) if gw is None else _diag_matrix(gw)
        if gv is not None:  # only eigenvector cotangents need the 1 / (w_j - w_i) factors
            inner = inner + _safe_reciprocal_differences(w) * _mm(_mT(v), gv)
        return [_mm(v, _mm(inner, _mT(v)))]
    return [w, v], backward


eigh_p.jvp_rule = _eigh_jvp
eigh_p.vjp_rule = _eigh_vjp

# --------------------------------------------------------------------------- eig


def _eig_impl(a):
    """numpy.linalg.eig as complex arrays (numpy's are real when every eigenvalue is); a matrix
    LAPACK cannot decompose (inf / NaN entries, no convergence) gives NaNs, as in JAX."""
    cdtype = _P.complex_dtype(a.dtype)
    try:
        w, v = _np.linalg.eig(a)
    except _np.linalg.LinAlgError:
        flat = a.reshape((-1,) + a.shape[-2:])
        w = _np.full(flat.shape[:-1], _np.nan, cdtype)
        v = _np.full(flat.shape, _np.nan, cdtype)
        for i, m in enumerate(flat):
            try:
                w[i], v[i] = _np.linalg.eig(m)
            except _np.linalg.LinAlgError:
                pass
    return [_np.asarray(w, cdtype).reshape(a.shape[:-1]), _np.asarray(v, cdtype).reshape(a.shape)]


def _eig_abstract(a):
    cdtype = _P.complex_dtype(_square_aval("eig", a).dtype)
    return [_ShapedArray(a.shape[:-1], cdtype), _ShapedArray(a.shape, cdtype)]


eig_p = _new_primitive("eig", multiple_results=True)  # right eigenvectors, LAPACK's normalization
eig_p.impl = _eig_impl
eig_p.abstract_eval = _eig_abstract


def _eig_linear_jvp(primals, outs, tangents):
    """dw = diag(P) and dV = V (F o P) + V diag(c), P = V^-1 dA V, F_ij = 1 / (w_j - w_i) (JAX's
    rule).  An eigenvector is defined up to a complex factor: c keeps LAPACK's choice, unit norm
    (Re(v^H dv) = 0) and a real largest-magnitude component k (Im(dv_k) = 0)."""
    (t,), (w, v) = tangents, outs
    p = _mm(_solve(v, _P.convert_element_type(t, _P.dtype_of(v))), v)
    u = _mm(v, _safe_reciprocal_differences(w) * p)
    n = _P.shape_of(v)[-1]
    largest = _fnp.expand_dims(_fnp.argmax(_fnp.abs(v), axis=-2), -2) == _np.arange(n)[:, None]
    zero = _P.scalar_like(u, 0)
    norm_part = -_fnp.sum(_P.real(_P.conj(v) * u), axis=-2)
    real_part = -_fnp.sum(_P.imag(_fnp.where(largest, u, zero)), axis=-2) / \
        _fnp.sum(_P.real(_fnp.where(largest, v, _P.scalar_like(v, 0))), axis=-2)
    dv = u + v * _fnp.expand_dims(_P.complex_(norm_part, real_part), -2)
    return [_diag_part(p), dv]


_transposed_jvp(eig_p, _eig_linear_jvp)

# --------------------------------------------------------------------------- svd


def _svd_impl(a, *, full_matrices, compute_uv):
    if not compute_uv:
        return [_np.linalg.svd(a, compute_uv=False)]
    return list(_np.linalg.svd(a, full_matrices=full_matrices))


def _svd_abstract(a, *, full_matrices, compute_uv):
    if len(a.shape) < 2 or a.dtype.kind != "f":
        raise _ShapeError(f"linalg.svd: expected float matrices (..., m, n), got {a.str_short()} {_where()}")
    *batch, m, n = a.shape
    k = min(m, n)
    s = _ShapedArray(tuple(batch) + (k,), a.dtype)
    if not compute_uv:
        return [s]
    ku, kv = (m, n) if full_matrices else (k, k)
    return [_ShapedArray(tuple(batch) + (m, ku), a.dtype), s, _ShapedArray(tuple(batch) + (kv, n), a.dtype)]


svd_p = _new_primitive("svd", multiple_results=True)
svd_p.impl = _svd_impl
svd_p.abstract_eval = _svd_abstract


def _svd_reduced_jvp(a, u, s, vt, t):
    """Tangents of the reduced (u, s, vt) (the formulas JAX uses)."""
    v = _mT(vt)
    ds_mat = _mm(_mT(u), _mm(t, v))
    ds = _diag_part(ds_mat)
    s_row = _fnp.expand_dims(s, -2)
    f = _safe_reciprocal_differences(s * s)
    dss = ds_mat * s_row
    sds = _mT(s_row) * ds_mat
    du = _mm(u, f * (dss + _mT(dss)))
    dv = _mm(v, f * (sds + _mT(sds)))
    m, n = _P.shape_of(a)[-2:]
    zero = s == _P.scalar_like(s, 0)
    s_inv = _fnp.expand_dims(_fnp.where(zero, _P.scalar_like(s, 0), 1 / _fnp.where(zero, _P.scalar_like(s, 1), s)), -2)
    if m > n:
        dav = _mm(t, v)
        du = du + (dav - _mm(u, _mm(_mT(u), dav))) * s_inv
    if n > m:
        dau = _mm(_mT(t), u)
        dv = dv + (dau - _mm(v, _mm(vt, dau))) * s_inv
    return du, ds, _mT(dv)


def _svd_linear_jvp(primals, outs, tangents, *, full_matrices, compute_uv):
    (a,), (t,) = primals, tangents
    m, n = _P.shape_of(a)[-2:]
    if compute_uv and full_matrices and m != n:
        raise NotImplementedError("linalg.svd: the derivative with full_matrices=True of a non-square "
                                  "matrix is not implemented (it is not unique); use full_matrices=False")
    if compute_uv:
        u, s, vt = outs
    else:
        u, s, vt = svd_p.bind(a, full_matrices=False, compute_uv=True)
        return [_diag_part(_mm(_mT(u), _mm(t, _mT(vt))))]  # no 1 / (s_j^2 - s_i^2) factors
    return list(_svd_reduced_jvp(a, u, s, vt, t))


_transposed_jvp(svd_p, _svd_linear_jvp)


def _svd_values_vjp(primals, needs, *, full_matrices, compute_uv):
    """compute_uv=False: Abar = U diag(sbar) V^T, no singular-vector terms."""
    if compute_uv:
        return _svd_general_vjp(primals, needs, full_matrices=full_matrices, compute_uv=compute_uv)
    (a,) = primals
    u, s, vt = svd_p.bind(a, full_matrices=False, compute_uv=True)
    return [s], lambda cts: [_mm(u * _fnp.expand_dims(cts[0], -2), vt)]


_svd_general_vjp = svd_p.vjp_rule
svd_p.vjp_rule = _svd_values_vjp

# --------------------------------------------------------------------------- qr


def _qr_abstract(a, *, complete):
    if len(a.shape) < 2 or a.dtype.kind != "f":
        raise _ShapeError(f"linalg.qr: expected float matrices (..., m, n), got {a.str_short()} {_where()}")
    *batch, m, n = a.shape
    k = m if complete else min(m, n)
    return [_ShapedArray(tuple(batch) + (m, k), a.dtype), _ShapedArray(tuple(batch) + (k, n), a.dtype)]


qr_p = _new_primitive("qr", multiple_results=True)
qr_p.impl = lambda a, *, complete: list(_np.linalg.qr(a, mode="complete" if complete else "reduced"))
qr_p.abstract_eval = _qr_abstract


def _qr_linear_jvp(primals, outs, tangents, *, complete):
    """For m >= n (reduced): with C = Q^T dA R^-1 and Omega = tril(C, -1) - tril(C, -1)^T,
    dQ = Q (Omega - C) + dA R^-1 and dR = (C - Omega) R."""
    (a,), (t,), (q, r) = primals, tangents, outs
    m, n = _P.shape_of(a)[-2:]
    if m < n or (complete and m > n):
        raise NotImplementedError("linalg.qr: the derivative is implemented for m >= n with "
                                  "mode='reduced' (as in JAX); here the factors are not unique")
    dx_rinv = _mT(triangular_solve(r, _mT(t), lower=False, transpose_a=True))
    c = _mm(_mT(q), dx_rinv)
    low = _tri_mask(c, True, -1)
    omega = low - _mT(low)
    return [_mm(q, omega - c) + dx_rinv, _mm(c - omega, r)]


_transposed_jvp(qr_p, _qr_linear_jvp)

# --------------------------------------------------------------------------- lu (scipy.linalg's)


def _lu_numpy(a):
    """LU with partial pivoting in numpy, batched (for matrices too small for a LAPACK call each)."""
    lu = _np.array(a, order="C").reshape((-1,) + a.shape[-2:])
    batch, m, n = lu.shape
    pivots = _np.zeros((batch, min(m, n)), _np.int64)
    rows = _np.arange(batch)
    for j in range(min(m, n)):
        p = j + _np.argmax(_np.abs(lu[:, j:, j]), axis=1)
        pivots[:, j] = p
        lu[rows, j], lu[rows, p] = lu[rows, p].copy(), lu[rows, j].copy()
        pivot = lu[:, j, j]
        safe = _np.where(pivot == 0, 1, pivot)  # a zero column: no elimination (as LAPACK)
        lu[:, j + 1:, j] /= safe[:, None]
        lu[:, j + 1:, j + 1:] -= lu[:, j + 1:, j:j + 1] * lu[:, j:j + 1, j + 1:]
    return lu.reshape(a.shape), pivots.reshape(a.shape[:-2] + (min(m, n),))


def _pivots_to_permutation(pivots, size: int):
    """The row order ``perm`` (a[perm] = L U) from sequential row swaps (numpy, batched)."""
    flat = _np.asarray(pivots).reshape((-1, pivots.shape[-1]))
    perm = _np.broadcast_to(_np.arange(size), (flat.shape[0], size)).copy()
    rows = _np.arange(flat.shape[0])
    for i in range(flat.shape[1]):
        p = flat[:, i]
        perm[rows, i], perm[rows, p] = perm[rows, p], perm[rows, i].copy()
    return perm.reshape(pivots.shape[:-1] + (size,))


def _lu_impl(a):
    factors, pivots = _lapack.lu(a) if _lapack.usable(a) else _lu_numpy(a)
    return [factors, pivots.astype(_np.int32), _pivots_to_permutation(pivots, a.shape[-2]).astype(_np.int32)]


def _lu_abstract(a):
    if len(a.shape) < 2 or a.dtype.kind != "f":
        raise _ShapeError(f"linalg.lu: expected float matrices (..., m, n), got {a.str_short()} {_where()}")
    *batch, m, n = a.shape
    int32 = _np.dtype(_np.int32)
    return [a, _ShapedArray(tuple(batch) + (min(m, n),), int32), _ShapedArray(tuple(batch) + (m,), int32)]


lu_p = _new_primitive("lu", multiple_results=True)  # (lu, pivots, permutation), as JAX's
lu_p.impl = _lu_impl
lu_p.abstract_eval = _lu_abstract


def permutation_matrix(perm, dtype):
    """P with P[i, perm[i]] = 1 (P @ a == a[perm]), batched over perm's leading axes."""
    n = _P.shape_of(perm)[-1]
    return _fnp.asarray(_fnp.expand_dims(perm, -1) == _np.arange(n), dtype)


def _lu_linear_jvp(primals, outs, tangents):
    """For square a = P^T L U: with X = L^-1 P dA U^-1, dL = L tril(X, -1) and dU = triu(X) U
    (the factors' tangents packed like lu)."""
    (a,), (t,), (factors, _, perm) = primals, tangents, outs
    m, n = _P.shape_of(a)[-2:]
    if m != n:
        raise NotImplementedError("linalg.lu: the derivative is implemented for square matrices")
    x = _mm(permutation_matrix(perm, _P.dtype_of(t)), t)
    la = triangular_solve(factors, x, lower=True, unit_diagonal=True)
    lau = _mT(triangular_solve(factors, _mT(la), lower=False, transpose_a=True))
    lower = _tri_mask(factors, True, -1) + _eye_like(factors)
    return [_mm(lower, _tri_mask(lau, True, -1)) + _mm(_tri_mask(lau, False), _tri_mask(factors, False)), None, None]


_transposed_jvp(lu_p, _lu_linear_jvp)

lu_pivots_to_permutation_p = _new_primitive("lu_pivots_to_permutation")
lu_pivots_to_permutation_p.host_step_reason = "a sequential loop of row swaps: numpy on the host"
lu_pivots_to_permutation_p.differentiable = False  # integer outputs
lu_pivots_to_permutation_p.impl = lambda pivots, *, size: _pivots_to_permutation(pivots, size).astype(pivots.dtype)
lu_pivots_to_permutation_p.abstract_eval = lambda p, *, size: _ShapedArray(p.shape[:-1] + (size,), p.dtype)


def lu_pivots_to_permutation(pivots, size: int):
    """The row order ``perm`` with a[perm] = L U from LAPACK's sequential row swaps ``pivots``."""
    return lu_pivots_to_permutation_p.bind(pivots, size=int(size))


# --------------------------------------------------------------------------- user functions


def _as_float_matrix(name: str, a, square: bool = False):
    x = _arrays.to_float(a, _np.float64)  # numpy: integers and bools as float64
    if x.dtype.kind == "c":
        raise NotImplementedError(f"linalg.{name}: complex matrices are not implemented in functrace")
    if x.ndim < 2 or (square and x.shape[-1] != x.shape[-2]):
        want = "square matrices (..., n, n)" if square else "matrices (..., m, n)"
        raise _ShapeError(f"linalg.{name}: expected {want}, got shape {x.shape} {_where()}")
    return x


def _solve_operands(name: str, a, b):
    """``a`` and ``b`` promoted, ``b`` as a stack of columns with ``a``'s batch axes; returns
    (a, b, whether b was a vector)."""
    a = _as_float_matrix(name, a, square=True)
    b = _arrays.to_float(b, _np.float64)
    a, b = _arrays.promote(a, b)
    vector = b.ndim == 1  # numpy 2: b is a vector only when it is 1-d
    if vector:
        b = _fnp.expand_dims(b, -1)
    if b.ndim < 2 or b.shape[-2] != a.shape[-1]:
        raise _ShapeError(f"linalg.{name}: b of shape {_P.shape_of(b)} does not match a of shape {a.shape} {_where()}")
    batch = _P.broadcast_shapes(f"linalg.{name}", a.shape[:-2], b.shape[:-2])
    return _fnp.broadcast_to(a, batch + a.shape[-2:]), _fnp.broadcast_to(b, batch + b.shape[-2:]), vector


def solve(a, b):
    """x with a @ x == b (b a vector or a stack of columns, numpy 2's rule)."""
    a, b, vector = _solve_operands("solve", a, b)
    x = _solve(a, b)
    return x[..., 0] if vector else x


def inv(a):
    """The inverse, as solve(a, I)."""
    return _inverse(_as_float_matrix("inv", a, square=True))


def det(a):
    return det_p.bind(_as_float_matrix("det", a, square=True))


def slogdet(a):
    """(sign, log|det|); the sign carries no derivative."""
    sign, logdet = slogdet_p.bind(_as_float_matrix("slogdet", a, square=True))
    return _SlogdetResult(sign, logdet)


class _SlogdetResult(_NamedTuple):
    """(sign, logabsdet), with the field names of numpy's result (a NamedTuple, as JAX's: a pytree
    that jit, grad and vmap return)."""
    sign: _Any
    logabsdet: _Any


def cholesky(a, *, upper: bool = False):
    """The lower Cholesky factor of the symmetric part (a + a^T) / 2 (NaNs if not positive
    definite, as in JAX); ``upper=True``: its transpose."""
    chol = cholesky_p.bind(_as_float_matrix("cholesky", a, square=True))
    return _mT(chol) if upper else chol


def eigh(a, UPLO: str = "L", symmetrize_input: bool = True):
    """Eigenvalues (ascending) and eigenvectors of a symmetric matrix (its symmetric part, as JAX;
    ``symmetrize_input=False``: the triangle named by UPLO, as numpy)."""
    x = _as_float_matrix("eigh", a, square=True)
    if UPLO not in ("L", "U"):
        raise ValueError(f"linalg.eigh: UPLO must be 'L' or 'U', got {UPLO!r}")
    if symmetrize_input:
        x = _symmetrize(x)
    else:
        low = _tri_mask(x, True, -1) if UPLO == "L" else _mT(_tri_mask(x, False, 1))
        x = low + _mT(low) + _diag_matrix(_diag_part(x))
    w, v = eigh_p.bind(x)
    return _EighResult(w, v)


class _EighResult(_NamedTuple):
    eigenvalues: _Any
    eigenvectors: _Any


def eig(a):
    """(eigenvalues, right eigenvectors) of general square matrices, complex (complex128 for float64
    input, complex64 for float32) as JAX; columns of unit norm with a real largest component (LAPACK's)."""
    w, v = eig_p.bind(_as_float_matrix("eig", a, square=True))
    return _EigResult(w, v)


class _EigResult(_EighResult):
    """(eigenvalues, eigenvectors), with the field names of numpy's result."""


def eigvals(a):
    """The eigenvalues of ``eig`` (whose eigenvectors its derivative needs; computing both in one LAPACK
    call keeps the order of the eigenvalues the same with or without derivatives)."""
    return eig(a)[0]


def eigvalsh(a, UPLO: str = "L"):
    """Eigenvalues of a symmetric matrix; their derivative is finite at degenerate eigenvalues."""
    return eigh(a, UPLO)[0]


def svd(a, full_matrices: bool = True, compute_uv: bool = True, hermitian: bool = False):
    """(U, S, Vh) with a = U diag(S) Vh, or S alone (whose derivative needs no distinct values)."""
    x = _as_float_matrix("svd", a)
    out = svd_p.bind(x, full_matrices=bool(full_matrices), compute_uv=bool(compute_uv))
    return _SVDResult(*out) if compute_uv else out[0]


class _SVDResult(_NamedTuple):
    U: _Any
    S: _Any
    Vh: _Any


def svdvals(x):
    return svd(x, compute_uv=False)


def qr(a, mode: str = "reduced"):
    """(Q, R) for mode 'reduced' or 'complete', R alone for mode 'r'."""
    x = _as_float_matrix("qr", a)
    if mode not in ("reduced", "complete", "r"):
        raise NotImplementedError(f"linalg.qr: mode={mode!r} is not implemented (use 'reduced', 'complete' or 'r')")
    q, r = qr_p.bind(x, complete=mode == "complete")
    return r if mode == "r" else _QRResult(q, r)


class _QRResult(_NamedTuple):
    Q: _Any
    R: _Any


def _eps(s):
    return float(_np.finfo(_P.dtype_of(s)).eps)


def _relative_cutoff(s, rtol):
    """rtol * max(s) (rtol a number or an array of the batch shape), shape (..., 1)."""
    rtol = _fnp.asarray(rtol, _P.dtype_of(s))
    return _fnp.max(s, axis=-1, keepdims=True) * rtol[..., None]


def _reciprocal_above(s, cutoff):
    keep = s > cutoff
    return _fnp.where(keep, 1 / _fnp.where(keep, s, _P.scalar_like(s, 1)), _P.scalar_like(s, 0))


def pinv(a, rcond=None, hermitian: bool = False, *, rtol=None):
    """Moore-Penrose pseudo-inverse through the SVD; singular values at or below rtol * max(s) count
    as 0.  ``rcond`` (numpy's older name) and ``rtol`` are the same relative cutoff (one of them);
    the default is JAX's, 10 * max(m, n) * eps of the dtype (numpy's fixed 1e-15 lies below
    float32's rounding, so noise singular values of a rank-deficient float32 matrix would be
    inverted)."""
    x = _as_float_matrix("pinv", a)
    if rcond is not None and rtol is not None:
        raise ValueError("linalg.pinv: only one of rtol and rcond may be specified")
    rtol = rtol if rcond is None else rcond
    u, s, vt = svd_p.bind(x, full_matrices=False, compute_uv=True)
    if rtol is None:
        rtol = 10 * max(x.shape[-2:]) * _eps(s)
    s_inv = _reciprocal_above(s, _relative_cutoff(s, rtol))
    return _mm(_mT(vt) * _fnp.expand_dims(s_inv, -2), _mT(u))


def lstsq(a, b, rcond=None):
    """(x, residuals, rank, s) as numpy's: x minimizes |a x - b| (the minimum-norm one), through
    the SVD; singular values below rcond * max(s) count as 0 (JAX's and numpy's default rcond:
    max(m, n) * eps of the dtype; a negative rcond means eps); residuals are the squared residual
    norms when m > n (numpy leaves them empty when rank < n, a shape that depends on values: here
    they are always given for m > n)."""
    x = _as_float_matrix("lstsq", a)
    b = _arrays.to_float(b, _np.float64)
    x, b = _arrays.promote(x, b)
    if x.ndim != 2 or b.ndim not in (1, 2) or b.shape[0] != x.shape[0]:
        raise _ShapeError(f"linalg.lstsq: a must be (m, n) and b (m,) or (m, k); got {x.shape} and {b.shape} {_where()}")
    m, n = x.shape
    u, s, vt = svd_p.bind(x, full_matrices=False, compute_uv=True)
    if rcond is None:
        rcond = _eps(s) * max(m, n)
    else:
        rcond = _fnp.where(_fnp.asarray(rcond) < 0, _eps(s), rcond)
    keep = (s > _P.scalar_like(s, 0)) & (s >= _relative_cutoff(s, rcond)[..., 0])
    s_inv = _fnp.where(keep, 1 / _fnp.where(keep, s, _P.scalar_like(s, 1)), _P.scalar_like(s, 0))
    ub = _fnp.matmul(_mT(u), b)
    sol = _fnp.matmul(_mT(vt), ub * (s_inv if b.ndim == 1 else s_inv[:, None]))
    rank = _fnp.sum(keep, axis=-1)
    if m > n:
        resid = _fnp.sum((b - _fnp.matmul(x, sol)) ** 2, axis=0)
        resid = _fnp.reshape(resid, (1,)) if b.ndim == 1 else resid
    else:
        resid = _fnp.zeros((0,), x.dtype)
    return sol, resid, rank, s


def matrix_rank(A, tol=None, hermitian: bool = False, *, rtol=None):
    """The number of singular values above a cutoff: ``tol`` (absolute, numpy's), else rtol * max(s),
    rtol defaulting to max(m, n) * eps of the dtype (numpy's and JAX's default)."""
    x = _arrays.to_float(A, _np.float64)
    if x.ndim < 2:
        return _fnp.asarray(_fnp.any(x != 0), _np.int64)
    if tol is not None and rtol is not None:
        raise ValueError("linalg.matrix_rank: only one of tol and rtol may be specified")
    s = svd(x, compute_uv=False)
    if tol is None:
        cut = _relative_cutoff(s, max(x.shape[-2:]) * _eps(s) if rtol is None else rtol)
    else:
        cut = _fnp.expand_dims(_fnp.asarray(tol, x.dtype), -1)
    return _fnp.sum(s > cut, axis=-1)


def matrix_power(a, n: int):
    """a ** n by repeated squaring; negative n through the inverse."""
    x = _as_float_matrix("matrix_power", a, square=True) if _fnp.asarray(a).dtype.kind == "f" or n < 0 \
        else _fnp.asarray(a)
    if not isinstance(n, (int, _np.integer)):
        raise TypeError(f"linalg.matrix_power: the exponent must be an integer, got {type(n).__name__}")
    if n == 0:
        return _fnp.broadcast_to(_np.eye(x.shape[-1], dtype=x.dtype), x.shape)
    if n < 0:
        x, n = inv(x), -n
    result, base = None, x
    while n:
        if n & 1:
            result = base if result is None else _fnp.matmul(result, base)
        n >>= 1
        if n:
            base = _fnp.matmul(base, base)
    return result


def multi_dot(arrays, *, out=None):
    """The product of a chain of matrices (first / last may be vectors), in the cheapest order."""
    if out is not None:
        raise NotImplementedError("linalg.multi_dot: out= is not supported (arrays are immutable)")
    arrays = [_fnp.asarray(x) for x in arrays]
    if len(arrays) < 2:
        raise ValueError("linalg.multi_dot: expecting at least two arrays")
    first_vector, last_vector = arrays[0].ndim == 1, arrays[-1].ndim == 1
    if first_vector:
        arrays[0] = arrays[0][None, :]
    if last_vector:
        arrays[-1] = arrays[-1][:, None]
    dims = [arrays[0].shape[0]] + [x.shape[1] for x in arrays]
    count = len(arrays)
    cost = [[0] * count for _ in range(count)]
    split = [[0] * count for _ in range(count)]
    for length in range(1, count):
        for i in range(count - length):
            j = i + length
            cost[i][j], split[i][j] = min((cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1], k)
                                          for k in range(i, j))

    def product(i, j):
        return arrays[i] if i == j else _fnp.matmul(product(i, split[i][j]), product(split[i][j] + 1, j))
    result = product(0, count - 1)
    if first_vector:
        result = result[0]
    if last_vector:
        result = result[..., 0]
    return result


def _vector_norm(x, ord, axis, keepdims):
    a = _fnp.abs(x)
    if ord is None or ord == 2:
        return _fnp.sqrt(_fnp.sum(x * x, axis=axis, keepdims=keepdims))
    if ord == _np.inf:
        return _fnp.max(a, axis=axis, keepdims=keepdims)
    if ord == -_np.inf:
        return _fnp.min(a, axis=axis, keepdims=keepdims)
    if ord == 0:
        return _fnp.sum((x != 0).astype(x.dtype), axis=axis, keepdims=keepdims)
    if ord == 1:
        return _fnp.sum(a, axis=axis, keepdims=keepdims)
    if isinstance(ord, str):
        raise ValueError(f"linalg.norm: invalid norm order {ord!r} for vectors")
    return _fnp.sum(a ** ord, axis=axis, keepdims=keepdims) ** (1.0 / ord)


def _matrix_norm(x, ord, axes, keepdims):
    row, col = axes
    if ord in (None, "fro"):
        out = _fnp.sqrt(_fnp.sum(x * x, axis=axes))
    elif ord in (2, -2, "nuc"):
        s = svd(_fnp.moveaxis(x, axes, (-2, -1)), compute_uv=False)
        out = _fnp.sum(s, -1) if ord == "nuc" else (_fnp.max(s, -1) if ord == 2 else _fnp.min(s, -1))
    elif ord in (1, -1, _np.inf, -_np.inf):
        summed, reduce_axis = (row, col) if ord in (1, -1) else (col, row)
        sums = _fnp.sum(_fnp.abs(x), axis=summed)
        reduce_axis -= reduce_axis > summed
        out = _fnp.max(sums, axis=reduce_axis) if ord > 0 else _fnp.min(sums, axis=reduce_axis)
    else:
        raise ValueError(f"linalg.norm: invalid norm order {ord!r} for matrices")
    if keepdims:
        out = _fnp.expand_dims(out, tuple(sorted(axes)))
    return out


def norm(x, ord=None, axis=None, keepdims: bool = False):
    """numpy.linalg.norm: every vector order (p, inf, -inf, 0) and matrix order (1, -1, 2, -2,
    inf, -inf, 'fro', 'nuc')."""
    x = _arrays.to_float(x, _np.float64)  # numpy: integers and bools as float64
    if axis is None and ord is None:
        return _vector_norm(_fnp.reshape(x, (-1,)), None, 0, False) if not keepdims else \
            _fnp.sqrt(_fnp.sum(x * x, axis=None, keepdims=True))
    if axis is None:
        if x.ndim not in (1, 2):
            raise ValueError(f"linalg.norm: improper number of dimensions to norm ({x.ndim}) with ord={ord!r}")
        axis = tuple(range(x.ndim))
    axes = (axis,) if isinstance(axis, (int, _np.integer)) else tuple(axis)
    axes = tuple(int(a) % x.ndim if -x.ndim <= a < x.ndim else _raise_axis(a, x.ndim) for a in axes)
    if len(axes) == 1:
        return _vector_norm(x, ord, axes[0], keepdims)
    if len(axes) == 2 and axes[0] != axes[1]:
        return _matrix_norm(x, ord, axes, keepdims)
    raise ValueError(f"linalg.norm: improper axis {axis!r}")


def _raise_axis(a, ndim):
    raise ValueError(f"linalg.norm: axis {a} is out of bounds for an array of dimension {ndim}")


def vector_norm(x, /, *, axis=None, keepdims: bool = False, ord=2):
    x = _arrays.to_float(x, _np.float64)
    if axis is None:
        out = _vector_norm(_fnp.reshape(x, (-1,)), ord, 0, False)
        return _fnp.reshape(out, (1,) * x.ndim) if keepdims else out
    if isinstance(axis, tuple):  # a norm over several axes: flatten them
        moved = _fnp.moveaxis(x, axis, tuple(range(-len(axis), 0)))
        flat = _fnp.reshape(moved, moved.shape[:x.ndim - len(axis)] + (-1,))
        out = _vector_norm(flat, ord, -1, False)
        return _fnp.expand_dims(out, tuple(a % x.ndim for a in axis)) if keepdims else out
    return _vector_norm(x, ord, axis, keepdims)


def matrix_norm(x, /, *, keepdims: bool = False, ord="fro"):
    x = _arrays.to_float(x, _np.float64)
    return _matrix_norm(x, ord, (x.ndim - 2, x.ndim - 1), keepdims)


def cond(x, p=None):
    """The condition number: s_max / s_min for p in (None, 2, -2) (inf for a singular matrix), else
    norm(x, p) * norm(inv(x), p), where a NaN from a singular matrix without NaN entries is inf (as
    JAX).  No tolerance is involved: the dtype's rounding shows as a large finite number."""
    x = _as_float_matrix("cond", x)
    if p in (None, 2):
        s = svd(x, compute_uv=False)
        return s[..., 0] / s[..., -1]
    if p == -2:
        s = svd(x, compute_uv=False)
        r = s[..., -1] / s[..., 0]
    else:
        if x.shape[-1] != x.shape[-2]:
            raise _ShapeError(f"linalg.cond: p={p!r} needs square matrices, got shape {x.shape} {_where()}")
        r = norm(x, p, axis=(-2, -1)) * norm(inv(x), p, axis=(-2, -1))
    nan_free = ~_fnp.any(_fnp.isnan(x), axis=(-2, -1))
    return _fnp.where(_fnp.isnan(r) & nan_free, _P.scalar_like(r, _np.inf), r)


def matrix_transpose(x, /):
    return _fnp.swapaxes(x, -1, -2)


def trace(x, /, *, offset: int = 0, dtype=None):
    """The sum of the diagonal of the last two axes (numpy 2's linalg.trace)."""
    out = _fnp.trace(x, offset, -2, -1)
    return out if dtype is None else _fnp.asarray(out, dtype)


def diagonal(x, /, *, offset: int = 0):
    return _fnp.diagonal(x, offset, -2, -1)


def outer(x1, x2, /):
    return _fnp.outer(x1, x2)


def matmul(x1, x2, /, *, precision=None, preferred_element_type=None):
    """numpy.linalg.matmul (``fnp.matmul``)."""
    return _fnp.matmul(x1, x2, precision=precision, preferred_element_type=preferred_element_type)


def tensordot(x1, x2, /, *, axes=2, precision=None, preferred_element_type=None):
    """numpy.linalg.tensordot (``fnp.tensordot``)."""
    return _fnp.tensordot(x1, x2, axes, precision=precision, preferred_element_type=preferred_element_type)


def vecdot(x1, x2, /, *, axis: int = -1):
    return _fnp.sum(_fnp.asarray(x1) * _fnp.asarray(x2), axis=axis)


def cross(x1, x2, /, *, axis: int = -1):
    return _misc.cross(x1, x2, axis=axis)


LinAlgError = _np.linalg.LinAlgError

_MISSING_REASON = {"tensorsolve": "not built yet", "tensorinv": "not built yet"}


def __getattr__(name: str):
    """Missing names raise AttributeError (``hasattr`` works); numpy.linalg's are also NotImplementedError."""
    if name.startswith("_") or not hasattr(_np.linalg, name):
        raise AttributeError(f"module 'functrace.numpy.linalg' has no attribute {name!r}", name=name)
    raise _NotInFunctrace(f"functrace.numpy.linalg does not implement {name} "
                          f"({_MISSING_REASON.get(name, 'not built yet')})", name=name)
