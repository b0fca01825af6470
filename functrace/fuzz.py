"""Differential fuzzer: seeded random programs run by ``jit`` on OpenCL, ``jit`` on the numpy
backend and eagerly, checked against a float64 reference with a per-element error bound.

``python -m functrace.fuzz --n 5000 [--seed S] [--mode default|kernels] [--minutes M]``

Each program is generated as Python source over ``functrace.numpy`` (elementwise ops,
broadcasts, reductions, products, views, pads, cumsums, softmaxes, ``lax.scan`` / ``lax.cond``,
``ft.nn`` ops) from ``(seed, index)`` alone, so ``--program I`` regenerates exactly one.  For a
few input sets (host arrays or ``ft.device_put``) it compares the value, ``value_and_grad`` of
a weighted sum of the outputs, and ``vmap`` over a leading axis.

The reference is the program's IR interpreted in float64 (long double for float64 programs)
together with a per-element bound on the error any correct implementation in the program's
dtype may make (running error analysis): elementwise ops take the spread of their result over
the corners of their operands' error boxes plus a few ulp (more for transcendentals), sums add
``n`` ulp of the sum of magnitudes, products ``K`` ulp of ``|A| @ |B|``, and comparisons that
rounding could flip carry their uncertainty on.  A result element is wrong when it lies
outside three times that bound, or when its NaN / infinity differs where the bound says it is
certain.  No tolerance is tuned to what the implementations happen to do.
"""
from __future__ import annotations

import argparse
import faulthandler
import itertools
import math
import re
import sys
import textwrap
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import functrace as ft
import functrace.numpy as fnp

from . import nn
from . import primitives as P
from .config import config
from .core import ClosedJaxpr, Literal
from .staging import make_jaxpr

# --------------------------------------------------------------------------- error bounds


@dataclass
class Bound:
    """A reference value ``v`` (float64 / long double, or exact bool / int), the bound ``e`` on
    the error of any correct computation of it (``inf``: anything goes there), and ``tie``: where
    the value is exactly one of several near-equal candidates (a max of near ties), so exact
    equality with one of them is not certain."""
    v: np.ndarray
    e: np.ndarray
    tie: np.ndarray | None = None


# ulp of local rounding per primitive (OpenCL full-profile limits, rounded up); 0: exact ops
_TRANSCENDENTAL = {"sin", "cos", "tan", "tanh", "exp", "expm1", "log", "log1p", "logistic", "atan2", "erf", "pow"}
_ULPS = {"add": 1, "sub": 1, "mul": 1, "div": 3, "sqrt": 3, "rsqrt": 3, "rem": 2, **{n: 16 for n in _TRANSCENDENTAL}}
_PERIODIC = {"sin": 2.0, "cos": 2.0, "tan": np.inf}  # an operand error of a radian or more: any value
_STRUCTURAL = {"broadcast_in_dim", "reshape", "transpose", "squeeze", "expand_dims", "rev", "slice",
               "stop_gradient"}


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
        name = prim.name
        with np.errstate(all="ignore"):
            if name in _STRUCTURAL:
                return [self._structural(prim, ins[0], params)]
            rule = getattr(self, "_" + name, None)
            if rule is not None:
                out = rule(prim, ins, params)
                return out if isinstance(out, list) else [out]
            if prim.elementwise or name == "integer_pow":
                return [self._elementwise(prim, ins, params)]
            if prim.inline_body is not None:
                body = params[prim.inline_body]
                return self.eval(body.jaxpr, [self.exact(c) for c in body.consts], ins)
            if name in _FUSED_REFERENCES:
                return self._fused(name, ins, params)
        raise NotImplementedError(f"fuzz: no error-bound rule for primitive {name!r}")

    # ---- helpers
    def _finish(self, v, e, tie=None) -> Bound:
        """Cap a new value's bound: NaN bounds are unknown (inf); a finite value whose bound
        reaches the dtype's range may overflow there; a non-finite value stays certain only
        if its bound is finite."""
        v = np.asarray(v)
        e = np.asarray(e, dtype=np.float64)
        if v.dtype.kind != "f":
            return Bound(v, np.broadcast_to(np.where(np.isnan(e), np.inf, e), v.shape), tie)
        finite = np.isfinite(v)
        e = np.where(np.isnan(e), np.inf, e)
        e = np.where(finite, np.where(np.abs(v.astype(np.float64)) + e >= self.big, np.inf, e),
                     np.where(np.isfinite(e), 0.0, np.inf))
        return Bound(v, np.broadcast_to(e, v.shape), tie)

    def _local(self, name: str, v) -> np.ndarray | float:
        """Rounding of one operation, and its result (or operand) flushed to zero below the
        normal range (a driver may flush subnormals even in exact operations)."""
        return _ULPS.get(name, 0) * self.u * _magnitude(v) + self.tiny

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
            e = e + self._local(prim.name, v) + self._extra_local(prim.name, ins, params, v)
            if prim.name in _PERIODIC:
                e = np.where(np.broadcast_to(ins[0].e, v.shape) >= 1.0, np.maximum(e, _PERIODIC[prim.name]), e)
            if prim.name in ("rem", "floor_div"):
                e = np.maximum(e, self._quotient_jumps(prim.name, ins))
            e = np.where(np.broadcast_to(self._pole_inside(prim.name, ins, params), v.shape), np.inf, e)
        return self._finish(v, np.where(self._unknown(ins, v.shape), np.inf, e), self._tie_union(ins, v.shape))

    @staticmethod
    def _unknown(ins: list, shape) -> np.ndarray:
        """Where an operand is a non-finite value that may be anything (its corners would be the
        same NaN or inf and hide that)."""
        out = np.zeros(shape, bool)
        for b in ins:
            if np.asarray(b.v).dtype.kind == "f":
                out |= np.broadcast_to(np.isinf(b.e) & ~np.isfinite(b.v), shape)
        return out

    def _pole_inside(self, name: str, ins: list, params: dict) -> np.ndarray | bool:
        """Where an operand's error interval contains a pole (corners on both sides of it see
        two finite values, not the unbounded ones between): a divisor, the base of a negative
        power, tan's argument at pi/2 + k pi."""
        def around_zero(b: Bound, value) -> np.ndarray:  # |d value / d b| <= 1 for these
            return (b.e > 0) & (np.abs(np.asarray(value, np.float64)) <= b.e)
        if name == "div":
            return around_zero(ins[1], ins[1].v)
        if name == "integer_pow" and params["y"] < 0:
            return around_zero(ins[0], ins[0].v)
        if name == "pow":
            return around_zero(ins[0], ins[0].v) & (np.asarray(ins[1].v, np.float64) - ins[1].e < 0)
        if name == "tan":
            return around_zero(ins[0], np.cos(np.asarray(ins[0].v, np.float64)))
        return False

    def _extra_local(self, name: str, ins: list, params: dict, v) -> np.ndarray | float:
        """Local errors that grow with the operands: x ** n is |n| roundings (and a division for
        n < 0); pow(x, y) through exp(y log x) is off by |y log x| ulp of its result."""
        mag = _magnitude(v)
        if name == "integer_pow":
            n = params["y"]
            return (abs(n) + (3 if n < 0 else 0)) * self.u * mag
        if name == "pow":
            x, y = (np.asarray(b.v, np.float64) for b in ins)
            return np.abs(y * np.log(np.abs(x))) * self.u * mag
        return 0.0

    def _quotient_jumps(self, name: str, ins: list) -> np.ndarray:
        """x % y and x // y jump where x / y crosses an integer: where rounding (or the operands'
        bounds) may put x / y on either side, they are off by |y| (by 1 for //), or anything
        when the bounds span whole periods."""
        x, y = ins
        xv, yv = np.asarray(x.v, np.float64), np.asarray(y.v, np.float64)
        q = xv / yv
        dq = (np.abs(q) * 4 * self.u + (x.e + np.abs(q) * y.e) / np.abs(yv))
        near = np.abs(q - np.round(q)) <= dq
        jump = np.abs(yv) + y.e if name == "rem" else 1.0
        return np.where(dq >= 0.25, np.inf, np.where(near, jump, 0.0))

    def _comparison(self, prim, ins: list, params: dict) -> Bound:
        """Uncertain where rounding could flip it; operands equal in the reference, with equal
        bounds, are one value computed once (a max and the element it picked): equal in any
        implementation, unless near ties made the pick itself uncertain."""
        a, b = ins
        out = self._elementwise(prim, ins, params)
        va, vb = np.asarray(a.v), np.asarray(b.v)
        equal = np.broadcast_to((va == vb) & (a.e == b.e), out.v.shape)
        tie = self._tie_union(ins, out.v.shape)
        certain_equal = equal if tie is None else equal & ~tie
        uncertain = out.e > 0
        if prim.name in ("eq", "ne"):  # true on a set of measure zero: corners never hit it
            gap = np.abs(va.astype(np.float64) - vb.astype(np.float64)) if va.dtype.kind in "fiu" else 0
            uncertain = uncertain | np.broadcast_to(gap <= a.e + b.e, out.v.shape) & (
                np.broadcast_to(a.e + b.e, out.v.shape) > 0)
        uncertain = uncertain & ~certain_equal
        return Bound(out.v, uncertain.astype(np.float64))

    _eq = _ne = _lt = _le = _gt = _ge = _comparison

    def _max(self, prim, ins: list, params: dict) -> Bound:
        out = self._elementwise(prim, ins, params)
        a, b = ins
        gap = np.abs(np.asarray(a.v, np.float64) - np.asarray(b.v, np.float64))
        near = np.broadcast_to((gap <= a.e + b.e) & (gap > 0), out.v.shape)
        return Bound(out.v, out.e, near if out.tie is None else near | out.tie)

    _min = _max

    def _convert_element_type(self, prim, ins: list, params: dict) -> Bound:
        x = ins[0]
        if x.v.dtype.kind == "f" and params["new_dtype"].kind == "f":
            return Bound(x.v, x.e, x.tie)  # float to float: the reference keeps its precision
        return self._elementwise(prim, ins, params)

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
        v = prim.impl(x.v, idx.v, upd.v, **params)
        mag = prim.impl(_magnitude(x.v), idx.v, _magnitude(upd.v), **params)
        e = prim.impl(x.e, idx.v, upd.e, **params) + (upd.v.size + 1) * self.u * mag
        return self._finish(v, np.inf if np.any(idx.e) else self._partial_overflow(mag, e))

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
            mag = np.sum(_magnitude(x.v), axis=axes)
            e = self._partial_overflow(mag, e + _summation_ulps(n) * self.u * mag + self.tiny)
        return self._finish(v, e, self._reduced_tie(x, axes))

    def _reduce_prod(self, prim, ins: list, params: dict) -> Bound:
        x, axes = ins[0], params["axes"]
        v = prim.impl(x.v, **params)
        mag = _magnitude(x.v)
        n = math.prod(x.v.shape[a] for a in axes)
        p = np.prod(mag, axis=axes)
        grown = np.where(p > 0, p * np.expm1(np.sum(np.log1p(x.e / mag), axis=axes)), np.prod(mag + x.e, axis=axes))
        e = grown + (n + 1) * self.u * p + self.tiny
        # partial products in some order: as large as the product of the factors above 1, as
        # small (flushed to zero) as the product of those below 1
        e = self._partial_overflow(np.prod(np.maximum(mag, 1), axis=axes), e)
        e = np.where(np.prod(np.minimum(mag, 1), axis=axes) < self.tiny, np.maximum(e, p), e)
        return self._finish(v, e)

    def _reduce_max(self, prim, ins: list, params: dict) -> Bound:
        x, axes = ins[0], params["axes"]
        v = prim.impl(x.v, **params)
        if x.v.dtype == bool:
            hi, lo = np.where(x.e > 0, True, x.v), np.where(x.e > 0, False, x.v)
        else:
            hi, lo = x.v + x.e.astype(self.hp), x.v - x.e.astype(self.hp)
        e = self._spread(v, [prim.impl(hi, **params), prim.impl(lo, **params)])
        if x.v.dtype != bool:
            e = np.where(np.any(self._unknown([x], x.v.shape), axis=axes), np.inf, e)
        # near ties: another element within the bounds of the one picked
        kept = P._bid_impl(v, shape=x.v.shape, broadcast_dimensions=tuple(
            d for d in range(x.v.ndim) if d not in axes)) if x.v.dtype != bool else None
        tie = None
        if kept is not None:
            e_kept = np.max(np.where(x.v == kept, x.e, 0), axis=axes, keepdims=True) if x.v.size else 0
            close = (np.abs(x.v - kept).astype(np.float64) <= x.e + e_kept) & (x.e + e_kept > 0)
            tie = np.sum(close, axis=axes) > 1
            if x.tie is not None:
                tie |= np.any(x.tie, axis=axes)
        return self._finish(v, e, tie)

    _reduce_min = _reduce_max

    def _argmax(self, prim, ins: list, params: dict) -> Bound:
        x, axis = ins[0], params["axis"]
        v = prim.impl(x.v, **params)
        best = np.take_along_axis(x.v, np.expand_dims(v, axis), axis)
        e_best = np.take_along_axis(x.e, np.expand_dims(v, axis), axis)
        others = np.arange(x.v.shape[axis]).reshape([-1 if d == axis else 1 for d in range(x.v.ndim)]) \
            != np.expand_dims(v, axis)
        sign = 1 if prim.name == "argmax" else -1
        rival = others & (sign * (x.v - best) + x.e + e_best >= 0) & (x.e + e_best > 0)
        return Bound(v, np.where(np.any(rival, axis=axis), np.inf, 0.0))

    _argmin = _argmax

    def _cumsum(self, prim, ins: list, params: dict) -> Bound:
        x = ins[0]
        n = x.v.shape[params["axis"]]
        v = prim.impl(x.v, **params)
        mag = prim.impl(_magnitude(x.v), **params)
        e = self._partial_overflow(mag, prim.impl(x.e, **params) + _summation_ulps(n) * self.u * mag + self.tiny)
        return self._finish(v, e)

    def _dot_general(self, prim, ins: list, params: dict) -> Bound:
        a, b = ins
        (lc, _), _ = params["dimension_numbers"]
        k = math.prod(a.v.shape[i] for i in lc)
        av, bv = np.asarray(a.v, np.float64), np.asarray(b.v, np.float64)
        if self.hp is np.longdouble:  # float64 programs: the exact-ish value from long double sums
            v = prim.impl(a.v, b.v, **params)
        else:
            v = prim.impl(av, bv, **params)
        am, bm = _magnitude(av), _magnitude(bv)
        mag = prim.impl(am, bm, **params)
        e = (prim.impl(am, b.e, **params) + prim.impl(a.e, bm, **params)
             + prim.impl(a.e, b.e, **params) + _summation_ulps(k) * self.u * mag + self.tiny)
        # 0 * inf: NaN in IEEE arithmetic, but BLAS's matrix-vector routine skips the zeros of
        # its vector, so which one a product gives depends on its path (not checked)
        bad, zero = (lambda x: (~np.isfinite(x)).astype(np.float64)), (lambda x: (x == 0).astype(np.float64))
        either = prim.impl(bad(av), zero(bv), **params) + prim.impl(zero(av), bad(bv), **params)
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

    def _fused(self, name: str, ins: list, params: dict) -> list:
        """A fused primitive: its reference decomposition (functrace.numpy), interpreted."""
        key = (name, tuple((b.v.shape, b.v.dtype) for b in ins), tuple(sorted(params.items())))
        closed = self._references.get(key)
        if closed is None:
            ref = _FUSED_REFERENCES[name]
            closed = make_jaxpr(lambda *a: ref(*a, **params))(*[np.asarray(b.v) for b in ins])
            self._references[key] = closed
        return self.run(closed, ins)

    @staticmethod
    def _reduced_tie(x: Bound, axes) -> np.ndarray | None:
        return None if x.tie is None else np.any(x.tie, axis=axes)


def _magnitude(v) -> np.ndarray:
    """|v| as float64, 0 where v is not finite (its error is not a multiple of it)."""
    a = np.abs(np.asarray(v, dtype=np.float64))
    return np.where(np.isfinite(a), a, 0.0)


def _summation_ulps(n: int) -> float:
    """Rounding errors of a sum of ``n`` terms, in ulp of the sum of their magnitudes: ``n``, the
    bound for any order of summation (kernels sum long runs sequentially)."""
    return float(max(n, 1))


# fused primitives: their outputs (a list) from the decomposition their derivative rules use
_FUSED_REFERENCES = {
    "softmax": lambda x: [nn._softmax_reference(x)],
    "log_softmax": lambda x: [nn._log_softmax_reference(x)],
    "rms_norm": lambda x, w, **p: [nn._rms_norm_reference(x, w, **p)],
    "rms_norm_bwd": nn._rms_norm_bwd_reference,
    "attention": nn._attention_reference,
    "attention_bwd": nn._attention_bwd_reference,
}


# --------------------------------------------------------------------------- programs


@dataclass
class InputSpec:
    """One argument: ``kind`` "float" (the program's dtype), "labels" (int32 in [0, high)) or
    "index" (int64 in [0, high)); ``batched``: it gets the leading axis under ``vmap``."""
    name: str
    shape: tuple
    kind: str = "float"
    high: int = 0
    batched: bool = True


@dataclass
class Stmt:
    """Lines of the program's body defining ``outs`` from ``deps``."""
    outs: list
    code: str
    deps: list


@dataclass
class Program:
    seed: int
    index: int
    dtype: np.dtype
    inputs: list
    stmts: list
    outputs: list
    batch: int = 2
    avals: dict = field(default_factory=dict)  # var -> (shape, dtype)

    def restricted(self, outputs: list) -> "Program":
        """The program computing only ``outputs`` (the statements they depend on)."""
        need, stmts = set(outputs), []
        for s in reversed(self.stmts):
            if need & set(s.outs):
                stmts.append(s)
                need |= set(s.deps)
        inputs = [i for i in self.inputs if i.name in need]
        return Program(self.seed, self.index, self.dtype, inputs, stmts[::-1], list(outputs), self.batch, self.avals)

    @property
    def float_outputs(self) -> list:
        return [o for o in self.outputs if np.dtype(self.avals[o][1]).kind == "f"]

    @property
    def float_inputs(self) -> list:
        return [i for i, s in enumerate(self.inputs) if s.kind == "float"]

    def source(self) -> str:
        """The program as a standalone Python function ``f`` (and ``loss``, the scalar whose
        ``value_and_grad`` is compared)."""
        args = ", ".join(i.name for i in self.inputs)
        body = "\n".join(s.code for s in self.stmts) or "pass"
        outs = ", ".join(self.outputs)
        src = f"def f({args}):\n{textwrap.indent(body, '    ')}\n    return ({outs},)\n"
        fo = self.float_outputs
        if fo and self.float_inputs:
            ws = [f"w{k}" for k in range(len(fo))]
            terms = " + ".join(f"fnp.sum(outs[{self.outputs.index(o)}] * {w})" for o, w in zip(fo, ws))
            src += f"\n\ndef loss({args}, {', '.join(ws)}):\n    outs = f({args})\n    return {terms}\n"
        return src

    def describe_inputs(self) -> str:
        return ", ".join(f"{i.name}: {i.kind}{list(i.shape)}" + (f"<{i.high}" if i.high else "") +
                         ("" if i.batched else " (not batched)") for i in self.inputs)

    def namespace(self) -> dict:
        ns = {"np": np, "ft": ft, "fnp": fnp}
        exec(compile(self.source(), f"<fuzz program {self.seed}:{self.index}>", "exec"), ns)
        return ns


_SIZE_CLASSES = (("empty", "one", "odd", "1k", "large"), (0.08, 0.08, 0.3, 0.32, 0.22))
_MAX_ELEMENTS = 600_000
_MAX_MACS = 40_000_000
_CONSTS = ("0.5", "2.0", "-1.5", "3.0", "0.1", "-0.25", "1e-3", "7.0")

_UNARY = ("fnp.sin({a})", "fnp.cos({a})", "fnp.tanh({a})", "fnp.exp({a})", "fnp.expm1({a})", "fnp.arctan({a})",
          "fnp.log(fnp.abs({a}) + 0.5)", "fnp.log1p(fnp.abs({a}))", "fnp.sqrt(fnp.abs({a}) + 0.25)",
          "fnp.sigmoid({a})", "fnp.abs({a})", "-{a}", "fnp.square({a})", "fnp.sign({a})", "fnp.floor({a})",
          "fnp.ceil({a})", "fnp.rint({a})", "fnp.arcsinh({a})", "{a} ** 2", "{a} ** 3", "ft.nn.relu({a})",
          "ft.nn.gelu({a})", "ft.nn.silu({a})", "ft.nn.erf({a})", "fnp.sinh({a})", "fnp.cosh({a})",
          "fnp.tan({a})", "fnp.log({a})", "fnp.sqrt({a})", "1.0 / {a}", "fnp.reciprocal({a} + 2.0)",
          "fnp.arcsin(fnp.tanh({a}))", "fnp.clip({a}, -0.5, 0.75)", "fnp.maximum({a}, 0.0)", "{a} * {c}",
          "{a} + {c}", "{c} - {a}", "{a} / {c}", "fnp.power(fnp.abs({a}) + 0.5, {c})", "fnp.exp2({a})",
          "fnp.log2(fnp.abs({a}) + 1.0)", "fnp.logaddexp({a}, 0.0)", "{a} ** -1", "fnp.exp(-{a} * {a})")
_BINARY = ("{a} + {b}", "{a} - {b}", "{a} * {b}", "{a} / {b}", "{a} / (fnp.abs({b}) + 0.5)",
           "fnp.maximum({a}, {b})", "fnp.minimum({a}, {b})", "fnp.arctan2({a}, {b})", "fnp.hypot({a}, {b})",
           "fnp.logaddexp({a}, {b})", "fnp.power(fnp.abs({a}) + 0.5, {b})",
           "fnp.remainder({a}, fnp.abs({b}) + 0.5)", "fnp.where({a} > {b}, {a}, {b} * 0.5)",
           "{a} * {b} + {a}", "ft.nn.swiglu({a}, {b})", "{a} ** 2 - {b}", "fnp.tanh({a}) * {b}")
_COMPARE = ("{a} > {b}", "{a} <= {b}", "{a} == {b}", "{a} > {c}", "{a} < {c}", "fnp.isnan({a})",
            "fnp.isfinite({a})", "fnp.abs({a}) >= 1.0")


class _Generator:
    """Builds one random program statement by statement; each proposed statement is traced
    (abstractly) with the ones before it, and kept only if it traces and keeps the program's
    dtype and size limits."""

    def __init__(self, seed: int, index: int):
        self.rng = np.random.default_rng([seed, index])
        self.seed, self.index = seed, index
        self.dtype = np.dtype(np.float32 if self.rng.random() < 0.6 else np.float64)
        self.inputs: list = []
        self.stmts: list = []
        self.avals: dict = {}  # name -> (shape, dtype)
        self.created: list = []  # vars made by statements, in order
        self.counter = itertools.count()

    # ---- randomness
    def choice(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def const(self) -> str:
        return self.choice(_CONSTS)

    # ---- shapes
    def main_shape(self) -> tuple:
        """The first input's shape, of a size class: empty, one element, odd, ~1K, >= 131072."""
        rng = self.rng
        cls = _SIZE_CLASSES[0][int(rng.choice(len(_SIZE_CLASSES[0]), p=_SIZE_CLASSES[1]))]
        if cls == "empty":
            dims = [int(d) for d in rng.integers(1, 6, int(rng.integers(1, 4)))]
            dims[int(rng.integers(len(dims)))] = 0
            return tuple(dims)
        if cls == "one":
            return (1,) * int(rng.integers(0, 4))
        if cls == "odd":
            return tuple(int(d) for d in rng.choice([1, 3, 5, 7, 9, 11, 13, 15], int(rng.integers(1, 4))))
        target = int(rng.integers(700, 1600)) if cls == "1k" else int(self.choice(
            [131072, 131073, 200000, int(rng.integers(131072, 280000))]))
        rank = int(rng.integers(1, 4))
        dims = []
        for _ in range(rank - 1):
            d = int(self.choice([2, 3, 4, 5, 7, 8, 16, 31, 32, 64, 127, 257, 512]))
            if target // d >= 1:
                dims.append(d)
                target //= d
        dims.append(max(target, 1))
        order = rng.permutation(len(dims))
        return tuple(dims[i] for i in order)

    def compatible_shape(self, shape: tuple) -> tuple:
        """A shape that broadcasts against ``shape`` to ``shape``."""
        r = self.rng.random()
        if r < 0.4 or not shape:
            return shape
        if r < 0.7:
            return shape[int(self.rng.integers(0, len(shape) + 1)):]
        return tuple(1 if self.chance(0.5) else n for n in shape)

    # ---- variables
    def new_input(self, shape: tuple, kind: str = "float", high: int = 0) -> str:
        name = f"x{len(self.inputs)}"
        batched = len(self.inputs) == 0 or self.chance(0.7)
        self.inputs.append(InputSpec(name, tuple(int(n) for n in shape), kind, high, batched))
        dtype = self.dtype if kind == "float" else np.dtype(np.int32 if kind == "labels" else np.int64)
        self.avals[name] = (tuple(shape), dtype)
        return name

    def vars_of(self, kind: str = "f", pred: Callable = lambda s: True) -> list:
        names = [i.name for i in self.inputs if i.kind == "float"] + self.created if kind == "f" else self.created
        return [n for n in names if np.dtype(self.avals[n][1]).kind == kind and pred(self.avals[n][0])]

    def pick(self, kind: str = "f", pred: Callable = lambda s: True):
        names = self.vars_of(kind, pred)
        if not names:
            return None
        if self.chance(0.6):
            return names[-1]  # chains: the newest value
        return self.choice(names)

    def shape(self, name: str) -> tuple:
        return self.avals[name][0]

    def fresh(self) -> str:
        return f"v{next(self.counter)}"

    # ---- statements
    def emit(self, code: str, outs: list, deps: list) -> bool:
        """Keep the statement if the program still traces, in its dtype, within the size limits."""
        stmt = Stmt(outs, code, [d for d in deps if d in self.avals])
        stmts = self.stmts + [stmt]
        args = [i.name for i in self.inputs]
        body = "\n".join(s.code for s in stmts)
        src = f"def probe({', '.join(args)}):\n{textwrap.indent(body, '    ')}\n    return ({', '.join(outs)},)\n"
        ns = {"np": np, "ft": ft, "fnp": fnp}
        try:
            exec(compile(src, "<probe>", "exec"), ns)
            zeros = [np.broadcast_to(np.zeros((), self.avals[a][1]), self.avals[a][0]) for a in args]
            with np.errstate(all="ignore"):
                closed = make_jaxpr(ns["probe"])(*zeros)
        except Exception:  # an invalid proposal (shapes, axes, ...): propose another
            return False
        out_avals = closed.out_avals
        for a in out_avals:
            if a.dtype.kind == "f" and a.dtype != self.dtype or a.dtype.kind == "c":
                return False
            if a.size > _MAX_ELEMENTS:
                return False
        for o, a in zip(outs, out_avals):
            self.avals[o] = (tuple(a.shape), a.dtype)
        self.stmts.append(stmt)
        self.created.extend(outs)
        return True

    def assign(self, template: str, **names) -> bool:
        out = self.fresh()
        return self.emit(f"{out} = {template.format(**names)}", [out], list(names.values()))

    # ---- op families
    def op_unary(self) -> bool:
        a = self.pick()
        return a is not None and self.assign(self.choice(_UNARY).replace("{c}", self.const()), a=a)

    def operand_like(self, shape: tuple) -> str:
        """A value broadcastable against ``shape``: an existing one or a new input."""
        want = self.compatible_shape(shape)
        found = self.vars_of("f", lambda s: s == want)
        if found and self.chance(0.6):
            return self.choice(found)
        return self.new_input(want)

    def op_binary(self) -> bool:
        a = self.pick()
        if a is None:
            return False
        b = self.operand_like(self.shape(a))
        if self.chance(0.3):
            a, b = b, a
        return self.assign(self.choice(_BINARY), a=a, b=b)

    def op_compare(self) -> bool:
        a = self.pick()
        if a is None:
            return False
        b = self.operand_like(self.shape(a))
        p = self.fresh()
        if not self.emit(f"{p} = {self.choice(_COMPARE).format(a=a, b=b, c=self.const())}", [p], [a, b]):
            return False
        q = self.pick("b")
        use = self.choice(["fnp.where({p}, {a}, {b})", "fnp.where({p}, {a}, {c})", "{p} * {a}",
                           "fnp.where(fnp.logical_and({p}, {q}), {b}, {a})", "fnp.where({p} | ~{q}, {a}, -{a})",
                           "fnp.any({p}, axis={ax})", "fnp.all({p})", "fnp.sum({p}, axis={ax})"])
        ax = self.axis_spec(self.shape(p), single=True)
        return self.assign(use.replace("{c}", self.const()).replace("{ax}", ax), p=p, q=q or p, a=a, b=b)

    def axis_spec(self, shape: tuple, single: bool = False) -> str:
        nd = len(shape)
        if nd == 0:
            return "None"
        r = self.rng.random()
        if single or r < 0.5:
            ax = int(self.rng.integers(nd))
            return str(ax - nd if self.chance(0.3) else ax)
        if r < 0.7:
            return "None"
        axes = [int(x) for x in self.rng.permutation(nd)[:int(self.rng.integers(1, nd + 1))]]
        return "(" + ", ".join(map(str, axes)) + ",)"

    def op_reduce(self) -> bool:
        a = self.pick()
        if a is None:
            return False
        shape = self.shape(a)
        kind = self.choice(["sum", "sum", "mean", "max", "min", "prod", "var", "std", "logsumexp", "argmax",
                            "argmin"])
        keep = self.chance(0.35)
        if kind in ("argmax", "argmin"):
            ax = self.axis_spec(shape, single=True)
            if not shape or shape[int(ax)] == 0:
                return False
            return self.assign(f"fnp.{kind}({{a}}, axis={ax})", a=a)
        ax = self.axis_spec(shape)
        axes = _axes_of(ax, len(shape))
        reduced = math.prod(shape[d] for d in axes)
        if kind in ("max", "min") and reduced == 0:
            return False
        if kind == "prod":
            rest = math.prod(shape) // max(reduced, 1)
            if reduced > 64 or rest * reduced * reduced > 4_000_000:
                return False
        if kind == "logsumexp":
            return self.assign(f"ft.nn.logsumexp({{a}}, axis={ax}, keepdims={keep})", a=a)
        return self.assign(f"fnp.{kind}({{a}}, axis={ax}, keepdims={keep})", a=a)

    def op_matmul(self) -> bool:
        a = self.pick(pred=lambda s: len(s) >= 1 and s[-1] <= 4096)
        if a is None:
            return False
        shape = self.shape(a)
        k = shape[-1]
        n = int(self.choice([1, 3, 8, 17, 32, 64]))
        size = math.prod(shape)
        if size * n > _MAX_MACS or size // max(k, 1) * n > _MAX_ELEMENTS:
            return False
        r = self.rng.random()
        if r < 0.35:
            return self.assign("{a} @ {w}", a=a, w=self.weight((k, n)))
        if r < 0.5:
            letters = "abc"[:len(shape) - 1]
            return self.assign(f"fnp.einsum('{letters}k,nk->{letters}n', {{a}}, {{w}})", a=a, w=self.weight((n, k)))
        if r < 0.6 and len(shape) == 2:
            return self.assign("{w} @ {a}", a=a, w=self.weight((n, shape[0])))
        if r < 0.7 and len(shape) == 3:
            return self.assign("{a} @ {w}", a=a, w=self.weight((shape[0], k, n)))
        if r < 0.8:
            return self.assign("fnp.dot({a}, {w})", a=a, w=self.weight((k,)))
        if r < 0.9 and len(shape) == 2:
            b = self.operand_like(shape) if self.chance(0.5) else a
            return self.assign("fnp.einsum('ij,ij->i', {a}, {b})", a=a, b=b) if self.shape(b) == shape else False
        if len(shape) == 1 and k <= 700:
            b = self.pick(pred=lambda s: len(s) == 1 and s[0] <= 700) or a
            return self.assign("fnp.outer({a}, {b})", a=a, b=b)
        return self.assign("fnp.tensordot({a}, {w}, axes=1)", a=a, w=self.weight((k, n)))

    def weight(self, shape: tuple) -> str:
        found = self.vars_of("f", lambda s: s == shape)
        return self.choice(found) if found and self.chance(0.3) else self.new_input(shape)

    def op_reshape(self) -> bool:
        a = self.pick()
        if a is None:
            return False
        shape = self.shape(a)
        size = math.prod(shape)
        r = self.rng.random()
        if r < 0.2:
            return self.assign("fnp.ravel({a})", a=a)
        new = _factor(self.rng, size)
        if r < 0.4 and new:
            i = int(self.rng.integers(len(new)))
            spec = tuple(-1 if j == i else d for j, d in enumerate(new)) if size else new
            return self.assign(f"{{a}}.reshape({spec})", a=a)
        return self.assign(f"fnp.reshape({{a}}, {new})", a=a)

    def op_transpose(self) -> bool:
        a = self.pick(pred=lambda s: len(s) >= 2)
        if a is None:
            return False
        nd = len(self.shape(a))
        r = self.rng.random()
        if r < 0.3:
            return self.assign("{a}.T", a=a)
        i, j = (int(x) for x in self.rng.integers(0, nd, 2))
        if r < 0.5:
            return self.assign(f"fnp.swapaxes({{a}}, {i}, {j})", a=a)
        if r < 0.6:
            return self.assign(f"fnp.moveaxis({{a}}, {i}, {j})", a=a)
        perm = tuple(int(x) for x in self.rng.permutation(nd))
        return self.assign(f"fnp.transpose({{a}}, {perm})", a=a)

    def op_flip(self) -> bool:
        a = self.pick(pred=lambda s: len(s) >= 1)
        if a is None:
            return False
        r = self.rng.random()
        if r < 0.3:
            return self.assign("{a}[::-1]", a=a)
        if r < 0.5:
            return self.assign("{a}[..., ::-1]", a=a)
        return self.assign(f"fnp.flip({{a}}, axis={self.axis_spec(self.shape(a))})", a=a)

    def op_slice(self) -> bool:
        a = self.pick(pred=lambda s: len(s) >= 1)
        if a is None:
            return False
        parts = []
        for n in self.shape(a):
            r = self.rng.random()
            if r < 0.35:
                parts.append(":")
            elif r < 0.45 and n > 0:
                parts.append(str(int(self.rng.integers(-n, n))))
            else:
                step = int(self.choice([1, 2, 3, 5, -1, -2, -3]))
                lo, hi = (int(x) for x in self.rng.integers(-n - 1, n + 2, 2)) if n else (0, 0)
                lo_s = "" if self.chance(0.3) else str(lo)
                hi_s = "" if self.chance(0.3) else str(hi)
                parts.append(f"{lo_s}:{hi_s}:{step}")
        if self.chance(0.15):
            parts.insert(int(self.rng.integers(len(parts) + 1)), "None")
        return self.assign(f"{{a}}[{', '.join(parts)}]", a=a)

    def op_concat(self) -> bool:
        a = self.pick(pred=lambda s: len(s) >= 1)
        if a is None:
            return False
        shape = self.shape(a)
        nd = len(shape)
        ax = int(self.rng.integers(nd))
        r = self.rng.random()
        if r < 0.25:
            same = self.vars_of("f", lambda s: s == shape)
            b = self.choice(same)
            return self.assign(f"fnp.stack([{{a}}, {{b}}], axis={int(self.rng.integers(-nd - 1, nd + 1))})", a=a, b=b)
        if r < 0.4:
            reps = tuple(int(x) for x in self.rng.integers(1, 4, int(self.rng.integers(1, nd + 2))))
            return self.assign(f"fnp.tile({{a}}, {reps})", a=a)
        if r < 0.5:
            return self.assign(f"fnp.repeat({{a}}, {int(self.rng.integers(1, 4))}, axis={ax})", a=a)
        other = tuple(int(self.rng.integers(0, 9)) if d == ax else n for d, n in enumerate(shape))
        found = self.vars_of("f", lambda s: len(s) == nd and all(m == n for d, (m, n) in enumerate(zip(s, shape))
                                                                  if d != ax))
        b = self.choice(found) if found and self.chance(0.5) else self.new_input(other)
        return self.assign(f"fnp.concatenate([{{a}}, {{b}}], axis={ax})", a=a, b=b)

    def op_pad(self) -> bool:
        a = self.pick(pred=lambda s: len(s) >= 1)
        if a is None:
            return False
        widths = tuple((int(self.rng.integers(0, 4)), int(self.rng.integers(0, 4))) for _ in self.shape(a))
        return self.assign(f"fnp.pad({{a}}, {widths}, constant_values={self.const()})", a=a)

    def op_cumsum(self) -> bool:
        a = self.pick(pred=lambda s: len(s) >= 1)
        if a is None:
            return False
        nd = len(self.shape(a))
        if self.chance(0.3):
            return self.assign(f"fnp.flip(fnp.cumsum(fnp.flip({{a}}, {nd - 1}), axis=-1), {nd - 1})", a=a)
        return self.assign(f"fnp.cumsum({{a}}, axis={int(self.rng.integers(-nd, nd))})", a=a)

    def op_softmax(self) -> bool:
        a = self.pick(pred=lambda s: len(s) >= 1)
        if a is None:
            return False
        nd = len(self.shape(a))
        ax = -1 if self.chance(0.6) else int(self.rng.integers(-nd, nd))
        fn = self.choice(["ft.nn.softmax", "ft.nn.log_softmax"])
        return self.assign(f"{fn}({{a}}, axis={ax})", a=a)

    def op_scan(self) -> bool:
        xs = self.pick(pred=lambda s: len(s) >= 1 and s[0] <= 24 and math.prod(s) <= 200_000)
        if xs is None:
            a = self.pick(pred=lambda s: len(s) >= 2 and s[0] > 24)
            if a is None or not self.assign(f"{{a}}[:{int(self.rng.integers(0, 25))}]", a=a):
                return False
            xs = self.created[-1]
        row = self.shape(xs)[1:]
        init = self.vars_of("f", lambda s: s == row)
        init = self.choice(init) if init and self.chance(0.5) else self.new_input(row)
        k = next(self.counter)
        h = self.choice(["fnp.tanh(c * 0.5 + x)", "c * 0.9 + fnp.sin(x)", "c + x", "fnp.maximum(c, x)",
                         "c * x", "x", "c - fnp.mean(x)", "fnp.sqrt(fnp.abs(c) + 1.0) * x"])
        new_c = self.choice(["h", "x", "c + h", "h * 0.5"])
        y = self.choice(["h", "c", "h * 2.0", "fnp.sum(h)", "c * x"])
        carry, ys = self.fresh(), self.fresh()
        reverse = self.chance(0.3)
        code = (f"def body{k}(c, x):\n    h = {h}\n    return {new_c}, {y}\n"
                f"{carry}, {ys} = ft.lax.scan(body{k}, {init}, {xs}{', reverse=True' if reverse else ''})")
        return self.emit(code, [carry, ys], [init, xs])

    def op_cond(self) -> bool:
        a = self.pick()
        if a is None:
            return False
        r = self.rng.random()
        one, two = (self.choice(_UNARY).replace("{c}", self.const()).format(a="t") for _ in range(2))
        if r < 0.7:
            pred = self.choice(["fnp.sum({a}) > 0.0", "fnp.mean({a}) > {c}", "fnp.max({a}) < 1.0"])
            if "max" in pred and 0 in self.shape(a):
                return False
            return self.assign(f"ft.lax.cond({pred.replace('{c}', self.const())}, lambda t: {one}, "
                               f"lambda t: {two}, {{a}})", a=a)
        n = int(self.rng.integers(0, 4))
        return self.assign(f"ft.lax.fori_loop(0, {n}, lambda i, t: {one}, {{a}})", a=a)

    def op_nn(self) -> bool:
        r = self.rng.random()
        if r < 0.3:
            a = self.pick(pred=lambda s: len(s) >= 1)
            if a is None:
                return False
            w = self.weight(self.shape(a)[-1:])
            if self.chance(0.7):
                return self.assign("ft.nn.rms_norm({a}, {w})", a=a, w=w)
            return self.assign("ft.nn.layer_norm({a}, {w}, {b})", a=a, w=w, b=self.weight(self.shape(a)[-1:]))
        if r < 0.65:
            return self.attention()
        a = self.pick(pred=lambda s: len(s) >= 1 and s[-1] >= 1)
        if a is None:
            return False
        red = self.choice(["mean", "sum", "none"])
        if self.chance(0.6):
            labels = self.new_input(self.shape(a)[:-1], "labels", self.shape(a)[-1])
            return self.assign(f"ft.nn.cross_entropy({{a}}, {{y}}, reduction='{red}')", a=a, y=labels)
        b = self.operand_like(self.shape(a))
        if self.shape(b) != self.shape(a):
            return False
        return self.assign(f"ft.nn.cross_entropy({{a}}, ft.nn.softmax({{b}}), reduction='{red}')", a=a, b=b)

    def attention(self) -> bool:
        T, S = (int(self.choice([1, 3, 8, 17, 32])) for _ in range(2))
        N, H = int(self.choice([1, 2, 4])), int(self.choice([1, 4, 8, 16, 32]))
        lead = (int(self.choice([2, 3])),) if self.chance(0.3) else ()
        qshape = lead + (T, N, H)
        src = self.vars_of("f", lambda s: math.prod(s) == math.prod(qshape) and len(s) >= 1)
        if src and self.chance(0.6):
            if not self.assign(f"fnp.reshape({{a}}, {qshape})", a=self.choice(src)):
                return False
            q = self.created[-1]
        else:
            q = self.new_input(qshape)
        k = self.new_input(lead + (S, N, H)) if not (S == T and self.chance(0.3)) else q
        v = self.new_input(lead + (S, N, H))
        causal = self.chance(0.4)
        return self.assign(f"ft.nn.attention({{q}}, {{k}}, {{v}}, causal={causal})", q=q, k=k, v=v)

    def op_gather(self) -> bool:
        a = self.pick(pred=lambda s: len(s) >= 1 and s[0] >= 1)
        if a is None:
            return False
        shape = self.shape(a)
        m = int(self.choice([1, 5, 33, 200]))
        r = self.rng.random()
        if r < 0.4:
            return self.assign("{a}[{i}]", a=a, i=self.new_input((m,), "index", shape[0]))
        if r < 0.7:
            ax = int(self.rng.integers(len(shape)))
            if shape[ax] == 0:
                return False
            return self.assign(f"fnp.take({{a}}, {{i}}, axis={ax})", a=a, i=self.new_input((m,), "index", shape[ax]))
        ax = int(self.rng.integers(len(shape)))
        if shape[ax] == 0:
            return False
        ishape = tuple(m if d == ax else n for d, n in enumerate(shape))
        return self.assign(f"fnp.take_along_axis({{a}}, {{i}}, axis={ax})", a=a,
                           i=self.new_input(ishape, "index", shape[ax]))

    def op_broadcast(self) -> bool:
        a = self.pick()
        if a is None:
            return False
        shape = self.shape(a)
        r = self.rng.random()
        if r < 0.4:
            lead = (int(self.choice([1, 2, 3, 7])),)
            return self.assign(f"fnp.broadcast_to({{a}}, {lead + shape})", a=a)
        if r < 0.7:
            return self.assign(f"fnp.expand_dims({{a}}, {int(self.rng.integers(-len(shape) - 1, len(shape) + 1))})",
                               a=a)
        b = self.pick(pred=lambda s: len(s) == 1 and s[0] <= 600)
        if b is None or len(shape) != 1 or shape[0] > 600:
            return False
        return self.assign("{a}[:, None] * {b}[None, :]", a=a, b=b)

    _FAMILIES = (("unary", 18), ("binary", 18), ("compare", 7), ("reduce", 14), ("matmul", 6), ("reshape", 5),
                 ("transpose", 5), ("flip", 4), ("slice", 7), ("concat", 4), ("pad", 3), ("cumsum", 3),
                 ("softmax", 4), ("scan", 3), ("cond", 3), ("nn", 5), ("gather", 3), ("broadcast", 4))

    def generate(self) -> Program:
        self.new_input(self.main_shape())
        n_ops = int(self.rng.integers(2, 11))
        names = [n for n, _ in self._FAMILIES]
        weights = np.array([w for _, w in self._FAMILIES], float)
        tries = 0
        while len(self.stmts) < n_ops and tries < 60:
            tries += 1
            getattr(self, "op_" + names[int(self.rng.choice(len(names), p=weights / weights.sum()))])()
        outs = [n for n in self.created if n in self.avals][-1:] or [self.inputs[0].name]
        extra = [n for n in self.created if n not in outs]
        if extra and self.chance(0.4):
            outs.append(self.choice(extra))
        if not self.created:  # nothing traced: the identity
            self.assign("{a} * 1.0", a=self.inputs[0].name)
            outs = [self.created[-1]]
        batch = int(self.choice([1, 2, 3]))
        return Program(self.seed, self.index, self.dtype, list(self.inputs), list(self.stmts), outs, batch,
                       dict(self.avals)).restricted(outs)


def _axes_of(spec: str, nd: int) -> tuple:
    if spec == "None":
        return tuple(range(nd))
    val = eval(spec)  # an int or a tuple of ints written by axis_spec
    return tuple(sorted({a % nd for a in ((val,) if isinstance(val, int) else val)})) if nd else ()


def _factor(rng, size: int) -> tuple:
    """A random shape of ``size`` elements (rank 1 to 4)."""
    if size == 0:
        return tuple(int(x) for x in rng.permutation([0] + [int(d) for d in rng.integers(1, 5, int(rng.integers(0, 3)))]))
    dims, rest = [], size
    for _ in range(int(rng.integers(0, 3))):
        divs = [d for d in (2, 3, 4, 5, 7, 8, 16, 32) if rest % d == 0]
        if not divs:
            break
        d = int(divs[int(rng.integers(len(divs)))])
        dims.append(d)
        rest //= d
    dims.append(rest)
    if rng.random() < 0.2:
        dims.insert(int(rng.integers(len(dims) + 1)), 1)
    return tuple(int(dims[i]) for i in rng.permutation(len(dims)))


def generate(seed: int, index: int) -> Program:
    """Program ``index`` of ``seed`` (the same on every machine and run)."""
    return _Generator(seed, index).generate()


# --------------------------------------------------------------------------- inputs


@dataclass
class InputSet:
    """Arguments of one run: ``args`` for ``f``, ``weights`` for ``loss``, ``batched`` for ``vmap``
    (a leading axis of ``program.batch`` on the batched inputs); ``on_device``: OpenCL gets
    them through ``ft.device_put``."""
    args: list
    weights: list
    batched: list
    on_device: bool
    special: bool


def make_inputs(prog: Program, k: int) -> InputSet:
    """Input set ``k`` of ``prog``: each array drawn from its own seed (by name), so a program
    restricted to fewer inputs gets the same values."""
    rng = np.random.default_rng([prog.seed, prog.index, k])
    scale = float(rng.choice([1.0, 1.0, 3.0, 0.2]))
    special = bool(rng.random() < 0.12)
    on_device = bool(rng.random() < 0.5)

    def draw(spec: InputSpec, shape: tuple, slot: int) -> np.ndarray:
        r = np.random.default_rng([prog.seed, prog.index, k, int(spec.name[1:]), slot])
        if spec.kind != "float":
            return r.integers(0, max(spec.high, 1), shape).astype(np.int32 if spec.kind == "labels" else np.int64)
        x = (r.standard_normal(shape) * scale).astype(prog.dtype)
        if special and x.size:
            flat = x.reshape(-1)
            at = r.integers(0, flat.size, min(flat.size, 1 + flat.size // 2000))
            flat[at] = r.choice(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], prog.dtype), at.size)
        return x

    args = [draw(s, s.shape, 0) for s in prog.inputs]
    batched = [np.stack([draw(s, s.shape, 1 + b) for b in range(prog.batch)]) if s.batched else a
               for s, a in zip(prog.inputs, args)]
    weights = [np.random.default_rng([prog.seed, prog.index, k, 10_000 + j]).standard_normal(
        prog.avals[o][0]).astype(prog.dtype) for j, o in enumerate(prog.float_outputs)]
    return InputSet(args, weights, batched, on_device, special)


# --------------------------------------------------------------------------- checking


IMPLS = ("eager", "numpy", "opencl")
KINDS = ("value", "grad", "vmap")


@dataclass
class Failure:
    """One disagreement: ``what`` is "values", "nan", "shape", "dtype" or "exception"."""
    program: Program
    kind: str
    impl: str
    input_set: int
    what: str
    detail: str
    minimal: Program | None = None

    @property
    def signature(self) -> str:
        prog = self.minimal or self.program
        ops = _ops_of(prog.stmts[-1].code) if prog.stmts else "identity"
        detail = self.detail.splitlines()[0][:90] if self.what == "exception" else ""
        return f"{self.kind}/{self.impl}/{self.what} [{prog.dtype.name}] {ops}" + (f": {detail}" if detail else "")


def _ops_of(code: str) -> str:
    last = code.splitlines()[-1].split("=", 1)[-1]
    names = re.findall(r"(?:fnp|ft\.nn|ft\.lax)\.(\w+)", last)
    if "@" in last:
        names.append("matmul")
    if "[" in last and not names:
        names.append("index")
    return ",".join(dict.fromkeys(names)) or last.strip()[:40]


def _kind_function(prog: Program, ns: dict, kind: str) -> Callable | None:
    if kind == "value":
        return ns["f"]
    if kind == "vmap":
        if not any(s.batched for s in prog.inputs):
            return None
        return ft.vmap(ns["f"], in_axes=tuple(0 if s.batched else None for s in prog.inputs))
    if "loss" not in ns:
        return None
    return ft.value_and_grad(ns["loss"], argnums=tuple(prog.float_inputs))


def _kind_args(kind: str, inputs: InputSet) -> list:
    return {"value": inputs.args, "grad": inputs.args + inputs.weights, "vmap": inputs.batched}[kind]


def _to_reference(x) -> np.ndarray:
    x = np.asarray(x)
    return x.astype(np.float64) if x.dtype.kind == "f" else x


def reference(prog: Program, ns: dict, kind: str, inputs: InputSet, interp: BoundInterpreter) -> list:
    """Bounds of the leaves of ``kind``'s result: the IR traced at float64 and interpreted;
    ``vmap`` slice by slice through the unbatched program (so batching rules are checked too)."""
    if kind == "vmap":
        value = make_jaxpr(ns["f"])(*[_to_reference(a) for a in inputs.args])
        slices = [interp.run(value, [interp.exact(_to_reference(a[b] if s.batched else a))
                                     for s, a in zip(prog.inputs, inputs.batched)])
                  for b in range(prog.batch)]
        return [Bound(np.stack([s[j].v for s in slices]),
                      np.stack([np.broadcast_to(s[j].e, np.shape(s[j].v)) for s in slices]))
                for j in range(len(slices[0]))]
    fn = _kind_function(prog, ns, kind)
    args = [_to_reference(a) for a in _kind_args(kind, inputs)]
    closed = make_jaxpr(fn)(*args)
    return interp.run(closed, [interp.exact(a) for a in args])


def compare(got, want: Bound, aval) -> tuple[str, str] | None:
    """(what, detail) when ``got`` is outside ``want``'s bound, or has another shape or dtype."""
    got = np.asarray(got)
    if got.shape != tuple(aval.shape):
        return "shape", f"shape {got.shape}, expected {tuple(aval.shape)}"
    if got.dtype != aval.dtype:
        return "dtype", f"dtype {got.dtype}, expected {aval.dtype}"
    e = np.broadcast_to(want.e, got.shape)
    checked = np.isfinite(e)
    if got.dtype.kind != "f":  # exact, except by as much as the bound says (a count of comparisons
        # that rounding could flip is uncertain by the number of them)
        bad = checked & (got != want.v) & ~(np.abs(got.astype(np.float64) - np.asarray(want.v, np.float64)) <= e)
        if bad.any():
            i = tuple(int(j) for j in np.argwhere(bad)[0])
            return "values", f"{int(bad.sum())} of {got.size} elements differ, first at {i}: got {got[i]!r} want {want.v[i]!r}"
        return None
    g, w = got.astype(np.float64), np.asarray(want.v).astype(np.float64)
    nan = checked & (np.isnan(g) != np.isnan(w))
    with np.errstate(all="ignore"):
        off = checked & ~np.isnan(w) & ~((g == w) | (np.abs(g - w) <= 3 * e))
    if not (nan.any() or off.any()):
        return None
    what = "nan" if nan.any() and not (off & ~nan).any() else "values"
    bad = nan | off
    with np.errstate(all="ignore"):
        err = np.where(bad, np.abs(g - w) / np.maximum(e, 1e-300), 0)
    i = tuple(int(j) for j in np.unravel_index(int(np.nanargmax(np.where(np.isnan(err), np.inf, err))), got.shape)) \
        if got.ndim else ()
    return what, (f"{int(bad.sum())} of {got.size} elements outside the bound ({int(nan.sum())} NaN "
                  f"mismatches); worst at {i}: got {g[i]!r} want {w[i]!r} bound {float(e[i]):.3g}")


def _call(impl: str, fn: Callable, args: list, inputs: InputSet, jitted: dict, key):
    if impl == "eager":
        return fn(*args)
    j = jitted.get(key)
    if j is None:
        j = jitted[key] = ft.jit(fn, backend=impl)
    if impl == "opencl" and inputs.on_device:
        args = [ft.device_put(a) for a in args]
    return j(*args)


def _directional_check(prog: Program, ns: dict, inputs: InputSet, grad: list, interp: BoundInterpreter):
    """Reverse mode against forward mode, in the reference: ``grad(loss) . t`` against
    ``jvp(loss)(t)`` for a random ``t`` (their rules are written separately; every
    implementation runs the same reverse-mode IR, so only this catches a wrong rule)."""
    fl = prog.float_inputs
    args = [_to_reference(a) for a in inputs.args]
    ws = [_to_reference(w) for w in inputs.weights]
    rng = np.random.default_rng([prog.seed, prog.index, 20_000])
    ts = [rng.standard_normal(args[i].shape).astype(prog.dtype).astype(np.float64) for i in fl]

    def directional(*a):
        xs, w, t = list(a[:len(args)]), a[len(args):len(args) + len(ws)], a[len(args) + len(ws):]

        def loss(*p):
            full = list(xs)
            for i, v in zip(fl, p):
                full[i] = v
            return ns["loss"](*full, *w)
        return ft.jvp(loss, tuple(xs[i] for i in fl), tuple(t))[1]

    try:
        closed = make_jaxpr(directional)(*args, *ws, *ts)
    except Exception as e:
        return "exception", "jvp: " + "".join(traceback.format_exception_only(type(e), e)).strip()
    with np.errstate(all="ignore"):
        j = interp.run(closed, [interp.exact(a) for a in args + ws + ts])[0]
        terms = [t * np.asarray(g.v, np.float64) for t, g in zip(ts, grad[1:])]
        d = sum(float(np.sum(x)) for x in terms)
        e = sum(float(np.sum(np.abs(t) * g.e)) for t, g in zip(ts, grad[1:])) + \
            _summation_ulps(sum(t.size for t in ts)) * interp.u * sum(float(np.sum(np.abs(x))) for x in terms)
        jv, je = float(j.v), float(j.e)
        if not (np.isfinite(d) and np.isfinite(e) and np.isfinite(jv) and np.isfinite(je)):
            return None
        if abs(d - jv) <= 3 * (e + je):
            return None
    return "values", (f"grad . t = {d!r} (bound {e:.3g}) but jvp gives {jv!r} (bound {je:.3g}): the reverse-mode "
                      "and forward-mode rules disagree")


# --------------------------------------------------------------------------- running


@dataclass
class Stats:
    programs: int = 0
    comparisons: int = 0
    skipped: int = 0  # kinds the reference could not trace (no float output to differentiate, ...)
    failures: list = field(default_factory=list)
    rejected: dict = field(default_factory=dict)  # reference errors by message: programs the generator should not make

    @property
    def mismatches(self) -> list:
        return [f for f in self.failures if f.what != "exception"]

    @property
    def errors(self) -> list:
        return [f for f in self.failures if f.what == "exception"]

    def summary(self) -> str:
        lines = [f"programs tried: {self.programs}", f"comparisons: {self.comparisons}",
                 f"mismatches: {len(self.mismatches)}", f"errors: {len(self.errors)}"]
        if self.skipped:
            lines.append(f"comparisons skipped (nothing to differentiate or to batch): {self.skipped}")
        by_class: dict = {}
        for f in self.failures:
            by_class.setdefault(f.signature, []).append(f)
        for sig, fs in sorted(by_class.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"  {len(fs):4d} x {sig}   e.g. --program {fs[0].program.index}")
        for msg, n in sorted(self.rejected.items(), key=lambda kv: -kv[1]):
            lines.append(f"  reference failed {n} x: {msg}")
        return "\n".join(lines)


class Fuzzer:
    """Runs programs of one seed in one mode and collects their failures."""

    def __init__(self, seed: int = 0, mode: str = "default", sets: int = 2, kinds=KINDS, impls=IMPLS,
                 minimize: bool = True, log: Callable = print):
        if mode not in ("default", "kernels"):
            raise ValueError(f"fuzz: mode must be 'default' or 'kernels', got {mode!r}")
        self.seed, self.mode, self.sets, self.kinds, self.impls = seed, mode, sets, tuple(kinds), tuple(impls)
        self.minimize = minimize
        self.log = log
        self.stats = Stats()

    def run(self, indices, deadline: float | None = None) -> Stats:
        names = ("opencl_small_program_elements", "opencl_host_step_elements", "opencl_binary_cache")
        saved = {n: getattr(config, n) for n in names}
        # each program runs in this process only: saving its binary (on PoCL, ~0.2 s of recompiling
        # per program) would cost more than the program; tests/test_opencl_cache.py checks that path
        config.update("opencl_binary_cache", False)
        if self.mode == "kernels":
            for n in names[:2]:
                config.update(n, 0)
        try:
            with np.errstate(all="ignore"):
                for i in indices:
                    if deadline is not None and time.monotonic() > deadline:
                        break
                    self.run_program(i)
        finally:
            for n, v in saved.items():
                config.update(n, v)
        return self.stats

    def run_program(self, index: int) -> list:
        prog = generate(self.seed, index)
        self.stats.programs += 1
        failures = self.check(prog, range(self.sets))
        for f in failures:
            if self.minimize:
                f.minimal = self.minimized(f)
            self.stats.failures.append(f)
            self.log(self.report(f))
        return failures

    def check(self, prog: Program, sets, only: tuple | None = None) -> list:
        """Failures of ``prog`` over input ``sets`` (``only``: one (kind, impl) pair)."""
        ns = prog.namespace()
        interp = BoundInterpreter(prog.dtype)
        jitted: dict = {}
        failures = []
        for k in sets:
            inputs = make_inputs(prog, k)
            for kind in (self.kinds if only is None else (only[0],)):
                fn = _kind_function(prog, ns, kind)
                if fn is None:
                    self.stats.skipped += 1
                    continue
                args = _kind_args(kind, inputs)
                try:
                    avals = make_jaxpr(fn)(*args).out_avals
                    want = reference(prog, ns, kind, inputs, interp)
                except Exception as e:  # the program is not one functrace supports: the generator's fault
                    msg = f"{kind}: {type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}"
                    self.stats.rejected[msg] = self.stats.rejected.get(msg, 0) + 1
                    continue
                for impl in (self.impls if only is None else (only[1],)):
                    self.stats.comparisons += 1
                    if impl == "jvp":
                        found = _directional_check(prog, ns, inputs, want, interp)
                    else:
                        found = self._check_one(prog, fn, args, inputs, jitted, kind, impl, avals, want)
                    if found is not None:
                        failures.append(Failure(prog, kind, impl, k, *found))
                if kind == "grad" and only is None:
                    self.stats.comparisons += 1
                    found = _directional_check(prog, ns, inputs, want, interp)
                    if found is not None:
                        failures.append(Failure(prog, kind, "jvp", k, *found))
        return failures

    @staticmethod
    def _check_one(prog, fn, args, inputs, jitted, kind, impl, avals, want):
        try:
            got = ft.tree_util.tree_leaves(_call(impl, fn, args, inputs, jitted, (kind, impl)))
            got = [np.asarray(g) for g in got]
        except Exception as e:
            return "exception", "".join(traceback.format_exception_only(type(e), e)).strip()
        if len(got) != len(avals):
            return "shape", f"{len(got)} outputs, expected {len(avals)}"
        for j, (g, w, a) in enumerate(zip(got, want, avals)):
            found = compare(g, w, a)
            if found is not None:
                return found[0], f"output {j}: {found[1]}"
        return None

    def minimized(self, failure: Failure) -> Program | None:
        """The first value of the program (in order) whose own program fails the same way."""
        prog = failure.program
        for s in prog.stmts:
            for out in s.outs:
                if out in prog.outputs and len(prog.outputs) == 1:
                    return None  # the program itself is the smallest
                small = prog.restricted([out])
                if failure.kind == "grad" and not small.float_outputs:
                    continue
                try:
                    found = self.check(small, [failure.input_set], (failure.kind, failure.impl))
                except Exception:
                    continue
                if found and found[0].what == failure.what:
                    return small
        return None

    def report(self, f: Failure) -> str:
        prog = f.minimal or f.program
        inputs = make_inputs(f.program, f.input_set)
        how = "device_put" if inputs.on_device else "host arrays"
        head = (f"=== {'ERROR' if f.what == 'exception' else 'MISMATCH'}: program {f.program.index} (seed {self.seed}, "
                f"mode {self.mode}, {prog.dtype.name}), {f.kind} via {f.impl}, input set {f.input_set} "
                f"({how}{', with NaN/inf' if inputs.special else ''})")
        lines = [head, textwrap.indent(f.detail, "  "),
                 f"  reproduce: python -m functrace.fuzz --seed {self.seed} --mode {self.mode} --program {f.program.index}",
                 f"  inputs: {prog.describe_inputs()}" + (f"; vmap batch {prog.batch}" if f.kind == "vmap" else "")]
        if f.minimal is not None:
            lines.append("  smallest failing part of the program:")
        lines.append(textwrap.indent(prog.source(), "    "))
        return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m functrace.fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200, help="number of programs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mode", choices=("default", "kernels"), default="default",
                        help="kernels: every step runs as an OpenCL kernel (no host shortcuts)")
    parser.add_argument("--minutes", type=float, default=None, help="stop starting programs after this long")
    parser.add_argument("--start", type=int, default=0, help="first program index")
    parser.add_argument("--program", type=int, default=None, help="run only this program (prints its source)")
    parser.add_argument("--sets", type=int, default=2, help="input sets per program")
    opts = parser.parse_args(argv)
    fuzzer = Fuzzer(opts.seed, opts.mode, opts.sets, log=lambda s: print(s, flush=True))
    if opts.program is not None:
        prog = generate(opts.seed, opts.program)
        print(f"# program {opts.program} (seed {opts.seed}), {prog.dtype.name}; inputs: {prog.describe_inputs()}")
        print(prog.source())
        indices = [opts.program]
    else:
        indices = range(opts.start, opts.start + opts.n)
    deadline = None if opts.minutes is None else time.monotonic() + 60 * opts.minutes
    t0 = time.monotonic()
    faulthandler.enable()  # a crash in a driver still says where

    def progress(i):
        # a program that hangs (a driver deadlock) ends the run with the stack, after 15 minutes
        faulthandler.dump_traceback_later(900, exit=True)
        if opts.program is None and (i - opts.start) % 50 == 0:
            print(f"[{time.monotonic() - t0:7.0f} s] program {i}: {len(fuzzer.stats.failures)} failures so far",
                  flush=True)
        return i
    try:
        stats = fuzzer.run((progress(i) for i in indices), deadline)
    except KeyboardInterrupt:  # Ctrl-C: the summary of the programs run so far
        stats = fuzzer.stats
        print("\ninterrupted", flush=True)
    faulthandler.cancel_dump_traceback_later()
    print(f"\nseed {opts.seed}, mode {opts.mode}, {time.monotonic() - t0:.0f} s")
    print(stats.summary())
    return 1 if stats.failures else 0


if __name__ == "__main__":
    sys.exit(main())
