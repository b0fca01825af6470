"""The ``scatter`` primitive: ``x.at[...]``'s set / multiply / min / max on a flat operand.

``scatter(x, idx, upd, op=...)`` takes a 1-D operand ``x`` (N,), int64 indices ``idx`` (K,) that
are all in ``[0, N)`` and updates ``upd`` (K,) of ``x``'s dtype, and returns ``x`` with

* ``op="set"``: ``x[idx[k]] = upd[k]``; at a repeated index the LAST update wins (numpy's
  rule; the OpenCL kernel picks the largest ``k`` too, so both backends agree);
* ``op="mul"``: ``x[idx[k]] *= upd[k]`` for every ``k`` (repeats multiply);
* ``op="min"`` / ``"max"``: ``x[idx[k]] = minimum/maximum(x[idx[k]], upd[k])`` (NaN propagates).

(``add`` is ``primitives.scatter_add_p``, the transpose of ``take``.)  Index forms, negative
indices and out-of-bounds modes are resolved before binding, by ``functrace.numpy._indexing``:
dropped updates go to a trash slot past the end, so the primitive itself never sees one.

Derivatives (all written with differentiable primitives, so they nest):
set -- the overwritten positions get no cotangent, each update the cotangent of the position it
won; mul -- ``d out / d upd[k] = x[p] * prod of the other updates at p`` (exact at zeros: the
product of the nonzero updates and a count of the zero ones); min / max -- as JAX, the operand and
the updates that attain the extremum share its derivative equally.
"""
from __future__ import annotations

import numpy as np

from ..core import ShapedArray
from ..core.errors import DtypeError, ShapeError, user_frame_description
from . import basic as P

scatter_p = P.new_primitive("scatter")
SCATTER_OPS = ("set", "mul", "min", "max")


def _scatter_impl(x, idx, upd, *, op):
    out = np.array(x, copy=True)
    idx = np.asarray(idx)
    if op == "set":
        out[idx] = upd  # numpy assigns repeated indices in order: the last update wins
    else:
        {"mul": np.multiply, "min": np.minimum, "max": np.maximum}[op].at(out, idx, upd)
    return out


def _scatter_abstract(a, i, u, *, op):
    if op not in SCATTER_OPS:
        raise ValueError(f"scatter: op must be one of {SCATTER_OPS}, got {op!r}")
    if i.dtype != np.dtype(np.int64):
        raise DtypeError(f"scatter: indices must be int64, got {i.dtype.name} {user_frame_description()}")
    if len(a.shape) != 1 or len(i.shape) != 1 or u.shape != i.shape or u.dtype != a.dtype:
        raise ShapeError(f"scatter: takes a 1-D operand, 1-D indices and updates of their shape and the "
                         f"operand's dtype; got {a.str_short()}, {i.str_short()}, {u.str_short()} "
                         f"{user_frame_description()}")
    return ShapedArray(a.shape, a.dtype, a.weak_type)


def scatter(x, idx, upd, op: str):
    """``scatter_p`` of a 1-D ``x``, in-bounds int64 ``idx`` and ``upd`` (see the module doc)."""
    return scatter_p.bind(x, idx, upd, op=op)


def _winners(idx, n):
    """True where update ``k`` is the one a ``set`` keeps at its position (the last of its repeats)."""
    ids = P.iota(np.int64, P.shape_of(idx), 0)
    owner = scatter(P.broadcast_in_dim(np.array(-1, np.int64), (n,), ()), idx, ids, "set")
    return P.eq(P.take(owner, idx, 0), ids)


def _mul_others(x, idx, upd):
    """For each update, the product of the OTHER updates at its position, exact with zeros and
    with a first derivative that is exact too (so ``mul``'s rules nest to second order).

    It is (product of the other nonzero updates) * (product of the other zero updates): the first
    divides the product of the nonzero ones by the update itself (never by zero); the second is the
    zeros' product where the update is not zero, and for a zero update ``[no other zero] +
    [one other zero] * (that zero's value)`` (its value and first derivative)."""
    dt = P.dtype_of(x)
    shape = P.shape_of(upd)
    is_zero = P.eq(upd, P.zeros_like(upd))
    ones_k = P.ones_like(upd)
    zeros_k = P.zeros_like(upd)

    def at_position(total):  # a per-position total, read back at each update
        return P.take(total, idx, 0)

    nonzero_prod = at_position(scatter(P.ones_like(x), idx, P.select(is_zero, ones_k, upd), "mul"))
    zeros_prod = at_position(scatter(P.ones_like(x), idx, P.select(is_zero, upd, ones_k), "mul"))
    zero_count = at_position(P.scatter_add(P.zeros_like(x), idx, P.convert_element_type(is_zero, dt), 0))
    zero_sum = at_position(P.scatter_add(P.zeros_like(x), idx, P.select(is_zero, upd, zeros_k), 0))
    other_nonzero = P.select(is_zero, nonzero_prod, P.div(nonzero_prod, P.select(is_zero, ones_k, upd)))
    count_is = lambda c: P.convert_element_type(P.eq(zero_count, P.broadcast_in_dim(
        np.array(c, dt), shape, ())), dt)
    other_zeros = P.select(is_zero, P.add(count_is(1), P.mul(count_is(2), P.sub(zero_sum, upd))), zeros_prod)
    return P.mul(other_nonzero, other_zeros)


def _extremum_shares(ans, x, idx, upd):
    """(operand hits / count, update hits / count at their position): JAX's equal split of an
    extremum's derivative between the operand and the updates that attain it."""
    dt = P.dtype_of(x)
    hit_x = P.convert_element_type(P.eq(x, ans), dt)
    hit_u = P.convert_element_type(P.eq(upd, P.take(ans, idx, 0)), dt)
    count = P.add(hit_x, P.scatter_add(P.zeros_like(x), idx, hit_u, 0))
    return hit_x, hit_u, count


def _x_rule(t, ans, x, idx, upd, *, op):
    """The derivative with respect to ``x``, forward and reverse alike: each element of ``x`` is kept,
    scaled or overwritten by the scatter independently of the others (a diagonal linear map)."""
    if op == "set":
        return scatter(t, idx, P.zeros_like(upd), "set")
    if op == "mul":
        return scatter(t, idx, upd, "mul")
    hit_x, _, count = _extremum_shares(ans, x, idx, upd)
    return P.div(P.mul(t, hit_x), count)


def _jvp_upd(t, ans, x, idx, upd, *, op):
    if op == "set":
        return scatter(P.zeros_like(x), idx, P.mul(t, P.convert_element_type(_winners(idx, P.shape_of(x)[0]),
                                                                               P.dtype_of(t))), "set")
    if op == "mul":
        return P.scatter_add(P.zeros_like(x), idx, P.mul(P.mul(t, P.take(x, idx, 0)), _mul_others(x, idx, upd)), 0)
    _, hit_u, count = _extremum_shares(ans, x, idx, upd)
    return P.div(P.scatter_add(P.zeros_like(x), idx, P.mul(t, hit_u), 0), count)


def _vjp_upd(g, ans, x, idx, upd, *, op):
    if op == "set":
        won = P.convert_element_type(_winners(idx, P.shape_of(x)[0]), P.dtype_of(g))
        return P.mul(P.take(g, idx, 0), won)
    if op == "mul":
        return P.mul(P.take(P.mul(g, x), idx, 0), _mul_others(x, idx, upd))
    _, hit_u, count = _extremum_shares(ans, x, idx, upd)
    return P.mul(P.take(P.div(g, count), idx, 0), hit_u)


def _scatter_batch(vals, dims, *, op):
    """Fold the batch into the flat operand: member ``b``'s indices move by ``b * N``."""
    b = next(P.shape_of(v)[d] for v, d in zip(vals, dims) if d is not None)
    x, idx, upd = (P.ensure_batched(v, d, b) for v, d in zip(vals, dims))
    n, k = P.shape_of(x)[1], P.shape_of(idx)[1]
    offsets = P.broadcast_in_dim(P.mul(P.iota(np.int64, (b,), 0), np.array(n, np.int64)), (b, k), (0,))
    out = scatter(P.reshape(x, (b * n,)), P.reshape(P.add(idx, offsets), (b * k,)), P.reshape(upd, (b * k,)), op)
    return P.reshape(out, (b, n)), 0


scatter_p.impl = _scatter_impl
scatter_p.abstract_eval = _scatter_abstract
scatter_p.jvp = [_x_rule, None, _jvp_upd]
scatter_p.vjp = [_x_rule, None, _vjp_upd]
scatter_p.batch = _scatter_batch
