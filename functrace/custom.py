"""User-defined derivative rules (``custom_jvp``, ``custom_vjp``) and rematerialization
(``checkpoint``), each a primitive holding the traced function as a sub-program.

* ``custom_jvp``: forward mode calls the user rule; reverse mode transposes it (the rule
  is linear in the tangents, so the vjp of ``t -> jvp(primals, t)`` is its transpose).
* ``custom_vjp``: reverse mode calls the user ``fwd``/``bwd``; forward mode is an error
  (as in JAX).
* ``checkpoint``: reverse mode saves only what ``policy`` allows and recomputes the rest
  in the backward pass, which is one opaque sub-program so CSE cannot undo the remat.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import numpy as np

from . import primitives as P
from . import tree_util
from .autodiff import float_mask, jvp_of_closed, vjp_flat, jvp_flat
from .batching import vmap
from .core import ClosedJaxpr, Jaxpr, Tracer, eval_jaxpr, get_aval, is_float_dtype
from .lax import _run, _zeros_if_none, _to_array, _avals
from .optimize import partial_eval
from .primitives import new_primitive, shape_of
from .staging import trace_to_jaxpr


def _fname(f) -> str:
    return getattr(f, "__qualname__", None) or getattr(f, "__name__", repr(f))


def _trace_hoisted(flat_fun: Callable, avals: list) -> tuple[ClosedJaxpr, list]:
    """Trace ``flat_fun``; its closed-over values become leading inputs (returned as values)."""
    closed = trace_to_jaxpr(flat_fun, avals)
    j = closed.jaxpr
    return ClosedJaxpr(Jaxpr([], j.const_vars + j.in_vars, j.eqns, j.outs), []), list(closed.consts)


def _closed_over_error(kind: str, fname: str):
    return TypeError(f"{kind} function `{fname}` closes over a value that is being differentiated; "
                     "pass it as an explicit argument instead so the custom rule can see it.")


def _split_args(args, nondiff_argnums):
    nondiff = tuple(args[i] for i in nondiff_argnums)
    diff = tuple(a for i, a in enumerate(args) if i not in nondiff_argnums)
    return nondiff, diff


def _merge_args(nondiff, diff, nondiff_argnums, n):
    it_nd, it_d = iter(nondiff), iter(diff)
    return tuple(next(it_nd) if i in nondiff_argnums else next(it_d) for i in range(n))


def _force_batched(vals, dims):
    """Move every batch axis to 0, broadcasting unbatched values (custom rules see whole batches)."""
    size = next(shape_of(v)[d] for v, d in zip(vals, dims) if d is not None)
    out = [P.moveaxis(v, d, 0) if d is not None else
           P.broadcast_in_dim(v, (size,) + shape_of(v), tuple(range(1, len(shape_of(v)) + 1)))
           for v, d in zip(vals, dims)]
    return out, size


# --------------------------------------------------------------------------- custom_jvp

custom_jvp_call_p = new_primitive("custom_jvp_call")
custom_jvp_call_p.multiple_results = True
custom_jvp_call_p.impl = lambda *args, call, jvp, num_consts: _run(call, args)
custom_jvp_call_p.abstract_eval = lambda *avals, call, jvp, num_consts: call.out_avals


def _custom_jvp_jvp(primals, tangents, *, call, jvp, num_consts):
    if any(t is not None for t in tangents[:num_consts]):
        raise _closed_over_error("custom_jvp", getattr(jvp, "fname", "?"))
    args = primals[num_consts:]
    tan = _zeros_if_none(tangents[num_consts:], args)
    outs, t_outs = jvp(args, tan)
    return outs, t_outs


def _custom_jvp_vjp(primals, needs_ct, *, call, jvp, num_consts):
    if any(needs_ct[:num_consts]):
        raise _closed_over_error("custom_jvp", getattr(jvp, "fname", "?"))
    args = primals[num_consts:]
    outs = custom_jvp_call_p.bind(*primals, call=call, jvp=jvp, num_consts=num_consts)
    diff = [n and is_float_dtype(get_aval(a).dtype) for n, a in zip(needs_ct[num_consts:], args)]

    def backward(cts):
        # the user rule is linear in the tangents: its vjp in t is the transpose we need
        zero_t = [P.zeros_like(a) for a in args]
        _, pull = vjp_flat(lambda *ts: jvp(args, list(ts))[1], zero_t, diff)
        res = iter(pull(cts))
        return [None] * num_consts + [next(res) if d else None for d in diff]

    return outs, backward


def _custom_jvp_batch(vals, dims, *, call, jvp, num_consts):
    vals, size = _force_batched(vals, dims)
    axes = (0,) * len(vals)
    new_call = trace_to_jaxpr(vmap(lambda *a: eval_jaxpr(call.jaxpr, call.consts, *a), in_axes=axes), _avals(vals))
    def batched_jvp(primals, tangents):
        f = vmap(lambda p, t: tuple(jvp(list(p), list(t))), in_axes=(0, 0), axis_size=size)
        outs, t_outs = f(tuple(primals), tuple(_zeros_if_none(tangents, primals)))
        return list(outs), list(t_outs)

    batched_jvp.fname = getattr(jvp, "fname", "?")
    outs = custom_jvp_call_p.bind(*vals, call=new_call, jvp=batched_jvp, num_consts=num_consts)
    return outs, [0] * len(outs)


custom_jvp_call_p.jvp_rule = _custom_jvp_jvp
custom_jvp_call_p.vjp_rule = _custom_jvp_vjp
custom_jvp_call_p.batch = _custom_jvp_batch


class custom_jvp:
    """A function with a user-defined JVP rule, as ``jax.custom_jvp``::

        @ft.custom_jvp
        def f(x): ...
        @f.defjvp
        def f_jvp(primals, tangents): return f(*primals), tangent_out
    """

    def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()):
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.jvp: Callable | None = None
        functools.update_wrapper(self, fun, updated=())

    def defjvp(self, jvp: Callable) -> Callable:
        """``jvp(*nondiff_args, primals, tangents) -> (primal_out, tangent_out)``."""
        self.jvp = jvp
        return jvp

    def defjvps(self, *tangent_fns: Callable | None) -> None:
        """One function per argument: ``fn(t, ans, *primals)`` gives its tangent contribution."""
        def jvp(primals, tangents):
            ans = self.fun(*primals)
            out = None
            for fn, t in zip(tangent_fns, tangents):
                if fn is not None:
                    c = fn(t, ans, *primals)
                    out = c if out is None else tree_util.tree_map(lambda a, b: a + b, out, c)
            return ans, out if out is not None else tree_util.tree_map(P.zeros_like, ans)
        self.jvp = jvp

    def __call__(self, *args):
        fname = _fname(self.fun)
        if self.jvp is None:
            raise AttributeError(f"No JVP defined for custom_jvp function `{fname}`; use defjvp.")
        nondiff, diff = _split_args(args, self.nondiff_argnums)
        leaves, in_tree = tree_util.tree_flatten(diff)
        leaves = [_to_array(x) for x in leaves]
        out_tree_box = []

        def flat_fun(*xs):
            out = self.fun(*_merge_args(nondiff, tree_util.tree_unflatten(in_tree, xs), self.nondiff_argnums,
                                        len(args)))
            ol, ot = tree_util.tree_flatten(out)
            out_tree_box.append(ot)
            return ol

        call, consts = _trace_hoisted(flat_fun, _avals(leaves))
        out_tree = out_tree_box[0]
        user_jvp = self.jvp

        def flat_jvp(primals, tangents):
            p = tree_util.tree_unflatten(in_tree, primals)
            t = tree_util.tree_unflatten(in_tree, tangents)
            out, t_out = user_jvp(*nondiff, tuple(p), tuple(t))
            o_leaves, o_tree = tree_util.tree_flatten(out)
            t_leaves, t_tree = tree_util.tree_flatten(t_out)
            if o_tree != out_tree or t_tree != out_tree:
                raise TypeError(f"custom_jvp rule of `{fname}` must return (primal_out, tangent_out) with the "
                                f"function's output structure {out_tree}; got {o_tree} and {t_tree}")
            return o_leaves, t_leaves

        flat_jvp.fname = fname
        outs = custom_jvp_call_p.bind(*consts, *leaves, call=call, jvp=flat_jvp, num_consts=len(consts))
        return tree_util.tree_unflatten(out_tree, outs)


# --------------------------------------------------------------------------- custom_vjp

custom_vjp_call_p = new_primitive("custom_vjp_call")
custom_vjp_call_p.multiple_results = True
custom_vjp_call_p.impl = lambda *args, call, fwd, bwd, num_consts: _run(call, args)
custom_vjp_call_p.abstract_eval = lambda *avals, call, fwd, bwd, num_consts: call.out_avals


def _custom_vjp_jvp(primals, tangents, *, call, fwd, bwd, num_consts):
    raise TypeError(f"can't apply forward-mode autodiff (jvp) to a custom_vjp function "
                    f"(`{getattr(fwd, 'fname', '?')}`); define it with custom_jvp to support jvp / jacfwd / "
                    "hessian.")


def _custom_vjp_vjp(primals, needs_ct, *, call, fwd, bwd, num_consts):
    if any(needs_ct[:num_consts]):
        raise _closed_over_error("custom_vjp", getattr(fwd, "fname", "?"))
    args = primals[num_consts:]
    outs, residuals = fwd(args)

    def backward(cts):
        return [None] * num_consts + list(bwd(residuals, _zeros_if_none(cts, outs)))

    return outs, backward


def _custom_vjp_batch(vals, dims, *, call, fwd, bwd, num_consts):
    vals, size = _force_batched(vals, dims)
    axes = (0,) * len(vals)
    new_call = trace_to_jaxpr(vmap(lambda *a: eval_jaxpr(call.jaxpr, call.consts, *a), in_axes=axes), _avals(vals))

    def batched_fwd(args):
        return vmap(lambda a: fwd(list(a)), axis_size=size)(tuple(args))

    def batched_bwd(residuals, cts):
        return vmap(lambda r, c: tuple(bwd(r, list(c))), axis_size=size)(residuals, tuple(cts))

    batched_fwd.fname = getattr(fwd, "fname", "?")
    outs = custom_vjp_call_p.bind(*vals, call=new_call, fwd=batched_fwd, bwd=batched_bwd, num_consts=num_consts)
    return outs, [0] * len(outs)


custom_vjp_call_p.jvp_rule = _custom_vjp_jvp
custom_vjp_call_p.vjp_rule = _custom_vjp_vjp
custom_vjp_call_p.batch = _custom_vjp_batch


class custom_vjp:
    """A function with user-defined reverse mode, as ``jax.custom_vjp``::

        @ft.custom_vjp
        def f(x): ...
        def f_fwd(x): return f(x), residuals
        def f_bwd(residuals, g): return (cotangent_x,)
        f.defvjp(f_fwd, f_bwd)
    """

    def __init__(self, fun: Callable, nondiff_argnums: Sequence[int] = ()):
        self.fun = fun
        self.nondiff_argnums = tuple(nondiff_argnums)
        self.fwd: Callable | None = None
        self.bwd: Callable | None = None
        functools.update_wrapper(self, fun, updated=())

    def defvjp(self, fwd: Callable, bwd: Callable) -> None:
        """``fwd(*args) -> (out, residuals)``; ``bwd(*nondiff_args, residuals, g) -> tuple of
        cotangents, one per differentiable argument``."""
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args):
        fname = _fname(self.fun)
        if self.fwd is None:
            raise AttributeError(f"No VJP defined for custom_vjp function `{fname}`; use defvjp.")
        nondiff, diff = _split_args(args, self.nondiff_argnums)
        leaves, in_tree = tree_util.tree_flatten(diff)
        leaves = [_to_array(x) for x in leaves]
        out_tree_box = []
        nd_idx, n = self.nondiff_argnums, len(args)

        def flat_fun(*xs):
            out = self.fun(*_merge_args(nondiff, tree_util.tree_unflatten(in_tree, xs), nd_idx, n))
            ol, ot = tree_util.tree_flatten(out)
            out_tree_box.append(ot)
            return ol

        call, consts = _trace_hoisted(flat_fun, _avals(leaves))
        out_tree = out_tree_box[0]
        user_fwd, user_bwd = self.fwd, self.bwd

        def flat_fwd(primals):
            res = user_fwd(*_merge_args(nondiff, tree_util.tree_unflatten(in_tree, primals), nd_idx, n))
            if not (isinstance(res, tuple) and len(res) == 2):
                raise TypeError(f"custom_vjp fwd of `{fname}` must return a pair (output, residuals)")
            out, residuals = res
            o_leaves, o_tree = tree_util.tree_flatten(out)
            if o_tree != out_tree:
                raise TypeError(f"custom_vjp fwd of `{fname}` returned structure {o_tree}, expected {out_tree}")
            return o_leaves, residuals

        def flat_bwd(residuals, cts):
            ct = user_bwd(*nondiff, residuals, tree_util.tree_unflatten(out_tree, cts))
            if not isinstance(ct, tuple) or len(ct) != len(diff):
                raise TypeError(f"custom_vjp bwd of `{fname}` must return a tuple with one cotangent per "
                                f"differentiable argument ({len(diff)}), got {type(ct).__name__}"
                                f"{' of length ' + str(len(ct)) if isinstance(ct, tuple) else ''}")
            c_leaves, c_tree = tree_util.tree_flatten(ct)
            if c_tree != in_tree:
                raise TypeError(f"custom_vjp bwd of `{fname}` returned structure {c_tree}, expected {in_tree}")
            return c_leaves

        flat_fwd.fname = fname
        outs = custom_vjp_call_p.bind(*consts, *leaves, call=call, fwd=flat_fwd, bwd=flat_bwd,
                                      num_consts=len(consts))
        return tree_util.tree_unflatten(out_tree, outs)


# --------------------------------------------------------------------------- checkpoint (remat)


class checkpoint_policies:
    """Which intermediate values of a checkpointed function reverse mode may keep."""

    @staticmethod
    def nothing_saveable(eqn) -> bool:
        return False

    @staticmethod
    def everything_saveable(eqn) -> bool:
        return True

    @staticmethod
    def dots_saveable(eqn) -> bool:
        return eqn.primitive.name == "dot_general"


checkpoint_p = new_primitive("checkpoint")
checkpoint_p.multiple_results = True
checkpoint_p.impl = lambda *args, jaxpr, policy: _run(jaxpr, args)
checkpoint_p.abstract_eval = lambda *avals, jaxpr, policy: jaxpr.out_avals


def _checkpoint_jvp(primals, tangents, *, jaxpr, policy):
    fl = float_mask(_avals(primals))
    t_in = [t for t, f in zip(_zeros_if_none(tangents, primals), fl) if f]
    outs = checkpoint_p.bind(*primals, *t_in, jaxpr=jvp_of_closed(jaxpr), policy=policy)
    n = len(jaxpr.out_avals)
    it = iter(outs[n:])
    return outs[:n], [next(it) if f else None for f in float_mask(jaxpr.out_avals)]


def _checkpoint_vjp(primals, needs_ct, *, jaxpr, policy):
    diff = [n and is_float_dtype(get_aval(p).dtype) for n, p in zip(needs_ct, primals)]
    out_fl = float_mask(jaxpr.out_avals)
    n_in = len(primals)

    def combined(*args):  # [primals, cts] -> [outs, input cts]
        outs, pull = vjp_flat(lambda *a: eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *a), args[:n_in], diff)
        it = iter(args[n_in:])
        cts = pull([next(it) if f else None for f in out_fl])
        return list(outs) + [P.zeros_like(p) if c is None else c
                             for c, p in zip(cts, [p for p, d in zip(args[:n_in], diff) if d])]

    comb = trace_to_jaxpr(combined, _avals(primals) + [a for a, f in zip(jaxpr.out_avals, out_fl) if f])
    known, unknown, _ = partial_eval(comb, [False] * n_in + [True] * sum(out_fl), policy)
    n_out = len(jaxpr.out_avals)
    fwd_outs = checkpoint_p.bind(*primals, jaxpr=known, policy=policy)
    outs, residuals = fwd_outs[:n_out], fwd_outs[n_out:]

    def backward(cts):
        ct_in = [c for c, f in zip(_zeros_if_none(cts, outs), out_fl) if f]
        res = iter(checkpoint_p.bind(*primals, *residuals, *ct_in, jaxpr=unknown, policy=policy))
        return [next(res) if d else None for d in diff]

    return outs, backward


def _checkpoint_batch(vals, dims, *, jaxpr, policy):
    size = next(shape_of(v)[d] for v, d in zip(vals, dims) if d is not None)
    moved = [P.moveaxis(v, d, 0) if d is not None else v for v, d in zip(vals, dims)]
    axes = tuple(0 if d is not None else None for d in dims)
    new = trace_to_jaxpr(vmap(lambda *a: eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *a), in_axes=axes, axis_size=size),
                         _avals(moved))
    outs = checkpoint_p.bind(*moved, jaxpr=new, policy=policy)
    return outs, [0] * len(outs)


checkpoint_p.jvp_rule = _checkpoint_jvp
checkpoint_p.vjp_rule = _checkpoint_vjp
checkpoint_p.batch = _checkpoint_batch


def checkpoint(fun: Callable | None = None, *, policy: Callable | None = None,
               static_argnums: Sequence[int] = ()) -> Callable:
    """Rematerialize ``fun`` in reverse mode: its intermediates are recomputed in the backward
    pass rather than saved, except those ``policy(eqn)`` allows (see ``checkpoint_policies``)."""
    if fun is None:
        return lambda f: checkpoint(f, policy=policy, static_argnums=static_argnums)
    policy = policy or checkpoint_policies.nothing_saveable
    static = tuple(static_argnums)

    @functools.wraps(fun, updated=())
    def remat_fun(*args):
        nondiff, diff = _split_args(args, static)
        leaves, in_tree = tree_util.tree_flatten(diff)
        leaves = [_to_array(x) for x in leaves]
        out_tree_box = []

        def flat_fun(*xs):
            out = fun(*_merge_args(nondiff, tree_util.tree_unflatten(in_tree, xs), static, len(args)))
            ol, ot = tree_util.tree_flatten(out)
            out_tree_box.append(ot)
            return ol

        closed, consts = _trace_hoisted(flat_fun, _avals(leaves))
        outs = checkpoint_p.bind(*consts, *leaves, jaxpr=closed, policy=policy)
        return tree_util.tree_unflatten(out_tree_box[0], outs)

    return remat_fun


remat = checkpoint
