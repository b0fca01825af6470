"""``functrace.scipy.linalg``: scipy.linalg's signatures over functrace.numpy.linalg's
differentiable primitives."""
from __future__ import annotations

import numpy as np

from .. import arrays
from .. import numpy as fnp
from ..core import Tracer
from ..core.errors import ConcretizationError
from ..numpy import linalg as _la
from ..primitives.linalg import lu_p as _lu_p
from ..transforms.autodiff import stop_gradient as _stop_gradient


def _as_columns(b, matrix_ndim: int):
    """b as (..., n, k), and whether it was a stack of vectors (one axis fewer than the matrices,
    as JAX decides)."""
    b = arrays.to_float(b, np.float64)
    return (fnp.expand_dims(b, -1), True) if b.ndim == max(1, matrix_ndim - 1) else (b, False)


def solve_triangular(a, b, trans=0, lower: bool = False, unit_diagonal: bool = False, overwrite_b: bool = False,
                     check_finite: bool = True):
    """x with op(a) x = b, a triangular (only its lower / upper triangle is read)."""
    if trans not in (0, 1, 2, "N", "T", "C"):
        raise ValueError(f"solve_triangular: trans must be 0, 1, 2, 'N', 'T' or 'C', got {trans!r}")
    a = arrays.to_float(a, np.float64)
    b, vector = _as_columns(b, a.ndim)
    a, b = arrays.promote(a, b)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a, b = fnp.broadcast_to(a, batch + a.shape[-2:]), fnp.broadcast_to(b, batch + b.shape[-2:])
    x = _la.triangular_solve(a, b, lower=lower, transpose_a=trans not in (0, "N"), unit_diagonal=unit_diagonal)
    return x[..., 0] if vector else x


def cholesky(a, lower: bool = False, overwrite_a: bool = False, check_finite: bool = True):
    """scipy's default is the upper factor U (a = U^T U)."""
    return _la.cholesky(a, upper=not lower)


def cho_factor(a, lower: bool = False, overwrite_a: bool = False, check_finite: bool = True):
    """(c, lower): the Cholesky factor (the other triangle is zero, where scipy leaves garbage)."""
    return cholesky(a, lower=lower), lower


def cho_solve(c_and_lower, b, overwrite_b: bool = False, check_finite: bool = True):
    """x with a x = b from ``cho_factor(a)``: two triangular solves."""
    c, lower = c_and_lower
    # with L = c (lower) or L = c^T (upper): L y = b, then L^T x = y
    y = solve_triangular(c, b, trans=0 if lower else 1, lower=lower)
    return solve_triangular(c, y, trans=1 if lower else 0, lower=lower)


def solve(a, b, assume_a: str = "gen", lower: bool = False, overwrite_a: bool = False, overwrite_b: bool = False,
          check_finite: bool = True):
    if assume_a in ("pos", "positive definite"):
        return cho_solve(cho_factor(a, lower=True), b)
    return _la.solve(a, b)


def lu_factor(a, overwrite_a: bool = False, check_finite: bool = True):
    """(lu, piv): L (unit diagonal, below it) and U packed in lu, 0-based row swaps in piv (a = P L U)."""
    x = arrays.to_float(a, np.float64)
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"lu_factor: expected square matrices (..., n, n), got shape {x.shape}")
    factors, pivots, _ = _lu_p.bind(x)
    return factors, pivots


def lu_solve(lu_and_piv, b, trans: int = 0, overwrite_b: bool = False, check_finite: bool = True):
    """x with a x = b (trans=1 or 2: a^T x = b) from ``lu_factor(a)``."""
    factors, pivots = lu_and_piv
    b, vector = _as_columns(b, fnp.ndim(factors))
    factors, b = arrays.promote(factors, b)
    perm = _la.lu_pivots_to_permutation(pivots, factors.shape[-1])
    p = _la.permutation_matrix(perm, b.dtype)
    if trans in (0, "N"):  # a = P^T L U: x = U^-1 L^-1 P b
        y = _la.triangular_solve(factors, p @ b, lower=True, unit_diagonal=True)
        x = _la.triangular_solve(factors, y, lower=False)
    elif trans in (1, 2, "T", "C"):  # a^T = U^T L^T P: x = P^T L^-T U^-T b
        y = _la.triangular_solve(factors, b, lower=False, transpose_a=True)
        x = fnp.swapaxes(p, -1, -2) @ _la.triangular_solve(factors, y, lower=True, transpose_a=True, unit_diagonal=True)
    else:
        raise ValueError(f"lu_solve: trans must be 0, 1 or 2, got {trans!r}")
    return x[..., 0] if vector else x


def lu(a, permute_l: bool = False, overwrite_a: bool = False, check_finite: bool = True):
    """(p, l, u) with a = p @ l @ u (``permute_l``: (p @ l, u))."""
    x = arrays.to_float(a, np.float64)
    factors, _, perm = _lu_p.bind(x)
    m, n = x.shape[-2:]
    k = min(m, n)
    lower = _strict_lower(factors[..., :, :k]) + np.eye(m, k, dtype=x.dtype)
    upper = _upper(factors[..., :k, :])
    p = fnp.swapaxes(_la.permutation_matrix(perm, x.dtype), -1, -2)
    return (p @ lower, upper) if permute_l else (p, lower, upper)


def _strict_lower(x):
    return fnp.where(np.tri(*x.shape[-2:], -1, dtype=bool), x, 0.0)


def _upper(x):
    return fnp.where(~np.tri(*x.shape[-2:], -1, dtype=bool), x, 0.0)


def det(a, overwrite_a: bool = False, check_finite: bool = True):
    return _la.det(a)


def inv(a, overwrite_a: bool = False, check_finite: bool = True):
    return _la.inv(a)


def eigh(a, b=None, lower: bool = True, eigvals_only: bool = False, **kwargs):
    if b is not None or kwargs:
        raise NotImplementedError("eigh: generalized problems (b=) and subset options are not implemented")
    w, v = _la.eigh(a)
    return w if eigvals_only else (w, v)


def svd(a, full_matrices: bool = True, compute_uv: bool = True, overwrite_a: bool = False,
        check_finite: bool = True, lapack_driver: str = "gesdd"):
    out = _la.svd(a, full_matrices=full_matrices, compute_uv=compute_uv)
    return tuple(out) if compute_uv else out


def qr(a, overwrite_a: bool = False, lwork=None, mode: str = "full", pivoting: bool = False, check_finite: bool = True):
    """mode 'full' (Q square), 'economic' or 'r' (a 1-tuple (R,), as scipy)."""
    if pivoting:
        raise NotImplementedError("qr: pivoting=True is not implemented")
    if mode not in ("full", "economic", "r"):
        raise NotImplementedError(f"qr: mode={mode!r} is not implemented")
    if mode == "r":
        return (_la.qr(a, "complete")[1],)
    return tuple(_la.qr(a, "complete" if mode == "full" else "reduced"))


_THETA13 = 5.371920351148152  # the largest 1-norm at which the degree-13 approximant is accurate
_MAX_TRACED_SQUARINGS = 24  # traced values: norms up to theta13 * 2^24 (beyond, exp overflows anyway)


def expm(A):
    """The matrix exponential: scaling and squaring of the degree-13 Pade approximant (Higham 2005).
    With a concrete A the number of squarings s is computed here; with a traced one it is computed
    in the program and the squarings beyond it are skipped by ``where`` (as many matrix products as
    the largest s allowed: 24)."""
    a = arrays.to_float(A, np.float64)
    norm = _concrete_max_norm1(a)
    if norm is not None:
        squarings = int(np.ceil(np.log2(norm / _THETA13))) if norm > _THETA13 else 0
        r = _pade13(a / 2.0 ** squarings)
        for _ in range(squarings):
            r = r @ r
        return r
    norm1 = fnp.max(fnp.sum(fnp.abs(a), axis=-2), axis=-1)
    steps = fnp.clip(fnp.ceil(fnp.log2(fnp.maximum(norm1, _THETA13) / _THETA13)), 0, _MAX_TRACED_SQUARINGS)
    steps = _stop_gradient(steps)[..., None, None]
    r = _pade13(a / 2.0 ** steps)
    for i in range(_MAX_TRACED_SQUARINGS):
        r = fnp.where(steps > i, r @ r, r)
    return r


def _pade13(a):
    """The [13/13] Pade approximant of exp at a matrix of 1-norm <= theta13."""
    eye = fnp.broadcast_to(np.eye(a.shape[-1], dtype=a.dtype), a.shape)
    b = (64764752532480000.0, 32382376266240000.0, 7771770303897600.0, 1187353796428800.0, 129060195264000.0,
         10559470521600.0, 670442572800.0, 33522128640.0, 1323241920.0, 40840800.0, 960960.0, 16380.0, 182.0, 1.0)
    a2 = a @ a
    a4 = a2 @ a2
    a6 = a4 @ a2
    u = a @ (a6 @ (b[13] * a6 + b[11] * a4 + b[9] * a2) + b[7] * a6 + b[5] * a4 + b[3] * a2 + b[1] * eye)
    v = a6 @ (b[12] * a6 + b[10] * a4 + b[8] * a2) + b[6] * a6 + b[4] * a4 + b[2] * a2 + b[0] * eye
    return _la.solve(v - u, v + u)


def _concrete_max_norm1(a):
    """max over the batch of ||a||_1, when a's value is known (eagerly, or under grad of concrete
    values); None under jit / vmap."""
    if isinstance(a, Tracer):
        try:
            a = a.concrete_value()
        except ConcretizationError:
            return None
    value = np.asarray(a)
    return float(np.max(np.sum(np.abs(value), axis=-2))) if value.size else 0.0
