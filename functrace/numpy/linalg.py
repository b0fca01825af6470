"""``functrace.numpy.linalg``: the basics (norms); decompositions are not implemented yet."""
from __future__ import annotations

import numpy as np

import functrace.numpy as fnp


def norm(x, ord=None, axis=None, keepdims=False):
    """Vector p-norms (2, 1, inf, -inf, p) and the Frobenius matrix norm."""
    x = fnp._to_float(x, np.float64)  # numpy: integers and bools as float64
    matrix = (axis is None and x.ndim == 2) or (isinstance(axis, tuple) and len(axis) == 2)
    if matrix and ord not in (None, "fro"):
        raise NotImplementedError(f"linalg.norm: the matrix norm ord={ord!r} is not implemented")
    if axis is None and ord is None:
        return fnp.sqrt(fnp.sum(x * x, keepdims=keepdims) if not keepdims else
                        fnp.sum(x * x, axis=None, keepdims=True))
    if ord in (None, 2, "fro") and (axis is None or isinstance(axis, int) or ord == "fro" or ord is None):
        if ord == 2 and isinstance(axis, tuple) and len(axis) == 2:
            raise NotImplementedError("linalg.norm: the matrix 2-norm (largest singular value) is not implemented")
        return fnp.sqrt(fnp.sum(x * x, axis=axis, keepdims=keepdims))
    if ord == 1:
        return fnp.sum(fnp.abs(x), axis=axis, keepdims=keepdims)
    if ord == np.inf:
        return fnp.max(fnp.abs(x), axis=axis, keepdims=keepdims)
    if ord == -np.inf:
        return fnp.min(fnp.abs(x), axis=axis, keepdims=keepdims)
    if isinstance(ord, (int, float)) and ord > 0:
        return fnp.sum(fnp.abs(x) ** ord, axis=axis, keepdims=keepdims) ** (1.0 / ord)
    raise NotImplementedError(f"linalg.norm: ord={ord!r} with axis={axis!r} is not implemented")


def __getattr__(name: str):
    raise NotImplementedError(f"functrace.numpy.linalg does not implement {name} yet "
                              "(decompositions have no differentiable primitive)")
