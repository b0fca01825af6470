"""Work-group loops and programs compiled whole (issue 34): which loops and programs run as ONE
launch of ONE work-group -- or, batched, of a work-group per member -- and how they launch;
``group_writer.py`` writes their OpenCL C.

Where a lane loop (``loops.py``) needs every value elementwise over one lane shape, a work-group
loop takes any body whose equations each have a *group form* (``group_writer.INDEXED``, the
elementwise ones, nested loops, conds, calls, random bits) and whose values are small
(``GROUP_ELEMENTS``, ``GROUP_WORK``).  A program holding loops runs whole the same way
(``program_kernel``) unless a loop is better spread over the device (a lane loop over many lanes,
a work-group per member) or its loops outlast one launch (``loops.CHUNK_WORK``).  A batched loop
whose equations read only their own row of the carries' rows (``_row_axis``: the layouts vmap
makes) runs a work-group per member (``_rows_launch``).  On the cpu kind G is 1; on the gpu kind the
largest value's size up to ``GROUP_ITEMS`` (one on PoCL's CPU device whatever the kind).  Anything
else keeps today's designs, and ``group_loop`` / ``program_kernel`` say why, for the report.
"""
from __future__ import annotations

import numpy as np

from ... import primitives as P
from ...core import Literal
from ...primitives import random_bits
from ...transforms.optimize import shape_size
from . import loops
from .fusion import fusable
from .group_writer import INDEXED, LOOPS, REDUCTIONS, VIEWS, GroupWriter, branches, contraction, program_outputs
from .loops import (
    describe_loop,
    dtypes_reason,
    lane_loop,
    lane_predicate,
    lane_shape,
    launch_chunks,
    loop_dtype_reason,
    scan_chunks,
)
from .lowerings import Lowered, device_group
from .placement import compute_units

# the largest value (elements) a work-group loop holds: one work-group (one core on a CPU) runs the
# loop, which pays for bodies of small values; larger ones keep the designs that spread over cores
GROUP_ELEMENTS = 1 << 14
GROUP_WORK = 1 << 18  # ... and the most elements' work of one pass over its equations (one iteration)
ROWS_WORK = 1 << 12  # a batched loop doing this many elements' work a pass runs a work-group per member (rows)
GROUP_ITEMS = 256  # the gpu kind's work-group: up to this many work-items, one per element of the largest value
LOCAL_RESERVE = 1024  # bytes of the device's local memory left to the driver


def _sub_equations(e) -> list:
    """The equations of loop ``e``'s condition and body."""
    loop = describe_loop(e)
    return loop.cond + loop.eqns


def _reason(eqns: list, rt) -> str | None:
    """Why some equation of ``eqns`` (loops, conds and calls: with their sub-programs) has no
    group form, or None."""
    for e in eqns:
        if e.primitive in LOOPS:
            why = loop_dtype_reason(e, rt) or _reason(_sub_equations(e), rt)
        elif branches(e):
            inner = [eq for b in branches(e) for eq in b.jaxpr.eqns]
            why = dtypes_reason([v.aval.dtype for v in [v for eq in inner for v in eq.out_vars] + list(e.out_vars)], rt) or _reason(inner, rt)
        elif e.primitive is random_bits.threefry2x32_p:
            why = None
        elif len(e.out_vars) != 1 or e.primitive.effectful or not (e.primitive in INDEXED or fusable(e)):
            why = f"it has {e.primitive.name}"
        else:
            why = None
        if why is not None:
            return why
    return None


def _work(eqns: list) -> tuple[int, int]:
    """(the largest value, the elements' work of one pass) of ``eqns``, a loop's body counted once:
    a product's outputs times its contraction, a reduction's operand, each other output once."""
    largest, work = 1, 0
    for e in eqns:
        if e.primitive in LOOPS:
            loop = describe_loop(e)
            inner = [v for _, vs, _ in loop.carries for v in vs] + [v for _, v in loop.xs]
            big, w = _work(_sub_equations(e))
            largest, work = max(largest, big, *(shape_size(v.aval.shape) for v in inner)), work + w
            continue
        if branches(e):
            big, w = _work([eq for b in branches(e) for eq in b.jaxpr.eqns])
            largest, work = max(largest, big, *(shape_size(v.aval.shape) for v in e.out_vars)), work + w
            continue
        n = shape_size(e.out_vars[0].aval.shape)
        largest = max(largest, n)
        if e.primitive is P.dot_general_p:
            n *= shape_size(contraction(e))
        elif e.primitive in REDUCTIONS or e.primitive in (P.argmax_p, P.argmin_p):
            n = shape_size(e.inputs[0].aval.shape)
        work += n
    return largest, work


def _run_work(eqns: list) -> int:
    """Elements' work of running ``eqns`` once: a scan's body times its length (a while's once:
    its trip count is not known), nested to any depth."""
    work = 0
    for e in eqns:
        if e.primitive in LOOPS:
            work += _run_work(_sub_equations(e)) * max(1, e.params.get("length") or 1)
        elif branches(e):
            work += max(_run_work(b.jaxpr.eqns) for b in branches(e))
        else:
            work += _work([e])[1]
    return work


def _fits(eqns: list, rt, members: int = 1) -> str | None:
    """Why ``eqns`` are not one work-group's to run, or None: an equation without a group form,
    a value over ``GROUP_ELEMENTS``, a pass over ``GROUP_WORK`` (per member of ``members``, for
    a loop running a work-group per member)."""
    why = _reason(eqns, rt)
    if why is not None:
        return why
    largest, work = (-(-n // members) for n in _work(eqns))
    if largest > GROUP_ELEMENTS:
        return f"a value of {largest} elements is over a work-group loop's {GROUP_ELEMENTS}"
    if work > GROUP_WORK:
        return f"a pass over its equations does {work} elements' work, over a work-group loop's {GROUP_WORK}"
    return None


def _work_group(rt, eqns: list, groups: int = 1) -> int:
    """Work-items of the work-group: one on the cpu kind, on the gpu kind one per element of the
    largest value up to ``GROUP_ITEMS`` (and the device's limits) -- but one on PoCL's CPU device
    whatever the kind: its compiler aborted the process forming parallel regions for a nest of
    loops with barriers (the gradient of a scan holding a fori_loop), and miscompiled kernels that
    Oclgrind runs clean (argmax and integer reductions wrong from 6 or 49 work-items, right with
    -cl-opt-disable: ../shared/repros/group_loop_pocl_*.py); one core gains nothing from more
    work-items.  (Oclgrind runs the work-group form in the tests.)"""
    device = rt.device
    if rt.policy.device_vector_widths or ("Portable Computing Language" in device.platform.name
                                           and device.type & rt.cl.device_type.CPU):
        return 1
    per_group = max(1, -(-_work(eqns)[0] // groups))
    return device_group(rt, min(GROUP_ITEMS, 1 << (per_group - 1).bit_length()))


def _build(rt, group: int, write, spread: tuple | None = None) -> GroupWriter | str:
    """A writer that ``write(writer)`` filled, its values in local memory where they fit in the
    device's, else in global scratch buffers (``spread``: a work-group per row, whose batched values
    are in global scratch, each work-group writing its rows, and the rest in local memory)."""
    local = int(getattr(rt.device, "local_mem_size", 0) or 0) - LOCAL_RESERVE
    writer = GroupWriter(group, spread=spread)
    write(writer)
    if writer.local_bytes > local:
        if spread is not None:
            return "its values besides the rows' do not fit in local memory"
        writer = GroupWriter(group, scratch=True)
        write(writer)
    return writer


def _label(writer: GroupWriter, launches: str, what: str, groups: int = 1) -> str:
    where = "global scratch" if writer.use_scratch else "local memory"
    items = f"{writer.group} work-item{'s' if writer.group > 1 else ''}"
    if writer.rows is not None:
        return (f"{launches} of {groups} work-group{'s' if groups > 1 else ''} of {items}, each running its rows "
                f"of the {writer.rows} members "
                f"(rows in global scratch, the rest in local memory, {writer.local_bytes} bytes), {what}")
    return f"{launches} of one work-group of {items} (values in {where}, {writer.local_bytes} bytes) running {what}"


def _row_axis(e, batched: dict, rows: int):
    """The axis of ``e``'s output along which its rows (of ``rows``) lie, when each row reads only
    the same row of its ``batched`` operands (var -> their rows' axis) and any part of the others;
    else None.  The rules of the layouts ``vmap`` makes."""
    ins = {k: batched[a] for k, a in enumerate(e.inputs) if type(a) is not Literal and a in batched}
    out, prim, p = e.out_vars[0], e.primitive, e.params
    shape, axes = tuple(out.aval.shape), set(ins.values())
    if len(axes) != 1 or len(e.out_vars) != 1 and prim is not random_bits.threefry2x32_p:
        return None
    k = axes.pop()
    found = None
    if fusable(e) or prim is random_bits.threefry2x32_p:
        found = k if all(len(e.inputs[j].aval.shape) == len(shape) for j in ins) else None
    elif prim in REDUCTIONS or prim in (P.argmax_p, P.argmin_p):
        gone = tuple(p["axes"]) if "axes" in p else (p["axis"],)
        found = None if k in gone else k - sum(d < k for d in gone)
    elif prim in (P.cumsum_p, P.cumprod_p, P.rev_p, P.pad_p, P.slice_p, P.concatenate_p):
        x = e.inputs[0]
        same = {P.cumsum_p: lambda: p["axis"] != k, P.cumprod_p: lambda: p["axis"] != k,
                P.rev_p: lambda: k not in p["dimensions"], P.concatenate_p: lambda: p["dimension"] != k,
                P.pad_p: lambda: tuple(p["padding_config"][k]) == (0, 0, 0),
                P.slice_p: lambda: (p["start_indices"][k], p["limit_indices"][k],
                                    (p["strides"] or (1,) * len(shape))[k]) == (0, x.aval.shape[k], 1)}[prim]()
        found = k if same else None
    elif prim is P.broadcast_in_dim_p:
        found = p["broadcast_dimensions"][k]
    elif prim is P.transpose_p:
        found = list(p["permutation"]).index(k)
    elif prim in VIEWS:  # the same elements in order: the axis whose outer and inner extents agree
        before = shape_size(e.inputs[0].aval.shape[:k])
        found = next((j for j in range(len(shape)) if shape[j] == rows and shape_size(shape[:j]) == before), None)
    elif prim is P.dot_general_p:
        _, _, lb, rb, lf, rf = P.dot_dims(len(e.inputs[0].aval.shape), len(e.inputs[1].aval.shape),
                                          p["dimension_numbers"])
        if 0 in ins and ins[0] in lb:  # a batch dimension of the product (the other operand's row too)
            pos = lb.index(ins[0])
            found = pos if ins.get(1, rb[pos]) == rb[pos] else None
        elif 1 in ins and ins[1] in rb and 0 not in ins:
            found = rb.index(ins[1])
        elif set(ins) == {0}:
            found = len(lb) + lf.index(k) if k in lf else None
        elif set(ins) == {1}:
            found = len(lb) + len(lf) + rf.index(k) if k in rf else None
    elif prim is P.take_p:
        nidx = len(e.inputs[1].aval.shape)
        if set(ins) == {0}:
            found = None if k == p["axis"] else k if k < p["axis"] else k + nidx - 1
        elif set(ins) == {1}:
            found = p["axis"] + k
    elif prim is P.scatter_add_p and 1 not in ins and ins.get(0, k) == k != p["axis"]:
        nidx = len(e.inputs[1].aval.shape)
        found = k if ins.get(2, k if k < p["axis"] else k + nidx - 1) == (k if k < p["axis"] else k + nidx - 1) else None
    if found is None or found >= len(shape) or shape[found] != rows:
        return None
    return found


def _rows_form(eqn) -> tuple | str:
    """(rows, the batched values, the guarded predicate or None) of a loop that runs a work-group
    per row -- per member of a ``vmap`` -- or why not: every carry has ``rows`` along axis 0, each
    equation reading a carry's rows is ``_separable`` (its output batched in turn), a while's
    predicate is uniform or ``vmap``'s form (``any`` of a per-row predicate its body guards)."""
    loop = describe_loop(eqn)
    leading = {v.aval.shape[0] if v.aval.shape else None for _, inner, _ in loop.carries for v in inner}
    leading |= {v.aval.shape[0] if v.aval.shape else None for v in loop.ys}
    if len(leading) != 1 or None in leading or next(iter(leading)) < 2:
        return "its carries do not share a leading axis"
    rows = next(iter(leading))
    guard = lane_predicate(eqn, loop, (rows,)) if loop.pred is not None else None
    if isinstance(guard, str):
        return guard
    cond = loop.cond[:-1] if guard is not None else loop.cond
    carries = {v: 0 for _, inner, _ in loop.carries for v in inner}
    # the xs with rows along axis 0 batched too, where every equation reading them keeps to its rows
    # (a gradient's reverse scan reads its residuals per member: each work-group then computes only
    # its members' values from them, not all of them); else the carries' rows alone
    with_xs = {**{v: 0 for _, v in loop.xs if v.aval.shape and v.aval.shape[0] == rows}, **carries}
    batched = _rows_from(cond + loop.eqns, with_xs, rows)
    if isinstance(batched, str):
        batched = _rows_from(cond + loop.eqns, carries, rows)
        if isinstance(batched, str):
            return batched
    if loop.pred is not None and guard is None and loop.pred in batched:
        return "its predicate reads across rows"
    return rows, batched, guard


def _rows_from(eqns: list, seeds: dict, rows: int) -> dict | str:
    """The batched values of ``eqns`` (var -> their rows' axis) from the ``seeds``: each equation
    reading batched values must keep to their rows (``_row_axis``), else why not."""
    batched = dict(seeds)
    for e in eqns:
        if any(type(a) is not Literal and a in batched for a in e.inputs):
            axis = _row_axis(e, batched, rows)
            if axis is None:
                return f"its {e.primitive.name} reads across rows"
            batched.update((v, axis) for v in e.out_vars)
    return batched


def _rows_launch(rt, eqn) -> tuple | None:
    """(rows, batched values, guard, work-groups) when the loop ``eqn`` runs a work-group per row
    (member): a batched loop whose rows do ``ROWS_WORK`` a pass or more (the gpu kind: a
    work-group per row; the cpu kind: one per compute unit -- one work-group for all rows on a
    device of one, bounded per member all the same)."""
    form = _rows_form(eqn)
    if isinstance(form, str) or _run_work(_sub_equations(eqn)) < ROWS_WORK:
        return None
    rows = form[0]
    return (*form, min(rows, compute_units(rt)) if rt.policy.device_vector_widths else rows)


def launch_items(ctx, name: str, group: int) -> int:
    """Work-items of a work-group of kernel ``name``: ``group``, or fewer where the driver allows
    this kernel fewer (CL_KERNEL_WORK_GROUP_SIZE: a large kernel's registers); the kernels read
    their work-group's size, so any size runs them."""
    if group == 1:
        return 1
    cl = ctx.rt.cl
    allowed = ctx.kernels[name].make().get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, ctx.queue.device)
    return 1 << (min(group, int(allowed)).bit_length() - 1)


def group_loop(eqn, rt) -> Lowered | str:
    """The loop ``eqn`` compiled whole as one work-group's loop on ``rt``'s device (or, batched,
    one work-group per row: ``_rows_launch``), or why not."""
    why = _reason([eqn], rt)
    if why is not None:
        return why
    spread = _rows_launch(rt, eqn)
    why = _fits([eqn], rt, spread[0] if spread else 1)
    if why is not None:
        return why
    loop = describe_loop(eqn)
    group = _work_group(rt, [eqn], spread[3] if spread else 1)
    out: dict = {}
    writer = _build(rt, group, lambda w: out.update(zip(("source", "name"), w.loop_source(eqn))), spread)
    if isinstance(writer, str):
        return writer
    sources = [s if isinstance(s, int) else rt.to_device(np.ascontiguousarray(s)) for s in writer.sources]
    carried = slice(writer.carries_at, writer.carries_at + len(loop.carries))
    steps, starts, chunk = scan_chunks(loop, _run_work(loop.cond + loop.eqns))
    name, groups = out["name"], spread[3] if spread else 1
    sized: list = []  # the work-group's size, asked of the driver at the first launch

    def run(ctx, inputs):
        outs = [ctx.alloc(v.aval.shape, v.aval.dtype) for v in eqn.out_vars]
        scratch = [ctx.alloc((n,), d) for d, n in writer.scratch]
        buffers = [inputs[s] if isinstance(s, int) else s for s in sources]
        if not sized:
            sized.append(launch_items(ctx, name, group))
        launch_chunks(ctx, ctx.kernels[name], buffers, carried, outs[:len(loop.carries)],
                      outs[len(loop.carries):] + scratch, loop, starts, chunk, (sized[0] * groups,), (sized[0],))
        for a in scratch:
            ctx.release(a)
        return outs

    what = f"{steps} steps" if loop.length is not None else \
        "each until its rows' predicates are false" if spread and spread[2] is not None else "until the predicate is false"
    launches = "one launch" if len(starts) == 1 else f"{len(starts)} launches ({chunk} steps each)"
    return Lowered(out["source"], [name], run, len(starts),
                   f"{eqn.primitive.name} compiled whole: {_label(writer, launches, what, groups)}", one_unit=groups == 1,
                   replayable=len(starts) == 1)


def program_kernel(closed, rt, inputs: list) -> Lowered | str:
    """The whole program ``closed`` as ONE work-group's kernel (inputs: ``inputs``, its in-vars
    then const-vars; outputs: ``program_outputs``), or why not: it must hold a loop (a program
    without one is the planner's: fused kernels across the device), every equation must have a
    group form (loops nested to any depth), its values fit ``_fits``, and no loop may be a lane
    loop over ``loops.SPREAD_LANES`` lanes or more or run a work-group per member (``_rows_launch``):
    those spread over the device's compute units.  A
    program that is one loop is left to the loop's lowering (a lane loop spreads over the device)."""
    eqns = closed.jaxpr.eqns
    loop_eqns = [e for e in eqns if e.primitive in LOOPS]
    if not loop_eqns:
        return "it has no loop"
    if len(eqns) == 1:
        return "it is one loop: the loop's own lowering is one launch too"
    why = _fits(eqns, rt) or dtypes_reason([v.aval.dtype for v in inputs + program_outputs(closed)], rt)
    if why is not None:
        return why
    work = _run_work(eqns)
    if work > loops.CHUNK_WORK:  # (a scan alone launches in chunks: Ctrl-C lands between them, no watchdog fires)
        return f"its loops run {work} elements' work, over one launch's {loops.CHUNK_WORK}"
    for e in loop_eqns:
        lanes = lane_shape(describe_loop(e))
        if not isinstance(lanes, str) and shape_size(lanes) >= loops.SPREAD_LANES and isinstance(lane_loop(e, rt), Lowered):
            return f"its {e.primitive.name} is a lane loop over {shape_size(lanes)} lanes"
        if (_rows_launch(rt, e) or (0,) * 4)[3] > 1:
            return f"its {e.primitive.name} runs a work-group per member"
    out: dict = {}
    writer = _build(rt, _work_group(rt, eqns), lambda w: out.update(zip(("source", "name"), w.program_source(closed, inputs))))
    outputs = program_outputs(closed)
    name, group = out["name"], writer.group
    sources = [s if isinstance(s, int) else rt.to_device(np.ascontiguousarray(s)) for s in writer.sources]
    sized: list = []  # the work-group's size, asked of the driver at the first launch

    def run(ctx, args):
        outs = [ctx.alloc(v.aval.shape, v.aval.dtype) for v in outputs]
        scratch = [ctx.alloc((n,), d) for d, n in writer.scratch]
        buffers = [args[s] if isinstance(s, int) else s for s in sources]
        if not sized:
            sized.append(launch_items(ctx, name, group))
        ctx.kernels[name](ctx.queue, (sized[0],), (sized[0],), *[a.buffer for a in buffers + outs + scratch])
        for a in scratch:
            ctx.release(a)
        return outs

    return Lowered(out["source"], [name], run, 1,
                   f"the program compiled whole: {_label(writer, 'one launch', f'{len(eqns)} equations, {len(loop_eqns)} loops')}",
                   one_unit=True, replayable=True)
