"""``functrace.numpy.linalg``: differentiable, batched linear algebra.

The primitives of ``functrace.primitives.linalg`` do the numerical work with host LAPACK:
``cholesky``, ``triangular_solve``, ``lu_factor`` / ``lu_solve`` (``solve``), ``det``, ``slogdet``,
``eigh``, ``eig``, ``svd`` and ``qr``; their derivative and batching rules, and why they are written
as they are, live there.  Every other function (``inv``, ``pinv``, ``lstsq``, ``norm``, ``cond``,
``matrix_power``, ...) is built from them and from functrace.numpy, so it differentiates,
batches and jits through them.

* Matrices are the last two axes; leading axes are batch axes.
* Default cutoffs of ``pinv`` / ``lstsq`` / ``matrix_rank`` are relative to the largest singular
  value and scaled by the dtype's eps, as JAX's (``pinv``: 10 max(m, n) eps).  A solve of a
  singular matrix gives inf / NaN as LAPACK's (and JAX's), not an exception mid-program.
* Symmetric inputs (``cholesky``, ``eigh``) are symmetrized first, (A + A^T) / 2, as JAX
  does: the derivative then matches the function for every perturbation, not only
  symmetric ones.  Eigenvalue-only functions (``eigvalsh``, ``svd(compute_uv=False)``, norms)
  stay finite at degenerate points, as in JAX.
* ``eig`` / ``eigvals`` (general matrices) return complex arrays, as JAX: eigenvectors with
  LAPACK's normalization (unit norm, real largest-magnitude component).
* On OpenCL the primitives run as host steps (``report()`` says so).
"""
from typing import Any as _Any
from typing import NamedTuple as _NamedTuple

import numpy as _np

from .. import arrays as _arrays
from .. import primitives as _P
from ..core.errors import NotInFunctrace as _NotInFunctrace
from ..core.errors import ShapeError as _ShapeError
from ..core.errors import user_frame_description as _where
from ..primitives.linalg import (  # noqa: F401 (fnp.linalg.*_p)
    cholesky_p,
    det_p,
    eig_p,
    eigh_p,
    lu_factor_p,
    lu_p,
    lu_pivots_to_permutation_p,
    lu_solve_p,
    qr_p,
    slogdet_p,
    svd_p,
    triangular_solve_p,
)
from ..primitives.linalg import diag_matrix as _diag_matrix
from ..primitives.linalg import diag_part as _diag_part
from ..primitives.linalg import inverse as _inverse
from ..primitives.linalg import mm as _mm
from ..primitives.linalg import mT as _mT
from ..primitives.linalg import permutation_matrix as _permutation_matrix
from ..primitives.linalg import solve as _solve
from ..primitives.linalg import symmetrize as _symmetrize
from ..primitives.linalg import tri_mask as _tri_mask
from ..primitives.linalg import triangular_solve as _triangular_solve
from . import _base as _fnp
from . import _misc

# --------------------------------------------------------------------------- user functions


def triangular_solve(a, b, *, lower: bool, transpose_a: bool = False, unit_diagonal: bool = False):
    """x with op(T) x = b, T the lower (upper) triangle of ``a``, op transposes if ``transpose_a``."""
    return _triangular_solve(a, b, lower=lower, transpose_a=transpose_a, unit_diagonal=unit_diagonal)


def permutation_matrix(perm, dtype):
    """P with P[i, perm[i]] = 1 (P @ a == a[perm]), batched over perm's leading axes."""
    return _permutation_matrix(perm, dtype)


def lu_pivots_to_permutation(pivots, size: int):
    """The row order ``perm`` with a[perm] = L U from LAPACK's sequential row swaps ``pivots``."""
    return lu_pivots_to_permutation_p.bind(pivots, size=int(size))


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
