"""The primitives of user-defined derivative rules and rematerialization: ``custom_jvp_call``,
``custom_vjp_call`` and ``checkpoint``.  Each runs its sub-program (``call`` / ``jaxpr``) on its
operands; ``functrace.transforms.custom``'s ``custom_jvp``, ``custom_vjp`` and ``checkpoint`` bind them.
The OpenCL backend inlines the sub-program (``inline_body``), so it becomes kernels.

* ``custom_jvp_call(*consts, *nondiff, *args, call, jvp, num_consts, num_nondiff)``: forward
  mode calls the user rule ``jvp``; reverse mode transposes it (the rule is linear in the
  tangents, so the vjp of ``t -> jvp(primals, t)`` is its transpose).
* ``custom_vjp_call(..., call, fwd, bwd, num_consts, num_nondiff)``: reverse mode calls the
  user ``fwd``/``bwd``; forward mode is an error (as in JAX).
* ``checkpoint(*args, jaxpr, policy)``: reverse mode saves only what ``policy`` allows and
  recomputes the rest in the backward pass, which is one opaque sub-program so CSE cannot undo
  the remat.

The values the function closes over (``consts``) and the tracers among its static arguments
(``nondiff``) are operands, so every transformation sees them: under ``vmap`` the rules get
them per example.  A derivative flowing into them is an error (the user rules only see the
differentiable arguments).  The user rules run when a transformation asks for them, possibly
after an enclosing ``vmap`` has finished: a rule closing over a value that vmap batches is
reported as an error (pass it as an argument instead).
"""
from __future__ import annotations

from typing import Callable, Sequence

from .. import tree_util
from ..core import ClosedJaxpr, Tracer, eval_jaxpr, get_aval, is_float_dtype
from ..core.errors import UnexpectedTracerError
from ..transforms.autodiff import float_mask, jvp_of_closed, vjp_flat
from ..transforms.batching import vmap
from ..transforms.optimize import dce, partial_eval, prune_inputs, unique_outputs
from ..transforms.subprograms import avals_of, run_subprogram, split3, stage_subprogram, zeros_for_none
from . import basic as P
from .basic import new_primitive, shape_of


def _check_no_derivative(flows: Sequence[bool], num_consts: int, num_nondiff: int, kind: str, fname: str):
    """Custom rules only see their explicit differentiable arguments: a derivative flowing into
    a closed-over value or a nondiff argument cannot be handled, so it is an error."""
    if any(flows[:num_consts]):
        raise TypeError(f"{kind} function `{fname}` closes over a value that is being differentiated; "
                        "pass it as an explicit argument instead so the custom rule can see it.")
    if any(flows[num_consts:num_consts + num_nondiff]):
        raise TypeError(f"{kind} function `{fname}`: an argument in nondiff_argnums depends on a value being "
                        "differentiated; make it a regular (differentiable) argument instead.")


def _force_batched(vals, dims):
    """Move every batch axis to 0, broadcasting unbatched values (custom rules see whole batches)."""
    size = next(shape_of(v)[d] for v, d in zip(vals, dims) if d is not None)
    out = [P.moveaxis(v, d, 0) if d is not None else
           P.broadcast_in_dim(v, (size,) + shape_of(v), tuple(range(1, len(shape_of(v)) + 1)))
           for v, d in zip(vals, dims)]
    return out, size


def _batch_call(call: ClosedJaxpr, vals: list) -> ClosedJaxpr:
    """The primal program vmapped over axis 0 of every operand."""
    return stage_subprogram(vmap(lambda *a: eval_jaxpr(call.jaxpr, call.consts, *a), in_axes=0), avals_of(vals))


def _run_batched_rule(f: Callable, args: tuple, what: str, fname: str):
    """Run a user rule vmapped by a batching rule.

    The enclosing transformation runs the rule when it needs it, possibly after the ``vmap``
    that batched the function has finished, and that vmap's tracers cannot take part: a rule
    closing over a value batched by it would leak or compute a wrong result.  Report that
    clearly instead (values the rule needs must be arguments: they are batched with it)."""
    msg = (f"the {what} of `{fname}` closes over a value batched by an enclosing vmap; pass such values "
           "as arguments of the custom function (regular arguments or nondiff_argnums) instead.")
    try:
        out = f(*args)
    except UnexpectedTracerError as e:
        raise UnexpectedTracerError(f"{msg} ({e})") from None
    top = max((x._trace.level for x in tree_util.tree_leaves(args) if isinstance(x, Tracer)), default=-1)
    if any(isinstance(o, Tracer) and o._trace.level > top for o in tree_util.tree_leaves(out)):
        raise UnexpectedTracerError(msg)
    return out


# --------------------------------------------------------------------------- custom_jvp_call

custom_jvp_call_p = new_primitive("custom_jvp_call")
custom_jvp_call_p.multiple_results = True
custom_jvp_call_p.impl = lambda *args, call, **_: run_subprogram(call, args)
custom_jvp_call_p.inline_body = "call"
custom_jvp_call_p.abstract_eval = lambda *avals, call, **_: call.out_avals


def _custom_jvp_jvp(primals, tangents, *, call, jvp, num_consts, num_nondiff):
    _check_no_derivative([t is not None for t in tangents], num_consts, num_nondiff, "custom_jvp", jvp.fname)
    _, nondiff, args = split3(primals, num_consts, num_nondiff)
    tan = zeros_for_none(tangents[num_consts + num_nondiff:], args)
    return jvp(nondiff, args, tan)


def _custom_jvp_vjp(primals, needs_ct, *, call, jvp, num_consts, num_nondiff):
    _check_no_derivative(needs_ct, num_consts, num_nondiff, "custom_jvp", jvp.fname)
    _, nondiff, args = split3(primals, num_consts, num_nondiff)
    outs = custom_jvp_call_p.bind(*primals, call=call, jvp=jvp, num_consts=num_consts, num_nondiff=num_nondiff)
    diff = [n and is_float_dtype(get_aval(a).dtype) for n, a in zip(needs_ct[num_consts + num_nondiff:], args)]

    def backward(cts):
        # the user rule is linear in the tangents: its vjp in t is the transpose we need
        zero_t = [P.zeros_like(a) for a in args]
        _, pull = vjp_flat(lambda *ts: jvp(nondiff, args, list(ts))[1], zero_t, diff)
        res = iter(pull(cts))
        return [None] * (num_consts + num_nondiff) + [next(res) if d else None for d in diff]

    return outs, backward


def _custom_jvp_batch(vals, dims, *, call, jvp, num_consts, num_nondiff):
    vals, size = _force_batched(vals, dims)
    f = vmap(lambda nd, p, t: tuple(jvp(list(nd), list(p), list(t))), axis_size=size)

    def batched_jvp(nondiff, primals, tangents):
        outs, t_outs = _run_batched_rule(f, (tuple(nondiff), tuple(primals), tuple(tangents)),
                                         "custom_jvp rule", jvp.fname)
        return list(outs), list(t_outs)

    batched_jvp.fname = jvp.fname
    outs = custom_jvp_call_p.bind(*vals, call=_batch_call(call, vals), jvp=batched_jvp, num_consts=num_consts,
                                  num_nondiff=num_nondiff)
    return outs, [0] * len(outs)


custom_jvp_call_p.jvp_rule = _custom_jvp_jvp
custom_jvp_call_p.vjp_rule = _custom_jvp_vjp
custom_jvp_call_p.batch = _custom_jvp_batch


# --------------------------------------------------------------------------- custom_vjp_call

custom_vjp_call_p = new_primitive("custom_vjp_call")
custom_vjp_call_p.multiple_results = True
custom_vjp_call_p.impl = lambda *args, call, **_: run_subprogram(call, args)
custom_vjp_call_p.inline_body = "call"
custom_vjp_call_p.abstract_eval = lambda *avals, call, **_: call.out_avals


def _custom_vjp_jvp(primals, tangents, *, call, fwd, bwd, num_consts, num_nondiff):
    raise TypeError(f"can't apply forward-mode autodiff (jvp) to a custom_vjp function "
                    f"(`{fwd.fname}`); define it with custom_jvp to support jvp / jacfwd / hessian.")


def _custom_vjp_vjp(primals, needs_ct, *, call, fwd, bwd, num_consts, num_nondiff):
    _check_no_derivative(needs_ct, num_consts, num_nondiff, "custom_vjp", fwd.fname)
    _, nondiff, args = split3(primals, num_consts, num_nondiff)
    outs, residuals = fwd(nondiff, args)

    def backward(cts):
        return [None] * (num_consts + num_nondiff) + list(bwd(nondiff, residuals, zeros_for_none(cts, outs)))

    return outs, backward


def _custom_vjp_batch(vals, dims, *, call, fwd, bwd, num_consts, num_nondiff):
    vals, size = _force_batched(vals, dims)
    f_fwd = vmap(lambda nd, a: fwd(list(nd), list(a)), axis_size=size)
    f_bwd = vmap(lambda nd, r, c: tuple(bwd(list(nd), r, list(c))), axis_size=size)

    def batched_fwd(nondiff, args):
        return _run_batched_rule(f_fwd, (tuple(nondiff), tuple(args)), "custom_vjp fwd", fwd.fname)

    def batched_bwd(nondiff, residuals, cts):
        return _run_batched_rule(f_bwd, (tuple(nondiff), residuals, tuple(cts)), "custom_vjp bwd", fwd.fname)

    batched_fwd.fname = fwd.fname
    outs = custom_vjp_call_p.bind(*vals, call=_batch_call(call, vals), fwd=batched_fwd, bwd=batched_bwd,
                                  num_consts=num_consts, num_nondiff=num_nondiff)
    return outs, [0] * len(outs)


custom_vjp_call_p.jvp_rule = _custom_vjp_jvp
custom_vjp_call_p.vjp_rule = _custom_vjp_vjp
custom_vjp_call_p.batch = _custom_vjp_batch


# --------------------------------------------------------------------------- checkpoint

checkpoint_p = new_primitive("checkpoint")
checkpoint_p.multiple_results = True
checkpoint_p.impl = lambda *args, jaxpr, policy: run_subprogram(jaxpr, args)
checkpoint_p.inline_body = "jaxpr"
checkpoint_p.abstract_eval = lambda *avals, jaxpr, policy: jaxpr.out_avals


def _checkpoint_jvp(primals, tangents, *, jaxpr, policy):
    fl = float_mask(avals_of(primals))
    t_in = [t for t, f in zip(zeros_for_none(tangents, primals), fl) if f]
    outs = checkpoint_p.bind(*primals, *t_in, jaxpr=dce(jvp_of_closed(jaxpr)), policy=policy)
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

    comb = stage_subprogram(combined, avals_of(primals) + [a for a, f in zip(jaxpr.out_avals, out_fl) if f])
    known, unknown, _ = partial_eval(comb, [False] * n_in + [True] * sum(out_fl), policy)
    n_out = len(jaxpr.out_avals)
    # a residual that is also an output (exp's result, which its derivative reuses) is returned once
    known, source = unique_outputs(known)
    returned = checkpoint_p.bind(*primals, jaxpr=known, policy=policy)
    fwd_outs = [returned[i] for i in source]
    outs, residuals = fwd_outs[:n_out], fwd_outs[n_out:]

    # the backward call takes only the primals and residuals it reads: the others would count
    # (and be kept) as saved for the backward phase
    unknown, reads = prune_inputs(unknown)

    def backward(cts):
        ct_in = [c for c, f in zip(zeros_for_none(cts, outs), out_fl) if f]
        args = [a for a, r in zip([*primals, *residuals, *ct_in], reads) if r]
        res = iter(checkpoint_p.bind(*args, jaxpr=unknown, policy=policy))
        return [next(res) if d else None for d in diff]

    return outs, backward


def _checkpoint_batch(vals, dims, *, jaxpr, policy):
    size = next(shape_of(v)[d] for v, d in zip(vals, dims) if d is not None)
    moved = [P.moveaxis(v, d, 0) if d is not None else v for v, d in zip(vals, dims)]
    axes = tuple(0 if d is not None else None for d in dims)
    new = stage_subprogram(vmap(lambda *a: eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *a), in_axes=axes, axis_size=size),
                 avals_of(moved))
    outs = checkpoint_p.bind(*moved, jaxpr=new, policy=policy)
    return outs, [0] * len(outs)


checkpoint_p.jvp_rule = _checkpoint_jvp
checkpoint_p.vjp_rule = _checkpoint_vjp
checkpoint_p.batch = _checkpoint_batch
