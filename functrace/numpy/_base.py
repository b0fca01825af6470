"""The core of ``functrace.numpy`` (the package re-exports every name here): array conversion
and promotion, the ufuncs, reductions, shapes and indexing, written over the primitives.  It
imports none of its sibling modules (they import it), so no import is circular.
"""
# Every other name here starts with an underscore: the public names of this module are numpy's
# (``dir(functrace.numpy)`` lists the API, not the modules it is written with).
import builtins as _builtins
import functools as _functools
import math as _math
import operator as _operator

import numpy as _np

# numpy names re-exported as they are (dtypes and constants)
from numpy import dtype, e, inf, nan, newaxis, pi

from .. import primitives as _P
from ..arrays import (  # (the helpers functrace's other modules share: functrace/arrays.py)
    accumulate_as as _accumulate_as,
)
from ..arrays import (
    cast as _cast,
)
from ..arrays import (
    concrete_only as _concrete_only,
)
from ..arrays import (
    distinct_axes as _axis_list,
)
from ..arrays import (
    dtype_info as _dtype_info,
)
from ..arrays import (
    expand_bool_indices as _expand_bool_indices,
)
from ..arrays import (
    expand_ellipsis as _expand_ellipsis,
)
from ..arrays import (
    holds_tracer as _holds_tracer,
)
from ..arrays import (
    is_array_index as _is_array_index,
)
from ..arrays import (
    normalize_axis as _axis,
)
from ..arrays import (
    normalize_index as _normalize_index,
)
from ..arrays import (
    promote as _promote,
)
from ..arrays import (
    promote_divide as _promote_divide,
)
from ..arrays import (
    promote_float as _promote_float,
)
from ..arrays import (
    promote_no_bool_loop as _promote_no_bool_loop,
)
from ..arrays import (
    reduction_axes as _norm_axes,
)
from ..arrays import (
    result_dtype as _result_dtype,
)
from ..arrays import (
    to_array as _to_array,
)
from ..arrays import (
    to_float as _to_float,
)
from ..core import PY_SCALAR_TYPES as _PY_SCALARS
from ..core import Tracer as _Tracer
from ..core.array import Array as ndarray  # (as jax.numpy.ndarray is jax.Array: numpy's arrays are not one)
from ..core.eager import as_eager as _as_eager  # eager results are numpy arrays with .at (eager.py says why)
from ..core.errors import NotInFunctrace as _NotInFunctrace
from ..core.errors import ShapeError as _ShapeError
from ..core.errors import user_frame_description as _user_frame_description
from ..precision import dot_with_options as _dot_with_options
from ..primitives import shape_of as _shape_of
from ..primitives import special as _special

_F64 = _np.dtype(_np.float64)


class _ScalarType(type):
    """The metaclass of ``fnp.float32`` and the other scalar types: subclasses of numpy's, so
    they are dtypes wherever numpy takes one (``fnp.zeros(3, fnp.float32)``, ``np.dtype(...)``,
    ``isinstance``), and calling one casts, traced values too (``fnp.float32(x)``, as in JAX)."""

    def __call__(cls, *args, **kwargs):
        if len(args) == 1 and not kwargs and _holds_tracer(args[0]):
            return asarray(args[0], cls.numpy_type)
        return cls.numpy_type(*args, **kwargs)

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, cls.numpy_type)

    def __subclasscheck__(cls, sub) -> bool:
        return issubclass(sub, cls.numpy_type)


def _scalar_type(numpy_type: type) -> type:
    return _ScalarType(numpy_type.__name__, (numpy_type,), {
        "numpy_type": numpy_type, "__module__": __name__,
        "__doc__": f"numpy.{numpy_type.__name__}; calling it casts, traced values too."})


float16, float32, float64 = (_scalar_type(t) for t in (_np.float16, _np.float32, _np.float64))
int8, int16, int32, int64 = (_scalar_type(t) for t in (_np.int8, _np.int16, _np.int32, _np.int64))
uint8, uint32, bool_ = (_scalar_type(t) for t in (_np.uint8, _np.uint32, _np.bool_))
uint16, uint64, int_ = (_scalar_type(t) for t in (_np.uint16, _np.uint64, _np.int64))
complex64, complex128 = (_scalar_type(t) for t in (_np.complex64, _np.complex128))


# --------------------------------------------------------------------------- creation


def asarray(a, dtype=None):
    x = _to_array(a)
    return x if dtype is None else _cast(x, _np.dtype(dtype))


def array(a, dtype=None, copy=True):
    x = _to_array(a)
    if not isinstance(x, _Tracer):
        return _np.array(x, dtype=dtype, copy=copy)
    return x if dtype is None else _cast(x, _np.dtype(dtype))


def zeros(shape, dtype=float):
    return _np.zeros(shape, dtype=dtype)


def ones(shape, dtype=float):
    return _np.ones(shape, dtype=dtype)


def full(shape, fill_value, dtype=None):
    if isinstance(fill_value, _Tracer):
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        fv = fill_value if dtype is None else _cast(fill_value, _np.dtype(dtype))
        return broadcast_to(fv, shape)
    return _np.full(shape, fill_value, dtype=dtype)


def empty(shape, dtype=float):
    return _np.zeros(shape, dtype=dtype)


def zeros_like(x, dtype=None):
    return _np.zeros(_shape_of(x), dtype=dtype or _to_array(x).dtype)


def ones_like(x, dtype=None):
    return _np.ones(_shape_of(x), dtype=dtype or _to_array(x).dtype)


def full_like(x, fill_value, dtype=None):
    return full(_shape_of(x), fill_value, dtype=dtype or _to_array(x).dtype)


def empty_like(x, dtype=None):
    return zeros_like(x, dtype)


arange = _np.arange


def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0):
    """numpy.linspace; traced ``start`` / ``stop`` (scalars or arrays) give a differentiable result."""
    if not (_holds_tracer(start) or _holds_tracer(stop)):
        return _np.linspace(start, stop, num, endpoint, retstep, dtype, axis)
    num = _operator.index(num)
    if num < 0:
        raise ValueError(f"linspace: number of samples, {num}, must be non-negative {_user_frame_description()}")
    # numpy's dtype: result_type(start, stop, float(num)), a Python float being weak
    dt, _ = _result_dtype((_dtype_info(start), _dtype_info(stop), (_F64, True)))
    start, stop = _cast(_to_array(start), dt), _cast(_to_array(stop), dt)
    start, stop = broadcast_arrays(start, stop)
    div = num - 1 if endpoint else num
    delta = subtract(stop, start)
    steps = _P.iota(dt, (num,) + start.shape, 0)
    if div > 0:
        step = divide(delta, div)
        y = add(multiply(steps, step), start)
        if endpoint and num > 1:  # the last sample is ``stop`` exactly, as in numpy
            y = where(_P.iota(_np.int64, y.shape, 0) == num - 1, stop, y)
    else:  # num == 1 with the endpoint, or num == 0: no step (numpy's NaN)
        step = multiply(delta, _np.nan)
        y = add(multiply(steps, delta), start)
    if dtype is not None:  # integers round down, as in numpy
        dtype = _np.dtype(dtype)
        y = _cast(floor(y) if dtype.kind in "iub" else y, dtype)
    y = moveaxis(y, 0, axis) if axis != 0 else y
    return (y, step) if retstep else y
eye = _np.eye
identity = _np.identity
tri = _np.tri


# --------------------------------------------------------------------------- elementwise


def _unary(prim, float_only=True):
    bind = prim.bind

    def f(x):
        if isinstance(x, _Tracer) and (not float_only or x.aval.dtype.kind in "fc"):
            return bind(x)  # hot path while tracing
        return bind(_to_float(x) if float_only else _to_array(x))
    f.__name__ = prim.name
    return f


def _integral_unary(prim):
    """floor/ceil: integers and bools are already integral and keep their dtype (numpy >= 2)."""
    def f(x):
        x = _to_array(x)
        return x if x.dtype.kind in "biu" else prim.bind(_to_float(x))
    f.__name__ = prim.name
    return f


sin = _unary(_P.sin_p)
cos = _unary(_P.cos_p)
tan = _unary(_P.tan_p)
tanh = _unary(_P.tanh_p)
exp = _unary(_P.exp_p)
log = _unary(_P.log_p)
log1p = _unary(_P.log1p_p)
expm1 = _unary(_P.expm1_p)
sqrt = _unary(_P.sqrt_p)
floor = _integral_unary(_P.floor_p)
ceil = _integral_unary(_P.ceil_p)
rint = round_ = _unary(_P.round_p)
negative = _unary(_P.neg_p, float_only=False)
absolute = abs = _unary(_P.abs_p, float_only=False)
sign = _unary(_P.sign_p, float_only=False)
isfinite = _unary(_P.is_finite_p)
sinh = _unary(_special.sinh_p)
cosh = _unary(_special.cosh_p)
arcsinh = _unary(_special.asinh_p)
arccosh = _unary(_special.acosh_p)
exp2 = _unary(_special.exp2_p)


def round(x, decimals=0):
    """numpy.round: half to even at ``decimals`` digits, by numpy's scaling (multiply then divide
    for ``decimals > 0``, the reverse below 0); integers stay integers (bools do not: float16)."""
    x = _to_array(x)
    if x.dtype.kind in "iu":
        return x if decimals >= 0 else _cast(round(_cast(x, _F64), decimals), x.dtype)
    if decimals > 0:
        scale = 10.0 ** decimals
        return rint(multiply(x, scale)) / scale
    if decimals < 0:
        scale = 10.0 ** -decimals
        return rint(divide(x, scale)) * scale
    return rint(x)


around = round


def positive(x):
    """``+x``: a copy; numpy has no boolean positive, and neither do we."""
    x = _to_array(x)
    if x.dtype == bool:
        raise TypeError(f"numpy boolean positive (`+`) is not supported; use the array itself "
                        f"{_user_frame_description()}")
    return x


def _binary(prim, promote=_promote, kept_kinds="biufc"):
    """An elementwise binary function: operands cast by ``promote``, then ``prim``.  Operands of one
    dtype of ``kept_kinds`` stay as they are (else: integers become floats for true_divide, arctan2,
    ...; bools int8 for floor_divide, remainder)."""
    bind = prim.bind

    def f(x, y):
        if isinstance(x, _Tracer) and isinstance(y, _Tracer) and x.aval.dtype == y.aval.dtype \
                and x.aval.dtype.kind in kept_kinds:
            return bind(x, y)  # hot path while tracing: nothing to promote
        return bind(*promote(x, y))
    f.__name__ = prim.name
    return f


add = _binary(_P.add_p)
subtract = _binary(_P.sub_p)
multiply = _binary(_P.mul_p)
true_divide = divide = _binary(_P.div_p, _promote_divide, "fc")
floor_divide = _binary(_P.floor_div_p, _promote_no_bool_loop, "iufc")
remainder = mod = _binary(_P.rem_p, _promote_no_bool_loop, "iufc")
maximum = _binary(_P.max_p)
minimum = _binary(_P.min_p)
arctan2 = _binary(_P.atan2_p, _promote_float, "fc")
hypot = _binary(_special.hypot_p, _promote_float, "fc")
equal = _binary(_P.eq_p)
not_equal = _binary(_P.ne_p)
less = _binary(_P.lt_p)
less_equal = _binary(_P.le_p)
greater = _binary(_P.gt_p)
greater_equal = _binary(_P.ge_p)
bitwise_and = _binary(_P.and_p)
bitwise_or = _binary(_P.or_p)
bitwise_xor = _binary(_P.xor_p)
fmax, fmin = maximum, minimum


def logical_and(x, y):
    return _P.and_p.bind(*_promote(asarray(x, bool), asarray(y, bool)))


def logical_or(x, y):
    return _P.or_p.bind(*_promote(asarray(x, bool), asarray(y, bool)))


def logical_xor(x, y):
    return _P.xor_p.bind(*_promote(asarray(x, bool), asarray(y, bool)))


def logical_not(x):
    return _P.not_p.bind(asarray(x, bool))


def invert(x):
    """Bitwise not, as xor with all bits set (right for signed, unsigned and bool dtypes alike)."""
    x = _to_array(x)
    return bitwise_xor(x, _np.invert(_np.zeros((), x.dtype)))  # numpy's TypeError for floats


bitwise_not = invert


def power(x, y):
    """``np.power``; a concrete integer exponent becomes ``integer_pow`` in the promoted dtype (a
    Python int is weak: ``float32 ** 2`` is float32; a numpy integer is not: ``float32 **
    _np.int64(2)`` is float64).  Integers to a negative integer power raise ValueError, as numpy's.
    Bools compute in int8 (``promote_no_bool_loop``) where they are not promoted further."""
    if isinstance(y, (int, _np.integer)) and not isinstance(y, bool) and not isinstance(x, _PY_SCALARS):
        dt, _ = _result_dtype((_dtype_info(x), _dtype_info(y)))
        if dt.kind not in "fc" and y < 0:
            raise ValueError(f"Integers to negative integer powers are not allowed ({dt.name} ** {y}; as "
                             f"numpy) {_user_frame_description()}")
        return _P.integer_pow(_cast(_to_array(x), dt), int(y))
    return _P.pow_p.bind(*_promote_no_bool_loop(x, y))


def square(x):
    """``x * x`` in ``x``'s dtype (bools in int8, numpy's first loop for them)."""
    return _P.integer_pow(*_promote_no_bool_loop(_to_array(x)), 2)


def reciprocal(x):
    return divide(1.0, x)


def sigmoid(x):
    return _P.logistic_p.bind(_to_float(x))


def log2(x):
    return log(x) / _math.log(2)


def log10(x):
    return log(x) / _math.log(10)


def arctan(x):
    x = _to_float(x)
    return arctan2(x, ones_like(x))


def arcsin(x):
    x = _to_float(x)
    return arctan2(x, sqrt((1.0 - x) * (1.0 + x)))


def arccos(x):
    x = _to_float(x)
    return arctan2(sqrt((1.0 - x) * (1.0 + x)), x)


def arctanh(x):
    x = _to_float(x)
    return 0.5 * log1p(2.0 * x / (1.0 - x))


def _log_add(x, y, power, log_base):
    """log_b(b^x + b^y) for ``power(t)`` = b^t and ``log_base`` = ln b, as numpy computes it:
    hi + log1p(b^(lo - hi)) / ln b with hi the larger operand, so nothing overflows and a far
    smaller one still counts (logaddexp(-40, 0) = 4.2e-18).  Infinite hi gives hi (its difference
    with lo would be NaN), a NaN operand NaN (the comparison puts a NaN x in lo: kept beside an
    infinite hi).  Smooth on either side of x == y and symmetric, so every derivative is right at
    ties too (1/2 each at first order)."""
    x, y = _promote_float(x, y)
    first = greater_equal(x, y)
    hi, lo = where(first, x, y), where(first, y, x)
    tail = log1p(power(where(logical_or(isfinite(hi), isnan(lo)), lo - hi, zeros_like(hi))))
    return hi + (tail if log_base == 1 else tail / log_base)


def logaddexp(x, y):
    """log(e^x + e^y), without overflow or loss of the smaller term."""
    return _log_add(x, y, exp, 1)


def logaddexp2(x, y):
    """log2(2^x + 2^y), without overflow or loss of the smaller term."""
    return _log_add(x, y, exp2, _math.log(2))


def isnan(x):
    x = _to_array(x)
    return not_equal(x, x)


def isinf(x):
    x = _to_array(x)
    return logical_and(logical_not(isfinite(x)), logical_not(isnan(x)))


def where(condition, x=None, y=None):
    if x is None and y is None:
        return nonzero(condition)
    x, y = _promote(x, y)
    return _P.select(asarray(condition, bool), x, y)


def clip(a, a_min=None, a_max=None):
    if a_min is not None:
        a = maximum(a, a_min)
    if a_max is not None:
        a = minimum(a, a_max)
    return a


def nonzero(x):
    if isinstance(x, _Tracer):
        x._concrete("nonzero (its output shape depends on the values)")
    return _np.nonzero(x)


argwhere = _concrete_only("argwhere")
flatnonzero = _concrete_only("flatnonzero")
unique = _concrete_only("unique")


# --------------------------------------------------------------------------- reductions


def _keep(out, x_shape, axes, keepdims):
    if not keepdims:
        return out
    return _P.reshape(out, tuple(1 if i in axes else n for i, n in enumerate(x_shape)))


def sum(a, axis=None, dtype=None, keepdims=False):
    x = _accumulate_as(a, dtype)
    axes = _norm_axes(axis, x.ndim, "sum")
    return _keep(_P.reduce_sum(x, axes), x.shape, axes, keepdims)


def prod(a, axis=None, dtype=None, keepdims=False):
    x = _accumulate_as(a, dtype)
    axes = _norm_axes(axis, x.ndim, "prod")
    return _keep(_P.reduce_prod(x, axes), x.shape, axes, keepdims)


def _extremum(prim, name: str, a, axis, keepdims, empty_ok: bool = False):
    """max / min over ``axis``; an empty reduction has no identity (numpy's ValueError), except
    for ``all`` / ``any`` (``empty_ok``: bool min / max, whose identities are True / False)."""
    x = _to_array(a)
    axes = _norm_axes(axis, x.ndim, name)
    if not empty_ok and _builtins.any(x.shape[i] == 0 for i in axes):
        raise ValueError(f"zero-size array to reduction operation {name} which has no identity")
    return _keep(prim.bind(x, axes=axes), x.shape, axes, keepdims)


def max(a, axis=None, keepdims=False):
    return _extremum(_P.reduce_max_p, "max", a, axis, keepdims)


def min(a, axis=None, keepdims=False):
    return _extremum(_P.reduce_min_p, "min", a, axis, keepdims)


amax, amin = max, min


def all(a, axis=None, keepdims=False):
    return _extremum(_P.reduce_min_p, "all", asarray(a, bool), axis, keepdims, empty_ok=True)


def any(a, axis=None, keepdims=False):
    return _extremum(_P.reduce_max_p, "any", asarray(a, bool), axis, keepdims, empty_ok=True)


def mean(a, axis=None, dtype=None, keepdims=False):
    x = _to_float(a, _F64) if dtype is None else asarray(a, dtype)
    axes = _norm_axes(axis, x.ndim, "mean")
    n = int(_np.prod([x.shape[i] for i in axes], dtype=_np.int64))
    return divide(sum(x, axes, keepdims=keepdims), n)


def var(a, axis=None, ddof=0, keepdims=False):
    x = _to_float(a, _F64)
    axes = _norm_axes(axis, x.ndim, "var")
    n = int(_np.prod([x.shape[i] for i in axes], dtype=_np.int64))
    centered = x - mean(x, axes, keepdims=True)
    return divide(sum(centered * centered, axes, keepdims=keepdims), n - ddof)


def std(a, axis=None, ddof=0, keepdims=False):
    return sqrt(var(a, axis, ddof, keepdims))


def average(a, axis=None, weights=None):
    if weights is None:
        return mean(a, axis)
    a, w = _promote(_to_float(a, _F64), _to_array(weights))  # numpy: float64 for integer ``a``
    if w.ndim != a.ndim:  # numpy: 1-D weights of length a.shape[axis]
        if not isinstance(axis, (int, _np.integer)) or w.ndim != 1:
            raise TypeError("average: weights must have the shape of a, or be 1-D with an int axis")
        ax = _axis(axis, a.ndim, "average")
        w = broadcast_to(reshape(w, tuple(n if d == ax else 1 for d, n in enumerate(a.shape))), a.shape)
    return sum(a * w, axis) / sum(w, axis)


def _arg_reduce(prim, a, axis, keepdims):
    x = _to_array(a)
    if axis is None:  # over the flattened array; keepdims keeps every axis, with size 1
        out = prim.bind(ravel(x), axis=0)
        return _P.reshape(out, (1,) * x.ndim) if keepdims else out
    axis = _norm_axes(axis, x.ndim)[0]
    out = prim.bind(x, axis=axis)
    return _P.expand_dims(out, (axis,)) if keepdims else out


def argmax(a, axis=None, keepdims=False):
    return _arg_reduce(_P.argmax_p, a, axis, keepdims)


def argmin(a, axis=None, keepdims=False):
    return _arg_reduce(_P.argmin_p, a, axis, keepdims)


def cumsum(a, axis=None, dtype=None):
    x = _accumulate_as(a, dtype)
    if axis is None:
        x, axis = ravel(x), 0
    return _P.cumsum(x, _norm_axes(axis, x.ndim, "cumsum")[0])


def trace(a, offset=0, axis1=0, axis2=1):
    return sum(diagonal(a, offset, axis1, axis2), -1)


def diagonal(a, offset=0, axis1=0, axis2=1):
    x = _to_array(a)
    x = moveaxis(x, (axis1, axis2), (-2, -1))
    n, m = x.shape[-2], x.shape[-1]
    rows = _np.arange(_builtins.max(0, -offset), _builtins.min(n, m - offset))
    flat = reshape(x, x.shape[:-2] + (n * m,))
    return _P.take(flat, (rows * m + rows + offset).astype(_np.int64), x.ndim - 2)


def diag(v, k=0):
    x = _to_array(v)
    if x.ndim == 2:
        return diagonal(x, k)
    n = x.shape[0] + _builtins.abs(k)
    idx = _np.arange(x.shape[0])
    flat_idx = ((idx + _builtins.max(0, -k)) * n + idx + _builtins.max(0, k)).astype(_np.int64)
    zeros_flat = _P.broadcast_in_dim(_P.scalar_like(x, 0), (n * n,), ())
    return reshape(_P.scatter_add(zeros_flat, flat_idx, x, 0), (n, n))


# --------------------------------------------------------------------------- shapes


def shape(a):
    return _shape_of(a)


def ndim(a):
    return len(_shape_of(a))


def size(a):
    return int(_np.prod(_shape_of(a), dtype=_np.int64))


def reshape(a, shape=None, order="C", *, newshape=None, copy=None):
    """numpy.reshape, with numpy >= 2.1's ``shape=`` and its deprecated spelling ``newshape=``.

    ``copy`` is accepted and ignored: traced values are immutable, so views and copies agree.
    """
    if (shape is None) == (newshape is None):
        raise TypeError("reshape: pass the new shape exactly once (as `shape`, or the deprecated `newshape`)")
    newshape = shape if newshape is None else newshape
    if order != "C":
        raise NotImplementedError("functrace.numpy.reshape supports only order='C'")
    x = _to_array(a)
    newshape = (newshape,) if isinstance(newshape, (int, _np.integer)) else tuple(int(n) for n in newshape)
    if _builtins.sum(1 for n in newshape if n == -1) > 1:
        raise _ShapeError(f"reshape: can only specify one unknown dimension, got {newshape} "
                         f"{_user_frame_description()}")
    if -1 in newshape:
        known = int(_np.prod([n for n in newshape if n != -1], dtype=_np.int64))
        if known == 0 or x.size % known:
            raise _ShapeError(f"reshape: cannot reshape array of shape {x.shape} into shape {newshape} "
                             f"{_user_frame_description()}")
        newshape = tuple(x.size // known if n == -1 else n for n in newshape)
    if newshape == x.shape:
        return x
    return _P.reshape(x, newshape)


def ravel(a):
    return reshape(a, (-1,))


def transpose(a, axes=None):
    x = _to_array(a)
    axes = tuple(range(x.ndim))[::-1] if axes is None else tuple(_axis_list(axes, x.ndim, "transpose"))
    return _P.transpose(x, axes)


def swapaxes(a, axis1, axis2):
    x = _to_array(a)
    perm = list(range(x.ndim))
    a1, a2 = _axis(axis1, x.ndim, "swapaxes"), _axis(axis2, x.ndim, "swapaxes")
    perm[a1], perm[a2] = perm[a2], perm[a1]
    return _P.transpose(x, perm)


def moveaxis(a, source, destination):
    x = _to_array(a)
    src, dst = _axis_list(source, x.ndim, "moveaxis"), _axis_list(destination, x.ndim, "moveaxis")
    if len(src) != len(dst):
        raise _ShapeError(f"moveaxis: source {source} and destination {destination} differ in length "
                         f"{_user_frame_description()}")
    perm = [i for i in range(x.ndim) if i not in src]
    for d, s in sorted(zip(dst, src)):
        perm.insert(d, s)
    return _P.transpose(x, perm)


def expand_dims(a, axis):
    x = _to_array(a)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out_ndim = x.ndim + len(axes)
    return _P.expand_dims(x, tuple(sorted(_axis_list(axes, out_ndim, "expand_dims"))))


def squeeze(a, axis=None):
    x = _to_array(a)
    if axis is None:
        axes = tuple(i for i, n in enumerate(x.shape) if n == 1)
    else:
        axes = _norm_axes(axis, x.ndim, "squeeze")
    return _P.squeeze(x, axes) if axes else x


def broadcast_to(a, shape):
    x = _to_array(a)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    _P.broadcast_shapes("broadcast_to", x.shape, shape)
    if len(shape) < x.ndim or _P.broadcast_shapes("broadcast_to", x.shape, shape) != shape:
        raise _ShapeError(f"broadcast_to: cannot broadcast shape {x.shape} to {shape} {_user_frame_description()}")
    return _P.broadcast_to(x, shape)


def broadcast_arrays(*args):
    arrs = [_to_array(a) for a in args]
    shp = _P.broadcast_shapes("broadcast_arrays", *(a.shape for a in arrs))
    return [broadcast_to(a, shp) for a in arrs]


def atleast_1d(a):
    x = _to_array(a)
    return reshape(x, (1,)) if x.ndim == 0 else x


def atleast_2d(a):
    x = atleast_1d(a)
    return reshape(x, (1,) + x.shape) if x.ndim == 1 else x


def concatenate(arrays, axis=0):
    arrs = _promote(*[_to_array(a) for a in arrays]) if len(arrays) > 1 else [_to_array(arrays[0])]
    if axis is None:
        arrs, axis = [ravel(a) for a in arrs], 0
    nd = arrs[0].ndim
    for a in arrs:
        if a.ndim != nd:
            raise _ShapeError("concatenate: all inputs must have the same number of dimensions, got shapes "
                             f"{[x.shape for x in arrs]} {_user_frame_description()}")
    return _P.concatenate(list(arrs), _axis(axis, nd, "concatenate"))


def stack(arrays, axis=0):
    arrs = [_to_array(a) for a in arrays]
    axis = _axis(axis, arrs[0].ndim + 1, "stack")
    return concatenate([_P.expand_dims(a, (axis,)) for a in arrs], axis)


def hstack(arrays):
    arrs = [atleast_1d(a) for a in arrays]
    return concatenate(arrs, 0 if arrs[0].ndim == 1 else 1)


def vstack(arrays):
    return concatenate([atleast_2d(a) for a in arrays], 0)


def split(a, indices_or_sections, axis=0):
    x = _to_array(a)
    axis = _axis(axis, x.ndim, "split")
    n = x.shape[axis]
    if isinstance(indices_or_sections, (int, _np.integer)):
        if n % indices_or_sections:
            raise _ShapeError(f"split: array split does not result in an equal division ({n} into "
                             f"{indices_or_sections}) {_user_frame_description()}")
        step = n // indices_or_sections
        bounds = list(range(0, n + 1, step))
    else:
        bounds = [0] + [_operator.index(i) for i in indices_or_sections] + [n]
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        lo, hi, _ = slice(lo, hi).indices(n)  # numpy slices x[lo:hi]: negatives wrap, the rest clamps
        start = tuple(lo if d == axis else 0 for d in range(x.ndim))
        limit = tuple(_builtins.max(hi, lo) if d == axis else m for d, m in enumerate(x.shape))
        out.append(_P.slice_op(x, start, limit))
    return out


def array_split(a, sections, axis=0):
    x = _to_array(a)
    n = x.shape[axis]
    q, r = _builtins.divmod(n, sections)
    sizes = [q + 1] * r + [q] * (sections - r)
    return split(x, _np.cumsum(sizes)[:-1].tolist(), axis)


def tile(a, reps):
    x = _to_array(a)
    reps = (reps,) if isinstance(reps, int) else tuple(reps)
    nd = _builtins.max(x.ndim, len(reps))
    x = reshape(x, (1,) * (nd - x.ndim) + x.shape)
    reps = (1,) * (nd - len(reps)) + reps
    # broadcast to (r0, n0, r1, n1, ...) then merge pairs
    big = tuple(v for r, n in zip(reps, x.shape) for v in (r, n))
    y = _P.broadcast_in_dim(x, big, tuple(range(1, 2 * nd, 2)))
    return reshape(y, tuple(r * n for r, n in zip(reps, x.shape)))


def repeat(a, repeats, axis=None):
    x = _to_array(a)
    if axis is None:
        x, axis = ravel(x), 0
    axis = _axis(axis, x.ndim, "repeat")
    if isinstance(repeats, (int, _np.integer)):
        shp = x.shape[:axis + 1] + (int(repeats),) + x.shape[axis + 1:]
        y = _P.broadcast_in_dim(x, shp, tuple(d if d <= axis else d + 1 for d in range(x.ndim)))
        return reshape(y, x.shape[:axis] + (x.shape[axis] * int(repeats),) + x.shape[axis + 1:])
    idx = _np.repeat(_np.arange(x.shape[axis]), _np.asarray(repeats))
    return _P.take(x, idx.astype(_np.int64), axis)


def flip(a, axis=None):
    x = _to_array(a)
    return _P.rev(x, _norm_axes(axis, x.ndim, "flip"))


def fliplr(a):
    return flip(a, 1)


def flipud(a):
    return flip(a, 0)


def pad(a, pad_width, mode="constant", constant_values=0, **kwargs):
    """numpy.pad.  Mode 'constant': ``constant_values`` is one value, or (before, after) values
    broadcast like ``pad_width`` to one pair per axis; those pad axis by axis in order, so the
    corners get the later axis' values, as in numpy.  Modes 'edge', 'reflect', 'symmetric' and
    'wrap' gather (``_pad_by_gather``)."""
    x = _to_array(a)
    pw = _np.broadcast_to(_np.asarray(pad_width, dtype=_np.int64), (x.ndim, 2))
    if mode != "constant":
        return _pad_by_gather(x, pw, mode, **kwargs)
    values = _to_array(constant_values)
    if size(values) == 1:
        return _P.pad(x, _cast(reshape(values, ()), x.dtype), tuple((int(lo), int(hi), 0) for lo, hi in pw))
    values = broadcast_to(values, (x.ndim, 2))
    for d in range(x.ndim):
        for side, width in enumerate(pw[d]):
            if width:
                config = [(0, 0, 0)] * x.ndim
                config[d] = (int(width), 0, 0) if side == 0 else (0, int(width), 0)
                x = _P.pad(x, _cast(getitem(values, (d, side)), x.dtype), config)
    return x


_GATHER_PAD_MODES = ("edge", "reflect", "symmetric", "wrap")


def _pad_by_gather(x, pad_width, mode: str, reflect_type: str = "even"):
    """numpy.pad's 'edge', 'reflect', 'symmetric' and 'wrap' modes: along each axis a gather whose
    indices are numpy's own padding of ``arange(n)`` (so numpy's rules, repeats and all)."""
    if mode not in _GATHER_PAD_MODES and mode != "empty":
        raise NotImplementedError(f"functrace.numpy.pad: mode={mode!r} is not implemented (constant, empty, "
                                  f"{', '.join(_GATHER_PAD_MODES)} are)")
    if reflect_type != "even":
        raise NotImplementedError("functrace.numpy.pad: reflect_type='odd' is not implemented")
    if mode == "empty":  # numpy leaves the border undefined: zeros are as good
        return pad(x, pad_width)
    for axis, (lo, hi) in enumerate(pad_width):
        if lo or hi:
            n = x.shape[axis]
            if n == 0:
                raise ValueError(f"pad: can't extend empty axis {axis} using mode {mode!r} {_user_frame_description()}")
            idx = _np.pad(_np.arange(n, dtype=_np.int64), (int(lo), int(hi)), mode=mode)
            x = _P.take(x, idx, axis)
    return x


def take(a, indices, axis=None):
    x = _to_array(a)
    if axis is None:
        x, axis = ravel(x), 0
    axis = _axis(axis, x.ndim, "take")
    return _P.take(x, _normalize_index(indices, x.shape[axis]), axis)


def take_along_axis(arr, indices, axis):
    x = _to_array(arr)
    axis = _axis(axis, x.ndim, "take_along_axis")
    idx = _normalize_index(indices, x.shape[axis])
    # flat gather: linear index over the broadcast of the other axes
    shp = _P.broadcast_shapes("take_along_axis", tuple(1 if d == axis else n for d, n in enumerate(x.shape)),
                             tuple(1 if d == axis else n for d, n in enumerate(_shape_of(idx))))
    full_shape = tuple(_shape_of(idx)[d] if d == axis else shp[d] for d in range(x.ndim))
    idx = broadcast_to(idx, full_shape)
    xb = broadcast_to(x, tuple(x.shape[d] if d == axis else shp[d] for d in range(x.ndim)))
    strides = _np.cumprod((_shape_of(xb)[1:] + (1,))[::-1])[::-1]
    lin = None
    for d in range(x.ndim):
        term = idx if d == axis else _P.iota(_np.int64, full_shape, d)
        term = multiply(term, int(strides[d]))
        lin = term if lin is None else add(lin, term)
    return _P.take(ravel(xb), lin, 0)


# --------------------------------------------------------------------------- linear algebra


def dot(a, b, *, precision=None, preferred_element_type=None):
    """numpy.dot; ``precision`` / ``preferred_element_type`` as jax.numpy's (``ft.lax.Precision`` says what they do)."""
    if precision is not None or preferred_element_type is not None:
        return _dot_with_options("dot", dot, (a, b), precision, preferred_element_type)
    a, b = _promote(_to_array(a), _to_array(b))
    if a.ndim == 0 or b.ndim == 0:
        return multiply(a, b)
    _check_contract("dot", a.shape[-1], b.shape[0 if b.ndim == 1 else -2], a.shape, b.shape)
    return _P.dot_general(a, b, (((a.ndim - 1,), (_builtins.max(b.ndim - 2, 0),)), ((), ())))


def _check_contract(name, n, m, sa, sb):
    if n != m:
        raise _ShapeError(f"{name}: shapes {sa} and {sb} are not aligned ({n} != {m}) {_user_frame_description()}")


def matmul(a, b, *, precision=None, preferred_element_type=None):
    """numpy.matmul; ``precision`` / ``preferred_element_type`` as jax.numpy's (``ft.lax.Precision`` says what they do)."""
    if precision is not None or preferred_element_type is not None:
        return _dot_with_options("matmul", matmul, (a, b), precision, preferred_element_type)
    a, b = _promote(_to_array(a), _to_array(b))
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"matmul: operands must not be scalars {_user_frame_description()}")
    _check_contract("matmul", a.shape[-1], b.shape[0 if b.ndim == 1 else -2], a.shape, b.shape)
    if b.ndim <= 2:
        return _P.dot_general(a, b, (((a.ndim - 1,), (0,)), ((), ())))
    if a.ndim == 1:
        return _P.dot_general(a, b, (((0,), (b.ndim - 2,)), ((), ())))
    batch = _P.broadcast_shapes("matmul", a.shape[:-2], b.shape[:-2])
    a = broadcast_to(a, batch + a.shape[-2:])
    b = broadcast_to(b, batch + b.shape[-2:])
    nb = len(batch)
    return _P.dot_general(a, b, (((nb + 1,), (nb,)), (tuple(range(nb)), tuple(range(nb)))))


def vdot(a, b, *, precision=None, preferred_element_type=None):
    """numpy.vdot (complex a conjugated); ``precision`` / ``preferred_element_type`` as jax.numpy's."""
    a = _to_array(a)
    if _np.dtype(a.dtype).kind == "c":
        a = _P.conj(a)
    return dot(ravel(a), ravel(b), precision=precision, preferred_element_type=preferred_element_type)


def inner(a, b, *, precision=None, preferred_element_type=None):
    """numpy.inner; ``precision`` / ``preferred_element_type`` as jax.numpy's (``ft.lax.Precision`` says what they do)."""
    if precision is not None or preferred_element_type is not None:
        return _dot_with_options("inner", inner, (a, b), precision, preferred_element_type)
    a, b = _promote(_to_array(a), _to_array(b))
    if a.ndim == 0 or b.ndim == 0:
        return multiply(a, b)
    _check_contract("inner", a.shape[-1], b.shape[-1], a.shape, b.shape)
    return _P.dot_general(a, b, (((a.ndim - 1,), (b.ndim - 1,)), ((), ())))


def outer(a, b):
    a, b = ravel(a), ravel(b)
    return multiply(reshape(a, (-1, 1)), reshape(b, (1, -1)))


def tensordot(a, b, axes=2, *, precision=None, preferred_element_type=None):
    """numpy.tensordot; ``precision`` / ``preferred_element_type`` as jax.numpy's (``ft.lax.Precision`` says what they do)."""
    if precision is not None or preferred_element_type is not None:
        return _dot_with_options("tensordot", lambda a, b: tensordot(a, b, axes), (a, b), precision, preferred_element_type)
    a, b = _promote(_to_array(a), _to_array(b))
    if isinstance(axes, (int, _np.integer)):
        ax_a = tuple(range(a.ndim - axes, a.ndim))
        ax_b = tuple(range(axes))
    else:
        ax_a, ax_b = axes
        ax_a = (ax_a,) if isinstance(ax_a, int) else tuple(ax_a)
        ax_b = (ax_b,) if isinstance(ax_b, int) else tuple(ax_b)
    ax_a, ax_b = tuple(_axis_list(ax_a, a.ndim, "tensordot")), tuple(_axis_list(ax_b, b.ndim, "tensordot"))
    for i, j in zip(ax_a, ax_b):
        _check_contract("tensordot", a.shape[i], b.shape[j], a.shape, b.shape)
    return _P.dot_general(a, b, ((ax_a, ax_b), ((), ())))


# --------------------------------------------------------------------------- indexing


def _clamped_index(idx, n: int):
    """How ``x[idx]`` reads an axis of size ``n``, as JAX: (the index with negative entries wrapped
    once and then clamped into ``[0, n)``, the mask of the entries that were out of bounds or None
    when none can be).  Concrete or traced alike (a traced index gets a traced mask)."""
    arr = _to_array(idx)
    if arr.dtype.kind not in "iu":
        raise IndexError(f"arrays used as indices must be of integer (or boolean) type, got {arr.dtype.name} "
                         f"{_user_frame_description()}")
    if not n:
        return _normalize_index(arr, n), None  # only an empty index reads an empty axis
    if isinstance(arr, _Tracer):
        arr = _cast(arr, _np.dtype(_np.int64))
        wrapped = where(less(arr, 0), add(arr, n), arr)
        bad = logical_or(less(wrapped, 0), greater_equal(wrapped, n))
        return minimum(maximum(wrapped, 0), n - 1), bad
    wrapped = _np.where(arr < 0, arr.astype(_np.int64) + n, arr.astype(_np.int64))
    bad = (wrapped < 0) | (wrapped >= n)
    return _np.clip(wrapped, 0, n - 1), (bad if bad.any() else None)


def _int_index(i) -> int:
    """A basic integer index; anything else (a float, a string, ...) raises IndexError like numpy,
    never truncates."""
    try:
        return _operator.index(i)
    except TypeError:
        raise IndexError("only integers, slices (`:`), ellipsis (`...`), numpy.newaxis (`None`) and integer "
                         f"or boolean arrays are valid indices, got {i!r} of type {type(i).__name__} "
                         f"{_user_frame_description()}") from None


def _basic_index(x, idx: list):
    """Slices (negative steps by ``rev``) and integers (squeezed), one entry per axis of ``x``;
    array-indexed axes are kept whole."""
    starts, limits, strides, flips, squeeze_axes = [], [], [], [], []
    for d, (i, n) in enumerate(zip(idx, x.shape)):
        if isinstance(i, slice):
            s, e, st = i.indices(n)
            if st < 0:
                flips.append(d)
                # reversed axis: element k of the result is x[s + k*st] == rev(x)[n-1-s - k*st]
                s, e, st = n - 1 - s, n - 1 - e, -st
            length = _builtins.max(0, -(-(e - s) // st))
            starts.append(s if length else 0)
            limits.append(s + (length - 1) * st + 1 if length else 0)
            strides.append(st)
        elif isinstance(i, int):
            if not n:
                raise IndexError(f"index {i} is out of bounds for axis {d} with size 0 {_user_frame_description()}")
            i = _builtins.min(_builtins.max(i + n if i < 0 else i, 0), n - 1)  # clamped, as JAX reads
            starts.append(i)
            limits.append(i + 1)
            strides.append(1)
            squeeze_axes.append(d)
        else:
            starts.append(0)
            limits.append(n)
            strides.append(1)
    if flips:
        x = _P.rev(x, tuple(flips))
    x = _P.slice_op(x, tuple(starts), tuple(limits), tuple(strides))
    return _P.squeeze(x, tuple(squeeze_axes)) if squeeze_axes else x


def _advanced_index(x, indices: list, positions: list, drop_oob: bool = True):
    """Integer-array indexing of the axes ``positions`` of ``x``, by numpy's rules: the indices
    broadcast together, and their axes replace the indexed ones where those are adjacent, else
    come first.  One ``take`` along the indexed axes merged into one, at the linear index.

    Out-of-bounds indices read the nearest element (clamped, as JAX); with ``drop_oob`` (JAX's
    gather) such a read carries no derivative -- its value is held by ``stop_gradient`` -- in every
    mode (JAX's reverse mode drops it; its forward mode gathers the clamped tangent, which would make
    forward and reverse disagree, so functrace drops it in both)."""
    pairs = [_clamped_index(i, x.shape[p]) for i, p in zip(indices, positions)]
    arrays = [a for a, _ in pairs]
    masks = [m for _, m in pairs if m is not None] if drop_oob else []
    bshape = _P.broadcast_shapes("indexing", *(_shape_of(a) for a in arrays))
    arrays = [a if _shape_of(a) == bshape else broadcast_to(a, bshape) for a in arrays]
    if positions != list(range(positions[0], positions[0] + len(positions))):
        x = _P.transpose(x, positions + [p for p in range(x.ndim) if p not in positions])
        positions = list(range(len(positions)))
    first = positions[0]
    dims = [x.shape[p] for p in positions]
    lin = arrays[0]
    for a, n in zip(arrays[1:], dims[1:]):
        lin = add(multiply(lin, n), a)
    rest = x.shape[first + len(dims):]
    merged = x.shape[:first] + (int(_np.prod(dims, dtype=_np.int64)),) + rest
    out = _P.take(reshape(x, merged), lin, first)
    if not masks:
        return out
    bad = masks[0]
    for m in masks[1:]:
        bad = logical_or(bad, m)
    bad = reshape(broadcast_to(bad, bshape), (1,) * first + bshape + (1,) * len(rest))
    return where(bad, _P.stop_gradient(out), out)


def getitem(x, idx):
    """numpy indexing: ints, slices, None, Ellipsis, integer and boolean arrays (differentiable)."""
    x = _to_array(x)
    idx = _expand_ellipsis(_expand_bool_indices(idx if isinstance(idx, tuple) else (idx,)), x.ndim)
    # numpy: alongside array indices an integer is a 0-d array index (x[0, :, [0, 1]] has shape (2, 6))
    as_array = _builtins.any(_is_array_index(i) for i in idx)
    idx = [i if i is None or isinstance(i, slice) or _is_array_index(i) else
           _np.asarray(_int_index(i), _np.int64) if as_array else _int_index(i) for i in idx]
    new_axes = tuple(p for p, i in enumerate(idx) if i is None)
    if new_axes:  # insert unit axes, then index them with full slices
        x = _P.expand_dims(x, new_axes)
        idx = [slice(None) if i is None else i for i in idx]
    x = _basic_index(x, idx)  # integers are squeezed only when there are no array indices
    positions = [d for d, i in enumerate(idx) if _is_array_index(i)]
    if not positions:
        return x
    # JAX reads an index of scalars (0-d arrays too) and unit-step slices as a dynamic slice, whose
    # clamped reads keep their derivative; any other index with arrays is a gather, whose
    # out-of-bounds reads have none (only inexact values carry derivatives: no mask for the others)
    gather = x.dtype.kind in "fc" and (_builtins.any(len(_shape_of(idx[d])) for d in positions) or _builtins.any(
        isinstance(i, slice) and i.step not in (None, 1, -1) for i in idx))
    return _advanced_index(x, [idx[d] for d in positions], positions, drop_oob=gather)


# --------------------------------------------------------------------------- unsupported

_NOT_IMPLEMENTED = {"fft"}


def __getattr__(name: str):
    """A name this module lacks raises AttributeError (so ``hasattr`` and feature detection work);
    for a numpy name it is also a NotImplementedError saying what to do instead."""
    if name == "bool":  # numpy 2's / jax.numpy's name; a module global would shadow the builtin here
        return _np.bool_
    if name.startswith("_") or not hasattr(_np, name):
        raise AttributeError(f"module 'functrace.numpy' has no attribute {name!r}", name=name)
    hint = " (it has no differentiable primitive yet)" if name in _NOT_IMPLEMENTED else ""
    raise _NotInFunctrace(f"functrace.numpy does not implement numpy.{name}{hint}. Compute it outside the "
                         "transformed function, or build it from fnp primitives.", name=name)


# --------------------------------------------------------------------------- eager array type

def _eager_results(fn):
    """``fn`` returning an ``EagerArray`` (JAX's ``.at``) where it returned a plain ndarray."""
    @_functools.wraps(fn)
    def wrapped(*args, **kwargs):
        out = fn(*args, **kwargs)
        return tuple(map(_as_eager, out)) if isinstance(out, tuple) else _as_eager(out)
    return wrapped


# creation functions made by numpy directly (primitives' eager results are EagerArrays already)
for _name in ("asarray", "array", "zeros", "ones", "full", "empty", "zeros_like", "ones_like", "full_like",
              "empty_like", "arange", "linspace", "eye", "identity", "tri"):
    if _name in globals():
        globals()[_name] = _eager_results(globals()[_name])
del _name

broadcast_shapes = _np.broadcast_shapes
copy = array
astype = asarray
# numpy 2's array-API spellings (as jax.numpy)
acos, asin, atan, atan2, acosh, asinh, atanh = arccos, arcsin, arctan, arctan2, arccosh, arcsinh, arctanh
concat, permute_dims, pow, bitwise_invert = concatenate, transpose, power, invert
