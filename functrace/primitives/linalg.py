"""The linear-algebra primitives: ``cholesky``, ``triangular_solve``, ``lu_factor`` / ``lu_solve``,
``det``, ``slogdet``, ``eigh``, ``eig``, ``svd``, ``qr``, ``lu`` and ``lu_pivots_to_permutation``,
computed with host LAPACK (numpy.linalg, and for the routines it does not expose the OpenBLAS numpy
ships, see ``lapack``).  ``functrace.numpy.linalg`` builds every user function on them.

* Matrices are the last two axes; leading axes are batch axes (the batching rule of every
  primitive moves the vmapped axis to the front, where numpy.linalg loops over it).
* Derivative rules are written with these primitives and functrace.numpy (so derivatives
  nest): the classic results (Giles 2008 for solve/inverse, Murray 2016 for Cholesky,
  the eigenvector and singular-vector formulas as JAX writes them).  ``svd``, ``qr``, ``eig``
  and ``lu`` give their forward-mode rule; their reverse-mode rule is its transpose
  (``_transposed_jvp``).  ``solve`` factors once (``lu_factor``) and every derivative of the
  result reuses the factors.
* ``det``'s derivative is trace(adj(A) dA) with the adjugate from the SVD (``_adjugate``), not
  det(A) A^-1: it is right at singular matrices too (as JAX's LU-based rule), and the adjugate's
  own derivative rule is exact at zero and repeated singular values, so second derivatives are.
  A solve of a singular matrix gives inf / NaN as LAPACK's (and JAX's), not an exception in the
  middle of a program.
* ``cholesky`` factors the symmetric part (A + A^T) / 2, as JAX does (the user's ``eigh``
  symmetrizes its input the same way): the derivative then matches the function for every
  perturbation, not only symmetric ones.  Where eigenvalues (or singular values) coincide exactly,
  the eigenvector derivative's 1 / (w_j - w_i) factor is taken as 0 (JAX gives inf there);
  eigenvalue-only functions (``eigvalsh``, ``svd(compute_uv=False)``, norms) never form it, so
  they stay finite at degenerate points, as in JAX.
* ``eig`` (general matrices) returns complex arrays, as JAX: eigenvectors with LAPACK's
  normalization (unit norm, real largest-magnitude component), whose derivative JAX's rule follows
  (the vector is defined up to a complex factor: the rule keeps that choice, so it holds while the
  largest component stays the largest).  Real losses of them differentiate with JAX's convention
  for complex values.  Defective matrices (a Jordan block) have no eigenvalue derivative: the
  formula gives a finite value there, as in JAX; where eigenvalues coincide exactly, eigenvector
  derivatives use 0 for 1 / (w_j - w_i), as ``eigh`` (JAX: NaN).
* On OpenCL these primitives run as host steps (``host_step_reason``, shown by ``report()``):
  LAPACK on the host is what numpy offers, and is fast on CPU devices.
"""
from __future__ import annotations

import numpy as np

import functrace.numpy._base as fnp

from ..core import ShapedArray
from ..core.errors import ShapeError
from ..core.errors import user_frame_description as _where
from ..transforms.autodiff import vjp_flat
from ..transforms.custom import custom_jvp
from . import basic as P
from . import lapack

_HOST_REASON = "LAPACK through numpy.linalg on the host: no OpenCL kernel for this decomposition"

# --------------------------------------------------------------------------- helpers


def mT(x):
    """The transpose of the last two axes."""
    n = len(P.shape_of(x))
    return P.transpose(x, tuple(range(n - 2)) + (n - 1, n - 2))


def mm(a, b):
    """Matrix product over the last two axes of operands with the same leading (batch) axes."""
    nb = len(P.shape_of(a)) - 2
    batch = tuple(range(nb))
    return P.dot_general(a, b, (((nb + 1,), (nb,)), (batch, batch)))


def diag_part(x):
    """The diagonal of the last two axes, shape (..., n)."""
    return fnp.diagonal(x, 0, -2, -1)


def diag_matrix(d):
    """A (..., n, n) matrix with ``d`` (..., n) on its diagonal."""
    n = P.shape_of(d)[-1]
    return fnp.where(np.eye(n, dtype=bool), fnp.expand_dims(d, -1), P.scalar_like(d, 0))


def tri_mask(x, lower: bool, k: int = 0):
    """``x`` with the entries outside its lower (upper) triangle set to 0 (k: diagonal offset)."""
    n, m = P.shape_of(x)[-2:]
    mask = np.tri(n, m, k, dtype=bool) if lower else ~np.tri(n, m, k - 1, dtype=bool)
    return fnp.where(mask, x, P.scalar_like(x, 0))


def _eye_like(x):
    """The identity broadcast to the shape of the square matrices ``x``."""
    n = P.shape_of(x)[-1]
    return P.broadcast_to(np.eye(n, dtype=P.dtype_of(x)), P.shape_of(x))


def symmetrize(x):
    return (x + mT(x)) * P.scalar_like(x, 0.5)


def _safe_reciprocal_differences(w):
    """F[..., i, j] = 1 / (w_j - w_i), and 0 where w_j == w_i (the diagonal, exact degeneracy)."""
    diff = fnp.expand_dims(w, -2) - fnp.expand_dims(w, -1)
    zero = diff == P.scalar_like(diff, 0)
    return fnp.where(zero, P.scalar_like(diff, 0), 1 / fnp.where(zero, P.scalar_like(diff, 1), diff))


def _batch_leading(prim):
    """Batching: the vmapped axis becomes the first leading axis of every operand (unbatched
    operands are broadcast to it); numpy.linalg loops over leading axes."""
    def rule(vals, dims, **params):
        size = next(P.shape_of(v)[d] for v, d in zip(vals, dims) if d is not None)
        moved = [P.moveaxis(v, d, 0) if d is not None else
                 P.broadcast_in_dim(v, (size,) + P.shape_of(v), tuple(range(1, len(P.shape_of(v)) + 1)))
                 for v, d in zip(vals, dims)]
        out = prim.bind(*moved, **params)
        return out, ([0] * len(out) if prim.multiple_results else 0)
    return rule


def _new_primitive(name: str, multiple_results: bool = False):
    p = P.new_primitive(name)
    p.multiple_results = multiple_results
    p.host_step_reason = _HOST_REASON
    p.batch = _batch_leading(p)
    return p


def _square_aval(name: str, a, kinds: str = "f"):
    """``a`` if it is a stack of square matrices of a dtype kind in ``kinds`` ("fc": complex too)."""
    if len(a.shape) < 2 or a.shape[-1] != a.shape[-2]:
        raise ShapeError(f"linalg.{name}: expected square matrices (..., n, n), got shape {a.shape} {_where()}")
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
        tangents = [P.zeros_like(p) if t is None else t for p, t in zip(primals, tangents)]
        touts = linear_jvp(primals, as_list(outs), tangents, **params)
        return outs, (touts if prim.multiple_results else touts[0])

    def vjp_rule(primals, needs, **params):
        outs = prim.bind(*primals, **params)

        def backward(cts):
            zeros = [P.zeros_like(p) for p in primals]
            _, pull = vjp_flat(lambda *ts: linear_jvp(primals, as_list(outs), list(ts), **params), zeros, needs)
            got = iter(pull(list(cts)))
            return [next(got) if n else None for n in needs]
        return outs, backward

    prim.jvp_rule = jvp_rule
    prim.vjp_rule = vjp_rule


# --------------------------------------------------------------------------- triangular_solve


def _triangle(a, lower: bool, unit_diagonal: bool):
    """The triangular matrix a ``triangular_solve`` of ``a`` reads (numpy)."""
    t = np.tril(a) if lower else np.triu(a)
    if unit_diagonal:
        idx = np.arange(a.shape[-1])
        t[..., idx, idx] = 1
    return t


def _triangular_solve_impl(a, b, *, lower, transpose_a, unit_diagonal):
    if lapack.usable(a):
        return lapack.triangular_solve(a, b, lower, transpose_a, unit_diagonal)
    t = _triangle(np.asarray(a), lower, unit_diagonal)
    if transpose_a:
        t = np.swapaxes(t, -1, -2)
    return np.linalg.solve(t, b)


def _solve_abstract(name, kinds: str = "f"):
    def rule(a, b, **params):
        _square_aval(name, a, kinds)
        if len(b.shape) != len(a.shape) or b.shape[:-2] != a.shape[:-2] or b.shape[-2] != a.shape[-1]:
            raise ShapeError(f"linalg.{name}: right-hand sides of shape {b.shape} do not match "
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
    return tri_mask(t, lower, (-1 if lower else 1) if unit_diagonal else 0)


def _tsolve_jvp_a(t, x, a, b, *, lower, transpose_a, unit_diagonal):
    dt = _read_triangle(t, lower, unit_diagonal)
    dt = mT(dt) if transpose_a else dt
    return -triangular_solve(a, mm(dt, x), lower=lower, transpose_a=transpose_a, unit_diagonal=unit_diagonal)


def _tsolve_vjp_a(g, x, a, b, *, lower, transpose_a, unit_diagonal):
    gb = triangular_solve(a, g, lower=lower, transpose_a=not transpose_a, unit_diagonal=unit_diagonal)
    ct = -(mm(x, mT(gb)) if transpose_a else mm(gb, mT(x)))
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
    """LAPACK's LU factors and pivots (of a^T, see ``lapack``); matrices that numpy.linalg.solve
    serves faster get no factors (lu_solve then solves from the matrix)."""
    if lapack.usable(a):
        return list(lapack.lu_factor(a))
    return [np.broadcast_to(np.zeros((), a.dtype), a.shape), np.zeros(a.shape[:-1], np.int64)]


lu_factor_p.impl = _lu_factor_impl
lu_factor_p.abstract_eval = lambda a: [_square_aval("lu_factor", a, "fc"),
                                       ShapedArray(a.shape[:-1], np.dtype(np.int64))]


def _lu_solve_impl(a, factors, pivots, b, *, transpose_a):
    if lapack.usable(a):
        return lapack.lu_solve(factors, pivots, b, transpose_a)
    a = np.swapaxes(a, -1, -2) if transpose_a else a
    try:
        return np.linalg.solve(a, b)
    except np.linalg.LinAlgError:  # a singular matrix: inf / NaN as LAPACK's getrs (and JAX), no exception
        return _substitution_solve(a, b)


def _substitution_solve(a, b):
    """a^-1 b by partial-pivoting LU and substitutions in numpy, batched; a zero pivot gives inf / NaN."""
    n = a.shape[-1]
    lu, pivots = _lu_numpy(np.asarray(a, np.result_type(a, b)))
    perm = _pivots_to_permutation(pivots, n)
    y = np.take_along_axis(np.asarray(b, lu.dtype), perm[..., None], axis=-2).copy()
    with np.errstate(all="ignore"):
        for i in range(1, n):
            y[..., i, :] -= np.einsum("...j,...jk->...k", lu[..., i, :i], y[..., :i, :])
        for i in range(n - 1, -1, -1):
            y[..., i, :] -= np.einsum("...j,...jk->...k", lu[..., i, i + 1:], y[..., i + 1:, :])
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
    return -_lu_solve(a, factors, pivots, mm(mT(t) if transpose_a else t, x), transpose_a)


def _lu_solve_vjp_a(g, x, a, factors, pivots, b, *, transpose_a):
    gb = _lu_solve(a, factors, pivots, g, not transpose_a)  # the same solve as b's cotangent: CSE shares it
    return -(mm(x, mT(gb)) if transpose_a else mm(gb, mT(x)))


lu_solve_p.jvp = [_lu_solve_jvp_a, None, None,
                  lambda t, x, a, factors, pivots, b, *, transpose_a: _lu_solve(a, factors, pivots, t, transpose_a)]
lu_solve_p.vjp = [_lu_solve_vjp_a, None, None,
                  lambda g, x, a, factors, pivots, b, *, transpose_a: _lu_solve(a, factors, pivots, g, not transpose_a)]


def solve(a, b):
    """a^-1 b for matching (..., n, n) and (..., n, k): one LU factorization, which every derivative
    of the result reuses (jvp, vjp and theirs)."""
    factors, pivots = lu_factor_p.bind(a)
    return _lu_solve(a, factors, pivots, b, False)


# --------------------------------------------------------------------------- det, slogdet


def inverse(a):
    return solve(a, _eye_like(a))


def _trace_of_solve(a, t):
    """trace(a^-1 t) over the last two axes."""
    return fnp.sum(diag_part(solve(a, t)), axis=-1)


det_p = _new_primitive("det")
det_p.impl = lambda a: np.asarray(np.linalg.det(a))
det_p.abstract_eval = lambda a: ShapedArray(_square_aval("det", a).shape[:-2], a.dtype)
# d det(A)[T] = trace(adj(A) T): the adjugate, not det(A) A^-1, so the derivative exists (and is
# right) at singular matrices too, as JAX's; its own derivative is _adjugate's rule.
det_p.jvp = [lambda t, d, a: fnp.sum(mT(_adjugate(a)) * t, axis=(-2, -1))]
det_p.vjp = [lambda g, d, a: fnp.expand_dims(g, (-1, -2)) * mT(_adjugate(a))]


def _exclusive_products(x, axis: int, reverse: bool = False):
    return P.exclusive_products(x, axis % len(P.shape_of(x)), reverse)


def _products_of_others(s):
    """(c, E) from s (..., n): c_i = prod_{k != i} s_k and E_ij = prod_{k not in {i, j}} s_k (0 on the
    diagonal), without dividing by s (exact at zeros) and differentiable again: prefix and suffix
    products, and for E_ij (i < j) the product strictly between i and j as the exclusive products
    along each row of W_ik = s_k (k > i), 1 (k <= i)."""
    n = P.shape_of(s)[-1]
    before, after = _exclusive_products(s, -1), _exclusive_products(s, -1, reverse=True)
    one = P.scalar_like(s, 1)
    w = fnp.where(np.arange(n)[None, :] > np.arange(n)[:, None], fnp.expand_dims(s, -2), one)
    upper = fnp.expand_dims(before, -1) * _exclusive_products(w, -1) * fnp.expand_dims(after, -2)
    above = np.triu(np.ones((n, n), bool), 1)
    e = fnp.where(above, upper, fnp.where(above.T, mT(upper), P.scalar_like(s, 0)))
    return before * after, e


def _adjugate_factors(a):
    """(u, s, vt, sign) with a = u diag(s) vt and sign = det(u) det(vt) (+-1, locally constant: no
    derivative): adj(a) = adj(vt) adj(diag(s)) adj(u) = sign vt^T diag(c) u^T."""
    u, s, vt = svd_p.bind(a, full_matrices=False, compute_uv=True)
    sign = slogdet_p.bind(u)[0] * slogdet_p.bind(vt)[0]  # slogdet's sign carries no derivative
    return u, s, vt, fnp.expand_dims(sign, (-1, -2))


@custom_jvp
def _adjugate(a):
    """adj(a) = det(a) a^-1 for every square a (also singular), through the SVD: sign * V diag(c) U^T
    with c_i the product of the other singular values (no division).  Its derivative (below) is exact
    at every matrix, repeated or zero singular values included, so second derivatives of det are;
    higher ones differentiate the SVD (whose rule takes 1 / (s_j^2 - s_i^2) as 0 where s_i = s_j)."""
    u, s, vt, sign = _adjugate_factors(a)
    c, _ = _products_of_others(s)
    return sign * mm(mT(vt) * fnp.expand_dims(c, -2), mT(u))


@_adjugate.defjvp
def _adjugate_jvp(primals, tangents):
    """a + eps T = U (S + eps T') V^T with T' = U^T T V, so d adj(a)[T] = sign V (d adj(S)[T']) U^T and
    at the diagonal S: d adj(S)[T']_ii = sum_{k != i} E_ik T'_kk and d adj(S)[T']_ij = -E_ij T'_ij
    (i != j), E_ij the product of the singular values other than s_i and s_j."""
    (a,), (t,) = primals, tangents
    u, s, vt, sign = _adjugate_factors(a)
    c, e = _products_of_others(s)
    v = mT(vt)
    adj = sign * mm(v * fnp.expand_dims(c, -2), mT(u))
    tp = mm(mT(u), mm(t, v))
    inner = diag_matrix(fnp.sum(e * fnp.expand_dims(diag_part(tp), -2), axis=-1)) - e * tp
    return adj, sign * mm(v, mm(inner, mT(u)))


slogdet_p = _new_primitive("slogdet", multiple_results=True)
slogdet_p.impl = lambda a: [np.asarray(v) for v in np.linalg.slogdet(a)]
slogdet_p.abstract_eval = lambda a: [ShapedArray(_square_aval("slogdet", a).shape[:-2], a.dtype)] * 2


def _slogdet_jvp(primals, tangents):
    (a,), (t,) = primals, tangents
    sign, logdet = slogdet_p.bind(a)
    return [sign, logdet], [P.zeros_like(sign), _trace_of_solve(a, t)]


def _slogdet_vjp(primals, needs):
    (a,) = primals
    sign, logdet = slogdet_p.bind(a)
    return [sign, logdet], lambda cts: [None if cts[1] is None else
                                        fnp.expand_dims(cts[1], (-1, -2)) * mT(inverse(a))]


slogdet_p.jvp_rule = _slogdet_jvp
slogdet_p.vjp_rule = _slogdet_vjp

# --------------------------------------------------------------------------- cholesky


def _cholesky_impl(a):
    """The lower factor of the symmetric part (a + a^T) / 2 (symmetrized here, in the copy that LAPACK
    factors in place); a matrix that is not positive definite gives NaNs (as in JAX), not an
    exception in the middle of a program."""
    if lapack.usable(a):
        return lapack.cholesky(a)
    sym = np.add(a, np.swapaxes(a, -1, -2))
    sym *= P.scalar_like(sym, 0.5)
    try:
        return np.linalg.cholesky(sym)
    except np.linalg.LinAlgError:
        flat = sym.reshape((-1,) + a.shape[-2:])
        out = np.full(flat.shape, np.nan, dtype=a.dtype)
        for i, m in enumerate(flat):
            try:
                out[i] = np.linalg.cholesky(m)
            except np.linalg.LinAlgError:
                pass
        return out.reshape(a.shape)


def _phi(x):
    """The lower triangle with its diagonal halved (Murray's Phi)."""
    return tri_mask(x, True) - diag_matrix(diag_part(x) * P.scalar_like(x, 0.5))


def _cholesky_jvp(t, chol, a):
    """dL = L Phi(L^-1 dA L^-T), dA the symmetric part of the tangent."""
    y = triangular_solve(chol, symmetrize(t), lower=True)
    return mm(chol, _phi(triangular_solve(chol, mT(y), lower=True)))


def _cholesky_vjp(g, chol, a):
    """Abar = sym(L^-T Phi(L^T Lbar) L^-1)."""
    p = _phi(mm(mT(chol), g))
    s = triangular_solve(chol, mT(triangular_solve(chol, p, lower=True, transpose_a=True)),
                         lower=True, transpose_a=True)
    return symmetrize(s)


cholesky_p = _new_primitive("cholesky")  # of the symmetric part of its operand
cholesky_p.impl = _cholesky_impl
cholesky_p.abstract_eval = lambda a: _square_aval("cholesky", a)
cholesky_p.jvp = [_cholesky_jvp]
cholesky_p.vjp = [_cholesky_vjp]

# --------------------------------------------------------------------------- eigh

eigh_p = _new_primitive("eigh", multiple_results=True)
eigh_p.impl = lambda a: list(np.linalg.eigh(a, UPLO="L"))
eigh_p.abstract_eval = lambda a: [ShapedArray(_square_aval("eigh", a).shape[:-1], a.dtype), a]


def _eigh_jvp(primals, tangents):
    """dw = diag(V^T dA V), dV = V (F o V^T dA V) with F_ij = 1 / (w_j - w_i)."""
    (a,), (t,) = primals, tangents
    w, v = eigh_p.bind(a)
    m = mm(mT(v), mm(t, v))
    return [w, v], [diag_part(m), mm(v, _safe_reciprocal_differences(w) * m)]


def _eigh_vjp(primals, needs):
    (a,) = primals
    w, v = eigh_p.bind(a)

    def backward(cts):
        gw, gv = cts
        inner = P.zeros_like(a) if gw is None else diag_matrix(gw)
        if gv is not None:  # only eigenvector cotangents need the 1 / (w_j - w_i) factors
            inner = inner + _safe_reciprocal_differences(w) * mm(mT(v), gv)
        return [mm(v, mm(inner, mT(v)))]
    return [w, v], backward


eigh_p.jvp_rule = _eigh_jvp
eigh_p.vjp_rule = _eigh_vjp

# --------------------------------------------------------------------------- eig


def _eig_impl(a):
    """numpy.linalg.eig as complex arrays (numpy's are real when every eigenvalue is); a matrix
    LAPACK cannot decompose (inf / NaN entries, no convergence) gives NaNs, as in JAX."""
    cdtype = P.complex_dtype(a.dtype)
    try:
        w, v = np.linalg.eig(a)
    except np.linalg.LinAlgError:
        flat = a.reshape((-1,) + a.shape[-2:])
        w = np.full(flat.shape[:-1], np.nan, cdtype)
        v = np.full(flat.shape, np.nan, cdtype)
        for i, m in enumerate(flat):
            try:
                w[i], v[i] = np.linalg.eig(m)
            except np.linalg.LinAlgError:
                pass
    return [np.asarray(w, cdtype).reshape(a.shape[:-1]), np.asarray(v, cdtype).reshape(a.shape)]


def _eig_abstract(a):
    cdtype = P.complex_dtype(_square_aval("eig", a).dtype)
    return [ShapedArray(a.shape[:-1], cdtype), ShapedArray(a.shape, cdtype)]


eig_p = _new_primitive("eig", multiple_results=True)  # right eigenvectors, LAPACK's normalization
eig_p.impl = _eig_impl
eig_p.abstract_eval = _eig_abstract


def _eig_linear_jvp(primals, outs, tangents):
    """dw = diag(P) and dV = V (F o P) + V diag(c), P = V^-1 dA V, F_ij = 1 / (w_j - w_i) (JAX's
    rule).  An eigenvector is defined up to a complex factor: c keeps LAPACK's choice, unit norm
    (Re(v^H dv) = 0) and a real largest-magnitude component k (Im(dv_k) = 0)."""
    (t,), (w, v) = tangents, outs
    p = mm(solve(v, P.convert_element_type(t, P.dtype_of(v))), v)
    u = mm(v, _safe_reciprocal_differences(w) * p)
    n = P.shape_of(v)[-1]
    largest = fnp.expand_dims(fnp.argmax(fnp.abs(v), axis=-2), -2) == np.arange(n)[:, None]
    zero = P.scalar_like(u, 0)
    norm_part = -fnp.sum(P.real(P.conj(v) * u), axis=-2)
    real_part = -fnp.sum(P.imag(fnp.where(largest, u, zero)), axis=-2) / \
        fnp.sum(P.real(fnp.where(largest, v, P.scalar_like(v, 0))), axis=-2)
    dv = u + v * fnp.expand_dims(P.complex_(norm_part, real_part), -2)
    return [diag_part(p), dv]


_transposed_jvp(eig_p, _eig_linear_jvp)

# --------------------------------------------------------------------------- svd


def _svd_impl(a, *, full_matrices, compute_uv):
    if not compute_uv:
        return [np.linalg.svd(a, compute_uv=False)]
    return list(np.linalg.svd(a, full_matrices=full_matrices))


def _svd_abstract(a, *, full_matrices, compute_uv):
    if len(a.shape) < 2 or a.dtype.kind != "f":
        raise ShapeError(f"linalg.svd: expected float matrices (..., m, n), got {a.str_short()} {_where()}")
    *batch, m, n = a.shape
    k = min(m, n)
    s = ShapedArray(tuple(batch) + (k,), a.dtype)
    if not compute_uv:
        return [s]
    ku, kv = (m, n) if full_matrices else (k, k)
    return [ShapedArray(tuple(batch) + (m, ku), a.dtype), s, ShapedArray(tuple(batch) + (kv, n), a.dtype)]


svd_p = _new_primitive("svd", multiple_results=True)
svd_p.impl = _svd_impl
svd_p.abstract_eval = _svd_abstract


def _svd_reduced_jvp(a, u, s, vt, t):
    """Tangents of the reduced (u, s, vt) (the formulas JAX uses)."""
    v = mT(vt)
    ds_mat = mm(mT(u), mm(t, v))
    ds = diag_part(ds_mat)
    s_row = fnp.expand_dims(s, -2)
    f = _safe_reciprocal_differences(s * s)
    dss = ds_mat * s_row
    sds = mT(s_row) * ds_mat
    du = mm(u, f * (dss + mT(dss)))
    dv = mm(v, f * (sds + mT(sds)))
    m, n = P.shape_of(a)[-2:]
    zero = s == P.scalar_like(s, 0)
    s_inv = fnp.expand_dims(fnp.where(zero, P.scalar_like(s, 0), 1 / fnp.where(zero, P.scalar_like(s, 1), s)), -2)
    if m > n:
        dav = mm(t, v)
        du = du + (dav - mm(u, mm(mT(u), dav))) * s_inv
    if n > m:
        dau = mm(mT(t), u)
        dv = dv + (dau - mm(v, mm(vt, dau))) * s_inv
    return du, ds, mT(dv)


def _svd_linear_jvp(primals, outs, tangents, *, full_matrices, compute_uv):
    (a,), (t,) = primals, tangents
    m, n = P.shape_of(a)[-2:]
    if compute_uv and full_matrices and m != n:
        raise NotImplementedError("linalg.svd: the derivative with full_matrices=True of a non-square "
                                  "matrix is not implemented (it is not unique); use full_matrices=False")
    if compute_uv:
        u, s, vt = outs
    else:
        u, s, vt = svd_p.bind(a, full_matrices=False, compute_uv=True)
        return [diag_part(mm(mT(u), mm(t, mT(vt))))]  # no 1 / (s_j^2 - s_i^2) factors
    return list(_svd_reduced_jvp(a, u, s, vt, t))


_transposed_jvp(svd_p, _svd_linear_jvp)


def _svd_values_vjp(primals, needs, *, full_matrices, compute_uv):
    """compute_uv=False: Abar = U diag(sbar) V^T, no singular-vector terms."""
    if compute_uv:
        return _svd_general_vjp(primals, needs, full_matrices=full_matrices, compute_uv=compute_uv)
    (a,) = primals
    u, s, vt = svd_p.bind(a, full_matrices=False, compute_uv=True)
    return [s], lambda cts: [mm(u * fnp.expand_dims(cts[0], -2), vt)]


_svd_general_vjp = svd_p.vjp_rule
svd_p.vjp_rule = _svd_values_vjp

# --------------------------------------------------------------------------- qr


def _qr_abstract(a, *, complete):
    if len(a.shape) < 2 or a.dtype.kind != "f":
        raise ShapeError(f"linalg.qr: expected float matrices (..., m, n), got {a.str_short()} {_where()}")
    *batch, m, n = a.shape
    k = m if complete else min(m, n)
    return [ShapedArray(tuple(batch) + (m, k), a.dtype), ShapedArray(tuple(batch) + (k, n), a.dtype)]


qr_p = _new_primitive("qr", multiple_results=True)
qr_p.impl = lambda a, *, complete: list(np.linalg.qr(a, mode="complete" if complete else "reduced"))
qr_p.abstract_eval = _qr_abstract


def _qr_linear_jvp(primals, outs, tangents, *, complete):
    """For m >= n (reduced): with C = Q^T dA R^-1 and Omega = tril(C, -1) - tril(C, -1)^T,
    dQ = Q (Omega - C) + dA R^-1 and dR = (C - Omega) R."""
    (a,), (t,), (q, r) = primals, tangents, outs
    m, n = P.shape_of(a)[-2:]
    if m < n or (complete and m > n):
        raise NotImplementedError("linalg.qr: the derivative is implemented for m >= n with "
                                  "mode='reduced' (as in JAX); here the factors are not unique")
    dx_rinv = mT(triangular_solve(r, mT(t), lower=False, transpose_a=True))
    c = mm(mT(q), dx_rinv)
    low = tri_mask(c, True, -1)
    omega = low - mT(low)
    return [mm(q, omega - c) + dx_rinv, mm(c - omega, r)]


_transposed_jvp(qr_p, _qr_linear_jvp)

# --------------------------------------------------------------------------- lu (scipy.linalg's)


def _lu_numpy(a):
    """LU with partial pivoting in numpy, batched (for matrices too small for a LAPACK call each)."""
    lu = np.array(a, order="C").reshape((-1,) + a.shape[-2:])
    batch, m, n = lu.shape
    pivots = np.zeros((batch, min(m, n)), np.int64)
    rows = np.arange(batch)
    for j in range(min(m, n)):
        p = j + np.argmax(np.abs(lu[:, j:, j]), axis=1)
        pivots[:, j] = p
        lu[rows, j], lu[rows, p] = lu[rows, p].copy(), lu[rows, j].copy()
        pivot = lu[:, j, j]
        safe = np.where(pivot == 0, 1, pivot)  # a zero column: no elimination (as LAPACK)
        lu[:, j + 1:, j] /= safe[:, None]
        lu[:, j + 1:, j + 1:] -= lu[:, j + 1:, j:j + 1] * lu[:, j:j + 1, j + 1:]
    return lu.reshape(a.shape), pivots.reshape(a.shape[:-2] + (min(m, n),))


def _pivots_to_permutation(pivots, size: int):
    """The row order ``perm`` (a[perm] = L U) from sequential row swaps (numpy, batched)."""
    flat = np.asarray(pivots).reshape((-1, pivots.shape[-1]))
    perm = np.broadcast_to(np.arange(size), (flat.shape[0], size)).copy()
    rows = np.arange(flat.shape[0])
    for i in range(flat.shape[1]):
        p = flat[:, i]
        perm[rows, i], perm[rows, p] = perm[rows, p], perm[rows, i].copy()
    return perm.reshape(pivots.shape[:-1] + (size,))


def _lu_impl(a):
    factors, pivots = lapack.lu(a) if lapack.usable(a) else _lu_numpy(a)
    return [factors, pivots.astype(np.int32), _pivots_to_permutation(pivots, a.shape[-2]).astype(np.int32)]


def _lu_abstract(a):
    if len(a.shape) < 2 or a.dtype.kind != "f":
        raise ShapeError(f"linalg.lu: expected float matrices (..., m, n), got {a.str_short()} {_where()}")
    *batch, m, n = a.shape
    int32 = np.dtype(np.int32)
    return [a, ShapedArray(tuple(batch) + (min(m, n),), int32), ShapedArray(tuple(batch) + (m,), int32)]


lu_p = _new_primitive("lu", multiple_results=True)  # (lu, pivots, permutation), as JAX's
lu_p.impl = _lu_impl
lu_p.abstract_eval = _lu_abstract


def permutation_matrix(perm, dtype):
    """P with P[i, perm[i]] = 1 (P @ a == a[perm]), batched over perm's leading axes."""
    n = P.shape_of(perm)[-1]
    return fnp.asarray(fnp.expand_dims(perm, -1) == np.arange(n), dtype)


def _lu_linear_jvp(primals, outs, tangents):
    """For square a = P^T L U: with X = L^-1 P dA U^-1, dL = L tril(X, -1) and dU = triu(X) U
    (the factors' tangents packed like lu)."""
    (a,), (t,), (factors, _, perm) = primals, tangents, outs
    m, n = P.shape_of(a)[-2:]
    if m != n:
        raise NotImplementedError("linalg.lu: the derivative is implemented for square matrices")
    x = mm(permutation_matrix(perm, P.dtype_of(t)), t)
    la = triangular_solve(factors, x, lower=True, unit_diagonal=True)
    lau = mT(triangular_solve(factors, mT(la), lower=False, transpose_a=True))
    lower = tri_mask(factors, True, -1) + _eye_like(factors)
    return [mm(lower, tri_mask(lau, True, -1)) + mm(tri_mask(lau, False), tri_mask(factors, False)), None, None]


_transposed_jvp(lu_p, _lu_linear_jvp)

lu_pivots_to_permutation_p = _new_primitive("lu_pivots_to_permutation")
lu_pivots_to_permutation_p.host_step_reason = "a sequential loop of row swaps: numpy on the host"
lu_pivots_to_permutation_p.differentiable = False  # integer outputs
lu_pivots_to_permutation_p.impl = lambda pivots, *, size: _pivots_to_permutation(pivots, size).astype(pivots.dtype)
lu_pivots_to_permutation_p.abstract_eval = lambda p, *, size: ShapedArray(p.shape[:-1] + (size,), p.dtype)
