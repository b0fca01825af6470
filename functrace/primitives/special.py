"""The special-function primitives: ``erf``, ``erfc``, ``erf_inv``, ``sinh``, ``cosh``, ``asinh``,
``acosh``, ``hypot`` and ``exp2`` (elementwise, floats).

numpy has no erf / erfc ufunc: the implementations call ``math.erf`` / ``math.erfc`` per element
(OpenCL kernels use the ``erf`` / ``erfc`` builtins).  ``erfc`` is a primitive of its own because
1 - erf(x) would lose every digit in the upper tail, which ``ndtr`` and ``log_ndtr`` need.
``erf_inv`` is M. Giles' single-precision polynomials ("Approximating the erfinv function", GPU
Computing Gems, 2011) in w = -log1p(-x^2), the form XLA's (so jax.random.normal's float32 values)
use; float64 refines that guess with Halley / Newton steps on erf (erfc in the tails, where
1 - |x| is exact).  Derivatives are the closed forms: erf' = 2/sqrt(pi) exp(-x^2),
erfc' = -erf', erf_inv' = sqrt(pi)/2 exp(erf_inv(x)^2).

The hyperbolic functions and ``hypot`` are primitives (numpy's ufuncs; the C library's in OpenCL
kernels) because their textbook formulas are wrong at ordinary arguments: (e^x - e^-x) / 2 is 0 for
sinh(1e-20) and overflows at sinh(-710), log(x + sqrt(x^2 + 1)) is -inf for asinh(-1e8) and
sqrt(x^2 + y^2) is inf for hypot(1e200, 1e200); e^(x ln 2) misses 2^1000 by 300 ulps where
exp2 is exact at integers (logaddexp2 needs it).  Their derivatives do not overflow where the
functions do not: sinh' = cosh, cosh' = sinh, asinh' = 1 / hypot(x, 1),
acosh' = 1 / (sqrt(x - 1) sqrt(x + 1)), d hypot = (x dx + y dy) / hypot (0 at the origin),
exp2' = exp2 ln 2.
"""
from __future__ import annotations

import math

import numpy as np

from . import basic as P

_erf_object = np.frompyfunc(math.erf, 1, 1)  # (numpy has no erf ufunc: math.erf per element)
_erfc_object = np.frompyfunc(math.erfc, 1, 1)  # (numpy has no erfc ufunc: math.erfc per element)

# (np.asarray: on a 0-d array frompyfunc returns a Python float, which has no astype)
erf_p = P.elementwise("erf", lambda x: np.asarray(_erf_object(x), dtype=np.asarray(x).dtype),
                      [lambda ans, x: P.mul(P.scalar_like(x, 2.0 / math.sqrt(math.pi)),
                                            P.exp_p.bind(P.neg(P.mul(x, x))))])

# erf_inv: M. Giles, "Approximating the erfinv function" (GPU Computing Gems, 2011), single-precision
# polynomials in w = -log1p(-x^2) (the form XLA's, so jax.random.normal's float32 values, use);
# float64 refines that guess with Newton steps on erf (erfc in the tails, where 1 - |x| is exact)
ERF_INV_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                   -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)  # w < 5, in w - 2.5
ERF_INV_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)  # w >= 5, in sqrt(w) - 3
ERF_INV_TAIL_FROM = 0.9  # |x| above: Newton on log(erfc) (erf(z) - |x| loses digits there)
ERF_INV_STEPS = (2, 4)  # float64 refinement steps (Halley on erf, Newton on log erfc): to rounding,
#                         1 - 1e-16 included (checked against scipy's erfinv)


def _erf_inv_guess(x: np.ndarray) -> np.ndarray:
    """Giles' polynomial in ``x``'s dtype (float32: JAX's erf_inv; float64: Newton's start)."""
    t = x.dtype.type
    with np.errstate(divide="ignore", invalid="ignore"):
        w = -np.log1p(-x * x)
        central = w < t(5.0)
        w = np.where(central, w - t(2.5), np.sqrt(w) - t(3.0))
        p = np.where(central, t(ERF_INV_CENTRAL[0]), t(ERF_INV_TAIL[0]))
        wide = np.float64  # a fused multiply-add (as XLA's CPU code): the float32 product is exact in float64
        for c, d in zip(ERF_INV_CENTRAL[1:], ERF_INV_TAIL[1:]):
            p = (np.where(central, t(c), t(d)) + p.astype(wide) * w.astype(wide)).astype(x.dtype)
        return (p * x).astype(x.dtype)


def _erf_inv_impl(x):
    x = np.asarray(x)
    guess = _erf_inv_guess(x)
    if x.dtype == np.float64:
        guess = np.copysign(_erf_inv_newton(np.abs(x).ravel(), np.abs(guess).ravel()).reshape(x.shape), x)
    with np.errstate(invalid="ignore"):
        return np.where(np.abs(x) == 1, x * np.inf, np.where(np.abs(x) > 1, np.nan, guess)).astype(x.dtype)


def _erf_inv_newton(a: np.ndarray, z: np.ndarray) -> np.ndarray:
    """Refine z >= 0 toward erf(z) = a (a = |x|): Halley steps on erf(z) - a up to
    ``ERF_INV_TAIL_FROM``, Newton steps on log(erfc(z)) - log(1 - a) above (1 - a is exact there,
    and the function nearly linear in z, so the far tail converges too)."""
    c = 2.0 / math.sqrt(math.pi)
    z = z.copy()
    with np.errstate(all="ignore"):
        central = np.isfinite(z) & (a <= ERF_INV_TAIL_FROM)
        zc, ac = z[central], a[central]
        for _ in range(ERF_INV_STEPS[0]):
            miss = np.asarray(_erf_object(zc), dtype=np.float64) - ac
            zc = zc - miss / (c * np.exp(-zc * zc) + zc * miss)
        z[central] = zc
        tail = np.isfinite(z) & (a > ERF_INV_TAIL_FROM) & (a < 1)
        zt, at = z[tail], a[tail]
        for _ in range(ERF_INV_STEPS[1]):
            erfc = np.asarray(_erfc_object(zt), dtype=np.float64)
            zt = zt - (np.log1p(-at) - np.log(erfc)) * erfc / (c * np.exp(-zt * zt))
        z[tail] = zt
    return z


erf_inv_p = P.elementwise("erf_inv", _erf_inv_impl,
                          [lambda ans, x: P.mul(P.scalar_like(x, math.sqrt(math.pi) / 2),
                                                P.exp_p.bind(P.mul(ans, ans)))])

erfc_p = P.elementwise("erfc", lambda x: np.asarray(_erfc_object(x), dtype=np.asarray(x).dtype),
                       [lambda ans, x: P.mul(P.scalar_like(x, -2.0 / math.sqrt(math.pi)),
                                             P.exp_p.bind(P.neg(P.mul(x, x))))])

sinh_p = P.elementwise("sinh", np.sinh, [lambda ans, x: cosh_p.bind(x)])
cosh_p = P.elementwise("cosh", np.cosh, [lambda ans, x: sinh_p.bind(x)])
def _over_hypot(v, ans):
    """``v / hypot``, a partial derivative of hypot: 0 at the origin, where the cone has no
    derivative (JAX's value there; 0 / 0 gave NaN)."""
    return P.div(v, P.select(P.eq(ans, P.scalar_like(ans, 0)), P.scalar_like(ans, 1), ans))


hypot_p = P.elementwise("hypot", np.hypot, [lambda ans, x, y: _over_hypot(x, ans), lambda ans, x, y: _over_hypot(y, ans)])
asinh_p = P.elementwise("asinh", np.arcsinh, [P.Reciprocal(lambda ans, x: hypot_p.bind(x, P.scalar_like(x, 1)))])
acosh_p = P.elementwise("acosh", np.arccosh, [P.Reciprocal(  # (x^2 - 1 would overflow from 1e154)
    lambda ans, x: P.mul(P.sqrt_p.bind(P.sub(x, P.scalar_like(x, 1))), P.sqrt_p.bind(P.add(x, P.scalar_like(x, 1)))))])
exp2_p = P.elementwise("exp2", np.exp2, [lambda ans, x: P.mul(ans, P.scalar_like(ans, math.log(2)))])
