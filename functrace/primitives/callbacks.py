"""The primitives that call the user's Python functions on the host: ``pure_callback`` and
``debug_callback`` (every backend runs them on the host; an OpenCL program names them host steps).

* ``pure_callback`` (``ft.pure_callback``, as ``jax.pure_callback``): a pure function whose
  result's shapes and dtypes are declared (``result_avals``), so it may be called fewer or more
  times than it appears, or removed when its result is unused.  It is not differentiable (its
  derivative rules raise: give it rules with ``ft.custom_jvp`` / ``ft.custom_vjp``); under
  ``vmap`` the ``vmap_method`` param says how it sees a batch ("sequential", "expand_dims",
  "broadcast_all").
* ``debug_callback`` (``ft.debug.print`` / ``ft.debug.callback``): *effectful*
  (``Primitive.effectful``), with no outputs, so optimization passes keep it, in program order,
  though nothing reads its result.  It is not differentiable (its tangents and cotangents are
  nothing: differentiation runs it on the primal values, as JAX), and under ``vmap`` it runs once
  per batch element, in order.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .. import numpy as fnp
from ..core import ShapedArray
from . import basic as P

VMAP_METHODS = ("sequential", "expand_dims", "broadcast_all")

# --------------------------------------------------------------------------- pure_callback

pure_callback_p = P.new_primitive("pure_callback")
pure_callback_p.multiple_results = True
pure_callback_p.host_step_reason = "calls the user's Python function (pure_callback): a host step by design"


def _pure_callback_impl(*arrays, callback, result_avals, vmap_method, name):
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


def _pure_callback_batch(vals, dims, *, callback, result_avals, vmap_method, name):
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


pure_callback_p.impl = _pure_callback_impl
pure_callback_p.abstract_eval = lambda *avals, result_avals, **params: list(result_avals)
pure_callback_p.jvp_rule = _not_differentiable
pure_callback_p.vjp_rule = _not_differentiable
pure_callback_p.batch = _pure_callback_batch


# --------------------------------------------------------------------------- debug_callback

debug_callback_p = P.new_primitive("debug_callback")
debug_callback_p.multiple_results = True
debug_callback_p.effectful = True
debug_callback_p.differentiable = False  # no outputs: no derivative; jvp/grad run it on the primals


def _debug_callback_impl(*values, callback: Callable):
    callback(*[np.asarray(v) for v in values])
    return []


def _debug_callback_batch(vals, dims, callback: Callable):
    """Once per batch element, in order (as JAX's): each batched operand's element ``i``."""
    size = next(P.shape_of(v)[d] for v, d in zip(vals, dims) if d is not None)
    for i in range(size):
        debug_callback_p.bind(*[v if d is None else _element(v, d, i) for v, d in zip(vals, dims)],
                              callback=callback)
    return [], []


def _element(x, axis: int, i: int):
    """``x[..., i, ...]`` along ``axis``."""
    shape = P.shape_of(x)
    start = [0] * len(shape)
    start[axis] = i
    limit = list(shape)
    limit[axis] = i + 1
    return P.squeeze(P.slice_op(x, start, limit), (axis,))


debug_callback_p.impl = _debug_callback_impl
debug_callback_p.abstract_eval = lambda *avals, callback: []
debug_callback_p.batch = _debug_callback_batch
