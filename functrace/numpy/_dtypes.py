"""dtype helpers: ``finfo``, ``iinfo``, ``result_type``, ``promote_types``, ``issubdtype``,
``can_cast`` and numpy's abstract scalar categories.  They take traced values too (by their
dtype), and ``result_type`` follows functrace's promotion (numpy 2's: Python scalars are weak)."""
from __future__ import annotations

import numpy as _np

from .. import arrays as _arrays
from ..core import Tracer as _Tracer
from . import _base as _fnp

# numpy's abstract categories, for issubdtype(x.dtype, fnp.floating) and the like
generic, number, inexact, floating, complexfloating = _np.generic, _np.number, _np.inexact, _np.floating, _np.complexfloating
integer, signedinteger, unsignedinteger = _np.integer, _np.signedinteger, _np.unsignedinteger


def _as_dtype(x) -> _np.dtype:
    """The dtype of a dtype-like or of a value (traced values by their abstract dtype)."""
    if isinstance(x, _Tracer):
        return x.aval.dtype
    if isinstance(x, (_np.ndarray, _np.generic)):
        return x.dtype
    if isinstance(x, type) and isinstance(x, _fnp._ScalarType):
        return _np.dtype(x.numpy_type)
    return _np.dtype(x)


def finfo(dtype) -> _np.finfo:
    """Machine limits of a float dtype (or of a value's dtype)."""
    return _np.finfo(_as_dtype(dtype) if not isinstance(dtype, (float, complex)) else _np.float64)


def iinfo(int_type) -> _np.iinfo:
    """Machine limits of an integer dtype (or of a value's dtype)."""
    return _np.iinfo(_as_dtype(int_type) if not isinstance(int_type, int) else _np.int64)


def result_type(*arrays_and_dtypes) -> _np.dtype:
    """The dtype of combining the operands, as functrace.numpy's operations promote them: numpy 2's
    rules, Python scalars weak (``result_type(float32_array, 2.0)`` is float32)."""
    infos = []
    for a in arrays_and_dtypes:
        if isinstance(a, (_Tracer, _np.ndarray, _np.generic)) or type(a) in _fnp._PY_SCALARS:
            infos.append(_arrays.dtype_info(a))
        else:
            infos.append((_as_dtype(a), False))
    return _arrays.result_dtype(tuple(infos))[0]


def promote_types(type1, type2) -> _np.dtype:
    return _np.promote_types(_as_dtype(type1), _as_dtype(type2))


def issubdtype(arg1, arg2) -> bool:
    a = arg1 if isinstance(arg1, type) and issubclass(arg1, _np.generic) and not isinstance(arg1, _fnp._ScalarType) \
        else _as_dtype(arg1)
    b = arg2 if isinstance(arg2, type) and issubclass(arg2, _np.generic) and not isinstance(arg2, _fnp._ScalarType) \
        else _as_dtype(arg2)
    return _np.issubdtype(a, b)


def can_cast(from_, to, casting="safe") -> bool:
    return _np.can_cast(_as_dtype(from_), _as_dtype(to), casting)


def isdtype(dtype, kind) -> bool:
    return _np.isdtype(_as_dtype(dtype), kind)
