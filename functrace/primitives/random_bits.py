"""The ``threefry2x32`` primitive: the counter-mode hash ``ft.random``'s bits come from.

``threefry2x32(k1, k2, x1, x2)`` is Threefry-2x32 with 20 rounds (Salmon et al., SC'11) on uint32
operands that broadcast against each other: uint32 adds, rotations and xors, two uint32 outputs
(a kernel of its own on OpenCL, ``cl_kernels/threefry.cl``).  Its batching rule broadcasts like an
elementwise operation's (batch axes to the front, ranks aligned), so a vmap of keys or of counters
stays one equation.  Random bits are integers: the primitive has no derivative.
"""
from __future__ import annotations

import numpy as np

from ..core import ShapedArray
from ..core.errors import DtypeError, user_frame_description
from . import basic as P

_U32 = np.dtype(np.uint32)
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_KEY_PARITY = 0x1BD11BDA  # Threefry's key-schedule constant


def _rotate_left(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def threefry2x32_reference(k1, k2, x1, x2) -> list:
    """Threefry-2x32 with 20 rounds (Salmon et al., SC'11) on uint32 arrays (broadcast)."""
    k1, k2, x1, x2 = (np.asarray(a, _U32) for a in np.broadcast_arrays(k1, k2, x1, x2))
    ks = (k1, k2, k1 ^ k2 ^ np.uint32(_KEY_PARITY))
    with np.errstate(over="ignore"):  # uint32 arithmetic wraps around, as the hash intends
        x1, x2 = x1 + ks[0], x2 + ks[1]
        for block in range(5):
            for r in _ROTATIONS[block % 2]:
                x1 = x1 + x2
                x2 = _rotate_left(x2, r) ^ x1
            x1 = x1 + ks[(block + 1) % 3]
            x2 = x2 + ks[(block + 2) % 3] + np.uint32(block + 1)
    return [np.asarray(x1, _U32), np.asarray(x2, _U32)]


def _threefry_abstract(*avals):
    for a in avals:
        if a.dtype != _U32:
            raise DtypeError(f"threefry2x32: operands must be uint32, got {a.dtype.name} {user_frame_description()}")
    shape = P.broadcast_shapes("threefry2x32", *(a.shape for a in avals))
    return [ShapedArray(shape, _U32)] * 2


def _threefry_batch(vals, dims):
    """Broadcasting like an elementwise op: batch axes to the front, ranks aligned."""
    shapes = [P.shape_of(v) for v in vals]
    rank = max(len(s) - (d is not None) for s, d in zip(shapes, dims))
    moved = []
    for v, d in zip(vals, dims):
        if d is not None:
            v = P.moveaxis(v, d, 0)
            s = P.shape_of(v)
            v = P.reshape(v, (s[0],) + (1,) * (rank - len(s) + 1) + s[1:])
        moved.append(v)
    return threefry2x32_p.bind(*moved), [0, 0]


threefry2x32_p = P.new_primitive("threefry2x32")
threefry2x32_p.multiple_results = True
threefry2x32_p.impl = threefry2x32_reference
threefry2x32_p.abstract_eval = _threefry_abstract
threefry2x32_p.batch = _threefry_batch
threefry2x32_p.differentiable = False  # random bits: integers, no derivative
