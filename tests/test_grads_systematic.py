"""Systematic derivative checks: every differentiable primitive and ``functrace.numpy`` function.

Each case is ``(f, args)``; ``test_grads`` runs ``check_grads(f, args, order=2, modes=("fwd", "rev"))``
in float64 (forward and reverse mode, and second-order derivatives of both) against central
finite differences.  Inputs are kept inside safe domains (positive for log/sqrt, |x| < 1 for
arcsin/arctanh, no ties for max/min, no points at kinks: 0 for abs, bounds for clip,
integer quotients for remainder).

``test_every_differentiable_primitive_is_covered`` stages every case with ``ft.make_jaxpr`` and
checks that the cases reach every differentiable primitive of ``functrace.primitives.registry``.
"""
from __future__ import annotations

import numpy as np
import pytest

import functrace as ft
import functrace.numpy as fnp
from functrace import primitives as P

_rng = np.random.default_rng(20240521)


# --------------------------------------------------------------------------- input generators


def normal(*shape):
    return _rng.standard_normal(shape)


def uniform(lo, hi, *shape):
    return _rng.uniform(lo, hi, shape)


def signed(lo, hi, *shape):
    """|x| in [lo, hi] with a random sign: away from 0 (the kink of abs, the pole of 1/x)."""
    return _rng.uniform(lo, hi, shape) * _rng.choice([-1.0, 1.0], shape)


def distinct(*shapes, spacing=0.25, offset=0.0):
    """Arrays whose entries (all together) are pairwise at least ``spacing - 0.05`` apart: no ties
    for max/min/argmax, neither within one array nor between operands.  Entries lie in
    ``offset + k * spacing + [0, 0.05)`` for integers k, so with the defaults they stay at least
    0.075 away from the points ``0.125 + k * 0.25`` (used as clip bounds)."""
    sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
    n = sum(sizes)
    vals = (_rng.permutation(n) - n // 2) * spacing + offset + _rng.uniform(0, 0.05, n)
    out, start = [], 0
    for s, k in zip(shapes, sizes):
        out.append(vals[start:start + k].reshape(s))
        start += k
    return out if len(out) > 1 else out[0]


def distinct_abs(shape):
    """Random signs, magnitudes pairwise distinct (>= 0.2 apart) and >= 0.2: abs without kinks or ties."""
    n = int(np.prod(shape, dtype=np.int64))
    mags = 0.2 + _rng.permutation(n) * 0.25 + _rng.uniform(0, 0.05, n)
    return (mags * _rng.choice([-1.0, 1.0], n)).reshape(shape)


def fmt(shape):
    return str(tuple(shape)).replace(" ", "")


def random_broadcast_pair(rng):
    """Two random numpy-broadcastable shapes (scalars, size-1 axes, odd sizes, rank mismatch)."""
    nd = int(rng.integers(0, 4))
    out = tuple(int(rng.choice([2, 3, 5])) for _ in range(nd))

    def operand():
        k = int(rng.integers(0, nd + 1))
        tail = out[nd - k:]
        return tuple(1 if rng.random() < 0.3 else n for n in tail)
    return operand(), operand()


CASES: list = []


def case(name, f, *args):
    CASES.append(pytest.param(f, tuple(np.asarray(a, dtype=np.float64) for a in args), id=name))


# --------------------------------------------------------------------------- unary elementwise

_UNARY = {
    # name: (function, domain generator(shape))
    "sin": (fnp.sin, lambda s: normal(*s)),
    "cos": (fnp.cos, lambda s: normal(*s)),
    "tan": (fnp.tan, lambda s: uniform(-1.2, 1.2, *s)),
    "tanh": (fnp.tanh, lambda s: normal(*s)),
    "exp": (fnp.exp, lambda s: normal(*s)),
    "log": (fnp.log, lambda s: uniform(0.3, 3.0, *s)),
    "log1p": (fnp.log1p, lambda s: uniform(-0.6, 2.0, *s)),
    "expm1": (fnp.expm1, lambda s: normal(*s)),
    "sqrt": (fnp.sqrt, lambda s: uniform(0.3, 3.0, *s)),
    "abs": (fnp.abs, lambda s: signed(0.2, 2.0, *s)),
    "sigmoid": (fnp.sigmoid, lambda s: 2 * normal(*s)),
    "square": (fnp.square, lambda s: normal(*s)),
    "reciprocal": (fnp.reciprocal, lambda s: signed(0.4, 2.0, *s)),
    "log2": (fnp.log2, lambda s: uniform(0.3, 3.0, *s)),
    "log10": (fnp.log10, lambda s: uniform(0.3, 3.0, *s)),
    "exp2": (fnp.exp2, lambda s: normal(*s)),
    "sinh": (fnp.sinh, lambda s: normal(*s)),
    "cosh": (fnp.cosh, lambda s: normal(*s)),
    "arctan": (fnp.arctan, lambda s: 2 * normal(*s)),
    "arcsin": (fnp.arcsin, lambda s: uniform(-0.85, 0.85, *s)),
    "arccos": (fnp.arccos, lambda s: uniform(-0.85, 0.85, *s)),
    "arcsinh": (fnp.arcsinh, lambda s: 2 * normal(*s)),
    "arctanh": (fnp.arctanh, lambda s: uniform(-0.85, 0.85, *s)),
    "arccosh": (fnp.arccosh, lambda s: uniform(1.2, 3.0, *s)),
    "negative": (fnp.negative, lambda s: normal(*s)),
    "neg_operator": (lambda x: -x, lambda s: normal(*s)),
    "abs_operator": (lambda x: abs(x), lambda s: signed(0.2, 2.0, *s)),
}

for _name, (_f, _gen) in _UNARY.items():
    for _shape in [(), (2, 3), (1, 5)]:
        case(f"{_name}-{fmt(_shape)}", _f, _gen(_shape))

# unary functions composed with themselves (second derivatives of the derivative rules)
case("sin_of_cos-(4,)", lambda x: fnp.sin(fnp.cos(x)), normal(4))
case("tanh_times_exp-(3,)", lambda x: fnp.tanh(x) * fnp.exp(x), normal(3))

# --------------------------------------------------------------------------- binary elementwise


def _div_args(sx, sy):
    return normal(*sx), signed(0.5, 2.0, *sy)


def _remainder_args(sx, sy, y_sign=1.0):
    y = y_sign * uniform(0.7, 1.5, *sy)
    k = _rng.integers(-3, 3, np.broadcast_shapes(sx, sy))
    frac = _rng.uniform(0.2, 0.8, np.broadcast_shapes(sx, sy))
    x = (k + frac) * y  # x / y is 0.2..0.8 away from an integer: no jump of the remainder nearby
    # make x have shape sx: only possible when sx already is the broadcast shape
    assert x.shape == sx, "remainder cases need x to have the broadcast shape"
    return x, y


_BINARY = {
    "add": (fnp.add, lambda sx, sy: (normal(*sx), normal(*sy))),
    "subtract": (fnp.subtract, lambda sx, sy: (normal(*sx), normal(*sy))),
    "multiply": (fnp.multiply, lambda sx, sy: (normal(*sx), normal(*sy))),
    "divide": (fnp.divide, _div_args),
    "power": (fnp.power, lambda sx, sy: (uniform(0.4, 2.0, *sx), uniform(-2.0, 2.5, *sy))),
    "maximum": (fnp.maximum, lambda sx, sy: distinct(sx, sy)),
    "minimum": (fnp.minimum, lambda sx, sy: distinct(sx, sy)),
    "arctan2": (fnp.arctan2, lambda sx, sy: (normal(*sx), signed(0.5, 2.0, *sy))),
    "hypot": (fnp.hypot, lambda sx, sy: (signed(0.3, 2.0, *sx), signed(0.3, 2.0, *sy))),
    "logaddexp": (fnp.logaddexp, lambda sx, sy: (2 * normal(*sx), 2 * normal(*sy))),
    "logaddexp2": (fnp.logaddexp2, lambda sx, sy: (2 * normal(*sx), 2 * normal(*sy))),
}

_BINARY_SHAPES = [((2, 3), (2, 3)), ((3, 1), (4,)), ((), (2, 3)), ((2, 3), ()), ((), ()),
                  ((1, 5), (3, 1)), ((2, 1, 3), (4, 1))]

for _name, (_f, _gen) in _BINARY.items():
    for _sx, _sy in _BINARY_SHAPES:
        case(f"{_name}-{fmt(_sx)}-{fmt(_sy)}", _f, *_gen(_sx, _sy))

# random broadcasting pairs (seeded) for the arithmetic primitives
_shape_rng = np.random.default_rng(7)
for _k in range(8):
    _sx, _sy = random_broadcast_pair(_shape_rng)
    case(f"add-random{_k}-{fmt(_sx)}-{fmt(_sy)}", fnp.add, normal(*_sx), normal(*_sy))
    case(f"multiply-random{_k}-{fmt(_sx)}-{fmt(_sy)}", fnp.multiply, normal(*_sx), normal(*_sy))
    case(f"divide-random{_k}-{fmt(_sx)}-{fmt(_sy)}", fnp.divide, *_div_args(_sx, _sy))
    case(f"subtract-random{_k}-{fmt(_sx)}-{fmt(_sy)}", fnp.subtract, normal(*_sx), normal(*_sy))
    case(f"maximum-random{_k}-{fmt(_sx)}-{fmt(_sy)}", fnp.maximum, *distinct(_sx, _sy))
    case(f"power-random{_k}-{fmt(_sx)}-{fmt(_sy)}", fnp.power, uniform(0.4, 2.0, *_sx), normal(*_sy))
    case(f"arctan2-random{_k}-{fmt(_sx)}-{fmt(_sy)}", fnp.arctan2, normal(*_sx), signed(0.5, 2.0, *_sy))
    _cond = _shape_rng.random(np.broadcast_shapes(_sx, _sy)[1:]) < 0.5  # a lower-rank mask broadcasts too
    case(f"where-random{_k}-{fmt(_cond.shape)}-{fmt(_sx)}-{fmt(_sy)}",
         lambda x, y, c=_cond: fnp.where(c, x, y), normal(*_sx), normal(*_sy))

# where the textbook formulas overflow, underflow or cancel (issue 37): arguments scaled so that
# finite differences see the function (x * 1e100 moves by 1e94 per step; at 1e200 the second
# derivatives of arcsinh and arccosh, -1e-400, are below float64's range), ties and far-apart
# operands of logaddexp, an operand at -inf
case("arcsinh-huge-(3,)", lambda x: fnp.arcsinh(x * 1e100), signed(0.5, 2.0, 3))
case("arcsinh-large-(3,)", lambda x: fnp.arcsinh(x * 1e8), signed(0.5, 2.0, 3))
case("arccosh-huge-(3,)", lambda x: fnp.arccosh(x * 1e100), uniform(1.2, 3.0, 3))
case("arccosh-near-one-(3,)", lambda x: fnp.arccosh(1.0 + x * 1e-6), uniform(0.5, 2.0, 3))
case("sinh-tiny-(3,)", lambda x: fnp.sinh(x * 1e-20) * 1e20, normal(3))
case("sinh-cosh-near-overflow-(3,)", lambda x: (fnp.sinh(x - 705.0) + fnp.cosh(x + 705.0)) * 1e-300, uniform(-3, 3, 3))
case("hypot-huge-(3,)-(3,)", lambda x, y: fnp.hypot(x * 1e200, y * 1e200) * 1e-200, normal(3), normal(3))
case("hypot-tiny-(3,)-(3,)", lambda x, y: fnp.hypot(x * 1e-200, y * 1e-200) * 1e200, normal(3), normal(3))
for _name, _f in (("logaddexp", fnp.logaddexp), ("logaddexp2", fnp.logaddexp2)):
    _tied = normal(2, 3)
    case(f"{_name}-ties-(2,3)-(2,3)", _f, _tied, _tied)
    case(f"{_name}-far-apart-(3,)-(3,)", _f, normal(3) - 40.0, normal(3))
    case(f"{_name}-minus-inf-(3,)-(3,)", _f, normal(3), np.full(3, -np.inf))

# remainder: positive and negative divisors, broadcasting divisor
for _sx, _sy in [((2, 3), (2, 3)), ((3, 4), (4,)), ((2, 3), ()), ((), ())]:
    case(f"remainder-{fmt(_sx)}-{fmt(_sy)}", fnp.remainder, *_remainder_args(_sx, _sy))
    case(f"remainder-negdivisor-{fmt(_sx)}-{fmt(_sy)}", fnp.remainder, *_remainder_args(_sx, _sy, -1.0))
case("mod_operator-(5,)", lambda x, y: x % y, *_remainder_args((5,), (5,)))

# operators and Python scalars (weak types)
case("operators_mix-(2,3)-(3,)", lambda x, y: (x + 2.0) * y - x / (y * y + 1.0) + 3 - y, normal(2, 3), normal(3))
case("rsub_rtruediv-(4,)", lambda x: 2.0 - 3.0 / x, signed(0.5, 2.0, 4))

# power with integer / Python-scalar exponents
for _n in [0, 1, 2, 3, 5]:
    case(f"power-int{_n}-(2,3)", lambda x, n=_n: fnp.power(x, n), normal(2, 3))
for _n in [-1, -2, -3]:
    case(f"power-int{_n}-(2,3)", lambda x, n=_n: fnp.power(x, n), signed(0.5, 2.0, 2, 3))
case("power-int3-()", lambda x: fnp.power(x, 3), normal())
case("power-npint2-(3,)", lambda x: fnp.power(x, np.int64(2)), normal(3))
case("pow_operator-int2-(4,)", lambda x: x ** 2, normal(4))
case("pow_operator-float2.5-(4,)", lambda x: x ** 2.5, uniform(0.3, 2.0, 4))
case("pow_operator-float2.0-negbase-(4,)", lambda x: x ** 2.0, signed(0.3, 2.0, 4))
case("rpow_operator-2**x-(2,3)", lambda x: 2.0 ** x, normal(2, 3))
case("power-int_array_exponent-(3,)", lambda x: fnp.power(x, np.array([1, 2, 3])), uniform(0.4, 2.0, 3))
case("power-scalar_base-(3,)", lambda y: fnp.power(1.7, y), normal(3))

# where / clip
case("where-(3,1)-(4,)-()", lambda x, y: fnp.where(np.array([[True], [False], [True]]), x, y),
     normal(4), normal())
case("where-(2,3)-(2,3)", lambda x, y: fnp.where(np.array([[True, False, True], [False, False, True]]), x, y),
     normal(2, 3), normal(2, 3))
case("where-python_scalar_branches-(2,3)", lambda x: fnp.where(x > 0, x, 0.0) + fnp.where(x < 0, 1.0, x * x),
     signed(0.2, 2.0, 2, 3))
case("where-cond_from_values-(5,)", lambda x: fnp.where(x > 0, x * x, fnp.sin(x)), signed(0.2, 2.0, 5))
# clip bounds at 0.125 + k * 0.25: at least 0.075 away from every entry of distinct(...)
case("clip-const_bounds-(3,4)", lambda x: fnp.clip(x, -0.375, 0.625), distinct((3, 4)))
case("clip-min_only-(3,4)", lambda x: fnp.clip(x, a_min=-0.375), distinct((3, 4)))
case("clip-max_only-(3,4)", lambda x: fnp.clip(x, a_max=0.375), distinct((3, 4)))
case("clip-traced_bounds-(3,4)-(4,)-(3,1)", lambda x, lo, hi: fnp.clip(x, lo, hi),
     distinct((3, 4)), np.array([-0.375, -0.625, -0.125, -0.875]), np.array([[0.375], [0.625], [0.125]]))
case("clip-scalar-()", lambda x: fnp.clip(x, -1.0, 1.0), np.array(0.3))
case("clip_method-(5,)", lambda x: x.clip(-0.375, 0.375), distinct((5,)))

# --------------------------------------------------------------------------- reductions

_RED_AXES = [None, 0, 1, -1, (0, 2), (2, 0), (0, 1, 2)]

for _fname, _f, _gen in [
        ("sum", fnp.sum, lambda s: normal(*s)),
        ("mean", fnp.mean, lambda s: normal(*s)),
        ("var", fnp.var, lambda s: normal(*s)),
        ("std", fnp.std, lambda s: normal(*s)),
        ("prod", fnp.prod, lambda s: signed(0.5, 1.5, *s)),
        ("max", fnp.max, lambda s: distinct(s)),
        ("min", fnp.min, lambda s: distinct(s))]:
    for _axis in _RED_AXES:
        for _keep in [False, True]:
            case(f"{_fname}-axis={fmt(_axis) if isinstance(_axis, tuple) else _axis}-keepdims={_keep}-(2,3,4)",
                 lambda x, f=_f, axis=_axis, keep=_keep: f(x, axis=axis, keepdims=keep), _gen((2, 3, 4)))
    if _fname not in ("var", "std"):  # var of a scalar is identically 0, std = sqrt(0) has no derivative
        case(f"{_fname}-scalar-()", _f, _gen(()))
        case(f"{_fname}-scalar-keepdims-()", lambda x, f=_f: f(x, keepdims=True), _gen(()))
        case(f"{_fname}-size1-(1,)", _f, _gen((1,)))
    case(f"{_fname}-axis=(0,1)-size1axis-(3,1,2)", lambda x, f=_f: f(x, axis=(0, 1)), _gen((3, 1, 2)))
    case(f"{_fname}-axis=-1-keepdims-size1axis-(3,1,2)", lambda x, f=_f: f(x, axis=-1, keepdims=True),
         _gen((3, 1, 2)))
    case(f"{_fname}-axis=0-(5,)", lambda x, f=_f: f(x, axis=0), _gen((5,)))

case("var-ddof1-axis=1-(3,4)", lambda x: fnp.var(x, axis=1, ddof=1), normal(3, 4))
case("std-ddof1-keepdims-(3,4)", lambda x: fnp.std(x, axis=0, ddof=1, keepdims=True), normal(3, 4))
case("prod-with_zero-(2,3)", lambda x: fnp.prod(x, axis=1), np.array([[0.0, 1.3, -0.7], [0.9, 0.0, 0.0]]))
case("max-method-(3,4)", lambda x: x.max(axis=0), distinct((3, 4)))
case("sum-method-(3,4)", lambda x: x.sum(), normal(3, 4))
case("mean-method-(3,4)", lambda x: x.mean(axis=1), normal(3, 4))

# cumsum
case("cumsum-axis=None-(2,3)", lambda x: fnp.cumsum(x), normal(2, 3))
case("cumsum-axis=0-(3,4)", lambda x: fnp.cumsum(x, axis=0), normal(3, 4))
case("cumsum-axis=-1-(2,3,5)", lambda x: fnp.cumsum(x, axis=-1), normal(2, 3, 5))
case("cumsum-scalar-()", fnp.cumsum, normal())
case("cumsum-method-(2,3)", lambda x: x.cumsum(axis=1), normal(2, 3))
case("cumsum-nonlinear-(5,)", lambda x: fnp.cumsum(x * x), normal(5))

# --------------------------------------------------------------------------- shape ops

case("reshape-(2,3,4)->(4,6)", lambda x: fnp.reshape(x, (4, 6)), normal(2, 3, 4))
case("reshape-minus1-(2,3,4)", lambda x: fnp.reshape(x, (3, -1)), normal(2, 3, 4))
case("reshape-scalar->(1,1)", lambda x: fnp.reshape(x, (1, 1)), normal())
case("reshape-method-(6,)", lambda x: x.reshape(2, 3) * x.reshape((3, 2)).T, normal(6))
case("ravel-(2,3,4)", fnp.ravel, normal(2, 3, 4))
case("transpose-default-(2,3,4)", fnp.transpose, normal(2, 3, 4))
case("transpose-axes-(2,3,4)", lambda x: fnp.transpose(x, (1, 2, 0)), normal(2, 3, 4))
case("transpose-negaxes-(2,3,4)", lambda x: fnp.transpose(x, (-1, 0, 1)), normal(2, 3, 4))
case("T-property-(2,3)", lambda x: x.T * 2.0, normal(2, 3))
case("swapaxes-(2,3,4)", lambda x: fnp.swapaxes(x, 0, -1), normal(2, 3, 4))
case("moveaxis-(2,3,4)", lambda x: fnp.moveaxis(x, 0, -1), normal(2, 3, 4))
case("moveaxis-multi-(2,3,4,5)", lambda x: fnp.moveaxis(x, (0, 1), (-1, 0)), normal(2, 3, 4, 5))
case("expand_dims-(2,3)", lambda x: fnp.expand_dims(x, 1), normal(2, 3))
case("expand_dims-tuple-neg-(2,3)", lambda x: fnp.expand_dims(x, (0, -1)), normal(2, 3))
case("expand_dims-unsorted-(2,3)", lambda x: fnp.expand_dims(x, (3, 0)), normal(2, 3))
case("expand_dims-scalar", lambda x: fnp.expand_dims(x, 0), normal())
case("squeeze-all-(1,3,1,2)", fnp.squeeze, normal(1, 3, 1, 2))
case("squeeze-negaxis-(2,1)", lambda x: fnp.squeeze(x, -1), normal(2, 1))
case("squeeze-to_scalar-(1,)", fnp.squeeze, normal(1))
case("squeeze-axis-(1,3,1,2)", lambda x: fnp.squeeze(x, axis=2), normal(1, 3, 1, 2))
case("broadcast_to-(3,1)->(2,3,4)", lambda x: fnp.broadcast_to(x, (2, 3, 4)), normal(3, 1))
case("broadcast_to-scalar->(2,3)", lambda x: fnp.broadcast_to(x, (2, 3)), normal())
case("broadcast_to-(1,)->(5,)", lambda x: fnp.broadcast_to(x, 5), normal(1))
case("concatenate-axis0-(2,3)-(1,3)-(4,3)", lambda a, b, c: fnp.concatenate([a, b, c]),
     normal(2, 3), normal(1, 3), normal(4, 3))
case("concatenate-axis-1-(2,3)-(2,1)", lambda a, b: fnp.concatenate([a, b], axis=-1), normal(2, 3), normal(2, 1))
case("concatenate-axisNone-(2,3)-(4,)", lambda a, b: fnp.concatenate([a, b], axis=None), normal(2, 3), normal(4))
case("concatenate-same_operand_twice-(3,)", lambda a: fnp.concatenate([a, a * a]), normal(3))
case("stack-axis0-(2,3)x3", lambda a, b, c: fnp.stack([a, b, c]), normal(2, 3), normal(2, 3), normal(2, 3))
case("stack-axis-1-(3,)x2", lambda a, b: fnp.stack([a, b], axis=-1), normal(3), normal(3))
case("stack-axis1-(2,3)x2", lambda a, b: fnp.stack([a, b], axis=1), normal(2, 3), normal(2, 3))
case("concatenate-single-(3,)", lambda a: fnp.concatenate([a]), normal(3))
case("stack-scalars", lambda a, b: fnp.stack([a, b]), normal(), normal())
case("hstack-1d-(2,)-(3,)", lambda a, b: fnp.hstack([a, b]), normal(2), normal(3))
case("hstack-2d-(2,3)-(2,1)", lambda a, b: fnp.hstack([a, b]), normal(2, 3), normal(2, 1))
case("vstack-1d-(3,)-(3,)", lambda a, b: fnp.vstack([a, b]), normal(3), normal(3))
case("vstack-2d-(2,3)-(1,3)", lambda a, b: fnp.vstack([a, b]), normal(2, 3), normal(1, 3))
case("split-sections-(6,4)", lambda x: fnp.split(x, 3), normal(6, 4))
case("split-indices-axis1-(3,7)", lambda x: fnp.split(x, [2, 5], axis=1), normal(3, 7))
case("split-used_pieces-(5,)", lambda x: fnp.split(x, [1, 3])[0] * fnp.sum(fnp.split(x, [1, 3])[2]), normal(5))
case("split-negaxis-(2,4)", lambda x: fnp.split(x, 2, axis=-1), normal(2, 4))
case("split-empty_piece-(4,2)", lambda x: fnp.split(x, [2, 2, 9]), normal(4, 2))
case("array_split-(5,)", lambda x: fnp.array_split(x, 2), normal(5))
case("tile-int-(3,)", lambda x: fnp.tile(x, 2), normal(3))
case("tile-tuple-(2,3)", lambda x: fnp.tile(x, (2, 1, 3)), normal(2, 3))
case("repeat-int-axisNone-(2,3)", lambda x: fnp.repeat(x, 2), normal(2, 3))
case("repeat-int-axis1-(2,3)", lambda x: fnp.repeat(x, 3, axis=1), normal(2, 3))
case("repeat-array-axis0-(3,2)", lambda x: fnp.repeat(x, [2, 0, 3], axis=0), normal(3, 2))
case("flip-None-(2,3)", fnp.flip, normal(2, 3))
case("flip-axis-(2,3,4)", lambda x: fnp.flip(x, 1), normal(2, 3, 4))
case("flip-tuple-(2,3,4)", lambda x: fnp.flip(x, (0, -1)), normal(2, 3, 4))
case("fliplr_flipud-(3,4)", lambda x: fnp.fliplr(x) * fnp.flipud(x), normal(3, 4))
case("pad-int-(2,3)", lambda x: fnp.pad(x, 1), normal(2, 3))
case("pad-pairs-(2,3)", lambda x: fnp.pad(x, ((0, 2), (3, 1))), normal(2, 3))
case("pad-constant_values-(4,)", lambda x: fnp.pad(x, (2, 1), constant_values=1.5) ** 2, normal(4))
case("take-axisNone-(3,4)", lambda x: fnp.take(x, np.array([0, 11, 5, 5])), normal(3, 4))
case("take-axis1-neg-(3,4)", lambda x: fnp.take(x, np.array([-1, 0, -1]), axis=1), normal(3, 4))
case("take-axis0-2d_idx-(4,2)", lambda x: fnp.take(x, np.array([[0, 3], [3, 3]]), axis=0), normal(4, 2))
case("take-scalar_index-(5,)", lambda x: fnp.take(x, 2), normal(5))
case("take-scalar_negindex-axis1-(3,4)", lambda x: fnp.take(x, -1, axis=1), normal(3, 4))
case("take-method-(3,4)", lambda x: x.take(np.array([1, 1]), axis=0), normal(3, 4))
case("take_along_axis-negidx-(3,4)", lambda x: fnp.take_along_axis(x, np.array([[-1], [0], [-2]]), 1),
     normal(3, 4))
case("take_along_axis-3d-(2,3,4)", lambda x: fnp.take_along_axis(x, np.array([[[0, 3, 3]], [[2, 1, 0]]]), 2),
     normal(2, 3, 4))
case("take_along_axis-axis1-(3,4)", lambda x: fnp.take_along_axis(x, np.array([[0, 3], [1, 1], [2, 0]]), 1),
     normal(3, 4))
case("take_along_axis-axis0-bcast-(3,4)", lambda x: fnp.take_along_axis(x, np.array([[2], [0]]), 0), normal(3, 4))
case("take_along_axis-argsort-(5,)", lambda x: fnp.take_along_axis(x, np.argsort(np.arange(5)[::-1]), 0),
     normal(5))
case("diagonal-(3,4)", fnp.diagonal, normal(3, 4))
case("diagonal-offset1-(3,4)", lambda x: fnp.diagonal(x, 1), normal(3, 4))
case("diagonal-offset-1-(4,3)", lambda x: fnp.diagonal(x, -1), normal(4, 3))
case("diagonal-axes-(2,3,4)", lambda x: fnp.diagonal(x, 0, 1, 2), normal(2, 3, 4))
case("trace-(3,3)", fnp.trace, normal(3, 3))
case("trace-3d-(3,3,2)", fnp.trace, normal(3, 3, 2))
case("diagonal-swapped_axes-(3,4,2)", lambda x: fnp.diagonal(x, 1, 1, 0), normal(3, 4, 2))
case("trace-offset-(3,4)", lambda x: fnp.trace(x, 1), normal(3, 4))
case("diag-1d-(3,)", fnp.diag, normal(3))
case("diag-1d-k1-(3,)", lambda x: fnp.diag(x, 1), normal(3))
case("diag-1d-k-2-(2,)", lambda x: fnp.diag(x, -2), normal(2))
case("diag-2d-(3,4)", fnp.diag, normal(3, 4))
case("diag-2d-k-1-(3,3)", lambda x: fnp.diag(x, -1), normal(3, 3))

# --------------------------------------------------------------------------- linear algebra

case("dot-1d-1d-(4,)", fnp.dot, normal(4), normal(4))
case("dot-2d-1d-(3,4)-(4,)", fnp.dot, normal(3, 4), normal(4))
case("dot-1d-2d-(3,)-(3,4)", fnp.dot, normal(3), normal(3, 4))
case("dot-2d-2d-(2,3)-(3,5)", fnp.dot, normal(2, 3), normal(3, 5))
case("dot-scalar-()-(2,3)", fnp.dot, normal(), normal(2, 3))
case("dot-nd-(2,3,4)-(5,4,2)", fnp.dot, normal(2, 3, 4), normal(5, 4, 2))
case("dot-1d-nd-(3,)-(2,3,4)", fnp.dot, normal(3), normal(2, 3, 4))
case("dot-method-(2,3)-(3,)", lambda a, b: a.dot(b), normal(2, 3), normal(3))
case("dot-same_operand-(3,3)", lambda a: fnp.dot(a, a), normal(3, 3))
case("matmul-1d-1d-(3,)", fnp.matmul, normal(3), normal(3))
case("matmul-2d-1d-(2,3)-(3,)", fnp.matmul, normal(2, 3), normal(3))
case("matmul-1d-2d-(3,)-(3,2)", fnp.matmul, normal(3), normal(3, 2))
case("matmul-2d-2d-(2,3)-(3,4)", fnp.matmul, normal(2, 3), normal(3, 4))
case("matmul-batched-(2,3,4)-(2,4,5)", fnp.matmul, normal(2, 3, 4), normal(2, 4, 5))
case("matmul-bcast-(2,1,3,4)-(5,4,2)", fnp.matmul, normal(2, 1, 3, 4), normal(5, 4, 2))
case("matmul-bcast-(3,4)-(2,4,2)", fnp.matmul, normal(3, 4), normal(2, 4, 2))
case("matmul-bcast-(2,3,4)-(4,2)", fnp.matmul, normal(2, 3, 4), normal(4, 2))
case("matmul-1d-3d-(3,)-(2,3,4)", fnp.matmul, normal(3), normal(2, 3, 4))
case("matmul-3d-1d-(2,3,4)-(4,)", fnp.matmul, normal(2, 3, 4), normal(4))
case("matmul-operator-(2,3)-(3,2)", lambda a, b: a @ b, normal(2, 3), normal(3, 2))
case("matmul-size1-(1,3)-(3,1)", fnp.matmul, normal(1, 3), normal(3, 1))

for _subs, _shapes in [
        ("ij,jk->ik", [(2, 3), (3, 4)]),
        ("ij,jk", [(2, 3), (3, 4)]),
        ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
        ("i,j->ij", [(3,), (4,)]),
        ("ij->", [(2, 3)]),
        ("ij->ji", [(2, 3)]),
        ("ij->j", [(2, 3)]),
        ("ij,ij->i", [(2, 3), (2, 3)]),
        ("i,i->", [(5,), (5,)]),
        ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
        ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
        ("...ij,jk->...ik", [(2, 5, 3, 4), (4, 2)]),
        ("...i,...i->...", [(3, 4), (4,)]),
        ("bi,bj->bij", [(2, 3), (2, 4)]),
        ("bij,jk->bk", [(2, 3, 4), (4, 5)]),
        ("ij,kj->ki", [(1, 3), (4, 3)]),
        ("abc,cda->bd", [(2, 3, 4), (4, 5, 2)]),
        ("ij,ij->ij", [(1, 3), (4, 3)]),
        ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
        ("...i->...", [(2, 3)]),
        ("i,->i", [(3,), ()]),
        ("ij,jk,il->kl", [(2, 3), (3, 4), (2, 5)]),
        ("bi,bj,bk->bijk", [(2, 3), (2, 1), (2, 2)]),
        ("...ij,...jk", [(2, 3, 4), (4, 2)]),
        ("ij,k->k", [(2, 3), (4,)]),
        ("ijk->kij", [(2, 3, 4)])]:
    case(f"einsum-{_subs}-" + "-".join(map(fmt, _shapes)),
         lambda *ops, s=_subs: fnp.einsum(s, *ops), *[normal(*sh) for sh in _shapes])

case("outer-(3,)-(4,)", fnp.outer, normal(3), normal(4))
case("outer-2d-(2,2)-(3,)", fnp.outer, normal(2, 2), normal(3))
case("inner-1d-(4,)", fnp.inner, normal(4), normal(4))
case("inner-2d-(2,3)-(4,3)", fnp.inner, normal(2, 3), normal(4, 3))
case("inner-scalar-()-(3,)", fnp.inner, normal(), normal(3))
case("tensordot-axes2-(2,3,4)-(3,4,5)", fnp.tensordot, normal(2, 3, 4), normal(3, 4, 5))
case("tensordot-axes1-(2,3)-(3,4)", lambda a, b: fnp.tensordot(a, b, 1), normal(2, 3), normal(3, 4))
case("tensordot-axes0-(2,)-(3,)", lambda a, b: fnp.tensordot(a, b, 0), normal(2), normal(3))
case("tensordot-pairs-(3,4,5)-(5,2,3)", lambda a, b: fnp.tensordot(a, b, ((0, 2), (2, 0))),
     normal(3, 4, 5), normal(5, 2, 3))
case("tensordot-int_pair-(3,4)-(2,3)", lambda a, b: fnp.tensordot(a, b, (0, 1)), normal(3, 4), normal(2, 3))
case("vdot-(2,3)-(6,)", fnp.vdot, normal(2, 3), normal(6))

for _kw, _shape in [({}, (3, 4)), ({}, (5,)), ({"axis": 1}, (3, 4)), ({"axis": 0, "keepdims": True}, (3, 4)),
                    ({"keepdims": True}, (2, 3)), ({"ord": 1}, (5,)), ({"ord": 1, "axis": 0}, (3, 4)),
                    ({"ord": np.inf}, (5,)), ({"ord": -np.inf}, (5,)), ({"ord": 3}, (5,)),
                    ({"ord": 2, "axis": 1}, (3, 4)), ({"ord": "fro"}, (3, 4))]:
    # ord 1 / inf / -inf / 3 go through abs (kink at 0) and max/min of |x| (ties): distinct |x| > 0.2
    _x = distinct_abs(_shape) if _kw.get("ord") in (1, np.inf, -np.inf, 3) else normal(*_shape)
    _kwname = ",".join(f"{k}={v}" for k, v in _kw.items()) or "default"
    case(f"linalg.norm-{_kwname}-{fmt(_shape)}", lambda x, kw=_kw: fnp.linalg.norm(x, **kw), _x)

# --------------------------------------------------------------------------- indexing

_INDEX = [
    ("int", lambda x: x[1]),
    ("negint", lambda x: x[-1]),
    ("int_int", lambda x: x[2, -3]),
    ("int_int_int", lambda x: x[0, 1, 2]),
    ("slice", lambda x: x[1:3]),
    ("slice_step2", lambda x: x[::2]),
    ("slice_step2_axis1", lambda x: x[:, 1:5:2]),
    ("slice_step3_offset", lambda x: x[:, :, 1::3]),
    ("slice_negstep", lambda x: x[::-1]),
    ("slice_negstep2", lambda x: x[:, 4:0:-2]),
    ("slice_negstep_all_axes", lambda x: x[::-2, ::-1, -2::-3]),
    ("slice_negative_bounds", lambda x: x[-3:-1, :-2]),
    ("slice_empty", lambda x: x[2:2]),
    ("slice_negstep_negbounds", lambda x: x[-1:-6:-1]),
    ("slice_step_larger_than_axis", lambda x: x[:, ::7]),
    ("slice_out_of_range_bounds", lambda x: x[-100:100, 3:100]),
    ("npint", lambda x: x[np.int64(2), np.int32(-1)]),
    ("intarray_0d", lambda x: x[np.array(2)]),
    ("intarray_0d_and_1d", lambda x: x[np.array(1), :, np.array([0, 5])]),
    ("intarray_empty", lambda x: x[np.array([], dtype=np.int64)]),
    ("None_front", lambda x: x[None]),
    ("None_middle", lambda x: x[:, None, 1]),
    ("Ellipsis_int", lambda x: x[..., 1]),
    ("Ellipsis_front_slice", lambda x: x[1, ..., ::2]),
    ("Ellipsis_None", lambda x: x[..., None]),
    ("intarray", lambda x: x[np.array([0, 3, 1])]),
    ("intarray_repeated", lambda x: x[np.array([2, 2, 0, 2])]),
    ("intarray_negative", lambda x: x[np.array([-1, 0, -4])]),
    ("intarray_2d", lambda x: x[np.array([[0, 1], [3, 3]])]),
    ("list_index", lambda x: x[[1, 0, 1]]),
    ("intarray_axis1", lambda x: x[:, np.array([4, 0, 4])]),
    ("two_arrays_adjacent", lambda x: x[np.array([0, 3, 3]), np.array([1, -1, 1])]),
    ("two_arrays_broadcast", lambda x: x[np.array([[0], [2]]), np.array([1, 4, 4])]),
    ("two_arrays_nonadjacent", lambda x: x[np.array([0, 2, 2]), :, np.array([5, 0, 5])]),
    ("array_int_nonadjacent", lambda x: x[np.array([1, 3]), 2]),
    ("int_array", lambda x: x[1, np.array([0, 2, 2])]),
    ("slice_array", lambda x: x[1:, np.array([[0], [4]])]),
    ("array_Ellipsis", lambda x: x[..., np.array([0, -1])]),
    ("None_array", lambda x: x[None, np.array([0, 1]), ::2]),
    ("array_None_array", lambda x: x[np.array([0, 1]), None, np.array([1, 2])]),
    ("two_lists", lambda x: x[[0, 1], [1, 2]]),
    ("three_arrays", lambda x: x[np.array([3, 0]), np.array([[1], [4]]), np.array([5, 5])]),
    ("boolmask_list", lambda x: x[[True, False, False, True]]),
    ("boolmask_3d_all", lambda x: x[_idx_x > 0.5]),
    ("boolmask_axis0", lambda x: x[np.array([True, False, True, True])]),
    ("boolmask_2d", lambda x: x[np.array([[True, False, True, False, False],
                                          [False, False, False, False, True],
                                          [True, True, False, False, False],
                                          [False, False, False, False, False]])]),
    ("boolmask_then_slice", lambda x: x[np.array([False, True, True, False]), 1:3]),
    ("slice_then_boolmask", lambda x: x[:, np.array([True, False, False, True, True])]),
]
_idx_x = normal(4, 5, 6)  # (also the source of the boolmask_3d_all mask)
for _name, _f in _INDEX:
    case(f"getitem-{_name}-(4,5,6)", _f, _idx_x)
case("getitem-1d_scalar_result-(5,)", lambda x: x[3] * x[-5], normal(5))
case("getitem-Ellipsis_on_scalar-()", lambda x: x[...] * 2.0, normal())
case("getitem-None_on_scalar-()", lambda x: x[None], normal())
case("getitem-size1axis-(1,3)", lambda x: x[0, np.array([2, 0])], normal(1, 3))
case("getitem-traced_index-argmax-(5,)", lambda x: x[fnp.argmax(x)] * x[fnp.argmin(x) - 5], distinct((5,)))
case("getitem-traced_index_array-(3,4)", lambda x: x[:, fnp.argmax(x, axis=1)], distinct((3, 4)))
case("take_along_axis-traced_argmax-(3,4)", lambda x: fnp.take_along_axis(
    x, fnp.argmax(x, axis=1, keepdims=True), 1), distinct((3, 4)))
case("take-traced_index-(4,)", lambda x: fnp.take(fnp.sin(x), fnp.argmin(x)), distinct((4,)))
case("getitem-nonlinear_gather-(5,)", lambda x: fnp.sin(x)[np.array([1, 1, 4])] * x[np.array([0, 2, 3])], normal(5))

# --------------------------------------------------------------------------- aliases and small helpers

case("absolute-(3,)", fnp.absolute, signed(0.2, 2.0, 3))
case("amax-axis1-(3,4)", lambda x: fnp.amax(x, axis=1), distinct((3, 4)))
case("amin-(3,4)", fnp.amin, distinct((3, 4)))
case("fmax-(3,1)-(4,)", fnp.fmax, *distinct((3, 1), (4,)))
case("fmin-()-(3,)", fnp.fmin, *distinct((), (3,)))
case("mod-(2,3)-()", fnp.mod, *_remainder_args((2, 3), ()))
case("true_divide-(3,)-(3,)", fnp.true_divide, *_div_args((3,), (3,)))
case("positive-(3,)", lambda x: fnp.positive(x) * x, normal(3))
case("asarray_array-(3,)", lambda x: fnp.asarray(x) * fnp.array(x, dtype=np.float64), normal(3))
case("atleast_1d_2d-()", lambda x: fnp.atleast_2d(fnp.atleast_1d(x) * x), normal())
case("broadcast_arrays-(3,1)-(4,)", lambda x, y: fnp.broadcast_arrays(x, y), normal(3, 1), normal(4))
case("full-traced_fill-()", lambda v: fnp.full((2, 3), v) * v, normal())
case("full_like-traced_fill-(3,)", lambda x, v: fnp.full_like(x, v) * x, normal(3), normal())
case("average-axis0-(3,4)", lambda x: fnp.average(x, axis=0), normal(3, 4))
case("average-weights_same_shape-(3,4)-(3,4)", lambda x, w: fnp.average(x, axis=1, weights=w),
     normal(3, 4), uniform(0.5, 2.0, 3, 4))
case("average-weights_None_axis-(3,)-(3,)", lambda x, w: fnp.average(x, weights=w), normal(3), uniform(0.5, 2.0, 3))
# numpy.average accepts 1-D weights of length a.shape[axis]
case("average-weights_1d_along_axis-(3,4)-(4,)", lambda x, w: fnp.average(x, axis=1, weights=w), normal(3, 4), uniform(0.5, 2.0, 4))

# numpy functions and ufuncs applied to tracers dispatch to functrace.numpy
case("np_ufuncs-(2,3)", lambda x: np.sin(x) + np.exp(x) * np.square(x) - np.tanh(x) / np.cosh(x), normal(2, 3))
case("np_ufunc_binary-(3,1)-(4,)", lambda x, y: np.arctan2(x, y) + np.maximum(x, y) + np.hypot(x, y)
     + np.logaddexp(x, y) + np.power(np.abs(x), y), *distinct((3, 1), (4,), offset=0.1))  # |x|, |y| >= 0.1
case("ndarray_op_tracer-(2,3)", lambda x: np.arange(3.0) * x + np.ones((2, 3)) / (x * x + 1.0), normal(2, 3))
case("np_functions-(2,3)", lambda x: np.sum(x, axis=0) * np.mean(x) + np.max(x, axis=1).sum()
     + np.linalg.norm(x), distinct((2, 3)))
case("np_shape_functions-(2,3)", lambda x: np.concatenate([np.transpose(x), np.reshape(x, (3, 2))])
     @ np.expand_dims(np.diagonal(x), 1), normal(2, 3))
case("np_matmul-(2,3)-(3,)", lambda a, b: np.matmul(a, b) + np.dot(a, b) + np.einsum("ij,j->i", a, b),
     normal(2, 3), normal(3))

# --------------------------------------------------------------------------- primitives bound directly
# (primitives or parameters the functrace.numpy layer does not reach)

case("prim-rsqrt-(2,3)", lambda x: P.rsqrt_p.bind(x), uniform(0.3, 3.0, 2, 3))
case("prim-convert_element_type-f64-(3,)", lambda x: P.convert_element_type_p.bind(
    fnp.sin(x), new_dtype=np.dtype(np.float64)) * x, normal(3))
case("prim-cumsum-reverse-axis0-(4,3)", lambda x: P.cumsum(x, 0, reverse=True), normal(4, 3))
case("prim-cumsum-reverse-axis1-nonlinear-(2,5)", lambda x: P.cumsum(x * x, 1, reverse=True), normal(2, 5))
case("prim-integer_pow-neg3-(2,3)", lambda x: P.integer_pow(x, -3), signed(0.5, 2.0, 2, 3))
case("prim-integer_pow-4-()", lambda x: P.integer_pow(x, 4), normal())
case("prim-reduce_prod-axes(0,2)-(2,3,2)", lambda x: P.reduce_prod(x, (0, 2)), signed(0.5, 1.5, 2, 3, 2))
case("prim-reduce_prod-noaxes-(3,)", lambda x: P.reduce_prod(x, ()), normal(3))
case("prim-reduce_sum-unsorted_axes(2,0)-(2,3,4)", lambda x: P.reduce_sum(x * x, (2, 0)), normal(2, 3, 4))
case("prim-reduce_prod-unsorted_axes(2,0)-(2,3,2)", lambda x: P.reduce_prod(x, (2, 0)), signed(0.5, 1.5, 2, 3, 2))
case("prim-reduce_max-unsorted_axes(2,0)-(2,3,4)", lambda x: P.reduce_max_p.bind(x, axes=(2, 0)),
     distinct((2, 3, 4)))
case("prim-reduce_max-axes(1,)-(3,4)", lambda x: P.reduce_max_p.bind(x, axes=(1,)), distinct((3, 4)))
case("prim-reduce_min-axes(0,1)-(3,4)", lambda x: P.reduce_min_p.bind(x, axes=(0, 1)), distinct((3, 4)))
case("prim-rev-(2,3,4)", lambda x: P.rev(x, (0, 2)), normal(2, 3, 4))
case("prim-pad-interior-(3,)", lambda x, v: P.pad(x, v, ((1, 2, 1),)), normal(3), normal())
case("prim-pad-interior2d-(2,3)", lambda x, v: P.pad(x, v, ((0, 1, 2), (2, 0, 1))), normal(2, 3), normal())
case("prim-pad-value_squared-(2,2)", lambda x, v: P.pad(x * x, v * v, ((1, 1, 0), (0, 1, 1))), normal(2, 2), normal())
case("prim-pad-empty_operand-(0,2)", lambda x, v: P.pad(x, v, ((1, 1, 1), (1, 0, 0))), normal(0, 2), normal())
case("prim-slice-strided-(5,7)", lambda x: P.slice_op(x, (1, 0), (5, 7), (2, 3)), normal(5, 7))
case("prim-scatter_add-axis0-repeated-(4,3)", lambda x, u: P.scatter_add(x, np.array([1, 3, 1]), u, 0),
     normal(4, 3), normal(3, 3))
case("prim-scatter_add-axis1-2d_idx-(2,4)", lambda x, u: P.scatter_add(x, np.array([[0, 0], [3, 1]]), u, 1),
     normal(2, 4), normal(2, 2, 2))
case("prim-scatter_add-nonlinear-(3,)", lambda x, u: P.scatter_add(x * x, np.array([2, 2]), fnp.sin(u), 0),
     normal(3), normal(2))
case("prim-take-axis1-(2,3,4)", lambda x: P.take(x, np.array([[2, 0], [2, 2]]), 1), normal(2, 3, 4))
case("prim-broadcast_in_dim-(3,1)->(2,3,4)", lambda x: P.broadcast_in_dim(x, (2, 3, 4), (1, 2)), normal(3, 1))
case("prim-broadcast_in_dim-(3,)->(3,2)", lambda x: P.broadcast_in_dim(x, (3, 2), (0,)), normal(3))
case("prim-expand_dims-(2,3)", lambda x: P.expand_dims(x, (0, 3)), normal(2, 3))
case("prim-squeeze-(1,3,1)", lambda x: P.squeeze(x, (0, 2)), normal(1, 3, 1))
case("prim-select-(2,3)", lambda x, y: P.select(np.array([[True, False, True], [False, True, True]]), x, y),
     normal(2, 3), normal(3))
case("prim-dot_general-batch_not_leading-(3,4,5)-(5,3,2)", lambda x, y: P.dot_general(
    x, y, (((2,), (0,)), ((0,), (1,)))), normal(3, 4, 5), normal(5, 3, 2))
case("prim-dot_general-unsorted_contract-(2,3,4)-(4,5,3)", lambda x, y: P.dot_general(
    x, y, (((2, 1), (0, 2)), ((), ()))), normal(2, 3, 4), normal(4, 5, 3))
case("prim-dot_general-two_batch-(2,3,4)-(3,4,2)", lambda x, y: P.dot_general(
    x, y, (((2,), (1,)), ((1, 0), (0, 2)))), normal(2, 3, 4), normal(3, 4, 2))
case("prim-concatenate-dim1-(2,1)-(2,3)", lambda x, y: P.concatenate([x, y, x], 1), normal(2, 1), normal(2, 3))
case("prim-atan2-(3,)", lambda x, y: P.atan2_p.bind(x, y), normal(3), signed(0.5, 2, 3))
case("prim-pow-traced_exponent-(3,)", lambda x, y: P.pow(x, y), uniform(0.3, 2.0, 3), normal(3))
case("prim-rem-(3,)", lambda x, y: P.rem_p.bind(x, y), *_remainder_args((3,), (3,)))
case("prim-logistic-(4,)", lambda x: P.logistic_p.bind(x), normal(4))
case("prim-max-(3,)", lambda x, y: P.max_p.bind(x, y), *distinct((3,), (3,)))
case("prim-min-(3,)", lambda x, y: P.min_p.bind(x, y), *distinct((3,), (3,)))
# cbrt, fmod, copysign (issue 16): away from cbrt's pole at 0, fmod's jumps and copysign's kink
case("cbrt-(2,3)", fnp.cbrt, signed(0.3, 2.0, 2, 3))
case("fmod-(3,)x(2,3)", fnp.fmod, np.array([2.3, -1.3, 5.1]), np.array([[1.1, 0.7, -2.1], [-0.9, 0.6, 1.6]]))
case("copysign-(4,)", fnp.copysign, signed(0.3, 2.0, 4), signed(0.3, 2.0, 4))


# --------------------------------------------------------------------------- control flow, custom rules, remat


@ft.custom_jvp
def _softplus(x):
    return fnp.log1p(fnp.exp(x))


@_softplus.defjvp
def _softplus_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _softplus(x), t * fnp.sigmoid(x)


@ft.custom_vjp
def _scaled_sin(x, y):
    return fnp.sin(x) * y


def _scaled_sin_fwd(x, y):
    return _scaled_sin(x, y), (x, y)


def _scaled_sin_bwd(res, g):
    x, y = res
    return g * fnp.cos(x) * y, g * fnp.sin(x)


_scaled_sin.defvjp(_scaled_sin_fwd, _scaled_sin_bwd)

case("lax-cond-true_branch", lambda x: ft.lax.cond(fnp.sum(x) > 0, lambda v: fnp.sin(v) * v, fnp.cos, x),
     uniform(0.1, 1.0, 3))
case("lax-cond-false_branch-closure", lambda x, w: ft.lax.cond(fnp.sum(x) > 0, lambda v: v * w, lambda v: fnp.exp(v) * w, x),
     uniform(-1.0, -0.1, 3), normal(3))
case("lax-switch-3_branches", lambda x: ft.lax.switch(2, [fnp.sin, fnp.cos, lambda v: v ** 3], x), normal(2, 2))
case("lax-scan-(2,)x4", lambda c, xs: ft.lax.scan(lambda c, x: (fnp.sin(c) * x + c, c * x), c, xs), normal(2), normal(4, 2))
case("lax-scan-reverse-closure", lambda w, xs: ft.lax.scan(lambda c, x: (fnp.tanh(c * w + x), c ** 2), fnp.zeros(2),
                                                            xs, reverse=True)[1], normal(2), normal(3, 2))
case("lax-scan-pytree_carry", lambda a, b: ft.lax.scan(lambda c, x: ((c[0] * x, c[1] + fnp.sin(c[0])), None),
                                                      (a, b), np.array([0.5, 1.5, -0.7]))[0], normal(2), normal(2))
case("lax-fori_loop-static_bounds", lambda x: ft.lax.fori_loop(0, 3, lambda i, v: fnp.sin(v) * 1.1 + v * 0.5, x), normal(3))
case("custom_jvp-softplus", _softplus, normal(3))
case("checkpoint-nothing_saveable", ft.checkpoint(lambda x: fnp.sum(fnp.sin(fnp.sin(x)) * x)), normal(3))
case("checkpoint-dots_saveable", ft.checkpoint(lambda w, x: fnp.tanh(x @ w) * 2.0,
                                               policy=ft.checkpoint_policies.dots_saveable), normal(2, 3), normal(4, 2))

case("nn-rms_norm-(2,3,5)", ft.nn.rms_norm, normal(2, 3, 5), normal(5))
case("nn-attention-causal-(2,3,2,2)", lambda q, k, v: ft.nn.attention(q, k, v, causal=True),
     normal(2, 3, 2, 2), normal(2, 3, 2, 2), normal(2, 3, 2, 2))
case("nn-gelu-exact-(4,)", lambda x: ft.nn.gelu(x, approximate=False), normal(4))
case("nn-softmax-(2,3,4)", lambda x: ft.nn.softmax(x) * x, normal(2, 3, 4))
case("nn-log_softmax-(3,5)", ft.nn.log_softmax, normal(3, 5))

case("lax-conv_general_dilated-strided_dilated_grouped", lambda x, w: ft.lax.conv_general_dilated(
    x, w, (2, 1), ((1, 0), (0, 1)), lhs_dilation=(1, 2), rhs_dilation=(2, 1), feature_group_count=2),
    normal(2, 4, 5, 3), normal(4, 2, 2, 2))
case("nn-rms_norm_bwd-(3,4)", lambda x, w: ft.grad(lambda x, w: fnp.sum(ft.nn.rms_norm(x, w) ** 2), (0, 1))(x, w),
     normal(3, 4), normal(4))
case("nn-attention_bwd-(3,2,2)", lambda q, k: ft.grad(lambda q, k: fnp.sum(ft.nn.attention(q, k, k) ** 2), (0, 1))(q, k),
     normal(3, 2, 2), normal(3, 2, 2))

# functrace.numpy.linalg: one case per decomposition primitive (tests/test_linalg.py has the rest)
_SQUARE = normal(3, 3) + 3 * np.eye(3)
case("linalg-solve", fnp.linalg.solve, _SQUARE, normal(3, 2))
case("linalg-det", fnp.linalg.det, _SQUARE)
case("linalg-slogdet", lambda a: fnp.linalg.slogdet(a)[1], _SQUARE)
case("linalg-cholesky", lambda a: fnp.linalg.cholesky(a @ a.T), _SQUARE)
case("linalg-triangular_solve", lambda a, b: fnp.linalg.triangular_solve(a, b, lower=False), _SQUARE, normal(3, 2))
case("linalg-eigh", lambda a: fnp.linalg.eigh(a)[1] ** 2 * fnp.linalg.eigh(a)[0], _SQUARE @ _SQUARE.T)
case("linalg-svd", lambda a: [v ** 2 for v in fnp.linalg.svd(a, full_matrices=False)], normal(4, 3))
case("linalg-qr", lambda a: list(fnp.linalg.qr(a)), normal(4, 3))
case("linalg-eig", lambda a: [fnp.abs(fnp.linalg.eig(a)[1]), fnp.linalg.eig(a)[0].imag], normal(3, 3))
case("scipy-linalg-lu_solve", lambda a, b: ft.scipy.linalg.lu_solve(ft.scipy.linalg.lu_factor(a), b), _SQUARE, normal(3))

case("scipy-special-erfc", ft.scipy.special.erfc, normal(5))

# functrace.numpy.fft and complex intermediates (real inputs and outputs)
case("fft-rfft_irfft_filter", lambda a, w: fnp.fft.irfft(fnp.fft.rfft(a) * w), normal(8), normal(5))
case("fft-complex_parts", lambda a, b: [fnp.fft.fft(P.complex_(a, b)).real, fnp.fft.ifft(P.complex_(b, a)).imag,
                                        fnp.abs(fnp.fft.fft(a) * fnp.fft.fft(b).conj())], normal(6), normal(6))

# collectives over the process group: one member here (tests/test_collectives.py checks them under
# vmap(axis_name=...) with three, tests/test_distributed.py over two MPI processes)
case("lax-psum-pmax-pmin-ppermute-processes", lambda x: fnp.sin(ft.lax.psum(x, "processes")) * ft.lax.pmax(x, "processes")
     + ft.lax.pmin(x * x, "processes") * ft.lax.ppermute(x, "processes", [(0, 0)]), normal(3))
case("lax-all_gather-psum_scatter-all_to_all-processes", lambda x: ft.lax.psum_scatter(
    ft.lax.all_to_all(ft.lax.all_gather(fnp.sin(x), "processes"), "processes", 0, 2) * x[:, :, None], "processes",
    scatter_dimension=2), normal(2, 1))
# ft.nn activations (inputs away from their kinks) and erf_inv; ft.random's parameters
_KEY = np.array([0, 7], np.uint32)
case("nn-erf_inv-(5,)", ft.nn.erf_inv, uniform(-0.9, 0.9, 5))
case("nn-leaky_relu", ft.nn.leaky_relu, signed(0.1, 2.0, 6))
case("nn-elu", ft.nn.elu, signed(0.1, 2.0, 6))
case("nn-selu", ft.nn.selu, signed(0.1, 2.0, 6))
case("nn-celu", lambda x: ft.nn.celu(x, alpha=1.5), signed(0.1, 2.0, 6))
case("nn-glu-(3,4)", ft.nn.glu, normal(3, 4))
case("nn-relu6", ft.nn.relu6, np.array([-1.0, 0.4, 2.5, 5.5, 7.0]))
case("nn-hard_tanh", ft.nn.hard_tanh, np.array([-1.7, -0.6, 0.3, 0.8, 1.4]))
case("nn-hard_sigmoid", ft.nn.hard_sigmoid, np.array([-3.5, -1.2, 0.7, 2.4, 3.3]))
case("nn-hard_silu", ft.nn.hard_silu, np.array([-3.5, -1.2, 0.7, 2.4, 3.3]))
case("nn-softplus", ft.nn.softplus, normal(5))
case("nn-log_sigmoid", ft.nn.log_sigmoid, normal(5))
case("nn-standardize-(3,5)", ft.nn.standardize, normal(3, 5))
case("nn-dropout-(4,5)", lambda x: ft.nn.dropout(_KEY, 0.3, x), normal(4, 5))
case("random-uniform-minval_maxval", lambda lo, hi: ft.random.uniform(_KEY, (4,), np.float64, lo, hi),
     np.array(-0.5), np.array(1.5))
case("random-truncated_normal-bounds", lambda lo, hi: ft.random.truncated_normal(_KEY, lo, hi, (4,), np.float64),
     np.array(-1.2), np.array(0.9))
# sorting, functional updates, scans (functrace/primitives: sorting.py, scatter.py, basic.py)
_DUP = np.array([0, 2, 2, -1, 0])  # repeated and negative indices
case("at-set-repeated_indices", lambda x, u: fnp.asarray(x).at[_DUP].set(u) * x, normal(4), normal(5))
case("at-add-(3,4)[1:,::2]", lambda x, u: fnp.sin(fnp.asarray(x).at[1:, ::2].add(u)), normal(3, 4), normal(2, 2))
case("at-multiply-zeros_and_repeats", lambda x, u: fnp.asarray(x).at[_DUP].multiply(u * np.array([1, 0, 1, 1, 0])),
     normal(4), normal(5))
case("at-max-repeated_indices", lambda x, u: fnp.asarray(x).at[_DUP].max(u), *distinct((4,), (5,)))
case("at-min-(3,3)[[0,2],1]", lambda x, u: fnp.asarray(x).at[[0, 2], 1].min(u), *distinct((3, 3), (2,)))
case("sort-(3,5)-axis0", lambda x: fnp.sort(x, axis=0) * np.arange(5.0), distinct((3, 5)))
case("quantile-linear-(7,)", lambda x: fnp.quantile(x, np.array([0.1, 0.5, 0.95])), distinct((7,)))
case("cumprod-with_zero", lambda x: fnp.cumprod(x * np.array([1, 1, 0, 1, 1.0])), normal(5))
case("prod-with_zero-axis1", lambda x: fnp.prod(x * np.array([[1, 0, 1.0]]), axis=1), normal(2, 3))
case("lax-cummax", lambda x: ft.lax.cummax(x, reverse=True), distinct((6,)))
case("lax-top_k", lambda x: ft.lax.top_k(x, 2)[0], distinct((2, 5)))
case("lax-dynamic_update_slice", lambda x, u: ft.lax.dynamic_update_slice(x, u, (1, 5)), normal(3, 4), normal(2, 2))

# while_loop has forward mode only (a dynamic trip count, as in JAX); custom_vjp reverse mode only.
FWD_ONLY_CASES = [pytest.param(lambda x: ft.lax.while_loop(lambda v: v[0] < 5.0, lambda v: v * 1.5 + 0.1, x),
                               (np.array([0.8, 0.6]),), id="lax-while_loop"),
                  pytest.param(lambda x: ft.lax.fori_loop(0, fnp.asarray(3), lambda i, v: fnp.sin(v) + v, x),
                               (np.array([0.3, 0.4]),), id="lax-fori_loop-traced_bounds")]
REV_ONLY_CASES = [pytest.param(_scaled_sin, (np.array([0.3, -0.4]), np.array([1.5, 2.0])), id="custom_vjp")]


@pytest.mark.parametrize("f, args", FWD_ONLY_CASES)
def test_grads_forward_only(f, args):
    ft.test_util.check_grads(f, args, order=2, modes=("fwd",))


@pytest.mark.parametrize("f, args", REV_ONLY_CASES)
def test_grads_reverse_only(f, args):
    ft.test_util.check_grads(f, args, order=2, modes=("rev",))


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("f, args", CASES)
def test_grads(f, args):
    ft.test_util.check_grads(f, args, order=2, modes=("fwd", "rev"))


# Primitives with no (nonzero) derivative: they need no gradient coverage, and the registry marks
# them (``differentiable = False``: their outputs carry no derivative).
NON_DIFFERENTIABLE = {
    "eq", "ne", "lt", "le", "gt", "ge",  # comparisons: boolean outputs
    "and", "or", "xor", "not",           # logical / bitwise ops
    "sign", "floor", "ceil", "round",    # piecewise constant: zero derivative almost everywhere
    "is_finite",                          # boolean output
    "signbit",                            # boolean output
    "argmax", "argmin",                   # integer outputs
    "argsort",                            # an integer permutation
    "floor_div",                          # piecewise constant
    "iota",                               # no operands
    "stop_gradient",                      # blocks derivatives by design
    "lu_factor",                          # solver data: lu_solve differentiates through its matrix
    "lu_pivots_to_permutation",           # integer outputs
    "shift_left", "shift_right_logical", "bitcast_convert_type", "threefry2x32",  # bits (ft.random)
    "debug_callback",                     # no outputs: an effect (tests/test_debug.py runs it under grad)
    "axis_index",                         # integer output
}


# Primitives whose derivative rules raise by design (tests/test_callback.py checks the error).
REFUSES_DERIVATIVES = {"pure_callback": "an opaque Python function: raises, as JAX, pointing at custom_jvp"}


# Rules a primitive legitimately lacks, with the reason.
NO_RULE = {("iota", "batch"): "no operands: a batched value never reaches it",
           ("axis_index", "batch"): "no operands: a batched value never reaches it (a vmap binding its "
                                    "axis name has its own rule)"}


def test_every_primitive_has_jvp_vjp_and_batching_rules():
    """Registry coverage: a rule per transformation, or the explicit non-differentiable marking
    (forward mode with a missing rule gave a zero tangent, silently)."""
    missing = set()
    for name, p in P.registry.items():
        if p.differentiable:
            missing |= {(name, "jvp")} if p.jvp is None and p.jvp_rule is None else set()
            missing |= {(name, "vjp")} if p.vjp is None and p.vjp_rule is None else set()
        missing |= {(name, "batch")} if p.batch is None else set()
    assert missing == set(NO_RULE), sorted(missing ^ set(NO_RULE))
    marked = {name for name, p in P.registry.items() if not p.differentiable}
    assert marked == NON_DIFFERENTIABLE, sorted(marked ^ NON_DIFFERENTIABLE)


_BIT_OPERANDS = {"shift_left": 2, "shift_right_logical": 2, "threefry2x32": 4}


@pytest.mark.parametrize("name", sorted(NON_DIFFERENTIABLE - {"iota", "debug_callback", "axis_index"}))
def test_non_differentiable_primitives_carry_no_derivative(name):
    """Their outputs are constants to every derivative: float() of one works under grad, and
    forward and reverse mode give the zero derivative."""
    p = P.registry[name]
    x = distinct(4) + 0.3
    arity = 2 if name in {"eq", "ne", "lt", "le", "gt", "ge", "and", "or", "xor", "floor_div"} else 1

    def f(v):
        ops = [v > 0] * arity if name in {"and", "or", "xor", "not"} else [v] * arity
        if name in _BIT_OPERANDS:  # uint32 operands
            ops = [P.convert_element_type(fnp.abs(v) * 7.0, np.uint32)] * _BIT_OPERANDS[name]
        params = {"axis": 0} if name in {"argmax", "argmin"} else {"descending": False} if name == "argsort" else {}
        params = {"new_dtype": np.dtype(np.int64)} if name == "bitcast_convert_type" else params
        if name == "lu_factor":  # a square matrix in, (factors, pivots) out
            out = p.bind(fnp.outer(v, v) + 4 * fnp.eye(4))[0]
        elif name == "lu_pivots_to_permutation":  # row swaps in, a row order out
            out = p.bind(fnp.asarray(v > 0, np.int32), size=4)
        else:
            out = p.bind(*ops, **params)
            out = fnp.stack(out) if p.multiple_results else out
        return fnp.sum(fnp.asarray(out, np.float64)) * float(fnp.sum(fnp.asarray(out, np.float64)))
    np.testing.assert_array_equal(ft.grad(f)(x), np.zeros(4))
    assert ft.jvp(f, (x,), (np.ones(4),))[1] == 0.0


def test_every_differentiable_primitive_is_covered():
    seen, trace_errors = set(), {}
    for param in CASES + FWD_ONLY_CASES + REV_ONLY_CASES:
        f, args = param.values
        try:
            closed = ft.make_jaxpr(f)(*args)
        except Exception as e:  # listed in the coverage failure message
            trace_errors[param.id] = f"{type(e).__name__}: {e}"
            continue
        seen.update(eqn.primitive.name for eqn in closed.eqns)
    assert NON_DIFFERENTIABLE <= set(P.registry), sorted(NON_DIFFERENTIABLE - set(P.registry))
    missing = set(P.registry) - NON_DIFFERENTIABLE - set(REFUSES_DERIVATIVES) - seen
    # (a case that cannot be traced also fails in test_grads; it is listed here in case it
    # was the only one reaching a primitive)
    assert not missing, (f"differentiable primitives not reached by any case: {sorted(missing)}\n"
                         "cases that make_jaxpr could not trace:\n" +
                         "\n".join(f"  {k}: {v}" for k, v in trace_errors.items()))


def test_case_ids_are_unique():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})
