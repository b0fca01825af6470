"""Collectives over named axes: ``psum``, ``pmean``, ``pmax``, ``pmin``, ``all_gather``,
``psum_scatter``, ``ppermute``, ``all_to_all``, ``axis_index``, ``axis_size`` (``ft.lax``).

A name is bound by ``ft.vmap(f, axis_name=name)`` -- the members of the batch -- or is the reserved
``"processes"``: the MPI processes of ``ft.distributed`` (one process before
``ft.distributed.initialize()``).  The innermost binding of a name wins, so
``ft.vmap(f, axis_name="processes")`` on stacked shards computes what ``mpiexec -n N`` computes on
the shards.  Semantics (shapes, ``tiled``, ``perm``) are JAX's.

The primitives, their derivatives (JAX's for ``pmap``/``vmap``) and their MPI implementations are
in ``primitives/collectives.py``.  ``psum`` of a pytree is one equation, so its leaves under 64 KB
travel in one MPI message per dtype; ``jit`` joins consecutive ``psum`` equations into one, so
separate calls (a loss and its gradients) share it too.
In ``cond`` / ``scan`` / ``while_loop`` bodies under a named ``vmap`` they combine the members too
(the loop's batching rule names its own vmap, see ``transforms/batching.py``), unless every operand of the
loop is a constant rather than a value of the vmapped function: such a loop runs at once, outside
the vmap, and raises.
"""
from __future__ import annotations

from typing import Any, Hashable, Sequence

import numpy as np

from . import primitives as P
from . import tree_util
from .core.errors import ShapeError, user_frame_description
from .primitives.collectives import (  # noqa: F401  (the primitives, read through here too)
    CollectivePrimitive,
    all_gather_p,
    all_to_all_p,
    axis_index_p,
    bound_axis,
    pmax_p,
    pmin_p,
    ppermute_p,
    psum_p,
    psum_scatter_p,
)

# --------------------------------------------------------------------------- the axis environment


def _names(axis_name) -> tuple:
    """The names of ``axis_name``: a tuple of names, or one name."""
    return axis_name if isinstance(axis_name, tuple) else (axis_name,)


def axis_size(axis_name: Hashable | tuple) -> int:
    """The number of members of the named axis (the product, for a tuple of names)."""
    return int(np.prod([bound_axis(n, "axis_size")[0] for n in _names(axis_name)], dtype=np.int64))


# --------------------------------------------------------------------------- the user's functions


def _single_name(axis_name, what: str) -> Hashable:
    if isinstance(axis_name, tuple):
        if len(axis_name) != 1:
            raise NotImplementedError(f"{what} over several axes {axis_name!r} is not implemented: "
                                      f"apply it once per axis name {user_frame_description()}")
        return axis_name[0]
    return axis_name


def _axis_in_range(what: str, name: str, axis: int, ndim: int) -> int:
    """``axis`` (negative: from the end) as a position among ``ndim`` axes, or a ShapeError."""
    if not -ndim <= axis < ndim:
        raise ShapeError(f"{what}: {name}={axis} is out of range for {ndim} axes {user_frame_description()}")
    return axis % ndim


def _check_split_length(what: str, label: str, shape: tuple, axis: int, name, n: int, tiled: bool) -> None:
    """The axis a collective splits among the ``n`` members of ``name`` has length ``n`` (``tiled``:
    a multiple of ``n``), or a ShapeError."""
    if (shape[axis] % n) if tiled else (shape[axis] != n):
        raise ShapeError(f"{what}: {label} {axis} of an operand of shape {shape} must be "
                         f"{'a multiple of' if tiled else 'equal to'} the size {n} of axis {name!r} "
                         f"{user_frame_description()}")


def psum(x: Any, axis_name: Hashable | tuple) -> Any:
    """Sum of ``x`` (a pytree) over the members of the named axis; every member gets the sum.
    ``psum(1, name)`` is the axis size."""
    leaves, treedef = tree_util.tree_flatten(x)
    for name in _names(axis_name):
        leaves = list(psum_p.bind(*leaves, axis_name=name)) if leaves else leaves
    return tree_util.tree_unflatten(treedef, leaves)


def pmean(x: Any, axis_name: Hashable | tuple) -> Any:
    """Mean of ``x`` (a pytree) over the members of the named axis (integers give floats)."""
    n = axis_size(axis_name)

    def mean(total):
        if P.dtype_of(total).kind not in "fc":
            total = P.convert_element_type(total, np.float64)
        return P.div(total, P.scalar_like(total, n))
    return tree_util.tree_map(mean, psum(x, axis_name))


def _leafwise_over_names(prim: CollectivePrimitive, x: Any, axis_name: Hashable | tuple) -> Any:
    """``prim`` on every leaf of ``x``, once per name of ``axis_name``."""
    for name in _names(axis_name):
        x = tree_util.tree_map(lambda v, name=name: prim.bind(v, axis_name=name), x)
    return x


def pmax(x: Any, axis_name: Hashable | tuple) -> Any:
    """Elementwise maximum of ``x`` (a pytree) over the members of the named axis."""
    return _leafwise_over_names(pmax_p, x, axis_name)


def pmin(x: Any, axis_name: Hashable | tuple) -> Any:
    """Elementwise minimum of ``x`` (a pytree) over the members of the named axis."""
    return _leafwise_over_names(pmin_p, x, axis_name)


def all_gather(x: Any, axis_name: Hashable, axis: int = 0, tiled: bool = False) -> Any:
    """Every member's ``x`` stacked along a new axis ``axis`` (concatenated along ``axis`` when
    ``tiled``); every member gets the whole."""
    name = _single_name(axis_name, "all_gather")
    n = axis_size(name)

    def gather(v):
        ax = _axis_in_range("all_gather", "axis", axis, len(P.shape_of(v)) + (not tiled))
        return all_gather_p.bind(v, axis_name=name, axis_size=n, axis=ax, tiled=bool(tiled))
    return tree_util.tree_map(gather, x)


def psum_scatter(x: Any, axis_name: Hashable, scatter_dimension: int = 0, tiled: bool = False) -> Any:
    """``psum`` of ``x`` with member ``i`` keeping block ``i`` of axis ``scatter_dimension`` (that
    axis has the axis size as its length, and is removed; ``tiled``: a multiple of it, and kept)."""
    name = _single_name(axis_name, "psum_scatter")
    n = axis_size(name)

    def scatter(v):
        shape = P.shape_of(v)
        d = _axis_in_range("psum_scatter", "scatter_dimension", scatter_dimension, len(shape))
        _check_split_length("psum_scatter", "axis", shape, d, name, n, tiled)
        return psum_scatter_p.bind(v, axis_name=name, axis_size=n, scatter_dimension=d, tiled=bool(tiled))
    return tree_util.tree_map(scatter, x)


def ppermute(x: Any, axis_name: Hashable, perm: Sequence[tuple[int, int]]) -> Any:
    """Member ``dst`` gets member ``src``'s ``x`` for each ``(src, dst)`` of ``perm``; members that
    receive nothing get zeros."""
    name = _single_name(axis_name, "ppermute")
    n = axis_size(name)
    try:
        pairs = tuple((int(s), int(d)) for s, d in perm)
    except (TypeError, ValueError):
        pairs = None
    sources, dests = ([s for s, _ in pairs], [d for _, d in pairs]) if pairs is not None else ([], [])
    if pairs is None or len(set(sources)) < len(pairs) or len(set(dests)) < len(pairs) or \
            not all(0 <= i < n for i in sources + dests):
        raise ValueError(f"ppermute: perm {perm!r} must be pairs (source, destination) of distinct members "
                         f"of axis {name!r} (size {n}) {user_frame_description()}")
    perm = pairs
    return tree_util.tree_map(lambda v: ppermute_p.bind(v, axis_name=name, perm=perm), x)


def all_to_all(x: Any, axis_name: Hashable, split_axis: int, concat_axis: int, tiled: bool = False) -> Any:
    """Member ``i`` gets block ``i`` (along ``split_axis``) of every member's ``x``, stacked along
    ``concat_axis`` in member order (``tiled``: concatenated, the split axis kept at its share)."""
    name = _single_name(axis_name, "all_to_all")
    n = axis_size(name)

    def exchange(v):
        shape = P.shape_of(v)
        s = _axis_in_range("all_to_all", "split_axis", split_axis, len(shape))
        c = _axis_in_range("all_to_all", "concat_axis", concat_axis, len(shape))
        _check_split_length("all_to_all", "split axis", shape, s, name, n, tiled)
        return all_to_all_p.bind(v, axis_name=name, axis_size=n, split_axis=s, concat_axis=c, tiled=bool(tiled))
    return tree_util.tree_map(exchange, x)


def axis_index(axis_name: Hashable) -> Any:
    """This member's index along the named axis (int32; the process rank for ``"processes"``)."""
    return axis_index_p.bind(axis_name=_single_name(axis_name, "axis_index"))
