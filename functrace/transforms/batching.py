"""Vectorizing map: every primitive's batching rule runs the whole batch in one op."""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Hashable, NamedTuple

import numpy as np

from .. import primitives as P
from .. import tree_util
from ..core import ClosedJaxpr, Jaxpr, ShapedArray, Trace, Tracer, get_aval, new_main
from ..core.errors import ConcretizationError, api_boundary, check_callable
from .staging import check_output


class BatchTracer(Tracer):
    """A batch of values stacked along ``batch_dim`` of ``val`` (None: the same for all)."""

    __slots__ = ("val", "batch_dim")

    def __init__(self, trace, val, batch_dim):
        self._trace = trace
        self.val = val
        self.batch_dim = batch_dim

    @property
    def shape(self) -> tuple:
        s = self.val.shape if hasattr(self.val, "shape") else ()
        d = self.batch_dim
        return s if d is None else s[:d] + s[d + 1:]

    @property
    def aval(self) -> ShapedArray:
        a = get_aval(self.val)
        if self.batch_dim is None:
            return a
        shape = a.shape[:self.batch_dim] + a.shape[self.batch_dim + 1:]
        return ShapedArray(shape, a.dtype, a.weak_type)

    def concrete_value(self, numeric: bool = False):
        if self.batch_dim is None:
            v = self.val
            return v.concrete_value(numeric) if isinstance(v, Tracer) else v
        raise ConcretizationError(self, "", "batched")

    def __array__(self, dtype=None, copy=None):
        """An unbatched concrete value is the same for every batch element: numpy may have it."""
        if self.batch_dim is None and not isinstance(self.val, Tracer):
            return np.asarray(self.val, dtype)
        return super().__array__(dtype, copy)


class AxisFrame(NamedTuple):
    """The named axis a ``vmap(..., axis_name=...)`` binds: collectives over ``name`` see ``size``
    members (the batch)."""

    name: Hashable
    size: int


class BatchTrace(Trace):
    __slots__ = ()
    transform = "ft.vmap"

    def pure(self, val):
        return BatchTracer(self, val, None)

    def process_primitive(self, primitive, tracers, params):
        vals = [t.val for t in tracers]
        dims = [t.batch_dim for t in tracers]
        frame = self.main.global_data
        if frame is not None and params.get("axis_name") == frame.name and hasattr(primitive, "batch_named_axis"):
            # a collective over this vmap's own axis: it combines the batch members
            return self._tracers(primitive, *primitive.batch_named_axis(vals, dims, frame.size, **params))
        if frame is not None and _uses_axis(params, frame.name):
            return self._batch_with_axis_in_subprograms(primitive, vals, dims, params, frame)
        if all(d is None for d in dims):
            # unbatched results stay tracers of this vmap (the same for every element), so that
            # e.g. indexing them with a batched index dispatches to functrace rather than numpy
            out = primitive.bind(*vals, **params)
            if primitive.multiple_results:
                return [BatchTracer(self, o, None) for o in out]
            return BatchTracer(self, out, None)
        if primitive.batch is None:
            raise NotImplementedError(f"vmap: no batching rule for primitive '{primitive.name}'")
        return self._tracers(primitive, *primitive.batch(vals, dims, **params))

    def _tracers(self, primitive, out, out_dim):
        """The batching rule's result as tracers of this trace."""
        if primitive.multiple_results:
            return [BatchTracer(self, o, d) for o, d in zip(out, out_dim)]
        return BatchTracer(self, out, out_dim)

    def _batch_with_axis_in_subprograms(self, primitive, vals, dims, params, frame: AxisFrame):
        """A primitive whose sub-programs (a cond branch, a loop body) hold collectives over this
        vmap's axis: its batching rule runs with the vmaps it makes over the batch named as this
        one, so those collectives combine the members (an unbatched primitive is batched first:
        its collectives still see ``frame.size`` members)."""
        if all(d is None for d in dims):
            first = next((i for i, v in enumerate(vals) if _is_array(v) or type(v) in (int, float, bool)), None)
            if first is None:
                raise NotImplementedError(f"vmap: '{primitive.name}' with no operands and collectives over "
                                          f"axis {frame.name!r} in its sub-programs")
            shape = P.shape_of(vals[first])
            vals = list(vals)
            vals[first] = P.broadcast_in_dim(vals[first], (frame.size, *shape), tuple(range(1, len(shape) + 1)))
            dims = [0 if i == first else None for i in range(len(dims))]
        outer, _rule_axis.frame = _rule_axis.frame, frame
        try:
            return self._tracers(primitive, *primitive.batch(vals, dims, **params))
        finally:
            _rule_axis.frame = outer


class _RuleAxis(threading.local):
    """The named axis whose vmap is running a batching rule in this thread (see
    ``BatchTrace._batch_with_axis_in_subprograms``): the rule's own vmaps over the batch take its name."""

    frame: AxisFrame | None = None


_rule_axis = _RuleAxis()


@contextlib.contextmanager
def _rule_axis_cleared():
    outer, _rule_axis.frame = _rule_axis.frame, None
    try:
        yield
    finally:
        _rule_axis.frame = outer


def _uses_axis(params: dict, name: Hashable) -> bool:
    """Do the sub-programs among ``params`` hold a collective over the axis ``name``?"""
    stack = [v for v in params.values() if isinstance(v, (Jaxpr, ClosedJaxpr, tuple))]
    while stack:
        v = stack.pop()
        if isinstance(v, tuple):
            stack.extend(s for s in v if isinstance(s, (Jaxpr, ClosedJaxpr)))
            continue
        for eqn in (v.jaxpr if isinstance(v, ClosedJaxpr) else v).eqns:
            if eqn.params.get("axis_name") == name:
                return True
            stack.extend(p for p in eqn.params.values() if isinstance(p, (Jaxpr, ClosedJaxpr, tuple)))
    return False


def _is_array(x) -> bool:
    """An array argument (a tracer or numpy array), as opposed to a Python scalar or other object."""
    return isinstance(x, (Tracer, np.ndarray, np.generic))


def _broadcast_prefix(prefix, tree, what: str, fname: str) -> list:
    """Expand an in_axes/out_axes prefix tree to one entry per leaf of ``tree``."""
    if prefix is None or isinstance(prefix, int):
        return [prefix] * len(tree_util.tree_leaves(tree))
    if isinstance(prefix, (list, tuple)) and isinstance(tree, (list, tuple)) and len(prefix) == len(tree):
        return [a for p, t in zip(prefix, tree) for a in _broadcast_prefix(p, t, what, fname)]
    if isinstance(prefix, dict) and isinstance(tree, dict) and set(prefix) == set(tree):
        return [a for k in sorted(tree) for a in _broadcast_prefix(prefix[k], tree[k], what, fname)]
    raise ValueError(f"vmap of `{fname}`: {what} {prefix!r} does not match the structure of the arguments")


@api_boundary
def vmap(fun: Callable, in_axes: Any = 0, out_axes: Any = 0, axis_name: Hashable | None = None,
         axis_size: int | None = None) -> Callable:
    """Map ``fun`` over an axis of its inputs without a Python loop (batching rules).

    ``axis_name`` names the mapped axis, as in JAX: collectives in ``ft.lax`` (``psum``,
    ``all_gather``, ``axis_index``, ...) over that name combine the members of the batch."""
    check_callable(fun, "vmap")
    fname = getattr(fun, "__qualname__", repr(fun))

    def batched_fun(*args):
        axes_tree = in_axes if isinstance(in_axes, (list, tuple)) else (in_axes,) * len(args)
        if isinstance(in_axes, list):
            axes_tree = tuple(in_axes)
        if len(axes_tree) != len(args):
            raise ValueError(f"vmap of `{fname}`: in_axes has {len(axes_tree)} entries but the "
                             f"function was called with {len(args)} arguments")
        leaves, in_tree = tree_util.tree_flatten(args)
        axes = _broadcast_prefix(tuple(axes_tree), args, "in_axes", fname)
        sizes = set()
        norm_axes = []
        for x, ax in zip(leaves, axes):
            if ax is None:
                norm_axes.append(None)
                continue
            nd = len(P.shape_of(x))
            if not -nd <= ax < nd:
                raise ValueError(f"vmap of `{fname}`: in_axes {ax} out of range for an argument of "
                                 f"shape {P.shape_of(x)}")
            ax = ax % nd
            norm_axes.append(ax)
            sizes.add(P.shape_of(x)[ax])
        if axis_size is not None:
            sizes.add(axis_size)
        if len(sizes) != 1:
            raise ValueError(f"vmap of `{fname}`: mapped axes have inconsistent or no sizes {sorted(sizes)}")
        size = sizes.pop()
        frame = AxisFrame(axis_name, size) if axis_name is not None else _rule_axis.frame
        if frame is not None and frame.size != size:
            frame = None
        with new_main(BatchTrace, frame, fname) as main, _rule_axis_cleared():  # nested vmaps start afresh
            trace = main.trace
            # unmapped arrays enter as unbatched tracers (not as numpy arrays, which a batched
            # index could not index: numpy's indexing would convert the index tracer to an array)
            ins = [BatchTracer(trace, x if isinstance(x, Tracer) else np.asarray(x), ax)
                   if ax is not None or _is_array(x) else x for x, ax in zip(leaves, norm_axes)]
            out = fun(*tree_util.tree_unflatten(in_tree, ins))
            o_leaves, o_tree = tree_util.tree_flatten(out)
            o_axes = _broadcast_prefix(out_axes, out, "out_axes", fname)
            results = []
            for o, oax in zip(o_leaves, o_axes):
                check_output(o, fname, "ft.vmap")
                if isinstance(o, BatchTracer) and o._trace.main is main:
                    val, bd = o.val, o.batch_dim
                else:
                    val, bd = o, None
                if oax is None:
                    if bd is not None:
                        raise ValueError(f"vmap of `{fname}`: out_axes=None but an output is batched")
                    results.append(val)
                    continue
                if bd is None:
                    vshape = P.shape_of(val)
                    val = P.broadcast_in_dim(val, (size,) + vshape, tuple(range(1, len(vshape) + 1)))
                    bd = 0
                nd = len(P.shape_of(val))
                if not -nd <= oax < nd:
                    raise ValueError(f"vmap of `{fname}`: out_axes {oax} is out of range for an output "
                                     f"of rank {nd - 1}")
                results.append(P.moveaxis(val, bd, oax % nd))
        return tree_util.tree_unflatten(o_tree, results)

    return api_boundary(batched_fun, wraps=fun)
