"""Operators and array methods on tracers and eager arrays, and numpy's protocols routed to
functrace.numpy.

Importing this module (``functrace.numpy`` does) installs them on ``Tracer`` and ``EagerArray``,
which are defined below the numpy API (``core/ir.py``, ``core/eager.py``); ``functrace.numpy`` routes
numpy's protocols to itself with ``route_numpy_protocols`` once all its names exist."""
from __future__ import annotations

import numpy as np

from .. import primitives as _P
from ..core import Tracer
from ..core.eager import EagerArray
from . import _base as fnp
from ._indexing import IndexUpdateHelper
from ._reductions import cumprod, ptp
from ._sorting import argsort, searchsorted, sort


def _swap(f):
    return lambda self, other: f(other, self)


def _power_operator(x, y):
    """``x ** y``: numpy's operator squares for a Python int 2 (``bool_array ** 2`` is int8, while
    ``np.power(bool_array, 2)`` is int64), else it is ``power``."""
    if type(y) is int and y == 2 and not isinstance(x, (int, float, complex)):
        return fnp.square(x)
    return fnp.power(x, y)


_OPERATORS = {
    "__add__": fnp.add, "__radd__": _swap(fnp.add),
    "__sub__": fnp.subtract, "__rsub__": _swap(fnp.subtract),
    "__mul__": fnp.multiply, "__rmul__": _swap(fnp.multiply),
    "__truediv__": fnp.divide, "__rtruediv__": _swap(fnp.divide),
    "__floordiv__": fnp.floor_divide, "__rfloordiv__": _swap(fnp.floor_divide),
    "__mod__": fnp.remainder, "__rmod__": _swap(fnp.remainder),
    "__pow__": _power_operator, "__rpow__": _swap(_power_operator),
    "__matmul__": fnp.matmul, "__rmatmul__": _swap(fnp.matmul),
    "__lt__": fnp.less, "__le__": fnp.less_equal, "__gt__": fnp.greater, "__ge__": fnp.greater_equal,
    "__eq__": fnp.equal, "__ne__": fnp.not_equal,
    "__and__": fnp.bitwise_and, "__rand__": _swap(fnp.bitwise_and),
    "__or__": fnp.bitwise_or, "__ror__": _swap(fnp.bitwise_or),
    "__xor__": fnp.bitwise_xor, "__rxor__": _swap(fnp.bitwise_xor),
    "__neg__": fnp.negative, "__pos__": fnp.positive, "__abs__": fnp.abs, "__invert__": fnp.invert,
    "__getitem__": fnp.getitem,
    "reshape": lambda self, *shape, order="C": fnp.reshape(
        self, shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape, order),
    "transpose": lambda self, *axes: fnp.transpose(self, axes[0] if len(axes) == 1 and not isinstance(
        axes[0], int) else (axes or None)),
    "astype": lambda self, dtype: fnp.asarray(self, dtype),
    "sum": fnp.sum, "mean": fnp.mean, "var": fnp.var, "std": fnp.std, "prod": fnp.prod,
    "max": fnp.max, "min": fnp.min, "argmax": fnp.argmax, "argmin": fnp.argmin,
    "all": fnp.all, "any": fnp.any, "cumsum": fnp.cumsum, "ravel": fnp.ravel, "flatten": fnp.ravel,
    "squeeze": fnp.squeeze, "swapaxes": fnp.swapaxes, "dot": fnp.dot, "clip": fnp.clip,
    "take": fnp.take, "round": fnp.round, "conj": lambda self: _complex_part(self, "conj"),
    "copy": lambda self: self,
}
for _name, _fn in _OPERATORS.items():
    setattr(Tracer, _name, _fn)
# sorting and scans (numpy/_sorting.py, numpy/_reductions.py): methods return new arrays, as JAX's
for _name, _fn in {"sort": sort, "argsort": argsort, "searchsorted": searchsorted, "cumprod": cumprod,
                  "ptp": ptp}.items():
    setattr(Tracer, _name, _fn)


def _complex_part(x, part: str):
    """x.real / x.imag / x.conj(): for a real x, x itself, zeros, x itself."""
    if x.dtype.kind == "c":
        return {"real": _P.real, "imag": _P.imag, "conj": _P.conj}[part](x)
    return fnp.zeros_like(x) if part == "imag" else x


def _not_implemented(what: str, hint: str):
    def f(self, *args):
        raise NotImplementedError(f"{what} on traced values is not implemented in functrace; {hint}")
    return f


Tracer.T = property(lambda self: fnp.transpose(self))
Tracer.real = property(lambda self: _complex_part(self, "real"))
Tracer.imag = property(lambda self: _complex_part(self, "imag"))
Tracer.at = property(lambda self: IndexUpdateHelper(self))  # x.at[idx].set(v) etc. (numpy/_indexing.py)
for _name in ("__lshift__", "__rlshift__", "__rshift__", "__rrshift__"):
    setattr(Tracer, _name, _not_implemented("bit shifts", "multiply or floor-divide by powers of two"))


Tracer.__setitem__ = EagerArray.__setitem__  # the same TypeError eagerly and traced


def route_numpy_protocols(package) -> None:
    """``np.sin(tracer)``, ``ndarray + tracer`` and ``np.sum(tracer)`` dispatch to the function of
    the same name in ``package`` (all of ``functrace.numpy``, which calls this when its names exist)."""

    def array_ufunc(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs.get("out") is not None:
            raise NotImplementedError(f"numpy.{ufunc.__name__}.{method} on a functrace tracer is not supported")
        if ufunc.__name__ == "conjugate":
            return _complex_part(inputs[0], "conj")
        name = {"absolute": "abs"}.get(ufunc.__name__, ufunc.__name__)
        fn = getattr(package, name)  # raises NotImplementedError naming the function when missing
        return fn(*inputs)

    def array_function(self, func, types, args, kwargs):
        module = func.__module__ or ""
        target = package.linalg if module.endswith("linalg") else package.fft if module.endswith("fft") else package
        return getattr(target, func.__name__)(*args, **kwargs)

    Tracer.__array_ufunc__ = array_ufunc
    Tracer.__array_function__ = array_function


# --------------------------------------------------------------------------- eager arrays


def _index_holds_tracer(index) -> bool:
    if isinstance(index, (np.ndarray, int, slice)) or index is None:  # the common cases, at once
        return False
    if isinstance(index, Tracer):
        return True
    return isinstance(index, (tuple, list)) and any(_index_holds_tracer(i) for i in index)


def _eager_getitem(self, index):
    """numpy's indexing; an index holding a traced value (``X[t]`` inside ``jit`` or ``scan``), or
    one numpy rejects (an out-of-range integer, which JAX clamps when reading), is
    ``functrace.numpy.getitem``, as for a JAX array."""
    if _index_holds_tracer(index):
        return fnp.getitem(self, index)
    try:
        return np.ndarray.__getitem__(self, index)
    except IndexError:
        return fnp.getitem(self, index)


def _shape_checked(name: str, function, reflected: bool):
    """numpy's binary operator; when numpy rejects the operands' shapes, functrace.numpy's
    ``function`` runs instead to raise its ``ShapeError`` (the error ``jit`` gives)."""
    operator = getattr(np.ndarray, name)

    def method(self, other):
        try:
            return operator(self, other)
        except ValueError:
            return function(other, self) if reflected else function(self, other)
    return method


EagerArray.at = property(lambda self: IndexUpdateHelper(self))  # x.at[idx].set(v): a new array, x unchanged
EagerArray.__getitem__ = _eager_getitem
for _op, _fn in {"add": fnp.add, "sub": fnp.subtract, "mul": fnp.multiply, "truediv": fnp.divide,
                 "floordiv": fnp.floor_divide, "mod": fnp.mod, "pow": _power_operator, "matmul": fnp.matmul}.items():
    setattr(EagerArray, f"__{_op}__", _shape_checked(f"__{_op}__", _fn, False))
    setattr(EagerArray, f"__r{_op}__", _shape_checked(f"__r{_op}__", _fn, True))
