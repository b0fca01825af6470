"""The wider numpy surface (einsum forms, pad modes, creation/shape/index helpers, elementwise
functions, products and misc numerics): each function against numpy eagerly and under ``jit``
on both backends, derivatives by ``check_grads`` (order 2, forward and reverse), ``vmap``
against a Python loop, and JAX where importable."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.test_util import check_grads

RNG = np.random.default_rng(16)
A = RNG.standard_normal((4, 5))
B = RNG.standard_normal((3, 2))
C = RNG.standard_normal((2, 3, 3))
V7 = RNG.standard_normal(7)
V3 = RNG.standard_normal(3)
X3, Y3 = RNG.standard_normal((4, 3)), RNG.standard_normal((4, 3))
B4 = RNG.standard_normal((2, 3, 4, 5))
XS = np.cumsum(np.arange(5.0) + 1)  # uneven sample points
XP, FP = np.array([-1.0, 0.0, 0.5, 2.0]), np.array([3.0, -1.0, 2.0, 0.0])
BINS = np.array([-1.0, 0.0, 0.5, 1.0])
SPECIAL = np.array([-2.5, -0.3, 0.0, -0.0, 0.7, 3.0, 20.0, -40.0, np.inf, -np.inf, np.nan])


def _put(a, i, v, axis):
    a = a.copy()
    np.put_along_axis(a, i, v, axis)
    return a


# (id, functrace function, numpy reference, args)
CASES = [
    # einsum in every form
    *[(f"einsum[{s}]", (lambda s: lambda *o: fnp.einsum(s, *o))(s), (lambda s: lambda *o: np.einsum(s, *o))(s), ops)
      for s, ops in [("ii", (A[:4, :4],)), ("ii->i", (A[:4, :4],)), ("ij,jk", (A, A.T)), ("ij,jk,kl->il", (A, A.T, A[:, :2])),
                     ("...ii->...i", (C,)), ("bii->b", (C,)), ("...ij,jk", (C, B)), ("i,i", (V3, V3)), ("ij->", (A,)),
                     ("iij->j", (C.transpose(1, 2, 0),)), ("ji", (A,)), ("Ab,bc->cA", (A, A.T)), ("ij,ij->ij", (A, A)),
                     ("i,j->ij", (V3, V7)), ("iji->j", (RNG.standard_normal((3, 4, 3)),)), ("...,...", (A, A[0]))]],
    ("einsum-sublist", lambda a, b: fnp.einsum(a, [0, 1], b, [1, 2], [0, 2]),
     lambda a, b: np.einsum(a, [0, 1], b, [1, 2], [0, 2]), (A, A.T)),
    ("einsum-sublist-ellipsis", lambda c: fnp.einsum(c, [Ellipsis, 0, 0]), lambda c: np.einsum(c, [Ellipsis, 0, 0]), (C,)),
    ("einsum-optimize", lambda a, b, c: fnp.einsum("ij,jk,kl", a, b, c, optimize="greedy"),
     lambda a, b, c: np.einsum("ij,jk,kl", a, b, c, optimize="greedy"), (A, A.T, A)),
    # pad modes
    *[(f"pad-{m}", (lambda m: lambda a: fnp.pad(a, ((2, 3), (1, 7)), mode=m))(m),
       (lambda m: lambda a: np.pad(a, ((2, 3), (1, 7)), mode=m))(m), (A,)) for m in ("edge", "reflect", "symmetric", "wrap")],
    ("pad-reflect-1d", lambda a: fnp.pad(a, 9, mode="reflect"), lambda a: np.pad(a, 9, mode="reflect"), (V3,)),
    # shape helpers
    ("roll", lambda a: fnp.roll(a, 2, 1), lambda a: np.roll(a, 2, 1), (A,)),
    ("roll-tuple", lambda a: fnp.roll(a, (2, -1), (0, 1)), lambda a: np.roll(a, (2, -1), (0, 1)), (A,)),
    ("roll-flat", lambda a: fnp.roll(a, -3), lambda a: np.roll(a, -3), (A,)),
    *[(f"rot90-{k}", (lambda k: lambda a: fnp.rot90(a, k))(k), (lambda k: lambda a: np.rot90(a, k))(k), (A,)) for k in (-1, 1, 2, 3)],
    ("rot90-axes", lambda a: fnp.rot90(a, 1, (2, 0)), lambda a: np.rot90(a, 1, (2, 0)), (B4,)),
    ("diff", lambda a: fnp.diff(a, 2, axis=0, prepend=1.0), lambda a: np.diff(a, 2, axis=0, prepend=1.0), (A,)),
    ("diff-bool", lambda a: fnp.diff(a > 0), lambda a: np.diff(a > 0), (A,)),
    ("ediff1d", lambda a: fnp.ediff1d(a, to_end=[1, 2], to_begin=3.0), lambda a: np.ediff1d(a, to_end=[1, 2], to_begin=3.0), (A,)),
    ("append", lambda a: fnp.append(a, a[:1], axis=0), lambda a: np.append(a, a[:1], axis=0), (A,)),
    ("append-flat", lambda a: fnp.append(a, 1.0), lambda a: np.append(a, 1.0), (A,)),
    *[(f"insert-{i}", (lambda o: lambda a: fnp.insert(a, o, 7.0, axis=1))(o), (lambda o: lambda a: np.insert(a, o, 7.0, axis=1))(o), (A,))
      for i, o in enumerate([1, [0, 2, 2, 5], slice(1, 4), -1])],
    ("insert-values", lambda a: fnp.insert(a, 2, a[:, 0], axis=1), lambda a: np.insert(a, 2, a[:, 0], axis=1), (A,)),
    ("insert-flat", lambda a: fnp.insert(a, [3, 1], [7.0, 8.0]), lambda a: np.insert(a, [3, 1], [7.0, 8.0]), (A,)),
    ("delete", lambda a: fnp.delete(a, [0, 2], axis=1), lambda a: np.delete(a, [0, 2], axis=1), (A,)),
    ("delete-flat", lambda a: fnp.delete(a, slice(2, 9, 3)), lambda a: np.delete(a, slice(2, 9, 3)), (A,)),
    ("column_stack", lambda a: fnp.column_stack([a[0], a[:2].T, a[1]]), lambda a: np.column_stack([a[0], a[:2].T, a[1]]), (A,)),
    ("dstack", lambda a: fnp.dstack([a, a, a[:, :, None]]), lambda a: np.dstack([a, a, a[:, :, None]]), (A,)),
    ("atleast_3d", lambda a: fnp.atleast_3d(a[0], a, a[0, 0]), lambda a: np.atleast_3d(a[0], a, a[0, 0]), (A,)),
    ("atleast_1d-many", lambda a: fnp.atleast_1d(a[0, 0], a), lambda a: np.atleast_1d(a[0, 0], a), (A,)),
    ("hsplit", lambda a: fnp.hsplit(a, [1, 3]), lambda a: np.hsplit(a, [1, 3]), (A,)),
    ("vsplit", lambda a: fnp.vsplit(a, 2), lambda a: np.vsplit(a, 2), (A,)),
    ("dsplit", lambda a: fnp.dsplit(a, [2]), lambda a: np.dsplit(a, [2]), (B4[0],)),
    ("array_split-list", lambda a: fnp.array_split(a, [1, 3, 9], axis=1), lambda a: np.array_split(a, [1, 3, 9], axis=1), (A,)),
    ("array_split-n", lambda a: fnp.array_split(a, 3, axis=1), lambda a: np.array_split(a, 3, axis=1), (A,)),
    *[(f"rollaxis-{ax},{st}", (lambda ax, st: lambda a: fnp.rollaxis(a, ax, st))(ax, st),
       (lambda ax, st: lambda a: np.rollaxis(a, ax, st))(ax, st), (B4,)) for ax, st in [(3, 1), (1, 4), (0, 2), (-1, 0)]],
    ("block", lambda a: fnp.block([[a, a[:, :2]], [a[:1], a[:1, :2]]]), lambda a: np.block([[a, a[:, :2]], [a[:1], a[:1, :2]]]), (A,)),
    ("block-1d", lambda a: fnp.block([a[0], 1.0, a[1]]), lambda a: np.block([a[0], 1.0, a[1]]), (A,)),
    # creation
    ("tril", lambda a: fnp.tril(a, -1), lambda a: np.tril(a, -1), (A,)),
    ("triu-batched", lambda a: fnp.triu(a, 1), lambda a: np.triu(a, 1), (B4,)),
    ("tril-1d", lambda a: fnp.tril(a), lambda a: np.tril(a), (V3,)),
    ("meshgrid-xy", lambda a: fnp.meshgrid(a[0], a[1][:3], a[2][:2]), lambda a: np.meshgrid(a[0], a[1][:3], a[2][:2]), (A,)),
    ("meshgrid-ij-sparse", lambda a: fnp.meshgrid(a[0], a[1][:3], indexing="ij", sparse=True),
     lambda a: np.meshgrid(a[0], a[1][:3], indexing="ij", sparse=True), (A,)),
    ("logspace", lambda a: fnp.logspace(a[0, 0], a[0, 1], 7, base=2.0), lambda a: np.logspace(a[0, 0], a[0, 1], 7, base=2.0), (A,)),
    ("geomspace", lambda a: fnp.geomspace(abs(a[0, 0]), abs(a[0, 1]) + 3, 7), lambda a: np.geomspace(abs(a[0, 0]), abs(a[0, 1]) + 3, 7), (A,)),
    ("geomspace-neg", lambda a: fnp.geomspace(-1.5, -a[0, 1] ** 2 - 3, 5, endpoint=False),
     lambda a: np.geomspace(-1.5, -a[0, 1] ** 2 - 3, 5, endpoint=False), (A,)),
    ("linspace-traced", lambda a: fnp.linspace(a[0], a[1], 6, axis=1), lambda a: np.linspace(a[0], a[1], 6, axis=1), (A,)),
    ("vander", lambda a: fnp.vander(a[0], 4), lambda a: np.vander(a[0], 4), (A,)),
    ("vander-increasing", lambda a: fnp.vander(a[0], increasing=True), lambda a: np.vander(a[0], increasing=True), (A,)),
    ("r_", lambda a: fnp.r_[a[0], 1.0, 0:3], lambda a: np.r_[a[0], 1.0, 0:3], (A,)),
    ("c_", lambda a: fnp.c_[a[0], a[1]], lambda a: np.c_[a[0], a[1]], (A,)),
    ("ix_", lambda a: a[fnp.ix_([0, 2], [1, 3, 4])], lambda a: a[np.ix_([0, 2], [1, 3, 4])], (A,)),
    ("tril_indices", lambda a: a[fnp.tril_indices(4, -1)], lambda a: a[np.tril_indices(4, -1)], (A,)),
    ("triu_indices_from", lambda a: a[fnp.triu_indices_from(a, 1)], lambda a: a[np.triu_indices_from(a, 1)], (A,)),
    ("diag_indices", lambda a: a[fnp.diag_indices(4)], lambda a: a[np.diag_indices(4)], (A[:4, :4],)),
    ("mgrid", lambda a: a[fnp.mgrid[0:4, 0:2]] * 1.0, lambda a: a[np.mgrid[0:4, 0:2]] * 1.0, (A,)),
    ("indices", lambda a: a * fnp.indices(a.shape)[1], lambda a: a * np.indices(a.shape)[1], (A,)),
    # elementwise
    *[(name, getattr(fnp, name), getattr(np, name), (SPECIAL,)) for name in
      ("cbrt", "trunc", "fix", "fabs", "deg2rad", "rad2deg", "degrees", "radians", "sinc", "i0", "signbit", "real",
       "imag", "conj", "conjugate", "angle", "nan_to_num", "isnan")],
    ("i0-range", fnp.i0, np.i0, (np.linspace(-700, 700, 1001),)),
    ("sinc-near-0", fnp.sinc, np.sinc, (np.r_[np.linspace(-0.2, 0.2, 401), 0.05, -0.05],)),
    ("nan_to_num-args", lambda x: fnp.nan_to_num(x, nan=-1.0, posinf=9.0), lambda x: np.nan_to_num(x, nan=-1.0, posinf=9.0), (SPECIAL,)),
    ("frexp", fnp.frexp, np.frexp, (np.array([0.0, -0.0, 1.5, -3e-310, 1e300, np.inf, np.nan, -7.0, 8.0, 0.5, 2.0 ** -1074]),)),
    ("frexp-f32", fnp.frexp, np.frexp, (np.array([0.0, 1.5, -3e-39, 3e38, 8.0, 0.5, 1e-45], np.float32),)),
    ("ldexp", fnp.ldexp, np.ldexp, (np.array([1.0, 3.0, -0.7, 5.0]), np.array([3, -2, 0, 1000]))),
    *[(name, getattr(fnp, name), getattr(np, name), (SPECIAL, np.roll(SPECIAL, 3) + 0.25)) for name in
      ("fmod", "copysign", "logaddexp2", "heaviside")],
    ("fmod-int", fnp.fmod, np.fmod, (np.array([7, -7, 7, -7, 0]), np.array([3, 3, -3, -3, 2]))),
    ("float_power", fnp.float_power, np.float_power, (np.abs(A), A)),
    ("float_power-f32", fnp.float_power, np.float_power, (np.abs(A).astype(np.float32), 2)),
    ("copysign-zero", fnp.copysign, np.copysign, (np.array([1.0, 2.0, -3.0]), np.array([-0.0, 0.0, np.nan]))),
    ("signbit-int", fnp.signbit, np.signbit, (np.array([-2, 0, 3]),)),
    # products and misc
    ("kron", fnp.kron, np.kron, (A, B)), ("kron-1d-2d", fnp.kron, np.kron, (V7, B)),
    ("cross", fnp.cross, np.cross, (X3, Y3)), ("cross-axis", lambda a, b: fnp.cross(a, b, axis=0),
                                                  lambda a, b: np.cross(a, b, axis=0), (X3.T, Y3.T)),
    ("cross-broadcast", fnp.cross, np.cross, (X3, Y3[0])),
    ("vecdot", fnp.vecdot, np.vecdot, (X3, Y3)), ("matvec", fnp.matvec, np.matvec, (A, A[0])),
    ("vecmat", fnp.vecmat, np.vecmat, (A[:, 0], A)), ("matvec-batched", fnp.matvec, np.matvec, (C, C[:, 0])),
    ("select", lambda x: fnp.select([x < -0.5, x > 0.5], [x * 2, x ** 2], 7.0),
     lambda x: np.select([x < -0.5, x > 0.5], [x * 2, x ** 2], 7.0), (A,)),
    ("choose", lambda i, x: fnp.choose(i, [x[0], x[1], x[2]], mode="clip"), lambda i, x: np.choose(i, [x[0], x[1], x[2]]),
     (np.array([[0, 1, 2], [2, 1, 0]]), RNG.standard_normal((3, 2, 3)))),
    ("choose-wrap", lambda i, x: fnp.choose(i, [x[0], x[1]], mode="wrap"), lambda i, x: np.choose(i, [x[0], x[1]], mode="wrap"),
     (np.array([[0, 3, -1], [2, 1, 0]]), RNG.standard_normal((2, 2, 3)))),
    ("put_along_axis", lambda a, i, v: fnp.put_along_axis(a, i, v, 1, inplace=False), lambda a, i, v: _put(a, i, v, 1),
     (A, np.array([[0, 2, 2], [1, 1, 4], [3, 0, 0], [4, 4, 1]]), RNG.standard_normal((4, 3)))),
    ("put_along_axis-0", lambda a, i: fnp.put_along_axis(a, i, 5.0, 0, inplace=False), lambda a, i: _put(a, i, 5.0, 0),
     (A, np.array([[0, 2, 3, 1, 0], [3, 3, 1, 0, 2]]))),
    ("compress", lambda x: fnp.compress([True, False, True], x, axis=1), lambda x: np.compress([True, False, True], x, axis=1), (A,)),
    ("extract", lambda x: fnp.extract(A > 0, x), lambda x: np.extract(A > 0, x), (A,)),
    *[(f"digitize-{o}-{r}", (lambda b, r: lambda x: fnp.digitize(x, b, r))(b, r), (lambda b, r: lambda x: np.digitize(x, b, r))(b, r),
       (np.r_[A.ravel(), BINS],)) for o, b in (("inc", BINS), ("dec", BINS[::-1])) for r in (False, True)],
    ("interp", lambda x: fnp.interp(x, XP, FP), lambda x: np.interp(x, XP, FP), (np.r_[A.ravel() * 2, XP],)),
    ("interp-lr", lambda x: fnp.interp(x, XP, FP, left=-9, right=9), lambda x: np.interp(x, XP, FP, left=-9, right=9),
     (np.r_[A.ravel() * 2, XP],)),
    *[(f"{f}-{mode}-{k}", (lambda f, m: lambda a, b: getattr(fnp, f)(a, b, m))(f, mode),
       (lambda f, m: lambda a, b: getattr(np, f)(a, b, m))(f, mode), args)
      for f in ("convolve", "correlate") for mode in ("full", "same", "valid")
      for k, args in enumerate([(V7, V3), (V3, V7), (V7[:6], V7[:2]), (V7[:6], V7[:4])])],
    ("bincount-weights", lambda w: fnp.bincount(np.array([0, 3, 1, 3, 5]), w, length=8),
     lambda w: np.bincount(np.array([0, 3, 1, 3, 5]), w, minlength=8), (np.arange(5.0),)),
    ("bincount-length", lambda i: fnp.bincount(i, length=4), lambda i: np.bincount(i, minlength=4)[:4], (np.array([0, 3, 1, 3, 2]),)),
    ("cov", fnp.cov, np.cov, (A,)), ("cov-rowvar", lambda a: fnp.cov(a, rowvar=False, ddof=0), lambda a: np.cov(a, rowvar=False, ddof=0), (A,)),
    ("cov-xy", lambda a: fnp.cov(a[0], a[1]), lambda a: np.cov(a[0], a[1]), (A,)), ("cov-1", lambda a: fnp.cov(a[0]), lambda a: np.cov(a[0]), (A,)),
    ("corrcoef", fnp.corrcoef, np.corrcoef, (A,)),
    ("trapezoid", fnp.trapezoid, np.trapezoid, (A,)),
    ("trapezoid-x", lambda a: fnp.trapezoid(a, XS), lambda a: np.trapezoid(a, XS), (A,)),
    ("trapezoid-dx", lambda a: fnp.trapezoid(a, dx=0.3, axis=0), lambda a: np.trapezoid(a, dx=0.3, axis=0), (A,)),
    ("gradient", fnp.gradient, np.gradient, (A,)),
    ("gradient-2", lambda a: fnp.gradient(a, 0.5, edge_order=2), lambda a: np.gradient(a, 0.5, edge_order=2), (A,)),
    ("gradient-x", lambda a: fnp.gradient(a, XS, axis=1), lambda a: np.gradient(a, XS, axis=1), (A,)),
    ("gradient-x2", lambda a: fnp.gradient(a, XS, axis=1, edge_order=2), lambda a: np.gradient(a, XS, axis=1, edge_order=2), (A,)),
    ("polyval", fnp.polyval, np.polyval, (V3, A)),
    ("isclose", fnp.isclose, np.isclose, (SPECIAL, np.where(np.arange(11) % 2, SPECIAL, SPECIAL + 1e-6))),
    ("isclose-nan", lambda a, b: fnp.isclose(a, b, equal_nan=True), lambda a, b: np.isclose(a, b, equal_nan=True), (SPECIAL, SPECIAL)),
    ("allclose", fnp.allclose, np.allclose, (A, A + 1e-9)), ("array_equal", fnp.array_equal, np.array_equal, (A, A)),
    ("array_equal-nan", lambda a: fnp.array_equal(a, a, equal_nan=True), lambda a: np.array_equal(a, a, equal_nan=True), (SPECIAL,)),
    # functions of functions and small helpers
    ("vectorize-signature", lambda a, b: fnp.vectorize(lambda u, v: fnp.sum(u * v), signature="(n),(n)->()")(a, b),
     lambda a, b: np.vectorize(lambda u, v: np.sum(u * v), signature="(n),(n)->()")(a, b), (A, A[0])),
    ("vectorize-scalar", lambda a: fnp.vectorize(lambda u, k: u * k, excluded={1})(a, 3.0),
     lambda a: np.vectorize(lambda u, k: u * k, excluded={1})(a, 3.0), (A,)),
    ("apply_along_axis", lambda a: fnp.apply_along_axis(lambda v: fnp.outer(v, v[:2]), 0, a),
     lambda a: np.apply_along_axis(lambda v: np.outer(v, v[:2]), 0, a), (A,)),
    ("apply_over_axes", lambda a: fnp.apply_over_axes(fnp.sum, a, [0, 1]), lambda a: np.apply_over_axes(np.sum, a, [0, 1]), (A,)),
    ("piecewise", lambda v: fnp.piecewise(v, [v < 0, v > 1], [lambda t: -t, lambda t: t * 2, 0.5]),
     lambda v: np.piecewise(v, [v < 0, v > 1], [lambda t: -t, lambda t: t * 2, 0.5]), (V7,)),
    ("fromfunction", lambda a: a * fnp.fromfunction(lambda i, j: i + j, (4, 5)), lambda a: a * np.fromfunction(lambda i, j: i + j, (4, 5)), (A,)),
    ("isin", lambda i: fnp.isin(i, [2, 3]), lambda i: np.isin(i, [2, 3]), (np.array([[1, 2], [3, 4]]),)),
    ("modf", fnp.modf, np.modf, (SPECIAL,)), ("divmod", fnp.divmod, np.divmod, (A, 0.3)),
    *[(f"fill_diagonal-{s}-{w}", (lambda w: lambda z: fnp.fill_diagonal(z, np.array([1.0, 2.0]), wrap=w, inplace=False))(w),
       (lambda w: lambda z: (lambda c: (np.fill_diagonal(c, np.array([1.0, 2.0]), wrap=w), c)[1])(z.copy()))(w), (np.zeros(s),))
      for s in ((3, 3), (5, 3), (3, 5), (3, 3, 3)) for w in (False, True)],
    ("diagflat", lambda a: fnp.diagflat(a[:2, :2], 1), lambda a: np.diagflat(a[:2, :2], 1), (A,)),
    ("resize", lambda a: fnp.resize(a, (3, 9)), lambda a: np.resize(a, (3, 9)), (A,)),
    ("put", lambda a: fnp.put(a, np.array([0, 4, 2]), np.array([9.0, 8.0]), inplace=False),
     lambda a: (lambda c: (np.put(c, [0, 4, 2], [9.0, 8.0]), c)[1])(a.copy()), (A,)),
    ("unstack", lambda a: fnp.unstack(a, 1), lambda a: tuple(np.moveaxis(a, 1, 0)), (A,)),
    ("matrix_transpose", fnp.matrix_transpose, np.matrix_transpose, (B4,)),
    ("einsum-path-optimal", lambda a, b, c: fnp.einsum("ij,jk,kl->il", a, b, c, optimize="optimal"),
     lambda a, b, c: np.einsum("ij,jk,kl->il", a, b, c), (A, A.T, A)),
    ("einsum-no-optimize", lambda a, b, c: fnp.einsum("ij,jk,ki", a, b, c, optimize=False),
     lambda a, b, c: np.einsum("ij,jk,ki", a, b, c), (A[:4, :4], A[:4, :4].T, A[:4, :4])),
]


def _check_same(got, want, what):
    got_leaves, want_leaves = ft.tree_util.tree_leaves(got), ft.tree_util.tree_leaves(want)
    assert len(got_leaves) == len(want_leaves), what
    for g, w in zip(got_leaves, want_leaves):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (what, g.shape, w.shape, g.dtype, w.dtype)
        tol = 1e-5 if w.dtype == np.float32 else 1e-12
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, equal_nan=True, err_msg=what)


@pytest.mark.parametrize("name,f,ref,args", CASES, ids=[c[0] for c in CASES])
def test_eager_and_jit_match_numpy(name, f, ref, args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = ref(*args)
        _check_same(f(*args), want, "eager")
        _check_same(ft.jit(f, backend="numpy")(*args), want, "jit numpy")


def test_case_ids_are_unique():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})


# (id, function, args) for check_grads order 2, forward and reverse, float64
GRAD_CASES = [
    ("einsum-diag", lambda a: fnp.einsum("ii->i", a), (A[:4, :4],)),
    ("einsum-trace-batched", lambda c, b: fnp.einsum("bii,ik->bk", c, b), (C, B)),
    ("einsum-ellipsis", lambda c, b: fnp.einsum("...ij,jk", c, b), (C, B)),
    ("pad-reflect", lambda a: fnp.pad(a, ((2, 3), (1, 4)), mode="reflect"), (A,)),
    ("pad-wrap", lambda a: fnp.pad(a, 2, mode="wrap"), (V3,)),
    ("roll", lambda a: fnp.roll(a, 2, 1), (A,)), ("rot90", lambda a: fnp.rot90(a), (A,)),
    ("diff", lambda a: fnp.diff(a, 2), (A,)), ("insert", lambda a: fnp.insert(a, [1, 3], a[:, :2], axis=1), (A,)),
    ("delete", lambda a: fnp.delete(a, 1, 0), (A,)), ("block", lambda a: fnp.block([[a, a], [a, a]]), (B,)),
    ("tril", fnp.tril, (A,)), ("meshgrid", lambda a, b: fnp.meshgrid(a, b)[0] * fnp.meshgrid(a, b)[1], (V3, V7)),
    ("logspace", lambda a: fnp.logspace(a[0], a[1], 5), (np.array([0.5, 1.0]),)),
    ("geomspace", lambda a: fnp.geomspace(a[0], a[1], 5), (np.array([1.5, 4.0]),)),
    ("vander", lambda a: fnp.vander(a, 4), (np.array([0.0, 4.0, -1.3]),)),
    ("cbrt", fnp.cbrt, (np.array([0.5, -1.3, 2.0]),)),
    ("fmod", fnp.fmod, (np.array([2.3, -1.3, 5.1]), np.array([1.1, 0.7, -2.1]))),
    ("copysign", fnp.copysign, (np.array([2.3, -1.3, 5.1]), np.array([1.1, 0.7, -2.1]))),
    ("sinc", fnp.sinc, (np.array([0.0, 0.3, -1.2, 0.01, 0.049]),)),
    ("i0", fnp.i0, (np.array([-2.5, -0.3, 0.0, 0.7, 3.0, 14.9, 15.1, 20.0, -40.0]),)),
    ("logaddexp2", fnp.logaddexp2, (np.array([2.3, -1.3, 5.1]), np.array([1.1, 0.7, -2.1]))),
    ("float_power", fnp.float_power, (np.array([2.3, 1.3, 5.1]), np.array([1.1, 0.7, -2.1]))),
    ("ldexp", lambda x: fnp.ldexp(x, np.array([1, -2, 3])), (np.array([2.3, 1.3, 5.1]),)),
    ("frexp-mantissa", lambda x: fnp.frexp(x)[0], (np.array([2.3, 1.3, -5.1]),)),
    ("deg2rad", fnp.deg2rad, (V3,)), ("angle", fnp.angle, (np.array([2.3, -1.3]),)),
    ("heaviside", lambda x: fnp.heaviside(x, 0.5) * x, (np.array([2.3, -1.3]),)),
    ("kron", fnp.kron, (A[:2, :2], B)), ("cross", fnp.cross, (X3, Y3)), ("vecdot", fnp.vecdot, (X3, Y3)),
    ("matvec", fnp.matvec, (C, C[:, 0])), ("vecmat", fnp.vecmat, (A[:, 0], A)),
    ("select", lambda x: fnp.select([x < -0.5, x > 0.5], [x * 2, x ** 2], x), (A,)),
    ("choose", lambda x: fnp.choose(np.array([[0, 1, 2], [2, 1, 0]]), [x[0], x[1], x[2]], mode="clip"), (C.transpose(1, 0, 2),)),
    ("put_along_axis", lambda a, v: fnp.put_along_axis(a, np.array([[0, 2, 2], [1, 1, 4], [3, 0, 0], [4, 4, 1]]), v, 1,
                                                         inplace=False), (A, RNG.standard_normal((4, 3)))),
    ("compress", lambda x: fnp.compress([True, False, True], x, axis=1), (A,)),
    ("interp", lambda x, xp, fp: fnp.interp(x, xp, fp), (np.array([-2.0, 0.2, 0.7, 1.9, 3.0]), XP, FP)),
    ("convolve", fnp.convolve, (V7, V3)), ("correlate-same", lambda a, v: fnp.correlate(a, v, "same"), (V7, V3)),
    ("bincount", lambda w: fnp.bincount(np.array([0, 3, 1, 3]), w, length=5), (np.arange(4.0),)),
    ("cov", fnp.cov, (A,)), ("corrcoef", fnp.corrcoef, (A,)),
    ("trapezoid", lambda a: fnp.trapezoid(a, XS), (A,)),
    ("gradient", lambda a: fnp.gradient(a, XS, axis=1, edge_order=2), (A,)),
    ("polyval", fnp.polyval, (V3, A)),
    ("vectorize", lambda a, b: fnp.vectorize(lambda u, v: fnp.sum(u * fnp.sin(v)), signature="(n),(n)->()")(a, b), (A, A[0])),
    ("apply_along_axis", lambda a: fnp.apply_along_axis(lambda v: fnp.outer(v, v), 1, a), (A,)),
    ("piecewise", lambda v: fnp.piecewise(v, [v < -0.5, v > 1], [lambda t: t ** 2, fnp.sin, lambda t: t * 3]), (V7,)),
    ("fill_diagonal", lambda a: fnp.fill_diagonal(a, a[0, :3], inplace=False), (A,)),
    ("resize", lambda a: fnp.resize(a, (3, 9)), (A,)), ("modf", lambda a: fnp.modf(a * 3)[0], (A,)),
]


@pytest.mark.parametrize("name,f,args", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_grads(name, f, args):
    check_grads(f, args, order=2, modes=("fwd", "rev"))


# (id, function of one batched argument, batched argument): vmap against a Python loop
VMAP_CASES = [
    ("einsum-trace", lambda c: fnp.einsum("ii", c), C),
    ("einsum-sublist", lambda c: fnp.einsum(c, [0, 1], c, [1, 2]), C),
    ("pad-symmetric", lambda a: fnp.pad(a, (3, 1), mode="symmetric"), A),
    ("roll-traced-shift", lambda a: fnp.roll(a, fnp.argmax(a), 0), A),
    ("tril", lambda c: fnp.tril(c, 1), C), ("diff", fnp.diff, A), ("insert", lambda a: fnp.insert(a, 2, a[0]), A),
    ("cross", lambda x: fnp.cross(x, Y3[0]), X3), ("interp", lambda x: fnp.interp(x, XP, FP), A),
    ("convolve", lambda v: fnp.convolve(v, V3), A), ("put_along_axis", lambda a: fnp.put_along_axis(
        a, np.array([1, 1, 0]), a[:3] * 2, 0, inplace=False), A),
    ("digitize", lambda x: fnp.digitize(x, BINS), A), ("cbrt-fmod", lambda x: fnp.cbrt(x) + fnp.fmod(x, 0.3), A),
    ("i0-sinc", lambda x: fnp.i0(x) * fnp.sinc(x), A), ("cov", lambda a: fnp.cov(a[:, None] * a), A),
    ("vectorize", lambda x: fnp.vectorize(lambda u, v: fnp.sum(u * v), signature="(n),(n)->()")(x, x[0]),
     A[:, None, :].repeat(2, 1)),
    ("unravel_index", lambda i: fnp.unravel_index(i, (2, 4))[0] * 10 + fnp.unravel_index(i, (2, 4))[1], np.arange(8)),
]


@pytest.mark.parametrize("name,f,x", VMAP_CASES, ids=[c[0] for c in VMAP_CASES])
def test_vmap_matches_a_loop(name, f, x):
    got = ft.vmap(f)(x)
    want = np.stack([np.asarray(f(x[i])) for i in range(x.shape[0])])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="inplace=False"):
        fnp.put_along_axis(A, np.zeros((4, 1), np.int64), 1.0, 1)
    with pytest.raises(ft.ConcretizationError, match="mode='clip'"):
        ft.jit(lambda i: fnp.choose(i, [A[0], A[1]]))(np.array([0, 1, 0, 1, 0]))
    with pytest.raises(ft.ConcretizationError, match="length="):
        ft.jit(fnp.bincount)(np.array([0, 1]))
    with pytest.raises(NotImplementedError, match="linear_ramp"):
        fnp.pad(A, 1, mode="linear_ramp")
    with pytest.raises(ValueError, match="output labels"):
        fnp.einsum("ij->k", A)
    with pytest.raises(ft.ShapeError, match="label 'i'"):
        fnp.einsum("ii", A)
    with pytest.raises(TypeError, match="exponent must be an integer"):
        fnp.ldexp(1.0, 0.5)
    with pytest.raises(NotImplementedError, match="mode='raise'"):
        ft.jit(lambda i: fnp.ravel_multi_index((i, i), (3, 3)))(np.array([0, 1]))


def test_index_conversions_traced():
    idx = np.array([3, 7, 0])
    got = ft.jit(lambda i: fnp.unravel_index(i, (2, 4)))(idx)
    for g, w in zip(got, np.unravel_index(idx, (2, 4))):
        np.testing.assert_array_equal(np.asarray(g), w)
    got = ft.jit(lambda i, j: fnp.ravel_multi_index((i, j), (2, 4), mode="clip"))(np.array([1, 0, 5]), np.array([3, 2, -1]))
    np.testing.assert_array_equal(np.asarray(got), np.ravel_multi_index((np.array([1, 0, 5]), np.array([3, 2, -1])),
                                                                        (2, 4), mode="clip"))
    np.testing.assert_array_equal(ft.jit(lambda x, s: fnp.roll(x, s))(np.arange(5.0), 2), np.roll(np.arange(5.0), 2))


def test_concrete_only_functions_compute_on_concrete_values():
    counts, edges = fnp.histogram(V7, 3)
    np.testing.assert_array_equal(counts, np.histogram(V7, 3)[0])
    np.testing.assert_allclose(fnp.polyfit(np.arange(5.0), np.arange(5.0) ** 2, 2), [1, 0, 0], atol=1e-12)
    with pytest.raises(ft.ConcretizationError):
        ft.jit(lambda v: fnp.histogram(v, 3))(V7)


# (name, f(module, x), x): values and gradients of sum(f) compared with JAX; the JAX results are
# stored in tests/data/numpy_surface_jax.npz (made by _store_jax_values) so CI without JAX checks them
JAX_CHECKS = [
    ("einsum", lambda m, c: m.einsum("bii,ik->bk", c, B), C), ("pad", lambda m, a: m.pad(a, 2, mode="symmetric"), A),
    ("kron", lambda m, a: m.kron(a, B), A), ("interp", lambda m, a: m.interp(a, XP, FP), A),
    ("gradient", lambda m, a: m.gradient(a, XS, axis=1), A), ("i0", lambda m, x: m.i0(x), np.linspace(-30, 30, 61)),
    ("sinc", lambda m, a: m.sinc(a), A), ("cbrt", lambda m, a: m.cbrt(a), A),
    ("geomspace", lambda m, v: m.geomspace(v[0] + 2, 9.0, 5), V3), ("tril", lambda m, a: m.tril(a, 1), A),
    ("rot90", lambda m, a: m.rot90(a, 3), A), ("cross", lambda m, x: m.cross(x, Y3), X3),
    ("convolve", lambda m, v: m.convolve(v, V3, mode="same"), V7), ("cov", lambda m, a: m.cov(a), A),
    ("logaddexp2", lambda m, a: m.logaddexp2(a, 0.5), A), ("vander", lambda m, v: m.vander(v, 4), V3),
    ("trapezoid", lambda m, a: m.trapezoid(a, XS), A), ("fmod", lambda m, a: m.fmod(a, 0.3), A),
]
_JAX_DATA = __file__.replace("test_numpy_surface.py", "data/numpy_surface_jax.npz")


def _store_jax_values():
    """Write the JAX results (run by hand where JAX is installed, from tests/ with PYTHONPATH=..:
    ``python -c "import test_numpy_surface as t; t._store_jax_values()"``)."""
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    out = {}
    for name, f, x in JAX_CHECKS:
        out[name] = np.asarray(f(jnp, x))
        out[name + ":grad"] = np.asarray(jax.grad(lambda x, f=f: jnp.sum(f(jnp, x)))(x))
    np.savez_compressed(_JAX_DATA, **out)


@pytest.mark.parametrize("name,f,x", JAX_CHECKS, ids=[c[0] for c in JAX_CHECKS])
def test_matches_stored_jax_values(name, f, x):
    stored = np.load(_JAX_DATA)
    np.testing.assert_allclose(np.asarray(f(fnp, x)), stored[name], rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(ft.grad(lambda x: fnp.sum(f(fnp, x)))(x), stored[name + ":grad"], rtol=1e-10, atol=1e-12)


def test_matches_jax_where_importable():
    jnp = pytest.importorskip("jax.numpy", reason="optional comparison with JAX")
    import jax
    jax.config.update("jax_enable_x64", True)
    for name, f, x in JAX_CHECKS:
        np.testing.assert_allclose(np.asarray(f(fnp, x)), np.asarray(f(jnp, x)), rtol=1e-11, atol=1e-12, err_msg=name)
