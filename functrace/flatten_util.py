"""``ravel_pytree``: a pytree of arrays as one flat vector, and the function that rebuilds it."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from . import numpy as fnp
from . import tree_util


def ravel_pytree(pytree: Any) -> tuple[Any, Callable]:
    """(flat 1-D array of every leaf, raveled in order and promoted to their common dtype;
    ``unravel(flat)`` rebuilding the tree with each leaf's shape and dtype).  Both directions are
    written with ``functrace.numpy``, so they differentiate and trace (as JAX's)."""
    leaves, treedef = tree_util.tree_flatten(pytree)
    arrays = [fnp.asarray(x) for x in leaves]
    shapes = [fnp.shape(a) for a in arrays]
    dtypes = [a.dtype for a in arrays]
    sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
    dtype = fnp.result_type(*dtypes) if dtypes else np.dtype(np.float64)
    flat = fnp.concatenate([fnp.ravel(fnp.asarray(a, dtype)) for a in arrays]) if arrays else np.zeros(0, dtype)
    total = sum(sizes)

    def unravel(vector):
        if fnp.shape(vector) != (total,):
            raise ValueError(f"unravel: expected a flat vector of shape ({total},), got shape {fnp.shape(vector)}")
        parts = fnp.split(vector, np.cumsum(sizes)[:-1].tolist()) if sizes else []
        return tree_util.tree_unflatten(treedef, [fnp.asarray(fnp.reshape(p, s), d)
                                                  for p, s, d in zip(parts, shapes, dtypes)])
    return flat, unravel
