"""``functrace.scipy.special``: scipy.special's functions that statistical code differentiates.

Written with functrace.numpy, so they run eagerly, under ``jit`` (fused into generated kernels on
OpenCL) and under every transformation, with derivatives from the formulas themselves:

* ``gammaln`` / ``digamma``: the Stirling (de Moivre) series at z >= 15, reached from smaller
  arguments by the recurrence (x -> x + 8) and from x < 1/2 by the reflection formula; about
  1e-15 absolute error in float64 (scipy's values: see tests/test_scipy.py).
* ``ndtri``: Acklam's rational approximation refined by two Halley steps on the normal cdf
  (residuals from erf near the center and from erfc in the tails, so neither loses digits: the
  tails are why it is not ``sqrt(2) * erfinv(2p - 1)``); its derivative comes from
  ``custom_jvp`` (1 / pdf), not from the iterations.  ``erfinv`` is ``ft.nn.erf_inv``.
* ``erfc`` is a primitive (``primitives/special.py``: ``math.erfc`` on the host, OpenCL's ``erfc``
  builtin in kernels): 1 - erf(x) would lose every digit in the upper tail, which ``ndtr`` and
  ``log_ndtr`` need.
"""
from __future__ import annotations

import math

import numpy as np

from .. import arrays, nn
from .. import numpy as fnp
from .. import primitives as P
from ..primitives.special import erfc_p
from ..transforms.autodiff import stop_gradient as _stop_gradient
from ..transforms.custom import custom_jvp

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_SQRT2 = math.sqrt(2.0)


def _float(x):
    return arrays.to_float(x, np.float64)


def erf(x):
    return nn.erf(x)


def erfc(x):
    """1 - erf(x), accurate in the upper tail."""
    return erfc_p.bind(_float(x))


def expit(x):
    return fnp.sigmoid(_float(x))


def logit(p):
    p = _float(p)
    return fnp.log(p) - fnp.log1p(-p)


def xlogy(x, y):
    """x * log(y), 0 where x == 0 (also for y == 0)."""
    x, y = arrays.promote_float(x, y)
    zero = x == 0
    return fnp.where(zero, 0.0, x * fnp.log(fnp.where(zero, 1.0, y)))


def xlog1py(x, y):
    """x * log1p(y), 0 where x == 0."""
    x, y = arrays.promote_float(x, y)
    zero = x == 0
    return fnp.where(zero, 0.0, x * fnp.log1p(fnp.where(zero, 0.0, y)))


def entr(x):
    """-x log x for x > 0, 0 at 0, -inf for x < 0."""
    x = _float(x)
    positive = x > 0
    inner = -x * fnp.log(fnp.where(positive, x, 1.0))
    return fnp.where(positive, inner, fnp.where(x == 0, P.scalar_like(x, 0.0), P.scalar_like(x, -np.inf)))


# --------------------------------------------------------------------------- gamma family

# Stirling series coefficients B_2k / (2k (2k - 1)) for log Gamma, k = 1..8
_LGAMMA_SERIES = (1 / 12, -1 / 360, 1 / 1260, -1 / 1680, 1 / 1188, -691 / 360360, 1 / 156, -3617 / 122400)
# B_2k / (2k) for digamma, k = 1..7
_DIGAMMA_SERIES = (1 / 12, -1 / 120, 1 / 252, -1 / 240, 1 / 132, -691 / 32760, 1 / 12)
_SHIFT = 8       # recurrence steps taking x >= 1/2 to x + 8 >= 8.5
_SERIES_AT = 15  # direct series from here on


def _series(w, coefficients):
    """sum_k c_k w^k for k = 0.. (Horner)."""
    acc = coefficients[-1]
    for c in coefficients[-2::-1]:
        acc = acc * w + c
    return acc


def _shifted(x):
    """(z, shifted): z = x + 8 where x < 15 (and x >= 1/2 assumed), else x."""
    shifted = x < _SERIES_AT
    return fnp.where(shifted, x + _SHIFT, x), shifted


def _gammaln_right(x):
    """log Gamma(x) for x >= 1/2."""
    z, shifted = _shifted(x)
    inv = 1 / z
    stirling = (z - 0.5) * fnp.log(z) - z + _LOG_SQRT_2PI + inv * _series(inv * inv, _LGAMMA_SERIES)
    small = fnp.where(shifted, x, 1.0)
    product = small
    for k in range(1, _SHIFT):
        product = product * (small + k)
    return stirling - fnp.where(shifted, fnp.log(product), 0.0)


def _digamma_right(x):
    """digamma(x) for x >= 1/2."""
    z, shifted = _shifted(x)
    inv2 = 1 / (z * z)
    asymptotic = fnp.log(z) - 0.5 / z - inv2 * _series(inv2, _DIGAMMA_SERIES)
    small = fnp.where(shifted, x, 1.0)
    recurrence = 1 / small
    for k in range(1, _SHIFT):
        recurrence = recurrence + 1 / (small + k)
    return asymptotic - fnp.where(shifted, recurrence, 0.0)


def _reduced(x):
    """x minus its nearest integer (exact), for sin(pi x) and tan(pi x) without losing digits."""
    return x - fnp.round(x)


def gammaln(x):
    """log |Gamma(x)| (inf at 0 and the negative integers), as scipy.special.gammaln."""
    x = _float(x)
    right = x >= 0.5
    pos = fnp.where(right, x, 1 - x)  # >= 1/2 on both branches
    lg = _gammaln_right(pos)
    sin_pi = fnp.abs(fnp.sin(np.pi * _reduced(x)))
    reflected = math.log(math.pi) - fnp.log(fnp.where(right, 1.0, sin_pi)) - lg
    return fnp.where(right, lg, reflected)


def digamma(x):
    """d/dx log Gamma(x) (NaN at the negative integers, -inf at 0, as scipy)."""
    x = _float(x)
    right = x >= 0.5
    pos = fnp.where(right, x, 1 - x)
    psi = _digamma_right(pos)
    r = fnp.where(right, 0.25, _reduced(x))
    pole = r == 0
    safe_r = fnp.where(pole, 0.25, r)
    reflected = psi - np.pi * fnp.cos(np.pi * safe_r) / fnp.sin(np.pi * safe_r)
    at_pole = fnp.where(x == 0, P.scalar_like(x, -np.inf), P.scalar_like(x, np.nan))
    return fnp.where(right, psi, fnp.where(pole, at_pole, reflected))


def betaln(a, b):
    """log |B(a, b)| = gammaln(a) + gammaln(b) - gammaln(a + b)."""
    a, b = arrays.promote_float(a, b)
    return gammaln(a) + gammaln(b) - gammaln(a + b)


# --------------------------------------------------------------------------- normal distribution


def ndtr(x):
    """The standard normal cdf, accurate in both tails."""
    return 0.5 * erfc(-_float(x) / _SQRT2)


_LOG_NDTR_ASYMPTOTIC_BELOW = -20.0


def log_ndtr(x):
    """log of the standard normal cdf: log1p(-upper tail) for x > 0, log(ndtr) down to -20, and the
    asymptotic series of the Mills ratio below (where ndtr underflows)."""
    x = _float(x)
    upper = x > 0
    middle = fnp.where(upper | (x < _LOG_NDTR_ASYMPTOTIC_BELOW), -1.0, x)
    pos = fnp.where(upper, x, 1.0)
    far = fnp.where(x < _LOG_NDTR_ASYMPTOTIC_BELOW, x, _LOG_NDTR_ASYMPTOTIC_BELOW)
    w = 1 / (far * far)
    # 1 - 1/x^2 + 3/x^4 - 15/x^6 + ...: the terms (2k-1)!! (-1/x^2)^k, k <= 10
    terms, term = 1.0, 1.0
    for k in range(1, 11):
        term = term * (-(2 * k - 1)) * w
        terms = terms + term
    asymptotic = -0.5 * far * far - fnp.log(-far) - _LOG_SQRT_2PI + fnp.log(terms)
    return fnp.where(upper, fnp.log1p(-0.5 * erfc(pos / _SQRT2)),
                     fnp.where(x < _LOG_NDTR_ASYMPTOTIC_BELOW, asymptotic, fnp.log(0.5 * erfc(-middle / _SQRT2))))


# Acklam's rational approximation of the normal quantile (relative error < 1.2e-9)
_A = (-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02, 1.383577518672690e+02,
      -3.066479806614716e+01, 2.506628277459239e+00)
_B = (-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02, 6.680131188771972e+01,
      -1.328068155288572e+01, 1.0)
_C = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00, -2.549732539343734e+00,
      4.374664141464968e+00, 2.938163982698783e+00)
_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00, 1.0)
_TAIL = 0.02425


def _poly(x, coefficients):
    """Horner's rule, highest power first."""
    acc = coefficients[0]
    for c in coefficients[1:]:
        acc = acc * x + c
    return acc


def _normal_quantile(h, t):
    """ndtri(p) from h = p - 1/2 and t = min(p, 1 - p), both exact for the caller's argument:
    the magnitude a >= 0 of the quantile, refined by Halley steps, then given the sign of h."""
    central = t >= _TAIL
    hc = fnp.where(central, h, 0.0)
    r = hc * hc
    guess_central = fnp.abs(hc) * _poly(r, _A) / _poly(r, _B)
    tt = fnp.where(central, 0.25, fnp.maximum(t, float(np.finfo(P.dtype_of(t)).tiny)))  # log(0) never taken
    q = fnp.sqrt(-2 * fnp.log(tt))
    guess_tail = -_poly(q, _C) / _poly(q, _D)
    a = fnp.where(central, guess_central, guess_tail)
    abs_h = fnp.abs(h)
    for _ in range(2):
        # residual ndtr(a) - (1/2 + |h|), formed without cancellation in each region
        residual = fnp.where(central, 0.5 * erf(a / _SQRT2) - abs_h, t - 0.5 * erfc(a / _SQRT2))
        u = residual * (math.sqrt(2 * math.pi) * fnp.exp(0.5 * a * a))
        a = a - u / (1 + 0.5 * a * u)
    out = fnp.where(h < 0, -a, a)
    out = fnp.where(t == 0, fnp.where(h < 0, P.scalar_like(out, -np.inf), P.scalar_like(out, np.inf)), out)
    return fnp.where((t < 0) | fnp.isnan(t), fnp.nan, out)


@custom_jvp
def _ndtri(p):
    return _normal_quantile(p - 0.5, fnp.minimum(p, 1 - p))


@_ndtri.defjvp
def _ndtri_jvp(primals, tangents):
    (p,), (t,) = primals, tangents
    x = _ndtri(p)
    return x, t * (math.sqrt(2 * math.pi) * fnp.exp(0.5 * x * x))


def ndtri(p):
    """The standard normal quantile (inverse of ndtr): -inf at 0, inf at 1, NaN outside [0, 1]."""
    return _ndtri(_float(p))


def erfinv(y):
    """The inverse of erf on [-1, 1] (+-inf at +-1, NaN outside): ``ft.nn.erf_inv``."""
    return nn.erf_inv(_float(y))


# --------------------------------------------------------------------------- logsumexp


def logsumexp(a, axis=None, b=None, keepdims: bool = False, return_sign: bool = False):
    """log(sum(b * exp(a))) without overflow; ``return_sign``: (log|sum|, sign of the sum), else a
    negative sum gives NaN (as scipy)."""
    a = _float(a)
    if b is not None:
        a, b = arrays.promote_float(a, b)
        a = a + fnp.zeros_like(b)  # broadcast
        b = fnp.broadcast_to(b, a.shape)
    shift = fnp.max(a, axis=axis, keepdims=True)
    shift = _stop_gradient(fnp.where(fnp.isfinite(shift), shift, 0.0))
    e = fnp.exp(a - shift)
    if b is not None:
        e = e * b
    total = fnp.sum(e, axis=axis, keepdims=True)
    sign = fnp.sign(total)
    out = fnp.log(fnp.abs(total) if return_sign else total) + shift
    if not keepdims:
        axes = tuple(range(a.ndim)) if axis is None else axis
        out, sign = fnp.squeeze(out, axes), fnp.squeeze(sign, axes)
    return (out, sign) if return_sign else out
