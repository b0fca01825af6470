"""functrace.numpy against numpy itself.

Every case runs twice:

* eagerly (``fnp.f(*args)`` outside any transformation must equal ``np.f(*args)`` in
  values, shapes AND dtypes), and
* staged (``closed = ft.make_jaxpr(f)(*args); closed(*args)`` must give the same
  values, shapes and dtypes as numpy).

The reference is always the installed numpy (NumPy 2 promotion rules: Python scalars are
weak, numpy scalars are strong).
"""
from __future__ import annotations

import operator

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace.core import Tracer

# --------------------------------------------------------------------------- helpers

RNG = np.random.default_rng(20240611)


def rn(*shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


def pos(*shape, dtype=np.float64):
    return RNG.uniform(0.5, 3.0, shape).astype(dtype)


def unit(*shape, dtype=np.float64):
    return RNG.uniform(-0.9, 0.9, shape).astype(dtype)


def ints(*shape, lo=-5, hi=6, dtype=np.int64):
    return RNG.integers(lo, hi, shape).astype(dtype)


def nz_ints(*shape, dtype=np.int64):
    v = RNG.integers(1, 6, shape) * RNG.choice([-1, 1], shape)
    return v.astype(dtype)


def bools(*shape):
    return RNG.random(shape) > 0.5


_TOL = {np.dtype(np.float64): (1e-9, 1e-12), np.dtype(np.float32): (3e-5, 3e-6),
        np.dtype(np.float16): (3e-3, 3e-3), np.dtype(np.complex128): (1e-9, 1e-12),
        np.dtype(np.complex64): (3e-5, 3e-6)}


def _leaves(x):
    if isinstance(x, (list, tuple)):
        out = []
        for v in x:
            out.extend(_leaves(v))
        return out
    return [x]


def assert_same(got, want, what="", rtol=None, atol=None):
    """Same structure, shapes, dtypes and values (floats to a dtype-dependent tolerance)."""
    gl, wl = _leaves(got), _leaves(want)
    assert len(gl) == len(wl), f"{what}: {len(gl)} outputs, numpy gives {len(wl)}"
    for k, (g, w) in enumerate(zip(gl, wl)):
        assert not isinstance(g, Tracer), f"{what}: output {k} is a tracer outside a transformation"
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, f"{what}[{k}]: shape {g.shape} != numpy {w.shape}"
        assert g.dtype == w.dtype, f"{what}[{k}]: dtype {g.dtype} != numpy {w.dtype}"
        if w.dtype.kind in "fc":
            r, a = _TOL.get(w.dtype, (1e-9, 1e-12))
            np.testing.assert_allclose(g, w, rtol=rtol or r, atol=atol or a, equal_nan=True,
                                       err_msg=what)
        else:
            np.testing.assert_array_equal(g, w, err_msg=what)


def staged(f, *args):
    """Trace ``f`` to a jaxpr on ``args`` and run the jaxpr on the same args."""
    closed = ft.make_jaxpr(f)(*args)
    return closed(*args)


class Case:
    def __init__(self, name, f, ref, *args, trace=True, rtol=None, atol=None):
        self.name, self.f, self.ref, self.args = name, f, ref, args
        self.trace, self.rtol, self.atol = trace, rtol, atol


def _ids(cases):
    seen: dict = {}
    out = []
    for c in cases:
        n = seen.get(c.name, 0)
        seen[c.name] = n + 1
        out.append(f"{c.name}#{n}" if n else c.name)
    return out


def run_eager(c):
    with np.errstate(all="ignore"):
        want = c.ref(*c.args)
        got = c.f(*c.args)
    assert_same(got, want, f"eager {c.name}", c.rtol, c.atol)


def run_traced(c):
    with np.errstate(all="ignore"):
        want = c.ref(*c.args)
        got = staged(c.f, *c.args)
    assert_same(got, _leaves(want), f"traced {c.name}", c.rtol, c.atol)


# --------------------------------------------------------------------------- elementwise unary

# name -> input generator (domain-respecting)
UNARY = {
    "sin": rn, "cos": rn, "tan": unit, "tanh": rn, "exp": rn, "log": pos, "log1p": pos,
    "expm1": rn, "sqrt": pos, "floor": rn, "ceil": rn, "rint": rn, "round": rn, "around": rn,
    "negative": rn, "absolute": rn, "abs": rn, "sign": rn, "isfinite": rn, "positive": rn,
    "square": rn, "reciprocal": pos, "log2": pos, "log10": pos, "exp2": rn, "sinh": rn,
    "cosh": rn, "arctan": rn, "arcsin": unit, "arccos": unit, "arcsinh": rn,
    "arccosh": lambda *s, dtype=np.float64: RNG.uniform(1.5, 4.0, s).astype(dtype),
    "arctanh": unit, "isnan": rn, "isinf": rn, "logical_not": rn,
}
# functions that numpy also defines on integers with the same meaning
UNARY_INT_OK = ["sin", "cos", "tanh", "exp", "expm1", "floor", "ceil", "rint", "round", "negative",
                "absolute", "abs", "sign", "isfinite", "positive", "square", "sinh", "cosh",
                "arctan", "arcsinh", "exp2", "isnan", "isinf", "logical_not"]


def _unary_cases():
    cases = []
    for name, gen in UNARY.items():
        f, ref = getattr(fnp, name), getattr(np, name)
        cases.append(Case(f"{name}-f64[3,4]", f, ref, gen(3, 4)))
        cases.append(Case(f"{name}-f32[2,1,3]", f, ref, gen(2, 1, 3, dtype=np.float32)))
        cases.append(Case(f"{name}-f64[]", f, ref, gen()))
        cases.append(Case(f"{name}-pyfloat", f, ref, float(gen())))
        cases.append(Case(f"{name}-size0", f, ref, gen(0, 3)))
    for name in UNARY_INT_OK:
        f, ref = getattr(fnp, name), getattr(np, name)
        cases.append(Case(f"{name}-i64", f, ref, ints(3, 4)))
        cases.append(Case(f"{name}-i32", f, ref, ints(4, dtype=np.int32)))
    cases.append(Case("invert-i64", fnp.invert, np.invert, ints(3, 4)))
    cases.append(Case("invert-bool", fnp.invert, np.invert, bools(3, 4)))
    cases.append(Case("invert-u8", fnp.invert, np.invert, ints(5, lo=0, hi=200, dtype=np.uint8)))
    cases.append(Case("logical_not-bool", fnp.logical_not, np.logical_not, bools(5)))
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.5, -2.5, 0.5])
    for name in ["isnan", "isinf", "isfinite", "sign", "abs", "floor", "ceil", "rint", "negative"]:
        cases.append(Case(f"{name}-special", getattr(fnp, name), getattr(np, name), special))
    cases.append(Case("round-decimals2", lambda x: fnp.round(x, 2), lambda x: np.round(x, 2), rn(4, 3) * 10))
    cases.append(Case("round-decimals-1", lambda x: fnp.round(x, -1), lambda x: np.round(x, -1), rn(4, 3) * 100))
    cases.append(Case("around-decimals1-f32", lambda x: fnp.around(x, 1), lambda x: np.around(x, 1),
                      rn(5, dtype=np.float32) * 10))
    cases.append(Case("sigmoid", fnp.sigmoid, lambda x: 1.0 / (1.0 + np.exp(-x)), rn(3, 4) * 5))
    cases.append(Case("sigmoid-f32", fnp.sigmoid,
                      lambda x: (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(np.float32),
                      rn(3, 4, dtype=np.float32)))
    return cases


UNARY_CASES = _unary_cases()


@pytest.mark.parametrize("case", UNARY_CASES, ids=_ids(UNARY_CASES))
def test_unary_eager(case):
    run_eager(case)


@pytest.mark.parametrize("case", UNARY_CASES, ids=_ids(UNARY_CASES))
def test_unary_traced(case):
    run_traced(case)


# --------------------------------------------------------------------------- elementwise binary

BINARY_FLOAT = ["add", "subtract", "multiply", "divide", "true_divide", "maximum", "minimum", "fmax",
                "fmin", "arctan2", "hypot", "logaddexp", "equal", "not_equal", "less", "less_equal",
                "greater", "greater_equal", "logical_and", "logical_or", "logical_xor",
                "floor_divide", "remainder", "mod", "power"]
BINARY_INT = ["add", "subtract", "multiply", "divide", "floor_divide", "remainder", "mod", "maximum",
              "minimum", "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
              "bitwise_and", "bitwise_or", "bitwise_xor", "logical_and", "logical_or", "logical_xor",
              "arctan2", "hypot"]


def _binary_cases():
    cases = []
    for name in BINARY_FLOAT:
        f, ref = getattr(fnp, name), getattr(np, name)
        base = pos if name == "power" else rn
        other = (lambda *s, dtype=np.float64: RNG.uniform(-2, 2, s).astype(dtype)) if name == "power" else rn
        cases += [
            Case(f"{name}-same", f, ref, base(3, 4), other(3, 4)),
            Case(f"{name}-bcast(3,1)(1,4)", f, ref, base(3, 1), other(1, 4)),
            Case(f"{name}-bcast(4,)(2,3,4)", f, ref, base(4), other(2, 3, 4)),
            Case(f"{name}-0d-arr", f, ref, base(), other(2, 3)),
            Case(f"{name}-f32-pyfloat", f, ref, base(3, dtype=np.float32), 1.5),
            Case(f"{name}-pyfloat-f32", f, ref, 1.5, other(3, dtype=np.float32)),
            Case(f"{name}-f32-f64", f, ref, base(2, 3, dtype=np.float32), other(2, 3)),
            Case(f"{name}-f32-f32", f, ref, base(2, 3, dtype=np.float32), other(1, 3, dtype=np.float32)),
            Case(f"{name}-size0", f, ref, base(0, 3), other(1, 3)),
            Case(f"{name}-pyscalars", f, ref, 1.25, 0.75),
        ]
    for name in BINARY_INT:
        f, ref = getattr(fnp, name), getattr(np, name)
        cases += [
            Case(f"{name}-int", f, ref, ints(3, 4), nz_ints(3, 4)),
            Case(f"{name}-int-bcast", f, ref, ints(3, 1), nz_ints(4)),
            Case(f"{name}-i32-pyint", f, ref, ints(3, dtype=np.int32), 3),
            Case(f"{name}-pyint-i64", f, ref, 7, nz_ints(2, 2)),
            Case(f"{name}-i32-i64", f, ref, ints(3, dtype=np.int32), nz_ints(3)),
        ]
        if not name.startswith("bitwise"):  # numpy: TypeError for bitwise ops on floats
            cases.append(Case(f"{name}-int-float", f, ref, ints(3, 4), rn(3, 4) + 5))
    f, ref = fnp.power, np.power
    cases += [
        Case("power-int-int", f, ref, ints(3, 4), RNG.integers(0, 4, (3, 4))),
        Case("power-float-pyint2", f, ref, rn(3, 4), 2),
        Case("power-float-pyint3", f, ref, rn(3, 4), 3),
        Case("power-float-pyint-neg", f, ref, pos(3, 4), -2),
        Case("power-int-pyint", f, ref, ints(3, 4), 3),
        Case("power-pyint-int", f, ref, 2, RNG.integers(0, 5, (3,))),
        Case("power-f32-pyint", f, ref, rn(3, dtype=np.float32), 2),
        Case("power-f32-halfpy", f, ref, pos(3, dtype=np.float32), 0.5),
        Case("power-int-pyfloat", f, ref, RNG.integers(1, 5, (3,)), 0.5),
    ]
    for name in ["bitwise_and", "bitwise_or", "bitwise_xor", "logical_and", "logical_or", "logical_xor",
                 "equal", "not_equal", "add", "multiply"]:
        cases.append(Case(f"{name}-bool", getattr(fnp, name), getattr(np, name), bools(3, 4), bools(4)))
    cases.append(Case("add-bool-pyint", fnp.add, np.add, bools(3), 1))
    cases.append(Case("add-u8-pyint", fnp.add, np.add, ints(3, lo=0, hi=100, dtype=np.uint8), 3))
    cases.append(Case("multiply-i8-f32", fnp.multiply, np.multiply, ints(3, dtype=np.int8), rn(3, dtype=np.float32)))
    cases.append(Case("logaddexp-inf", fnp.logaddexp, np.logaddexp,
                      np.array([-np.inf, -np.inf, 0.0, 3.0]), np.array([-np.inf, 1.0, -np.inf, 700.0])))
    cases.append(Case("maximum-nan", fnp.maximum, np.maximum, np.array([np.nan, 1.0, 2.0]),
                      np.array([0.0, np.nan, 1.0])))
    return cases


BINARY_CASES = _binary_cases()


@pytest.mark.parametrize("case", BINARY_CASES, ids=_ids(BINARY_CASES))
def test_binary_eager(case):
    run_eager(case)


@pytest.mark.parametrize("case", BINARY_CASES, ids=_ids(BINARY_CASES))
def test_binary_traced(case):
    run_traced(case)


# --------------------------------------------------------------------------- where / clip / misc


def _select_cases():
    c3 = bools(3, 4)
    return [
        Case("where-3arg", fnp.where, np.where, c3, rn(3, 4), rn(3, 4)),
        Case("where-bcast", fnp.where, np.where, bools(3, 1), rn(1, 4), rn(4)),
        Case("where-scalar-branches", fnp.where, np.where, c3, 1.0, 0.0),
        Case("where-f32-pyfloat", fnp.where, np.where, c3, rn(3, 4, dtype=np.float32), 0.0),
        Case("where-int-float", fnp.where, np.where, c3, ints(3, 4), rn(4)),
        Case("where-intcond", lambda c, x, y: fnp.where(c, x, y), np.where, ints(3, 4, lo=0, hi=2), rn(3, 4), rn(3, 4)),
        Case("where-1arg", fnp.where, np.where, c3, trace=False),
        Case("nonzero", fnp.nonzero, np.nonzero, ints(3, 4, lo=0, hi=2), trace=False),
        Case("argwhere", fnp.argwhere, np.argwhere, ints(3, 4, lo=0, hi=2), trace=False),
        Case("flatnonzero", fnp.flatnonzero, np.flatnonzero, ints(3, 4, lo=0, hi=2), trace=False),
        Case("unique", fnp.unique, np.unique, ints(10, lo=0, hi=4), trace=False),
        Case("clip-both", fnp.clip, np.clip, rn(3, 4), -0.5, 0.5),
        Case("clip-arrays", fnp.clip, np.clip, rn(3, 4), rn(4) - 1, rn(3, 1) + 1),
        Case("clip-lo-only", lambda x: fnp.clip(x, 0.0, None), lambda x: np.clip(x, 0.0, None), rn(5)),
        Case("clip-hi-only", lambda x: fnp.clip(x, None, 0.0), lambda x: np.clip(x, None, 0.0), rn(5)),
        Case("clip-f32", fnp.clip, np.clip, rn(5, dtype=np.float32), -0.5, 0.5),
        Case("clip-int", fnp.clip, np.clip, ints(6), -2, 2),
        Case("clip-int-float-bounds", fnp.clip, np.clip, ints(6), -1.5, 2.5),
    ]


SELECT_CASES = _select_cases()


@pytest.mark.parametrize("case", SELECT_CASES, ids=_ids(SELECT_CASES))
def test_select_eager(case):
    run_eager(case)


@pytest.mark.parametrize("case", [c for c in SELECT_CASES if c.trace],
                         ids=_ids([c for c in SELECT_CASES if c.trace]))
def test_select_traced(case):
    run_traced(case)


# --------------------------------------------------------------------------- reductions


def _reduction_cases():
    cases = []
    x = rn(3, 4, 5)
    for name in ["sum", "prod", "max", "min", "amax", "amin", "mean", "var", "std", "all", "any"]:
        f, ref = getattr(fnp, name), getattr(np, name)
        for axis in [None, 0, 1, -1, (0, 2), (-1, 0), (0, 1, 2)]:
            for kd in [False, True]:
                cases.append(Case(f"{name}-axis{axis}-kd{kd}", (lambda f, a, k: lambda x: f(x, axis=a, keepdims=k))(f, axis, kd),
                                  (lambda r, a, k: lambda x: r(x, axis=a, keepdims=k))(ref, axis, kd),
                                  x if name not in ("all", "any") else x > 0.3))
        cases.append(Case(f"{name}-f32", f, ref, rn(4, 3, dtype=np.float32)))
        cases.append(Case(f"{name}-f32-axis0", lambda x, f=f: f(x, axis=0), lambda x, r=ref: r(x, axis=0),
                          rn(4, 3, dtype=np.float32)))
        cases.append(Case(f"{name}-0d", f, ref, rn()))
        cases.append(Case(f"{name}-size1-axes", lambda x, f=f: f(x, axis=1), lambda x, r=ref: r(x, axis=1), rn(3, 1, 1)))
        if name in ("sum", "prod", "max", "min", "all", "any"):
            cases.append(Case(f"{name}-i64", f, ref, ints(3, 4, lo=-3, hi=4)))
            cases.append(Case(f"{name}-i32-axis1", lambda x, f=f: f(x, axis=1), lambda x, r=ref: r(x, axis=1),
                              ints(3, 4, lo=-3, hi=4, dtype=np.int32)))
            cases.append(Case(f"{name}-bool-axis0", lambda x, f=f: f(x, axis=0), lambda x, r=ref: r(x, axis=0),
                              bools(3, 4)))
        if name in ("mean", "var", "std"):
            cases.append(Case(f"{name}-int", f, ref, ints(3, 4)))
    for ddof in [0, 1, 2]:
        cases.append(Case(f"var-ddof{ddof}", lambda x, d=ddof: fnp.var(x, axis=1, ddof=d),
                          lambda x, d=ddof: np.var(x, axis=1, ddof=d), rn(3, 5)))
        cases.append(Case(f"std-ddof{ddof}", lambda x, d=ddof: fnp.std(x, ddof=d),
                          lambda x, d=ddof: np.std(x, ddof=d), rn(3, 5)))
    cases.append(Case("sum-dtype-f32", lambda x: fnp.sum(x, dtype=np.float32), lambda x: np.sum(x, dtype=np.float32), rn(3, 4)))
    cases.append(Case("sum-u8", fnp.sum, np.sum, ints(3, 4, lo=0, hi=200, dtype=np.uint8)))
    cases.append(Case("mean-dtype-f32", lambda x: fnp.mean(x, axis=0, dtype=np.float32),
                      lambda x: np.mean(x, axis=0, dtype=np.float32), rn(3, 4)))
    for name in ["argmax", "argmin"]:
        f, ref = getattr(fnp, name), getattr(np, name)
        xi = RNG.permutation(60).reshape(3, 4, 5).astype(np.float64)  # no ties
        for axis in [None, 0, 1, 2, -1]:
            for kd in [False, True]:
                cases.append(Case(f"{name}-axis{axis}-kd{kd}", (lambda f, a, k: lambda x: f(x, axis=a, keepdims=k))(f, axis, kd),
                                  (lambda r, a, k: lambda x: r(x, axis=a, keepdims=k))(ref, axis, kd), xi))
        cases.append(Case(f"{name}-int", f, ref, RNG.permutation(12).reshape(3, 4)))
        cases.append(Case(f"{name}-ties", lambda x, f=f: f(x, axis=1), lambda x, r=ref: r(x, axis=1),
                          np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]])))
    for axis in [None, 0, 1, -1]:
        cases.append(Case(f"cumsum-axis{axis}", lambda x, a=axis: fnp.cumsum(x, axis=a),
                          lambda x, a=axis: np.cumsum(x, axis=a), rn(3, 4)))
    cases.append(Case("cumsum-f32", lambda x: fnp.cumsum(x, 0), lambda x: np.cumsum(x, 0), rn(4, 2, dtype=np.float32)))
    cases.append(Case("cumsum-i64", fnp.cumsum, np.cumsum, ints(3, 4)))
    cases.append(Case("cumsum-i32", lambda x: fnp.cumsum(x, 1), lambda x: np.cumsum(x, 1), ints(3, 4, dtype=np.int32)))
    cases.append(Case("cumsum-bool", lambda x: fnp.cumsum(x, 0), lambda x: np.cumsum(x, 0), bools(5, 2)))
    cases.append(Case("prod-i32", fnp.prod, np.prod, ints(3, 4, lo=1, hi=3, dtype=np.int32)))
    cases.append(Case("prod-bool", lambda x: fnp.prod(x, 0), lambda x: np.prod(x, 0), bools(3, 4)))
    cases.append(Case("average-noweights", lambda x: fnp.average(x, 1), lambda x: np.average(x, 1), rn(3, 4)))
    cases.append(Case("average-weights-fullshape", lambda x, w: fnp.average(x, 0, weights=w),
                      lambda x, w: np.average(x, 0, weights=w), rn(3, 4), pos(3, 4)))
    cases.append(Case("average-weights-1d-along-axis", lambda x, w: fnp.average(x, 0, weights=w),
                      lambda x, w: np.average(x, 0, weights=w), rn(3, 4), pos(3)))
    cases.append(Case("average-weights-none-axis", lambda x, w: fnp.average(x, weights=w),
                      lambda x, w: np.average(x, weights=w), rn(3, 4), pos(3, 4)))
    return cases


REDUCTION_CASES = _reduction_cases()


@pytest.mark.parametrize("case", REDUCTION_CASES, ids=_ids(REDUCTION_CASES))
def test_reduction_eager(case):
    run_eager(case)


@pytest.mark.parametrize("case", REDUCTION_CASES, ids=_ids(REDUCTION_CASES))
def test_reduction_traced(case):
    run_traced(case)


def test_reduction_errors():
    with pytest.raises(ValueError):
        fnp.max(np.zeros((0, 3)), axis=0)
    with pytest.raises(ValueError):
        fnp.sum(np.zeros((2, 3)), axis=2)
    with pytest.raises(ValueError):
        ft.make_jaxpr(lambda x: fnp.mean(x, axis=-3))(np.zeros((2, 3)))


# --------------------------------------------------------------------------- creation


def _creation_cases():
    x = rn(2, 3)
    xi = ints(2, 3, dtype=np.int32)
    return [
        Case("asarray-list", lambda: fnp.asarray([[1, 2], [3, 4]]), lambda: np.asarray([[1, 2], [3, 4]]), trace=False),
        Case("asarray-dtype", lambda x: fnp.asarray(x, np.float32), lambda x: np.asarray(x, np.float32), x),
        Case("asarray-int-to-float", lambda x: fnp.asarray(x, float), lambda x: np.asarray(x, float), xi),
        Case("asarray-pyfloat", lambda: fnp.asarray(2.5), lambda: np.asarray(2.5), trace=False),
        Case("array-copy", fnp.array, np.array, x),
        Case("array-dtype", lambda x: fnp.array(x, dtype=np.int32), lambda x: np.array(x, dtype=np.int32), x * 3),
        Case("array-of-traced-list", lambda a, b: fnp.array([a, b]), lambda a, b: np.array([a, b]), rn(3), rn(3)),
        Case("array-nested-list", lambda a, b: fnp.array([[a, b], [b, a]]), lambda a, b: np.array([[a, b], [b, a]]),
             rn(), rn()),
        Case("zeros", lambda: fnp.zeros((2, 3)), lambda: np.zeros((2, 3)), trace=False),
        Case("zeros-int-shape", lambda: fnp.zeros(4, dtype=np.int32), lambda: np.zeros(4, dtype=np.int32), trace=False),
        Case("ones", lambda: fnp.ones((2, 1, 3), np.float32), lambda: np.ones((2, 1, 3), np.float32), trace=False),
        Case("full", lambda: fnp.full((2, 3), 7), lambda: np.full((2, 3), 7), trace=False),
        Case("full-float", lambda: fnp.full(3, 1.5, np.float32), lambda: np.full(3, 1.5, np.float32), trace=False),
        Case("full-traced-fill", lambda v: fnp.full((2, 3), v), lambda v: np.full((2, 3), v), rn()),
        Case("full-traced-fill-dtype", lambda v: fnp.full((2,), v, np.float32), lambda v: np.full((2,), v, np.float32), rn()),
        Case("zeros_like", fnp.zeros_like, np.zeros_like, x),
        Case("zeros_like-int", fnp.zeros_like, np.zeros_like, xi),
        Case("ones_like", fnp.ones_like, np.ones_like, x),
        Case("ones_like-dtype", lambda x: fnp.ones_like(x, np.int32), lambda x: np.ones_like(x, np.int32), x),
        Case("ones_like-pyfloat", fnp.ones_like, np.ones_like, 2.0),
        Case("full_like", lambda x: fnp.full_like(x, 3.5), lambda x: np.full_like(x, 3.5), x),
        Case("full_like-int", lambda x: fnp.full_like(x, 3), lambda x: np.full_like(x, 3), xi),
        Case("arange", lambda: fnp.arange(2, 11, 3), lambda: np.arange(2, 11, 3), trace=False),
        Case("arange-float", lambda: fnp.arange(0.0, 1.0, 0.25), lambda: np.arange(0.0, 1.0, 0.25), trace=False),
        Case("linspace", lambda: fnp.linspace(0, 1, 7), lambda: np.linspace(0, 1, 7), trace=False),
        Case("eye", lambda: fnp.eye(3, 4, k=1), lambda: np.eye(3, 4, k=1), trace=False),
        Case("identity", lambda: fnp.identity(3), lambda: np.identity(3), trace=False),
        Case("tri", lambda: fnp.tri(3, 4, -1), lambda: np.tri(3, 4, -1), trace=False),
    ]


CREATION_CASES = _creation_cases()


@pytest.mark.parametrize("case", CREATION_CASES, ids=_ids(CREATION_CASES))
def test_creation_eager(case):
    run_eager(case)


@pytest.mark.parametrize("case", [c for c in CREATION_CASES if c.trace],
                         ids=_ids([c for c in CREATION_CASES if c.trace]))
def test_creation_traced(case):
    run_traced(case)


@pytest.mark.parametrize("fname", ["empty", "empty_like"])
def test_empty(fname):
    x = rn(2, 3)
    got = fnp.empty((2, 3)) if fname == "empty" else fnp.empty_like(x)
    want = np.empty((2, 3)) if fname == "empty" else np.empty_like(x)
    assert np.shape(got) == want.shape and np.asarray(got).dtype == want.dtype
    got = ft.make_jaxpr(lambda x: fnp.empty_like(x) + x)(x)(x)[0]
    assert got.shape == x.shape and got.dtype == x.dtype


# --------------------------------------------------------------------------- shapes


def _shape_cases():
    x = rn(2, 3, 4)
    return [
        Case("reshape", lambda x: fnp.reshape(x, (4, 6)), lambda x: np.reshape(x, (4, 6)), x),
        Case("reshape-minus1", lambda x: fnp.reshape(x, (-1, 2)), lambda x: np.reshape(x, (-1, 2)), x),
        Case("reshape-int", lambda x: fnp.reshape(x, 24), lambda x: np.reshape(x, 24), x),
        Case("reshape-0d", lambda x: fnp.reshape(x, (1, 1)), lambda x: np.reshape(x, (1, 1)), rn()),
        Case("reshape-to-0d", lambda x: fnp.reshape(x, ()), lambda x: np.reshape(x, ()), rn(1, 1)),
        Case("ravel", fnp.ravel, np.ravel, x),
        Case("transpose", fnp.transpose, np.transpose, x),
        Case("transpose-axes", lambda x: fnp.transpose(x, (1, 2, 0)), lambda x: np.transpose(x, (1, 2, 0)), x),
        Case("transpose-negaxes", lambda x: fnp.transpose(x, (-1, 0, 1)), lambda x: np.transpose(x, (-1, 0, 1)), x),
        Case("transpose-1d", fnp.transpose, np.transpose, rn(3)),
        Case("swapaxes", lambda x: fnp.swapaxes(x, 0, -1), lambda x: np.swapaxes(x, 0, -1), x),
        Case("moveaxis", lambda x: fnp.moveaxis(x, 0, -1), lambda x: np.moveaxis(x, 0, -1), x),
        Case("moveaxis-multi", lambda x: fnp.moveaxis(x, (0, 1), (2, 0)), lambda x: np.moveaxis(x, (0, 1), (2, 0)), x),
        Case("moveaxis-neg", lambda x: fnp.moveaxis(x, -1, 1), lambda x: np.moveaxis(x, -1, 1), x),
        Case("expand_dims", lambda x: fnp.expand_dims(x, 1), lambda x: np.expand_dims(x, 1), x),
        Case("expand_dims-neg", lambda x: fnp.expand_dims(x, -1), lambda x: np.expand_dims(x, -1), x),
        Case("expand_dims-multi", lambda x: fnp.expand_dims(x, (0, 3, -1)), lambda x: np.expand_dims(x, (0, 3, -1)), x),
        Case("squeeze-all", fnp.squeeze, np.squeeze, rn(1, 3, 1, 2)),
        Case("squeeze-axis", lambda x: fnp.squeeze(x, 2), lambda x: np.squeeze(x, 2), rn(1, 3, 1, 2)),
        Case("squeeze-axes", lambda x: fnp.squeeze(x, (0, -2)), lambda x: np.squeeze(x, (0, -2)), rn(1, 3, 1, 2)),
        Case("squeeze-nothing", fnp.squeeze, np.squeeze, rn(2, 3)),
        Case("broadcast_to", lambda x: fnp.broadcast_to(x, (2, 3, 4)), lambda x: np.broadcast_to(x, (2, 3, 4)), rn(3, 1)),
        Case("broadcast_to-int", lambda x: fnp.broadcast_to(x, 5), lambda x: np.broadcast_to(x, 5), rn()),
        Case("broadcast_arrays", lambda a, b: list(fnp.broadcast_arrays(a, b)), lambda a, b: list(np.broadcast_arrays(a, b)),
             rn(3, 1), rn(4)),
        Case("atleast_1d-0d", fnp.atleast_1d, np.atleast_1d, rn()),
        Case("atleast_1d-2d", fnp.atleast_1d, np.atleast_1d, rn(2, 2)),
        Case("atleast_2d-0d", fnp.atleast_2d, np.atleast_2d, rn()),
        Case("atleast_2d-1d", fnp.atleast_2d, np.atleast_2d, rn(3)),
        Case("atleast_2d-3d", fnp.atleast_2d, np.atleast_2d, x),
        Case("concatenate", lambda a, b: fnp.concatenate([a, b]), lambda a, b: np.concatenate([a, b]), rn(2, 3), rn(4, 3)),
        Case("concatenate-axis1", lambda a, b, c: fnp.concatenate((a, b, c), axis=1),
             lambda a, b, c: np.concatenate((a, b, c), axis=1), rn(2, 1), rn(2, 3), rn(2, 2)),
        Case("concatenate-neg", lambda a, b: fnp.concatenate([a, b], -1), lambda a, b: np.concatenate([a, b], -1),
             rn(2, 3), rn(2, 1)),
        Case("concatenate-None", lambda a, b: fnp.concatenate([a, b], axis=None),
             lambda a, b: np.concatenate([a, b], axis=None), rn(2, 3), rn(4)),
        Case("concatenate-promote", lambda a, b: fnp.concatenate([a, b]), lambda a, b: np.concatenate([a, b]),
             ints(2, dtype=np.int32), rn(3, dtype=np.float32)),
        Case("concatenate-single", lambda a: fnp.concatenate([a]), lambda a: np.concatenate([a]), rn(2, 3)),
        Case("stack", lambda a, b: fnp.stack([a, b]), lambda a, b: np.stack([a, b]), rn(2, 3), rn(2, 3)),
        Case("stack-axis1", lambda a, b: fnp.stack([a, b], 1), lambda a, b: np.stack([a, b], 1), rn(2, 3), rn(2, 3)),
        Case("stack-axis-neg", lambda a, b, c: fnp.stack([a, b, c], -1), lambda a, b, c: np.stack([a, b, c], -1),
             rn(2, 3), rn(2, 3), rn(2, 3)),
        Case("stack-0d", lambda a, b: fnp.stack([a, b]), lambda a, b: np.stack([a, b]), rn(), rn()),
        Case("stack-promote", lambda a, b: fnp.stack([a, b]), lambda a, b: np.stack([a, b]), ints(3), rn(3)),
        Case("hstack", lambda a, b: fnp.hstack([a, b]), lambda a, b: np.hstack([a, b]), rn(2, 3), rn(2, 1)),
        Case("hstack-1d", lambda a, b: fnp.hstack([a, b]), lambda a, b: np.hstack([a, b]), rn(2), rn(3)),
        Case("hstack-0d", lambda a, b: fnp.hstack([a, b]), lambda a, b: np.hstack([a, b]), rn(), rn()),
        Case("vstack", lambda a, b: fnp.vstack([a, b]), lambda a, b: np.vstack([a, b]), rn(3), rn(2, 3)),
        Case("split-sections", lambda x: fnp.split(x, 2, axis=2), lambda x: np.split(x, 2, axis=2), x),
        Case("split-indices", lambda x: fnp.split(x, [1, 3], axis=1), lambda x: np.split(x, [1, 3], axis=1), x),
        Case("split-indices-beyond", lambda x: fnp.split(x, [2, 10]), lambda x: np.split(x, [2, 10]), rn(5, 2)),
        Case("split-indices-unsorted", lambda x: fnp.split(x, [3, 1]), lambda x: np.split(x, [3, 1]), rn(5)),
        Case("split-negative-index", lambda x: fnp.split(x, [-2], axis=-1), lambda x: np.split(x, [-2], axis=-1), x),
        Case("split-neg-axis", lambda x: fnp.split(x, 3, axis=-2), lambda x: np.split(x, 3, axis=-2), x),
        Case("array_split", lambda x: fnp.array_split(x, 3), lambda x: np.array_split(x, 3), rn(7, 2)),
        Case("array_split-axis", lambda x: fnp.array_split(x, 3, axis=2), lambda x: np.array_split(x, 3, axis=2), x),
        Case("array_split-more-than-n", lambda x: fnp.array_split(x, 5), lambda x: np.array_split(x, 5), rn(3)),
        Case("array_split-neg-axis", lambda x: fnp.array_split(x, 2, axis=-1), lambda x: np.array_split(x, 2, axis=-1), rn(2, 5)),
        Case("tile-int", lambda x: fnp.tile(x, 3), lambda x: np.tile(x, 3), rn(2, 3)),
        Case("tile-tuple", lambda x: fnp.tile(x, (2, 1)), lambda x: np.tile(x, (2, 1)), rn(2, 3)),
        Case("tile-more-reps", lambda x: fnp.tile(x, (2, 1, 3)), lambda x: np.tile(x, (2, 1, 3)), rn(2, 3)),
        Case("tile-fewer-reps", lambda x: fnp.tile(x, (2,)), lambda x: np.tile(x, (2,)), x),
        Case("tile-0d", lambda x: fnp.tile(x, (2, 2)), lambda x: np.tile(x, (2, 2)), rn()),
        Case("repeat-int", lambda x: fnp.repeat(x, 2), lambda x: np.repeat(x, 2), rn(2, 3)),
        Case("repeat-axis", lambda x: fnp.repeat(x, 3, axis=1), lambda x: np.repeat(x, 3, axis=1), rn(2, 3)),
        Case("repeat-neg-axis", lambda x: fnp.repeat(x, 2, axis=-1), lambda x: np.repeat(x, 2, axis=-1), x),
        Case("repeat-array", lambda x: fnp.repeat(x, [1, 0, 2], axis=1), lambda x: np.repeat(x, [1, 0, 2], axis=1), rn(2, 3)),
        Case("repeat-0d", lambda x: fnp.repeat(x, 3), lambda x: np.repeat(x, 3), rn()),
        Case("flip-all", fnp.flip, np.flip, x),
        Case("flip-axis", lambda x: fnp.flip(x, 1), lambda x: np.flip(x, 1), x),
        Case("flip-axes", lambda x: fnp.flip(x, (0, -1)), lambda x: np.flip(x, (0, -1)), x),
        Case("fliplr", fnp.fliplr, np.fliplr, rn(2, 3)),
        Case("flipud", fnp.flipud, np.flipud, rn(2, 3)),
        Case("pad-int", lambda x: fnp.pad(x, 1), lambda x: np.pad(x, 1), rn(2, 3)),
        Case("pad-pair", lambda x: fnp.pad(x, (1, 2)), lambda x: np.pad(x, (1, 2)), rn(2, 3)),
        Case("pad-per-axis", lambda x: fnp.pad(x, ((0, 1), (2, 0))), lambda x: np.pad(x, ((0, 1), (2, 0))), rn(2, 3)),
        Case("pad-const", lambda x: fnp.pad(x, ((1, 1), (0, 2)), constant_values=-3.5),
             lambda x: np.pad(x, ((1, 1), (0, 2)), constant_values=-3.5), rn(2, 3)),
        Case("pad-int-array-float-const", lambda x: fnp.pad(x, 2, constant_values=7.0),
             lambda x: np.pad(x, 2, constant_values=7.0), ints(3)),
        Case("pad-f32", lambda x: fnp.pad(x, 1, constant_values=1.0), lambda x: np.pad(x, 1, constant_values=1.0),
             rn(2, dtype=np.float32)),
        Case("pad-traced-const", lambda x, c: fnp.pad(x, 1, constant_values=c),
             lambda x, c: np.pad(x, 1, constant_values=c), rn(2, 2), 4.0),
        Case("pad-per-side-consts", lambda x: fnp.pad(x, 1, constant_values=(1.0, 2.0)),
             lambda x: np.pad(x, 1, constant_values=(1.0, 2.0)), rn(2, 3)),
        Case("take-flat", lambda x: fnp.take(x, [0, 5, -1]), lambda x: np.take(x, [0, 5, -1]), rn(2, 3)),
        Case("take-axis", lambda x: fnp.take(x, [2, 0, 2], axis=1), lambda x: np.take(x, [2, 0, 2], axis=1), x),
        Case("take-neg-axis", lambda x: fnp.take(x, [[1, 0], [3, -4]], axis=-1),
             lambda x: np.take(x, [[1, 0], [3, -4]], axis=-1), x),
        Case("take-scalar-index", lambda x: fnp.take(x, 1, axis=0), lambda x: np.take(x, 1, axis=0), x),
        Case("take-traced-idx", lambda x, i: fnp.take(x, i, axis=1), lambda x, i: np.take(x, i, axis=1),
             x, np.array([[0, 2], [-1, 1]])),
        Case("take_along_axis", lambda x, i: fnp.take_along_axis(x, i, 1), lambda x, i: np.take_along_axis(x, i, 1),
             x, RNG.integers(0, 3, (2, 5, 4))),
        Case("take_along_axis-last", lambda x, i: fnp.take_along_axis(x, i, -1),
             lambda x, i: np.take_along_axis(x, i, -1), x, RNG.integers(-4, 4, (2, 3, 2))),
        Case("take_along_axis-bcast", lambda x, i: fnp.take_along_axis(x, i, 0),
             lambda x, i: np.take_along_axis(x, i, 0), rn(4, 3), RNG.integers(0, 4, (2, 1))),
        Case("take_along_axis-argsort", lambda x, i: fnp.take_along_axis(x, i, 1),
             lambda x, i: np.take_along_axis(x, i, 1), rn(3, 5), np.argsort(rn(3, 5), axis=1)),
        Case("diagonal", fnp.diagonal, np.diagonal, rn(3, 4)),
        Case("diagonal-offset", lambda x: fnp.diagonal(x, 1), lambda x: np.diagonal(x, 1), rn(3, 4)),
        Case("diagonal-neg-offset", lambda x: fnp.diagonal(x, -2), lambda x: np.diagonal(x, -2), rn(4, 3)),
        Case("diagonal-big-offset", lambda x: fnp.diagonal(x, 5), lambda x: np.diagonal(x, 5), rn(3, 4)),
        Case("diagonal-3d", lambda x: fnp.diagonal(x, 0, 0, 2), lambda x: np.diagonal(x, 0, 0, 2), x),
        Case("diagonal-3d-axes", lambda x: fnp.diagonal(x, 1, 2, 1), lambda x: np.diagonal(x, 1, 2, 1), x),
        Case("diagonal-int", fnp.diagonal, np.diagonal, ints(3, 3, dtype=np.int32)),
        Case("trace", fnp.trace, np.trace, rn(3, 4)),
        Case("trace-offset", lambda x: fnp.trace(x, -1), lambda x: np.trace(x, -1), rn(3, 4)),
        Case("trace-3d", lambda x: fnp.trace(x, 0, 1, 2), lambda x: np.trace(x, 0, 1, 2), x),
        Case("trace-int32", fnp.trace, np.trace, ints(3, 3, dtype=np.int32)),
        Case("diag-vec", fnp.diag, np.diag, rn(3)),
        Case("diag-vec-k", lambda v: fnp.diag(v, 2), lambda v: np.diag(v, 2), rn(3)),
        Case("diag-vec-negk", lambda v: fnp.diag(v, -1), lambda v: np.diag(v, -1), rn(3)),
        Case("diag-vec-int", fnp.diag, np.diag, ints(4)),
        Case("diag-mat", fnp.diag, np.diag, rn(3, 4)),
        Case("diag-mat-k", lambda x: fnp.diag(x, -1), lambda x: np.diag(x, -1), rn(3, 4)),
    ]


SHAPE_CASES = _shape_cases()


@pytest.mark.parametrize("case", SHAPE_CASES, ids=_ids(SHAPE_CASES))
def test_shape_eager(case):
    run_eager(case)


@pytest.mark.parametrize("case", SHAPE_CASES, ids=_ids(SHAPE_CASES))
def test_shape_traced(case):
    run_traced(case)


def test_shape_queries():
    x = rn(2, 3, 1)
    for v in (x, 3.0, rn()):
        assert fnp.shape(v) == np.shape(v)
        assert fnp.ndim(v) == np.ndim(v)
        assert fnp.size(v) == np.size(v)

    def f(x):
        assert fnp.shape(x) == (2, 3, 1) and fnp.ndim(x) == 3 and fnp.size(x) == 6
        assert x.shape == (2, 3, 1) and x.ndim == 3 and x.size == 6 and len(x) == 2
        return x
    staged(f, x)


def test_bitwise_on_floats_raises_type_error():
    with pytest.raises(TypeError):
        np.bitwise_and(ints(3), rn(3))  # test premise
    with pytest.raises(TypeError):
        fnp.bitwise_and(ints(3), rn(3))
    with pytest.raises(TypeError):
        fnp.bitwise_or(rn(3), 1)


def test_shape_errors():
    x = rn(2, 3)
    with pytest.raises(ValueError):
        fnp.reshape(x, (4, 2))
    with pytest.raises(ValueError):
        fnp.reshape(x, (-1, -1))
    with pytest.raises(ValueError):
        fnp.broadcast_to(x, (3, 3))
    with pytest.raises(ValueError):
        fnp.split(x, 2, axis=1)
    with pytest.raises(ValueError):
        fnp.concatenate([x, rn(3)])
    with pytest.raises(ValueError):
        fnp.squeeze(x, 0)
    with pytest.raises(ValueError):
        ft.make_jaxpr(lambda a, b: fnp.concatenate([a, b], 1))(x, rn(3, 3))
    with pytest.raises(IndexError):
        fnp.take(x, [6])
    with pytest.raises(IndexError):
        fnp.take(x, [-4], axis=1)
    with pytest.raises(IndexError):
        fnp.take(x, [0.5])


# --------------------------------------------------------------------------- linear algebra


def _linalg_cases():
    return [
        Case("dot-vv", fnp.dot, np.dot, rn(4), rn(4)),
        Case("dot-mv", fnp.dot, np.dot, rn(3, 4), rn(4)),
        Case("dot-vm", fnp.dot, np.dot, rn(3), rn(3, 4)),
        Case("dot-mm", fnp.dot, np.dot, rn(3, 4), rn(4, 2)),
        Case("dot-nd", fnp.dot, np.dot, rn(2, 3, 4), rn(5, 4, 2)),
        Case("dot-3d-1d", fnp.dot, np.dot, rn(2, 3, 4), rn(4)),
        Case("dot-scalar", fnp.dot, np.dot, rn(), rn(3, 2)),
        Case("dot-pyscalar", fnp.dot, np.dot, 2.0, rn(3)),
        Case("dot-f32", fnp.dot, np.dot, rn(3, 4, dtype=np.float32), rn(4, dtype=np.float32)),
        Case("dot-int", fnp.dot, np.dot, ints(3, 4), ints(4, 2)),
        Case("dot-int-float", fnp.dot, np.dot, ints(3, 4), rn(4)),
        Case("matmul-mm", fnp.matmul, np.matmul, rn(3, 4), rn(4, 5)),
        Case("matmul-mv", fnp.matmul, np.matmul, rn(3, 4), rn(4)),
        Case("matmul-vm", fnp.matmul, np.matmul, rn(4), rn(4, 5)),
        Case("matmul-vv", fnp.matmul, np.matmul, rn(4), rn(4)),
        Case("matmul-batched", fnp.matmul, np.matmul, rn(2, 3, 4), rn(2, 4, 5)),
        Case("matmul-bcast-batch", fnp.matmul, np.matmul, rn(2, 1, 3, 4), rn(5, 4, 2)),
        Case("matmul-2d-3d", fnp.matmul, np.matmul, rn(3, 4), rn(2, 4, 5)),
        Case("matmul-3d-2d", fnp.matmul, np.matmul, rn(2, 3, 4), rn(4, 5)),
        Case("matmul-v-3d", fnp.matmul, np.matmul, rn(4), rn(2, 4, 5)),
        Case("matmul-3d-v", fnp.matmul, np.matmul, rn(2, 3, 4), rn(4)),
        Case("matmul-f32-f64", fnp.matmul, np.matmul, rn(2, 3, dtype=np.float32), rn(3, 2)),
        Case("matmul-int", fnp.matmul, np.matmul, ints(2, 3), ints(3, 2)),
        Case("vdot", fnp.vdot, np.vdot, rn(2, 3), rn(3, 2)),
        Case("inner-vv", fnp.inner, np.inner, rn(4), rn(4)),
        Case("inner-mm", fnp.inner, np.inner, rn(2, 4), rn(3, 4)),
        Case("inner-3d", fnp.inner, np.inner, rn(2, 3, 4), rn(5, 4)),
        Case("inner-scalar", fnp.inner, np.inner, rn(), rn(3)),
        Case("outer", fnp.outer, np.outer, rn(3), rn(4)),
        Case("outer-2d", fnp.outer, np.outer, rn(2, 2), rn(3)),
        Case("outer-int", fnp.outer, np.outer, ints(3), ints(2)),
        Case("tensordot-2", fnp.tensordot, np.tensordot, rn(2, 3, 4), rn(3, 4, 5)),
        Case("tensordot-1", lambda a, b: fnp.tensordot(a, b, 1), lambda a, b: np.tensordot(a, b, 1), rn(2, 3), rn(3, 4)),
        Case("tensordot-0", lambda a, b: fnp.tensordot(a, b, 0), lambda a, b: np.tensordot(a, b, 0), rn(2), rn(3)),
        Case("tensordot-pairs", lambda a, b: fnp.tensordot(a, b, ([0, 2], [1, 0])),
             lambda a, b: np.tensordot(a, b, ([0, 2], [1, 0])), rn(2, 3, 4), rn(4, 2, 5)),
        Case("tensordot-int-axes", lambda a, b: fnp.tensordot(a, b, (1, 0)),
             lambda a, b: np.tensordot(a, b, (1, 0)), rn(2, 3), rn(3, 4)),
        Case("tensordot-neg-axes", lambda a, b: fnp.tensordot(a, b, ([-1], [-2])),
             lambda a, b: np.tensordot(a, b, ([-1], [-2])), rn(2, 3), rn(3, 4)),
    ]


EINSUM_SPECS = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),
    ("ij->ji", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("ij->j", [(3, 4)]),
    ("ij", [(3, 4)]),
    ("ji", [(3, 4)]),
    ("i,i->", [(4,), (4,)]),
    ("i,i", [(4,), (4,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("i,j", [(3,), (4,)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]),
    ("ij,ij->i", [(3, 4), (3, 4)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bij,bkj->bki", [(2, 3, 4), (2, 5, 4)]),
    ("ijk,jl->lik", [(2, 3, 4), (3, 5)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,jk->...ik", [(2, 2, 3, 4), (4, 5)]),
    ("i...,i...->...", [(3, 2, 2), (3, 2, 2)]),
    ("...i,...i", [(2, 3), (2, 3)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("i,ij,j->", [(3,), (3, 4), (4,)]),
    ("ab,cd->abcd", [(2, 3), (4, 1)]),
    ("ij,kj->ikj", [(2, 3), (4, 3)]),
    ("ij,j->i", [(3, 1), (4,)]),
    ("ijk->kji", [(2, 3, 4)]),
    ("ij,jk->", [(2, 3), (3, 4)]),
]


def _einsum_cases():
    out = []
    for spec, shapes in EINSUM_SPECS:
        out.append(Case(f"einsum[{spec}]", (lambda s: lambda *ops: fnp.einsum(s, *ops))(spec),
                        (lambda s: lambda *ops: np.einsum(s, *ops))(spec), *[rn(*s) for s in shapes]))
    out.append(Case("einsum-f32", lambda a, b: fnp.einsum("ij,j->i", a, b), lambda a, b: np.einsum("ij,j->i", a, b),
                    rn(3, 4, dtype=np.float32), rn(4, dtype=np.float32)))
    out.append(Case("einsum-int", lambda a, b: fnp.einsum("ij,jk->ik", a, b), lambda a, b: np.einsum("ij,jk->ik", a, b),
                    ints(3, 4), ints(4, 2)))
    out.append(Case("einsum-spaces", lambda a, b: fnp.einsum("ij, jk -> ik", a, b),
                    lambda a, b: np.einsum("ij, jk -> ik", a, b), rn(3, 4), rn(4, 2)))
    return out


LINALG_CASES = _linalg_cases() + _einsum_cases()


@pytest.mark.parametrize("case", LINALG_CASES, ids=_ids(LINALG_CASES))
def test_linalg_eager(case):
    run_eager(case)


@pytest.mark.parametrize("case", LINALG_CASES, ids=_ids(LINALG_CASES))
def test_linalg_traced(case):
    run_traced(case)


def test_linalg_shape_errors():
    with pytest.raises(ValueError):
        fnp.dot(rn(3, 4), rn(3))
    with pytest.raises(ValueError):
        fnp.matmul(rn(3, 4), rn(3, 4))
    with pytest.raises(ValueError):
        fnp.matmul(rn(3), 2.0)
    with pytest.raises(ValueError):
        fnp.einsum("ij,jk->ik", rn(3, 4), rn(5, 2))
    with pytest.raises(ValueError):
        fnp.einsum("ij,jk->ik", rn(3, 4))
    with pytest.raises(ValueError):
        fnp.tensordot(rn(3, 4), rn(3, 4), 1)


# --------------------------------------------------------------------------- linalg.norm

VECTOR_NORMS = [None, 2, 1, np.inf, -np.inf, 3, 0.5, 1.5]


def _norm_cases():
    out = []
    v, m, t = rn(5), rn(3, 4), rn(2, 3, 4)
    for ord_ in VECTOR_NORMS:
        out.append(Case(f"norm-vec-ord{ord_}", lambda x, o=ord_: fnp.linalg.norm(x, o),
                        lambda x, o=ord_: np.linalg.norm(x, o), v))
        for axis in [0, 1, -1]:
            for kd in [False, True]:
                out.append(Case(f"norm-mat-ord{ord_}-axis{axis}-kd{kd}",
                                lambda x, o=ord_, a=axis, k=kd: fnp.linalg.norm(x, o, axis=a, keepdims=k),
                                lambda x, o=ord_, a=axis, k=kd: np.linalg.norm(x, o, axis=a, keepdims=k), m))
        out.append(Case(f"norm-3d-ord{ord_}-axis1", lambda x, o=ord_: fnp.linalg.norm(x, o, axis=1),
                        lambda x, o=ord_: np.linalg.norm(x, o, axis=1), t))
    out += [
        Case("norm-default-mat", fnp.linalg.norm, np.linalg.norm, m),
        Case("norm-default-3d", fnp.linalg.norm, np.linalg.norm, t),
        Case("norm-default-kd", lambda x: fnp.linalg.norm(x, keepdims=True),
             lambda x: np.linalg.norm(x, keepdims=True), m),
        Case("norm-fro", lambda x: fnp.linalg.norm(x, "fro"), lambda x: np.linalg.norm(x, "fro"), m),
        Case("norm-fro-axes", lambda x: fnp.linalg.norm(x, "fro", axis=(0, 2)),
             lambda x: np.linalg.norm(x, "fro", axis=(0, 2)), t),
        Case("norm-None-axes", lambda x: fnp.linalg.norm(x, axis=(1, 2)), lambda x: np.linalg.norm(x, axis=(1, 2)), t),
        Case("norm-f32", fnp.linalg.norm, np.linalg.norm, rn(4, dtype=np.float32)),
        Case("norm-f32-ord1", lambda x: fnp.linalg.norm(x, 1, axis=0), lambda x: np.linalg.norm(x, 1, axis=0),
             rn(3, 2, dtype=np.float32)),
        Case("norm-int", fnp.linalg.norm, np.linalg.norm, ints(5)),
        Case("norm-int-ord1", lambda x: fnp.linalg.norm(x, 1), lambda x: np.linalg.norm(x, 1), ints(5)),
        Case("norm-0d-vec-zero", lambda x: fnp.linalg.norm(x, 3), lambda x: np.linalg.norm(x, 3), np.zeros(1) + 2.0),
    ]
    return out


NORM_CASES = _norm_cases()


@pytest.mark.parametrize("case", NORM_CASES, ids=_ids(NORM_CASES))
def test_norm_eager(case):
    run_eager(case)


@pytest.mark.parametrize("case", NORM_CASES, ids=_ids(NORM_CASES))
def test_norm_traced(case):
    run_traced(case)


MATRIX_NORMS = [1, -1, np.inf, -np.inf, 2, -2, "nuc"]


@pytest.mark.parametrize("ord_", MATRIX_NORMS, ids=[str(o) for o in MATRIX_NORMS])
@pytest.mark.parametrize("axis", [None, (0, 1), (1, 0)], ids=["axisNone", "axis01", "axis10"])
def test_matrix_norm_correct_or_not_implemented(ord_, axis):
    """Matrix norms of a 2-D array: numpy's value, or an explicit NotImplementedError -- never
    a silently different (e.g. elementwise vector) norm."""
    m = rn(3, 4)
    want = np.linalg.norm(m, ord_, axis=axis)
    try:
        got = fnp.linalg.norm(m, ord_, axis=axis)
    except NotImplementedError as e:
        assert "norm" in str(e)
        return
    assert_same(got, want, f"matrix norm ord={ord_} axis={axis}")


def test_norm_negative_vector_order_matches_numpy():
    x = rn(5)
    np.testing.assert_allclose(fnp.linalg.norm(x, ord=-2), np.linalg.norm(x, ord=-2))


# --------------------------------------------------------------------------- operators on tracers (c)


def _operator_fn(x, y, xi, yi):
    """Runs on numpy arrays (the reference) and on tracers (through Tracer operators)."""
    return [
        x + y, x - y, x * y, x / y, x // y, x % y, x ** 2, x ** 3, abs(x) ** y, x ** -1, abs(x) ** 0.5,
        x @ y.T, y.T @ x, x[0] @ y[1],
        x < y, x <= y, x > y, x >= y, x == y, x != y,
        -x, +x, abs(x), abs(-y),
        2 + x, 2 - x, 2 * x, 2 / x, 2 // x, 2 % x, 2.0 ** x, x + 1.5, x - 1, x * 0.5, x / 4, x // 0.7, x % 0.3,
        1 < x, 0.5 >= x, x == 0.5,
        x[0], x[-1], x[1, 2], x[:, 1], x[::-1, ::2], x[None, :, None], x[..., -1],
        x[[0, 2]], x[np.array([1, 0]), np.array([2, 3])], x[1:, :2],
        xi + yi, xi - yi, xi * yi, xi // yi, xi % yi, xi ** 2, -xi, abs(xi), xi & yi, xi | yi, xi ^ yi, ~xi,
        xi // 3, xi % 3, 7 // yi, 7 % yi, xi < yi, xi == 2, xi * 2.5, xi + 1, xi / 2, xi / yi,
        (x > 0) & (y > 0), (x > 0) | (y > 0), (x > 0) ^ (y > 0), ~(x > 0),
    ]


def test_tracer_operators_match_numpy():
    x, y = rn(3, 4) + 0.1, rn(3, 4) + 0.1
    y = np.where(np.abs(y) < 0.2, 0.5, y)
    xi, yi = ints(3, 4), nz_ints(3, 4)
    with np.errstate(all="ignore"):
        want = _operator_fn(x, y, xi, yi)
        closed = ft.make_jaxpr(_operator_fn)(x, y, xi, yi)
        got = closed(x, y, xi, yi)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_same(g, w, f"operator output {k}")


def _method_fn(x, y):
    return [
        x.sum(), x.sum(0), x.sum(axis=1, keepdims=True), x.mean(), x.mean(1), x.var(), x.std(0), x.prod(1),
        x.max(), x.max(axis=0), x.min(1), x.argmax(), x.argmin(axis=1), x.all(), (x > 0).any(0),
        x.cumsum(0), x.cumsum(), x.ravel(), x.flatten(), x.reshape(2, 6), x.reshape((4, 3)), x.reshape(-1),
        x.T, x.transpose(), x.transpose(1, 0), x.transpose((1, 0)), x.swapaxes(0, 1), x.squeeze(),
        x.astype(np.float32), x.astype(np.int64), x.dot(y.T), x.clip(-0.5, 0.5), x.take([0, 2], axis=1),
        x.round(1), x.conj(), x.copy(), x.real, x[None].squeeze(0),
    ]


def test_tracer_methods_match_numpy():
    x, y = rn(3, 4), rn(3, 4)
    want = _method_fn(x, y)
    got = staged(_method_fn, x, y)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_same(g, w, f"method output {k}")


def test_tracer_len_iter_and_concrete_errors():
    x = rn(3, 2)

    def f(x):
        rows = list(x)
        assert len(rows) == 3 == len(x)
        return fnp.stack(rows[::-1])
    assert_same(staged(f, x)[0], x[::-1])
    with pytest.raises(TypeError):
        ft.make_jaxpr(lambda x: float(x))(2.0)
    with pytest.raises(TypeError):
        ft.make_jaxpr(lambda x: 1 if x > 0 else 0)(2.0)
    with pytest.raises(TypeError):
        ft.make_jaxpr(lambda x: np.asarray(x))(x)
    with pytest.raises(TypeError):
        ft.make_jaxpr(lambda x: len(x))(2.0)


# --------------------------------------------------------------------------- dtype promotion (d)


PROMOTION = [
    ("f32 arr * py float", lambda: (rn(3, dtype=np.float32), 2.5), np.multiply, np.float32),
    ("py float + f32 arr", lambda: (2.5, rn(3, dtype=np.float32)), np.add, np.float32),
    ("f32 arr / py int", lambda: (rn(3, dtype=np.float32), 3), np.divide, np.float32),
    ("f32 arr - py int", lambda: (rn(3, dtype=np.float32), 3), np.subtract, np.float32),
    ("f32 arr ** py float", lambda: (pos(3, dtype=np.float32), 1.5), np.power, np.float32),
    ("f32 arr max py float", lambda: (rn(3, dtype=np.float32), 0.0), np.maximum, np.float32),
    ("f32 0d + py float", lambda: (np.float32(1.5) * np.ones((), np.float32), 2.0), np.add, np.float32),
    ("f32 + f64 arr", lambda: (rn(3, dtype=np.float32), rn(3)), np.add, np.float64),
    ("f64 arr * f32 arr", lambda: (rn(3), rn(3, dtype=np.float32)), np.multiply, np.float64),
    ("f32 + np.float64 scalar", lambda: (rn(3, dtype=np.float32), np.float64(2.0)), np.add, np.float64),
    ("f32 * int32 arr", lambda: (rn(3, dtype=np.float32), ints(3, dtype=np.int32)), np.multiply, np.float64),
    ("f32 * int8 arr", lambda: (rn(3, dtype=np.float32), ints(3, dtype=np.int8)), np.multiply, np.float32),
    ("f16 + py float", lambda: (rn(3, dtype=np.float16), 2.0), np.add, np.float16),
    ("i64 arr * 2.5", lambda: (ints(3), 2.5), np.multiply, np.float64),
    ("i32 arr * 2.5", lambda: (ints(3, dtype=np.int32), 2.5), np.multiply, np.float64),
    ("i64 arr + 1", lambda: (ints(3), 1), np.add, np.int64),
    ("i32 arr + 1", lambda: (ints(3, dtype=np.int32), 1), np.add, np.int32),
    ("1 + i32 arr", lambda: (1, ints(3, dtype=np.int32)), np.add, np.int32),
    ("i32 arr + i64 arr", lambda: (ints(3, dtype=np.int32), ints(3)), np.add, np.int64),
    ("u8 arr + 1", lambda: (ints(3, lo=0, hi=9, dtype=np.uint8), 1), np.add, np.uint8),
    ("i64 arr / i64 arr", lambda: (ints(3), nz_ints(3)), np.divide, np.float64),
    ("i32 arr / 2", lambda: (ints(3, dtype=np.int32), 2), np.divide, np.float64),
    ("i32 arr / i32 arr", lambda: (ints(3, dtype=np.int32), nz_ints(3, dtype=np.int32)), np.divide, np.float64),
    ("i32 arr arctan2 i32 arr", lambda: (ints(3, dtype=np.int32), ints(3, dtype=np.int32)), np.arctan2, np.float64),
    ("bool + 1", lambda: (bools(3), 1), np.add, np.int64),
    ("bool * 1.5", lambda: (bools(3), 1.5), np.multiply, np.float64),
    ("bool & True", lambda: (bools(3), True), np.bitwise_and, np.bool_),
    ("py int + py float", lambda: (1, 2.5), np.add, np.float64),
    ("py int * py int", lambda: (3, 4), np.multiply, np.int64),
    ("f32 < py float", lambda: (rn(3, dtype=np.float32), 0.5), np.less, np.bool_),
    ("i32 arr ** 2", lambda: (ints(3, dtype=np.int32), 2), np.power, np.int32),
    ("f32 ** np.int64(2)", lambda: (rn(3, dtype=np.float32), np.int64(2)), np.power, np.float64),
    ("f32 + py complex", lambda: (rn(3, dtype=np.float32), 1j), np.add, np.complex64),
]


@pytest.mark.parametrize("desc,make,ufunc,expected", PROMOTION, ids=[p[0] for p in PROMOTION])
def test_dtype_promotion(desc, make, ufunc, expected):
    args = make()
    want = ufunc(*args)
    assert np.asarray(want).dtype == np.dtype(expected), "test premise: numpy's own result dtype"
    f = getattr(fnp, ufunc.__name__)
    eager = f(*args)
    assert_same(eager, want, f"eager {desc}")
    # traced: both operands as tracers (Python scalars become weakly-typed tracers)
    closed = ft.make_jaxpr(f)(*args)
    assert closed.out_avals[0].dtype == np.dtype(expected), f"{desc}: traced out aval {closed.out_avals}"
    assert_same(closed(*args)[0], want, f"traced {desc}")
    # traced: only the array operand traced, the scalar closed over
    for k, a in enumerate(args):
        if isinstance(a, np.ndarray):
            def g(t, k=k):
                full = list(args)
                full[k] = t
                return f(*full)
            closed = ft.make_jaxpr(g)(a)
            assert closed.out_avals[0].dtype == np.dtype(expected), f"{desc}: traced out aval {closed.out_avals}"
            assert_same(closed(a)[0], want, f"traced-one-operand {desc}")


def test_operator_promotion_on_tracers():
    x32 = rn(3, dtype=np.float32)
    x64 = rn(3)
    xi = ints(3)

    def f(a32, a64, ai):
        return [a32 * 2.0, 2.0 * a32, a32 + 1, a32 / 2, a32 ** 2, a32 - 0.5,
                a32 + a64, ai * 2.5, ai + 1, ai / 2, -a32, abs(a32), a32 @ a32, a32 > 0.0]
    expected = [np.float32, np.float32, np.float32, np.float32, np.float32, np.float32,
                np.float64, np.float64, np.int64, np.float64, np.float32, np.float32, np.float32, np.bool_]
    closed = ft.make_jaxpr(f)(x32, x64, xi)
    got = closed(x32, x64, xi)
    want = f(x32, x64, xi)
    for k, (g, w, e) in enumerate(zip(got, want, expected)):
        assert np.asarray(w).dtype == np.dtype(e)
        assert closed.out_avals[k].dtype == np.dtype(e), f"output {k}: {closed.out_avals[k]}"
        assert_same(g, w, f"output {k}")


_MIX_DTYPES = [np.bool_, np.int8, np.uint8, np.int32, np.int64, np.uint32, np.float32, np.float64]
_OPERATORS = {"**": operator.pow, "+": operator.add, "*": operator.mul, "//": operator.floordiv, "%": operator.mod}


def _operator_mixes(x, arrays: dict) -> dict:
    """Every operator of ``_OPERATORS`` between ``x`` and each of ``arrays`` and the Python scalars
    2, 2.5 and True (on either side), by a label."""
    out = {}
    for label, y in {"2": 2, "2.5": 2.5, "True": True, **arrays}.items():
        for symbol, op in _OPERATORS.items():
            out[f"x {symbol} {label}"] = op(x, y)
            if label in ("2", "2.5", "True"):
                out[f"{label} {symbol} x"] = op(y, x)
    return out


@pytest.mark.opencl_kernels  # (conftest: small programs run as OpenCL kernels too)
@pytest.mark.parametrize("dtype", _MIX_DTYPES)
def test_operator_dtypes_of_every_bool_integer_float_and_scalar_mix(dtype):
    """``**``, ``+``, ``*``, ``//``, ``%`` of a bool, integer or float array with every other of those
    dtypes and with Python scalars: numpy's dtypes and values eagerly, in the traced program's
    abstract values and from ``jit`` on both backends (issue 37: ``bool_array ** 2`` was int8
    eagerly, int64 under jit; ``bool_array // True`` traced as bool but computed int8)."""
    def operand(d):
        return np.array([True, False, True]) if d is np.bool_ else np.array([1, 2, 3], d)
    x, arrays = operand(dtype), {np.dtype(d).name: operand(d) for d in _MIX_DTYPES}
    with np.errstate(divide="ignore", invalid="ignore"):
        want = _operator_mixes(x, arrays)
        results = {"eager": _operator_mixes(fnp.asarray(x), arrays),
                   **{f"jit {b}": ft.jit(_operator_mixes, backend=b)(x, arrays) for b in ("numpy", "opencl")}}
    shapes = ft.eval_shape(_operator_mixes, x, arrays)
    for label, w in want.items():
        assert shapes[label].dtype == w.dtype, f"traced {label}: {shapes[label].dtype}, numpy {w.dtype}"
        for how, got in results.items():
            assert_same(got[label], w, f"{how} {label}")


FLOAT32_PRESERVING = [n for n in UNARY if n not in ("isfinite", "isnan", "isinf", "logical_not")] + [
    "sigmoid"]


@pytest.mark.parametrize("name", FLOAT32_PRESERVING)
def test_float32_unary_stays_float32(name):
    gen = UNARY.get(name, rn)
    x = gen(2, 3, dtype=np.float32)
    f = getattr(fnp, name)
    assert np.asarray(f(x)).dtype == np.float32
    closed = ft.make_jaxpr(f)(x)
    assert closed.out_avals[0].dtype == np.float32, str(closed)
    assert closed(x)[0].dtype == np.float32
    # and through grad-free composite use: a float32 program stays float32
    closed2 = ft.make_jaxpr(lambda x: f(x) * 2.0 + 1)(x)
    assert closed2.out_avals[0].dtype == np.float32


@pytest.mark.parametrize("name", ["sum", "mean", "var", "std", "max", "min", "prod", "cumsum"])
def test_float32_reductions_stay_float32(name):
    x = rn(3, 4, dtype=np.float32)
    f = getattr(fnp, name)
    assert np.asarray(f(x)).dtype == np.float32
    closed = ft.make_jaxpr(lambda x: f(x, axis=0))(x)
    assert closed.out_avals[0].dtype == np.float32


def test_unary_small_int_and_bool_dtypes():
    """numpy computes float functions of int8/int16/uint8/bool inputs in float16/float32."""
    bad = []
    for name in ["sin", "exp", "sqrt", "log1p", "tanh", "arctan", "log2"]:
        for dt in [np.int8, np.uint8, np.int16, np.bool_]:
            x = (ints(4, lo=0, hi=4)).astype(dt)
            with np.errstate(all="ignore"):
                want = getattr(np, name)(x)
                got = getattr(fnp, name)(x)
            if np.asarray(got).dtype != want.dtype:
                bad.append(f"{name}({np.dtype(dt).name}) -> {np.asarray(got).dtype}, numpy {want.dtype}")
    assert not bad, "\n".join(bad)


# --------------------------------------------------------------------------- numpy-protocol dispatch (e)


def _protocol_fn(x, y):
    c = np.linspace(-1.0, 1.0, 12).reshape(3, 4)
    return [
        np.sin(x), np.exp(x), np.abs(x), np.absolute(x), np.negative(x), np.sqrt(np.abs(x)), np.tanh(x),
        np.add(x, 1.0), np.maximum(x, 0.0), np.minimum(c, x), np.where(x > 0, x, 0.0),
        np.sum(x), np.sum(x, axis=0), np.sum(x, axis=1, keepdims=True), np.mean(x), np.mean(x, axis=0),
        np.max(x, axis=1), np.min(x), np.prod(x, axis=0), np.var(x), np.std(x, axis=1),
        np.argmax(x, axis=1), np.cumsum(x, axis=0), np.linalg.norm(x), np.linalg.norm(x, axis=1),
        np.transpose(x), np.reshape(x, (4, 3)), np.ravel(x), np.expand_dims(x, 0), np.squeeze(x[None]),
        np.concatenate([x, c]), np.stack([c, x], axis=1), np.clip(x, -0.2, 0.2), np.dot(c, x.T),
        np.matmul(x, c.T), np.einsum("ij,ij->i", x, c), np.outer(x[0], y[0]), np.tensordot(x, c, 2),
        np.round(x, 1), np.square(x), np.floor(x), np.isfinite(x), np.logical_and(x > 0, y > 0),
        c + x, c - x, c * x, c / (np.abs(x) + 1), c ** 2 + x, c @ x.T, c > x, c == x, c // (np.abs(x) + 1),
        c % (np.abs(x) + 1), np.float64(2.0) * x, np.float64(1.0) - x, np.array(3.0) + x, c[0] + x,
        np.arctan2(x, c), np.hypot(x, y), np.logaddexp(x, y), np.power(np.abs(x), c),
    ]


def test_numpy_protocol_dispatch():
    x, y = rn(3, 4), rn(3, 4)
    want = _protocol_fn(x, y)
    seen_types = []

    def f(x, y):
        out = _protocol_fn(x, y)
        seen_types.extend(type(o) for o in out)
        return out
    closed = ft.make_jaxpr(f)(x, y)
    # every output depends on a traced input, so must itself have been a tracer
    assert all(issubclass(t, Tracer) for t in seen_types), [t.__name__ for t in seen_types]
    got = closed(x, y)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_same(g, w, f"protocol output {k}")
    names = {e.primitive.name for e in closed.eqns}
    assert {"sin", "exp", "reduce_sum", "dot_general", "add", "mul"} <= names


def test_numpy_protocol_dispatch_newer_keyword_spellings():
    """NumPy 2 spellings of arguments passed through ``__array_function__``."""
    x = rn(3, 4)
    got = staged(lambda x: [np.reshape(x, shape=(4, 3)), np.sum(x, axis=0, keepdims=False)], x)
    assert_same(got, [np.reshape(x, (4, 3)), np.sum(x, axis=0)])


def test_numpy_protocol_unsupported_names_the_function():
    x = rn(3)
    with pytest.raises(NotImplementedError, match="spacing"):
        ft.make_jaxpr(lambda x: np.spacing(x))(x)
    with pytest.raises(NotImplementedError, match="nextafter"):
        ft.make_jaxpr(lambda x: np.nextafter(x, x))(x)
    with pytest.raises(NotImplementedError):
        ft.make_jaxpr(lambda x: np.add.reduce(x))(x)


# --------------------------------------------------------------------------- indexing (f)

X3 = np.arange(5 * 6 * 7, dtype=np.float64).reshape(5, 6, 7) * 0.5 - 3
X4 = RNG.standard_normal((2, 3, 4, 5))
MASK6 = np.array([True, False, True, True, False, True])

INDEXES = [
    (X3, 0), (X3, -1), (X3, 4), (X3, -5), (X3, (1, 2)), (X3, (1, -2, 3)), (X3, (np.int64(2), 1)),
    (X3, slice(None)), (X3, slice(1, 4)), (X3, slice(None, None, 2)), (X3, slice(None, None, -1)),
    (X3, slice(4, 0, -2)), (X3, slice(-2, None)), (X3, slice(10, 20)), (X3, slice(3, 1)),
    (X3, (slice(None), slice(None, None, -2))), (X3, (slice(1, None, 3), 2, slice(None, 1, -1))),
    (X3, (slice(-1, -6, -1), slice(None, -2), slice(5, None, -3))),
    (X3, None), (X3, (None, 1)), (X3, (1, None, slice(None), None)), (X3, (None, None)),
    (X3, Ellipsis), (X3, (Ellipsis, 1)), (X3, (1, Ellipsis)), (X3, (Ellipsis, None)), (X3, (0, Ellipsis, 0)),
    (X3, (None, Ellipsis, slice(None, None, -1), None)), (X3, (slice(1, 3), Ellipsis)),
    (X3, [0, 2, -1]), (X3, np.array([4, 0, 0])), (X3, np.array([[0, 1], [2, 3]])),
    (X3, (slice(None), [1, -1])), (X3, (Ellipsis, [0, 3, 6])),
    (X3, ([0, 1], [2, 3])), (X3, ([0, 1], [2, 3], [4, 5])), (X3, ([[0], [1]], [2, 3])),
    (X3, ([0, 1], slice(None), [2, 3])), (X3, ([[0], [2]], slice(1, 3), [1, 2, 3])),
    (X3, (slice(None), [0, 1], [2, 3])), (X3, (slice(None), [[0], [1]], [2, 3])),
    (X3, ([0, 1], 2)), (X3, (2, [0, 1])), (X3, (slice(None), 1, [1, 2])), (X3, ([1, 2], 1)),
    (X3, (1, slice(None), [1, 2])), (X3, ([0, 1], slice(None), 3)), (X3, (0, slice(1, 3), [1, 2, 3])),
    (X3, (1, None, [0, 1])), (X3, ([0, 1], None, [0, 1])), (X3, (None, [0, 1], slice(None), [1, 2])),
    (X3, ([0, 1], Ellipsis, [1, 2])), (X3, (np.array([0, 1]), Ellipsis, np.array([1, 2]))), (X3, (np.array([[3]]), Ellipsis)), (X3, (Ellipsis, [0, 1], 2)),
    (X3, (np.array(2), slice(None), [1, 2])),
    (X3, (slice(None), MASK6)), (X3, (1, MASK6)),
    (X3, X3 > 10), (X3, (X3[:, :, 0] > 0,)), (X3, (slice(None), MASK6, 3)),
    (X3, (np.array([True, False, True, False, True]), [0, 1, 2])),
    (X3, (0, MASK6, [0, 1, 2, 3])), (X3, (slice(None), 0, X3[0, 0] > 0)),
    (X4, (slice(None), [0, 1], slice(None), [1, 2])), (X4, (0, [0, 1], [1, 2])), (X4, (0, [0, 1], 1, [1, 2])),
    (X4, ([1], 0, slice(None), 2)), (X4, (Ellipsis, [0, 1], slice(None))), (X4, (1, Ellipsis, [0, 2], 3)),
    (X4, (slice(None), None, [[0, 1]], slice(None, None, -1), [[1], [2]])),
    (np.arange(6.0), 3), (np.arange(6.0), (None,)), (np.arange(6.0), slice(None, None, -1)),
    (np.float64(2.5) * np.ones(()), ()), (np.float64(2.5) * np.ones(()), None), (np.float64(2.5) * np.ones(()), Ellipsis),
    (X3.astype(np.int32), ([0, 1], 1)), (X3.astype(np.float32), (Ellipsis, 2)),
]


def _idx_id(i, item):
    arr, idx = item

    def show(v):
        if isinstance(v, np.ndarray):
            return f"{'bool' if v.dtype == bool else 'int'}{list(v.shape)}"
        if isinstance(v, slice):
            return f"{'' if v.start is None else v.start}:{'' if v.stop is None else v.stop}" + (
                f":{v.step}" if v.step is not None else "")
        if v is Ellipsis:
            return "..."
        return repr(v)
    parts = idx if isinstance(idx, tuple) else (idx,)
    return f"{i}-{arr.ndim}d[" + ",".join(show(p) for p in parts) + "]"


INDEX_IDS = [_idx_id(i, it) for i, it in enumerate(INDEXES)]


@pytest.mark.parametrize("arr,idx", INDEXES, ids=INDEX_IDS)
def test_getitem_eager(arr, idx):
    assert_same(fnp.getitem(arr, idx), arr[idx], f"x[{idx!r}]")


@pytest.mark.parametrize("arr,idx", INDEXES, ids=INDEX_IDS)
def test_getitem_traced(arr, idx):
    assert_same(staged(lambda a: a[idx], arr)[0], arr[idx], f"traced x[{idx!r}]")


TRACED_INDEX_FNS = [
    # name, index builder from the (traced) index operands i, j, values of i and j
    ("int-scalar", lambda i, j: i, lambda: (np.int64(3), np.int64(1))),
    ("neg-int-scalar", lambda i, j: i, lambda: (np.int64(-2), np.int64(1))),
    ("two-scalars", lambda i, j: (i, slice(None), j), lambda: (np.int64(1), np.int64(-3))),
    ("scalar-and-slice", lambda i, j: (slice(1, None), i), lambda: (np.int64(-1), np.int64(0))),
    ("array", lambda i, j: i, lambda: (np.array([0, -1, 3]), np.int64(0))),
    ("arrays-adjacent", lambda i, j: (slice(None), i, j), lambda: (np.array([0, -1, 3]), np.array([1, 2, -7]))),
    ("arrays-bcast", lambda i, j: (i, j), lambda: (np.array([[0], [4]]), np.array([1, 2, 5]))),
    ("arrays-nonadjacent", lambda i, j: (i, slice(1, 4), j), lambda: (np.array([0, 2]), np.array([6, 0]))),
    ("array-and-const-array", lambda i, j: (i, [0, 1, 2]), lambda: (np.array([4, 3, 2]), np.int64(0))),
    ("array-slice-neg-step", lambda i, j: (slice(None, None, -2), i), lambda: (np.array([[5], [0]]), np.int64(0))),
    ("array-none", lambda i, j: (None, i, Ellipsis, j), lambda: (np.array([1, 2]), np.array([3, 4]))),
    ("int32-array", lambda i, j: i, lambda: (np.array([1, -2], np.int32), np.int64(0))),
]


@pytest.mark.parametrize("name,index,make", TRACED_INDEX_FNS, ids=[t[0] for t in TRACED_INDEX_FNS])
def test_getitem_with_traced_indices(name, index, make):
    i, j = make()
    want = X3[index(i, j)]
    # operand and indices traced
    assert_same(staged(lambda x, i, j: x[index(i, j)], X3, i, j)[0], want, name)
    # only the indices traced, the operand a constant
    assert_same(staged(lambda i, j: fnp.getitem(X3, index(i, j)), i, j)[0], want, name)


OUT_OF_RANGE = [  # (array, index, the in-range index JAX's read clamps it to)
    (X3, 5, 4), (X3, -6, 0), (X3, (0, 6), (0, 5)), (X3, (0, 0, -8), (0, 0, 0)), (X3, (Ellipsis, 7), (Ellipsis, 6)),
    (X3, [0, 5], [0, 4]), (X3, (slice(None), [-7]), (slice(None), [0])), (X3, (0, [1, 2], 9), (0, [1, 2], 6)),
    (np.arange(3.0), 3, 2),
]
INVALID = [
    (X3, (0, 0, 0, 0)), (X3, (Ellipsis, 0, Ellipsis)), (X3, 1.5), (X3, (0, 1.0)), (X3, np.array([0.0, 1.0])), (X3, "a"),
]


@pytest.mark.parametrize("arr,idx,clamped", OUT_OF_RANGE, ids=[_idx_id(i, it[:2]) for i, it in enumerate(OUT_OF_RANGE)])
def test_getitem_out_of_range_reads_clamp_as_jax(arr, idx, clamped):
    with pytest.raises(IndexError):
        arr[idx]  # test premise: numpy raises
    want = arr[clamped]
    assert_same(fnp.getitem(arr, idx), want, "eager")
    assert_same(ft.jit(lambda a: a[idx], backend="numpy")(arr), want, "jit")


@pytest.mark.parametrize("arr,idx", INVALID, ids=[_idx_id(i, it) for i, it in enumerate(INVALID)])
def test_getitem_invalid_raises_index_error(arr, idx):
    with pytest.raises(IndexError):
        arr[idx]  # test premise
    with pytest.raises(IndexError):
        fnp.getitem(arr, idx)
    with pytest.raises(IndexError):
        ft.make_jaxpr(lambda a: a[idx])(arr)


def test_getitem_traced_bool_mask_raises_index_error():
    with pytest.raises(IndexError, match="where"):
        ft.make_jaxpr(lambda x: x[x > 0])(rn(4))


# --------------------------------------------------------------------------- unsupported (g)


@pytest.mark.parametrize("name", ["nextafter", "spacing", "gcd", "lcm"])
def test_unsupported_raises_not_implemented(name):
    with pytest.raises(NotImplementedError, match=name):
        getattr(fnp, name)
    # not an AttributeError: hasattr would silently say False
    try:
        getattr(fnp, name)
    except NotImplementedError as e:
        assert f"numpy.{name}" in str(e)


@pytest.mark.parametrize("name", ["tensorsolve", "tensorinv"])
def test_unsupported_linalg_raises_not_implemented(name):
    with pytest.raises(NotImplementedError, match=name):
        getattr(fnp.linalg, name)


def test_unsupported_options_raise_not_implemented():
    with pytest.raises(NotImplementedError, match="linear_ramp"):
        fnp.pad(rn(3), 1, mode="linear_ramp")
    with pytest.raises(NotImplementedError, match="order"):
        fnp.reshape(rn(2, 3), (3, 2), order="F")
    with pytest.raises(NotImplementedError, match="einsum"):
        fnp.einsum("ij->ij", rn(3, 3), out=rn(3, 3))
    with pytest.raises(NotImplementedError, match="hfft"):
        ft.make_jaxpr(lambda x: np.fft.hfft(x))(rn(4))


def test_private_names_raise_attribute_error():
    with pytest.raises(AttributeError):
        fnp._definitely_missing
    assert not hasattr(fnp, "__wrapped__")


def test_all_and_any_of_empty_axes_and_bitwise_not():
    """all / any are bool min / max, but over nothing they are True / False (numpy's identities)."""
    cases = [(lambda x: fnp.all(x, axis=0), lambda x: np.all(x, axis=0)),
             (lambda x: fnp.any(x, axis=0), lambda x: np.any(x, axis=0)), (fnp.all, np.all), (fnp.any, np.any)]
    for x in (np.zeros((0, 3), bool), np.zeros((0, 3)), np.zeros((0, 3), np.int32)):
        for f, ref in cases:
            for run in (f, ft.jit(f, backend="numpy"), ft.jit(f, backend="opencl")):
                got = np.asarray(run(x))
                assert got.dtype == bool and np.array_equal(got, ref(x))
    with pytest.raises(ValueError, match="no identity"):
        fnp.max(np.zeros((0, 3)), axis=0)
    x = np.array([1, -2, 0], np.int32)
    np.testing.assert_array_equal(np.asarray(ft.jit(fnp.bitwise_not)(x)), np.bitwise_not(x))


# --------------------------------------------------------------------------- the namespace


def test_missing_names_are_attribute_errors():
    """Feature detection: hasattr(fnp, "spacing") raised NotImplementedError instead of being False."""
    assert not hasattr(fnp, "spacing") and not hasattr(fnp.linalg, "tensorinv") and not hasattr(fnp, "no_such")
    with pytest.raises(AttributeError, match=r"does not implement numpy\.spacing\. .*fnp primitives"):
        fnp.spacing
    with pytest.raises(NotImplementedError, match="spacing"):  # also still a NotImplementedError
        fnp.spacing(np.ones(3))
    with pytest.raises(AttributeError, match="has no attribute 'no_such'"):
        fnp.no_such
    assert getattr(fnp.fft, "hfft", None) is None
    assert getattr(fnp.linalg, "__wrapped__", None) is None  # (inspect asks modules for dunders)


def test_public_names_are_the_numpy_api():
    """fnp.np, fnp.math, fnp.functools, fnp.P, ... (the modules and helpers it is written with)
    leaked into the public namespace."""
    import types
    public = {n: getattr(fnp, n) for n in dir(fnp) if not n.startswith("_")}
    modules = {n for n, v in public.items() if isinstance(v, types.ModuleType)}
    assert modules == {"fft", "linalg"}, modules
    extras = {n for n in public if not hasattr(np, n)}
    assert extras == {"getitem", "round_", "sigmoid"}, extras  # functrace's own additions
    for module, reference in ((fnp.linalg, np.linalg), (fnp.fft, np.fft)):  # beside primitives (*_p)
        extras = {n for n in dir(module) if not n.startswith("_") and not hasattr(reference, n) and not n.endswith("_p")}
        assert extras <= {"triangular_solve", "lu_pivots_to_permutation", "permutation_matrix"}, extras
    for helper in ("np", "P", "math", "functools", "builtins", "operator", "string", "shape_of", "Tracer",
                   "importlib", "annotations", "user_frame_description"):
        assert not hasattr(fnp, helper), helper


@pytest.mark.parametrize("kwargs", [dict(num=5), dict(num=4, endpoint=False), dict(num=1), dict(num=0),
                                    dict(num=6, axis=-1), dict(num=3, retstep=True), dict(num=5, dtype=np.int64),
                                    dict(num=5, dtype=np.float32)])
def test_linspace_with_traced_endpoints(kwargs):
    """fnp.linspace with traced endpoints recursed until RecursionError; it is now traced like
    numpy's (values, shapes, dtypes) and differentiable in start and stop."""
    start, stop = np.array([0.5, -1.0]), np.array(2.0)
    want = np.linspace(start, stop, **kwargs)
    got = ft.jit(lambda a, b: fnp.linspace(a, b, **kwargs), backend="numpy")(start, stop)
    for g, w in zip(ft.tree_util.tree_leaves(got), ft.tree_util.tree_leaves(want)):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-15, atol=1e-15, equal_nan=True)
    if kwargs.get("dtype") is None and kwargs["num"] > 0 and not kwargs.get("retstep"):
        ft.test_util.check_grads(lambda a, b: fnp.linspace(a, b, **kwargs) ** 2, (start, stop), order=2,
                                 modes=("fwd", "rev"))


def test_linspace_keeps_float32_and_hits_the_endpoint():
    a, b = np.float32(0.1), np.float32(0.7)
    got = ft.jit(lambda a, b: fnp.linspace(a, b, 7), backend="numpy")(a, b)
    assert got.dtype == np.float32 and got[-1] == b and got[0] == a


def test_scalar_types_cast_traced_values_and_stay_dtypes():
    """fnp.float32(tracer) raised; it now casts, while fnp.float32 is still a dtype everywhere."""
    g = ft.grad(lambda x: fnp.sum(fnp.float32(x) * fnp.float32(2.0)))(np.ones(3))
    assert g.dtype == np.float64 and g.tolist() == [2.0, 2.0, 2.0]
    out = ft.jit(lambda x: (fnp.float32(x), fnp.int32(x * 2.6), fnp.bool_(x), fnp.float64([x, x])),
                 backend="numpy")(np.float64(1.5))
    assert [o.dtype for o in out] == [np.float32, np.int32, np.bool_, np.float64] and int(out[1]) == 3
    assert fnp.zeros(3, fnp.float32).dtype == np.float32 and np.dtype(fnp.float32) == np.float32
    assert ft.jit(lambda x: x.astype(fnp.float32), backend="numpy")(np.ones(2)).dtype == np.float32
    assert np.ones(2).astype(fnp.int8).dtype == np.int8 and np.dtype("float16") == fnp.float16
    assert type(fnp.float32(1.5)) is np.float32 and fnp.complex64(1j).dtype == np.complex64
    assert isinstance(np.float32(1), fnp.float32) and issubclass(fnp.float32, np.floating)
    assert fnp.float32.__name__ == "float32" and np.finfo(fnp.float32).eps == np.finfo(np.float32).eps


def test_power_function_and_operator_differ_on_bools_as_numpys():
    """numpy's ``b ** 2`` squares (int8) while ``np.power(b, 2)`` promotes the Python int (int64):
    the same split eagerly, traced and under jit."""
    b = np.array([True, False, True])
    for f, want in ((lambda x: x ** 2, (b ** 2).dtype), (lambda x: fnp.power(x, 2), np.power(b, 2).dtype),
                    (lambda x: 2 ** x, (2 ** b).dtype), (lambda x: x ** 3, (b ** 3).dtype)):
        for got in (f(fnp.asarray(b)), ft.jit(f)(b), ft.jit(f, backend="numpy")(b)):
            assert np.asarray(got).dtype == want
            np.testing.assert_array_equal(np.asarray(got), f(b))
