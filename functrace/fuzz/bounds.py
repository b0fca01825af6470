"""The fuzzer's reference: a program's IR interpreted in float64 (long double for float64
programs) on :class:`Bound` values, each element with a bound on the error any correct
implementation in the program's dtype may make (running error analysis), so results are checked
against what is provably allowed rather than against each other or a tuned tolerance.

Elementwise ops take the spread of their result over the corners of their operands' error boxes
plus a few ulp (more for transcendentals), sums add ``n`` ulp of the sum of magnitudes, products
``K`` ulp of ``|A| @ |B|``, and comparisons that rounding could flip carry their uncertainty on.
Values keep the dtype's range (IEEE semantics): one beyond it by more than its bound is the
infinity every correct implementation gives there, so ``inf - inf`` after it is a certain NaN.
Integer and bool values are exact (numpy's wrap-around included) unless an uncertain comparison
fed them.
What each primitive needs is in tables keyed by the primitive objects (``ULPS``, ``PERIODIC``,
``STRUCTURAL``, ``RULES``, ``FUSED_REFERENCES``).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from .. import primitives as P
from ..core import ClosedJaxpr, Literal
from ..primitives import control
from ..primitives import nn as fused
from ..primitives.scatter import scatter_p
from ..primitives.special import erf_p
from ..transforms.staging import make_jaxpr


@dataclass
class Bound:
    """A reference value ``v`` (float64 / long double, or exact bool / int), the bound ``e`` on
    the error of any correct computation of it (``inf``: anything goes there), and ``tie``: where
    the value is exactly one of several near-equal candidates (a max of near ties), so exact
    equality with one of them is not certain."""
    v: np.ndarray
    e: np.ndarray
    tie: np.ndarray | None = None


# Facts about primitives, keyed by the primitive objects (a primitive missing from a table gets
# the default: a transcendental's rounding, not periodic, not structural).
TRANSCENDENTAL = frozenset({P.sin_p, P.cos_p, P.tan_p, P.tanh_p, P.exp_p, P.expm1_p, P.log_p, P.log1p_p,
                            P.logistic_p, P.atan2_p, erf_p, P.pow_p})
TRANSCENDENTAL_ULPS = 16
# operations whose result is exactly the value they define (x ** n: its roundings are counted
# in _extra_local; x // y and x % y: their jumps in _quotient_jumps)
EXACT = frozenset({P.neg_p, P.abs_p, P.sign_p, P.floor_p, P.ceil_p, P.round_p, P.is_finite_p, P.not_p, P.and_p,
                   P.or_p, P.xor_p, P.max_p, P.min_p, P.eq_p, P.ne_p, P.lt_p, P.le_p, P.gt_p, P.ge_p, P.select_p,
                   P.copysign_p, P.signbit_p, P.shift_left_p, P.shift_right_logical_p, P.floor_div_p, P.fmod_p,
                   P.integer_pow_p})
# ulp of local rounding per primitive (OpenCL full-profile limits, rounded up); absent: a
# transcendental's, so a function added later is not held to an exact result
ULPS = {P.add_p: 1, P.sub_p: 1, P.mul_p: 1, P.div_p: 3, P.sqrt_p: 3, P.rsqrt_p: 3, P.rem_p: 2,
        P.convert_element_type_p: 1, **dict.fromkeys(EXACT, 0), **dict.fromkeys(TRANSCENDENTAL, TRANSCENDENTAL_ULPS)}
PERIODIC = {P.sin_p: 2.0, P.cos_p: 2.0, P.tan_p: np.inf}  # an operand error of a radian or more: any value
# the output's elements are some of the input's elements: the bound moves with them
STRUCTURAL = frozenset({P.broadcast_in_dim_p, P.reshape_p, P.transpose_p, P.squeeze_p, P.expand_dims_p,
                        P.rev_p, P.slice_p, P.stop_gradient_p})


class BoundInterpreter:
    """Interprets a jaxpr on :class:`Bound` values.  ``dtype`` is the program's float dtype: its
    unit roundoff scales every local error, its range decides where a value may overflow."""

    def __init__(self, dtype):
        info = np.finfo(dtype)
        self.dtype = np.dtype(dtype)
        self.u = float(info.eps) / 2
        self.tiny = float(info.tiny)  # flush-to-zero or underflow: this much absolute error per op
        self.big = float(info.max)
        self.hp = np.longdouble if np.dtype(dtype) == np.float64 else np.float64
        self._references: dict = {}

    # ---- entry points
    def run(self, closed: ClosedJaxpr, args: list) -> list:
        return self.eval(closed.jaxpr, [self.exact(c) for c in closed.consts], args)

    def exact(self, x) -> Bound:
        """An exact value of the program: a float is first rounded to the program's dtype (the
        reference is traced at float64, where a literal 0.1 would otherwise stay unrounded)."""
        v = np.asarray(x)
        if v.dtype.kind == "f":
            v = v.astype(self.dtype).astype(self.hp)
        return Bound(v, np.zeros(v.shape))

    def eval(self, jaxpr, consts: list, args: list) -> list:
        env = dict(zip(jaxpr.const_vars, consts))
        env.update(zip(jaxpr.in_vars, args))
        read = lambda a: self.exact(a.val) if type(a) is Literal else env[a]
        for eqn in jaxpr.eqns:
            outs = self.apply(eqn.primitive, [read(a) for a in eqn.inputs], eqn.params)
            env.update(zip(eqn.out_vars, outs))
        return [read(a) for a in jaxpr.outs]

    def apply(self, prim, ins: list, params: dict) -> list:
        with np.errstate(all="ignore"):
            if prim in STRUCTURAL:
                return [self._structural(prim, ins[0], params)]
            rule = RULES.get(prim)
            if rule is not None:
                out = rule(self, prim, ins, params)
                return out if isinstance(out, list) else [out]
            if prim.elementwise or prim is P.integer_pow_p:
                return [self._elementwise(prim, ins, params)]
            if prim.inline_body is not None:
                body = params[prim.inline_body]
                return self.eval(body.jaxpr, [self.exact(c) for c in body.consts], ins)
            if prim in FUSED_REFERENCES:
                return self._fused(prim, ins, params)
        raise NotImplementedError(f"fuzz: no error-bound rule for primitive {prim.name!r}")

    # ---- helpers
    def _finish(self, v, e, tie=None) -> Bound:
        """Cap a new value's bound: NaN bounds are unknown (inf); a finite value beyond the
        dtype's range by more than its bound is the infinity of its sign (certain); one whose
        bound reaches the range may overflow there; a non-finite value stays certain only if
        its bound is finite."""
        v = np.asarray(v)
        e = np.asarray(e, dtype=np.float64)
        if v.dtype.kind != "f":
            return Bound(v, np.broadcast_to(np.where(np.isnan(e), np.inf, e), v.shape), tie)
        finite = np.isfinite(v)
        e = np.where(np.isnan(e), np.inf, e)
        mag = np.abs(v.astype(np.float64))
        over = finite & (mag - e > self.big * (1 + 4 * self.u))
        v = np.where(over, np.copysign(np.inf, v), v).astype(v.dtype)
        e = np.where(finite & ~over, np.where(mag + e >= self.big, np.inf, e), np.where(np.isfinite(e), 0.0, np.inf))
        return Bound(v, np.broadcast_to(e, v.shape), tie)

    def _integer(self, prim, ins: list, params: dict) -> Bound:
        """An integer or bool result of integer or bool operands: exact, or anything where an
        operand is uncertain (a count of comparisons rounding could flip)."""
        v = np.asarray(prim.impl(*[b.v for b in ins], **params))
        unsure = any(np.any(b.e) for b in ins)
        return Bound(v, np.full(v.shape, np.inf if unsure else 0.0))

    def _local(self, prim, v) -> np.ndarray | float:
        """Rounding of one operation, and its result (or operand) flushed to zero below the
        normal range (a driver may flush subnormals even in exact operations)."""
        return ULPS.get(prim, TRANSCENDENTAL_ULPS) * self.u * magnitude(v) + self.tiny

    @staticmethod
    def _spread(v, candidates) -> np.ndarray:
        """The largest distance from ``v`` to a candidate result (inf where one is non-finite and
        ``v`` is not, or where a non-finite ``v`` is not reproduced exactly)."""
        v = np.asarray(v)
        spread = np.zeros(v.shape)
        for c in candidates:
            c = np.asarray(c)
            if v.dtype.kind != "f":
                d = np.where(c != v, np.abs(c.astype(np.float64) - v.astype(np.float64)), 0.0)
            else:
                same = (c == v) | (np.isnan(c) & np.isnan(v))
                d = np.where(np.isfinite(v), np.abs(c - v).astype(np.float64), np.where(same, 0.0, np.inf))
                d = np.where(np.isnan(d), np.inf, d)
            spread = np.maximum(spread, d)
        return spread

    def _corners(self, b: Bound) -> list:
        """The values an operand may take within its bound (itself when exact)."""
        if not np.any(b.e):
            return [b.v]
        if b.v.dtype == bool:
            return [b.v, np.where(b.e > 0, ~b.v, b.v)]
        if b.v.dtype.kind in "iu":
            step = np.ceil(b.e).astype(b.v.dtype)
            return [b.v - step, b.v + step]
        e = b.e.astype(self.hp)
        return [b.v - e, b.v + e]

    @staticmethod
    def _tie_union(ins: list, shape) -> np.ndarray | None:
        ties = [np.broadcast_to(b.tie, shape) for b in ins if b.tie is not None]
        return np.logical_or.reduce(ties) if ties else None

    # ---- elementwise (corners of the operands' error boxes)
    def _elementwise(self, prim, ins: list, params: dict) -> Bound:
        v = prim.impl(*[b.v for b in ins], **params)
        v = np.asarray(v)
        corner_sets = [self._corners(b) for b in ins]
        cands = [prim.impl(*combo, **params) for combo in itertools.product(*corner_sets)] \
            if any(len(c) > 1 for c in corner_sets) else []
        e = self._spread(v, cands)
        if v.dtype.kind == "f":
            e = e + self._local(prim, v) + self._extra_local(prim, ins, params, v)
            if prim in PERIODIC:
                e = np.where(np.broadcast_to(ins[0].e, v.shape) >= 1.0, np.maximum(e, PERIODIC[prim]), e)
            if prim is P.rem_p or prim is P.floor_div_p:
                e = np.maximum(e, self._quotient_jumps(prim, ins))
            e = np.where(np.broadcast_to(self._pole_inside(prim, ins, params), v.shape), np.inf, e)
        return self._finish(v, np.where(self._unknown(ins, v.shape), np.inf, e), self._tie_union(ins, v.shape))

    @staticmethod
    def _unknown(ins: list, shape) -> np.ndarray:
        """Where an operand may be anything, NaN included (its corners would hide that: the same
        NaN or inf again, or, for a bounded function as arctan2, finite values either side)."""
        out = np.zeros(shape, bool)
        for b in ins:
            if np.asarray(b.v).dtype.kind == "f":
                out |= np.broadcast_to(np.isinf(b.e), shape)
        return out

    def _pole_inside(self, prim, ins: list, params: dict) -> np.ndarray | bool:
        """Where an operand's error interval contains a pole (corners on both sides of it see
        two finite values, not the unbounded ones between): a divisor, the base of a negative
        power, tan's argument at pi/2 + k pi; or, for a negative base, an integer exponent (the
        only ones it is defined at, which rounding may reach: corners between see NaN)."""
        def around_zero(b: Bound, value) -> np.ndarray:  # |d value / d b| <= 1 for these
            return (b.e > 0) & (np.abs(np.asarray(value, np.float64)) <= b.e)
        if prim is P.div_p:
            return around_zero(ins[1], ins[1].v)
        if prim is P.integer_pow_p and params["y"] < 0:
            return around_zero(ins[0], ins[0].v)
        if prim is P.pow_p:
            x, y = (np.asarray(b.v, np.float64) for b in ins)
            integer_inside = (ins[1].e > 0) & (np.floor(y + ins[1].e) >= np.ceil(y - ins[1].e))
            return around_zero(ins[0], ins[0].v) & (y - ins[1].e < 0) | (x - ins[0].e < 0) & integer_inside
        if prim is P.tan_p:
            return around_zero(ins[0], np.cos(np.asarray(ins[0].v, np.float64)))
        return False

    def _extra_local(self, prim, ins: list, params: dict, v) -> np.ndarray | float:
        """Local errors that grow with the operands: x ** n is |n| roundings (and a division for
        n < 0); pow(x, y) through exp(y log x) is off by |y log x| ulp of its result."""
        mag = magnitude(v)
        if prim is P.integer_pow_p:
            n = params["y"]
            return (abs(n) + (3 if n < 0 else 0)) * self.u * mag
        if prim is P.pow_p:
            x, y = (np.asarray(b.v, np.float64) for b in ins)
            return np.abs(y * np.log(np.abs(x))) * self.u * mag
        return 0.0

    def _quotient_jumps(self, prim, ins: list) -> np.ndarray:
        """x % y and x // y jump where x / y crosses an integer: where rounding (or the operands'
        bounds) may put x / y on either side, they are off by |y| (by 1 for //), or anything
        when the bounds span whole periods."""
        x, y = ins
        xv, yv = np.asarray(x.v, np.float64), np.asarray(y.v, np.float64)
        q = xv / yv
        dq = (np.abs(q) * 4 * self.u + (x.e + np.abs(q) * y.e) / np.abs(yv))
        near = np.abs(q - np.round(q)) <= dq
        jump = np.abs(yv) + y.e if prim is P.rem_p else 1.0
        return np.where(dq >= 0.25, np.inf, np.where(near, jump, 0.0))

    def _comparison(self, prim, ins: list, params: dict) -> Bound:
        """Uncertain where rounding could flip it; operands equal in the reference, with equal
        finite bounds, are one value computed once (a max and the element it picked): equal in
        any implementation, unless near ties made the pick itself uncertain (an unbounded one may
        be a NaN, unequal to itself)."""
        a, b = ins
        out = self._elementwise(prim, ins, params)
        va, vb = np.asarray(a.v), np.asarray(b.v)
        equal = np.broadcast_to((va == vb) & (a.e == b.e) & np.isfinite(a.e), out.v.shape)
        tie = self._tie_union(ins, out.v.shape)
        certain_equal = equal if tie is None else equal & ~tie
        uncertain = out.e > 0
        if prim is P.eq_p or prim is P.ne_p:  # true on a set of measure zero: corners never hit it
            gap = np.abs(va.astype(np.float64) - vb.astype(np.float64)) if va.dtype.kind in "fiu" else 0
            uncertain = uncertain | np.broadcast_to(gap <= a.e + b.e, out.v.shape) & (
                np.broadcast_to(a.e + b.e, out.v.shape) > 0)
        uncertain = uncertain & ~certain_equal
        return Bound(out.v, uncertain.astype(np.float64))

    def _max(self, prim, ins: list, params: dict) -> Bound:
        out = self._elementwise(prim, ins, params)
        a, b = ins
        gap = np.abs(np.asarray(a.v, np.float64) - np.asarray(b.v, np.float64))
        near = np.broadcast_to((gap <= a.e + b.e) & (gap > 0), out.v.shape)
        return Bound(out.v, out.e, near if out.tie is None else near | out.tie)

    def _convert_element_type(self, prim, ins: list, params: dict) -> Bound:
        x = ins[0]
        if x.v.dtype.kind == "f" and params["new_dtype"].kind == "f":
            return Bound(x.v, x.e, x.tie)  # float to float: the reference keeps its precision
        out = self._elementwise(prim, ins, params)
        if x.v.dtype.kind == "f" and params["new_dtype"] == bool:  # x != 0: both corners may be nonzero
            zero_inside = (x.e > 0) & (np.abs(np.asarray(x.v, np.float64)) <= x.e)
            return Bound(out.v, np.where(zero_inside, 1.0, out.e), out.tie)
        return out

    # ---- structure: the bound moves with the values
    def _structural(self, prim, x: Bound, params: dict) -> Bound:
        tie = None if x.tie is None else np.asarray(prim.impl(x.tie, **params))
        return Bound(np.asarray(prim.impl(x.v, **params)), np.asarray(prim.impl(x.e, **params)), tie)

    def _pad(self, prim, ins: list, params: dict) -> Bound:
        x, pv = ins
        return Bound(prim.impl(x.v, pv.v, **params), prim.impl(x.e, pv.e, **params))

    def _concatenate(self, prim, ins: list, params: dict) -> Bound:
        return Bound(prim.impl(*[b.v for b in ins], **params), prim.impl(*[b.e for b in ins], **params))

    def _iota(self, prim, ins: list, params: dict) -> Bound:
        return self.exact(prim.impl(**params))

    def _take(self, prim, ins: list, params: dict) -> Bound:
        x, idx = ins
        axis = params["axis"]
        v = prim.impl(x.v, idx.v, **params)
        e = prim.impl(x.e, idx.v, **params)
        if np.any(idx.e):  # an index that may differ: anything at its places
            unsure = np.reshape(idx.e > 0, (1,) * axis + idx.v.shape + (1,) * (x.v.ndim - axis - 1))
            e = np.where(unsure, np.inf, e)
        return self._finish(v, e)

    def _scatter_add(self, prim, ins: list, params: dict) -> Bound:
        x, idx, upd = ins
        if not _floating(x):
            return self._integer(prim, ins, params)
        v = prim.impl(x.v, idx.v, upd.v, **params)
        mag = prim.impl(magnitude(x.v), idx.v, magnitude(upd.v), **params)
        e = prim.impl(x.e, idx.v, upd.e, **params) + (upd.v.size + 1) * self.u * mag
        return self._finish(v, np.inf if np.any(idx.e) else self._partial_overflow(mag, e))

    def _scatter(self, prim, ins: list, params: dict) -> Bound:
        """``x.at[i]``'s set / mul / min / max: a set moves values with their bounds (the last
        update wins); min / max take the widest bound at a position, with a near tie where
        another candidate lies within the bounds of the one kept; mul is a product per position,
        bounded as ``reduce_prod``'s (partial products may overflow or flush to zero)."""
        x, idx, upd = ins
        op = params["op"]
        if not _floating(x):
            return self._integer(prim, ins, params)
        if np.any(idx.e):  # an index that may differ: anything
            v = prim.impl(x.v, idx.v, upd.v, **params)
            return Bound(v, np.full(v.shape, np.inf))
        v = np.asarray(prim.impl(x.v, idx.v, upd.v, **params))
        if op == "set":
            tie = None if x.tie is None and upd.tie is None else prim.impl(
                _tie_or_false(x), idx.v, _tie_or_false(upd), **params)
            return Bound(v, prim.impl(x.e, idx.v, upd.e, **params), tie)
        if op in ("min", "max"):
            e = prim.impl(x.e, idx.v, upd.e, op="max")
            unknown = prim.impl(self._unknown([x], x.v.shape), idx.v, self._unknown([upd], upd.v.shape), op="max")
            e = np.where(unknown, np.inf, e)
            gap = lambda b, w: np.abs(np.asarray(b.v, np.float64) - np.asarray(w, np.float64))
            close_x = (gap(x, v) <= x.e + e) & (x.e + e > 0)
            close_u = (gap(upd, v[idx.v]) <= upd.e + e[idx.v]) & (upd.e + e[idx.v] > 0)
            count = close_x.astype(np.int64)
            np.add.at(count, idx.v, close_u.astype(np.int64))
            tie = (count > 1) | (False if x.tie is None else x.tie)
            return self._finish(v, e, tie)
        mag_x, mag_u = magnitude(x.v), magnitude(upd.v)
        p = prim.impl(mag_x, idx.v, mag_u, op="mul")
        with_bounds = prim.impl(mag_x + x.e, idx.v, mag_u + upd.e, op="mul")
        n = np.ones(v.shape)
        np.add.at(n, idx.v, 1.0)
        e = with_bounds - p + n * self.u * p + self.tiny
        e = self._partial_overflow(prim.impl(np.maximum(mag_x, 1), idx.v, np.maximum(mag_u, 1), op="mul"), e)
        finite_part = lambda b, mag: np.where(np.isfinite(b.v), np.minimum(mag, 1), 1)
        small = prim.impl(finite_part(x, mag_x), idx.v, finite_part(upd, mag_u), op="mul") < self.tiny
        e = np.where(small, np.where(np.isfinite(v), np.maximum(e, p), np.inf), e)
        return self._finish(v, np.where(prim.impl(self._unknown([x], x.v.shape), idx.v,
                                                  self._unknown([upd], upd.v.shape), op="max"), np.inf, e))

    def _partial_overflow(self, magnitudes, e) -> np.ndarray:
        """A sum whose terms' magnitudes add up past the dtype's range may overflow in a partial
        sum (in some order) even when its value fits: anything goes there."""
        return np.where(magnitudes + e >= self.big, np.inf, e)

    # ---- reductions
    def _reduce_sum(self, prim, ins: list, params: dict) -> Bound:
        x, axes = ins[0], params["axes"]
        v = prim.impl(x.v, **params)
        e = np.sum(x.e, axis=axes)
        if x.v.dtype.kind == "f":
            n = math.prod(x.v.shape[a] for a in axes)
            mag = np.sum(magnitude(x.v), axis=axes)
            e = self._partial_overflow(mag, e + summation_ulps(n) * self.u * mag + self.tiny)
        return self._finish(v, e, self._reduced_tie(x, axes))

    def _reduce_prod(self, prim, ins: list, params: dict) -> Bound:
        x, axes = ins[0], params["axes"]
        if not _floating(x):
            return self._integer(prim, ins, params)
        v = prim.impl(x.v, **params)
        mag = magnitude(x.v)
        n = math.prod(x.v.shape[a] for a in axes)
        p = np.prod(mag, axis=axes)
        grown = np.where(p > 0, p * np.expm1(np.sum(np.log1p(x.e / mag), axis=axes)), np.prod(mag + x.e, axis=axes))
        e = grown + (n + 1) * self.u * p + self.tiny
        # partial products in some order: as large as the product of the factors above 1, as
        # small (flushed to zero) as the product of those below 1 (then an inf factor gives NaN)
        e = self._partial_overflow(np.prod(np.maximum(mag, 1), axis=axes), e)
        small = np.prod(np.where(np.isfinite(x.v), np.minimum(mag, 1), 1), axis=axes) < self.tiny
        e = np.where(small, np.where(np.isfinite(v), np.maximum(e, p), np.inf), e)
        return self._finish(v, e)

    def _reduce_max(self, prim, ins: list, params: dict) -> Bound:
        x, axes = ins[0], params["axes"]
        if not np.any(x.e) and not _floating(x):
            return self._integer(prim, ins, params)
        v = prim.impl(x.v, **params)
        if x.v.dtype == bool:
            hi, lo = np.where(x.e > 0, True, x.v), np.where(x.e > 0, False, x.v)
        else:
            hi, lo = x.v + x.e.astype(self.hp), x.v - x.e.astype(self.hp)
        e = self._spread(v, [prim.impl(hi, **params), prim.impl(lo, **params)])
        if x.v.dtype != bool:
            e = np.where(np.any(self._unknown([x], x.v.shape), axis=axes), np.inf, e)
        # near ties: another element within the bounds of the one picked
        kept = P.broadcast_in_dim_p.impl(v, shape=x.v.shape, broadcast_dimensions=tuple(
            d for d in range(x.v.ndim) if d not in axes)) if x.v.dtype != bool else None
        tie = None
        if kept is not None:
            e_kept = np.max(np.where(x.v == kept, x.e, 0), axis=axes, keepdims=True) if x.v.size else 0
            close = (np.abs(x.v - kept).astype(np.float64) <= x.e + e_kept) & (x.e + e_kept > 0)
            tie = np.sum(close, axis=axes) > 1
            if x.tie is not None:
                tie |= np.any(x.tie, axis=axes)
        return self._finish(v, e, tie)

    def _argmax(self, prim, ins: list, params: dict) -> Bound:
        x, axis = ins[0], params["axis"]
        v = prim.impl(x.v, **params)
        best = np.take_along_axis(x.v, np.expand_dims(v, axis), axis)
        e_best = np.take_along_axis(x.e, np.expand_dims(v, axis), axis)
        others = np.arange(x.v.shape[axis]).reshape([-1 if d == axis else 1 for d in range(x.v.ndim)]) \
            != np.expand_dims(v, axis)
        sign = 1 if prim is P.argmax_p else -1
        gap = np.asarray(x.v, np.float64) - np.asarray(best, np.float64)  # (unsigned ones would wrap around)
        # an element that may be anything may be a NaN, which argmax / argmin pick first
        rival = others & ((sign * gap + x.e + e_best >= 0) & (x.e + e_best > 0) | np.isinf(x.e) | np.isinf(e_best))
        return Bound(v, np.where(np.any(rival, axis=axis), np.inf, 0.0))

    def _cumsum(self, prim, ins: list, params: dict) -> Bound:
        x = ins[0]
        if not _floating(x):
            return Bound(prim.impl(x.v, **params), prim.impl(x.e, **params))
        n = x.v.shape[params["axis"]]
        v = prim.impl(x.v, **params)
        mag = prim.impl(magnitude(x.v), **params)
        e = self._partial_overflow(mag, prim.impl(x.e, **params) + summation_ulps(n) * self.u * mag + self.tiny)
        return self._finish(v, e)

    def _cumprod(self, prim, ins: list, params: dict) -> Bound:
        """numpy's order, one product per step along the axis, each a ``mul`` of the prefix and
        the next element (so an overflow is inf from there on and a zero after it NaN, as numpy
        gives); the generator keeps these axes short."""
        x, axis, reverse = ins[0], params["axis"], params["reverse"]
        if not _floating(x):
            return self._integer(prim, ins, params)
        n = x.v.shape[axis]
        steps = range(n - 1, -1, -1) if reverse else range(n)
        outs, prefix = [], None
        for i in steps:
            at = (slice(None),) * axis + (i,)
            elem = Bound(x.v[at], x.e[at], None if x.tie is None else x.tie[at])
            prefix = elem if prefix is None else self._elementwise(P.mul_p, [prefix, elem], {})
            outs.append(prefix)
        if reverse:
            outs.reverse()
        if not outs:
            return Bound(np.asarray(x.v), np.asarray(x.e))
        tie = None if all(o.tie is None for o in outs) else np.stack([_tie_or_false(o) for o in outs], axis)
        return Bound(np.stack([o.v for o in outs], axis), np.stack([o.e for o in outs], axis), tie)

    def _dot_general(self, prim, ins: list, params: dict) -> Bound:
        a, b = ins
        (lc, _), _ = params["dimension_numbers"]
        k = math.prod(a.v.shape[i] for i in lc)
        av, bv = np.asarray(a.v, np.float64), np.asarray(b.v, np.float64)
        if self.hp is np.longdouble:  # float64 programs: the exact-ish value from long double sums
            v = prim.impl(a.v, b.v, **params)
        else:
            v = prim.impl(av, bv, **params)
        am, bm = magnitude(av), magnitude(bv)
        mag = prim.impl(am, bm, **params)
        e = (prim.impl(am, b.e, **params) + prim.impl(a.e, bm, **params)
             + prim.impl(a.e, b.e, **params) + summation_ulps(k) * self.u * mag + self.tiny)
        # 0 * inf: NaN in IEEE arithmetic, but BLAS's matrix-vector routine skips the zeros of
        # its vector, so which one a product gives depends on its path (not checked); a factor
        # that may be zero (flushed, or underflowing in the dtype) or may be inf counts as one
        bad = lambda x, e: (~np.isfinite(x) | np.isinf(e)).astype(np.float64)
        zero = lambda x, e: (np.abs(x) <= e).astype(np.float64)
        either = prim.impl(bad(av, a.e), zero(bv, b.e), **params) + prim.impl(zero(av, a.e), bad(bv, b.e), **params)
        return self._finish(v, np.where(either > 0, np.inf, self._partial_overflow(mag, e)))

    def _select(self, prim, ins: list, params: dict) -> Bound:
        out = self._elementwise(prim, ins, params)
        unsure = np.broadcast_to(ins[0].e > 0, out.v.shape)
        tie = unsure if out.tie is None else unsure | out.tie
        return Bound(out.v, out.e, tie)

    # ---- sub-programs
    def _cond(self, prim, ins: list, params: dict) -> list:
        index, ops = ins[0], ins[1:]
        branches = params["branches"]
        i = int(np.clip(int(index.v), 0, len(branches) - 1))
        run = lambda br: self.eval(br.jaxpr, [self.exact(c) for c in br.consts], ops)
        chosen = run(branches[i])
        if not np.any(index.e):
            return chosen
        outs = [Bound(c.v, c.e.copy(), None) for c in chosen]
        for j, br in enumerate(branches):
            if j != i:
                for o, alt in zip(outs, run(br)):
                    o.e = np.maximum(o.e, self._spread(o.v, [alt.v]) + alt.e)
        return [self._finish(o.v, o.e, np.ones(o.v.shape, bool)) for o in outs]

    def _scan(self, prim, ins: list, params: dict) -> list:
        body, nc, nk = params["jaxpr"], params["num_consts"], params["num_carry"]
        length, reverse = params["length"], params["reverse"]
        consts, carry, xs = ins[:nc], list(ins[nc:nc + nk]), ins[nc + nk:]
        body_consts = [self.exact(c) for c in body.consts]
        ys = []
        for i in (range(length - 1, -1, -1) if reverse else range(length)):
            row = [Bound(x.v[i], x.e[i], None if x.tie is None else x.tie[i]) for x in xs]
            out = self.eval(body.jaxpr, body_consts, consts + carry + row)
            carry, y = out[:nk], out[nk:]
            ys.append(y)
        if reverse:
            ys.reverse()
        stacked = []
        for k, aval in enumerate(body.out_avals[nk:]):
            if ys:
                v = np.stack([np.asarray(y[k].v) for y in ys])
                e = np.stack([np.broadcast_to(y[k].e, np.shape(y[k].v)) for y in ys])
            else:
                v = np.zeros((0,) + aval.shape, self.hp if aval.dtype.kind == "f" else aval.dtype)
                e = np.zeros(v.shape)
            stacked.append(Bound(v, e))
        return carry + stacked

    def _while(self, prim, ins: list, params: dict) -> list:
        cn, bn = params["cond_nconsts"], params["body_nconsts"]
        cc, bc, carry = ins[:cn], ins[cn:cn + bn], list(ins[cn + bn:])
        cj, bj = params["cond_jaxpr"], params["body_jaxpr"]
        while True:
            pred = self.eval(cj.jaxpr, [self.exact(c) for c in cj.consts], cc + carry)[0]
            if np.any(pred.e):  # the trip count itself is uncertain
                return [Bound(c.v, np.full(np.shape(c.v), np.inf)) for c in carry]
            if not bool(pred.v):
                return carry
            carry = self.eval(bj.jaxpr, [self.exact(c) for c in bj.consts], bc + carry)

    def _fused(self, prim, ins: list, params: dict) -> list:
        """A fused primitive: its reference decomposition (functrace.numpy), interpreted."""
        key = (prim, tuple((b.v.shape, b.v.dtype) for b in ins), tuple(sorted(params.items())))
        closed = self._references.get(key)
        if closed is None:
            ref = FUSED_REFERENCES[prim]
            closed = make_jaxpr(lambda *a: ref(*a, **params))(*[np.asarray(b.v) for b in ins])
            self._references[key] = closed
        return self.run(closed, ins)

    @staticmethod
    def _reduced_tie(x: Bound, axes) -> np.ndarray | None:
        return None if x.tie is None else np.any(x.tie, axis=axes)


def _floating(b: Bound) -> bool:
    return np.asarray(b.v).dtype.kind == "f"


def _tie_or_false(b: Bound) -> np.ndarray:
    return np.zeros(np.shape(b.v), bool) if b.tie is None else np.broadcast_to(b.tie, np.shape(b.v))


def magnitude(v) -> np.ndarray:
    """|v| as float64, 0 where v is not finite (its error is not a multiple of it)."""
    a = np.abs(np.asarray(v, dtype=np.float64))
    return np.where(np.isfinite(a), a, 0.0)


def summation_ulps(n: int) -> float:
    """Rounding errors of a sum of ``n`` terms, in ulp of the sum of their magnitudes: ``n``, the
    bound for any order of summation (kernels sum long runs sequentially)."""
    return float(max(n, 1))


# fused primitives: their outputs (a list) from the decomposition their derivative rules use
FUSED_REFERENCES = {
    fused.softmax_p: lambda x: [fused.softmax_reference(x)],
    fused.log_softmax_p: lambda x: [fused.log_softmax_reference(x)],
    fused.rms_norm_p: lambda x, w, **p: [fused.rms_norm_reference(x, w, **p)],
    fused.rms_norm_bwd_p: fused.rms_norm_bwd_reference,
    fused.attention_p: fused.attention_reference,
    fused.attention_bwd_p: fused.attention_bwd_reference,
}

# primitives with a rule of their own (the others: elementwise ones by the corners of their
# operands' boxes, structural ones, inlined calls and fused ones by their reference)
RULES = {
    **dict.fromkeys((P.eq_p, P.ne_p, P.lt_p, P.le_p, P.gt_p, P.ge_p), BoundInterpreter._comparison),
    P.max_p: BoundInterpreter._max,
    P.min_p: BoundInterpreter._max,
    P.convert_element_type_p: BoundInterpreter._convert_element_type,
    P.pad_p: BoundInterpreter._pad,
    P.concatenate_p: BoundInterpreter._concatenate,
    P.iota_p: BoundInterpreter._iota,
    P.take_p: BoundInterpreter._take,
    P.scatter_add_p: BoundInterpreter._scatter_add,
    P.reduce_sum_p: BoundInterpreter._reduce_sum,
    P.reduce_prod_p: BoundInterpreter._reduce_prod,
    P.reduce_max_p: BoundInterpreter._reduce_max,
    P.reduce_min_p: BoundInterpreter._reduce_max,
    P.argmax_p: BoundInterpreter._argmax,
    P.argmin_p: BoundInterpreter._argmax,
    P.cumsum_p: BoundInterpreter._cumsum,
    P.cumprod_p: BoundInterpreter._cumprod,
    scatter_p: BoundInterpreter._scatter,
    P.dot_general_p: BoundInterpreter._dot_general,
    P.select_p: BoundInterpreter._select,
    control.cond_p: BoundInterpreter._cond,
    control.scan_p: BoundInterpreter._scan,
    control.while_p: BoundInterpreter._while,
}

