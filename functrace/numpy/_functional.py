"""Functions of functions: ``vectorize``, ``apply_along_axis``, ``apply_over_axes``,
``piecewise``, ``fromfunction``, written with ``ft.vmap`` and ``where`` (so they trace,
differentiate and batch as JAX's do: every branch of ``piecewise`` is evaluated everywhere)."""
from __future__ import annotations

import math as _math
import re as _re

import numpy as _np

from .. import arrays as _arrays
from .. import tree_util
from ..core.errors import user_frame_description as _where_in_user_code
from ..transforms.batching import vmap
from . import _base as _fnp

_CORE = _re.compile(r"\(([^()]*)\)")


def _parse_signature(signature: str) -> tuple:
    """'(m,n),(n)->(m)' -> ([('m', 'n'), ('n',)], [('m',)])."""
    try:
        ins, outs = signature.replace(" ", "").split("->")
    except ValueError:
        raise ValueError(f"vectorize: not a valid gufunc signature: {signature!r}") from None
    parse = lambda part: [tuple(d for d in m.split(",") if d) for m in _CORE.findall(part)]  # noqa: E731
    return parse(ins), parse(outs)


def vectorize(pyfunc, *, excluded=frozenset(), signature=None):
    """numpy.vectorize as ``jax.numpy.vectorize``: ``pyfunc`` mapped over the broadcast loop axes by
    ``vmap`` (one traced call, not a Python loop); ``signature`` names core axes ('(n),(n)->()');
    positional indices or keyword names in ``excluded`` pass through unmapped."""
    in_cores, _ = _parse_signature(signature) if signature is not None else (None, None)

    def wrapped(*args, **kwargs):
        mapped = [i for i in range(len(args)) if i not in excluded]
        arrays = [_arrays.to_array(args[i]) for i in mapped]
        cores = in_cores if in_cores is not None else [()] * len(arrays)
        if len(cores) != len(arrays):
            raise TypeError(f"vectorize: signature {signature!r} names {len(cores)} inputs, got {len(arrays)} "
                            f"{_where_in_user_code()}")
        sizes: dict = {}
        loops = []
        for a, core in zip(arrays, cores):
            if a.ndim < len(core):
                raise ValueError(f"vectorize: input of shape {a.shape} has fewer axes than its core {core}")
            for name, n in zip(core, a.shape[a.ndim - len(core):]):
                if sizes.setdefault(name, n) != n:
                    raise ValueError(f"vectorize: core axis {name!r} has sizes {sizes[name]} and {n}")
            loops.append(a.shape[:a.ndim - len(core)])
        loop = _np.broadcast_shapes(*loops) if loops else ()
        count = _math.prod(loop)
        flat = [_fnp.reshape(_fnp.broadcast_to(a, loop + a.shape[a.ndim - len(c):]), (count,) + a.shape[a.ndim - len(c):])
                for a, c in zip(arrays, cores)]

        def call(*xs):
            full = list(args)
            for i, x in zip(mapped, xs):
                full[i] = x
            return pyfunc(*full, **kwargs)
        if not loop:
            return call(*arrays)
        if count == 0:
            raise NotImplementedError("vectorize over a loop shape with no elements is not implemented")
        out = vmap(call)(*flat)
        return tree_util.tree_map(lambda o: _fnp.reshape(o, loop + _fnp.shape(o)[1:]), out)
    wrapped.__name__ = getattr(pyfunc, "__name__", "vectorized")
    wrapped.__doc__ = getattr(pyfunc, "__doc__", None)
    return wrapped


def apply_along_axis(func1d, axis: int, arr, *args, **kwargs):
    """``func1d`` on every 1-D slice along ``axis`` (by ``vmap``); its output axes replace ``axis``."""
    x = _arrays.to_array(arr)
    axis = _arrays.normalize_axis(axis, x.ndim, "apply_along_axis")
    moved = _fnp.moveaxis(x, axis, -1)
    lead = moved.shape[:-1]
    out = vmap(lambda v: _fnp.asarray(func1d(v, *args, **kwargs)))(_fnp.reshape(moved, (-1, x.shape[axis])))
    out = _fnp.reshape(out, lead + _fnp.shape(out)[1:])
    k = _fnp.ndim(out) - len(lead)  # the function's output axes, now last: move them to ``axis``
    return _fnp.moveaxis(out, tuple(range(len(lead), len(lead) + k)), tuple(range(axis, axis + k))) if k else out


def apply_over_axes(func, a, axes):
    """``func(a, axis)`` for each axis in turn, keeping the reduced axes (as numpy)."""
    x = _arrays.to_array(a)
    for axis in ([axes] if isinstance(axes, int) else axes):
        res = _arrays.to_array(func(x, axis))
        x = res if res.ndim == x.ndim else _fnp.expand_dims(res, axis)
    return x


def piecewise(x, condlist, funclist, *args, **kw):
    """``funclist[k](x)`` (or a constant) where ``condlist[k]`` holds, later conditions winning; one
    more function than conditions is the default.  Every function is evaluated on all of ``x``."""
    x = _arrays.to_array(x)
    if not isinstance(condlist, (list, tuple)):  # one condition array, or a stack of them
        cond = _arrays.to_array(condlist)
        condlist = [cond] if cond.ndim in (0, x.ndim) else [cond[i] for i in range(cond.shape[0])]
    conds = [_fnp.asarray(c, bool) for c in condlist]
    if len(funclist) == len(conds) + 1:
        none = _fnp.logical_not(_fnp.any(_fnp.stack([_fnp.broadcast_to(c, x.shape) for c in conds]), 0))
        conds.append(none)
    elif len(funclist) != len(conds):
        raise ValueError(f"piecewise: with {len(conds)} conditions, funclist must have {len(conds)} or "
                         f"{len(conds) + 1} entries, got {len(funclist)}")
    out = _fnp.zeros_like(x)
    for cond, f in zip(conds, funclist):
        value = f(x, *args, **kw) if callable(f) else f
        out = _fnp.where(cond, _fnp.asarray(value, x.dtype), out)
    return out


def fromfunction(function, shape, *, dtype=float, **kwargs):
    """``function(*index_arrays)`` over a grid of ``shape`` (the index arrays of ``indices``)."""
    return function(*_np.indices(shape, dtype=dtype), **kwargs)
