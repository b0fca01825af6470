"""``associative_scan``: the prefix combination of an associative function, in ``O(log n)`` levels.

Written with primitives only (strided slices, the combining function, concatenation), so it
differentiates, batches and lowers to OpenCL like any program; ``cumprod`` / ``cummax`` /
``cummin`` are scans of ``mul`` / ``max`` / ``min`` (JAX differentiates its cumulative reductions
the same way), and ``reduce_prod``'s derivative uses exclusive products from both sides.

The scan pairs neighbours (``fn(x[0::2], x[1::2])``), scans the pairs recursively (that gives the
odd positions), combines those with the next even elements, and interleaves: ``2 n`` applications
of ``fn`` on ``O(n)`` values in ``2 log2 n`` levels.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from . import primitives as P
from . import tree_util


def _slice_axis(x, axis: int, start: int, stop: int, step: int = 1):
    shape = P.shape_of(x)
    lo = [0] * len(shape)
    hi = list(shape)
    st = [1] * len(shape)
    lo[axis], hi[axis], st[axis] = start, max(stop, start), step
    return P.slice_op(x, lo, hi, st)


def _interleave(even, odd, axis: int, n: int):
    """``even[0], odd[0], even[1], odd[1], ...`` along ``axis``, ``n`` entries (``len(even)`` is
    ``ceil(n / 2)``, ``len(odd)`` ``floor(n / 2)``)."""
    if n % 2:  # pad odd with a copy of even's last entry, cut it off after the interleave
        odd = P.concatenate([odd, _slice_axis(even, axis, n // 2, n // 2 + 1)], axis)
    shape = P.shape_of(even)
    pair = [P.expand_dims(v, (axis + 1,)) for v in (even, odd)]
    both = P.concatenate(pair, axis + 1)
    merged = P.reshape(both, shape[:axis] + (2 * shape[axis],) + shape[axis + 1:])
    return _slice_axis(merged, axis, 0, n) if n % 2 else merged


def _scan_leaves(fn: Callable, leaves: list, axis: int) -> list:
    n = P.shape_of(leaves[0])[axis]
    if n < 2:
        return leaves
    pairs = fn([_slice_axis(x, axis, 0, n - 1, 2) for x in leaves],
               [_slice_axis(x, axis, 1, n, 2) for x in leaves])
    odd = _scan_leaves(fn, pairs, axis)  # prefix results at positions 1, 3, 5, ...
    if n > 2:
        tail = fn([_slice_axis(o, axis, 0, (n - 1) // 2) for o in odd],
                  [_slice_axis(x, axis, 2, n, 2) for x in leaves])
        even = [P.concatenate([_slice_axis(x, axis, 0, 1), t], axis) for x, t in zip(leaves, tail)]
    else:
        even = [_slice_axis(x, axis, 0, 1) for x in leaves]
    return [_interleave(e, o, axis, n) for e, o in zip(even, odd)]


def associative_scan(fn: Callable, elems, reverse: bool = False, axis: int = 0):
    """``[e0, fn(e0, e1), fn(fn(e0, e1), e2), ...]`` along ``axis`` of every leaf of ``elems``;
    ``fn`` must be associative and work elementwise on pytrees shaped like ``elems``."""
    leaves, tree = tree_util.tree_flatten(elems)
    if not leaves:
        return elems
    ndim = len(P.shape_of(leaves[0]))
    if not -ndim <= axis < ndim:
        raise ValueError(f"associative_scan: axis {axis} out of range for {ndim}-d elements")
    axis %= ndim
    n = P.shape_of(leaves[0])[axis]
    if any(P.shape_of(x)[axis] != n for x in leaves):
        raise ValueError("associative_scan: every leaf needs the same length along the scanned axis")

    def flat_fn(a, b):
        out = fn(tree_util.tree_unflatten(tree, a), tree_util.tree_unflatten(tree, b))
        return tree_util.tree_leaves(out)

    if reverse:
        leaves = [P.rev(x, (axis,)) for x in leaves]
    out = _scan_leaves(flat_fn, leaves, axis)
    if reverse:
        out = [P.rev(x, (axis,)) for x in out]
    return tree_util.tree_unflatten(tree, out)


def cumulative(prim, x, axis: int, reverse: bool = False):
    """Inclusive scan of the binary primitive ``prim`` (``mul_p``, ``max_p``, ``min_p``)."""
    return associative_scan(lambda a, b: prim.bind(a, b), x, reverse, axis)


def exclusive_products(x, axis: int, reverse: bool = False):
    """Products of the entries strictly before (or after, ``reverse``) each position along ``axis``."""
    n = P.shape_of(x)[axis]
    if n == 0:  # nothing before or after any position (and no position)
        return x
    ones = P.broadcast_in_dim(np.ones((), P.dtype_of(x)),
                              tuple(1 if d == axis else m for d, m in enumerate(P.shape_of(x))), ())
    if reverse:
        shifted = P.concatenate([_slice_axis(x, axis, 1, n), ones], axis)
    else:
        shifted = P.concatenate([ones, _slice_axis(x, axis, 0, n - 1)], axis)
    return cumulative(P.mul_p, shifted, axis, reverse)
