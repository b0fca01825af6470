"""User-defined derivative rules (``custom_jvp``, ``custom_vjp``) and rematerialization
(``checkpoint``): each traces the user's function into a sub-program and binds a primitive
holding it (``custom_jvp_call_p``, ``custom_vjp_call_p``, ``checkpoint_p``: declared, with their
rules, in ``primitives/custom_calls.py``).

* ``custom_jvp``: forward mode calls the user rule; reverse mode transposes it (the rule
  is linear in the tangents, so the vjp of ``t -> jvp(primals, t)`` is its transpose).
* ``custom_vjp``: reverse mode calls the user ``fwd``/``bwd``; forward mode is an error
  (as in JAX).
* ``checkpoint``: reverse mode saves only what ``policy`` allows and recomputes the rest
  in the backward pass, which is one opaque sub-program so CSE cannot undo the remat.

Values the function closes over, and tracers passed in ``nondiff_argnums``, are operands of
the primitive, so every transformation sees them (under ``vmap`` the rules get them per
example).  The user rules themselves run when a transformation asks for them, possibly
after an enclosing ``vmap`` has finished: a rule closing over a value that vmap batches is
reported as an error (pass it as an argument instead).  Rule outputs are checked against the
function's types (shape, dtype, structure), so a wrong rule fails loudly.
"""
from __future__ import annotations

import functools
from typing import Callable, Sequence

import numpy as np

from .. import primitives as P
from .. import tree_util
from ..core import Tracer, get_aval, is_float_dtype
from ..core.array import Array
from ..core.errors import function_name, user_frame_description
from ..primitives.custom_calls import checkpoint_p, custom_jvp_call_p, custom_vjp_call_p
from .subprograms import as_operand, avals_of, hoist_consts, stage_subprogram


class _Traced:
    """A user function traced over its arguments (shared by ``custom_jvp``, ``custom_vjp`` and
    ``checkpoint``).

    The primitive's operands are ``[*consts, *nondiff, *leaves]``:

    * ``consts``: the values the function closes over, hoisted so that an enclosing
      transformation sees them (``program`` takes them as its leading inputs);
    * ``nondiff``: the tracers among the static (``nondiff_argnums`` / ``static_argnums``)
      arguments.  They are operands too, so that e.g. a ``vmap`` hands the rules per-example
      values; the other static values stay Python objects, usable in Python control flow;
    * ``leaves``: the flattened differentiable arguments (structure ``in_tree``)."""

    def __init__(self, fun: Callable, args: tuple, static_argnums: tuple):
        self.static_argnums, self.nargs = static_argnums, len(args)
        static, diff = _split_args(args, static_argnums)
        self.static_leaves, self.static_tree = tree_util.tree_flatten(static)
        self.nondiff_pos = [i for i, x in enumerate(self.static_leaves) if isinstance(x, Tracer)]
        self.nondiff = [self.static_leaves[i] for i in self.nondiff_pos]
        leaves, self.in_tree = tree_util.tree_flatten(diff)
        self.leaves = [as_operand(x) for x in leaves]
        self.in_avals = avals_of(self.leaves)
        self.arg_trees = [tree_util.tree_structure(a) for a in diff]
        n_nd = len(self.nondiff)
        out_tree_box = []

        def flat_fun(*xs):
            out = fun(*self.merge(xs[:n_nd], xs[n_nd:]))
            out_leaves, out_tree = tree_util.tree_flatten(out)
            out_tree_box.append(out_tree)
            return out_leaves

        self.program, self.consts = hoist_consts(stage_subprogram(flat_fun, avals_of(self.nondiff) + self.in_avals))
        self.out_tree = out_tree_box[0]

    def operands(self) -> list:
        return [*self.consts, *self.nondiff, *self.leaves]

    def statics(self, nondiff: Sequence) -> tuple:
        """The static arguments, with ``nondiff`` in place of their traced leaves."""
        leaves = list(self.static_leaves)
        for i, v in zip(self.nondiff_pos, nondiff):
            leaves[i] = v
        return tree_util.tree_unflatten(self.static_tree, leaves)

    def merge(self, nondiff: Sequence, leaves: Sequence) -> tuple:
        """All arguments, in the user's order, from the traced static values and the leaves."""
        diff = tree_util.tree_unflatten(self.in_tree, leaves)
        return _merge_args(self.statics(nondiff), diff, self.static_argnums, self.nargs)



def _type_name(x) -> str:
    """The type named in errors: functrace's arrays as Array (eager results are an ndarray
    subclass), numpy's as ndarray."""
    return "Array" if isinstance(x, Array) else "ndarray" if isinstance(x, np.ndarray) else type(x).__name__

def _match_types(vals: list, ref_avals: list, what: str, fname: str) -> list:
    """Check user-rule outputs against the abstract values they must have: equal shapes and,
    for float references, equal dtypes (a weakly typed Python scalar is cast).  A ``None`` for
    a float reference is a zero."""
    out = []
    for k, (v, ra) in enumerate(zip(vals, ref_avals)):
        if v is None:
            out.append(np.zeros(ra.shape, ra.dtype) if is_float_dtype(ra.dtype) else None)
            continue
        va = get_aval(v)
        if va.shape != ra.shape or (is_float_dtype(ra.dtype) and va.dtype != ra.dtype and not va.weak_type):
            raise TypeError(f"{what} of `{fname}`: leaf {k} has type {va.str_short()}, expected "
                            f"{ra.str_short()} {user_frame_description()}")
        out.append(P.convert_element_type(v, ra.dtype) if is_float_dtype(ra.dtype) and va.dtype != ra.dtype
                   else as_operand(v))
    return out


def _split_args(args, nondiff_argnums):
    nondiff = tuple(args[i] for i in nondiff_argnums)
    diff = tuple(a for i, a in enumerate(args) if i not in nondiff_argnums)
    return nondiff, diff


def _merge_args(nondiff, diff, nondiff_argnums, n):
    it_nd, it_d = iter(nondiff), iter(diff)
    return tuple(next(it_nd) if i in nondiff_argnums else next(it_d) for i in range(n))


# --------------------------------------------------------------------------- custom_jvp


class custom_jvp:
    """A function with a user-defined JVP rule, as ``jax.custom_jvp``::

        @ft.custom_jvp
        def f(x): ...
        @f.defjvp
        def f_jvp(primals, tangents): return f(*primals), tangent_out

    The rule must be linear in the tangents: reverse mode transposes it."""

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
        fname = function_name(self.fun)
        if self.jvp is None:
            raise AttributeError(f"No JVP defined for custom_jvp function `{fname}`; use defjvp.")
        tr = _Traced(self.fun, args, self.nondiff_argnums)
        out_avals, user_jvp = tr.program.out_avals, self.jvp

        def flat_jvp(nondiff, primals, tangents):
            p = tree_util.tree_unflatten(tr.in_tree, primals)
            t = tree_util.tree_unflatten(tr.in_tree, tangents)
            res = user_jvp(*tr.statics(nondiff), tuple(p), tuple(t))
            if not (isinstance(res, (tuple, list)) and len(res) == 2):
                raise TypeError(f"custom_jvp rule of `{fname}` must return a pair (primal_out, tangent_out); "
                                f"got {_type_name(res)}" + (f" of length {len(res)}" if isinstance(res, (tuple, list)) else ""))
            out, t_out = res
            o_leaves, o_tree = tree_util.tree_flatten(out)
            t_leaves, t_tree = tree_util.tree_flatten(t_out)
            if o_tree != tr.out_tree or t_tree != tr.out_tree:
                raise TypeError(f"custom_jvp rule of `{fname}` must return (primal_out, tangent_out) with the "
                                f"function's output structure {tr.out_tree}; got {o_tree} and {t_tree}")
            o_leaves = _match_types(o_leaves, out_avals, "custom_jvp rule primal output", fname)
            t_leaves = _match_types(t_leaves, out_avals, "custom_jvp rule tangent output", fname)
            return o_leaves, t_leaves

        flat_jvp.fname = fname
        outs = custom_jvp_call_p.bind(*tr.operands(), call=tr.program, jvp=flat_jvp, num_consts=len(tr.consts),
                                      num_nondiff=len(tr.nondiff))
        return tree_util.tree_unflatten(tr.out_tree, outs)


# --------------------------------------------------------------------------- custom_vjp


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
        cotangents, one per differentiable argument`` (``None`` for a zero cotangent)."""
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args):
        fname = function_name(self.fun)
        if self.fwd is None:
            raise AttributeError(f"No VJP defined for custom_vjp function `{fname}`; use defvjp.")
        tr = _Traced(self.fun, args, self.nondiff_argnums)
        user_fwd, user_bwd = self.fwd, self.bwd

        def flat_fwd(nondiff, primals):
            res = user_fwd(*tr.merge(nondiff, primals))
            if not (isinstance(res, tuple) and len(res) == 2):
                raise TypeError(f"custom_vjp fwd of `{fname}` must return a pair (output, residuals)")
            out, residuals = res
            o_leaves, o_tree = tree_util.tree_flatten(out)
            if o_tree != tr.out_tree:
                raise TypeError(f"custom_vjp fwd of `{fname}` returned structure {o_tree}, expected {tr.out_tree}")
            return o_leaves, residuals

        def flat_bwd(nondiff, residuals, cts):
            ct = user_bwd(*tr.statics(nondiff), residuals, tree_util.tree_unflatten(tr.out_tree, cts))
            n = len(tr.arg_trees)
            if not isinstance(ct, tuple) or len(ct) != n:
                raise TypeError(f"custom_vjp bwd of `{fname}` must return a tuple with one cotangent per "
                                f"differentiable argument ({n}), got {_type_name(ct)}"
                                f"{' of length ' + str(len(ct)) if isinstance(ct, tuple) else ''}")
            leaves = []
            for k, (c, tree) in enumerate(zip(ct, tr.arg_trees)):
                if c is None:  # a zero cotangent for the whole argument
                    leaves += [None] * tree.num_leaves
                    continue
                c_leaves, c_tree = tree_util.tree_flatten(c)
                if c_tree != tree:
                    raise TypeError(f"custom_vjp bwd of `{fname}`: the cotangent of argument {k} has structure "
                                    f"{c_tree}, expected {tree}")
                leaves += c_leaves
            return _match_types(leaves, tr.in_avals, "custom_vjp bwd cotangent", fname)

        flat_fwd.fname = fname
        outs = custom_vjp_call_p.bind(*tr.operands(), call=tr.program, fwd=flat_fwd, bwd=flat_bwd,
                                      num_consts=len(tr.consts), num_nondiff=len(tr.nondiff))
        return tree_util.tree_unflatten(tr.out_tree, outs)


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
        return eqn.primitive is P.dot_general_p


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
        tr = _Traced(fun, args, static)
        outs = checkpoint_p.bind(*tr.operands(), jaxpr=tr.program, policy=policy)
        return tree_util.tree_unflatten(tr.out_tree, outs)

    return remat_fun


remat = checkpoint
