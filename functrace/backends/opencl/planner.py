"""The plan of a jitted program on an OpenCL device: its equations grouped into steps -- fused
elementwise kernels, reductions (absorbing their producers), layout copies, views read in place,
hand-written lowerings, host steps and host segments, batches of small steps -- each knowing how to
run itself.  What runs where, and with which kernel design, is the device kind's policy
(``policy.py``) applied to the estimates of ``placement.py``; ``executable.py`` runs the plan.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ... import primitives as P
from ...core import ClosedJaxpr, Jaxpr, JaxprEqn, Literal
from ...transforms.optimize import aval_nbytes, shape_size
from ..numpy_backend import NumpyExecutable

# the modules of hand-written lowerings, each registering its own (tests/test_primitive_registries.py
# checks that every module of this package that registers one is listed here)
from . import attention, control, conv, gather, norms, random, scans, scatter, softmax, sort  # noqa: F401
from .float16 import lower_in_float32
from .fusion import (
    CTYPE,
    REDUCTIONS,
    VIEW_PRIMS,
    Group,
    View,
    access_for,
    column_reduction_kernel,
    column_tree_kernel,
    compute_type,
    elementwise_kernel,
    fusable,
    group_inputs,
    leading_axes,
    load_scalar,
    reduce_combine,
    reduction_kernel,
    store_scalar,
    tree_reduction_kernel,
    view_after,
)
from .group_loops import program_kernel
from .group_writer import program_outputs
from .layout import LAYOUT_PRIMS, layout_inputs, layout_kernel, run_length
from .lowerings import LOWERINGS, SMALL_ON_HOST, Lowered, OnHost, device_group
from .matmul import lower_with_epilogue
from .placement import compute_units, host_reason
from .runtime import Array

_LOCAL = None  # reductions: work-group size left to the driver
# Work-group sizes the designs ask for; each is cut to what the device allows (``device_group``)
TREE_GROUP = 256  # work-items of a gpu-kind reduction's work-group (a power of two)
COLUMN_TILE = (32, 8)  # a gpu-kind column sum's work-group: neighbouring columns x row lanes
WORK_GROUP = 64  # work-group size of generated elementwise kernels (faster on PoCL than the driver's
                 # choice); the global size is rounded up to it and extra work-items do nothing


class Step:
    """What the executable asks of every step of a plan: the values it ``reads`` and ``writes``
    (for buffer lifetimes), the ``kernel_names`` it launches and how many ``launches`` a call
    makes, its ``host_equations`` (for the report's count), ``run(exe, env, get)`` to enqueue
    its kernels or compute on the host with the call's values in ``env`` (``get(v)`` materializes
    a view), and ``describe()``: its lines of the compile report."""

    kernel_names: list = []
    launches = 1
    host_equations = 0
    one_unit = False  # is each launch one work-group (``Lowered.one_unit``)?

    def _eqn_names(self) -> str:
        return ", ".join(e.primitive.name for e in self.eqns)


@dataclass
class KernelStep(Step):
    """A generated elementwise (or layout) kernel over ``n`` elements."""

    name: str
    inputs: list
    outputs: list
    global_size: int
    n: int
    eqns: list
    source: str | None = None  # a small step's kernel, not in the program: see _batch_small_steps
    host_reason: str = ""  # ... and why it is not worth a launch of its own
    local: int = WORK_GROUP  # its work-group size (a power of two dividing global_size)

    reads = property(lambda self: self.inputs)
    writes = property(lambda self: self.outputs)
    kernel_names = property(lambda self: [self.name])
    items = property(lambda self: self.global_size)  # work-items of its launch
    scalar_args = property(lambda self: [f"{self.n}L"])  # after its buffers, as a batch calls it

    def run(self, exe, env, get) -> None:
        outs = [exe._alloc(v.aval.shape, v.aval.dtype) for v in self.outputs]
        bufs = [get(b).buffer for b in self.inputs] + [o.buffer for o in outs]
        exe.kernels[self.name](exe.rt.queue, (self.global_size,), (self.local,), *bufs, np.int64(self.n))
        env.update(zip(self.outputs, outs))

    def describe(self) -> list:
        return [f"  kernel  {self.name}: {self._eqn_names()}"]


@dataclass
class ReduceStep(Step):
    """A generated reduction kernel (and a kernel combining its chunks' partial results)."""

    name: str
    inputs: list
    output: object
    chunks: int
    n_out: int
    items: int | tuple  # global size of the (first) kernel
    eqns: list
    finish: str | None = None  # second-pass kernel combining chunk partials
    local: int | tuple | None = None  # the (first) kernel's work-group size, when its design fixes one
    partial_dtype: np.dtype | None = None  # of the chunks' partial results (None: the output's)
    source: str | None = None  # a small step's kernel, not in the program: see _batch_small_steps
    host_reason: str = ""  # ... and why it is not worth a launch of its own
    scalar_args = ()

    outputs = property(lambda self: [self.output])
    reads = property(lambda self: self.inputs)
    writes = property(lambda self: [self.output])
    kernel_names = property(lambda self: [self.name] + ([self.finish] if self.finish else []))
    launches = property(lambda self: 2 if self.finish else 1)

    def run(self, exe, env, get) -> None:
        queue, kernels = exe.rt.queue, exe.kernels
        out = exe._alloc(self.output.aval.shape, self.output.aval.dtype)
        bufs = [get(b).buffer for b in self.inputs]
        items = self.items if isinstance(self.items, tuple) else (self.items,)
        local = self.local if isinstance(self.local, tuple) else (self.local,) if self.local else _LOCAL
        if self.finish is None:
            kernels[self.name](queue, items, local, *bufs, out.buffer)
        else:
            partial = exe._alloc((self.n_out * self.chunks,), self.partial_dtype or self.output.aval.dtype)
            kernels[self.name](queue, items, local, *bufs, partial.buffer)
            kernels[self.finish](queue, (self.n_out,), _LOCAL, partial.buffer, out.buffer)
            partial.recycle()
        env[self.output] = out

    def describe(self) -> list:
        return [f"  kernel  {self.name}: {self._eqn_names()}"]


@dataclass
class BatchStep(Step):
    """Consecutive small steps run by one launch of a kernel that does their work-items one after
    another in a single work-item: on a CPU device each of them alone costs less than a launch."""

    name: str
    steps: list    # the KernelSteps / ReduceSteps it runs, in order
    inputs: list   # buffers it reads that none of its steps writes
    outputs: list  # the values it writes that later steps read
    args: list     # the kernel's buffer arguments, in order (then the scratch buffer, if any)
    scratch: int   # bytes of scratch for the values it keeps to itself

    eqns = property(lambda self: [e for s in self.steps for e in s.eqns])
    reads = property(lambda self: self.inputs)
    writes = property(lambda self: self.outputs)
    kernel_names = property(lambda self: [self.name])

    def run(self, exe, env, get) -> None:
        for v in self.outputs:
            env[v] = exe._alloc(v.aval.shape, v.aval.dtype)
        scratch = [exe._scratch[self.name].buffer] if self.scratch else []
        exe.kernels[self.name](exe.rt.queue, (1,), (1,), *[get(v).buffer for v in self.args], *scratch)

    def describe(self) -> list:
        return [f"  kernel  {self.name}: {len(self.steps)} small steps in one launch (one work-item)"] + \
               [f"    {s.name}: {s._eqn_names()}" for s in self.steps]


@dataclass
class HostStep(Step):
    """An equation for the host, while planning: runs of them become ``HostSegment``s."""

    eqn: object
    reason: str  # why it runs on the host (for the report)
    launches = 0

    reads = property(lambda self: [a for a in self.eqn.inputs if type(a) is not Literal])
    writes = property(lambda self: list(self.eqn.out_vars))


_NO_FP64 = "float64 on a device without cl_khr_fp64"
_NO_HALF_LOWERING = "float16: this hand-written kernel has no float16 form (only generated kernels read float16)"
_EFFECT = "effectful: {} runs on the host, in program order"


@dataclass
class HostSegment(Step):
    """Consecutive host steps run as one generated numpy function (see ``numpy_backend``)."""

    eqns: list
    reasons: list  # per equation, why it runs on the host
    inputs: list
    outputs: list
    compute: object  # the NumpyExecutable: host values of ``inputs`` -> values of ``outputs``
    launches = 0

    reads = property(lambda self: self.inputs)
    writes = property(lambda self: self.outputs)
    host_equations = property(lambda self: len(self.eqns))

    def run(self, exe, env, get) -> None:
        ins = [exe._host_value(env, v) for v in self.inputs]
        for v, r in zip(self.outputs, self.compute(*ins)):
            env[v] = Array.from_host(exe.rt, np.asarray(r, dtype=v.aval.dtype).reshape(v.aval.shape))

    def describe(self) -> list:
        return [f"  host    {e.primitive.name} (numpy on the host; {why})" for e, why in zip(self.eqns, self.reasons)]


@dataclass
class LoweredStep(Step):
    """An equation run by hand-written kernels (see ``lowerings.py``)."""

    eqn: object
    lowered: object

    reads = property(lambda self: [a for a in self.eqn.inputs if type(a) is not Literal])
    writes = property(lambda self: list(self.eqn.out_vars))
    kernel_names = property(lambda self: self.lowered.kernel_names)
    launches = property(lambda self: self.lowered.launches)
    one_unit = property(lambda self: self.lowered.one_unit)

    def run(self, exe, env, get) -> None:
        outs = self.lowered.run(exe._launch_ctx, [None if type(a) is Literal else get(a) for a in self.eqn.inputs])
        env.update(zip(self.eqn.out_vars, outs))

    def describe(self) -> list:
        return [f"  kernel  {self.eqn.primitive.name}: {self.lowered.label}"]


@dataclass
class ProgramStep(Step):
    """The whole program run by one work-group's kernel (``group_loops.program_kernel``)."""

    inputs: list   # the program's in-vars, then its const-vars
    outputs: list  # the outputs its equations make, each once
    lowered: object

    reads = property(lambda self: list(self.inputs))
    writes = property(lambda self: list(self.outputs))
    kernel_names = property(lambda self: self.lowered.kernel_names)
    launches = property(lambda self: self.lowered.launches)
    one_unit = property(lambda self: self.lowered.one_unit)

    def run(self, exe, env, get) -> None:
        env.update(zip(self.outputs, self.lowered.run(exe._launch_ctx, [get(a) for a in self.inputs])))

    def describe(self) -> list:
        return [f"  kernel  program: {self.lowered.label}"]


@dataclass
class Plan:
    steps: list = field(default_factory=list)
    sources: list = field(default_factory=list)
    views: dict = field(default_factory=dict)  # var -> the View of another buffer it is
    view_eqns: dict = field(default_factory=dict)  # view var -> the equation defining it
    kernel_of_source: dict = field(default_factory=dict)  # source with its name blanked -> name
    note: str = ""  # why the program is not compiled whole though it could be (for the report)

    def add_lowered(self, lowered) -> None:
        """Add a hand-written lowering's source and its shared kernels, each once (a shared kernel's
        name determines its source: two products may permute an operand the same way)."""
        for src in [lowered.source, *lowered.shared.values()]:
            if src not in self.sources:
                self.sources.append(src)

    def add_kernel(self, name: str, source: str) -> str:
        """Add a generated kernel, or return the name of an identical one added before (PoCL
        compiles each distinct kernel at its first launch: repeated layers share one)."""
        key = source.replace(name, "@")
        if key not in self.kernel_of_source:
            self.kernel_of_source[key] = name
            self.sources.append(source)
        return self.kernel_of_source[key]


def _is_view(eqn) -> bool:
    if eqn.primitive not in VIEW_PRIMS or type(eqn.inputs[0]) is Literal:
        return False
    return eqn.out_vars[0].aval.dtype in CTYPE


def plan_program(closed: ClosedJaxpr, rt=None, whole: bool = True) -> Plan:
    """Partition equations into fused elementwise kernels, reductions (absorbing their producers),
    views and host steps, in an order that respects every dependency.  Work is O(N log N) in the
    number of equations (a deep chain's gradient has tens of thousands).  First (``whole``): the
    whole program as one work-group's kernel, where ``group_loops.program_kernel`` takes it."""
    jaxpr = closed.jaxpr
    plan = Plan()
    inputs = list(jaxpr.in_vars) + list(jaxpr.const_vars)
    lowered = program_kernel(closed, rt, inputs) if rt is not None and whole else None
    if isinstance(lowered, Lowered):  # a small program holding loops: one work-group's kernel (group_loops.py)
        plan.add_lowered(lowered)
        plan.steps = [ProgramStep(inputs, program_outputs(closed), lowered)]
        return plan
    position = {e: i for i, e in enumerate(jaxpr.eqns)}
    order, group_of = _partition(jaxpr, rt, plan)
    for kind, item in order:
        if kind == "group":
            item.eqns.sort(key=position.__getitem__)
    consumers = _consumers(order, plan)
    program_outs = {a for a in jaxpr.outs if type(a) is not Literal}
    absorbed = _absorbed_groups(order, group_of, consumers, plan, program_outs)
    _emit_steps(plan, order, absorbed, consumers, program_outs, group_of, rt)
    _batch_small_steps(plan, rt, program_outs)
    plan.steps = _host_segments(plan.steps, program_outs, plan, position)
    return plan


def _partition(jaxpr: Jaxpr, rt, plan: Plan) -> tuple[list, dict]:
    """One pass over the equations: views go to ``plan.views``; elementwise equations of one
    output shape join a group (merging the open groups they read); the rest stay alone.  Returns
    the items -- ("group", Group) | ("eqn", eqn) | ("lowered", (eqn, Lowered)) -- in program order of
    their last equation, and {value: the group that makes it}."""
    group_of: dict = {}
    order: dict = {}  # id(item) -> item (a dict: a group that grows moves to the end in O(1))

    def seal_inputs(eqn):
        for a in eqn.inputs:
            g = group_of.get(a)
            if g is not None:
                g.sealed = True

    fused_at, absorbed_eqns = _matmul_epilogues(jaxpr, rt)
    for eqn in jaxpr.eqns:
        if eqn in absorbed_eqns:
            continue
        if eqn in fused_at:
            seal_inputs(fused_at[eqn][0])
            order[id(fused_at[eqn])] = ("lowered", fused_at[eqn])
        elif eqn.primitive.effectful:  # a host step, in program order
            seal_inputs(eqn)
            order[id(eqn)] = ("eqn", eqn)
        elif _is_view(eqn):
            plan.view_eqns[eqn.out_vars[0]] = eqn
            src = eqn.inputs[0]
            view = view_after(eqn, plan.views.get(src) or View.of(src))
            if view is None:
                seal_inputs(eqn)
                order[id(eqn)] = ("eqn", eqn)
                continue
            plan.views[eqn.out_vars[0]] = view
            g = group_of.get(src)
            if g is not None:
                g.sealed = True
        elif fusable(eqn):
            g = _join_group(eqn, group_of, order)
            order[id(g)] = ("group", g)
        else:
            seal_inputs(eqn)
            order[id(eqn)] = ("eqn", eqn)
    return list(order.values()), group_of


# A fused group stops growing at this many equations: the driver's compile time grows faster than
# linearly in a kernel's length
MAX_GROUP_EQNS = 256


def _join_group(eqn, group_of: dict, order: dict) -> Group:
    """The group ``eqn`` joins: the open groups of its shape that it reads, merged into the
    largest (both open: no outside step reads them yet; equations are put in program order once,
    when planning is done), else a new one.  Groups of other shapes that it reads are sealed."""
    shape = eqn.out_vars[0].aval.shape
    cands = []
    for a in eqn.inputs:
        g = group_of.get(a)
        if g is None:
            continue
        if g.shape == shape and not g.sealed and len(g.eqns) < MAX_GROUP_EQNS:
            if all(c is not g for c in cands):
                cands.append(g)
        else:
            g.sealed = True
    if cands:
        g = max(cands, key=lambda c: len(c.eqns))
        for other in cands:
            if other is not g:
                g.eqns += other.eqns
                for e in other.eqns:
                    for v in e.out_vars:
                        group_of[v] = g
                del order[id(other)]
        del order[id(g)]
    else:
        g = Group(shape)
    g.eqns.append(eqn)
    for v in eqn.out_vars:
        group_of[v] = g
    return g


def _consumers(order: list, plan: Plan) -> dict:
    """{value: the ids of the items (and views) that read it}."""
    consumers: dict = {}
    for kind, item in order:
        eqns = item.eqns if kind == "group" else [item[0]] if kind == "lowered" else [item]
        for e in eqns:
            for a in e.inputs:
                if type(a) is not Literal:
                    consumers.setdefault(a, set()).add(id(item))
    for v, view in plan.views.items():
        consumers.setdefault(view.base, set()).add(("view", id(v)))
    return consumers


def _absorbed_groups(order: list, group_of: dict, consumers: dict, plan: Plan, program_outs: set) -> set:
    """The ids of the groups a reduction absorbs: the group making its operand, when nothing else
    reads that group's values (``sum(x * y, axis)`` is one kernel)."""
    absorbed = set()
    for kind, item in order:
        if kind == "eqn" and item.primitive in REDUCTIONS and item.out_vars[0].aval.dtype in CTYPE:
            x = item.inputs[0]
            g = group_of.get(x)
            if g is None or id(g) in absorbed or x in plan.views or x in program_outs \
                    or consumers.get(x) != {id(item)}:
                continue
            if all(v is x or not (consumers.get(v, set()) - {id(g)} or v in program_outs) for v in g.produced()):
                absorbed.add(id(g))
    return absorbed


def _matmul_epilogues(jaxpr: Jaxpr, rt) -> tuple[dict, set]:
    """``act(dot_general(x, y) + bias)`` (act: tanh, max(., 0) or none) whose intermediate values
    nothing else reads, as one matmul with a fused epilogue: {the chain's last equation: (an
    equation reading x, y, bias and writing its result, the Lowered)}, and the equations absorbed."""
    if rt is None:
        return {}, set()
    uses: dict = {}
    for v in [a for e in jaxpr.eqns for a in e.inputs] + list(jaxpr.outs):
        if type(v) is not Literal:
            uses[v] = uses.get(v, 0) + 1
    made_by = {v: e for e in jaxpr.eqns for v in e.out_vars}
    only_reader = {a: e for e in jaxpr.eqns for a in e.inputs if type(a) is not Literal and uses[a] == 1}
    fused_at, absorbed = {}, set()
    for add in jaxpr.eqns:
        if add.primitive is not P.add_p or any(type(a) is Literal for a in add.inputs):
            continue
        for dot_out, bias in (add.inputs, add.inputs[::-1]):
            dot = made_by.get(dot_out)
            if dot is not None and dot.primitive is P.dot_general_p and uses[dot_out] == 1 and bias.aval.ndim == 1:
                break
        else:
            continue
        last, act = add, "none"
        nxt = only_reader.get(add.out_vars[0])
        if nxt is not None and nxt.primitive is P.tanh_p:
            last, act = nxt, "tanh"
        elif nxt is not None and nxt.primitive is P.max_p and any(
                type(a) is Literal and np.all(np.asarray(a.val) == 0) for a in nxt.inputs):
            last, act = nxt, "relu"
        lowered = lower_with_epilogue(dot, bias, act, rt)
        if lowered is None:
            continue
        fused = JaxprEqn(dot.primitive, [*dot.inputs, bias], dot.params, list(last.out_vars))
        fused_at[last] = (fused, lowered)
        absorbed.update(e for e in (dot, add, nxt if last is nxt else None) if e is not None and e is not last)
    return fused_at, absorbed


def _host_segments(steps: list, program_outs: set, plan: Plan, position: dict) -> list:
    """Merge each run of consecutive host steps into one ``HostSegment``: a single generated
    numpy function, with ``Array`` wrapping only at its boundary."""
    views = plan.views
    last_read: dict = {}  # value -> index of the last step reading it (or a view of it)
    for i, s in enumerate(steps + [None]):
        if s is None:
            reads = program_outs
        else:
            eqns = [s.eqn] if isinstance(s, (HostStep, LoweredStep)) else s.eqns
            reads = [a for e in eqns for a in e.inputs if type(a) is not Literal] + list(getattr(s, "inputs", ()))
        for a in reads:
            last_read[a] = i
            if a in views:
                last_read[views[a].base] = i
    out, run = [], []
    for i, s in enumerate(steps + [None]):
        if isinstance(s, HostStep):
            run.append(i)
            continue
        if run:
            reason = {steps[j].eqn: steps[j].reason for j in run}
            eqns = list(reason)
            made = {v for e in eqns for v in e.out_vars}
            # a view read here of a value made here: its (skipped) reshape/broadcast joins the segment
            # (view_eqns also holds reshapes that could not be views: those are computed values)
            pending = [a for e in eqns for a in e.inputs if a in views]
            while pending:
                v = pending.pop()
                if v not in made and views[v].base in made:
                    eqns.append(plan.view_eqns[v])
                    reason[plan.view_eqns[v]] = "a view of a value computed on the host"
                    made.add(v)
                    pending.extend(a for a in plan.view_eqns[v].inputs if a in views)
            eqns.sort(key=position.__getitem__)
            produced = [v for e in eqns for v in e.out_vars]
            inputs = list(dict.fromkeys(a for e in eqns for a in e.inputs
                                        if type(a) is not Literal and a not in made))
            outputs = [v for v in produced if last_read.get(v, -1) > run[-1]]
            sub = ClosedJaxpr(Jaxpr([], inputs, eqns, outputs), [])
            out.append(HostSegment(eqns, [reason[e] for e in eqns], inputs, outputs, NumpyExecutable(sub)))
            run = []
        if s is not None:
            out.append(s)
    return out


def _accesses(plan: Plan, inputs: list, kernel_shape: tuple) -> tuple[dict, list]:
    """Access patterns of kernel inputs (views read their base buffer); returns (accesses, buffers)."""
    accesses, buffers = {}, []
    for v in inputs:
        view = plan.views.get(v)
        accesses[v] = access_for(kernel_shape, v.aval.shape, view)
        buffers.append(view.base if view is not None else v)
    return accesses, buffers


def _emit_steps(plan: Plan, order, absorbed, consumers, program_outs, group_of, rt) -> None:
    """The steps of each planned item, in order: a group's fused kernel, a reduction's kernel(s)
    (with the group it absorbed), a layout kernel, a hand-written lowering, or host steps.
    ``k`` numbers the generated kernels (each helper returns its steps and whether it took a
    number)."""
    k = 0
    for kind, item in order:
        if kind == "group":
            if id(item) in absorbed:
                continue
            outputs = [v for e in item.eqns for v in e.out_vars
                       if (consumers.get(v, set()) - {id(item)}) or v in program_outs]
            steps, numbered = _group_steps(plan, rt, item, outputs, k) if outputs else ([], False)
        elif kind == "lowered":  # a matmul with its epilogue (see _matmul_epilogues)
            steps, numbered = _lowered_steps(plan, *item), False
        elif item.primitive in REDUCTIONS and item.out_vars[0].aval.dtype in CTYPE \
                and item.inputs[0].aval.dtype in CTYPE:
            g = group_of.get(item.inputs[0])
            steps, numbered = _reduction_steps(plan, rt, item, g if id(g) in absorbed else None, k)
        elif item.primitive in LAYOUT_PRIMS and _kernel_dtype_ok(rt, item.out_vars[0].aval.dtype):
            steps, numbered = _layout_steps(plan, rt, item, k), True
        elif item.primitive.effectful:
            steps, numbered = [HostStep(item, _EFFECT.format(item.primitive.name))], False
        else:
            lowered = _lower(item, rt) if rt is not None else None
            if isinstance(lowered, OnHost):
                steps = [HostStep(item, lowered.reason)]
            elif lowered is None:
                steps = [HostStep(item, _dtype_reason(rt, [item]))]
            elif (touched := SMALL_ON_HOST.get(item.primitive)) is not None \
                    and (why := host_reason(rt, [item], touched(item), _after_kernel(plan))):
                steps = [HostStep(item, why)]
            else:
                steps = _lowered_steps(plan, item, lowered)
            numbered = False
        plan.steps += steps
        k += numbered


def _lower(eqn, rt) -> Lowered | OnHost | None:
    """The equation's hand-written lowering (``OnHost``: the lowering chose the host; None: no
    lowering); for one with float16 values, that of its float32 twin with conversions around it
    where the lowering has no float16 form (see ``float16.py``)."""
    fn = LOWERINGS.get(eqn.primitive)
    if fn is None:
        return None
    lowered = fn(eqn, rt)
    if lowered is None:
        lowered = lower_in_float32(fn, eqn, rt)
    return lowered


def _after_kernel(plan: Plan) -> bool:
    """Does the program's last step so far launch a kernel (a matmul only once decided for one)?"""
    return bool(plan.steps) and plan.steps[-1].launches > 0


def _lowered_steps(plan: Plan, eqn, lowered) -> list:
    plan.add_lowered(lowered)
    return [LoweredStep(eqn, lowered)]


def _group_steps(plan: Plan, rt, g: Group, outputs: list, k: int) -> tuple[list, bool]:
    """A fused elementwise group writing ``outputs``: one generated kernel."""
    if _unfit_dtype(rt, g.eqns) is not None:
        return [HostStep(e, _dtype_reason(rt, g.eqns)) for e in g.eqns], False
    ins = group_inputs(g)
    accesses, buffers = _accesses(plan, ins, g.shape)
    ops = "_".join(dict.fromkeys(e.primitive.name for e in g.eqns))[:60]
    name = f"fused{k}_{ops}"
    vec = _vector_width(rt, g.eqns)
    n = shape_size(g.shape)
    items = -(-max(1, -(-n // vec)) // WORK_GROUP) * WORK_GROUP
    source = lambda: elementwise_kernel(name, g, outputs, accesses, vec, _streaming(rt, ins + outputs))[0]
    step = KernelStep(name, buffers, outputs, items, n, list(g.eqns), local=device_group(rt, WORK_GROUP))
    return _kernel_steps(plan, rt, step, source, n), True


def _reduction_steps(plan: Plan, rt, item, g: Group | None, k: int) -> tuple[list, bool]:
    """A reduction (``g``: the group making its operand, which it absorbs): a column kernel, or
    one over chunks of each output's terms with a kernel combining the chunks."""
    x = item.inputs[0]
    eqns = (list(g.eqns) if g is not None else []) + [item]
    if _unfit_dtype(rt, eqns) is not None:
        return [HostStep(e, _dtype_reason(rt, eqns)) for e in eqns], False
    n_out = shape_size(item.out_vars[0].aval.shape)
    R = shape_size([x.aval.shape[d] for d in item.params["axes"]])
    chunks = 1 if n_out >= 64 or R < 8192 else min(256, -(-R // 4096))
    if g is not None:
        accesses, buffers = _accesses(plan, group_inputs(g), x.aval.shape)
    else:
        accesses, buffers = _accesses(plan, [x], x.aval.shape)
    name = f"{item.primitive.name}{k}" + ("_" + "_".join(dict.fromkeys(e.primitive.name for e in g.eqns))[:50]
                                          if g is not None else "")
    vec = _vector_width(rt, eqns)
    items, local, strided = n_out * chunks, None, False
    # the gpu kind's slices keep float16 partial results in float (the cpu kind's: in float16)
    wide_partials = rt is not None and rt.policy.tree_reductions and item.out_vars[0].aval.dtype == np.float16
    cols = device_group(rt, COLUMN_TILE[0])
    if rt is not None and rt.policy.tree_reductions and leading_axes(item) and n_out >= cols:
        # column sums: work-groups of neighbouring columns x row lanes over slices of the rows,
        # enough slices to fill the device, each lane at least 16 rows
        lanes = device_group(rt, COLUMN_TILE[1], axis=1, beside=cols)
        blocks = -(-n_out // cols)
        chunks = max(1, min(-(-R // (16 * lanes)), -(-512 // blocks)))
        items, local, strided = (blocks * cols, chunks * lanes), (cols, lanes), True
        source = lambda: column_tree_kernel(name, item, g, accesses, chunks, cols, lanes)[0]
    elif rt is not None and rt.policy.tree_reductions:
        # a work-group per output (or per slice of one, when few outputs have many terms: enough
        # groups to fill the device)
        local = device_group(rt, TREE_GROUP)
        chunks = 1 if n_out >= 4 * TREE_GROUP or R < 64 * local else min(1024, -(-R // (64 * local)))
        items = n_out * chunks * local
        source = lambda: tree_reduction_kernel(name, item, g, accesses, chunks, local)[0]
    elif leading_axes(item) and item.out_vars[0].aval.dtype.kind == "f" and n_out >= vec:
        chunks, items = 1, -(-n_out // vec)
        source = lambda: column_reduction_kernel(name, item, g, accesses, vec)[0]
    else:
        source = lambda: reduction_kernel(name, item, g, accesses, chunks, vec)[0]
    if chunks > 1 and (why := host_reason(rt, eqns, shape_size(x.aval.shape), _after_kernel(plan))):  # two launches: not batched
        return [HostStep(e, why) for e in eqns], False
    finish = None
    if chunks > 1:  # named from this step's own kernel name: unique whatever add_kernel shares
        finish = plan.add_kernel(f"{name}_combine", _combine_source(f"{name}_combine", item, chunks, strided,
                                                                    "float" if wide_partials else None))
    step = ReduceStep(name, buffers, item.out_vars[0], chunks, n_out, items, eqns, finish, local=local,
                      partial_dtype=np.dtype(np.float32) if wide_partials else None)
    return _kernel_steps(plan, rt, step, source, shape_size(x.aval.shape)), True


def _layout_steps(plan: Plan, rt, item, k: int) -> list:
    """A layout equation (pad, concatenate, a copy that is not a view): one generated kernel,
    each input read in its own contiguous index space."""
    n = shape_size(item.out_vars[0].aval.shape)
    accesses, buffers = {}, []
    for v in layout_inputs(item):
        acc, buf = _accesses(plan, [v], v.aval.shape)
        accesses.update(acc)
        buffers += buf
    name = f"{item.primitive.name}{k}"
    run = run_length(item, accesses)
    items = -(-max(1, n // run) // WORK_GROUP) * WORK_GROUP
    step = KernelStep(name, buffers, list(item.out_vars), items, n // run, [item], local=device_group(rt, WORK_GROUP))
    return _kernel_steps(plan, rt, step, lambda: layout_kernel(name, item, accesses, run), n)


def _streaming(rt, values: list) -> bool:
    """Should a kernel over ``values`` store its outputs past the caches?  On the cpu kind, when
    its data outgrow the last-level cache: stores that miss it read each line first (write
    allocate), a third more memory traffic for ``x * y + z``."""
    if rt is None or not rt.policy.streaming_stores:
        return False
    cache = cache_bytes(rt)
    return cache > 0 and sum(aval_nbytes(v.aval) for v in values) > cache


def cache_bytes(rt) -> int:
    """The device's global memory cache (PoCL: the CPU's last-level cache); 0 when unknown."""
    return int(getattr(rt.device, "global_mem_cache_size", 0) or 0)


def _kernel_steps(plan: Plan, rt, step, source: Callable[[], str], elements: int) -> list:
    """``step`` running the kernel ``source()``: in the program, or, for a step too small to be
    worth a launch of its own on a CPU device, held back for ``_batch_small_steps`` -- or, on a
    driver that does not batch small steps, host steps at once (the kernel source, a third of the
    compile time of a deep chain of small steps, is then never generated)."""
    why = host_reason(rt, step.eqns, elements, _after_kernel(plan))
    if why is None:
        step.name = plan.add_kernel(step.name, source())
    elif _batch_min_eqns(rt) == float("inf"):
        return [HostStep(e, why) for e in step.eqns]
    else:
        step.source = source()
        step.host_reason = why
    return [step]


def _batch_min_eqns(rt) -> float:
    """Equations a run of small steps needs to be batched into one launch rather than run on the
    host: two on a driver that runs kernels in the calling thread (a launch costs about a numpy
    call or two); never on one that hands kernels to worker threads (a launch and its wait cost
    more than the numpy calls they would save)."""
    return 2 if compute_units(rt) <= 1 else float("inf")


def _batch_small_steps(plan: Plan, rt, program_outs: set) -> None:
    """Each run of consecutive small steps becomes one ``BatchStep`` (a single launch); a run with
    too little work for even one launch runs on the host instead."""
    base = lambda v: plan.views[v].base if v in plan.views else v
    last_read: dict = {}  # buffer -> the last step reading it (the outputs: one past the end)
    for i, step in enumerate(plan.steps):
        last_read.update((base(a), i) for a in step.reads)
    last_read.update((base(v), len(plan.steps)) for v in program_outs)
    out, run = [], []

    def flush(end: int):
        if sum(len(s.eqns) for s in run) >= _batch_min_eqns(rt):
            out.append(_batch(plan, list(run), len(out), lambda v: last_read.get(v, -1) >= end))
        else:
            out.extend(HostStep(e, s.host_reason) for s in run for e in s.eqns)
        run.clear()

    for i, step in enumerate(plan.steps):
        if getattr(step, "source", None) is not None:
            run.append(step)
            continue
        if run:
            flush(i)
        out.append(step)
    if run:
        flush(len(plan.steps))
    plan.steps = out


_SCRATCH_ALIGN = 128  # bytes: each value a batch keeps to itself starts on a vector-load boundary


def _batch(plan: Plan, steps: list, index: int, needed: Callable) -> BatchStep:
    """One kernel calling each step's kernel body, as a function of its work-item id, over the
    step's whole range: the steps' kernels with ``__kernel`` and ``get_global_id(0)`` rewritten.
    Values no later step reads (``needed(v)`` is false) live at fixed offsets of one scratch
    buffer (no allocations)."""
    made = {v for s in steps for v in s.outputs}
    ptr, args, params, scratch = {}, [], [], 0
    for s in steps:
        for v in list(s.inputs) + s.outputs:
            if v in ptr:
                continue
            ct = CTYPE[v.aval.dtype]
            if v in made and not needed(v):
                ptr[v] = f"((__global {ct}*)(scratch + {scratch}))"
                # (an empty value still gets a distinct, in-bounds place: the parameter must exist)
                scratch += max(-(-aval_nbytes(v.aval) // _SCRATCH_ALIGN), 1) * _SCRATCH_ALIGN
            else:
                ptr[v] = f"b{len(args)}"
                args.append(v)
                params.append(f"__global {ct}* {ptr[v]}")
    if scratch:
        params.append("__global uchar* scratch")
    name = f"batch{index}"
    funcs, calls = [], []
    for s in steps:
        funcs.append(s.source.replace(f"__kernel void {s.name}(", f"inline void {s.name}_at(const long gid_, ")
                     .replace("get_global_id(0)", "gid_"))
        call_args = [ptr[v] for v in list(s.inputs) + s.outputs] + list(s.scalar_args)
        calls.append(f"    for (long g = 0; g < {s.items}; g++) {s.name}_at(g, {', '.join(call_args)});")
    source = "\n".join(funcs) + f"\n__kernel void {name}({', '.join(params)}) {{\n" + "\n".join(calls) + "\n}"
    name = plan.add_kernel(name, source)
    inputs = list(dict.fromkeys(v for s in steps for v in s.inputs if v not in made))
    return BatchStep(name, steps, inputs, [v for v in args if v in made], args, scratch)


def _unfit_dtype(rt, eqns):
    """The first dtype among the values these equations read and write that generated kernels on
    ``rt`` cannot hold (None: all fit, or no runtime to ask)."""
    if rt is None:
        return None
    return next((v.aval.dtype for e in eqns for v in list(e.inputs) + e.out_vars
                 if type(v) is not Literal and not _kernel_dtype_ok(rt, v.aval.dtype)), None)


def _dtype_reason(rt, eqns) -> str:
    """Why these equations run on the host: the reason a primitive that runs on the host by design
    declares (pure_callback; LAPACK, even on complex values), else the first dtype kernels cannot
    hold, else no lowering."""
    d = _unfit_dtype(rt, eqns)
    declared = getattr(eqns[0].primitive, "host_step_reason", None)
    if declared and (d is None or len(eqns) == 1):
        return declared
    if d is None:
        if any(v.aval.dtype == np.dtype(np.float16) for e in eqns for v in list(e.inputs) + e.out_vars):
            return _NO_HALF_LOWERING
        return "no OpenCL lowering"
    return _NO_FP64 if d == np.dtype(np.float64) else f"{d.name}: no type for it in generated kernels"


def _kernel_dtype_ok(rt, dtype) -> bool:
    """Can generated kernels on ``rt`` hold this dtype?  (doubles need cl_khr_fp64)"""
    return rt is not None and dtype in CTYPE and (dtype != np.dtype(np.float64) or rt.supports_fp64)


def _vector_width(rt, eqns) -> int:
    """Lanes per work-item: the device's preferred vector width for the widest element type
    (16 floats on AVX-512 CPUs, where float8 code runs at half speed), at least 4."""
    wide = any(v.aval.dtype.itemsize == 8 for e in eqns for v in list(e.inputs) + e.out_vars
               if type(v) is not Literal)
    if rt is None:
        return 8
    pref = rt.device.preferred_vector_width_double if wide else rt.device.preferred_vector_width_float
    return rt.policy.vector_width(pref)


def _combine_source(name: str, eqn, chunks: int, strided: bool = False, pt: str | None = None) -> str:
    """A kernel combining each output's ``chunks`` partial results of C type ``pt`` (default: the
    output's) in order: laid out ``[output][chunk]``, or ``[chunk][output]`` when ``strided``."""
    st = CTYPE[eqn.out_vars[0].aval.dtype]
    ct = compute_type(st)
    pt = pt or st
    n_out = shape_size(eqn.out_vars[0].aval.shape)
    op = reduce_combine(eqn.primitive, ct, "acc", load_scalar(pt, "p", f"i * {n_out}" if strided else "i"), False)
    return f"""
__kernel void {name}(__global const {pt}* restrict partial, __global {st}* restrict out0) {{
    const long o = get_global_id(0);
    __global const {pt}* p = partial + o{'' if strided else f' * {chunks}'};
    {ct} acc = {load_scalar(pt, "p", "0")};
    for (long i = 1; i < {chunks}; i++) {{ {op} }}
    {store_scalar(st, "out0", "o", "acc")}
}}"""
