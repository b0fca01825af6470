"""``ft.nn.initializers``: weight initializers with jax.nn.initializers' signatures and numbers.

Each constructor returns ``init(key, shape, dtype=float32)``; the same key gives JAX's values
(the samples come from ``ft.random``, which gives JAX's bits).  Fans follow JAX: the receptive
field is every axis but ``in_axis`` and ``out_axis`` (default: the last two, as a dense layer's
(in, out) kernel).
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from . import numpy as fnp
from . import random
from .core.errors import user_frame_description

Initializer = Callable  # init(key, shape, dtype=np.float32) -> array


def zeros(key, shape: Sequence[int], dtype=np.float32):
    """All zeros (the key is ignored), as jax.nn.initializers.zeros."""
    return fnp.zeros(tuple(shape), dtype)


def ones(key, shape: Sequence[int], dtype=np.float32):
    """All ones (the key is ignored), as jax.nn.initializers.ones."""
    return fnp.ones(tuple(shape), dtype)


def constant(value, dtype=np.float32) -> Initializer:
    """An initializer filling every element with ``value``."""
    def init(key, shape: Sequence[int], dtype=dtype):
        return fnp.full(tuple(shape), value, dtype)
    return init


def normal(stddev: float = 1e-2, dtype=np.float32) -> Initializer:
    """Normal samples times ``stddev``."""
    def init(key, shape: Sequence[int], dtype=dtype):
        return random.normal(key, shape, dtype) * np.array(stddev, dtype)
    return init


def uniform(scale: float = 1e-2, dtype=np.float32) -> Initializer:
    """Uniform samples in [0, scale)."""
    def init(key, shape: Sequence[int], dtype=dtype):
        return random.uniform(key, shape, dtype) * np.array(scale, dtype)
    return init


def truncated_normal(stddev: float = 1e-2, dtype=np.float32, lower: float = -2.0, upper: float = 2.0) -> Initializer:
    """Standard normal samples truncated to (lower, upper), times ``stddev``."""
    def init(key, shape: Sequence[int], dtype=dtype):
        return random.truncated_normal(key, lower, upper, shape, dtype) * np.array(stddev, dtype)
    return init


def _fans(shape: tuple, in_axis: int, out_axis: int) -> tuple:
    if len(shape) < 2:
        raise ValueError(f"variance_scaling: needs a shape of at least 2 axes (fan in and fan out), got {shape} {user_frame_description()}")
    field = math.prod(shape) / shape[in_axis] / shape[out_axis]
    return shape[in_axis] * field, shape[out_axis] * field


_TRUNCATED_STDDEV = 0.87962566103423978  # stddev of a standard normal truncated to (-2, 2)


def variance_scaling(scale: float, mode: str, distribution: str, in_axis: int = -2, out_axis: int = -1,
                     dtype=np.float32) -> Initializer:
    """Samples of variance ``scale / fan`` (``mode``: 'fan_in', 'fan_out' or 'fan_avg') from
    ``distribution`` ('truncated_normal', 'normal' or 'uniform'), as JAX's."""
    if mode not in ("fan_in", "fan_out", "fan_avg"):
        raise ValueError(f"variance_scaling: mode must be 'fan_in', 'fan_out' or 'fan_avg', got {mode!r} {user_frame_description()}")
    if distribution not in ("truncated_normal", "normal", "uniform"):
        raise ValueError("variance_scaling: distribution must be 'truncated_normal', 'normal' or 'uniform', "
                         f"got {distribution!r} {user_frame_description()}")

    def init(key, shape: Sequence[int], dtype=dtype):
        if np.dtype(dtype).kind != "f":
            raise TypeError(f"variance_scaling: dtype must be a float type, got {np.dtype(dtype).name} "
                            f"{user_frame_description()}")
        shape = tuple(int(n) for n in shape)
        fan_in, fan_out = _fans(shape, in_axis, out_axis)
        fan = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[mode]
        variance = np.array(scale / fan, dtype)
        if distribution == "truncated_normal":
            stddev = np.sqrt(variance) / np.array(_TRUNCATED_STDDEV, dtype)
            return random.truncated_normal(key, -2, 2, shape, dtype) * stddev
        if distribution == "normal":
            return random.normal(key, shape, dtype) * np.sqrt(variance)
        return random.uniform(key, shape, dtype, -1) * np.sqrt(3 * variance)
    return init


def glorot_uniform(in_axis: int = -2, out_axis: int = -1, dtype=np.float32) -> Initializer:
    return variance_scaling(1.0, "fan_avg", "uniform", in_axis, out_axis, dtype)


def glorot_normal(in_axis: int = -2, out_axis: int = -1, dtype=np.float32) -> Initializer:
    return variance_scaling(1.0, "fan_avg", "truncated_normal", in_axis, out_axis, dtype)


def lecun_uniform(in_axis: int = -2, out_axis: int = -1, dtype=np.float32) -> Initializer:
    return variance_scaling(1.0, "fan_in", "uniform", in_axis, out_axis, dtype)


def lecun_normal(in_axis: int = -2, out_axis: int = -1, dtype=np.float32) -> Initializer:
    return variance_scaling(1.0, "fan_in", "truncated_normal", in_axis, out_axis, dtype)


def he_uniform(in_axis: int = -2, out_axis: int = -1, dtype=np.float32) -> Initializer:
    return variance_scaling(2.0, "fan_in", "uniform", in_axis, out_axis, dtype)


def he_normal(in_axis: int = -2, out_axis: int = -1, dtype=np.float32) -> Initializer:
    return variance_scaling(2.0, "fan_in", "truncated_normal", in_axis, out_axis, dtype)


xavier_uniform, xavier_normal = glorot_uniform, glorot_normal
kaiming_uniform, kaiming_normal = he_uniform, he_normal


def orthogonal(scale: float = 1.0, column_axis: int = -1, dtype=np.float32) -> Initializer:
    """A (semi-)orthogonal matrix from the QR decomposition of normal samples (signs fixed by R's
    diagonal), reshaped to ``shape`` with the columns along ``column_axis``, as JAX's."""
    def init(key, shape: Sequence[int], dtype=dtype):
        shape = tuple(int(n) for n in shape)
        if len(shape) < 2:
            raise ValueError(f"orthogonal: needs a shape of at least 2 axes, got {shape} {user_frame_description()}")
        n_cols = shape[column_axis]
        n_rows = math.prod(shape) // n_cols
        wide = n_rows < n_cols
        a = random.normal(key, (n_cols, n_rows) if wide else (n_rows, n_cols), dtype)
        q, r = fnp.linalg.qr(a)
        q = q * fnp.sign(fnp.diagonal(r))
        if wide:
            q = q.T
        q = fnp.reshape(q, tuple(n for i, n in enumerate(shape) if i != column_axis % len(shape)) + (n_cols,))
        return fnp.moveaxis(q, -1, column_axis) * np.array(scale, dtype)
    return init
