"""The control-flow primitives ``cond``, ``while`` and ``scan``, each holding sub-programs
(``ClosedJaxpr`` params) that ``functrace.lax``'s ``cond`` / ``switch``, ``while_loop`` /
``fori_loop`` and ``scan`` / ``map`` trace from the user's functions:

* ``cond(index, *ops, branches)``: runs ``branches[index]`` on ``ops`` (the index is clamped);
* ``while(*cond_consts, *body_consts, *carry, cond_jaxpr, body_jaxpr, cond_nconsts,
  body_nconsts)``: runs the body on the carry while the predicate holds;
* ``scan(*consts, *init, *xs, jaxpr, num_consts, num_carry, length, reverse)``: runs the body
  over the leading axis of ``xs``, threading the carry, and stacks the per-step outputs.

Rules:

* jvp: the sub-programs are transformed IR-to-IR (``jvp_of_closed``) and the same
  primitive is bound on primals and tangents;
* vjp: ``scan`` saves the carry of every iteration in its forward pass and runs a reversed
  ``scan`` of the body's vjp (recomputing one body step at a time, so the IR is never
  unrolled); ``cond`` runs the vjp of the taken branch; ``while`` has no reverse mode
  (its trip count is dynamic), as in JAX;
* batching: sub-programs are vmapped; a batched ``cond`` predicate becomes a select, a
  batched ``while`` predicate runs until every member is done.

Sub-programs are made without dead equations (``stage_subprogram``), since the jit optimizer does
not enter them.
"""
from __future__ import annotations

import numpy as np

from ..core import ShapedArray, eval_jaxpr, get_aval, is_float_dtype
from ..transforms.autodiff import float_mask, jvp_of_closed, vjp_of_closed
from ..transforms.batching import vmap
from ..transforms.optimize import dce
from ..transforms.subprograms import avals_of, run_subprogram, split3, stage_subprogram, zeros_for_none
from . import basic as P
from .basic import new_primitive, shape_of

# --------------------------------------------------------------------------- cond

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
cond_p.branches_param = "branches"  # a known index: constant folding inlines its branch


# --------------------------------------------------------------------------- while

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
