"""``ft.random``: stateless pseudo-random numbers with JAX's keys and JAX's bits.

A key is a ``uint32[2]`` array (JAX's legacy raw keys, ``jax.random.PRNGKey``).  Every function
is a pure function of its key: the same key gives the same numbers, and the same numbers as
``jax.random`` -- the threefry2x32 counter-mode hash in the layout of
``jax_threefry_partitionable=True`` (JAX's default since 0.5.0; checked with JAX 0.10.2):

* ``split(key, shape)`` hashes the counters 0..n-1 (high and low 32-bit words of a 64-bit
  iota) and keeps both output words as the new keys;
* ``bits(key, shape)`` hashes the same counters and returns ``hi ^ lo`` (32 bits) or
  ``hi << 32 | lo`` (64 bits);
* ``fold_in(key, d)`` is the key that ``split`` would give at counter ``d``.

The hash is one primitive (``threefry2x32``, ``primitives/random_bits.py``: uint32 adds, rotations
and xors; a kernel of its own on OpenCL, ``cl_kernels/threefry.cl``); turning bits into floats is
ordinary primitives (shift, or, bitcast) that fuse into the kernels that use the numbers.  Random bits carry no derivative;
``minval`` / ``maxval`` / ``lower`` / ``upper`` / ``mean`` / ``cov`` do, as in JAX.

Defaults follow JAX without ``jax_enable_x64``: float32 samples and int32 integers; ``dtype=
np.float64`` gives JAX's x64 numbers (64 random bits per float).  Integer seeds are split into
two 32-bit words as JAX with x64 does (the same key as without it for seeds in [0, 2**31)).
"""
from __future__ import annotations

import math
import operator
from typing import Sequence

import numpy as np

from . import arrays
from . import numpy as fnp
from . import primitives as P
from .core import Tracer
from .core.errors import ShapeError, user_frame_description
from .primitives.random_bits import (  # noqa: F401  (threefry2x32_reference: ft.random's, for tests)
    threefry2x32_p,
    threefry2x32_reference,
)
from .primitives.special import erf_inv_p, erf_p

_U32 = np.dtype(np.uint32)
_UINT = {8: np.dtype(np.uint8), 16: np.dtype(np.uint16), 32: _U32, 64: np.dtype(np.uint64)}


# --------------------------------------------------------------------------- keys


def _check_key(fname: str, key):
    """``key`` as a uint32[2] value (tracer or array), or a TypeError naming ``fname``."""
    k = key if isinstance(key, Tracer) else np.asarray(key)
    if k.dtype != _U32 or tuple(k.shape) != (2,):
        raise TypeError(f"ft.random.{fname}: the key must be a uint32[2] array from ft.random.PRNGKey, "
                        f"split or fold_in (use ft.vmap for arrays of keys), got {k.dtype.name}"
                        f"{list(k.shape)} {user_frame_description()}")
    return k


def _row(x, i: int):
    """``x[i]`` along the leading axis (a slice: traceable, fused like any other)."""
    shape = tuple(P.shape_of(x))
    return P.squeeze(P.slice_op(x, (i,) + (0,) * (len(shape) - 1), (i + 1,) + shape[1:]), (0,))


def _key_words(key) -> tuple:
    """The two uint32 words of a key."""
    return _row(key, 0), _row(key, 1)


def PRNGKey(seed):
    """The key of an integer ``seed``: its high and low 32-bit words (an int32 seed: 0 and its
    bits), as ``jax.random.PRNGKey``."""
    if isinstance(seed, Tracer):
        if seed.shape != () or seed.dtype.kind not in "iu":
            raise TypeError(f"ft.random.PRNGKey: the seed must be an integer scalar, got {seed.aval.str_short()} {user_frame_description()}")
        if seed.dtype.itemsize <= 4:
            low = P.convert_element_type(P.convert_element_type(seed, np.int32), _U32) if seed.dtype.kind == "i" \
                else P.convert_element_type(seed, _U32)
            return fnp.stack([np.zeros((), _U32), low])
        wide = P.bitcast_convert_type(P.convert_element_type(seed, np.int64), np.uint64)
        high = P.shift_right_logical(wide, np.array(32, np.uint64))
        low = P.and_p.bind(wide, np.array(0xFFFFFFFF, np.uint64))
        return fnp.stack([P.convert_element_type(high, _U32), P.convert_element_type(low, _U32)])
    s = np.asarray(seed)
    if s.shape != () or s.dtype.kind not in "iub":
        raise TypeError(f"ft.random.PRNGKey: the seed must be an integer scalar, got {s.dtype.name}{list(s.shape)} "
                        f"(use ft.vmap for many seeds) {user_frame_description()}")
    if s.dtype.kind == "i" and s.dtype.itemsize <= 4:
        return fnp.asarray(np.array([0, int(s) & 0xFFFFFFFF], _U32))
    v = int(s) & 0xFFFFFFFFFFFFFFFF
    return fnp.asarray(np.array([v >> 32, v & 0xFFFFFFFF], _U32))


key = PRNGKey  # (jax.random.key makes a typed key; here every key is the raw uint32[2] array)


def _shape(fname: str, shape) -> tuple:
    """``shape`` (a sequence of sizes, or one size) as a tuple of non-negative ints, or a TypeError
    naming ``ft.random.<fname>`` (a string or a float would otherwise pass as digits / truncate)."""
    listed = (isinstance(shape, Sequence) and not isinstance(shape, str)) or np.ndim(shape) == 1
    sizes = shape if listed else (shape,)
    try:
        out = tuple(operator.index(n) for n in sizes)
    except TypeError:
        out = None
    if out is None or any(n < 0 for n in out):
        raise TypeError(f"ft.random.{fname}: the shape must be non-negative integers, got {shape!r} "
                        f"{user_frame_description()}")
    return out


def _counters(shape: tuple) -> tuple:
    """The 64-bit iota over ``shape`` as (high, low) uint32 words (high: a 0-d zero when it is
    zero everywhere, as it is below 2**32 elements)."""
    n = math.prod(shape)
    low = np.arange(n, dtype=np.uint64)
    high = (low >> np.uint64(32)).astype(_U32).reshape(shape) if n > 2 ** 32 else np.zeros((), _U32)
    return high, low.astype(_U32).reshape(shape)


def _hash(key, shape: tuple) -> list:
    k1, k2 = _key_words(key)
    high, low = _counters(shape)
    return threefry2x32_p.bind(k1, k2, high, low)


def split(key, num: int | Sequence[int] = 2):
    """``num`` new keys (a shape: keys of that shape), as ``jax.random.split``."""
    key = _check_key("split", key)
    return fnp.stack(_hash(key, _shape("split", num)), axis=-1)


def fold_in(key, data):
    """A new key from ``key`` and a 32-bit integer ``data``, as ``jax.random.fold_in``."""
    key = _check_key("fold_in", key)
    if isinstance(data, Tracer):
        if data.shape != ():
            raise TypeError(f"ft.random.fold_in: data must be a scalar (use ft.vmap to fold in many) {user_frame_description()}")
        d = P.convert_element_type(data, _U32)
    else:
        if np.ndim(data):
            raise TypeError(f"ft.random.fold_in: data must be a scalar (use ft.vmap to fold in many) {user_frame_description()}")
        d = np.array(int(data) & 0xFFFFFFFF, _U32)
    k1, k2 = _key_words(key)
    return fnp.stack(threefry2x32_p.bind(k1, k2, np.zeros((), _U32), d))


def _bits(key, width: int, shape: tuple):
    hi, lo = _hash(key, shape)
    if width == 64:
        wide = np.dtype(np.uint64)
        hi, lo = P.convert_element_type(hi, wide), P.convert_element_type(lo, wide)
        return P.or_p.bind(P.shift_left(hi, np.array(32, wide)), lo)
    mixed = P.xor_p.bind(hi, lo)
    return mixed if width == 32 else P.convert_element_type(mixed, _UINT[width])


def bits(key, shape: Sequence[int] = (), dtype=np.uint32):
    """Uniform random bits of an unsigned ``dtype``, as ``jax.random.bits``."""
    key = _check_key("bits", key)
    dtype = np.dtype(dtype)
    if dtype.kind != "u":
        raise TypeError(f"ft.random.bits: dtype must be an unsigned integer type, got {dtype.name} {user_frame_description()}")
    return _bits(key, dtype.itemsize * 8, _shape("bits", shape))


# --------------------------------------------------------------------------- floats


def _float_dtype(fname: str, dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"ft.random.{fname}: dtype must be float32 or float64, got {dtype.name} {user_frame_description()}")
    return dtype


def _as(x, dtype):
    """``x`` (a tracer, array or Python number) with ``dtype``."""
    if isinstance(x, Tracer):
        return P.convert_element_type(x, dtype)
    return np.asarray(x, dtype)


def _broadcasts_to(shape: tuple, target: tuple) -> bool:
    """Does an array of ``shape`` broadcast to ``target`` (unchanged)?"""
    try:
        return np.broadcast_shapes(shape, target) == target
    except ValueError:
        return False


def _check_broadcast(fname: str, shape: tuple, *args) -> None:
    """Every parameter in ``args`` broadcasts to the sample ``shape``, or a ShapeError."""
    for a in args:
        s = tuple(P.shape_of(a))
        if not _broadcasts_to(s, shape):
            raise ShapeError(f"ft.random.{fname}: a parameter of shape {s} does not broadcast to the "
                             f"sample shape {shape} {user_frame_description()}")


def _unit_floats(key, shape: tuple, dtype: np.dtype):
    """Floats in [0, 1): the top mantissa-many random bits under the exponent of 1.0, minus 1."""
    info = np.finfo(dtype)
    width = info.bits
    uint = _UINT[width]
    mantissa = P.shift_right_logical(_bits(key, width, shape), np.array(width - info.nmant, uint))
    one = np.array(1.0, dtype).view(uint)
    return P.sub(P.bitcast_convert_type(P.or_p.bind(mantissa, one), dtype), np.array(1.0, dtype))


def _uniform(fname: str, key, shape: tuple, dtype: np.dtype, minval, maxval):
    minval, maxval = _as(minval, dtype), _as(maxval, dtype)
    _check_broadcast(fname, shape, minval, maxval)
    floats = _unit_floats(key, shape, dtype)
    out = P.max_p.bind(minval, P.add(P.mul(floats, P.sub(maxval, minval)), minval))
    return P.broadcast_to(out, shape)


def uniform(key, shape: Sequence[int] = (), dtype=np.float32, minval=0.0, maxval=1.0):
    """Uniform floats in [minval, maxval), as ``jax.random.uniform``."""
    key = _check_key("uniform", key)
    return _uniform("uniform", key, _shape("uniform", shape), _float_dtype("uniform", dtype), minval, maxval)


def normal(key, shape: Sequence[int] = (), dtype=np.float32):
    """Standard normal floats: sqrt(2) erf_inv(u), u uniform in (-1, 1), as ``jax.random.normal``."""
    key = _check_key("normal", key)
    dtype = _float_dtype("normal", dtype)
    low = np.nextafter(np.array(-1.0, dtype), np.array(0.0, dtype))
    u = _uniform("normal", key, _shape("normal", shape), dtype, low, 1.0)
    return P.mul(np.array(math.sqrt(2.0), dtype), erf_inv_p.bind(u))


def _next_toward(x, up: bool):
    """numpy.nextafter(x, +-inf) by integer steps on the bit pattern (traceable)."""
    dtype = P.dtype_of(x)
    sint = np.dtype(f"int{dtype.itemsize * 8}")
    zero = np.array(0.0, dtype)
    x = P.select(P.eq(x, zero), P.zeros_like(x), x)  # -0 as +0
    i = P.bitcast_convert_type(x, sint)
    one = np.array(1, sint)
    if up:
        stepped = P.select(P.ge_p.bind(x, zero), P.add(i, one), P.sub(i, one))
    else:
        tiny_negative = np.array(np.iinfo(sint).min + 1, sint)
        stepped = P.select(P.gt_p.bind(x, zero), P.sub(i, one),
                           P.select(P.eq(x, zero), P.broadcast_to(tiny_negative, P.shape_of(x)), P.add(i, one)))
    return P.bitcast_convert_type(stepped, dtype)


def truncated_normal(key, lower, upper, shape: Sequence[int] | None = None, dtype=np.float32):
    """Standard normal floats conditioned on (lower, upper), as ``jax.random.truncated_normal``."""
    key = _check_key("truncated_normal", key)
    dtype = _float_dtype("truncated_normal", dtype)
    lower, upper = _as(lower, dtype), _as(upper, dtype)
    shape = tuple(np.broadcast_shapes(P.shape_of(lower), P.shape_of(upper))) if shape is None else _shape("truncated_normal", shape)
    sqrt2 = np.array(math.sqrt(2.0), dtype)
    a, b = erf_p.bind(P.div(lower, sqrt2)), erf_p.bind(P.div(upper, sqrt2))
    out = P.mul(sqrt2, erf_inv_p.bind(_uniform("truncated_normal", key, shape, dtype, a, b)))
    low = _next_toward(P.stop_gradient(lower), up=True)
    high = _next_toward(P.stop_gradient(upper), up=False)
    return P.broadcast_to(P.min_p.bind(P.max_p.bind(out, low), high), shape)


def _probability_dtype(fname: str, p) -> np.dtype:
    if isinstance(p, (float, int)) and not isinstance(p, bool):
        return np.dtype(np.float32)  # a Python number: JAX's default float
    d = P.dtype_of(p)
    if d.kind != "f":
        raise TypeError(f"ft.random.{fname}: probabilities must be floats, got {d.name} {user_frame_description()}")
    return d


def bernoulli(key, p=0.5, shape: Sequence[int] | None = None):
    """Booleans that are True with probability ``p``, as ``jax.random.bernoulli``."""
    key = _check_key("bernoulli", key)
    dtype = _probability_dtype("bernoulli", p)
    p = _as(p, dtype)
    shape = tuple(P.shape_of(p)) if shape is None else _shape("bernoulli", shape)
    return P.lt_p.bind(_uniform("bernoulli", key, shape, dtype, 0.0, 1.0), p)


def gumbel(key, shape: Sequence[int] = (), dtype=np.float32, mode: str = "low"):
    """Standard Gumbel floats, -log(-log(u)), as ``jax.random.gumbel`` (``mode="high"``: two
    uniforms per sample, for the far tail)."""
    key = _check_key("gumbel", key)
    dtype, shape = _float_dtype("gumbel", dtype), _shape("gumbel", shape)
    info = np.finfo(dtype)
    if mode == "low":
        u = _uniform("gumbel", key, shape, dtype, info.tiny, 1.0)
        return P.neg(P.log(P.neg(P.log(u))))
    if mode != "high":
        raise ValueError(f"ft.random.gumbel: mode must be 'low' or 'high', got {mode!r} {user_frame_description()}")
    both = _uniform("gumbel", key, (2,) + shape, dtype, 0.0, 1.0)
    high, low = _row(both, 0), _row(both, 1)
    fine = P.add(P.add(high, P.mul(np.array(2.0 ** -info.nmant, dtype), low)), np.array(info.tiny, dtype))
    x = P.select(P.ge_p.bind(high, np.array(0.5, dtype)), high, fine)
    return P.neg(P.log(P.neg(P.log1p_p.bind(P.neg(x)))))


def exponential(key, shape: Sequence[int] = (), dtype=np.float32):
    """Standard exponential floats, -log(1 - u), as ``jax.random.exponential``."""
    key = _check_key("exponential", key)
    dtype = _float_dtype("exponential", dtype)
    u = _uniform("exponential", key, _shape("exponential", shape), dtype, 0.0, 1.0)
    return P.neg(P.log1p_p.bind(P.neg(u)))


def categorical(key, logits, axis: int = -1, shape: Sequence[int] | None = None, replace: bool = True):
    """Category indices drawn with probabilities softmax(logits, axis), as
    ``jax.random.categorical`` (int32): the Gumbel-max trick, or without replacement the
    Gumbel-top-k trick (the leading axes of ``shape`` past the batch shape number the draws)."""
    key = _check_key("categorical", key)
    logits = arrays.to_float(logits)
    logits_shape = tuple(P.shape_of(logits))
    ndim = len(logits_shape)
    if not -ndim <= axis < ndim:
        raise ShapeError(f"ft.random.categorical: axis {axis} is out of range for logits of shape {logits_shape} "
                         f"(the categories lie along one of its axes) {user_frame_description()}")
    axis = axis % ndim
    if logits_shape[axis] == 0:
        raise ValueError(f"ft.random.categorical: logits of shape {logits_shape} have no categories along axis {axis} "
                         f"{user_frame_description()}")
    batch_shape = logits_shape[:axis] + logits_shape[axis + 1:]
    shape = batch_shape if shape is None else _shape("categorical", shape)
    if not _broadcasts_to(batch_shape, shape):
        raise ShapeError(f"ft.random.categorical: the batch shape {batch_shape} of logits of shape {logits_shape} "
                         f"(without axis {axis}, the categories) does not broadcast to shape {shape} "
                         f"{user_frame_description()}")
    prefix = shape[:len(shape) - len(batch_shape)]
    if not replace:
        draws, categories = math.prod(prefix), logits_shape[axis]
        if draws > categories:
            raise ValueError(f"ft.random.categorical: cannot draw {draws} samples from {categories} categories "
                             f"without replacement {user_frame_description()}")
        if shape[len(prefix):] != batch_shape:
            raise ShapeError(f"ft.random.categorical: without replacement the shape must end in the batch "
                             f"shape {batch_shape}, got {shape} {user_frame_description()}")
        scores = P.add(logits, gumbel(key, logits_shape, P.dtype_of(logits)))
        order = P.moveaxis(_stable_order(scores, axis, descending=True), axis, len(batch_shape))  # batch..., rank
        top = P.slice_op(order, (0,) * ndim, batch_shape + (draws,))
        return P.reshape(P.moveaxis(top, len(batch_shape), 0), shape)
    noise_shape = list(shape[len(prefix):])
    noise_shape.insert(axis, logits_shape[axis])
    noise = gumbel(key, prefix + tuple(noise_shape), P.dtype_of(logits))
    scores = P.add(noise, P.reshape(logits, (1,) * len(prefix) + logits_shape))
    return fnp.argmax(scores, axis=len(prefix) + axis).astype(np.int32)


# --------------------------------------------------------------------------- integers


def _clipped(x, dtype: np.dtype):
    """Integer ``x`` clipped to ``dtype``'s range, then converted (no wrap-around)."""
    info = np.iinfo(dtype)
    if not isinstance(x, Tracer):
        return np.asarray(np.clip(np.asarray(x, np.int64), max(info.min, -2 ** 63), min(info.max, 2 ** 63 - 1)), dtype)
    src = np.iinfo(x.dtype)
    lo, hi = max(info.min, src.min), min(info.max, src.max)
    clipped = P.min_p.bind(P.max_p.bind(x, np.array(lo, x.dtype)), np.array(hi, x.dtype))
    return P.convert_element_type(clipped, dtype)


def _integer(x):
    if isinstance(x, Tracer):
        return x if x.dtype.kind in "iu" else P.convert_element_type(x, np.int64)
    return np.asarray(x) if np.asarray(x).dtype.kind in "iu" else np.asarray(x).astype(np.int64)


def _rem(x, span, zero):
    """x % span with x % 0 = x (XLA's unsigned remainder; numpy's gives 0)."""
    safe = P.select(P.eq(span, zero), P.ones_like(span), span)
    return P.select(P.eq(span, zero), P.broadcast_to(x, P.shape_of(P.add(x, span))), P.rem_p.bind(x, safe))


def randint(key, shape: Sequence[int], minval, maxval, dtype=np.int32):
    """Integers in [minval, maxval), as ``jax.random.randint`` (two words of random bits per value,
    reduced modulo the span)."""
    key = _check_key("randint", key)
    dtype, shape = np.dtype(dtype), _shape("randint", shape)
    if dtype.kind not in "iu":
        raise TypeError(f"ft.random.randint: dtype must be an integer type, got {dtype.name} {user_frame_description()}")
    minval, maxval = _integer(minval), _integer(maxval)
    _check_broadcast("randint", shape, minval, maxval)
    if dtype.itemsize < 4:  # sampled in 32 bits (less bias), as JAX
        info = np.iinfo(dtype)
        low = _clipped(minval, np.dtype(np.int32))
        low = P.min_p.bind(P.max_p.bind(low, np.array(info.min, np.int32)), np.array(info.max, np.int32))
        high = _clipped(maxval, np.dtype(np.int32))
        high = P.min_p.bind(P.max_p.bind(high, np.array(info.min, np.int32)), np.array(info.max + 1, np.int32))
        return P.convert_element_type(randint(key, shape, low, high, np.int32), dtype)
    width = dtype.itemsize * 8
    uint = _UINT[width]
    above = int(np.iinfo(dtype).max)
    if isinstance(maxval, Tracer):
        out_of_range = P.gt_p.bind(P.convert_element_type(maxval, np.int64), np.array(min(above, 2 ** 63 - 1), np.int64)) \
            if above < np.iinfo(maxval.dtype).max else P.ne_p.bind(maxval, maxval)
    else:
        out_of_range = np.asarray(maxval).astype(object) > above
    low, high = _clipped(minval, dtype), _clipped(maxval, dtype)
    keys = split(key)
    k1, k2 = _row(keys, 0), _row(keys, 1)
    higher_bits, lower_bits = _bits(k1, width, shape), _bits(k2, width, shape)
    span = P.convert_element_type(P.sub(high, low), uint)
    one, zero = np.array(1, uint), np.array(0, uint)
    empty = P.le_p.bind(high, low)
    span = P.select(empty, P.broadcast_to(one, P.shape_of(span)), span)
    span = P.select(P.and_p.bind(out_of_range, P.not_p.bind(empty)), P.add(span, one), span)
    multiplier = _rem(np.array(2 ** (width // 2), uint), span, zero)
    multiplier = _rem(P.mul(multiplier, multiplier), span, zero)
    offset = P.add(P.mul(_rem(higher_bits, span, zero), multiplier), _rem(lower_bits, span, zero))
    offset = _rem(offset, span, zero)
    return P.broadcast_to(P.add(low, P.convert_element_type(offset, dtype)), shape)


def _stable_order(keys, axis: int, descending: bool = False):
    """The permutation a stable sort of ``keys`` along ``axis`` applies (int32): the ``argsort``
    primitive, descending with ties in their original order (as JAX's sorts and ``lax.top_k``)."""
    return fnp.argsort(keys, axis=axis, descending=descending).astype(np.int32)


def _shuffle(key, x, axis: int):
    """``x`` permuted along ``axis`` by stable sorts on fresh 32-bit keys (JAX's rounds)."""
    size = math.prod(P.shape_of(x))
    rounds = int(np.ceil(3 * np.log(max(1, size)) / np.log(np.iinfo(np.uint32).max)))
    for _ in range(rounds):
        keys = split(key)
        key, subkey = keys[0], keys[1]
        order = _stable_order(_bits(subkey, 32, tuple(P.shape_of(x))), axis)
        x = fnp.take_along_axis(x, order, axis)
    return x


def permutation(key, x, axis: int = 0, independent: bool = False):
    """A random permutation of ``arange(x)`` (an int) or of ``x`` along ``axis``, as
    ``jax.random.permutation``."""
    key = _check_key("permutation", key)
    if not isinstance(x, Tracer) and np.ndim(x) == 0:
        if np.asarray(x).dtype.kind not in "iu":
            raise TypeError(f"ft.random.permutation: x must be an integer or an array of at least one axis {user_frame_description()}")
        return _shuffle(key, np.arange(int(x), dtype=np.int32), 0)
    x = fnp.asarray(x)
    axis = axis % len(x.shape)
    if independent or len(x.shape) == 1:
        return _shuffle(key, x, axis)
    order = _shuffle(key, np.arange(x.shape[axis], dtype=np.int32), 0)
    return fnp.take(x, order, axis=axis)


def choice(key, a, shape: Sequence[int] = (), replace: bool = True, p=None, axis: int = 0):
    """Samples of ``arange(a)`` (an int) or of ``a``'s slices along ``axis``, with or without
    replacement, uniformly or with probabilities ``p``, as ``jax.random.choice``."""
    key = _check_key("choice", key)
    shape = _shape("choice", shape)
    scalar = not isinstance(a, Tracer) and np.ndim(a) == 0
    arr = None if scalar else fnp.asarray(a)
    if scalar:
        n = int(a)
    else:
        axis = axis % len(arr.shape)
        n = arr.shape[axis]
    draws = math.prod(shape)
    if n <= 0 and draws:
        raise ValueError(f"ft.random.choice: a must be greater than 0 unless no samples are taken {user_frame_description()}")
    if not replace and draws > n:
        raise ValueError(f"ft.random.choice: cannot take {draws} samples from {n} without replacement {user_frame_description()}")
    if p is None:
        if replace:
            ind = randint(key, shape, 0, n)
        else:
            ind = P.slice_op(permutation(key, n), (0,), (draws,))
    else:
        if isinstance(p, (list, tuple)):
            p = np.asarray(p, np.float32)  # Python numbers: JAX's default float
        p = arrays.to_float(p)
        if tuple(P.shape_of(p)) != (n,):
            raise ShapeError(f"ft.random.choice: p must have shape ({n},), got {tuple(P.shape_of(p))} {user_frame_description()}")
        if replace:
            cumulative = fnp.cumsum(p)
            total = _row(cumulative, n - 1)
            u = _uniform("choice", key, shape, P.dtype_of(p), 0.0, 1.0)
            r = P.mul(total, P.sub(np.array(1.0, P.dtype_of(p)), u))
            ind = fnp.sum(P.lt_p.bind(cumulative, P.expand_dims(r, (len(shape),))), axis=-1).astype(np.int32)
        else:
            scores = P.add(gumbel(key, (n,), P.dtype_of(p)), P.log(p))
            ind = P.slice_op(_stable_order(scores, 0, descending=True), (0,), (draws,))
        ind = P.reshape(ind, shape) if P.shape_of(ind) != shape else ind
    if scalar:
        return P.reshape(ind, shape)
    out = fnp.take(arr, P.reshape(ind, (draws,)), axis=axis)
    return fnp.reshape(out, arr.shape[:axis] + shape + arr.shape[axis + 1:])


def multivariate_normal(key, mean, cov, shape: Sequence[int] | None = None, dtype=None,
                        method: str = "cholesky"):
    """mean + factor @ z with factor factor^T = cov and z standard normal, as
    ``jax.random.multivariate_normal`` (``method``: 'cholesky', 'eigh' or 'svd')."""
    key = _check_key("multivariate_normal", key)
    if method not in ("cholesky", "eigh", "svd"):
        raise ValueError(f"ft.random.multivariate_normal: method must be 'cholesky', 'eigh' or 'svd', got {method!r} {user_frame_description()}")
    mean, cov = arrays.to_float(mean), arrays.to_float(cov)
    dtype = _float_dtype("multivariate_normal", P.dtype_of(mean) if dtype is None else dtype)
    mean, cov = _as(mean, dtype), _as(cov, dtype)
    n = P.shape_of(mean)[-1] if P.shape_of(mean) else None
    if n is None or tuple(P.shape_of(cov))[-2:] != (n, n):
        raise ShapeError(f"ft.random.multivariate_normal: needs mean (..., n) and cov (..., n, n), got "
                         f"{tuple(P.shape_of(mean))} and {tuple(P.shape_of(cov))} {user_frame_description()}")
    batch = tuple(np.broadcast_shapes(P.shape_of(mean)[:-1], P.shape_of(cov)[:-2]))
    shape = batch if shape is None else _shape("multivariate_normal", shape)
    if method == "cholesky":
        factor = fnp.linalg.cholesky(cov)
    elif method == "eigh":
        w, v = fnp.linalg.eigh(cov)
        factor = v * fnp.sqrt(w[..., None, :])
    else:
        u, s, _ = fnp.linalg.svd(cov)
        factor = u * fnp.sqrt(s[..., None, :])
    z = normal(key, shape + (n,), dtype)
    return mean + fnp.einsum("...ij,...j->...i", factor, z)
