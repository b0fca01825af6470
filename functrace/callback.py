"""``pure_callback``: call a Python function on the host from traced code, as
``jax.pure_callback``.  The function must be pure (it may be called fewer or more times than it
appears, or removed when its result is unused); its result's shapes and dtypes are declared.
Under ``jit`` it is one equation, run on the host by every backend (an OpenCL program names it a
host step in its report).  It is not differentiable: give it rules with ``ft.custom_jvp`` /
``ft.custom_vjp``."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from . import numpy as fnp
from . import tree_util
from .core import ShapedArray
from .errors import user_frame_description
from .primitives import new_primitive
from .shapes import abstract_value

VMAP_METHODS = ("sequential", "expand_dims", "broadcast_all")

pure_callback_p = new_primitive("pure_callback")
pure_callback_p.multiple_results = True
pure_callback_p.host_step_reason = "calls the user's Python function (pure_callback): a host step by design"


def _impl(*arrays, callback, result_avals, vmap_method, name):
    outs = callback(*arrays)
    if len(outs) != len(result_avals):
        raise TypeError(f"pure_callback: {name} returned {len(outs)} arrays, declared {len(result_avals)}")
    checked = []
    for out, aval in zip(outs, result_avals):
        out = np.asarray(out)
        if out.shape != aval.shape or out.dtype != aval.dtype:
            raise TypeError(f"pure_callback: {name} returned an array {out.dtype.name}{list(out.shape)}, declared "
                            f"{aval.dtype.name}{list(aval.shape)} (result_shape_dtypes)")
        checked.append(out)
    return checked


def _not_differentiable(*args, name, **params):
    raise TypeError(f"pure_callback of {name} is not differentiable (as in JAX): functrace cannot see inside the "
                    "Python function; wrap it in ft.custom_jvp or ft.custom_vjp with its derivative")


def _batch(vals, dims, *, callback, result_avals, vmap_method, name):
    size = next(v.shape[d] for v, d in zip(vals, dims) if d is not None)
    moved = [_to_front(v, d) for v, d in zip(vals, dims)]
    batched = tuple(d is not None for d in dims)
    if vmap_method is None:
        raise NotImplementedError(f"vmap of pure_callback({name}): pass vmap_method= one of {VMAP_METHODS} (as JAX "
                                  "requires), saying how the callback handles a batch")
    if vmap_method == "sequential":
        def looped(*arrays):
            rows = [callback(*[a[i] if b else a for a, b in zip(arrays, batched)]) for i in range(size)]
            return [np.stack([np.asarray(r[k]) for r in rows]) if rows else np.zeros((0,) + aval.shape, aval.dtype)
                    for k, aval in enumerate(result_avals)]
        new_callback, args = looped, moved
    else:
        if vmap_method == "expand_dims":
            args = [m if b else fnp.expand_dims(m, 0) for m, b in zip(moved, batched)]
        else:  # broadcast_all
            args = [m if b else fnp.broadcast_to(m, (size,) + fnp.shape(m)) for m, b in zip(moved, batched)]
        new_callback = callback
    avals = tuple(ShapedArray((size,) + a.shape, a.dtype) for a in result_avals)
    outs = pure_callback_p.bind(*args, callback=new_callback, result_avals=avals, vmap_method=vmap_method, name=name)
    return outs, [0] * len(outs)


def _to_front(v, d):
    return v if d is None or d == 0 else fnp.moveaxis(v, d, 0)


pure_callback_p.impl = _impl
pure_callback_p.abstract_eval = lambda *avals, result_avals, **params: list(result_avals)
pure_callback_p.jvp_rule = _not_differentiable
pure_callback_p.vjp_rule = _not_differentiable
pure_callback_p.batch = _batch


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
