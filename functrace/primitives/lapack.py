"""Direct calls into the LAPACK / BLAS that numpy itself ships (its bundled OpenBLAS), for the
linear-algebra primitives (``linalg``): the three routines numpy.linalg does not expose, LU
factorization with reuse (getrf / getrs), a triangular solve (trsm) and a Cholesky factorization
without numpy's copies (potrf).

Why: a gradient of ``solve`` reuses the forward pass's LU factors (as JAX does) instead of
factoring twice, and a triangular solve costs n^3 instead of an LU's (2/3 + 2) n^3; this is
what brings solve / cholesky gradients of 256x256 matrices within reach of JAX.

numpy wheels bundle ``libscipy_openblas64_*.so`` (64-bit integers, ``scipy_`` prefix,
``64_`` suffix).  The LAPACKE ``_work`` entry points skip LAPACKE's NaN scan of every input
(a pass over the matrix per call; NaNs propagate through the factorizations anyway).  When that library is not there (a numpy built against a system BLAS),
``usable`` is False and callers use numpy.linalg: same results, slower.
"""
from __future__ import annotations

import ctypes
import functools
import math
import os

import numpy as np

_ROW_MAJOR, _COL_MAJOR = 101, 102
_CBLAS = {"left": 141, "upper": 121, "lower": 122, "notrans": 111, "trans": 112, "nonunit": 131, "unit": 132}
_PREFIX = {np.dtype(np.float64): "d", np.dtype(np.float32): "s"}
_CTYPE = {np.dtype(np.float64): ctypes.c_double, np.dtype(np.float32): ctypes.c_float}
_INT = ctypes.c_int64
_INT_DTYPE = np.dtype(np.int64)
# Below this order numpy.linalg's batched loops beat a Python loop of direct calls.
MIN_ORDER = 32


@functools.lru_cache(maxsize=None)
def _routines() -> dict:
    """The routines of numpy's bundled OpenBLAS, keyed by (name, dtype); {} when absent (loaded at
    first use: ``import functrace`` does not pay for it)."""
    folder = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    libs = sorted(n for n in os.listdir(folder) if n.startswith("libscipy_openblas64_") and n.endswith(".so")) \
        if os.path.isdir(folder) else []
    if not libs:
        return {}
    try:
        lib = ctypes.CDLL(os.path.join(folder, libs[0]))
        out = {}
        for dtype, p in _PREFIX.items():
            ptr = ctypes.POINTER(_CTYPE[dtype])
            f = getattr(lib, f"scipy_cblas_{p}trsm64_")
            f.restype = None
            f.argtypes = [ctypes.c_int] * 5 + [_INT, _INT, _CTYPE[dtype], ptr, _INT, ptr, _INT]
            out["trsm", dtype] = f
            f = getattr(lib, f"scipy_LAPACKE_{p}potrf_work64_")
            f.restype = _INT
            f.argtypes = [ctypes.c_int, ctypes.c_char, _INT, ptr, _INT]
            out["potrf", dtype] = f
            f = getattr(lib, f"scipy_LAPACKE_{p}getrf_work64_")
            f.restype = _INT
            f.argtypes = [ctypes.c_int, _INT, _INT, ptr, _INT, ctypes.POINTER(_INT)]
            out["getrf", dtype] = f
            f = getattr(lib, f"scipy_LAPACKE_{p}getrs_work64_")
            f.restype = _INT
            f.argtypes = [ctypes.c_int, ctypes.c_char, _INT, _INT, ptr, _INT, ctypes.POINTER(_INT), ptr, _INT]
            out["getrs", dtype] = f
        return out
    except (OSError, AttributeError):
        return {}


def usable(a) -> bool:
    """Whether the direct routines serve matrices like ``a`` (float32/64, order >= MIN_ORDER)."""
    return a.dtype in _PREFIX and a.shape[-1] >= MIN_ORDER and bool(_routines())


def _ptr(x, dtype):
    return x.ctypes.data_as(ctypes.POINTER(_CTYPE[dtype]))


def _matrices(x):
    """``x`` as a C-contiguous stack (batch, ...) of its last two axes (a copy, written in place)."""
    return np.array(x, order="C").reshape((-1,) + x.shape[-2:])


def cholesky(a):
    """Lower Cholesky factors of the symmetric parts (a + a^T) / 2; NaN for a matrix that is not
    positive definite."""
    dtype, n = a.dtype, a.shape[-1]
    stack = np.empty((math.prod(a.shape[:-2]), n, n), dtype)
    potrf = _routines()["potrf", dtype]
    failed = []
    for source, m in zip(np.reshape(a, (-1, n, n)), stack):
        _symmetric_part(source, m)
        # row-major A is column-major A^T = A: its column-major upper factor U (A = U^T U) reads,
        # row-major, as U^T = L, with no transposing copies
        failed.append(potrf(_COL_MAJOR, b"U", n, _ptr(m, dtype), n) != 0)
    np.copyto(stack, 0, where=_strict_upper(n))  # (never read: may hold anything, NaN included)
    stack[np.array(failed, bool)] = np.nan
    return stack.reshape(a.shape)


def _symmetric_part(a, out):
    """(a + a^T) / 2 into ``out``: the transposed copy first, then contiguous passes (93 + 30 us
    at n = 256 with OpenBLAS's omatcopy + geadd, 102 us this way, 121 us as one numpy add)."""
    np.copyto(out, a.T)
    np.add(out, a, out=out)
    np.multiply(out, 0.5, out=out)


@functools.lru_cache(maxsize=16)
def _strict_upper(n: int) -> np.ndarray:
    return ~np.tri(n, dtype=bool)


def triangular_solve(a, b, lower: bool, transpose_a: bool, unit_diagonal: bool):
    """x with op(T) x = b, T the lower (upper) triangle of ``a`` (b: (..., n, k))."""
    dtype = a.dtype
    tri = np.ascontiguousarray(a).reshape((-1,) + a.shape[-2:])
    out = _matrices(b)
    n, k = b.shape[-2:]
    trsm = _routines()["trsm", dtype]
    flags = (_CBLAS["lower"] if lower else _CBLAS["upper"], _CBLAS["trans"] if transpose_a else _CBLAS["notrans"],
             _CBLAS["unit"] if unit_diagonal else _CBLAS["nonunit"])
    for t, x in zip(tri, out):
        trsm(_ROW_MAJOR, _CBLAS["left"], *flags, n, k, 1.0, _ptr(t, dtype), n, _ptr(x, dtype), k)
    return out.reshape(b.shape)


def lu_factor(a):
    """(factors, pivots) of the LU factorization of each A^T (so that ``lu_solve`` needs no
    transposes); a singular matrix gives factors whose solves are inf / NaN, as LAPACK's."""
    dtype = a.dtype
    stack = _matrices(a)
    n = a.shape[-1]
    pivots = np.empty(stack.shape[:1] + (n,), _INT_DTYPE)
    getrf = _routines()["getrf", dtype]
    for m, p in zip(stack, pivots):
        getrf(_COL_MAJOR, n, n, _ptr(m, dtype), n, p.ctypes.data_as(ctypes.POINTER(_INT)))
    return stack.reshape(a.shape), pivots.reshape(a.shape[:-1])


def lu_solve(factors, pivots, b, transpose_a: bool):
    """x with A x = b (A^T x = b if ``transpose_a``) from ``lu_factor(A)``."""
    dtype = factors.dtype
    lus = np.ascontiguousarray(factors).reshape((-1,) + factors.shape[-2:])
    pivs = np.ascontiguousarray(pivots, dtype=_INT_DTYPE).reshape((-1, factors.shape[-1]))
    n, k = b.shape[-2:]
    # column-major right-hand sides: C-ordered copies of the transposes of b's matrices (always a
    # copy: getrs overwrites them, and b may be a transposed view that is already in that order)
    out = np.array(np.swapaxes(b, -1, -2), order="C").reshape((-1, k, n))
    getrs = _routines()["getrs", dtype]
    trans = b"N" if transpose_a else b"T"  # the factors are those of A^T
    for lu, p, x in zip(lus, pivs, out):
        getrs(_COL_MAJOR, trans, n, k, _ptr(lu, dtype), n, p.ctypes.data_as(ctypes.POINTER(_INT)), _ptr(x, dtype), n)
    return np.swapaxes(out.reshape(b.shape[:-2] + (k, n)), -1, -2)


def lu(a):
    """(lu, pivots) of a = P L U for each (m, n) matrix: L (unit diagonal, below it) and U packed
    in ``lu``, 0-based row swaps in ``pivots`` (LAPACK's getrf, as scipy.linalg.lu_factor)."""
    dtype = a.dtype
    m, n = a.shape[-2:]
    stack = _matrices(a)
    pivots = np.empty(stack.shape[:1] + (min(m, n),), _INT_DTYPE)
    getrf = _routines()["getrf", dtype]
    for mat, p in zip(stack, pivots):
        getrf(_ROW_MAJOR, m, n, _ptr(mat, dtype), n, p.ctypes.data_as(ctypes.POINTER(_INT)))
    return stack.reshape(a.shape), (pivots - 1).reshape(a.shape[:-2] + (min(m, n),))
