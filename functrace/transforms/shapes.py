"""``eval_shape`` and ``ShapeDtypeStruct``: a function's output shapes and dtypes, found by
tracing it with abstract values (no computation), as ``jax.eval_shape``."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .. import tree_util
from ..core import HasShape, ShapedArray, get_aval
from ..core.errors import api_boundary
from .staging import trace_to_jaxpr


class ShapeDtypeStruct(HasShape):
    """A shape and a dtype standing for an array (an argument of ``eval_shape`` or
    ``pure_callback``'s declared result)."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)

    def __eq__(self, other) -> bool:
        return isinstance(other, ShapeDtypeStruct) and (self.shape, self.dtype) == (other.shape, other.dtype)

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype))

    def __repr__(self) -> str:
        return f"ShapeDtypeStruct(shape={self.shape}, dtype={self.dtype.name})"


def abstract_value(x) -> ShapedArray:
    """The abstract value of an array, a Python scalar, or a ShapeDtypeStruct (or anything with
    ``shape`` and ``dtype``)."""
    if isinstance(x, ShapeDtypeStruct):
        return ShapedArray(x.shape, x.dtype)
    try:
        return get_aval(x)
    except TypeError:
        if hasattr(x, "shape") and hasattr(x, "dtype"):
            return ShapedArray(tuple(x.shape), np.dtype(x.dtype))
        raise


@api_boundary
def eval_shape(fun: Callable, *args: Any, **kwargs: Any) -> Any:
    """The pytree of ``ShapeDtypeStruct``s ``fun(*args, **kwargs)`` would return; arguments may be
    arrays or ShapeDtypeStructs.  Nothing is computed: ``fun`` is traced with abstract values."""
    leaves, in_tree = tree_util.tree_flatten((args, kwargs))
    out_tree_box = []

    def flat_fun(*flat):
        a, kw = tree_util.tree_unflatten(in_tree, flat)
        out_leaves, out_tree = tree_util.tree_flatten(fun(*a, **kw))
        out_tree_box.append(out_tree)
        return out_leaves

    closed = trace_to_jaxpr(flat_fun, [abstract_value(x) for x in leaves], getattr(fun, "__qualname__", None))
    outs = [ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in closed.jaxpr.outs]
    return tree_util.tree_unflatten(out_tree_box[0], outs)
