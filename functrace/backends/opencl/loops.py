"""Lane loops: a ``scan`` (``fori_loop``) or ``while`` whose body is elementwise over one lane shape,
compiled whole into ONE kernel launch (issue 34's first slice).

A loop qualifies when every value of its body (and condition) has shape () -- *uniform* -- or one
common shape S -- a *lane* value --, and every equation is one that generated elementwise kernels
write (``fusion.ELEMENTWISE``: arithmetic, comparisons, selects, conversions, ...), a broadcast of a
uniform value to S (or a broadcast / reshape that keeps the shape), or a ``take`` along axis 0 of a
closed-over *table* of shape (M,) or (M,) + S at a uniform index (``noise[i]`` in a ``fori_loop``).
A scan reads row i of each ``xs`` and writes row i of each ``ys``.  The loop then runs as one
launch: each work-item owns ``vec`` consecutive lanes of S (one on the gpu kind; the device's vector
width on the cpu kind, whose compiler does not vectorize across work-items that loop) and runs every
iteration with the carry in private registers.  Uniform values are computed by every work-item --
the same operations on the same values, so the same bits everywhere -- and work-item 0 stores the
uniform outputs.  Each equation is written by ``fusion.ExprWriter``, as in the fused elementwise
kernels, so a loop's values are those kernels' values (the numpy backend's where theirs are).

A while loop's predicate must be uniform -- every work-item then runs the same iterations -- or have
the form ``vmap`` gives a while whose predicate is batched (``primitives/control.py``): the
condition is ``any`` (reduce_max) of a lane predicate p, and the body keeps each carry where p is
false (``select(p', new, carry)``, p' computing p from the same inputs).  Once a lane's p is false
its carry never changes again, so each lane (each vector of lanes) may stop on its own: the numpy
backend's values, lane by lane.  A while that reduces a predicate it did not guard so (the user's
``any(...)``) runs every lane while any lane's holds: that is not lane-local, and keeps today's
design.

A scan's uniform carry that adds up sums over the lanes every step (a uniform parameter's
cotangent in the reverse scan of a gradient) is held per lane, each lane adding up its own terms;
one more launch adds the lanes' totals after the loop (``_lane_sums``).  A long scan is launched in
chunks of steps (``CHUNK_WORK``).

Anything else -- other reductions, products, gathers of lane values, nested loops, cond, float16
values -- keeps ``control.py``'s designs; ``lane_loop`` then says why, for the compile report.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from ... import primitives as P
from ...core import Literal
from ...primitives import control
from ...transforms.optimize import shape_size
from .fusion import CTYPE, ExprWriter, compute_type, fusable
from .lowerings import QUIET_LOOP_HINTS, Lowered

# A scan's launch runs at most this many lane-equations (lanes x steps x body equations): a longer
# scan is several launches over consecutive steps (~10-50 ms each on a CPU device), at most two in
# flight, so Ctrl-C stops it within a launch or two, and no launch outlasts a GPU's watchdog.
CHUNK_WORK = 1 << 26
# A lane loop over fewer lanes than this is one compute unit's work (``Lowered.one_unit``: it runs
# on the in-thread device, and inside a program compiled whole); one over more spreads over the cores.
SPREAD_LANES = 512
# ... and such a scan of at most this many vectors of lanes runs them all on one work-item, interleaved
# in each step: one core then has that many independent chains of arithmetic in flight, where
# vectors in work-items of their own ran one after another, each a chain the processor waits on at
# every operation (more vectors keep a work-item each: the body copied per vector costs compile time)
INTERLEAVE = 8

# equations whose output is their operand's value in every lane (a broadcast of a uniform value to
# the lane shape, or a broadcast / reshape keeping the shape)
_SAME_VALUE = (P.broadcast_in_dim_p, P.reshape_p)


@dataclass
class _Loop:
    """A scan or while as one description: each const, carry, x and y with the sub-program
    variables bound to it.  An outer value is the position of an equation input, or a sub-program's
    closed-over constant (an array).  ``consts``: (outer, [inner vars]); ``carries``: (outer, [inner
    vars], the body's new value); ``xs``: (outer, inner var); ``ys``: the body's per-step outputs;
    ``cond``: the condition's equations (while), ``pred`` its output; ``eqns``: the body's."""

    consts: list
    carries: list
    xs: list
    ys: list
    eqns: list
    cond: list
    pred: object = None
    length: int | None = None  # scan: its steps
    reverse: bool = False
    sums: set = field(default_factory=set)  # the carries adding up sums over the lanes (see _lane_sums)
    lane_sums: set = field(default_factory=set)  # ... and their reduce_sums, read per lane


def _closed_consts(closed) -> list:
    return [(np.asarray(c), [v]) for v, c in zip(closed.jaxpr.const_vars, closed.consts)]


def describe_loop(eqn) -> _Loop:
    p = eqn.params
    if eqn.primitive is control.scan_p:
        body, nc, nk = p["jaxpr"], p["num_consts"], p["num_carry"]
        ins, outs = body.jaxpr.in_vars, body.jaxpr.outs
        return _Loop([(k, [v]) for k, v in enumerate(ins[:nc])] + _closed_consts(body),
                     [(nc + k, [v], o) for k, (v, o) in enumerate(zip(ins[nc:nc + nk], outs[:nk]))],
                     [(nc + nk + k, v) for k, v in enumerate(ins[nc + nk:])], list(outs[nk:]),
                     list(body.jaxpr.eqns), [], length=p["length"], reverse=p["reverse"])
    cond, body, ncc, nbc = p["cond_jaxpr"], p["body_jaxpr"], p["cond_nconsts"], p["body_nconsts"]
    cin, bin_ = cond.jaxpr.in_vars, body.jaxpr.in_vars
    consts = [(k, [v]) for k, v in enumerate(cin[:ncc])] + [(ncc + k, [v]) for k, v in enumerate(bin_[:nbc])]
    carries = [(ncc + nbc + k, [c, b], o) for k, (c, b, o) in enumerate(zip(cin[ncc:], bin_[nbc:], body.jaxpr.outs))]
    return _Loop(consts + _closed_consts(cond) + _closed_consts(body), carries, [], [], list(body.jaxpr.eqns),
                 list(cond.jaxpr.eqns), pred=cond.jaxpr.outs[0])


def lane_shape(loop: _Loop) -> tuple | str:
    """The one non-() shape of the loop's values, () when all are uniform (consts aside: they may
    be tables), or why there is none."""
    values = [v for _, inner, _ in loop.carries for v in inner] + [v for _, v in loop.xs] + loop.ys
    values += [v for e in loop.cond + loop.eqns for v in e.out_vars]
    shapes = sorted({tuple(v.aval.shape) for v in values} - {()})
    if len(shapes) > 1:
        return f"its values have shapes {shapes[0]} and {shapes[1]}, not one lane shape"
    return shapes[0] if shapes else ()


def _tables(loop: _Loop, lanes: tuple) -> set | str:
    """The consts read only by ``take`` along axis 0 at a uniform index, rows of shape () or the
    lane shape (or why a const is neither uniform, nor lane, nor such a table)."""
    tables = {v for _, inner in loop.consts for v in inner if v.aval.shape not in ((), lanes)}
    for v in tables:
        if v.aval.shape[1:] not in ((), lanes):
            return f"it closes over a value of shape {v.aval.shape} (rows neither lanes nor scalars)"
    for e in loop.cond + loop.eqns:
        for k, a in enumerate(e.inputs):
            if a in tables and not (e.primitive is P.take_p and k == 0 and e.params["axis"] == 0
                                    and e.inputs[1].aval.shape == ()):
                return f"it reads a closed-over value of shape {a.aval.shape} by {e.primitive.name}"
    return tables


def _equation_reason(e, lanes: tuple, tables: set, lane_sums: set) -> str | None:
    """Why equation ``e`` has no lane form, or None."""
    if not e.out_vars or e.primitive.effectful:
        return f"it has {e.primitive.name}"
    if any(tuple(v.aval.shape) not in ((), lanes) for v in e.out_vars):
        return f"it has {e.primitive.name} of shape {e.out_vars[0].aval.shape}"
    if e.primitive is P.take_p and e.inputs[0] in tables or e in lane_sums:
        return None
    shapes = [tuple(a.aval.shape) for a in e.inputs]
    if e.primitive in _SAME_VALUE and shapes[0] in ((), e.out_vars[0].aval.shape):
        return None
    if fusable(e) and all(s in ((), lanes) for s in shapes):
        return None
    return f"it has {e.primitive.name}"


def loop_dtype_reason(eqn, rt) -> str | None:
    """Why the loop's values cannot be lanes (float16, a dtype without a C type, float64 without
    cl_khr_fp64), or None."""
    p = eqn.params
    subs = [p["jaxpr"]] if eqn.primitive is control.scan_p else [p["cond_jaxpr"], p["body_jaxpr"]]
    dtypes = [v.aval.dtype for v in list(eqn.inputs) + [v for s in subs for e in s.jaxpr.eqns for v in e.out_vars]]
    return dtypes_reason(dtypes + [np.asarray(c).dtype for s in subs for c in s.consts], rt,
                         " (lanes are float32, float64, integers or bools)")


def dtypes_reason(dtypes, rt, remark: str = "") -> str | None:
    """Why values of ``dtypes`` cannot be a whole loop's (float16, a dtype without a C type,
    float64 without cl_khr_fp64), or None; ``remark`` follows the dtype's name."""
    for d in dict.fromkeys(np.dtype(d) for d in dtypes):
        if d not in CTYPE or d == np.dtype(np.float16):
            return f"it has {d.name} values{remark}"
        if d == np.dtype(np.float64) and not rt.supports_fp64:
            return "it has float64 values on a device without cl_khr_fp64"
    return None


def _literal_key(a) -> tuple:
    return ("literal", np.asarray(a.val).dtype.str, np.asarray(a.val).tobytes())


def _keys(eqns: list, leaves: dict, ids: dict) -> dict:
    """A number per value, equal for values computed by the same equations from the same leaves
    (``leaves``: var -> key; ``ids`` numbers the structures, shared between calls).  Reshapes that
    keep the shape, or add trailing axes of 1 (vmap's guard), are seen through."""
    key = dict(leaves)

    def of(a):
        return _literal_key(a) if type(a) is Literal else key.get(a, ("unknown", id(a)))

    for e in eqns:
        before, after = tuple(e.inputs[0].aval.shape), tuple(e.out_vars[0].aval.shape)
        if e.primitive is P.reshape_p and after[:len(before)] == before and set(after[len(before):]) <= {1}:
            key[e.out_vars[0]] = of(e.inputs[0])  # (the same shape, or trailing axes of 1: vmap's guard)
            continue
        node = (e.primitive.name, repr(sorted(e.params.items())), tuple(of(a) for a in e.inputs))
        for k, v in enumerate(e.out_vars):
            key[v] = ids.setdefault((node, k), len(ids))
    return key


def lane_predicate(eqn, loop: _Loop, lanes: tuple):
    """For a while whose condition is ``any`` (reduce_max) of a lane predicate p: p, when the body
    keeps every carry where p is false (the form vmap makes: see the module's docstring), else why
    not; None for any other condition."""
    closed_cond, closed_body = eqn.params["cond_jaxpr"], eqn.params["body_jaxpr"]
    cond, body = closed_cond.jaxpr, closed_body.jaxpr
    last = cond.eqns[-1] if cond.eqns and loop.pred is cond.eqns[-1].out_vars[0] else None
    if last is None or last.primitive is not P.reduce_max_p or lanes == () \
            or last.inputs[0].aval.shape != lanes or tuple(last.params["axes"]) != tuple(range(len(lanes))):
        return None
    ncc, nbc = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
    # leaves: consts by the value passed to the loop (vmap passes the condition's to the body too),
    # carries by position
    outer = lambda k: _literal_key(eqn.inputs[k]) if type(eqn.inputs[k]) is Literal else ("input", id(eqn.inputs[k]))
    leaves_c = {v: outer(k) for k, v in enumerate(cond.in_vars[:ncc])}
    leaves_c.update({v: ("carry", k) for k, v in enumerate(cond.in_vars[ncc:])})
    leaves_b = {v: outer(ncc + k) for k, v in enumerate(body.in_vars[:nbc])}
    leaves_b.update({v: ("carry", k) for k, v in enumerate(body.in_vars[nbc:])})
    for leaves, closed in ((leaves_c, closed_cond), (leaves_b, closed_body)):  # closed-over arrays: by value
        leaves.update((v, ("array", np.asarray(c).dtype.str, np.shape(c), np.asarray(c).tobytes()))
                      for v, c in zip(closed.jaxpr.const_vars, closed.consts))
    ids: dict = {}
    p = _keys(cond.eqns, leaves_c, ids)[last.inputs[0]]
    made = {v: e for e in body.eqns for v in e.out_vars}
    body_keys = _keys(body.eqns, leaves_b, ids)
    for k, out in enumerate(body.outs):
        e = made.get(out)
        if e is None or e.primitive is not P.select_p or body_keys.get(e.inputs[0]) != p \
                or e.inputs[2] is not body.in_vars[nbc + k]:
            return "its predicate reduces lane values that its body does not guard (not vmap's form)"
    return last.inputs[0]


def _vector_width(rt, eqn, lanes: int) -> int:
    """Lanes per work-item: the cpu kind's vector width for the widest element type, halved
    while it exceeds the lane count; one on the gpu kind (a work-item per lane keeps a GPU busy)."""
    if not rt.policy.device_vector_widths:
        return 1
    wide = any(v.aval.dtype.itemsize == 8 for v in list(eqn.inputs) + eqn.out_vars)
    dev = rt.device
    vec = rt.policy.vector_width(dev.preferred_vector_width_double if wide else dev.preferred_vector_width_float)
    while vec > lanes:
        vec //= 2
    return vec


def _lane_sums(loop: _Loop, lanes: tuple) -> None:
    """Find the uniform carries that add up sums over the lanes every step -- c's new value a tree
    of adds over c and ``reduce_sum``s of lane values, each used once (a uniform parameter's
    cotangent in a reverse scan) --: each lane then adds up its own terms (the tree evaluated per
    lane, every sum read as its operand), and one more launch adds the lanes' totals to c's initial
    value after the loop (in another order than numpy's: within rounding).  Records the carries in
    ``loop.sums`` and the sums read per lane in ``loop.lane_sums``."""
    if lanes == () or loop.length is None:
        return
    uses: dict = {}
    for a in [a for e in loop.eqns for a in e.inputs] + loop.ys + [new for _, _, new in loop.carries]:
        uses[a] = uses.get(a, 0) + 1
    made = {v: e for e in loop.eqns for v in e.out_vars}

    def tree(v, c):
        """(the sums, whether c is a leaf) of the add tree making v, or None."""
        if v is c:
            return [], True
        e = made.get(v)
        if e is not None and e.primitive is P.reduce_sum_p and e.inputs[0].aval.shape == lanes \
                and tuple(e.params["axes"]) == tuple(range(len(lanes))) and e.inputs[0].aval.dtype == v.aval.dtype:
            return [e], False
        if e is None or e.primitive is not P.add_p or any(uses.get(a) != 1 for a in e.inputs):
            return None
        parts = [tree(a, c) for a in e.inputs]
        return None if None in parts else (parts[0][0] + parts[1][0], parts[0][1] or parts[1][1])

    for k, (_, [c], new) in enumerate(loop.carries):
        found = tree(new, c) if c.aval.shape == () and c.aval.dtype.kind in "fiu" and uses.get(c) == 1 \
            and uses.get(new) == 1 and new is not c else None
        if found is not None and found[1] and found[0]:
            loop.sums.add(k)
            loop.lane_sums.update(found[0])


def _sums_source(name: str, dtypes: list, n: int) -> str:
    """A one-work-item kernel adding each summed carry's lane totals, in lane order, to its initial
    value (parameters: initial value, totals, output, per carry)."""
    params, lines = [], []
    for k, d in enumerate(dtypes):
        st = CTYPE[np.dtype(d)]
        params += [f"__global const {st}* restrict i{k}", f"__global const {st}* restrict t{k}",
                   f"__global {st}* restrict o{k}"]
        lines.append(f"{{ {st} acc = 0; for (long l = 0; l < {n}; l++) acc += t{k}[l]; o{k}[0] = i{k}[0] + acc; }}")
    return f"\n__kernel void {name}({', '.join(params)}) {{\n    " + "\n    ".join(lines) + "\n}"


def scan_chunks(loop: _Loop, step_work: int) -> tuple[int, list, int]:
    """(a scan's steps, the first step of each launch, steps per launch) for a loop doing
    ``step_work`` elements' work per step (a while: one launch)."""
    steps = loop.length if loop.length is not None else 0
    chunk = max(1, CHUNK_WORK // max(1, step_work))
    return steps, list(range(0, steps, chunk)) or [0], chunk


def launch_chunks(ctx, kernel, buffers: list, carried: slice, targets: list, rest: list, loop: _Loop,
                  starts: list, chunk: int, global_size: tuple, local_size) -> None:
    """Launch a whole loop's ``kernel`` once per chunk of steps (``starts``): each launch reads the
    carries from ``buffers[carried]`` and writes them to a set of buffers the next launch reads --
    the last one to ``targets``, the one before a scratch set, and so on -- then the other
    parameters ``rest`` (the ys, scratch) and a scan's step bounds."""
    buffers = list(buffers)
    sets = [targets] + ([[ctx.alloc(a.shape, a.dtype) for a in buffers[carried]]] if len(starts) > 1 else [])
    last = None
    for k, s0 in enumerate(starts):
        target = sets[(len(starts) - 1 - k) % 2]
        bounds = (np.int64(s0), np.int64(min(loop.length, s0 + chunk))) if loop.length is not None else ()
        event = kernel(ctx.queue, global_size, local_size, *[a.buffer for a in buffers + target + rest], *bounds)
        if last is not None:
            last.wait()  # (at most two launches in flight: an interrupt lands between them)
        last, buffers[carried] = event, target
    for a in sets[1] if len(sets) > 1 else []:
        ctx.release(a)


def lane_loop(eqn, rt) -> Lowered | str:
    """The loop ``eqn`` (scan or while) compiled whole as a lane loop on ``rt``'s device, or why it
    is not (see the module's docstring): the one place that decides."""
    loop = describe_loop(eqn)
    lanes = lane_shape(loop)
    if isinstance(lanes, str):
        return lanes
    tables = _tables(loop, lanes)
    if isinstance(tables, str):
        return tables
    guard = lane_predicate(eqn, loop, lanes) if loop.pred is not None else None
    if isinstance(guard, str):
        return guard
    if guard is not None:  # the lane predicate replaces its any(): each lane stops on its own
        loop.cond, loop.pred = loop.cond[:-1], guard
    pred_lanes = guard is not None
    _lane_sums(loop, lanes)
    why = loop_dtype_reason(eqn, rt) or next(filter(None, (_equation_reason(e, lanes, tables, loop.lane_sums)
                                                      for e in loop.cond + loop.eqns)), None)
    if why is None and loop.pred is not None and not pred_lanes and loop.pred.aval.shape != ():
        why = "its predicate is not uniform"
    n = shape_size(lanes)
    if why is None and n == 0:
        why = "its lane shape is empty"
    if why is not None:
        return why
    vec = _vector_width(rt, eqn, n)
    items = -(-n // vec)
    per = items if vec > 1 and n < SPREAD_LANES and loop.length is not None and items <= INTERLEAVE else 1
    work_items = -(-items // per)
    writer = _Writer(loop, lanes, tables, vec, pred_lanes, per)
    source, name = writer.source(eqn)
    # buffers: equation inputs by position; closed-over arrays, literal initial carries and the
    # summed carries' initial totals (zeros) uploaded once
    upload = lambda s: s if isinstance(s, int) else rt.to_device(np.ascontiguousarray(s))
    sources = [upload(s) for s in writer.sources]
    carried = slice(writer.carries_at, writer.carries_at + len(loop.carries))
    sums = sorted(loop.sums)
    sum_inits = [upload(writer.initial(eqn, loop.carries[k][0], loop.carries[k][1][0])) for k in sums]
    sum_name = f"{name}_sums"
    if sums:
        source += _sums_source(sum_name, [loop.carries[k][1][0].aval.dtype for k in sums], n)
    steps, starts, chunk = scan_chunks(loop, n * (len(loop.eqns) + 1))
    # (the cpu kind: work-groups of one item, which PoCL compiles without wrapping the body in a
    # loop over work-items: a faster first launch and steady call, benchmarks/RESULTS.md session 30)
    local_size = (1,) if rt.policy.one_item_work_groups else None

    def run(ctx, inputs):
        outs = [ctx.alloc(v.aval.shape, v.aval.dtype) for v in eqn.out_vars]
        buffers = [inputs[s] if isinstance(s, int) else s for s in sources]
        totals = {k: ctx.alloc(lanes, outs[k].dtype) for k in sums}  # the summed carries' lane totals
        targets = [totals.get(k, o) for k, o in enumerate(outs[:len(loop.carries)])]
        launch_chunks(ctx, ctx.kernels[name], buffers, carried, targets, outs[len(targets):], loop, starts, chunk,
                      (work_items,), local_size)
        if sums:
            args = [a for k, i in zip(sums, sum_inits)
                    for a in (inputs[i] if isinstance(i, int) else i, totals[k], outs[k])]
            ctx.kernels[sum_name](ctx.queue, (1,), (1,), *[a.buffer for a in args])
        for a in totals.values():
            ctx.release(a)
        return outs

    what = f"{steps} steps" if loop.length is not None else \
        "each until its lanes' predicates are false" if pred_lanes else "until the predicate is false"
    launches = "one launch" if len(starts) == 1 else f"{len(starts)} launches ({chunk} steps each)"
    each = f" of {vec} lanes" if vec > 1 else ""
    if per > 1:
        each = f" each running {per} vectors{each} interleaved"
    summed = f"; {len(sums)} carries summed over the lanes by one more launch" if sums else ""
    return Lowered(source, [name] + [sum_name] * bool(sums), run, len(starts) + bool(sums),
                   f"{eqn.primitive.name} compiled whole: {launches} of {work_items} work-item{'s' if work_items > 1 else ''}"
                   f"{each} (lane shape {lanes}) running {what}{summed}", one_unit=n < SPREAD_LANES,
                   replayable=len(starts) == 1)


class KernelParams:
    """A whole loop's kernel parameters, and where each input's buffer comes from (``sources``: an
    equation input's position, or an array to upload once)."""

    def __init__(self):
        self.params: list = []
        self.sources: list = []

    def param(self, dtype, source=None) -> str:
        """A new buffer parameter: an input read from ``source``, or (None) an output."""
        name = f"p{len(self.params)}"
        qual = "" if source is None else "const "
        self.params.append(f"__global {qual}{CTYPE[np.dtype(dtype)]}* restrict {name}")
        if source is not None:
            self.sources.append(source)
        return name


class _Writer(KernelParams):
    """The OpenCL C of one lane loop.  Vector g's lanes are l .. l + vec - 1, l = min(g vec, n - vec):
    the last vector's window may overlap its neighbour's (every read in bounds, every lane a real
    one, so a while's lanes all stop), and it stores only its own lanes, from ``skip`` on.  A
    work-item runs ``per`` vectors, interleaved in each step (a scan's, up to ``INTERLEAVE``), the
    carries of each in private arrays."""

    def __init__(self, loop: _Loop, lanes: tuple, tables: set, vec: int, pred_lanes: bool, per: int = 1):
        self.loop, self.lanes, self.tables, self.vec, self.pred_lanes = loop, lanes, tables, vec, pred_lanes
        self.per = per
        self.n = shape_size(lanes)
        super().__init__()
        self.w = ExprWriter(vec > 1, {}, {}, vec, segment=1)
        self.carries_at = 0  # the first carry's place in ``sources``

    def ctype(self, dtype) -> str:
        return compute_type(CTYPE[np.dtype(dtype)])

    def lane0(self, value: str) -> str:
        """A uniform value as a scalar (a vector holds it in every lane)."""
        return f"({value}).s0" if self.vec > 1 else value

    def load(self, ptr: str, dtype, offset: str, lane: bool) -> str:
        """Element ``offset`` of ``ptr`` (``lane``: plus the work-item's lanes) as a value in
        ExprWriter's form (bools as int masks: 1 / 0 scalars, -1 / 0 lanes of vectors)."""
        st, v = CTYPE[np.dtype(dtype)], self.vec
        index = f"{offset} + l" if lane else offset
        if v == 1:
            return f"((int){ptr}[{index}])" if st == "uchar" else f"{ptr}[{index}]"
        if not lane:
            return f"((int{v})(-(int){ptr}[{index}]))" if st == "uchar" else f"(({st}{v}){ptr}[{index}])"
        raw = f"vload{v}(0, {ptr} + {index})"
        return f"(-convert_int{v}({raw}))" if st == "uchar" else raw

    def store(self, ptr: str, dtype, offset: str, value: str, lane: bool) -> str:
        """C storing ``value`` at element ``offset`` of ``ptr`` (``lane``: the work-item's own lanes;
        else work-item 0 stores the uniform value)."""
        st, v = CTYPE[np.dtype(dtype)], self.vec
        if not lane or v == 1:
            value = value if lane else self.lane0(value)
            value = f"(uchar)({value} != 0)" if st == "uchar" else value
            return f"{ptr}[{offset} + l] = {value};" if lane else f"if (g == 0) {ptr}[{offset}] = {value};"
        if st == "uchar":
            value = f"convert_uchar{v}(-({value}))"
        return (f"if (skip == 0) vstore{v}({value}, 0, {ptr} + {offset} + l); else {{ {st} t_[{v}]; "
                f"vstore{v}({value}, 0, t_); for (int k = skip; k < {v}; k++) {ptr}[{offset} + l + k] = t_[k]; }}")

    def lane(self, k: int) -> bool:
        """Is carry ``k`` held per lane (a lane value, or a uniform one summed over the lanes)?"""
        return k in self.loop.sums or self.loop.carries[k][1][0].aval.shape != ()

    def initial(self, eqn, outer, var):
        """Where carry ``var``'s initial value comes from: an equation input's position, or its
        literal as an array (uploaded once)."""
        a = eqn.inputs[outer]
        return np.asarray(a.val, var.aval.dtype) if type(a) is Literal else outer

    def const(self, eqn, outer, var) -> str:
        """The value of const ``var`` bound to ``outer``: a literal or a closed-over scalar in the
        source, else a parameter read."""
        if isinstance(outer, np.ndarray) and outer.shape == ():
            return self.w.atom(Literal(outer), self.ctype(outer.dtype), "")
        if isinstance(outer, int) and type(eqn.inputs[outer]) is Literal:
            return self.w.atom(eqn.inputs[outer], self.ctype(var.aval.dtype), "")
        return self.load(self.param(var.aval.dtype, outer), var.aval.dtype, "0", var.aval.shape != ())

    def emit(self, e) -> None:
        """Define ``e``'s output: a table's row, a value kept, or ExprWriter's elementwise form."""
        w = self.w
        out = e.out_vars[0]
        ct = self.ctype(out.aval.dtype)
        if e.primitive is P.take_p and e.inputs[0] in self.tables:
            table, index = e.inputs
            rows, row = table.aval.shape[0], table.aval.shape[1:]
            i = f"clamp((long){self.lane0(w.atom(index, self.ctype(index.aval.dtype), ''))}, 0L, {rows - 1}L)"
            row_value = self.load(w.names[table], table.aval.dtype, f"{i} * {shape_size(row)}", row != ())
            w.names[out] = w.fresh(ct, row_value)
        elif e.primitive in _SAME_VALUE or e in self.loop.lane_sums:  # (a lane sum: each lane's own term)
            w.names[out] = w.atom(e.inputs[0], ct, "")
        else:
            w.emit(e, "")

    def window(self, g: str) -> list:
        """Lines naming vector ``g`` (C expression ``g``), its first lane ``l`` and, in vectors, its
        first lane another vector does not store (``skip``)."""
        if self.vec == 1:
            return [f"const long g = {g}, l = g;"]
        return [f"const long g = {g}, l = min(g * {self.vec}, {self.n - self.vec}L);",
                f"const int skip = (int)(g * {self.vec} - l);"]

    def interleaved(self, head: list, carried: list, header: str, tail: list) -> str:
        """The kernel's parameters and body where its one work-item runs all ``per`` vectors: each step runs
        the body once per vector (its window, consts and carries), the carries kept in arrays, the
        loop over the vectors unrolled (the arrays then live in registers)."""
        loop, w, per = self.loop, self.w, self.per
        inner = lambda ls: ["    " + line for line in ls]
        window = ["#pragma unroll", f"for (int j = 0; j < {per}; j++) {{", *inner(self.window("j"))]
        vtypes = [w.vtype(self.ctype(new.aval.dtype)) for _, _, new in loop.carries]
        arrays = [f"{t} c{k}_[{per}];" for k, t in enumerate(vtypes)]
        keep = [f"    c{k}_[j] = c{k};" for k in range(len(vtypes))]
        fetch = [f"    {t} c{k} = c{k}_[j];" for k, t in enumerate(vtypes)]
        body = [*window, *inner(head), *fetch, *inner(w.lines), *keep, "}"]
        lines = lambda ls, indent: ("\n" + " " * indent).join(ls)
        return f"""({', '.join(self.params)}) {{
    {lines(arrays + [*window, *inner(head + carried), *keep, "}"], 4)}
    {header}
        {lines(body, 8)}
    }}
    {lines([*window, *fetch, *inner(tail), "}"], 4)}
}}"""

    def source(self, eqn) -> tuple[str, str]:
        """(the kernel's source, its name)."""
        loop, w, n, vec = self.loop, self.w, self.n, self.vec
        head, carried = [], []
        for k, (outer, inner) in enumerate(loop.consts):
            if inner[0] in self.tables:
                w.names[inner[0]] = self.param(inner[0].aval.dtype, outer)
                continue
            ct = self.ctype(inner[0].aval.dtype)
            head.append(f"const {w.vtype(ct)} k{k} = {self.const(eqn, outer, inner[0])};")
            w.names[inner[0]] = f"k{k}"
        self.carries_at = len(self.sources)
        for k, (outer, inner, _) in enumerate(loop.carries):  # from buffers: a long scan resumes from its last launch's
            v = inner[0]
            init = np.zeros(self.lanes, v.aval.dtype) if k in loop.sums else self.initial(eqn, outer, v)
            ptr = self.param(v.aval.dtype, init)
            value = self.load(ptr, v.aval.dtype, "0", self.lane(k))
            carried.append(f"{w.vtype(self.ctype(v.aval.dtype))} c{k} = {value};")
            w.names.update((v, f"c{k}") for v in inner)
        for outer, v in loop.xs:  # row i of each xs
            lane = v.aval.shape != ()
            ptr = self.param(v.aval.dtype, outer)
            value = self.load(ptr, v.aval.dtype, f"i * {n if lane else 1}", lane)
            w.names[v] = w.fresh(self.ctype(v.aval.dtype), value)
        for e in loop.cond:
            self.emit(e)
        if loop.pred is not None:  # tested after the condition's equations, before the body's
            pred = w.atom(loop.pred, "uchar", "")
            test = (f"any({pred})" if vec > 1 else pred) if self.pred_lanes else self.lane0(pred)
            w.lines.append(f"if (!({test})) break;")
        for e in loop.eqns:
            self.emit(e)
        outs = [self.param(v.aval.dtype) for v in eqn.out_vars]  # carries, then ys
        for ptr, v in zip(outs[len(loop.carries):], loop.ys):  # row i of each ys
            lane = v.aval.shape != ()
            w.lines.append(self.store(ptr, v.aval.dtype, f"i * {n if lane else 1}",
                                      w.atom(v, self.ctype(v.aval.dtype), ""), lane))
        for k, (_, _, new) in enumerate(loop.carries):  # all new values first: a body may swap carries
            ct = self.ctype(new.aval.dtype)
            w.lines.append(f"const {w.vtype(ct)} n{k} = {w.atom(new, ct, '')};")
        w.lines += [f"c{k} = n{k};" for k in range(len(loop.carries))]
        tail = [self.store(ptr, v.aval.dtype, "0", f"c{k}", self.lane(k))
                for k, (ptr, (_, [v, *_], _)) in enumerate(zip(outs, loop.carries))]
        if loop.length is not None:  # steps s0 .. s1 - 1 of the scan
            self.params += ["const long s0", "const long s1"]
            header = (f"for (long s = s0; s < s1; s++) {{\n        const long i = "
                      f"{f'{loop.length - 1} - s' if loop.reverse else 's'};")
        else:
            header = "for (;;) {"
        lines = lambda ls, indent: ("\n" + " " * indent).join(ls)
        if self.per == 1:
            text = f"""({', '.join(self.params)}) {{
    {lines(self.window("get_global_id(0)") + head + carried, 4)}
    {header}
        {lines(w.lines, 8)}
    }}
    {lines(tail, 4)}
}}"""
        else:
            text = self.interleaved(head, carried, header, tail)
        name = f"lane_{eqn.primitive.name}_{hashlib.sha256(text.encode()).hexdigest()[:12]}"
        return f"\n{QUIET_LOOP_HINTS if self.per > 1 else ''}__kernel void {name}{text}", name
