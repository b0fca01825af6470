"""OpenCL lowerings of structured control flow: ``cond``, ``while`` and ``scan``.

A loop over small values is compiled whole, as one launch that runs every iteration: a lane loop
where its body is elementwise over one lane shape (``loops.lane_loop``), else one work-group's loop
(``group_loops.group_loop``), each saying why when it is not (``_whole``).  Otherwise every
sub-program (a branch, a loop's condition or body) is compiled once as its own executable --
OpenCL kernels, or on a CPU device the host when it is small -- and the host drives it: the
carry stays in device arrays from one iteration to the next, a scan's per-step slices of ``xs``
and rows of ``ys`` are device-to-device copies, and only a while loop's predicate and a cond's
branch index are read back (one scalar per iteration / call).

On a CPU device a loop whose body is small runs instead as ONE host step with the numpy
backend's implementation (its values bit-identical to that backend's): a driven iteration costs
at least a launch's latency in Python and driver overhead (a 200-step scalar scan took 40-60 ms
driven against 5 ms in numpy), where numpy pays ~3 us per equation (see ``_loop_on_host``).
"""
from __future__ import annotations

import numpy as np

from ...core import ClosedJaxpr
from ...core.config import config
from ...primitives import control
from ...transforms.optimize import shape_size
from .. import compile_for
from .group_loops import group_loop
from .loops import lane_loop
from .lowerings import Lowered, OnHost, device_inputs, register
from .placement import WORKER_MARGIN, elements_touched, host_seconds, kernel_seconds, launch_costs


def _compile(closed):
    return compile_for("opencl", closed)


def _own(ctx, outs, inputs) -> list:
    """Outputs that are one of the step's inputs (a branch or body passing a value through) or
    repeat an earlier output (a body returning one value twice) are copied: the executable
    recycles each value's buffer after that value's own last use, so no two may share one."""
    owned, seen = [], list(inputs)
    for o in outs:
        owned.append(_copy(ctx, o) if any(o is x for x in seen) else o)
        seen.append(o)
    return owned


def _copy(ctx, arr):
    out = ctx.alloc(arr.shape, arr.dtype)
    nbytes = arr.size * arr.dtype.itemsize
    if nbytes:
        ctx.rt.cl.enqueue_copy(ctx.queue, out.buffer, arr.buffer, byte_count=nbytes)
    return out


def _equations(closed) -> list:
    """The equations of a program and of its sub-programs (nested branches and loop bodies)."""
    eqns, stack = [], [closed.jaxpr]
    while stack:
        for e in stack.pop().eqns:
            eqns.append(e)
            for v in e.params.values():
                stack.extend(s.jaxpr for s in (v if isinstance(v, tuple) else (v,)) if isinstance(s, ClosedJaxpr))
    return eqns


def _runs_kernels(exe) -> bool:
    """Does a compiled sub-program enqueue anything (kernels, copies, a driven loop), or is it
    all host segments (a small program run on the host has no plan)?"""
    plan = getattr(exe, "plan", None)
    return plan is not None and any(s.host_equations == 0 for s in plan.steps)


def _whole(eqn, rt) -> Lowered | str:
    """The loop ``eqn`` compiled whole -- a lane loop (many work-items, each running every
    iteration over its own lanes) where the body is elementwise over one lane shape, else one
    work-group's loop (``group_loops``) -- or why neither, for the report: the one place that decides."""
    lanes = lane_loop(eqn, rt)
    if isinstance(lanes, Lowered):
        return lanes
    group = group_loop(eqn, rt)
    return group if isinstance(group, Lowered) else f"not compiled whole: {group}"


def _loop_on_host(rt, eqn, programs: list, copies: int, why_not: str) -> OnHost | None:
    """Run the loop ``eqn`` as one host step?  On the cpu kind (``policy.host_steps``): when its sub-programs (``programs``,
    compiled) run no kernel (the driven loop would only add its per-iteration overhead to the same
    numpy work), or when numpy's estimated time for one iteration's equations is under
    ``WORKER_MARGIN`` times a driven iteration's (its launches and ``copies`` row copies, at least
    one, and a wait for the device, plus the arithmetic shared by the compute units).
    ``ft.config.opencl_host_step_elements`` set to a number replaces the estimate by that element
    count for the body's largest value (as for any step).  ``why_not``: why the loop is not
    compiled whole, for the report."""
    if rt is None or not rt.policy.host_steps:
        return None
    eqns = [e for p in eqn.params.values() for s in (p if isinstance(p, tuple) else (p,))
            if isinstance(s, ClosedJaxpr) for e in _equations(s)]
    elements = max((elements_touched(e) for e in eqns), default=0)
    name = eqn.primitive.name
    if config.opencl_host_step_elements is not None:
        if elements < int(config.opencl_host_step_elements):
            return OnHost(f"{name} as one numpy loop: its body's largest value has fewer than "
                          f"{config.opencl_host_step_elements} elements (opencl_host_step_elements); {why_not}")
        return None
    if not any(_runs_kernels(p) for p in programs):
        return OnHost(f"{name} as one numpy loop: its body runs no kernel, so driving it from the host "
                      f"would only add per-iteration overhead; {why_not}")
    launches = max(1, sum(p.num_kernel_launches for p in programs) + copies)
    costs = launch_costs(rt)  # (the host waits for each iteration's kernels)
    driven = kernel_seconds(rt, eqns, elements) + (launches - 1) * costs.dispatch + costs.wait
    host = host_seconds(eqns)
    if host < WORKER_MARGIN * driven:
        return OnHost(f"{name} as one numpy loop: an iteration is estimated at {host * 1e6:.0f} us in numpy "
                      f"vs {driven * 1e6:.0f} us driven ({launches} launches), which must win by {WORKER_MARGIN:g}x; "
                      f"{why_not}")
    return None


@register(control.cond_p)
def lower_cond(eqn, rt) -> Lowered:
    branches = [_compile(b) for b in eqn.params["branches"]]

    def run(ctx, inputs):
        index, *ops = device_inputs(eqn, ctx, inputs)
        i = min(max(int(np.asarray(index)), 0), len(branches) - 1)
        return _own(ctx, branches[i](*ops), ops)

    launches = max(b.num_kernel_launches for b in branches)
    return Lowered("", [], run, launches, f"cond: {len(branches)} branches compiled separately "
                                           f"(up to {launches} launches; the index is read on the host)")


@register(control.while_p)
def lower_while(eqn, rt) -> Lowered:
    whole = _whole(eqn, rt)
    if isinstance(whole, Lowered):
        return whole
    why_not = whole
    p = eqn.params
    cond, body = _compile(p["cond_jaxpr"]), _compile(p["body_jaxpr"])
    on_host = _loop_on_host(rt, eqn, [cond, body], 0, why_not)
    if on_host is not None:
        return on_host
    nc, nb = p["cond_nconsts"], p["body_nconsts"]

    def run(ctx, inputs):
        inputs = device_inputs(eqn, ctx, inputs)
        cc, bc, carry = inputs[:nc], inputs[nc:nc + nb], inputs[nc + nb:]
        while bool(np.asarray(cond(*cc, *carry)[0])):
            carry = body(*bc, *carry)
        return _own(ctx, carry, inputs)

    per_iteration = cond.num_kernel_launches + body.num_kernel_launches
    return Lowered("", [], run, 0, f"while: condition and body compiled separately ({per_iteration} launches "
                                   f"per iteration; the predicate is read on the host; {why_not})")


@register(control.scan_p)
def lower_scan(eqn, rt) -> Lowered:
    whole = _whole(eqn, rt)
    if isinstance(whole, Lowered):
        return whole
    why_not = whole
    p = eqn.params
    body = _compile(p["jaxpr"])
    n_consts, n_carry, length, reverse = p["num_consts"], p["num_carry"], p["length"], p["reverse"]
    x_avals, y_avals = p["jaxpr"].in_avals[n_consts + n_carry:], p["jaxpr"].out_avals[n_carry:]
    on_host = _loop_on_host(rt, eqn, [body], len(x_avals) + len(y_avals), why_not)
    if on_host is not None:
        return on_host
    # bytes of one row of each x and of each y: fixed by the avals, so not recomputed per step
    x_row_bytes = [shape_size(a.shape) * a.dtype.itemsize for a in x_avals]
    y_row_bytes = [shape_size(a.shape) * a.dtype.itemsize for a in y_avals]

    def run(ctx, inputs):
        inputs = device_inputs(eqn, ctx, inputs)
        consts, carry = inputs[:n_consts], inputs[n_consts:n_consts + n_carry]
        xs = inputs[n_consts + n_carry:]
        ys = [ctx.alloc((length,) + tuple(a.shape), a.dtype) for a in y_avals]
        copy, queue = ctx.rt.cl.enqueue_copy, ctx.queue
        for i in (range(length - 1, -1, -1) if reverse else range(length)):
            rows = []
            for x, a, nbytes in zip(xs, x_avals, x_row_bytes):  # x[i] into a scratch buffer
                row = ctx.alloc(a.shape, a.dtype)
                if nbytes:
                    copy(queue, row.buffer, x.buffer, byte_count=nbytes, src_offset=i * nbytes)
                rows.append(row)
            outs = body(*consts, *carry, *rows)
            carry = outs[:n_carry]
            for y, dst, nbytes in zip(outs[n_carry:], ys, y_row_bytes):  # y into ys[i]
                if nbytes:
                    copy(queue, dst.buffer, y.buffer, byte_count=nbytes, dst_offset=i * nbytes)
            for row in rows:  # the in-order queue runs later users of these buffers after this step
                if not any(row is c for c in carry):  # a body returning its x row as the carry keeps it
                    ctx.release(row)
        return _own(ctx, carry, inputs) + ys

    per_step = body.num_kernel_launches + len(y_avals) + len(x_avals)
    return Lowered("", [], run, length * per_step,
                   f"scan: body compiled separately, {length} steps of {per_step} launches (copies included; "
                   f"{why_not})")
