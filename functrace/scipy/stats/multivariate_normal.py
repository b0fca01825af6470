"""``functrace.scipy.stats.multivariate_normal``: the log density (through a Cholesky factor)."""
from __future__ import annotations

import math

import numpy as np

from ... import arrays
from ... import numpy as fnp
from ...core.errors import ShapeError
from ...core.errors import user_frame_description as _where
from ...numpy import linalg as _linalg


def logpdf(x, mean, cov, allow_singular: bool = False):
    """log N(x; mean, cov) for x of shape (..., d): -(d log 2pi + log det cov + r^T cov^-1 r) / 2
    with r = x - mean, through cov = L L^T (one Cholesky factor, one triangular solve)."""
    if allow_singular:
        raise NotImplementedError("multivariate_normal.logpdf: allow_singular=True is not implemented")
    x, mean, cov = arrays.promote_float(x, mean, cov)
    if mean.ndim == 0 or cov.ndim != 2 or cov.shape != (mean.shape[-1],) * 2 or x.shape[-1:] != mean.shape[-1:]:
        raise ShapeError(f"multivariate_normal.logpdf: x {x.shape}, mean {mean.shape} and cov {cov.shape} do not "
                         f"describe points of one dimension d (x (..., d), mean (d,), cov (d, d)) {_where()}")
    d = mean.shape[-1]
    chol = _linalg.cholesky(cov)
    r = fnp.reshape(x - mean, (-1, d))
    z = _linalg.triangular_solve(chol, fnp.transpose(r), lower=True)  # L z = r^T
    maha = fnp.sum(z * z, axis=0)
    log_det = 2 * fnp.sum(fnp.log(fnp.diagonal(chol)))
    out = -0.5 * (d * math.log(2 * math.pi) + log_det + maha)
    return fnp.reshape(out, np.broadcast_shapes(x.shape, mean.shape)[:-1])


def pdf(x, mean, cov, allow_singular: bool = False):
    return fnp.exp(logpdf(x, mean, cov, allow_singular))
