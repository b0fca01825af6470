"""Operators and array methods on tracers, and numpy's protocols routed to functrace.numpy.

Importing this module (``functrace.numpy`` does) installs them on ``Tracer``."""
from __future__ import annotations

from .. import primitives as _P
from ..core import Tracer
from ..eager import EagerArray
from . import _base as fnp
from ._indexing import IndexUpdateHelper
from ._reductions import cumprod, ptp
from ._sorting import argsort, searchsorted, sort


def _swap(f):
    return lambda self, other: f(other, self)


_OPERATORS = {
    "__add__": fnp.add, "__radd__": _swap(fnp.add),
    "__sub__": fnp.subtract, "__rsub__": _swap(fnp.subtract),
    "__mul__": fnp.multiply, "__rmul__": _swap(fnp.multiply),
    "__truediv__": fnp.divide, "__rtruediv__": _swap(fnp.divide),
    "__floordiv__": fnp.floor_divide, "__rfloordiv__": _swap(fnp.floor_divide),
    "__mod__": fnp.remainder, "__rmod__": _swap(fnp.remainder),
    "__pow__": fnp.power, "__rpow__": _swap(fnp.power),
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


def _package():
    """The whole of ``functrace.numpy``, where numpy's protocols dispatch (imported at the call: the
    package imports this module)."""
    from .. import numpy
    return numpy


def _array_ufunc(self, ufunc, method, *inputs, **kwargs):
    """``np.sin(tracer)`` and ``ndarray + tracer`` dispatch to functrace.numpy."""
    if method != "__call__" or kwargs.get("out") is not None:
        raise NotImplementedError(f"numpy.{ufunc.__name__}.{method} on a functrace tracer is not supported")
    if ufunc.__name__ == "conjugate":
        return _complex_part(inputs[0], "conj")
    name = {"absolute": "abs"}.get(ufunc.__name__, ufunc.__name__)
    fn = getattr(_package(), name)  # raises NotImplementedError naming the function when missing
    return fn(*inputs)


def _array_function(self, func, types, args, kwargs):
    """``np.sum(tracer)`` etc. dispatch to the functrace.numpy function of the same name."""
    module = func.__module__ or ""
    package = _package()
    target = package.linalg if module.endswith("linalg") else package.fft if module.endswith("fft") else package
    return getattr(target, func.__name__)(*args, **kwargs)


Tracer.__array_ufunc__ = _array_ufunc
Tracer.__array_function__ = _array_function
