"""The primitive registry: every primitive declared once, with all of its rules.

Each entry gives, in one place:

* the shape/dtype rule (``abstract_eval``),
* the numpy implementation (``impl``, the reference backend),
* forward- and reverse-mode derivatives (``jvp`` / ``vjp``, one rule per argument),
* the batching rule for ``vmap`` (``batch``).

Derivative rules are written with the ops of this module, which ``bind`` primitives, so
the derivative of every rule is itself available: derivatives nest to any depth.

Elementwise binary primitives broadcast like numpy (equal dtypes required; the
``functrace.numpy`` layer promotes first).  Derivative rules therefore ``unbroadcast``
cotangents back to each operand's shape.
"""
from __future__ import annotations

import functools
import math
from typing import Callable, Sequence

import numpy as np

from .. import tree_util
from ..core import Primitive, ShapedArray, get_aval
from ..core.errors import DtypeError, ShapeError, user_frame_description

registry: dict[str, Primitive] = {}


def new_primitive(name: str) -> Primitive:
    p = Primitive(name)
    registry[name] = p
    return p


def shape_of(x) -> tuple:
    """Shape of a tracer, array or Python scalar (hot path: plain attribute access)."""
    s = getattr(x, "shape", None)
    return s if s is not None else ()


def dtype_of(x) -> np.dtype:
    return get_aval(x).dtype


def scalar_like(x, value) -> np.ndarray:
    """A 0-d constant with ``x``'s dtype (keeps float32 programs float32)."""
    return np.array(value, dtype=dtype_of(x))


def _shape_error(prim: str, msg: str):
    return ShapeError(f"{prim}: {msg} {user_frame_description()}")


# --------------------------------------------------------------------------- elementwise


@functools.lru_cache(maxsize=4096)
def broadcast_shapes(prim: str, *shapes: tuple) -> tuple:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise _shape_error(prim, "shapes " + " and ".join(map(str, shapes)) +
                           " cannot be broadcast together") from None


def _elementwise_abstract(name: str, out_dtype=None):
    def rule(*avals, **params):
        a0 = avals[0]
        if out_dtype is None:  # the common case: same shape and dtype (avals are immutable: share)
            if len(avals) == 1:
                return a0
            if len(avals) == 2 and (avals[1] is a0 or avals[1] == a0):
                return a0
        d0 = a0.dtype
        for a in avals:
            if a.dtype != d0:
                raise DtypeError(f"{name}: operand dtypes differ ({d0.name} vs {a.dtype.name}); "
                                 f"promote first {user_frame_description()}")
        shape = a0.shape
        for a in avals:
            if a.shape != shape:
                shape = broadcast_shapes(name, *(a.shape for a in avals))
                break
        weak = out_dtype is None and all(a.weak_type for a in avals)
        return ShapedArray(shape, d0 if out_dtype is None else out_dtype, weak)
    return rule


def unbroadcast(g, shape: tuple):
    """Sum the cotangent ``g`` down to an operand's (numpy-broadcast) ``shape``."""
    gshape = shape_of(g)
    if gshape == shape:
        return g
    lead = len(gshape) - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, n in enumerate(shape) if n == 1 and gshape[i + lead] != 1)
    if axes:
        g = reduce_sum(g, axes)
    if shape_of(g) != shape:
        g = reshape(g, shape)
    return g


def _batch_elementwise(prim: Primitive):
    """Batching for broadcasting elementwise ops: batch axis to the front, ranks aligned."""
    def rule(vals, dims, **params):
        shapes = [shape_of(v) for v in vals]
        out_rank = max(len(s) - (d is not None) for s, d in zip(shapes, dims))
        new = []
        for v, s, d in zip(vals, shapes, dims):
            if d is not None:
                if d != 0:
                    v = moveaxis(v, d, 0)
                    s = shape_of(v)
                if len(s) - 1 < out_rank:
                    v = reshape(v, (s[0],) + (1,) * (out_rank - len(s) + 1) + s[1:])
            new.append(v)
        return prim.bind(*new, **params), 0
    return rule


def elementwise(name: str, impl: Callable, partials: Sequence | None = (), out_dtype=None) -> Primitive:
    """Declare an elementwise primitive from its numpy ufunc and its partial derivatives.

    ``partials[i](ans, *args)`` is d ans / d args[i]; it yields both derivative modes:
    jvp contribution ``t * partial`` and vjp ``unbroadcast(g * partial)``.  ``None``
    marks an argument with zero derivative; ``partials=None``, or all of them ``None``, a
    primitive whose output carries no derivative (comparisons, logic, sign, floor, ...).
    ``()``: the linear rules are set by hand after the declaration.
    """
    p = new_primitive(name)
    p.elementwise = True
    p.impl = impl
    p.abstract_eval = _elementwise_abstract(name, out_dtype)
    p.batch = _batch_elementwise(p)
    if partials is None or (partials and all(d is None for d in partials)):
        p.differentiable = False
    else:
        p.jvp = [None if d is None else _scale_rule(d, None) for d in partials]
        p.vjp = [None if d is None else _scale_rule(d, i) for i, d in enumerate(partials)]
    return p


class Reciprocal:
    """A partial derivative of the form ``1 / denominator(ans, *args)``: rules divide by it
    (one equation) instead of multiplying by a reciprocal (two)."""

    def __init__(self, denominator: Callable):
        self.denominator = denominator


def _scale_rule(partial, arg_index):
    """``t * partial`` (jvp, arg_index None) or ``unbroadcast(g * partial)`` (vjp of that argument)."""
    if isinstance(partial, Reciprocal):
        scale = lambda v, ans, a: div(v, partial.denominator(ans, *a))
    else:
        scale = lambda v, ans, a: mul(v, partial(ans, *a))
    if arg_index is None:
        return lambda t, ans, *a, **kw: scale(t, ans, a)
    return lambda g, ans, *a, **kw: unbroadcast(scale(g, ans, a), shape_of(a[arg_index]))



neg_p = elementwise("neg", np.negative)
sin_p = elementwise("sin", np.sin, [lambda ans, x: cos(x)])
cos_p = elementwise("cos", np.cos, [lambda ans, x: neg(sin(x))])
tan_p = elementwise("tan", np.tan, [lambda ans, x: add(scalar_like(ans, 1), mul(ans, ans))])
tanh_p = elementwise("tanh", np.tanh, [lambda ans, x: sub(scalar_like(ans, 1), mul(ans, ans))])
exp_p = elementwise("exp", np.exp, [lambda ans, x: ans])
log_p = elementwise("log", np.log, [Reciprocal(lambda ans, x: x)])
log1p_p = elementwise("log1p", np.log1p, [Reciprocal(lambda ans, x: add(x, scalar_like(x, 1)))])
expm1_p = elementwise("expm1", np.expm1, [lambda ans, x: add(ans, scalar_like(ans, 1))])
sqrt_p = elementwise("sqrt", np.sqrt, [lambda ans, x: div(scalar_like(ans, 0.5), ans)])
rsqrt_p = elementwise("rsqrt", lambda x: 1 / np.sqrt(x),
                      [lambda ans, x: mul(scalar_like(x, -0.5), div(ans, x))])
abs_p = elementwise("abs", np.abs, [lambda ans, x: sign(x)])
abs_p.abstract_eval = lambda a: ShapedArray(a.shape, np.abs(np.zeros(0, a.dtype)).dtype, a.weak_type) \
    if a.dtype.kind == "c" else a  # |complex| is real, as numpy's
sign_p = elementwise("sign", np.sign, [None])
floor_p = elementwise("floor", np.floor, [None])
ceil_p = elementwise("ceil", np.ceil, [None])
round_p = elementwise("round", np.round, [None])
is_finite_p = elementwise("is_finite", np.isfinite, [None], out_dtype=np.dtype(bool))
def _logistic_impl(x):
    """1 / (1 + e^-x): within a few ulps everywhere (e^-x overflowing gives 0, the limit) and
    ~17x faster than ``exp(-logaddexp(0, -x))`` (64x344 float32: 23 vs 390 us).  float16 in
    float32: its e^-x overflows from x = -11, where the result is still a normal number."""
    wide = x.astype(np.float32) if x.dtype.itemsize < 4 else x
    with np.errstate(over="ignore"):
        return (1 / (1 + np.exp(-wide))).astype(x.dtype, copy=False)


logistic_p = elementwise("logistic", _logistic_impl,
                         [lambda ans, x: mul(ans, sub(scalar_like(ans, 1), ans))])
not_p = elementwise("not", np.logical_not, None)

add_p = elementwise("add", np.add)
sub_p = elementwise("sub", np.subtract)
mul_p = elementwise("mul", np.multiply, [lambda ans, x, y: y, lambda ans, x, y: x])
div_p = elementwise("div", np.true_divide, [Reciprocal(lambda ans, x, y: y), lambda ans, x, y: neg(div(ans, y))])
floor_div_p = elementwise("floor_div", np.floor_divide, [None, None])
rem_p = elementwise("rem", np.remainder,
                    [lambda ans, x, y: scalar_like(x, 1), lambda ans, x, y: neg(floor(div(x, y)))])
atan2_p = elementwise("atan2", np.arctan2, [
    lambda ans, x, y: div(y, add(mul(x, x), mul(y, y))),
    lambda ans, x, y: div(neg(x), add(mul(x, x), mul(y, y)))])


def _pow_dy(ans, x, y):
    # d/dy x**y = log(x) * x**y, taken as 0 where x == 0 (the limit used by JAX and numpy users).
    safe_log = log(select(eq(x, scalar_like(x, 0)), scalar_like(x, 1), x))
    return mul(safe_log, ans)


pow_p = elementwise("pow", np.power, [lambda ans, x, y: mul(y, pow(x, sub(y, scalar_like(y, 1)))), _pow_dy])


def _no_bool(prim: Primitive, what: str, hint: str) -> None:
    """numpy has no boolean ``-`` or ``sign``: refuse them when tracing too (not at run time,
    inside the program)."""
    rule = prim.abstract_eval

    def checked(*avals, **params):
        if avals[0].dtype.kind == "b":
            raise TypeError(f"numpy boolean {prim.name} ({what}) is not supported; use {hint} "
                            f"{user_frame_description()}")
        return rule(*avals, **params)
    prim.abstract_eval = checked


_no_bool(sub_p, "the `-` operator", "bitwise_xor (`^`) or logical_xor")
_no_bool(neg_p, "the `-` operator", "logical_not (`~`)")
_no_bool(sign_p, "numpy's sign has no boolean loop", "the array itself, or astype(int) first")


def _tie_mask(which):
    # Derivative of max/min: 1 where this operand wins, 1/2 at ties (as in JAX).
    def d(ans, x, y):
        a, b = (x, y) if which == 0 else (y, x)
        wins = convert_element_type(eq(ans, a), dtype_of(a))
        tie = convert_element_type(eq(a, b), dtype_of(a))
        return sub(wins, mul(scalar_like(a, 0.5), tie))
    return d


max_p = elementwise("max", np.maximum, [_tie_mask(0), _tie_mask(1)])
min_p = elementwise("min", np.minimum, [_tie_mask(0), _tie_mask(1)])

_BOOL = np.dtype(bool)
eq_p = elementwise("eq", np.equal, None, out_dtype=_BOOL)
ne_p = elementwise("ne", np.not_equal, None, out_dtype=_BOOL)
lt_p = elementwise("lt", np.less, None, out_dtype=_BOOL)
le_p = elementwise("le", np.less_equal, None, out_dtype=_BOOL)
gt_p = elementwise("gt", np.greater, None, out_dtype=_BOOL)
ge_p = elementwise("ge", np.greater_equal, None, out_dtype=_BOOL)
and_p = elementwise("and", lambda x, y: np.logical_and(x, y) if x.dtype == bool else np.bitwise_and(x, y), None)
or_p = elementwise("or", lambda x, y: np.logical_or(x, y) if x.dtype == bool else np.bitwise_or(x, y), None)
xor_p = elementwise("xor", lambda x, y: np.logical_xor(x, y) if x.dtype == bool else np.bitwise_xor(x, y), None)

# numpy's cbrt, fmod, copysign and signbit (functrace.numpy._elementwise builds the rest on them)
cbrt_p = elementwise("cbrt", np.cbrt, [Reciprocal(lambda ans, x: mul(scalar_like(ans, 3), mul(ans, ans)))])
fmod_p = elementwise("fmod", np.fmod, [lambda ans, x, y: scalar_like(x, 1),
                                       lambda ans, x, y: neg(_trunc(div(x, y)))])
copysign_p = elementwise("copysign", np.copysign, [lambda ans, x, y: mul(sign(x), sign(ans)), None])
signbit_p = elementwise("signbit", np.signbit, None, out_dtype=np.dtype(bool))


def _trunc(x):
    """Round toward zero (a piecewise constant: only ever a derivative's factor)."""
    return select(lt_p.bind(x, scalar_like(x, 0)), ceil_p.bind(x), floor(x))

# Linear elementwise ops: the tangent passes through; cotangents unbroadcast.
add_p.jvp = [lambda t, ans, x, y: t, lambda t, ans, x, y: t]
add_p.vjp = [lambda g, ans, x, y: unbroadcast(g, shape_of(x)), lambda g, ans, x, y: unbroadcast(g, shape_of(y))]
sub_p.jvp = [lambda t, ans, x, y: t, lambda t, ans, x, y: neg(t)]
sub_p.vjp = [lambda g, ans, x, y: unbroadcast(g, shape_of(x)), lambda g, ans, x, y: unbroadcast(neg(g), shape_of(y))]
neg_p.jvp = [lambda t, ans, x: neg(t)]
neg_p.vjp = [lambda g, ans, x: neg(g)]

# integer_pow: x ** n for a static integer n.
integer_pow_p = new_primitive("integer_pow")


def _integer_pow_impl(x, *, y):
    """x ** y; for 2 <= |y| <= 16 a chain of multiplies, as the OpenCL kernel computes it (in
    float32 for float16, rounded once at the end): ``np.power`` took 3x the time of x * x * x
    on 100K float32, and rounds differently."""
    n = abs(y)
    if 2 <= n <= 16:
        x = np.asarray(x)
        wide = x.astype(np.float32) if x.dtype == np.float16 else x
        acc = np.asarray(np.multiply(wide, wide))  # (a 0-d operand: numpy returns a scalar)
        for _ in range(n - 2):
            np.multiply(acc, wide, out=acc)
        return (acc if y > 0 else 1 / acc).astype(x.dtype, copy=False)
    return np.power(x, y, dtype=x.dtype) if y >= 0 else (1 / np.power(x, -y)).astype(x.dtype)


integer_pow_p.impl = _integer_pow_impl
integer_pow_p.abstract_eval = lambda a, *, y: a
integer_pow_p.batch = lambda vals, dims, *, y: (integer_pow(vals[0], y), dims[0])


def _integer_pow_partial(ans, x, *, y):
    if y == 0:
        return zeros_like(x)
    if y == 1:
        return ones_like(x)
    return mul(scalar_like(x, y), x if y == 2 else integer_pow(x, y - 1))


integer_pow_p.jvp = [lambda t, ans, x, *, y: mul(t, _integer_pow_partial(ans, x, y=y))]
integer_pow_p.vjp = [lambda g, ans, x, *, y: mul(g, _integer_pow_partial(ans, x, y=y))]

# select(pred, on_true, on_false) == numpy.where
select_p = new_primitive("select")
select_p.impl = np.where


def _select_abstract(pred, t, f):
    if pred.dtype != _BOOL:
        raise DtypeError(f"select: predicate must be bool, got {pred.dtype.name} {user_frame_description()}")
    if t.dtype != f.dtype:
        raise DtypeError(f"select: branch dtypes differ ({t.dtype.name} vs {f.dtype.name}) "
                         f"{user_frame_description()}")
    shape = broadcast_shapes("select", pred.shape, t.shape, f.shape)
    return ShapedArray(shape, t.dtype, t.weak_type and f.weak_type)


select_p.abstract_eval = _select_abstract
select_p.elementwise = True
select_p.batch = _batch_elementwise(select_p)
select_p.jvp = [None, lambda t, ans, p, x, y: select(p, t, zeros_like(t)),
                lambda t, ans, p, x, y: select(p, zeros_like(t), t)]
select_p.vjp = [None, lambda g, ans, p, x, y: unbroadcast(select(p, g, zeros_like(g)), shape_of(x)),
                lambda g, ans, p, x, y: unbroadcast(select(p, zeros_like(g), g), shape_of(y))]

convert_element_type_p = new_primitive("convert_element_type")
convert_element_type_p.impl = lambda x, *, new_dtype: np.asarray(x).astype(new_dtype)
convert_element_type_p.abstract_eval = lambda a, *, new_dtype: ShapedArray(a.shape, new_dtype, False)
convert_element_type_p.batch = lambda vals, dims, *, new_dtype: (convert_element_type(vals[0], new_dtype), dims[0])
convert_element_type_p.jvp = [lambda t, ans, x, *, new_dtype:
                              convert_element_type(t, new_dtype) if new_dtype.kind in "fc" else None]
convert_element_type_p.vjp = [lambda g, ans, x, *, new_dtype:
                              (real(g) if dtype_of(g).kind == "c" and dtype_of(x).kind == "f" else
                               convert_element_type(g, dtype_of(x))) if dtype_of(x).kind in "fc" else None]


# --------------------------------------------------------------------------- complex parts
# Derivatives through complex values follow JAX's convention: a cotangent is the transpose of the
# linear map, not its adjoint (no conjugation), so a real loss's gradient with respect to a real
# input is the real part of the cotangent that reaches it (the transpose of real -> complex).


def real_dtype(dtype) -> np.dtype:
    """float64 for complex128, float32 for complex64 (a real dtype: itself)."""
    return np.zeros(0, dtype).real.dtype


def complex_dtype(dtype) -> np.dtype:
    """complex128 for float64, complex64 for float32 (a complex dtype: itself)."""
    return np.result_type(dtype, np.complex64)


def _complex_unary(name, impl, out_dtype, jvp, vjp):
    p = new_primitive(name)
    p.impl = impl
    p.abstract_eval = lambda a: ShapedArray(a.shape, out_dtype(a.dtype), a.weak_type)
    p.jvp, p.vjp = [jvp], [vjp]
    p.batch = lambda vals, dims: (p.bind(vals[0]), dims[0])
    return p


real_p = _complex_unary("real", lambda x: np.real(x).copy(), real_dtype,
                        lambda t, ans, x: real(t), lambda g, ans, x: complex_(g, zeros_like(g)))
imag_p = _complex_unary("imag", lambda x: np.imag(x).copy(), real_dtype,
                        lambda t, ans, x: imag(t), lambda g, ans, x: complex_(zeros_like(g), neg(g)))
conj_p = _complex_unary("conj", np.conj, lambda d: d, lambda t, ans, x: conj(t), lambda g, ans, x: conj(g))

complex_p = new_primitive("complex")  # x + i y from two real arrays of one shape and dtype


def _complex_impl(x, y):
    out = np.empty(np.broadcast_shapes(np.shape(x), np.shape(y)), complex_dtype(np.asarray(x).dtype))
    out.real, out.imag = x, y
    return out


def _complex_abstract(a, b):
    if a.dtype != b.dtype or a.dtype.kind != "f" or a.shape != b.shape:
        raise DtypeError(f"complex: expected two real arrays of one shape and dtype, got {a.str_short()} and "
                         f"{b.str_short()} {user_frame_description()}")
    return ShapedArray(a.shape, complex_dtype(a.dtype), a.weak_type and b.weak_type)


complex_p.impl = _complex_impl
complex_p.abstract_eval = _complex_abstract
complex_p.jvp = [lambda t, ans, x, y: complex_(t, zeros_like(t)), lambda t, ans, x, y: complex_(zeros_like(t), t)]
complex_p.vjp = [lambda g, ans, x, y: real(g), lambda g, ans, x, y: neg(imag(g))]


def _complex_batch(vals, dims):
    size = next(shape_of(v)[d] for v, d in zip(vals, dims) if d is not None)
    x, y = (moveaxis(v, d, 0) if d is not None else broadcast_in_dim(v, (size,) + shape_of(v), tuple(
        range(1, len(shape_of(v)) + 1))) for v, d in zip(vals, dims))
    return complex_(x, y), 0


complex_p.batch = _complex_batch


def _complex_unit(ans, x):
    """x / |x| for complex x (1 where x == 0, as JAX), differentiable (unlike sign)."""
    safe = select(eq(ans, scalar_like(ans, 0)), ones_like(ans), ans)
    return div(x, convert_element_type(safe, dtype_of(x)))


def _abs_jvp(t, ans, x):
    """d|x| = re(conj(x / |x|) dx) for complex x, sign(x) dx for real x."""
    if dtype_of(x).kind == "c":
        return real(mul(t, conj(_complex_unit(ans, x))))
    return mul(t, sign(x))


def _abs_vjp(g, ans, x):
    if dtype_of(x).kind == "c":
        return mul(convert_element_type(g, dtype_of(x)), conj(_complex_unit(ans, x)))
    return mul(g, sign(x))


abs_p.jvp, abs_p.vjp = [_abs_jvp], [_abs_vjp]


# --------------------------------------------------------------------------- reductions


def _reduce_abstract(name):
    def rule(a, *, axes):
        for ax in axes:
            if not 0 <= ax < len(a.shape):
                raise _shape_error(name, f"axis {ax} out of range for shape {a.shape}")
        shape = tuple(n for i, n in enumerate(a.shape) if i not in axes)
        return ShapedArray(shape, a.dtype, a.weak_type)
    return rule


def _batch_reduce(prim):
    def rule(vals, dims, *, axes):
        x = moveaxis(vals[0], dims[0], 0)
        return prim.bind(x, axes=tuple(a + 1 for a in axes)), 0
    return rule


def _expand_reduced(g, x_shape, axes):
    """Broadcast a reduced value back over the reduced ``axes`` of ``x_shape``."""
    kept = tuple(i for i in range(len(x_shape)) if i not in axes)
    return broadcast_in_dim(g, x_shape, kept)


def reduction(name, impl, vjp_rule) -> Primitive:
    p = new_primitive(name)
    p.impl = impl
    p.abstract_eval = _reduce_abstract(name)
    p.batch = _batch_reduce(p)
    p.vjp = [vjp_rule]
    # Every reduction here is differentiable through its vjp (tangents reduce the same
    # way as cotangents expand), so its jvp is written with the same local derivative.
    return p


def repeat_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype ``count * value`` is computed in for a sum of ``count`` equal values: float64 (or
    complex128), where the product is rounded once; integers stay (they wrap as the sum would)."""
    return np.dtype(np.complex128 if dtype.kind == "c" else np.float64) if dtype.kind in "fc" else dtype


def _sum_impl(x, *, axes):
    """numpy's sum; along axes on which ``x`` is a broadcast (stride 0), one copy's sum times their
    size: O(data), not O(size) (a backward pass sums broadcast seeds), and accurate where adding
    ~1e12 float32 copies is not (see ``optimize._sum_of_broadcast``, its IR form)."""
    repeated = [a for a in axes if x.strides[a] == 0 and x.shape[a] > 1] if isinstance(x, np.ndarray) else []
    if not repeated or x.dtype.kind not in "fciu":
        return np.sum(x, axis=axes, dtype=x.dtype)
    one_copy = x[tuple(slice(0, 1) if a in repeated else slice(None) for a in range(x.ndim))]
    wide = repeat_dtype(x.dtype)
    count = np.array(math.prod(x.shape[a] for a in repeated)).astype(wide)
    return np.asarray(np.multiply(np.sum(one_copy, axis=axes, dtype=x.dtype), count, dtype=wide)).astype(x.dtype)[()]


reduce_sum_p = reduction("reduce_sum", _sum_impl,
                         lambda g, ans, x, *, axes: _expand_reduced(g, shape_of(x), axes))
reduce_sum_p.jvp = [lambda t, ans, x, *, axes: reduce_sum(t, axes)]


def _extremum_hits(ans, x, axes):
    """Indicator of the positions attaining the max/min, and their count (ties share equally, as in JAX)."""
    hits = convert_element_type(eq(x, _expand_reduced(ans, shape_of(x), axes)), dtype_of(x))
    return hits, reduce_sum(hits, axes)


def _extremum_vjp(g, ans, x, *, axes):
    hits, count = _extremum_hits(ans, x, axes)
    return mul(hits, _expand_reduced(div(g, count), shape_of(x), axes))


def _extremum_jvp(t, ans, x, *, axes):
    hits, count = _extremum_hits(ans, x, axes)
    return div(reduce_sum(mul(t, hits), axes), count)


def _extremum_impl(reduce, bool_identity: bool):
    """numpy's max / min; over bools they are any / all, whose empty reductions give the identity."""
    return lambda x, *, axes: reduce(x, axis=axes, initial=bool_identity) if x.dtype == bool \
        else reduce(x, axis=axes)


reduce_max_p = reduction("reduce_max", _extremum_impl(np.max, False), _extremum_vjp)
reduce_min_p = reduction("reduce_min", _extremum_impl(np.min, True), _extremum_vjp)
reduce_max_p.jvp = reduce_min_p.jvp = [_extremum_jvp]


def _prod_of_others(x, axes):
    """prod over ``axes`` of x with each element left out in turn, without dividing by x.

    The reduced axes are flattened to one axis; the product of the others is the exclusive
    product from the left times the one from the right (``exclusive_products``, below): O(n)
    memory, exact at zeros, and differentiable again.
    """
    shape = shape_of(x)
    rest = tuple(i for i in range(len(shape)) if i not in axes)
    xt = transpose(x, rest + tuple(axes))
    rest_shape = tuple(shape[i] for i in rest)
    n = int(np.prod([shape[a] for a in axes], dtype=np.int64))
    xf = reshape(xt, rest_shape + (n,))
    k = len(rest_shape)
    others = mul(exclusive_products(xf, k), exclusive_products(xf, k, reverse=True))
    others = reshape(others, rest_shape + tuple(shape[a] for a in axes))
    inv = np.argsort(rest + tuple(axes))
    return transpose(others, tuple(int(i) for i in inv))


reduce_prod_p = reduction("reduce_prod", lambda x, *, axes: np.prod(x, axis=axes, dtype=x.dtype),
                          lambda g, ans, x, *, axes: mul(_expand_reduced(g, shape_of(x), axes),
                                                         _prod_of_others(x, axes)))
reduce_prod_p.jvp = [lambda t, ans, x, *, axes: reduce_sum(mul(t, _prod_of_others(x, axes)), axes)]


def _arg_reduction(name, impl):
    p = new_primitive(name)
    p.impl = lambda x, *, axis: impl(x, axis=axis).astype(np.int64)

    def abstract(a, *, axis):
        if not 0 <= axis < len(a.shape):
            raise _shape_error(name, f"axis {axis} out of range for shape {a.shape}")
        return ShapedArray(a.shape[:axis] + a.shape[axis + 1:], np.dtype(np.int64))
    p.abstract_eval = abstract
    p.batch = lambda vals, dims, *, axis: (p.bind(moveaxis(vals[0], dims[0], 0), axis=axis + 1), 0)
    p.differentiable = False  # integer outputs
    return p


argmax_p = _arg_reduction("argmax", np.argmax)
argmin_p = _arg_reduction("argmin", np.argmin)

def _running(name: str, accumulate: Callable) -> Primitive:
    """A running sum or product along ``axis`` (from the end when ``reverse``), in numpy's order and
    the operand's dtype: its implementation, shape rule and batching rule."""
    p = new_primitive(name)

    def impl(x, *, axis, reverse):
        if reverse:
            return np.flip(accumulate(np.flip(x, axis), axis=axis, dtype=x.dtype), axis)
        return accumulate(x, axis=axis, dtype=x.dtype)
    p.impl = impl
    p.abstract_eval = lambda a, *, axis, reverse: a
    p.batch = lambda vals, dims, *, axis, reverse: (
        p.bind(moveaxis(vals[0], dims[0], 0), axis=axis + 1, reverse=reverse), 0)
    return p


cumsum_p = _running("cumsum", np.cumsum)
cumsum_p.jvp = [lambda t, ans, x, *, axis, reverse: cumsum(t, axis, reverse)]
cumsum_p.vjp = [lambda g, ans, x, *, axis, reverse: cumsum(g, axis, not reverse)]


# --------------------------------------------------------------------------- shape ops


def linear_unary(name, impl, abstract, transpose_rule, batch) -> Primitive:
    """A primitive linear in its one operand: its jvp applies itself to the tangent."""
    p = new_primitive(name)
    p.impl = impl
    p.abstract_eval = abstract
    p.batch = batch
    p.jvp = [lambda t, ans, x, **params: p.bind(t, **params)]
    p.vjp = [transpose_rule]
    return p


def _bid_abstract(a, *, shape, broadcast_dimensions):
    if len(broadcast_dimensions) != len(a.shape) or any(
            a.shape[i] not in (1, shape[d]) for i, d in enumerate(broadcast_dimensions)):
        raise _shape_error("broadcast_in_dim", f"cannot broadcast shape {a.shape} to {shape} "
                                               f"along dimensions {broadcast_dimensions}")
    return ShapedArray(tuple(shape), a.dtype, a.weak_type)


def _bid_impl(x, *, shape, broadcast_dimensions):
    x = np.asarray(x)
    expanded = [1] * len(shape)
    for i, d in enumerate(broadcast_dimensions):
        expanded[d] = x.shape[i]
    return np.broadcast_to(x.reshape(expanded), shape)


def _bid_transpose(g, ans, x, *, shape, broadcast_dimensions):
    x_shape = shape_of(x)
    new_axes = tuple(d for d in range(len(shape)) if d not in broadcast_dimensions)
    expanded = tuple(d for i, d in enumerate(broadcast_dimensions) if x_shape[i] == 1 and shape[d] != 1)
    axes = tuple(sorted(new_axes + expanded))
    if axes:
        g = reduce_sum(g, axes)
    return reshape(g, x_shape) if shape_of(g) != x_shape else g


def _bid_batch(vals, dims, *, shape, broadcast_dimensions):
    x = moveaxis(vals[0], dims[0], 0)
    b = shape_of(x)[0]
    return broadcast_in_dim(x, (b,) + tuple(shape), (0,) + tuple(d + 1 for d in broadcast_dimensions)), 0


broadcast_in_dim_p = linear_unary("broadcast_in_dim", _bid_impl, _bid_abstract, _bid_transpose, _bid_batch)


def _reshape_abstract(a, *, new_sizes):
    if int(np.prod(new_sizes, dtype=np.int64)) != a.size:
        raise _shape_error("reshape", f"cannot reshape array of shape {a.shape} into shape {new_sizes}")
    return ShapedArray(tuple(new_sizes), a.dtype, a.weak_type)


reshape_p = linear_unary(
    "reshape", lambda x, *, new_sizes: np.asarray(x).reshape(new_sizes), _reshape_abstract,  # (np.reshape: +1 us)
    lambda g, ans, x, *, new_sizes: reshape(g, shape_of(x)),
    lambda vals, dims, *, new_sizes: (reshape(moveaxis(vals[0], dims[0], 0),
                                              (shape_of(vals[0])[dims[0]],) + tuple(new_sizes)), 0))


def _transpose_abstract(a, *, permutation):
    if sorted(permutation) != list(range(len(a.shape))):
        raise _shape_error("transpose", f"permutation {permutation} does not match shape {a.shape}")
    return ShapedArray(tuple(a.shape[i] for i in permutation), a.dtype, a.weak_type)


transpose_p = linear_unary(
    "transpose", lambda x, *, permutation: np.asarray(x).transpose(permutation), _transpose_abstract,
    lambda g, ans, x, *, permutation: transpose(g, tuple(int(i) for i in np.argsort(permutation))),
    lambda vals, dims, *, permutation: (transpose(moveaxis(vals[0], dims[0], 0),
                                                  (0,) + tuple(p + 1 for p in permutation)), 0))


def _squeeze_abstract(a, *, dimensions):
    if any(a.shape[d] != 1 for d in dimensions):
        raise _shape_error("squeeze", f"cannot squeeze dimensions {dimensions} of shape {a.shape}")
    return ShapedArray(tuple(n for i, n in enumerate(a.shape) if i not in dimensions), a.dtype, a.weak_type)


squeeze_p = linear_unary(
    "squeeze", lambda x, *, dimensions: np.asarray(x).squeeze(dimensions), _squeeze_abstract,
    lambda g, ans, x, *, dimensions: reshape(g, shape_of(x)),
    lambda vals, dims, *, dimensions: (squeeze(moveaxis(vals[0], dims[0], 0),
                                               tuple(d + 1 for d in dimensions)), 0))


def _expand_dims_abstract(a, *, dimensions):
    shape = list(a.shape)
    for d in sorted(dimensions):
        shape.insert(d, 1)
    return ShapedArray(tuple(shape), a.dtype, a.weak_type)


expand_dims_p = linear_unary(
    "expand_dims", lambda x, *, dimensions: np.expand_dims(x, dimensions), _expand_dims_abstract,
    lambda g, ans, x, *, dimensions: reshape(g, shape_of(x)),
    lambda vals, dims, *, dimensions: (expand_dims(moveaxis(vals[0], dims[0], 0),
                                                   tuple(d + 1 for d in dimensions)), 0))

rev_p = linear_unary(
    "rev", lambda x, *, dimensions: np.flip(x, dimensions), lambda a, *, dimensions: a,
    lambda g, ans, x, *, dimensions: rev(g, dimensions),
    lambda vals, dims, *, dimensions: (rev(moveaxis(vals[0], dims[0], 0), tuple(d + 1 for d in dimensions)), 0))


def _slice_abstract(a, *, start_indices, limit_indices, strides):
    if len(start_indices) != len(a.shape) or any(
            not (0 <= s <= l <= n) for s, l, n in zip(start_indices, limit_indices, a.shape)):
        raise _shape_error("slice", f"slice {start_indices}:{limit_indices} out of bounds for shape {a.shape}")
    shape = tuple(max(0, -(-(l - s) // st)) for s, l, st in zip(start_indices, limit_indices, strides))
    return ShapedArray(shape, a.dtype, a.weak_type)


def _slice_impl(x, *, start_indices, limit_indices, strides):
    return x[tuple(slice(s, l, st) for s, l, st in zip(start_indices, limit_indices, strides))]


def _slice_transpose(g, ans, x, *, start_indices, limit_indices, strides):
    x_shape = shape_of(x)
    out_shape = shape_of(g)
    config = []
    for s, st, n, m in zip(start_indices, strides, x_shape, out_shape):
        if m == 0:
            config.append((n, 0, 0))
            continue
        hi = n - (s + (m - 1) * st + 1)
        config.append((s, hi, st - 1))
    return pad(g, scalar_like(g, 0), tuple(config))


slice_p = linear_unary(
    "slice", _slice_impl, _slice_abstract, _slice_transpose,
    lambda vals, dims, *, start_indices, limit_indices, strides: (slice_op(
        moveaxis(vals[0], dims[0], 0), (0,) + tuple(start_indices),
        (shape_of(vals[0])[dims[0]],) + tuple(limit_indices), (1,) + tuple(strides)), 0))


# pad(x, padding_value, padding_config=((lo, hi, interior), ...)), lo/hi >= 0
pad_p = new_primitive("pad")


def _pad_impl(x, value, *, padding_config):
    x = np.asarray(x)
    shape = tuple(lo + hi + n + max(n - 1, 0) * it for (lo, hi, it), n in zip(padding_config, x.shape))
    out = np.full(shape, value, dtype=x.dtype)
    out[tuple(slice(lo, lo + (n - 1) * (it + 1) + 1 if n else lo, it + 1)
              for (lo, hi, it), n in zip(padding_config, x.shape))] = x
    return out


def _pad_abstract(a, v, *, padding_config):
    if v.shape != () or v.dtype != a.dtype:
        raise _shape_error("pad", f"padding value must be a scalar of dtype {a.dtype.name}, got {v.str_short()}")
    if any(lo < 0 or hi < 0 or it < 0 for lo, hi, it in padding_config):
        raise _shape_error("pad", f"negative padding {padding_config} is not supported")
    shape = tuple(lo + hi + n + max(n - 1, 0) * it for (lo, hi, it), n in zip(padding_config, a.shape))
    return ShapedArray(shape, a.dtype, a.weak_type)


def _unpad(g, x_shape, padding_config):
    starts = tuple(lo for lo, hi, it in padding_config)
    limits = tuple(lo + (n - 1) * (it + 1) + 1 if n else lo for (lo, hi, it), n in zip(padding_config, x_shape))
    return slice_op(g, starts, limits, tuple(it + 1 for lo, hi, it in padding_config))


pad_p.impl = _pad_impl
pad_p.abstract_eval = _pad_abstract
pad_p.jvp = [lambda t, ans, x, v, *, padding_config: pad(t, zeros_like(v), padding_config),
             lambda t, ans, x, v, *, padding_config: pad(zeros_like(x), t, padding_config)]
pad_p.vjp = [lambda g, ans, x, v, *, padding_config: _unpad(g, shape_of(x), padding_config),
             lambda g, ans, x, v, *, padding_config: sub(reduce_sum(g, tuple(range(len(shape_of(g))))),
                                                         reduce_sum(_unpad(g, shape_of(x), padding_config),
                                                                    tuple(range(len(shape_of(x))))))]


def _pad_batch(vals, dims, *, padding_config):
    x, v = vals
    if dims[0] is None:
        x = broadcast_in_dim(x, (shape_of(v)[dims[1]],) + shape_of(x), tuple(range(1, len(shape_of(x)) + 1)))
    else:
        x = moveaxis(x, dims[0], 0)
    config = ((0, 0, 0),) + tuple(padding_config)
    if dims[1] is None:
        return pad(x, v, config), 0
    # A batched padding value: pad with zeros, then add the value where the mask of padding is set.
    v = moveaxis(v, dims[1], 0)
    padded = pad(x, scalar_like(x, 0), config)
    is_pad = pad(zeros_like(x), scalar_like(x, 1), config)
    vb = reshape(v, (shape_of(v)[0],) + (1,) * (len(shape_of(x)) - 1))
    return add(padded, mul(is_pad, vb)), 0


pad_p.batch = _pad_batch

concatenate_p = new_primitive("concatenate")
concatenate_p.impl = lambda *xs, dimension: np.concatenate(xs, axis=dimension)


def _concat_abstract(*avals, dimension):
    a0 = avals[0]
    for a in avals[1:]:
        if (len(a.shape) != len(a0.shape) or a.dtype != a0.dtype or
                any(n != m for i, (n, m) in enumerate(zip(a.shape, a0.shape)) if i != dimension)):
            raise _shape_error("concatenate", "operands must match except along axis "
                               f"{dimension}; got " + ", ".join(x.str_short() for x in avals))
    shape = list(a0.shape)
    shape[dimension] = sum(a.shape[dimension] for a in avals)
    return ShapedArray(tuple(shape), a0.dtype, all(a.weak_type for a in avals))


concatenate_p.abstract_eval = _concat_abstract


def _concat_piece(i):
    def jvp(t, ans, *xs, dimension):
        return concatenate([t if j == i else zeros_like(x) for j, x in enumerate(xs)], dimension)

    def vjp(g, ans, *xs, dimension):
        start = sum(shape_of(x)[dimension] for x in xs[:i])
        shape = shape_of(g)
        lo = tuple(start if d == dimension else 0 for d in range(len(shape)))
        hi = tuple(start + shape_of(xs[i])[dimension] if d == dimension else n for d, n in enumerate(shape))
        return slice_op(g, lo, hi, (1,) * len(shape))
    return jvp, vjp


class _PerArgRules:
    """Rules for variadic primitives: rule ``i`` is built on demand."""

    def __init__(self, make):
        self.make = make
        self.cache: dict = {}

    def __getitem__(self, i):
        if i not in self.cache:
            self.cache[i] = self.make(i)
        return self.cache[i]


concatenate_p.jvp = _PerArgRules(lambda i: _concat_piece(i)[0])
concatenate_p.vjp = _PerArgRules(lambda i: _concat_piece(i)[1])


def _concat_batch(vals, dims, *, dimension):
    b = next(shape_of(v)[d] for v, d in zip(vals, dims) if d is not None)
    xs = [moveaxis(v, d, 0) if d is not None else
          broadcast_in_dim(v, (b,) + shape_of(v), tuple(range(1, len(shape_of(v)) + 1)))
          for v, d in zip(vals, dims)]
    return concatenate(xs, dimension + 1), 0


concatenate_p.batch = _concat_batch


# --------------------------------------------------------------------------- dot_general


dot_general_p = new_primitive("dot_general")


def dot_dims(lhs_ndim, rhs_ndim, dimension_numbers):
    """A product's (lhs contracting, rhs contracting, lhs batch, rhs batch, lhs free, rhs free)
    dimensions: the output is batch, then lhs free, then rhs free."""
    (lc, rc), (lb, rb) = dimension_numbers
    lf = tuple(i for i in range(lhs_ndim) if i not in lc and i not in lb)
    rf = tuple(i for i in range(rhs_ndim) if i not in rc and i not in rb)
    return lc, rc, lb, rb, lf, rf


def _dot_impl(x, y, *, dimension_numbers):
    """Transpose both operands to (batch, free, contract) and run one BLAS product."""
    x = np.asarray(x)
    y = np.asarray(y)
    return _dot_plan(x.shape, y.shape, dimension_numbers)(x, y)


@functools.lru_cache(maxsize=1024)
def _dot_plan(x_shape: tuple, y_shape: tuple, dimension_numbers) -> Callable:
    """The product for operands of these shapes, its transpositions and reshapes decided once
    (a jitted program's dot then costs its BLAS call plus ~1 us, not ~6 us of index work)."""
    (lc, rc), (lb, rb) = dimension_numbers
    if not lb and len(lc) == 1 and len(x_shape) <= 2 and len(y_shape) <= 2:  # matrix/vector cases
        if len(x_shape) == 2 and lc[0] == 0:
            return (lambda x, y: np.dot(x.T, y.T)) if len(y_shape) == 2 and rc[0] == 1 else \
                (lambda x, y: np.dot(x.T, y))
        return (lambda x, y: np.dot(x, y.T)) if len(y_shape) == 2 and rc[0] == 1 else np.dot
    lc, rc, lb, rb, lf, rf = dot_dims(len(x_shape), len(y_shape), dimension_numbers)
    lfs = tuple(x_shape[i] for i in lf)
    rfs = tuple(y_shape[i] for i in rf)
    k = math.prod(x_shape[i] for i in lc)
    m, n = math.prod(lfs), math.prod(rfs)
    if lb:
        bshape = tuple(x_shape[i] for i in lb)
        x_order, x_matrix = lb + lf + lc, (math.prod(bshape), m, k)
        y_order, y_matrix = rb + rc + rf, (math.prod(bshape), k, n)
        product, out_shape = np.matmul, bshape + lfs + rfs
    else:  # 2-D product: transposed operands stay views and BLAS reads them as such
        x_order, x_matrix, y_order, y_matrix = lf + lc, (m, k), rc + rf, (k, n)
        product, out_shape = np.dot, lfs + rfs
    x_as_matrix = _as_matrix(x_order, x_matrix)
    y_as_matrix = _as_matrix(y_order, y_matrix)
    return lambda x, y: product(x_as_matrix(x), y_as_matrix(y)).reshape(out_shape)


def _as_matrix(order: tuple, shape: tuple) -> Callable:
    """``a`` transposed to ``order`` and reshaped to ``shape`` (no transposition when in order)."""
    if order == tuple(range(len(order))):
        return lambda a: a.reshape(shape)
    return lambda a: a.transpose(order).reshape(shape)


def _dot_abstract(a, b, *, dimension_numbers):
    lc, rc, lb, rb, lf, rf = dot_dims(len(a.shape), len(b.shape), dimension_numbers)
    if a.dtype != b.dtype:
        raise DtypeError(f"dot_general: operand dtypes differ ({a.dtype.name} vs {b.dtype.name}) "
                         f"{user_frame_description()}")
    if ([a.shape[i] for i in lc] != [b.shape[i] for i in rc] or
            [a.shape[i] for i in lb] != [b.shape[i] for i in rb]):
        raise _shape_error("dot_general", f"contracting/batch dimensions do not match for shapes "
                                          f"{a.shape} and {b.shape} (dimension_numbers={dimension_numbers})")
    shape = (tuple(a.shape[i] for i in lb) + tuple(a.shape[i] for i in lf) + tuple(b.shape[i] for i in rf))
    return ShapedArray(shape, a.dtype, a.weak_type and b.weak_type)


def _dot_transpose_lhs(g, ans, x, y, *, dimension_numbers):
    # d x = g (over rhs-free dims) . y ; result is (batch, lhs-free, rhs-contract sorted) -> x layout
    x_ndim, y_ndim = len(shape_of(x)), len(shape_of(y))
    lc, rc, lb, rb, lf, rf = dot_dims(x_ndim, y_ndim, dimension_numbers)
    nb, nlf = len(lb), len(lf)
    g_rf = tuple(range(nb + nlf, nb + nlf + len(rf)))
    res = dot_general(g, y, ((g_rf, rf), (tuple(range(nb)), rb)))
    rc_sorted = sorted(rc)
    perm = [0] * x_ndim
    for i, d in enumerate(lb):
        perm[d] = i
    for j, d in enumerate(lf):
        perm[d] = nb + j
    for d, r in zip(lc, rc):
        perm[d] = nb + nlf + rc_sorted.index(r)
    return transpose(res, tuple(perm)) if perm != list(range(x_ndim)) else res


def _dot_transpose_rhs(g, ans, x, y, *, dimension_numbers):
    # d y = x . g (over lhs-free dims); result is (batch, lhs-contract sorted, rhs-free) -> y layout,
    # which for the usual (K, N) weight is already y's layout (no transpose)
    x_ndim, y_ndim = len(shape_of(x)), len(shape_of(y))
    lc, rc, lb, rb, lf, rf = dot_dims(x_ndim, y_ndim, dimension_numbers)
    nb, nlf, nlc = len(lb), len(lf), len(lc)
    g_lf = tuple(range(nb, nb + nlf))
    res = dot_general(x, g, ((lf, g_lf), (lb, tuple(range(nb)))))
    lc_sorted = sorted(lc)
    perm = [0] * y_ndim
    for i, d in enumerate(rb):
        perm[d] = i
    for l, d in zip(lc, rc):
        perm[d] = nb + lc_sorted.index(l)
    for j, d in enumerate(rf):
        perm[d] = nb + nlc + j
    return transpose(res, tuple(perm))


def _dot_batch(vals, dims, *, dimension_numbers):
    (lc, rc), (lb, rb) = dimension_numbers
    x, y = vals
    dx, dy = dims
    shift = lambda ds: tuple(d + 1 for d in ds)
    if dx is not None and dy is not None:
        x, y = moveaxis(x, dx, 0), moveaxis(y, dy, 0)
        dn = ((shift(lc), shift(rc)), ((0,) + shift(lb), (0,) + shift(rb)))
        return dot_general(x, y, dn), 0
    if dx is not None:
        x = moveaxis(x, dx, 0)
        dn = ((shift(lc), rc), (shift(lb), rb))
        return dot_general(x, y, dn), len(lb)
    y = moveaxis(y, dy, 0)
    dn = ((lc, shift(rc)), (lb, shift(rb)))
    n_lhs_free = len(shape_of(x)) - len(lc) - len(lb)
    return dot_general(x, y, dn), len(lb) + n_lhs_free


dot_general_p.impl = _dot_impl
dot_general_p.abstract_eval = _dot_abstract
dot_general_p.jvp = [lambda t, ans, x, y, *, dimension_numbers: dot_general(t, y, dimension_numbers),
                     lambda t, ans, x, y, *, dimension_numbers: dot_general(x, t, dimension_numbers)]
dot_general_p.vjp = [_dot_transpose_lhs, _dot_transpose_rhs]
dot_general_p.batch = _dot_batch


# --------------------------------------------------------------------------- gather / scatter-add


take_p = new_primitive("take")  # numpy.take(x, indices, axis): the gather behind integer indexing


def _take_impl(x, idx, *, axis):
    return np.take(x, idx, axis=axis, mode="clip")


def _take_abstract(a, i, *, axis):
    if i.dtype.kind not in "iu":
        raise DtypeError(f"take: indices must be integers, got {i.dtype.name} {user_frame_description()}")
    return ShapedArray(a.shape[:axis] + i.shape + a.shape[axis + 1:], a.dtype, a.weak_type)


scatter_add_p = new_primitive("scatter_add")  # x with updates added at indices along axis (the transpose of take)


def _scatter_add_impl(x, idx, upd, *, axis):
    out = np.array(x, copy=True)
    moved = np.moveaxis(out, axis, 0)
    upd = np.asarray(upd)
    idx = np.asarray(idx)
    # updates are laid out like take's output: x[:axis] + idx.shape + x[axis+1:]
    k = idx.ndim
    upd_moved = np.moveaxis(upd, tuple(range(axis, axis + k)), tuple(range(k)))
    np.add.at(moved, np.clip(idx, 0, moved.shape[0] - 1), upd_moved)
    return out


def _scatter_add_abstract(a, i, u, *, axis):
    want = a.shape[:axis] + i.shape + a.shape[axis + 1:]
    if u.shape != want or u.dtype != a.dtype:
        raise _shape_error("scatter_add", f"updates {u.str_short()} do not match operand {a.str_short()} "
                                          f"indexed by {i.str_short()} along axis {axis}")
    return a


take_p.impl = _take_impl
take_p.abstract_eval = _take_abstract
take_p.jvp = [lambda t, ans, x, idx, *, axis: take(t, idx, axis), None]
take_p.vjp = [lambda g, ans, x, idx, *, axis: scatter_add(zeros_like(x), idx, g, axis), None]
scatter_add_p.impl = _scatter_add_impl
scatter_add_p.abstract_eval = _scatter_add_abstract
scatter_add_p.jvp = [lambda t, ans, x, idx, u, *, axis: scatter_add(t, idx, zeros_like(u), axis), None,
                     lambda t, ans, x, idx, u, *, axis: scatter_add(zeros_like(x), idx, t, axis)]
scatter_add_p.vjp = [lambda g, ans, x, idx, u, *, axis: g, None,
                     lambda g, ans, x, idx, u, *, axis: take(g, idx, axis)]


def _batched_flat_index(x, idx, axis, b):
    """Fold a batch axis (axis 0 of both x and idx) into the indexed axis.

    Returns x reshaped to (b*n, rest...) with ``axis`` moved to the front and indices
    offset by ``batch * n``, so one unbatched gather/scatter serves every batch member.
    """
    x = moveaxis(x, axis + 1, 1)
    xs = shape_of(x)
    n = xs[1]
    flat = reshape(x, (b * n,) + xs[2:])
    idx_shape = shape_of(idx)
    offsets = broadcast_in_dim(mul(iota(dtype_of(idx), (b,), 0), scalar_like(idx, n)), idx_shape, (0,))
    return flat, add(idx, offsets), xs


def ensure_batched(v, d, b):
    if d is None:
        return broadcast_in_dim(v, (b,) + shape_of(v), tuple(range(1, len(shape_of(v)) + 1)))
    return moveaxis(v, d, 0)


def _take_batch(vals, dims, *, axis):
    x, idx = vals
    dx, di = dims
    if di is None:
        return take(moveaxis(x, dx, 0), idx, axis + 1), 0
    if dx is None:
        return take(x, idx, axis), axis + di
    b = shape_of(x)[dx]
    x, idx = moveaxis(x, dx, 0), moveaxis(idx, di, 0)
    flat, fidx, xs = _batched_flat_index(x, idx, axis, b)
    out = take(flat, fidx, 0)  # (b, idx..., x[:axis], x[axis+1:])
    k = len(shape_of(idx)) - 1
    # reorder to (b, x[:axis], idx..., x[axis+1:])
    perm = (0,) + tuple(range(k + 1, k + 1 + axis)) + tuple(range(1, k + 1)) + tuple(
        range(k + 1 + axis, len(shape_of(out))))
    return transpose(out, perm), 0


def _scatter_add_batch(vals, dims, *, axis):
    b = next(shape_of(v)[d] for v, d in zip(vals, dims) if d is not None)
    x, idx, upd = (ensure_batched(v, d, b) for v, d in zip(vals, dims))
    flat, fidx, xs = _batched_flat_index(x, idx, axis, b)
    k = len(shape_of(idx)) - 1
    # updates (b, x[:axis], idx..., rest) -> (b, idx..., x[:axis], rest) to match the flat layout
    perm = (0,) + tuple(range(1 + axis, 1 + axis + k)) + tuple(range(1, 1 + axis)) + tuple(
        range(1 + axis + k, len(shape_of(upd))))
    out = scatter_add(flat, fidx, transpose(upd, perm), 0)
    out = reshape(out, xs)
    return moveaxis(out, 1, axis + 1), 0


take_p.batch = _take_batch
scatter_add_p.batch = _scatter_add_batch

iota_p = new_primitive("iota")
iota_p.impl = lambda *, dtype, shape, dimension: np.broadcast_to(
    np.arange(shape[dimension], dtype=dtype).reshape([-1 if i == dimension else 1 for i in range(len(shape))]),
    shape)
iota_p.abstract_eval = lambda *, dtype, shape, dimension: ShapedArray(tuple(shape), dtype)
iota_p.differentiable = False  # no operands, so no derivative and nothing to batch (no batching rule)


stop_gradient_p = new_primitive("stop_gradient")  # identity whose derivatives are zero
stop_gradient_p.impl = lambda x: x
stop_gradient_p.abstract_eval = lambda a: a
stop_gradient_p.differentiable = False  # its output is a constant for every derivative
stop_gradient_p.batch = lambda vals, dims: (stop_gradient_p.bind(vals[0]), dims[0])


# --------------------------------------------------------------------------- bit operations
# (unsigned integers: the random-bit arithmetic of ``ft.random``, as jax.lax's)


def _shift_impl(shift):
    def impl(x, y):
        x, y = np.asarray(x), np.asarray(y)
        bits = x.dtype.itemsize * 8
        too_far = y >= bits  # XLA (and so JAX) shifts everything out; C and numpy leave it undefined
        out = shift(x, np.where(too_far, 0, y).astype(x.dtype))
        return np.where(too_far, np.zeros((), x.dtype), out).astype(x.dtype)
    return impl


shift_left_p = elementwise("shift_left", _shift_impl(np.left_shift), None)
shift_right_logical_p = elementwise("shift_right_logical", _shift_impl(np.right_shift), None)


def _bitcast_abstract(a, *, new_dtype):
    if a.dtype.itemsize != new_dtype.itemsize:
        raise DtypeError(f"bitcast_convert_type: {a.dtype.name} and {new_dtype.name} differ in width "
                         f"{user_frame_description()}")
    return ShapedArray(a.shape, new_dtype, False)


bitcast_convert_type_p = new_primitive("bitcast_convert_type")  # the same bits read as another dtype
bitcast_convert_type_p.impl = lambda x, *, new_dtype: np.array(x).view(new_dtype)  # (a copy: contiguous, 0-d kept)
bitcast_convert_type_p.abstract_eval = _bitcast_abstract
bitcast_convert_type_p.differentiable = False  # bit patterns carry no derivative
bitcast_convert_type_p.batch = lambda vals, dims, *, new_dtype: (
    bitcast_convert_type_p.bind(vals[0], new_dtype=new_dtype), dims[0])


def shift_left(x, y): return shift_left_p.bind(x, y)
def shift_right_logical(x, y): return shift_right_logical_p.bind(x, y)
def bitcast_convert_type(x, dtype): return bitcast_convert_type_p.bind(x, new_dtype=np.dtype(dtype))


# --------------------------------------------------------------------------- ops (the calls rules use)


def neg(x): return neg_p.bind(x)
def real(x): return real_p.bind(x)
def imag(x): return imag_p.bind(x)
def conj(x): return conj_p.bind(x)
def complex_(x, y): return complex_p.bind(x, y)
def sin(x): return sin_p.bind(x)
def cos(x): return cos_p.bind(x)
def log(x): return log_p.bind(x)
def sign(x): return sign_p.bind(x)
def floor(x): return floor_p.bind(x)
def add(x, y): return add_p.bind(x, y)
def sub(x, y): return sub_p.bind(x, y)
def mul(x, y): return mul_p.bind(x, y)
def div(x, y): return div_p.bind(x, y)
def pow(x, y): return pow_p.bind(x, y)
def eq(x, y): return eq_p.bind(x, y)
def stop_gradient(x): return stop_gradient_p.bind(x)
def select(p, x, y): return select_p.bind(p, x, y)
def integer_pow(x, y): return integer_pow_p.bind(x, y=y)
def reduce_sum(x, axes): return reduce_sum_p.bind(x, axes=tuple(axes))
def reduce_prod(x, axes): return reduce_prod_p.bind(x, axes=tuple(axes))
def reshape(x, shape): return reshape_p.bind(x, new_sizes=tuple(shape))
def squeeze(x, dims): return squeeze_p.bind(x, dimensions=tuple(dims))
def expand_dims(x, dims): return expand_dims_p.bind(x, dimensions=tuple(dims))
def rev(x, dims): return rev_p.bind(x, dimensions=tuple(dims))
def cumsum(x, axis, reverse=False): return cumsum_p.bind(x, axis=axis, reverse=reverse)
def take(x, idx, axis): return take_p.bind(x, idx, axis=axis)
def scatter_add(x, idx, upd, axis): return scatter_add_p.bind(x, idx, upd, axis=axis)
def iota(dtype, shape, dimension): return iota_p.bind(dtype=np.dtype(dtype), shape=tuple(shape), dimension=dimension)
def concatenate(xs, dimension): return concatenate_p.bind(*xs, dimension=dimension)
def pad(x, v, config): return pad_p.bind(x, v, padding_config=tuple(tuple(c) for c in config))


def convert_element_type(x, dtype):
    dtype = np.dtype(dtype)
    return x if dtype_of(x) == dtype and not get_aval(x).weak_type else convert_element_type_p.bind(x, new_dtype=dtype)


def broadcast_in_dim(x, shape, dims):
    shape, dims = tuple(shape), tuple(dims)
    if shape_of(x) == shape and dims == tuple(range(len(shape))):
        return x
    return broadcast_in_dim_p.bind(x, shape=shape, broadcast_dimensions=dims)


def transpose(x, perm):
    perm = tuple(int(p) for p in perm)
    return x if perm == tuple(range(len(perm))) else transpose_p.bind(x, permutation=perm)


def broadcast_to(x, shape):
    """numpy-style (right-aligned) broadcast of ``x`` to ``shape``."""
    shape = tuple(shape)
    return broadcast_in_dim(x, shape, tuple(range(len(shape) - len(shape_of(x)), len(shape))))


def moveaxis(x, src: int, dst: int):
    if src == dst:
        return x
    n = len(shape_of(x))
    perm = [i for i in range(n) if i != src]
    perm.insert(dst, src)
    return transpose(x, perm)


def slice_op(x, start, limit, strides=None):
    strides = (1,) * len(start) if strides is None else tuple(strides)
    if tuple(start) == (0,) * len(start) and tuple(limit) == shape_of(x) and strides == (1,) * len(start):
        return x
    return slice_p.bind(x, start_indices=tuple(start), limit_indices=tuple(limit), strides=strides)


def dot_general(x, y, dimension_numbers):
    (lc, rc), (lb, rb) = dimension_numbers
    return dot_general_p.bind(x, y, dimension_numbers=((tuple(lc), tuple(rc)), (tuple(lb), tuple(rb))))


def zeros_like(x):
    return broadcast_in_dim(scalar_like(x, 0), shape_of(x), ())


def ones_like(x):
    return broadcast_in_dim(scalar_like(x, 1), shape_of(x), ())


# --------------------------------------------------------------------------- associative scans
# ``associative_scan``: the prefix combination of an associative function, in ``O(log n)`` levels.
# 
# Written with primitives only (strided slices, the combining function, concatenation), so it
# differentiates, batches and lowers to OpenCL like any program; ``cumprod`` / ``cummax`` /
# ``cummin`` are scans of ``mul`` / ``max`` / ``min`` (JAX differentiates its cumulative reductions
# the same way), and ``reduce_prod``'s derivative uses exclusive products from both sides.
# 
# The scan pairs neighbours (``fn(x[0::2], x[1::2])``), scans the pairs recursively (that gives the
# odd positions), combines those with the next even elements, and interleaves: ``2 n`` applications
# of ``fn`` on ``O(n)`` values in ``2 log2 n`` levels.


def _slice_axis(x, axis: int, start: int, stop: int, step: int = 1):
    shape = shape_of(x)
    lo = [0] * len(shape)
    hi = list(shape)
    st = [1] * len(shape)
    lo[axis], hi[axis], st[axis] = start, max(stop, start), step
    return slice_op(x, lo, hi, st)


def _interleave(even, odd, axis: int, n: int):
    """``even[0], odd[0], even[1], odd[1], ...`` along ``axis``, ``n`` entries (``len(even)`` is
    ``ceil(n / 2)``, ``len(odd)`` ``floor(n / 2)``)."""
    if n % 2:  # pad odd with a copy of even's last entry, cut it off after the interleave
        odd = concatenate([odd, _slice_axis(even, axis, n // 2, n // 2 + 1)], axis)
    shape = shape_of(even)
    pair = [expand_dims(v, (axis + 1,)) for v in (even, odd)]
    both = concatenate(pair, axis + 1)
    merged = reshape(both, shape[:axis] + (2 * shape[axis],) + shape[axis + 1:])
    return _slice_axis(merged, axis, 0, n) if n % 2 else merged


def _scan_leaves(fn: Callable, leaves: list, axis: int) -> list:
    n = shape_of(leaves[0])[axis]
    if n < 2:
        return leaves
    pairs = fn([_slice_axis(x, axis, 0, n - 1, 2) for x in leaves],
               [_slice_axis(x, axis, 1, n, 2) for x in leaves])
    odd = _scan_leaves(fn, pairs, axis)  # prefix results at positions 1, 3, 5, ...
    if n > 2:
        tail = fn([_slice_axis(o, axis, 0, (n - 1) // 2) for o in odd],
                  [_slice_axis(x, axis, 2, n, 2) for x in leaves])
        even = [concatenate([_slice_axis(x, axis, 0, 1), t], axis) for x, t in zip(leaves, tail)]
    else:
        even = [_slice_axis(x, axis, 0, 1) for x in leaves]
    return [_interleave(e, o, axis, n) for e, o in zip(even, odd)]


def associative_scan(fn: Callable, elems, reverse: bool = False, axis: int = 0):
    """``[e0, fn(e0, e1), fn(fn(e0, e1), e2), ...]`` along ``axis`` of every leaf of ``elems``;
    ``fn`` must be associative and work elementwise on pytrees shaped like ``elems``."""
    leaves, tree = tree_util.tree_flatten(elems)
    if not leaves:
        return elems
    ndim = len(shape_of(leaves[0]))
    if not -ndim <= axis < ndim:
        raise ValueError(f"associative_scan: axis {axis} out of range for {ndim}-d elements")
    axis %= ndim
    n = shape_of(leaves[0])[axis]
    if any(shape_of(x)[axis] != n for x in leaves):
        raise ValueError("associative_scan: every leaf needs the same length along the scanned axis")

    def flat_fn(a, b):
        out = fn(tree_util.tree_unflatten(tree, a), tree_util.tree_unflatten(tree, b))
        return tree_util.tree_leaves(out)

    if reverse:
        leaves = [rev(x, (axis,)) for x in leaves]
    out = _scan_leaves(flat_fn, leaves, axis)
    if reverse:
        out = [rev(x, (axis,)) for x in out]
    return tree_util.tree_unflatten(tree, out)


def cumulative(prim, x, axis: int, reverse: bool = False):
    """Inclusive scan of the binary primitive ``prim`` (``mul_p``, ``max_p``, ``min_p``):
    products as ``cumprod_p`` (numpy's sequential order), the others as an associative scan
    (exact for max and min in any order)."""
    if prim is mul_p:
        return cumprod_p.bind(x, axis=axis, reverse=reverse)
    return associative_scan(lambda a, b: prim.bind(a, b), x, reverse, axis)


def _shift_in_ones(x, axis: int, drop_first: bool):
    """``x`` moved one place along ``axis`` (toward the start when ``drop_first``), a one filling
    the vacated end: the neighbours after (or before) each position."""
    n = shape_of(x)[axis]
    ones = broadcast_in_dim(np.ones((), dtype_of(x)),
                            tuple(1 if d == axis else m for d, m in enumerate(shape_of(x))), ())
    if drop_first:
        return concatenate([_slice_axis(x, axis, 1, n), ones], axis)
    return concatenate([ones, _slice_axis(x, axis, 0, n - 1)], axis)


def exclusive_products(x, axis: int, reverse: bool = False):
    """Products of the entries strictly before (or after, ``reverse``) each position along ``axis``."""
    if shape_of(x)[axis] == 0:  # nothing before or after any position (and no position)
        return x
    return cumulative(mul_p, _shift_in_ones(x, axis, drop_first=reverse), axis, reverse)


# ``cumprod`` is a primitive of its own rather than the scan of ``mul`` above: a product tree
# reassociates, so a zero prefix times a later overflowing pair (``[0, 2, 1e30, -1e30]``) gave NaN
# where numpy's and JAX's running product give -0, and the rounding differed from numpy's.  It runs
# in numpy's order (on OpenCL one work-item per line, ``backends/opencl/scans.py``); its derivative
# rules are scans written with primitives, exact at zeros (no division) and differentiable again.


def _cumprod_jvp(t, ans, x, *, axis, reverse):
    """The product rule along the running product: a scan of (product, tangent) pairs."""
    def product_rule(a, b):
        return mul(a[0], b[0]), add(mul(a[1], b[0]), mul(a[0], b[1]))
    return associative_scan(product_rule, (x, t), reverse, axis)[1]


def _cumprod_vjp(g, ans, x, *, axis, reverse):
    """``dx[j] = before[j] * s[j]``: the product of the entries before ``j`` times
    ``s[j] = g[j] + x[j+1] * s[j+1]``, a linear recurrence run from the other end as a scan of
    affine maps ``s -> b + a s`` (composed as ``(a A, b + a B)``)."""
    if shape_of(x)[axis] == 0:
        return g

    def compose(later, earlier):
        return mul(earlier[0], later[0]), add(earlier[1], mul(earlier[0], later[1]))
    after = _shift_in_ones(x, axis, drop_first=not reverse)
    s = associative_scan(compose, (after, g), not reverse, axis)[1]
    return mul(exclusive_products(x, axis, reverse), s)


cumprod_p = _running("cumprod", np.cumprod)
cumprod_p.jvp = [_cumprod_jvp]
cumprod_p.vjp = [_cumprod_vjp]
