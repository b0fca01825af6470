"""``pure_callback``: call a Python function on the host from traced code, as
``jax.pure_callback``.  The function must be pure (it may be called fewer or more times than it
appears, or removed when its result is unused); its result's shapes and dtypes are declared.
Under ``jit`` it is one equation, run on the host by every backend (an OpenCL program names it a
host step in its report).  It is not differentiable: give it rules with ``ft.custom_jvp`` /
``ft.custom_vjp``.  (The primitive and its rules: ``primitives/callbacks.py``.)"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from . import numpy as fnp
from . import tree_util
from .core import ShapedArray
from .core.errors import user_frame_description
from .primitives.callbacks import VMAP_METHODS, pure_callback_p
from .transforms.shapes import abstract_value


def pure_callback(callback: Callable, result_shape_dtypes: Any, *args: Any, vmap_method: str | None = None,
                  **kwargs: Any) -> Any:
    """``callback(*args, **kwargs)`` on numpy arrays, from traced code too; ``result_shape_dtypes``
    is a pytree of ``ft.ShapeDtypeStruct`` (or arrays) giving the result's structure, shapes and
    dtypes.  ``vmap_method`` says how ``vmap`` calls it: "sequential" (once per batch member),
    "expand_dims" (once, unbatched arguments with a leading 1 axis), "broadcast_all" (once, all
    arguments broadcast to the batch)."""
    if not callable(callback):
        raise TypeError(f"pure_callback: the callback must be callable, got {type(callback).__name__} "
                        f"{user_frame_description()}")
    if vmap_method is not None and vmap_method not in VMAP_METHODS:
        raise ValueError(f"pure_callback: vmap_method must be one of {VMAP_METHODS}, got {vmap_method!r}")
    name = f"`{getattr(callback, '__qualname__', type(callback).__name__)}`"
    leaves, in_tree = tree_util.tree_flatten((args, kwargs))
    result_leaves, out_tree = tree_util.tree_flatten(result_shape_dtypes)
    result_avals = tuple(ShapedArray(a.shape, a.dtype) for a in map(abstract_value, result_leaves))

    def flat_callback(*arrays):
        a, kw = tree_util.tree_unflatten(in_tree, [np.asarray(x) for x in arrays])
        out_leaves, tree = tree_util.tree_flatten(callback(*a, **kw))
        if tree != out_tree:
            raise TypeError(f"pure_callback: {name} returned a result of structure {tree}, declared {out_tree}")
        return out_leaves

    outs = pure_callback_p.bind(*[fnp.asarray(x) for x in leaves], callback=flat_callback,
                                result_avals=result_avals, vmap_method=vmap_method, name=name)
    return tree_util.tree_unflatten(out_tree, outs)
