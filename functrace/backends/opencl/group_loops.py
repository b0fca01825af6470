"""Work-group loops: a ``scan`` (``fori_loop``) or ``while`` whose body holds products, reductions
and index operations over small values, compiled whole into ONE launch of ONE work-group (issue 34).

Where a lane loop (``loops.py``) needs every value elementwise over one lane shape, a work-group
loop takes any body whose equations each have a *group form* here: elementwise arithmetic (as the
fused kernels write it), ``dot_general``, reductions, broadcasts, reshapes, transposes, slices,
pads, concatenations, ``rev``, ``iota``, gathers (``take``), scatters, running sums and products.
The work-group's G work-items run the body's equations in order: an equation with an array output
writes element e from work-item e mod G (``for (e = lid; e < n; e += G)``), so a chain of
elementwise equations over one shape is one such loop over private values, storing only the values
read elsewhere; a value of shape () is computed by every work-item (the same operations on the
same values: the same bits everywhere, so a while's predicate is uniform and every work-item runs
the same iterations).  Array values live in local memory (or, past the device's local memory, in a
global scratch buffer); a barrier stands before an equation that reads an array some other
work-item may have written since the last one, and before the carries are overwritten at the end
of an iteration.  On the cpu kind G is 1 (the loop then has no barriers; one core runs it: the
values are small), on the gpu kind the device's work-group size up to the largest value's.

A value larger than ``GROUP_ELEMENTS`` keeps today's designs (kernels per equation, driven from the
host), as do equations without a group form; ``group_loop`` says why, for the compile report.
"""
from __future__ import annotations

import hashlib

import numpy as np

from ... import primitives as P
from ...core import Literal
from ...primitives import control
from ...primitives import scatter as S
from ...transforms.optimize import shape_size
from .fusion import CTYPE, ExprWriter, _reduce_init, compute_type, contiguous_strides, fusable, reduce_combine
from .loops import _describe, _dtype_reason, launch_chunks, scan_chunks
from .lowerings import Lowered, device_group

# the largest value (elements) a work-group loop holds: one work-group (one core on a CPU) runs the
# loop, which pays for bodies of small values; larger ones keep the designs that spread over cores
GROUP_ELEMENTS = 1 << 14
GROUP_ITEMS = 256  # the gpu kind's work-group: up to this many work-items, one per element of the largest value
LOCAL_RESERVE = 1024  # bytes of the device's local memory left to the driver

_VIEWS = (P.reshape_p, P.squeeze_p, P.expand_dims_p)  # the operand's elements in the same order
_REDUCTIONS = (P.reduce_sum_p, P.reduce_prod_p, P.reduce_max_p, P.reduce_min_p)
_INDEXED = (P.broadcast_in_dim_p, P.transpose_p, P.rev_p, P.slice_p, P.pad_p, P.concatenate_p, P.iota_p,
            P.take_p, P.dot_general_p, P.cumsum_p, P.cumprod_p, P.scatter_add_p, S.scatter_p,
            P.argmax_p, P.argmin_p) + _REDUCTIONS + _VIEWS


def _aligned(e) -> bool:
    """An elementwise equation reading every array operand at its output's element index."""
    shape = e.out_vars[0].aval.shape
    return fusable(e) and all(tuple(a.aval.shape) in ((), shape) for a in e.inputs)


def _equation_reason(e) -> str | None:
    """Why equation ``e`` has no group form, or None."""
    if len(e.out_vars) != 1 or e.primitive.effectful:
        return f"it has {e.primitive.name}"
    if e.primitive in _INDEXED or fusable(e):
        return None
    return f"it has {e.primitive.name}"


def group_loop(eqn, rt) -> Lowered | str:
    """The loop ``eqn`` compiled whole as one work-group's loop on ``rt``'s device, or why not."""
    loop = _describe(eqn)
    eqns = loop.cond + loop.eqns
    why = _dtype_reason(eqn, rt) or next(filter(None, map(_equation_reason, eqns)), None)
    if why is not None:
        return why
    values = [v for e in eqns for v in e.out_vars] + [v for _, inner, _ in loop.carries for v in inner]
    values += [v for _, v in loop.xs]
    largest = max((shape_size(v.aval.shape) for v in values), default=1)
    if largest > GROUP_ELEMENTS:
        return f"a value of {largest} elements is over a work-group loop's {GROUP_ELEMENTS}"
    group = 1 if rt.policy.device_vector_widths else device_group(rt, min(GROUP_ITEMS, 1 << (largest - 1).bit_length()))
    writer = _Writer(loop, group)
    source, name = writer.source(eqn)
    local = int(getattr(rt.device, "local_mem_size", 0) or 0) - LOCAL_RESERVE
    if writer.local_bytes > local:  # values in global scratch instead
        writer = _Writer(loop, group, scratch=True)
        source, name = writer.source(eqn)
    upload = lambda s: s if isinstance(s, int) else rt.to_device(np.ascontiguousarray(s))
    sources = [upload(s) for s in writer.sources]
    carried = slice(writer.carries_at, writer.carries_at + len(loop.carries))
    steps, starts, chunk = scan_chunks(loop, largest * (len(eqns) + 1))

    def run(ctx, inputs):
        outs = [ctx.alloc(v.aval.shape, v.aval.dtype) for v in eqn.out_vars]
        scratch = [ctx.alloc((n,), d) for d, n in writer.scratch]
        buffers = [inputs[s] if isinstance(s, int) else s for s in sources]
        launch_chunks(ctx, ctx.kernels[name], buffers, carried, outs[:len(loop.carries)],
                      outs[len(loop.carries):] + scratch, loop, starts, chunk, (group,), (group,))
        for a in scratch:
            ctx.release(a)
        return outs

    what = f"{steps} steps" if loop.length is not None else "until the predicate is false"
    where = "global scratch" if writer.scratch else "local memory"
    launches = "one launch" if len(starts) == 1 else f"{len(starts)} launches ({chunk} steps each)"
    return Lowered(source, [name], run, len(starts),
                   f"{eqn.primitive.name} compiled whole: {launches} of one work-group of {group} work-item"
                   f"{'s' if group > 1 else ''} (values in {where}, {writer.local_bytes} bytes) running {what}")


class _Writer:
    """The OpenCL C of one work-group loop (see the module's docstring).  Scalars (shape ()) are
    private C variables named in ``names``; arrays have a storage ``slot``: the C expression of
    their first element's pointer, read as ``slot[index]``."""

    def __init__(self, loop, group: int, scratch: bool = False):
        self.loop, self.group, self.use_scratch = loop, group, scratch
        self.names: dict = {}   # scalar var -> C expression
        self.slots: dict = {}   # array var -> C pointer expression
        self.owner: dict = {}   # array var -> the storage it lives in (views share it), for barriers
        self.params: list = []
        self.sources: list = []  # per input parameter: an equation input's position, or an array to upload
        self.carries_at = 0
        self.decls: list = []    # local arrays
        self.scratch: list = []  # (dtype, elements) of the global scratch buffers
        self.scratch_at: dict = {}
        self.local_bytes = 0
        self.dirty: set = set()  # storage written since the last barrier
        self.count = 0
        self.lines: list = []

    # ------------------------------------------------------------------ values

    def ctype(self, dtype) -> str:
        """The C type a private value of ``dtype`` is computed in (bools as int, as ExprWriter)."""
        ct = compute_type(CTYPE[np.dtype(dtype)])
        return "int" if ct == "uchar" else ct

    def fresh(self, dtype, expr: str) -> str:
        name = f"t{self.count}"
        self.count += 1
        self.lines.append(f"{self.ctype(dtype)} {name} = {expr};")
        return name

    def param(self, dtype, source=None) -> str:
        name = f"p{len(self.params)}"
        qual = "" if source is None else "const "
        self.params.append(f"__global {qual}{CTYPE[np.dtype(dtype)]}* restrict {name}")
        if source is not None:
            self.sources.append(source)
        return name

    def allocate(self, n: int, dtype) -> str:
        """A new slot of ``n`` elements: a local array, or a region of its dtype's scratch buffer."""
        dtype = np.dtype(dtype)
        self.local_bytes += n * dtype.itemsize
        if not self.use_scratch:
            name = f"v{len(self.decls)}"
            self.decls.append(f"__local {CTYPE[dtype]} {name}[{max(n, 1)}];")  # (C has no empty arrays)
            return name
        if dtype not in self.scratch_at:
            self.scratch_at[dtype] = len(self.scratch)
            self.scratch.append([dtype, 0])
        k = self.scratch_at[dtype]
        self.scratch[k][1] += n
        return f"(s{k} + {self.scratch[k][1] - n})"

    def storage(self, var) -> str:
        """A new slot holding array ``var``."""
        slot = self.allocate(shape_size(var.aval.shape), var.aval.dtype)
        self.slots[var] = self.owner[var] = slot
        return slot

    def read(self, a, index: str = "e") -> str:
        """Operand ``a`` at flat ``index`` as a private value (a scalar's or literal's value)."""
        if type(a) is Literal:
            return ExprWriter(False, {}, {}, 1, segment=1).atom(a, compute_type(CTYPE[np.dtype(a.aval.dtype)]), "")
        if a in self.names:
            return self.names[a]
        raw = f"{self.slots[a]}[{index}]"
        return f"((int){raw})" if a.aval.dtype == np.dtype(bool) else raw

    def store(self, var, index: str, value: str) -> str:
        value = f"(uchar)({value} != 0)" if var.aval.dtype == np.dtype(bool) else value
        return f"{self.slots[var]}[{index}] = {value};"

    def sync(self, reads) -> None:
        """A barrier before reading ``reads`` at other work-items' elements, if one was written since."""
        if any(self.owner.get(a) in self.dirty for a in reads if type(a) is not Literal):
            if self.group > 1:
                self.lines.append("barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);")
            self.dirty.clear()

    def for_each(self, n: int, body: list) -> None:
        """``body`` for this work-item's elements e of an array of ``n``."""
        g = self.group
        head = "for (long e = lid; e < " + str(n) + "; e += " + str(g) + ") {" if g > 1 else \
            f"for (long e = 0; e < {n}; e++) {{"
        self.lines += [head] + ["    " + line for line in body] + ["}"]

    # ------------------------------------------------------------------ equations

    def emit_all(self, eqns: list, keep: set) -> None:
        """Emit ``eqns`` in order: runs of aligned elementwise equations over one shape as one
        loop each, every other array equation as its own loop, scalars inline.  ``keep``: the
        values read after these equations (loop outputs)."""
        runs, current = [], None
        for e in eqns:
            out = e.out_vars[0]
            if out.aval.shape != () and _aligned(e):
                if current is None or current[0].out_vars[0].aval.shape != out.aval.shape:
                    current = []
                    runs.append(current)
                current.append(e)
            elif out.aval.shape == () and fusable(e) and all(a.aval.shape == () for a in e.inputs):
                runs.append([e])  # a scalar: does not end a run (it reads no array)
            else:
                current = None
                runs.append([e])
        run_of = {v: k for k, run in enumerate(runs) for e in run for v in e.out_vars}
        needed = set(keep)
        for k, run in enumerate(runs):
            for e in run:
                needed.update(a for a in e.inputs if type(a) is not Literal and run_of.get(a, k) != k)
        for run in runs:
            e = run[0]
            if e.out_vars[0].aval.shape != () and _aligned(e):
                self.emit_run(run, needed)
            else:
                self.emit_one(e)

    def emit_run(self, run: list, needed: set) -> None:
        w = ExprWriter(False, {}, {}, 1, segment=1)
        w.count = self.count
        for e in run:
            for a in e.inputs:
                if type(a) is not Literal and a not in w.names:
                    w.names[a] = self.read(a)
            w.emit(e, "e")
        self.count = w.count
        stores = []
        for e in run:
            out = e.out_vars[0]
            if out in needed:
                self.storage(out)
                stores.append(self.store(out, "e", w.names[out]))
                self.dirty.add(self.owner[out])
        self.for_each(shape_size(run[0].out_vars[0].aval.shape), w.lines + stores)

    def emit_one(self, e) -> None:
        out = e.out_vars[0]
        if e.primitive in _VIEWS and e.inputs[0].aval.shape != () and out.aval.shape != ():
            self.slots[out], self.owner[out] = self.slots[e.inputs[0]], self.owner[e.inputs[0]]
            return
        self.sync(e.inputs)
        if out.aval.shape == ():
            outer, self.lines = self.lines, []
            value = self.element(e, "0")
            inner, self.lines = self.lines, outer
            if inner:
                self.lines += [f"{self.ctype(out.aval.dtype)} r{self.count};", "{"] + \
                    ["    " + line for line in inner] + [f"    r{self.count} = {value};", "}"]
                value = f"r{self.count}"
                self.count += 1
            self.names[out] = self.fresh(out.aval.dtype, value)
            return
        outer, self.lines = self.lines, []
        value = self.element(e, "e")
        inner, self.lines = self.lines, outer
        self.storage(out)
        self.for_each(shape_size(out.aval.shape), inner + [self.store(out, "e", value)])
        self.dirty.add(self.owner[out])

    def element(self, e, index: str) -> str:
        """C lines (appended to ``self.lines``) and the expression of ``e``'s output at flat ``index``."""
        prim, p, out = e.primitive, e.params, e.out_vars[0]
        shape = tuple(out.aval.shape)
        c = _coords(index, shape)
        x = e.inputs[0] if e.inputs else None
        if prim in _VIEWS:
            return self.read(x, index if x.aval.shape != () else "0")
        if fusable(e):  # elementwise with broadcasting operands
            w = ExprWriter(False, {}, {}, 1, segment=1)
            w.count = self.count
            for a in e.inputs:
                if type(a) is not Literal:
                    w.names[a] = self.read(a, _broadcast_index(c, shape, a.aval.shape))
            w.emit(e, index)
            self.count = w.count
            self.lines += w.lines
            return w.names[out]
        if prim is P.broadcast_in_dim_p:
            dims = p["broadcast_dimensions"]
            return self.read(x, _flat([c[d] if n != 1 else "0" for d, n in zip(dims, x.aval.shape)], x.aval.shape))
        if prim is P.transpose_p:
            inner = [None] * len(shape)
            for k, d in enumerate(p["permutation"]):
                inner[d] = c[k]
            return self.read(x, _flat(inner, x.aval.shape))
        if prim is P.rev_p:
            return self.read(x, _flat([f"({n - 1} - {ck})" if d in p["dimensions"] else ck
                                       for d, (ck, n) in enumerate(zip(c, shape))], shape))
        if prim is P.slice_p:
            strides = p["strides"] or (1,) * len(shape)
            return self.read(x, _flat([f"({s} + {ck} * {st})" for s, ck, st in zip(p["start_indices"], c, strides)],
                                      x.aval.shape))
        if prim is P.iota_p:
            return f"(({self.ctype(out.aval.dtype)}){c[p['dimension']]})"
        if prim is P.pad_p:
            return self.pad(e, c)
        if prim is P.concatenate_p:
            return self.concatenate(e, c)
        if prim is P.take_p:
            return self.take(e, c)
        if prim in _REDUCTIONS or prim in (P.argmax_p, P.argmin_p):
            return self.reduce(e, c)
        if prim is P.dot_general_p:
            return self.dot(e, c)
        if prim in (P.cumsum_p, P.cumprod_p):
            return self.running(e, c)
        if prim is P.scatter_add_p:
            return self.scatter_add(e, c)
        return self.scatter(e, index)

    def pad(self, e, c: list) -> str:
        x, value = e.inputs
        inner, tests = [], []
        for ck, (lo, _, it), n in zip(c, e.params["padding_config"], x.aval.shape):
            q = f"({ck} - {lo})"
            tests.append(f"{q} >= 0 && {q} % {it + 1} == 0 && {q} / {it + 1} < {n}")
            inner.append(f"({q} / {it + 1})")
        test = " && ".join(tests) or "1"
        fill = self.read(value)
        return self.pick(x.aval.dtype, [(test, lambda: self.read(x, _flat(inner, x.aval.shape)))], fill)

    def concatenate(self, e, c: list) -> str:
        d, start, cases = e.params["dimension"], 0, []
        for a in e.inputs:
            size = a.aval.shape[d]
            inner = [f"({ck} - {start})" if k == d else ck for k, ck in enumerate(c)]
            cases.append((f"{c[d]} < {start + size}", lambda a=a, inner=inner: self.read(a, _flat(inner, a.aval.shape))))
            start += size
        return self.pick(e.out_vars[0].aval.dtype, cases[:-1], cases[-1][1]())

    def pick(self, dtype, cases: list, otherwise: str) -> str:
        """A value chosen by the first true test of ``cases`` ((test, value thunk)), else ``otherwise``."""
        name = f"r{self.count}"
        self.count += 1
        self.lines.append(f"{self.ctype(dtype)} {name};")
        for k, (test, value) in enumerate(cases):
            self.lines.append(f"{'if' if k == 0 else 'else if'} ({test}) {name} = {value()};")
        self.lines.append(f"{'else ' if cases else ''}{name} = {otherwise};")
        return name

    def take(self, e, c: list) -> str:
        x, idx = e.inputs
        axis, k = e.params["axis"], len(idx.aval.shape)
        n = x.aval.shape[axis]
        i = self.read(idx, _flat(c[axis:axis + k], idx.aval.shape))
        j = f"clamp((long)({i}), 0L, {n - 1}L)"
        return self.read(x, _flat(c[:axis] + [j] + c[axis + k:], x.aval.shape))

    def loop_over(self, sizes: list, body) -> None:
        """Lines running ``body(coords)`` over every index of ``sizes`` in row-major order."""
        n = shape_size(sizes)
        if n == 1:
            body(["0"] * len(sizes))
            return
        r = f"r{self.count}"
        self.count += 1
        self.lines.append(f"for (long {r} = 0; {r} < {n}; {r}++) {{")
        outer, self.lines = self.lines, []
        body(_coords(r, tuple(sizes)))
        inner, self.lines = self.lines, outer
        self.lines += ["    " + line for line in inner] + ["}"]

    def reduce(self, e, c: list) -> str:
        x, prim = e.inputs[0], e.primitive
        shape = x.aval.shape
        axes = tuple(e.params["axes"]) if "axes" in e.params else (e.params["axis"],)
        kept = [d for d in range(len(shape)) if d not in axes]
        ct = self.ctype(x.aval.dtype)
        acc = f"a{self.count}"
        self.count += 1

        def coords(rc):
            full = [None] * len(shape)
            for d, ck in zip(kept, c):
                full[d] = ck
            for d, rk in zip(axes, rc):
                full[d] = rk
            return _flat(full, shape)
        if prim in (P.argmax_p, P.argmin_p):  # the first extremum's index; NaN wins, as numpy's
            cmp = ">" if prim is P.argmax_p else "<"
            self.lines += [f"{ct} {acc} = {self.read(x, coords(['0']))};", f"long {acc}i = 0;"]
            nan = f" || (isnan({{v}}) && !isnan({acc}))" if ct in ("float", "double") else ""
            self.loop_over([shape[axes[0]]], lambda rc: self.lines.append(
                f"{{ {ct} v_ = {self.read(x, coords(rc))}; if (v_ {cmp} {acc}{nan.format(v='v_')}) "
                f"{{ {acc} = v_; {acc}i = {rc[0]}; }} }}"))
            return f"{acc}i"
        self.lines.append(f"{ct} {acc} = {_reduce_init(prim, 'uchar' if x.aval.dtype == np.dtype(bool) else ct)};")
        self.loop_over([shape[d] for d in axes],
                       lambda rc: self.lines.append(reduce_combine(prim, ct, acc, self.read(x, coords(rc)), False)))
        return acc

    def dot(self, e, c: list) -> str:
        x, y = e.inputs
        (lc, rc), (lb, rb) = e.params["dimension_numbers"]
        lf = [d for d in range(len(x.aval.shape)) if d not in lc and d not in lb]
        rf = [d for d in range(len(y.aval.shape)) if d not in rc and d not in rb]
        nb = len(lb)
        ct = self.ctype(e.out_vars[0].aval.dtype)
        acc = f"a{self.count}"
        self.count += 1
        self.lines.append(f"{ct} {acc} = 0;")

        def term(kc):
            xi, yi = [None] * len(x.aval.shape), [None] * len(y.aval.shape)
            for k, (dl, dr) in enumerate(zip(lb, rb)):
                xi[dl], yi[dr] = c[k], c[k]
            for k, d in enumerate(lf):
                xi[d] = c[nb + k]
            for k, d in enumerate(rf):
                yi[d] = c[nb + len(lf) + k]
            for k, (dl, dr) in enumerate(zip(lc, rc)):
                xi[dl], yi[dr] = kc[k], kc[k]
            self.lines.append(f"{acc} += {self.read(x, _flat(xi, x.aval.shape))} * {self.read(y, _flat(yi, y.aval.shape))};")
        self.loop_over([x.aval.shape[d] for d in lc], term)
        return acc

    def running(self, e, c: list) -> str:
        x = e.inputs[0]
        axis, reverse = e.params["axis"], e.params["reverse"]
        n = x.aval.shape[axis]
        ct = self.ctype(x.aval.dtype)
        acc = f"a{self.count}"
        self.count += 1
        mul = e.primitive is P.cumprod_p
        self.lines.append(f"{ct} {acc} = {self.read(x, _flat(c[:axis] + [f'{n - 1}' if reverse else '0'] + c[axis + 1:], x.aval.shape))};")
        start, stop = (f"{n - 2}", f"k_ >= {c[axis]}") if reverse else ("1", f"k_ <= {c[axis]}")
        step = "k_--" if reverse else "k_++"
        self.lines.append(f"for (long k_ = {start}; {stop}; {step}) {acc} {'*' if mul else '+'}= "
                          f"{self.read(x, _flat(c[:axis] + ['k_'] + c[axis + 1:], x.aval.shape))};")
        return acc

    def scatter_add(self, e, c: list) -> str:
        x, idx, upd = e.inputs
        axis, k = e.params["axis"], len(idx.aval.shape)
        n = x.aval.shape[axis]
        ct = self.ctype(x.aval.dtype)
        acc = f"a{self.count}"
        self.count += 1
        self.lines.append(f"{ct} {acc} = {self.read(x, _flat(c, x.aval.shape))};")

        def term(mc):
            i = self.read(idx, _flat(mc, idx.aval.shape))
            u = self.read(upd, _flat(c[:axis] + mc + c[axis + 1:], upd.aval.shape))
            self.lines.append(f"if (clamp((long)({i}), 0L, {n - 1}L) == {c[axis]}) {acc} += {u};")
        self.loop_over(list(idx.aval.shape), term)
        return acc

    def scatter(self, e, index: str) -> str:
        x, idx, upd = e.inputs
        op, k = e.params["op"], idx.aval.shape[0]
        ct = self.ctype(x.aval.dtype)
        acc = f"a{self.count}"
        self.count += 1
        self.lines.append(f"{ct} {acc} = {self.read(x, index)};")
        u = self.read(upd, "k_")
        if op == "set":  # the last update at an index wins
            self.lines.append(f"for (long k_ = {k - 1}; k_ >= 0; k_--) if ({self.read(idx, 'k_')} == {index}) "
                              f"{{ {acc} = {u}; break; }}")
            return acc
        fold = {"mul": f"{acc} *= {u};",
                "min": reduce_combine(P.reduce_min_p, ct, acc, u, False),
                "max": reduce_combine(P.reduce_max_p, ct, acc, u, False)}[op]
        self.lines.append(f"for (long k_ = 0; k_ < {k}; k_++) if ({self.read(idx, 'k_')} == {index}) {{ {fold} }}")
        return acc

    # ------------------------------------------------------------------ the kernel

    def load_array(self, var, ptr: str, offset: str) -> None:
        """Bind array ``var`` to global memory at ``ptr + offset`` (read in place: never written)."""
        self.slots[var] = f"({ptr} + {offset})" if offset != "0" else ptr
        self.owner[var] = None

    def source(self, eqn) -> tuple[str, str]:
        """(the kernel's source, its name)."""
        loop = self.loop
        head: list = []
        for k, (outer, inner) in enumerate(loop.consts):
            v = inner[0]
            if isinstance(outer, int) and type(eqn.inputs[outer]) is Literal:
                for u in inner:
                    self.names[u] = self.read(eqn.inputs[outer])
                continue
            ptr = self.param(v.aval.dtype, outer)
            for u in inner:
                if v.aval.shape == ():
                    self.names[u] = f"k{k}"
                else:
                    self.load_array(u, ptr, "0")
            if v.aval.shape == ():
                head.append(f"const {self.ctype(v.aval.dtype)} k{k} = {self.read_global(ptr, v, '0')};")
        self.carries_at = len(self.sources)
        carry_ptrs = []
        for k, (outer, inner, _) in enumerate(loop.carries):
            v = inner[0]
            a = eqn.inputs[outer]
            ptr = self.param(v.aval.dtype, np.asarray(a.val, v.aval.dtype) if type(a) is Literal else outer)
            carry_ptrs.append(ptr)
            if v.aval.shape == ():
                head.append(f"{self.ctype(v.aval.dtype)} c{k} = {self.read_global(ptr, v, '0')};")
                self.names.update((u, f"c{k}") for u in inner)
            else:
                slot = self.storage(v)
                for u in inner:
                    self.slots[u], self.owner[u] = slot, slot
                self.lines = []
                self.for_each(shape_size(v.aval.shape), [self.store(v, "e", self.read_global(ptr, v, "e"))])
                head += self.lines
        carry_slots = {self.owner[inner[0]] for _, inner, _ in loop.carries if inner[0].aval.shape != ()}
        self.lines = []
        for outer, v in loop.xs:  # row i of each xs, read in place
            n = shape_size(v.aval.shape)
            ptr = self.param(v.aval.dtype, outer)
            if v.aval.shape == ():
                self.names[v] = self.fresh(v.aval.dtype, self.read_global(ptr, v, "i"))
            else:
                self.load_array(v, ptr, f"i * {n}")
        keep = {a for a in [new for _, _, new in loop.carries] + loop.ys + [loop.pred]
                if a is not None and type(a) is not Literal}
        # a while tests its predicate at the top of each iteration (``break``) on one work-item; a
        # work-group tests it before the loop and again at the end of each iteration, as the loop's
        # condition: PoCL's compiler cannot split a loop that leaves between barriers into regions
        at_end = loop.pred is not None and self.group > 1
        if at_end:
            saved, self.lines, self.dirty = self.lines, [], set(carry_slots)
            self.emit_all(loop.cond, keep)
            head += self.lines + [f"int go = {self.read(loop.pred)};"]
            self.lines = saved
        self.dirty = set(carry_slots)  # at an iteration's start: the carries, just written
        if loop.pred is not None and not at_end:
            self.emit_all(loop.cond, keep)
            self.lines.append(f"if (!({self.read(loop.pred)})) break;")
        self.emit_all(loop.eqns, keep)
        outs = [self.param(v.aval.dtype) for v in eqn.out_vars]  # carries, then ys
        for ptr, v in zip(outs[len(loop.carries):], loop.ys):  # row i of each ys
            n = shape_size(v.aval.shape)
            if v.aval.shape == ():
                self.lines.append(f"if (lid == 0) {self.write_global(ptr, v, 'i', self.read(v))}")
            else:
                self.for_each(n, [self.write_global(ptr, v, f"i * {n} + e", self.read(v))])
        self.update_carries(carry_slots)
        if at_end:
            self.emit_all(loop.cond, keep)
            self.lines.append(f"go = {self.read(loop.pred)};")
        tail = []
        for k, (ptr, (_, inner, _)) in enumerate(zip(outs, loop.carries)):
            v = inner[0]
            if v.aval.shape == ():
                tail.append(f"if (lid == 0) {self.write_global(ptr, v, '0', f'c{k}')}")
            else:
                saved, self.lines = self.lines, []
                self.for_each(shape_size(v.aval.shape), [self.write_global(ptr, v, "e", self.read(v))])
                tail += self.lines
                self.lines = saved
        self.params += [f"__global {CTYPE[d]}* restrict s{k}" for k, (d, _) in enumerate(self.scratch)]
        if loop.length is not None:
            self.params += ["const long s0", "const long s1"]
            header = (f"for (long s = s0; s < s1; s++) {{\n        const long i = "
                      f"{f'{loop.length - 1} - s' if loop.reverse else 's'};")
        else:
            header = "while (go) {" if at_end else "for (;;) {"
        lines = lambda ls, indent: ("\n" + " " * indent).join(ls)
        text = f"""({', '.join(self.params)}) {{
    const long lid = {"get_local_id(0)" if self.group > 1 else "0"};
    {lines(self.decls, 4)}
    {lines(head, 4)}
    {header}
        {lines(self.lines, 8)}
    }}
    {"barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);" if self.group > 1 else ""}
    {lines(tail, 4)}
}}"""
        name = f"group_{eqn.primitive.name}_{hashlib.sha256(text.encode()).hexdigest()[:12]}"
        return f"\n__kernel void {name}{text}", name

    def read_global(self, ptr: str, var, index: str) -> str:
        raw = f"{ptr}[{index}]"
        return f"((int){raw})" if var.aval.dtype == np.dtype(bool) else raw

    def write_global(self, ptr: str, var, index: str, value: str) -> str:
        value = f"(uchar)({value} != 0)" if var.aval.dtype == np.dtype(bool) else value
        return f"{ptr}[{index}] = {value};"

    def update_carries(self, carry_slots: set) -> None:
        """The carries' new values into their storage.  Every work-item has finished reading this
        iteration's values first (a barrier); a new value that is itself a carry's storage (a body
        swapping carries) is copied out before any carry is overwritten."""
        if self.group > 1 and carry_slots:
            self.lines.append("barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);")
        staged = {}
        for k, (_, inner, new) in enumerate(self.loop.carries):
            v = inner[0]
            if v.aval.shape == ():
                self.lines.append(f"const {self.ctype(v.aval.dtype)} n{k} = {self.read(new)};")
            elif type(new) is not Literal and self.owner.get(new) in carry_slots and self.owner.get(new) != self.owner[v]:
                n = shape_size(v.aval.shape)
                staged[k] = self.allocate(n, v.aval.dtype)
                self.for_each(n, [f"{staged[k]}[e] = {self.read(new)};"])
        for k, (_, inner, new) in enumerate(self.loop.carries):
            v = inner[0]
            if v.aval.shape == ():
                self.lines.append(f"c{k} = n{k};")
            elif k in staged:
                self.for_each(shape_size(v.aval.shape), [self.store(v, "e", f"{staged[k]}[e]")])
            elif type(new) is Literal or self.owner.get(new) != self.owner[v]:
                self.for_each(shape_size(v.aval.shape), [self.store(v, "e", self.read(new))])
        self.dirty = set(carry_slots)


def _coords(index: str, shape: tuple) -> list:
    """C expressions of the coordinates of flat ``index`` in ``shape`` (row-major)."""
    strides = contiguous_strides(shape)
    lead = next((k for k, n in enumerate(shape) if n != 1), len(shape))  # (index < the size: no % there)
    return [("0" if n == 1 else f"({index})" if st == 1 and k == lead else f"(({index}) % {n})" if st == 1
             else f"(({index}) / {st})" if k == lead else f"(({index}) / {st} % {n})")
            for k, (n, st) in enumerate(zip(shape, strides))]


def _flat(coords: list, shape: tuple) -> str:
    """C expression of the flat index of ``coords`` in ``shape``."""
    terms = [f"{ck} * {st}" if st != 1 else ck for ck, n, st in zip(coords, shape, contiguous_strides(shape)) if n != 1]
    return " + ".join(terms) or "0"


def _broadcast_index(coords: list, shape: tuple, operand: tuple) -> str:
    """The flat index of an operand of shape ``operand`` broadcast (numpy's rule) to ``shape``."""
    lead = len(shape) - len(operand)
    return _flat([coords[lead + k] if n != 1 else "0" for k, n in enumerate(operand)], operand)
