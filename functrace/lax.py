"""Structured control flow: ``cond``/``switch``, ``while_loop``, ``fori_loop``, ``scan``.

Each is one primitive holding sub-programs (``ClosedJaxpr`` params).  User functions are
traced once with abstract inputs; values they close over become explicit operands, so an
enclosing transformation sees them.  Rules:

* jvp: the sub-programs are transformed IR-to-IR (``jvp_of_closed``) and the same
  primitive is bound on primals and tangents;
* vjp: ``scan`` saves the carry of every iteration in its forward pass and runs a reversed
  ``scan`` of the body's vjp (recomputing one body step at a time, so the IR is never
  unrolled); ``cond`` runs the vjp of the taken branch; ``while_loop`` has no reverse mode
  (its trip count is dynamic), as in JAX; ``fori_loop`` with static bounds is a ``scan``;
* batching: sub-programs are vmapped; a batched ``cond`` predicate becomes a select, a
  batched ``while_loop`` predicate runs until every member is done.

Sub-programs are made without dead equations (``stage_subprogram``), since the jit optimizer does
not enter them.  Types follow JAX: a ``cond`` predicate is a bool or an integer (nonzero is
true), a ``switch`` index is clamped, loop carries given as Python scalars are weakly typed
(``scan(f, 0.0, xs_float32)`` carries float32), and a ``fori_loop`` index has the bounds'
integer dtype, weakly typed for Python-int bounds.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import numpy as np

from . import numpy as fnp
from . import primitives as P
from . import tree_util
from .autodiff import float_mask, jvp_of_closed, vjp_of_closed
from .batching import vmap
from .collectives import (  # noqa: F401  (re-exported: ft.lax.psum, ...)
    all_gather,
    all_to_all,
    axis_index,
    axis_size,
    pmax,
    pmean,
    pmin,
    ppermute,
    psum,
    psum_scatter,
)
from .core import ClosedJaxpr, Jaxpr, ShapedArray, Tracer, Var, eval_jaxpr, get_aval, is_float_dtype
from .errors import ConcretizationError, function_name, user_frame_description
from .optimize import dce
from .primitives import new_primitive, shape_of
from .subprograms import (
    as_operand,
    avals_of,
    hoist_consts,
    run_subprogram,
    split3,
    stage_subprogram,
    zeros_for_none,
)

# --------------------------------------------------------------------------- helpers


def _trace_user_fn(fun: Callable, in_avals: list, in_tree):
    """Trace a user function of pytrees; closed-over values are hoisted to leading operands
    (so an enclosing transformation sees them as inputs of the primitive).

    Returns (ClosedJaxpr taking [*hoisted, *inputs], hoisted values, out_tree)."""
    out_tree_box = []

    def flat(*xs):
        out = fun(*tree_util.tree_unflatten(in_tree, xs))
        leaves, tree = tree_util.tree_flatten(out)
        out_tree_box.append(tree)
        return leaves

    opened, consts = hoist_consts(stage_subprogram(flat, in_avals, function_name(fun)))
    return opened, consts, out_tree_box[0]


def _flatten_operands(tree) -> tuple[list, list, Any]:
    """Flatten operands into arrays and their abstract values.  The avals are taken before
    conversion, so Python scalars stay weakly typed, as in JAX (``0`` as a loop counter does
    not turn an int32 or float32 computation into a 64-bit one)."""
    leaves, treedef = tree_util.tree_flatten(tree)
    return [as_operand(x) for x in leaves], avals_of(leaves), treedef


_KIND_RANK = {"b": 0, "i": 1, "u": 1, "f": 2, "c": 3}


def _promote_weak_carry(leaves: list, avals: list, out_avals: Sequence):
    """JAX's rule for weakly typed loop carries: when the body turns a carry that started as a
    Python scalar into a stronger dtype of at least its kind (``0.0`` -> float32, ``0`` ->
    int32 or float32), the initial value is cast to that dtype.

    Returns (leaves, avals), or None when nothing changes (then the body needs no retrace)."""
    new_leaves, new_avals, changed = [], [], False
    for x, a, o in zip(leaves, avals, out_avals):
        if (a.weak_type and a.shape == o.shape and a.dtype != o.dtype
                and _KIND_RANK.get(o.dtype.kind, -1) >= _KIND_RANK.get(a.dtype.kind, 9)):
            x = P.convert_element_type(x, o.dtype) if isinstance(x, Tracer) else np.asarray(x, o.dtype)
            a, changed = ShapedArray(a.shape, o.dtype, o.weak_type), True
        new_leaves.append(x)
        new_avals.append(a)
    return (new_leaves, new_avals) if changed else None


def _check_same_avals(what: str, got: Sequence, want: Sequence, fname: str):
    got_s = [a.str_short() for a in got]
    want_s = [a.str_short() for a in want]
    if got_s != want_s:
        raise TypeError(f"{what} of `{fname}` must keep the same types and shapes: got {got_s}, "
                        f"expected {want_s} {user_frame_description()}")


# --------------------------------------------------------------------------- cond / switch

cond_p = new_primitive("cond")
cond_p.multiple_results = True


def _cond_impl(index, *ops, branches):
    i = int(np.clip(int(index), 0, len(branches) - 1))
    return run_subprogram(branches[i], ops)


def _cond_abstract(index, *ops, branches):
    return branches[0].out_avals


def _cond_jvp(primals, tangents, *, branches):
    index, ops = primals[0], primals[1:]
    tops = tangents[1:]
    fl = float_mask(avals_of(ops))
    new_branches = tuple(dce(jvp_of_closed(b)) for b in branches)
    t_in = [t for t, f in zip(zeros_for_none(tops, ops), fl) if f]
    outs = cond_p.bind(index, *ops, *t_in, branches=new_branches)
    n = len(branches[0].out_avals)
    out_fl = float_mask(branches[0].out_avals)
    it = iter(outs[n:])
    return outs[:n], [next(it) if f else None for f in out_fl]


def _cond_vjp(primals, needs_ct, *, branches):
    index, ops = primals[0], primals[1:]
    outs = cond_p.bind(index, *ops, branches=branches)
    diff = [n and is_float_dtype(get_aval(o).dtype) for n, o in zip(needs_ct[1:], ops)]
    out_fl = float_mask(branches[0].out_avals)

    def backward(cts):
        bwd = tuple(dce(vjp_of_closed(b, diff)) for b in branches)
        ct_in = [c for c, f in zip(zeros_for_none(cts, outs), out_fl) if f]
        res = cond_p.bind(index, *ops, *ct_in, branches=bwd)
        it = iter(res)
        return [None] + [next(it) if d else None for d in diff]

    return outs, backward


def _cond_batch(vals, dims, *, branches):
    index, ops = vals[0], vals[1:]
    idim, odims = dims[0], dims[1:]
    size = next(shape_of(v)[d] for v, d in zip(vals, dims) if d is not None)
    moved = [P.moveaxis(v, d, 0) if d is not None else v for v, d in zip(ops, odims)]
    axes0 = tuple(0 if d is not None else None for d in odims)
    new_branches = tuple(
        stage_subprogram(vmap(lambda *a, b=b: eval_jaxpr(b.jaxpr, b.consts, *a), in_axes=axes0, axis_size=size),
               avals_of(moved))
        for b in branches)
    if idim is None:
        return cond_p.bind(index, *moved, branches=new_branches), [0] * len(branches[0].out_avals)
    # a batched predicate: every branch runs inline on the whole batch (they are pure, so this
    # is only extra work) and the results are selected per member by the clamped index, as in
    # JAX; the elementwise case then fuses into one kernel.  Effects in a branch (debug prints,
    # collectives) happen for every branch -- as they did when each branch was its own call.
    index = P.moveaxis(index, idim, 0)
    results = [eval_jaxpr(nb.jaxpr, nb.consts, *moved) for nb in new_branches]
    n = len(branches)
    # chosen[j - 1]: the members taking branch j (an index past the last branch clamps to it)
    chosen = [(P.ge_p if j == n - 1 else P.eq_p).bind(index, np.array(j, index.dtype)) for j in range(1, n)]
    outs = []
    for k in range(len(results[0])):
        out = results[0][k]
        for j in range(1, n):
            r = results[j][k]
            pred = P.reshape(chosen[j - 1], shape_of(index) + (1,) * (len(shape_of(r)) - 1))
            out = P.select(pred, r, out)
        outs.append(out)
    return outs, [0] * len(outs)


cond_p.impl = _cond_impl
cond_p.abstract_eval = _cond_abstract
cond_p.jvp_rule = _cond_jvp
cond_p.vjp_rule = _cond_vjp
cond_p.batch = _cond_batch


def _scalar_operand(x, what: str):
    x = as_operand(x)
    aval = get_aval(x)
    if aval.shape != ():
        raise TypeError(f"{what} must be a scalar, got {aval.str_short()} {user_frame_description()}")
    return x, aval


def _describe_outputs(tree, avals) -> str:
    return repr(tree_util.tree_unflatten(tree, [a.str_short() for a in avals])).replace("'", "")


def _bind_branches(index, branches: Sequence[Callable], labels: Sequence[str], operands, what: str):
    """Trace every branch on the operands' types and bind ``cond_p`` (index: int32 scalar)."""
    leaves = [as_operand(x) for x in tree_util.tree_leaves(operands)]
    in_tree = tree_util.tree_structure(operands)
    avals = avals_of(leaves)
    traced = [_trace_user_fn(b, avals, in_tree) for b in branches]
    ref_closed, _, ref_tree = traced[0]
    ref = _describe_outputs(ref_tree, ref_closed.out_avals)
    for (closed, _, tree), b, label in zip(traced[1:], branches[1:], labels[1:]):
        got = _describe_outputs(tree, closed.out_avals)
        if tree != ref_tree or got != ref:
            raise TypeError(f"{what} branches must return the same structure, dtypes and shapes: {labels[0]} "
                            f"`{function_name(branches[0])}` returns {ref}, but {label} `{function_name(b)}` returns {got} "
                            f"{user_frame_description()}")
    # every branch takes the hoisted values of all branches, then the operands
    all_consts = [c for _, consts, _ in traced for c in consts]
    counts = [len(consts) for _, consts, _ in traced]
    new_branches = []
    for k, (closed, _, _) in enumerate(traced):
        before = sum(counts[:k])
        j = closed.jaxpr
        others_before = [Var(get_aval(c)) for c in all_consts[:before]]
        others_after = [Var(get_aval(c)) for c in all_consts[before + counts[k]:]]
        in_vars = others_before + j.in_vars[:counts[k]] + others_after + j.in_vars[counts[k]:]
        new_branches.append(ClosedJaxpr(Jaxpr([], in_vars, j.eqns, j.outs), []))
    index = P.convert_element_type(index, np.int32)
    outs = cond_p.bind(index, *all_consts, *leaves, branches=tuple(new_branches))
    return tree_util.tree_unflatten(ref_tree, outs)


def switch(index, branches: Sequence[Callable], *operands):
    """Apply ``branches[index](*operands)`` as one primitive; ``index`` is clamped to
    ``[0, len(branches) - 1]`` (as in JAX).  Every branch must return the same types."""
    branches = tuple(branches)
    if not branches:
        raise ValueError("switch needs at least one branch")
    index, aval = _scalar_operand(index, "switch index")
    if aval.dtype.kind not in "iub":
        raise TypeError(f"switch index must be an integer scalar, got {aval.str_short()} "
                        f"{user_frame_description()}")
    return _bind_branches(index, branches, [f"branches[{i}]" for i in range(len(branches))], operands, "switch")


def cond(pred, true_fun: Callable, false_fun: Callable, *operands):
    """``true_fun(*operands) if pred else false_fun(*operands)``, staged as one primitive.

    ``pred`` is a boolean or integer scalar (a nonzero integer is true, as in JAX)."""
    pred, aval = _scalar_operand(pred, "cond predicate")
    if aval.dtype.kind in "iu":
        pred = P.ne_p.bind(pred, np.zeros((), aval.dtype))
    elif aval.dtype.kind != "b":
        raise TypeError(f"cond predicate must be a boolean or integer scalar, got {aval.str_short()}; "
                        f"compare it first (e.g. x > 0) {user_frame_description()}")
    return _bind_branches(pred, (false_fun, true_fun), ("false_fun", "true_fun"), operands, "cond")


# --------------------------------------------------------------------------- while_loop

while_p = new_primitive("while")
while_p.multiple_results = True


def _while_impl(*args, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    cc, bc = args[:cond_nconsts], args[cond_nconsts:cond_nconsts + body_nconsts]
    carry = list(args[cond_nconsts + body_nconsts:])
    while bool(run_subprogram(cond_jaxpr, [*cc, *carry])[0]):
        carry = run_subprogram(body_jaxpr, [*bc, *carry])
    return carry


def _while_abstract(*avals, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    return list(body_jaxpr.out_avals)


def _while_jvp(primals, tangents, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    nc, nb = cond_nconsts, body_nconsts
    cc, bc, init = primals[:nc], primals[nc:nc + nb], primals[nc + nb:]
    tbc, tinit = tangents[nc:nc + nb], tangents[nc + nb:]
    bc_fl, carry_fl = float_mask(avals_of(bc)), float_mask(avals_of(init))
    jbody = jvp_of_closed(body_jaxpr)  # [bc, carry, t_bc, t_carry] -> [carry, t_carry]
    n_tbc = sum(bc_fl)
    n_carry = len(init)

    # reorder to the while layout: body consts = bc + t_bc; carry = carry + t_carry
    def body(*args):
        consts, carry = args[:nb + n_tbc], args[nb + n_tbc:]
        return eval_jaxpr(jbody.jaxpr, jbody.consts, *consts[:nb], *carry[:n_carry], *consts[nb:], *carry[n_carry:])

    t_carry_avals = [a for a, f in zip(avals_of(init), carry_fl) if f]
    new_body = stage_subprogram(body, avals_of(bc) + [a for a, f in zip(avals_of(bc), bc_fl) if f]
                      + avals_of(init) + t_carry_avals)
    new_cond = stage_subprogram(lambda *a: eval_jaxpr(cond_jaxpr.jaxpr, cond_jaxpr.consts, *a[:nc + n_carry]),
                      avals_of(cc) + avals_of(init) + t_carry_avals)
    t_bc_in = [t for t, f in zip(zeros_for_none(tbc, bc), bc_fl) if f]
    t_init_in = [t for t, f in zip(zeros_for_none(tinit, init), carry_fl) if f]
    outs = while_p.bind(*cc, *bc, *t_bc_in, *init, *t_init_in, cond_jaxpr=new_cond, body_jaxpr=new_body,
                        cond_nconsts=nc, body_nconsts=nb + n_tbc)
    it = iter(outs[n_carry:])
    return outs[:n_carry], [next(it) if f else None for f in carry_fl]


def _while_vjp(primals, needs_ct, **params):
    raise NotImplementedError(
        "Reverse-mode differentiation does not work for ft.lax.while_loop (its trip count is only "
        "known at run time). Use ft.lax.scan, or ft.lax.fori_loop with static (Python int) bounds, "
        "or forward mode (ft.jvp / ft.jacfwd).")


def _while_batch(vals, dims, *, cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts):
    size = next(shape_of(v)[d] for v, d in zip(vals, dims) if d is not None)
    nc, nb = cond_nconsts, body_nconsts
    moved = [P.moveaxis(v, d, 0) if d is not None else v for v, d in zip(vals, dims)]
    cc, bc, init = moved[:nc], moved[nc:nc + nb], moved[nc + nb:]
    ccd, bcd = dims[:nc], dims[nc:nc + nb]
    # every carry is batched (an unbatched carry may become batched in the body)
    init = [v if d is not None else P.broadcast_in_dim(v, (size,) + shape_of(v), tuple(range(1, len(shape_of(v)) + 1)))
            for v, d in zip(init, dims[nc + nb:])]
    c_axes = tuple(0 if d is not None else None for d in ccd)
    b_axes = tuple(0 if d is not None else None for d in bcd)
    carry_axes = (0,) * len(init)
    cond_b = vmap(lambda *a: eval_jaxpr(cond_jaxpr.jaxpr, cond_jaxpr.consts, *a), in_axes=c_axes + carry_axes)
    body_b = vmap(lambda *a: eval_jaxpr(body_jaxpr.jaxpr, body_jaxpr.consts, *a), in_axes=b_axes + carry_axes)

    def any_cond(*args):
        pred = cond_b(*args)[0]
        return [P.reduce_max_p.bind(pred, axes=(0,))]

    def guarded_body(*args):
        consts, carry = args[:nb + nc], args[nb + nc:]
        pred = cond_b(*consts[nb:], *carry)[0]
        new = body_b(*consts[:nb], *carry)
        return [P.select(P.reshape(pred, (size,) + (1,) * (len(shape_of(n)) - 1)), n, c) for n, c in zip(new, carry)]

    carry_avals = avals_of(init)
    new_cond = stage_subprogram(any_cond, avals_of(cc) + carry_avals)
    new_body = stage_subprogram(guarded_body, avals_of(bc) + avals_of(cc) + carry_avals)
    outs = while_p.bind(*cc, *bc, *cc, *init, cond_jaxpr=new_cond, body_jaxpr=new_body,
                        cond_nconsts=nc, body_nconsts=nb + nc)
    return outs, [0] * len(outs)


while_p.impl = _while_impl
while_p.abstract_eval = _while_abstract
while_p.jvp_rule = _while_jvp
while_p.vjp_rule = _while_vjp
while_p.batch = _while_batch


def while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any) -> Any:
    """``while cond_fun(val): val = body_fun(val)``, staged as one primitive.

    Forward mode and vmap work (a batched predicate runs until every member is done);
    reverse mode raises, as in JAX: use ``scan`` or ``fori_loop`` with static bounds."""
    leaves, avals, tree = _flatten_operands(init_val)
    args_tree = tree_util.tree_structure((init_val,))
    body_c, body_consts, body_tree = _trace_user_fn(body_fun, avals, args_tree)
    if body_tree != tree:
        raise TypeError(f"while_loop: body_fun `{function_name(body_fun)}` must return the structure of init_val "
                        f"({tree}), got {body_tree} {user_frame_description()}")
    promoted = _promote_weak_carry(leaves, avals, body_c.out_avals)
    if promoted is not None:
        leaves, avals = promoted
        body_c, body_consts, _ = _trace_user_fn(body_fun, avals, args_tree)
    _check_same_avals("while_loop body output", body_c.out_avals, avals, function_name(body_fun))
    cond_c, cond_consts, _ = _trace_user_fn(cond_fun, avals, args_tree)
    if len(cond_c.out_avals) != 1 or cond_c.out_avals[0].shape != () or cond_c.out_avals[0].dtype != np.dtype(bool):
        raise TypeError(f"while_loop: cond_fun `{function_name(cond_fun)}` must return a boolean scalar, got "
                        f"{[a.str_short() for a in cond_c.out_avals]} {user_frame_description()}")
    outs = while_p.bind(*cond_consts, *body_consts, *leaves, cond_jaxpr=cond_c, body_jaxpr=body_c,
                        cond_nconsts=len(cond_consts), body_nconsts=len(body_consts))
    return tree_util.tree_unflatten(tree, outs)


# --------------------------------------------------------------------------- scan

scan_p = new_primitive("scan")
scan_p.multiple_results = True


def _scan_impl(*args, jaxpr, num_consts, num_carry, length, reverse):
    consts = list(args[:num_consts])
    carry = list(args[num_consts:num_consts + num_carry])
    xs = args[num_consts + num_carry:]
    ys = []
    for i in (range(length - 1, -1, -1) if reverse else range(length)):
        out = run_subprogram(jaxpr, consts + carry + [x[i] for x in xs])
        carry = list(out[:num_carry])
        ys.append(out[num_carry:])
    if reverse:
        ys.reverse()
    y_avals = jaxpr.out_avals[num_carry:]
    stacked = [np.stack([np.asarray(y[k]) for y in ys]) if ys else np.zeros((0,) + a.shape, a.dtype)
               for k, a in enumerate(y_avals)]
    return carry + stacked


def _scan_abstract(*avals, jaxpr, num_consts, num_carry, length, reverse):
    y_avals = jaxpr.out_avals[num_carry:]
    return list(jaxpr.out_avals[:num_carry]) + [ShapedArray((length,) + a.shape, a.dtype) for a in y_avals]


def _scan_jvp(primals, tangents, *, jaxpr, num_consts, num_carry, length, reverse):
    consts, init, xs = split3(primals, num_consts, num_carry)
    tc, tinit, txs = split3(tangents, num_consts, num_carry)
    body_in = jaxpr.in_avals
    c_fl, carry_fl, x_fl = split3(float_mask(body_in), num_consts, num_carry)
    jbody = jvp_of_closed(jaxpr)  # [consts, carry, x, t_consts, t_carry, t_x] -> [carry, y, t_carry, t_y]
    ntc, ntcarry, ntx = sum(c_fl), sum(carry_fl), sum(x_fl)
    out_fl = float_mask(jaxpr.out_avals)
    carry_out_fl, y_fl = out_fl[:num_carry], out_fl[num_carry:]
    ny = len(y_fl)

    def body(*args):
        cs, tcs, cr, tcr, x, tx = (args[:num_consts], args[num_consts:num_consts + ntc],
                                   *split3(args[num_consts + ntc:], num_carry, ntcarry)[:2],
                                   *split3(args[num_consts + ntc + num_carry + ntcarry:], len(xs), ntx)[:2])
        out = eval_jaxpr(jbody.jaxpr, jbody.consts, *cs, *cr, *x, *tcs, *tcr, *tx)
        carry_o, y_o = out[:num_carry], out[num_carry:num_carry + ny]
        t_o = out[num_carry + ny:]
        t_carry_o, t_y_o = t_o[:sum(carry_out_fl)], t_o[sum(carry_out_fl):]
        return list(carry_o) + list(t_carry_o) + list(y_o) + list(t_y_o)

    x_slice_avals = body_in[num_consts + num_carry:]
    sel = lambda avs, fl: [a for a, f in zip(avs, fl) if f]
    new_body = stage_subprogram(body, list(body_in[:num_consts]) + sel(body_in[:num_consts], c_fl)
                      + list(body_in[num_consts:num_consts + num_carry])
                      + sel(body_in[num_consts:num_consts + num_carry], carry_fl)
                      + list(x_slice_avals) + sel(x_slice_avals, x_fl))
    t_consts = sel(zeros_for_none(tc, consts), c_fl)
    t_init = sel(zeros_for_none(tinit, init), carry_fl)
    t_xs = sel(zeros_for_none(txs, xs), x_fl)
    outs = scan_p.bind(*consts, *t_consts, *init, *t_init, *xs, *t_xs, jaxpr=new_body,
                       num_consts=num_consts + ntc, num_carry=num_carry + ntcarry, length=length, reverse=reverse)
    carry_o = outs[:num_carry]
    t_carry = iter(outs[num_carry:num_carry + ntcarry])
    ys = outs[num_carry + ntcarry:num_carry + ntcarry + ny]
    t_ys = iter(outs[num_carry + ntcarry + ny:])
    return (list(carry_o) + list(ys),
            [next(t_carry) if f else None for f in carry_out_fl] + [next(t_ys) if f else None for f in y_fl])


def _scan_vjp(primals, needs_ct, *, jaxpr, num_consts, num_carry, length, reverse):
    consts, init, xs = split3(primals, num_consts, num_carry)
    n_y = len(jaxpr.out_avals) - num_carry
    # forward: also emit the carry entering each step (the only residual)
    fwd_body = stage_subprogram(
        lambda *a: (lambda out: list(out) + list(a[num_consts:num_consts + num_carry]))(
            eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *a)), jaxpr.in_avals)
    outs = scan_p.bind(*consts, *init, *xs, jaxpr=fwd_body, num_consts=num_consts, num_carry=num_carry,
                       length=length, reverse=reverse)
    carry_out, ys, carries = outs[:num_carry], outs[num_carry:num_carry + n_y], outs[num_carry + n_y:]

    in_fl = float_mask(jaxpr.in_avals)
    c_fl, carry_fl, x_fl = split3(in_fl, num_consts, num_carry)
    out_fl = float_mask(jaxpr.out_avals)
    carry_out_fl, y_fl = out_fl[:num_carry], out_fl[num_carry:]
    diff = in_fl  # cotangents for every float input of the body

    def backward(cts):
        ct_carry_out = zeros_for_none(cts[:num_carry], carry_out)
        ct_ys = zeros_for_none(cts[num_carry:], ys)
        body_vjp = vjp_of_closed(jaxpr, diff)  # [consts, carry, x, ct_carry(float), ct_y(float)] -> cts(float ins)
        n_fc, n_fcarry = sum(c_fl), sum(carry_fl)

        def bwd_step(*args):
            cs = args[:num_consts]
            ct_c, acc = args[num_consts:num_consts + n_fcarry], args[num_consts + n_fcarry:num_consts + n_fcarry + n_fc]
            rest = args[num_consts + n_fcarry + n_fc:]
            c_i, x_i, ct_y_i = rest[:num_carry], rest[num_carry:num_carry + len(xs)], rest[num_carry + len(xs):]
            ct_y_f = [c for c, f in zip(ct_y_i, y_fl) if f]
            res = eval_jaxpr(body_vjp.jaxpr, body_vjp.consts, *cs, *c_i, *x_i, *ct_c, *ct_y_f)
            ct_consts_i, ct_carry_prev, ct_x = res[:n_fc], res[n_fc:n_fc + n_fcarry], res[n_fc + n_fcarry:]
            return list(ct_carry_prev) + [P.add(a, b) for a, b in zip(acc, ct_consts_i)] + list(ct_x)

        sel = lambda vals, fl: [v for v, f in zip(vals, fl) if f]
        init_ct = sel(ct_carry_out, carry_out_fl)
        acc0 = [P.zeros_like(c) for c in sel(consts, c_fl)]
        carry_avals = jaxpr.in_avals[num_consts:num_consts + num_carry]
        x_avals = jaxpr.in_avals[num_consts + num_carry:]
        y_avals = jaxpr.out_avals[num_carry:]
        bwd = stage_subprogram(bwd_step, list(jaxpr.in_avals[:num_consts]) + avals_of(init_ct) + avals_of(acc0)
                     + list(carry_avals) + list(x_avals) + list(y_avals))
        res = scan_p.bind(*consts, *init_ct, *acc0, *carries, *xs, *ct_ys, jaxpr=bwd, num_consts=num_consts,
                          num_carry=len(init_ct) + len(acc0), length=length, reverse=not reverse)
        ct_init_f = iter(res[:len(init_ct)])
        ct_consts_f = iter(res[len(init_ct):len(init_ct) + len(acc0)])
        ct_xs_f = iter(res[len(init_ct) + len(acc0):])
        return ([next(ct_consts_f) if f else None for f in c_fl] + [next(ct_init_f) if f else None for f in carry_fl]
                + [next(ct_xs_f) if f else None for f in x_fl])

    return list(carry_out) + list(ys), backward


def _scan_batch(vals, dims, *, jaxpr, num_consts, num_carry, length, reverse):
    size = next(shape_of(v)[d] for v, d in zip(vals, dims) if d is not None)
    consts, init, xs = split3(vals, num_consts, num_carry)
    cd, _, xd = split3(dims, num_consts, num_carry)
    consts = [P.moveaxis(v, d, 0) if d is not None else v for v, d in zip(consts, cd)]
    init = [P.moveaxis(v, d, 0) if d is not None else
            P.broadcast_in_dim(v, (size,) + shape_of(v), tuple(range(1, len(shape_of(v)) + 1)))
            for v, d in zip(init, dims[num_consts:num_consts + num_carry])]
    xs = [P.moveaxis(v, d, 1) if d is not None else v for v, d in zip(xs, xd)]
    axes = (tuple(0 if d is not None else None for d in cd) + (0,) * num_carry
            + tuple(0 if d is not None else None for d in xd))
    body = vmap(lambda *a: eval_jaxpr(jaxpr.jaxpr, jaxpr.consts, *a), in_axes=axes, axis_size=size)
    x_slice_avals = [ShapedArray((size,) + a.shape if d is not None else a.shape, a.dtype)
                     for a, d in zip(jaxpr.in_avals[num_consts + num_carry:], xd)]
    new_body = stage_subprogram(body, avals_of(consts) + avals_of(init) + x_slice_avals)
    outs = scan_p.bind(*consts, *init, *xs, jaxpr=new_body, num_consts=num_consts, num_carry=num_carry,
                       length=length, reverse=reverse)
    return outs, [0] * num_carry + [1] * (len(outs) - num_carry)


scan_p.impl = _scan_impl
scan_p.abstract_eval = _scan_abstract
scan_p.jvp_rule = _scan_jvp
scan_p.vjp_rule = _scan_vjp
scan_p.batch = _scan_batch


def scan(f: Callable, init: Any, xs: Any = None, length: int | None = None, reverse: bool = False):
    """``carry, ys = scan(f, init, xs)`` with ``f(carry, x) -> (carry, y)``; ys are stacked."""
    fname = function_name(f)
    x_leaves, x_tree = tree_util.tree_flatten(xs)
    x_leaves = [as_operand(x) for x in x_leaves]
    lengths = {shape_of(x)[0] for x in x_leaves if shape_of(x)}
    if any(shape_of(x) == () for x in x_leaves):
        raise ValueError(f"scan of `{fname}`: every xs leaf needs a leading axis to scan over")
    if length is not None:
        lengths.add(int(length))
    if len(lengths) != 1:
        raise ValueError(f"scan of `{fname}`: inconsistent or unknown length; xs leading axes and "
                         f"length give {sorted(lengths)}")
    n = lengths.pop()
    c_leaves, c_avals, c_tree = _flatten_operands(init)
    x_avals = [ShapedArray(shape_of(x)[1:], get_aval(x).dtype) for x in x_leaves]
    out_tree_box = []

    def flat(*args):
        carry = tree_util.tree_unflatten(c_tree, args[:len(c_leaves)])
        x = tree_util.tree_unflatten(x_tree, args[len(c_leaves):])
        res = f(carry, x)
        if not (isinstance(res, (tuple, list)) and len(res) == 2):
            got = "a single array" if isinstance(res, Tracer) else type(res).__name__
            raise TypeError(f"scan body `{fname}` must return a pair (carry, y), got {got} "
                            f"{user_frame_description()}")
        new_carry, y = res
        cl, ct = tree_util.tree_flatten(new_carry)
        if ct != c_tree:
            raise TypeError(f"scan body `{fname}` must return a carry with the structure of init ({c_tree}), "
                            f"got {ct} {user_frame_description()}")
        yl, yt = tree_util.tree_flatten(y)
        out_tree_box.append(yt)
        return cl + yl

    closed = stage_subprogram(flat, c_avals + x_avals, fname)
    promoted = _promote_weak_carry(c_leaves, c_avals, closed.out_avals)
    if promoted is not None:
        c_leaves, c_avals = promoted
        closed = stage_subprogram(flat, c_avals + x_avals, fname)
    _check_same_avals("scan carry", closed.out_avals[:len(c_leaves)], c_avals, fname)
    body, consts = hoist_consts(closed)
    outs = scan_p.bind(*consts, *c_leaves, *x_leaves, jaxpr=body, num_consts=len(consts),
                       num_carry=len(c_leaves), length=n, reverse=reverse)
    carry = tree_util.tree_unflatten(c_tree, outs[:len(c_leaves)])
    return carry, tree_util.tree_unflatten(out_tree_box[-1], outs[len(c_leaves):])


def map(f: Callable, xs, *, batch_size: int | None = None):
    """``stack([f(x) for x in xs])`` over the leading axis of (pytrees of) arrays, as one ``scan``."""
    if batch_size is not None:
        raise NotImplementedError("lax.map(batch_size=...) is not implemented in functrace")
    return scan(lambda carry, x: (carry, f(x)), (), xs)[1]


def _concrete_int(x):
    """The Python int value of a loop bound, or None when it is only known at run time."""
    if isinstance(x, Tracer):
        try:
            return int(x.concrete_value())
        except ConcretizationError:
            return None
    return int(x)


def _index_type(lower, upper) -> tuple[np.dtype, bool]:
    """(dtype, weak) of a ``fori_loop`` index: the bounds' common integer dtype, weakly typed
    when both bounds are Python ints (as in JAX, so ``v + i`` keeps a float32 ``v`` float32)."""
    avals = avals_of((lower, upper))
    for a in avals:
        if a.shape != () or a.dtype.kind not in "iu":
            raise TypeError(f"fori_loop bounds must be integer scalars, got {a.str_short()} "
                            f"{user_frame_description()}")
    strong = [a.dtype for a in avals if not a.weak_type]
    return (np.result_type(*strong), False) if strong else (avals[0].dtype, True)


def fori_loop(lower, upper, body_fun: Callable, init_val: Any) -> Any:
    """``for i in range(lower, upper): val = body_fun(i, val)``.  With concrete bounds this is
    a ``scan`` (reverse-differentiable, no unrolling); with traced bounds a ``while_loop``
    (forward mode only)."""
    dtype, weak = _index_type(lower, upper)
    lo, hi = _concrete_int(lower), _concrete_int(upper)
    if lo is not None and hi is not None:
        @functools.wraps(body_fun, updated=())
        def step(carry, _):
            i, val = carry
            return (i + 1, body_fun(i, val)), None

        start = lo if weak else np.asarray(lo, dtype)  # a Python int start is weakly typed
        (_, out), _ = scan(step, (start, init_val), None, length=max(hi - lo, 0))
        return out

    def cond_fun(carry):
        return carry[0] < carry[1]

    @functools.wraps(body_fun, updated=())
    def body(carry):
        i, hi_, val = carry
        return i + 1, hi_, body_fun(i, val)

    if not weak:
        lower, upper = (P.convert_element_type(as_operand(b), dtype) for b in (lower, upper))
    return while_loop(cond_fun, body, (lower, upper, init_val))[2]


# --------------------------------------------------------------------------- bit operations and erf_inv
# (jax.lax's names for the primitives ft.random is built from)

shift_left, shift_right_logical, bitcast_convert_type = P.shift_left, P.shift_right_logical, P.bitcast_convert_type

# numeric operations (lax_numeric.py); erf_inv from nn (nn does not import lax: no cycle)
from .lax_numeric import (  # noqa: E402,F401  (re-exported)
    Precision,
    PrecisionLike,
    associative_scan,
    clamp,
    cummax,
    cummin,
    cumprod,
    cumsum,
    dot,
    dot_general,
    dynamic_index_in_dim,
    dynamic_slice,
    dynamic_slice_in_dim,
    dynamic_update_index_in_dim,
    dynamic_update_slice,
    dynamic_update_slice_in_dim,
    erf,
    padtype_to_pads,
    reduce_window,
    reduce_window_shape_tuple,
    rsqrt,
    select,
    sort,
    sort_key_val,
    top_k,
)
from .nn import erf_inv  # noqa: E402, F401
from .scipy.special import digamma  # noqa: E402, F401
from .scipy.special import gammaln as lgamma  # noqa: E402, F401  (log |Gamma|, as XLA's lgamma)

# jax.lax names that functrace spells otherwise, or does not provide (the AttributeError says so)
_LAX_HINTS = {
    "mul": "fnp.multiply (or *)", "sub": "fnp.subtract (or -)", "div": "fnp.divide, or fnp.floor_divide for integers",
    "neg": "fnp.negative (or unary -)", "pow": "fnp.power (or **)", "integer_pow": "x ** n (an int n)",
    "logistic": "ft.nn.sigmoid", "convert_element_type": "fnp.asarray(x, dtype) or x.astype(dtype)",
    "broadcast_in_dim": "fnp.expand_dims and fnp.broadcast_to", "broadcast": "fnp.broadcast_to",
    "rev": "fnp.flip", "slice": "indexing (x[a:b:s])", "slice_in_dim": "indexing (x[a:b:s])",
    "index_in_dim": "indexing (x[i])", "reduce": "fnp.sum / fnp.prod / fnp.max / fnp.min over axes",
    "reduce_sum": "fnp.sum", "reduce_max": "fnp.max", "reduce_min": "fnp.min", "reduce_prod": "fnp.prod",
    "stop_gradient": "ft.stop_gradient", "ne": "fnp.not_equal (or !=)", "eq": "fnp.equal (or ==)",
    "lt": "fnp.less (or <)", "le": "fnp.less_equal (or <=)", "gt": "fnp.greater (or >)",
    "ge": "fnp.greater_equal (or >=)", "full": "fnp.full", "full_like": "fnp.full_like", "iota": "fnp.arange",
    "gather": "indexing (x[idx]) or fnp.take / fnp.take_along_axis",
    "scatter": "x.at[idx].set(...)", "scatter_add": "x.at[idx].add(...)",
    "ragged_dot": None, "conv_general_dilated_local": None, "conv_general_dilated_patches": None,
    "reduce_precision": None, "rng_uniform": None, "rng_bit_generator": None,
}


def __getattr__(name: str):
    """``lax.add`` / ``lax.max`` / ``lax.min`` (e.g. for ``reduce_window``), looked up here so that
    this module's own ``max`` / ``min`` stay Python's; for a missing name, an AttributeError that
    says what to use instead."""
    ops = {"add": fnp.add, "max": fnp.maximum, "min": fnp.minimum}
    if name in ops:
        return ops[name]
    message = f"module 'functrace.lax' has no attribute {name!r}"
    if not name.startswith("__"):
        hint = _LAX_HINTS.get(name)
        if hint is None and hasattr(fnp, name) and not name.startswith("_"):
            hint = f"fnp.{name} (functrace.numpy)"
        if hint is not None:
            message += f": use {hint}"
        elif name in _LAX_HINTS:
            message += ": functrace does not provide it"
    raise AttributeError(message)


from .convolution import (  # noqa: E402, F401
    ConvDimensionNumbers,
    ConvGeneralDilatedDimensionNumbers,
    conv,
    conv_dimension_numbers,
    conv_general_dilated,
    conv_general_permutations,
    conv_general_shape_tuple,
    conv_shape_tuple,
    conv_transpose,
    conv_transpose_shape_tuple,
    conv_with_general_padding,
)
