"""``functrace.numpy.linalg``: the basics (norms); decompositions are not implemented yet."""
import numpy as _np

import functrace.numpy as _fnp

from ..errors import NotInFunctrace as _NotInFunctrace


def norm(x, ord=None, axis=None, keepdims=False):
    """Vector p-norms (2, 1, inf, -inf, p) and the Frobenius matrix norm."""
    x = _fnp._to_float(x, _np.float64)  # numpy: integers and bools as float64
    matrix = (axis is None and x.ndim == 2) or (isinstance(axis, tuple) and len(axis) == 2)
    if matrix and ord not in (None, "fro"):
        raise NotImplementedError(f"linalg.norm: the matrix norm ord={ord!r} is not implemented")
    if axis is None and ord is None:
        return _fnp.sqrt(_fnp.sum(x * x, keepdims=keepdims) if not keepdims else
                        _fnp.sum(x * x, axis=None, keepdims=True))
    if ord in (None, 2, "fro") and (axis is None or isinstance(axis, int) or ord == "fro" or ord is None):
        if ord == 2 and isinstance(axis, tuple) and len(axis) == 2:
            raise NotImplementedError("linalg.norm: the matrix 2-norm (largest singular value) is not implemented")
        return _fnp.sqrt(_fnp.sum(x * x, axis=axis, keepdims=keepdims))
    if ord == 1:
        return _fnp.sum(_fnp.abs(x), axis=axis, keepdims=keepdims)
    if ord == _np.inf:
        return _fnp.max(_fnp.abs(x), axis=axis, keepdims=keepdims)
    if ord == -_np.inf:
        return _fnp.min(_fnp.abs(x), axis=axis, keepdims=keepdims)
    if isinstance(ord, (int, float)) and ord > 0:
        return _fnp.sum(_fnp.abs(x) ** ord, axis=axis, keepdims=keepdims) ** (1.0 / ord)
    raise NotImplementedError(f"linalg.norm: ord={ord!r} with axis={axis!r} is not implemented")


def __getattr__(name: str):
    """Missing names raise AttributeError (``hasattr`` works); numpy.linalg's are also NotImplementedError."""
    if name.startswith("_") or not hasattr(_np.linalg, name):
        raise AttributeError(f"module 'functrace.numpy.linalg' has no attribute {name!r}", name=name)
    raise _NotInFunctrace(f"functrace.numpy.linalg does not implement {name} yet "
                         "(decompositions have no differentiable primitive)", name=name)
