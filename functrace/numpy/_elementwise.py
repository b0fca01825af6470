"""Elementwise functions beyond the basic ufuncs: numpy's cbrt, fmod, copysign, signbit (their own
primitives), and the rest written over primitives (each differentiable where numpy's is smooth)."""
from __future__ import annotations

import math as _math

import numpy as _np

from .. import arrays as _arrays
from .. import primitives as _P
from ..core import Tracer as _Tracer
from ..core.errors import user_frame_description as _where_in_user_code
from . import _base as _fnp


def cbrt(x):
    """The real cube root (negative for negative ``x``)."""
    return _P.cbrt_p.bind(_arrays.to_float(x))


def fmod(x1, x2):
    """C's remainder: the sign of the dividend (``numpy.remainder`` takes the divisor's)."""
    return _P.fmod_p.bind(*_arrays.promote_no_bool_loop(x1, x2))


def copysign(x1, x2):
    """``|x1|`` with the sign bit of ``x2`` (-0.0 included)."""
    return _P.copysign_p.bind(*_arrays.promote_float(x1, x2))


def signbit(x):
    """True where the sign bit is set: negative numbers, -0.0 and negative NaNs."""
    x = _arrays.to_array(x)
    if x.dtype.kind in "biu":
        return _fnp.less(x, 0)
    return _P.signbit_p.bind(x)


def trunc(x):
    """Round toward zero; integers and bools stay as they are (numpy >= 2)."""
    x = _arrays.to_array(x)
    if x.dtype.kind in "biu":
        return x
    return _fnp.where(_fnp.less(x, 0), _fnp.ceil(x), _fnp.floor(x))


fix = trunc


def fabs(x):
    """Absolute value of real numbers, as a float (numpy's fabs has no complex loop)."""
    x = _arrays.to_float(x)
    if x.dtype.kind == "c":
        raise TypeError(f"fabs: complex input is not supported (as numpy; use abs) {_where_in_user_code()}")
    return _fnp.abs(x)


def deg2rad(x):
    return _fnp.multiply(_arrays.to_float(x), _math.pi / 180)


def rad2deg(x):
    return _fnp.multiply(_arrays.to_float(x), 180 / _math.pi)


radians, degrees = deg2rad, rad2deg


def sinc(x):
    """``sin(pi x) / (pi x)``, 1 at 0.  For |x| < 0.05 its Taylor series (to (pi x)^8: below 1e-16
    relative) instead, so that every derivative is finite and smooth through 0."""
    x = _arrays.to_float(x)
    near_zero = _fnp.less(_fnp.abs(x), 0.05)
    safe = _fnp.where(near_zero, _fnp.ones_like(x), x) * _math.pi
    u = _fnp.square(_fnp.where(near_zero, x, _fnp.zeros_like(x)) * _math.pi)
    series = 1 - u / 6 * (1 - u / 20 * (1 - u / 42 * (1 - u / 72)))
    return _fnp.where(near_zero, series, _fnp.sin(safe) / safe)


def float_power(x1, x2):
    """``x1 ** x2`` computed in float64 (complex128 for complex operands), as numpy's."""
    dt = _np.result_type(_arrays.dtype_info(x1)[0], _arrays.dtype_info(x2)[0], _np.float64)
    return _fnp.power(_fnp.asarray(x1, dt), _fnp.asarray(x2, dt))


def heaviside(x1, x2):
    """0 below zero, 1 above, ``x2`` at zero; NaN stays NaN."""
    x1, x2 = _arrays.promote_float(x1, x2)
    out = _fnp.where(_fnp.less(x1, 0), _fnp.zeros_like(x1), _fnp.where(_fnp.greater(x1, 0), _fnp.ones_like(x1), x2))
    return _fnp.where(_fnp.isnan(x1), x1, out)


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """NaN to ``nan``, +-inf to ``posinf`` / ``neginf`` (default: the dtype's largest finite values)."""
    x = _arrays.to_array(x)
    if x.dtype.kind not in "fc":
        return x
    if x.dtype.kind == "c":
        raise NotImplementedError("nan_to_num of complex values is not implemented")
    info = _np.finfo(x.dtype)
    posinf = info.max if posinf is None else posinf
    neginf = info.min if neginf is None else neginf
    x = _fnp.where(_fnp.isnan(x), _np.asarray(nan, x.dtype), x)
    x = _fnp.where(_fnp.equal(x, _np.inf), _np.asarray(posinf, x.dtype), x)
    return _fnp.where(_fnp.equal(x, -_np.inf), _np.asarray(neginf, x.dtype), x)


def ldexp(x1, x2):
    """``x1 * 2**x2`` for integer ``x2`` (exact: a power of two)."""
    x1 = _arrays.to_float(x1)
    x2 = _arrays.to_array(x2)
    if x2.dtype.kind not in "biu":
        raise TypeError(f"ldexp: the exponent must be an integer array, got {x2.dtype.name} {_where_in_user_code()}")
    return _fnp.multiply(x1, _fnp.power(_np.asarray(2.0, x1.dtype), _fnp.asarray(x2, x1.dtype)))


def frexp(x):
    """(mantissa, exponent) with ``x = mantissa * 2**exponent`` and 0.5 <= |mantissa| < 1 (0, inf and
    NaN: exponent 0, mantissa x).  The exponent is a float estimate from log2, corrected by one step
    each way, so exact: the mantissa is an exact division by a power of two."""
    x = _arrays.to_float(x)
    if not isinstance(x, _Tracer):
        return _np.frexp(x)
    finite_nonzero = _fnp.logical_and(_fnp.isfinite(x), _fnp.not_equal(x, 0))
    mag = _P.stop_gradient(_fnp.where(finite_nonzero, _fnp.abs(x), _fnp.ones_like(x)))
    e = _fnp.floor(_fnp.log2(mag)) + 1
    m = _scale_down(mag, e)
    e = _fnp.where(_fnp.greater_equal(m, 1), e + 1, _fnp.where(_fnp.less(m, 0.5), e - 1, e))
    e = _fnp.where(finite_nonzero, e, _fnp.zeros_like(e))
    mantissa = _fnp.where(finite_nonzero, _scale_down(x, e), x)
    return mantissa, _fnp.asarray(e, _np.int32)


def _scale_down(x, e):
    """``x / 2**e`` exactly, in two halves: 2**e alone overflows (2**128 for float32's largest values)."""
    two = _np.asarray(2.0, _arrays.to_array(x).dtype)
    half = _fnp.floor(e / 2)
    return x / _fnp.power(two, half) / _fnp.power(two, e - half)


def _i0_series(x):
    """I0 by its power series sum (x^2/4)^k / (k!)^2 (positive terms: no cancellation), |x| <= 15."""
    t = _fnp.square(x) * 0.25
    total = _fnp.ones_like(t)
    for k in range(45, 0, -1):  # Horner: 1 + t/1^2 (1 + t/2^2 (1 + ...))
        total = 1 + total * t / (k * k)
    return total


def _i0_asymptotic(x):
    """I0 for x > 15: e^x / sqrt(2 pi x) * sum_k ((2k-1)!!)^2 / (k! (8x)^k), 18 terms (below 1e-17)."""
    total, term = _fnp.ones_like(x), _fnp.ones_like(x)
    for k in range(1, 19):
        term = term * ((2 * k - 1) ** 2 / (8.0 * k)) / x
        total = total + term
    return _fnp.exp(x) / _fnp.sqrt(2 * _math.pi * x) * total


def i0(x):
    """The modified Bessel function of the first kind of order 0 (real ``x``), differentiable to
    any order: a power series for |x| <= 15, the asymptotic series beyond (each branch fed only
    its own range, so neither overflows in the other's derivative)."""
    x = _arrays.to_float(x, _np.float64)
    small = _fnp.less_equal(_fnp.abs(x), 15)
    near = _fnp.where(small, x, _fnp.zeros_like(x))
    far = _fnp.where(small, _fnp.full_like(x, 16.0), _fnp.abs(x))
    return _fnp.where(small, _i0_series(near), _i0_asymptotic(far))


def _complex_part(name: str, primitive_fn, real_value):
    """``fnp.real`` / ``imag`` / ``conj``: numpy's on concrete values; on traced values the complex
    primitive for complex inputs, ``real_value(x)`` for real ones (no primitive needed)."""
    def part(val):
        x = _arrays.to_array(val)
        if not isinstance(x, _Tracer):
            return getattr(_np, name)(x)
        return primitive_fn(x) if x.dtype.kind == "c" else real_value(x)
    part.__name__ = part.__qualname__ = name
    part.__doc__ = f"numpy.{name}, differentiable (complex values follow JAX's convention)."
    return part


real = _complex_part("real", _P.real, lambda x: x)
imag = _complex_part("imag", _P.imag, lambda x: _fnp.zeros_like(x))
conj = _complex_part("conj", _P.conj, lambda x: x)
conjugate = conj


def real_if_close(a, tol=100):
    """numpy.real_if_close: a complex array whose imaginary parts are all within ``tol`` machine
    epsilons of 0 becomes real.  The decision reads values, so a traced complex input raises."""
    x = _arrays.to_array(a)
    if x.dtype.kind != "c":
        return x
    if isinstance(x, _Tracer):
        raise NotImplementedError("real_if_close of a traced complex value is not implemented: whether the "
                                  f"result is real depends on the values; use fnp.real {_where_in_user_code()}")
    return _np.real_if_close(x, tol)


def angle(z, deg=False):
    """The argument: arctan2(imag, real); for real values 0 or pi (pi at -0.0 too, as numpy)."""
    x = _arrays.to_array(z)
    if not isinstance(x, _Tracer):
        return _np.angle(x, deg)
    if x.dtype.kind == "c":
        a = _fnp.arctan2(_P.imag(x), _P.real(x))
    else:
        x = _arrays.to_float(x, _np.float64)
        a = _fnp.arctan2(_fnp.zeros_like(x), x)
    return rad2deg(a) if deg else a


def modf(x):
    """(fractional part, integral part), both with ``x``'s sign (inf: (+-0, +-inf))."""
    x = _arrays.to_float(x)
    whole = trunc(x)
    finite = _fnp.where(_fnp.isinf(x), _fnp.zeros_like(x), x)  # inf - inf would be NaN
    return copysign(finite - trunc(finite), x), whole


def divmod(x1, x2):  # noqa: A001  (numpy's name)
    return _fnp.floor_divide(x1, x2), _fnp.remainder(x1, x2)
