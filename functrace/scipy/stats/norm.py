"""``functrace.scipy.stats.norm``: the normal distribution's densities, cdf and quantiles."""
from __future__ import annotations

import math

from ... import arrays
from ... import numpy as fnp
from .. import special

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def _standardized(x, loc, scale):
    x, loc, scale = arrays.promote_float(x, loc, scale)
    return (x - loc) / scale, scale


def logpdf(x, loc=0.0, scale=1.0):
    z, scale = _standardized(x, loc, scale)
    return -0.5 * z * z - _LOG_SQRT_2PI - fnp.log(scale)


def pdf(x, loc=0.0, scale=1.0):
    return fnp.exp(logpdf(x, loc, scale))


def cdf(x, loc=0.0, scale=1.0):
    return special.ndtr(_standardized(x, loc, scale)[0])


def logcdf(x, loc=0.0, scale=1.0):
    return special.log_ndtr(_standardized(x, loc, scale)[0])


def sf(x, loc=0.0, scale=1.0):
    return special.ndtr(-_standardized(x, loc, scale)[0])


def logsf(x, loc=0.0, scale=1.0):
    return special.log_ndtr(-_standardized(x, loc, scale)[0])


def ppf(q, loc=0.0, scale=1.0):
    q, loc, scale = arrays.promote_float(q, loc, scale)
    return loc + scale * special.ndtri(q)


def isf(q, loc=0.0, scale=1.0):
    q, loc, scale = arrays.promote_float(q, loc, scale)
    return loc - scale * special.ndtri(q)
