"""The OpenCL C of work-group loops and programs compiled whole (``group_loops.py`` decides which
run so; this module writes them).  Scalars are private C variables, computed by every work-item;
an array's element e is written by work-item e mod G (on one work-item: a loop per axis), a chain
of elementwise equations over one shape as one loop over private values; arrays live in local
memory or global scratch; barriers stand before reads of elements another work-item may have
written, and at each iteration's end.  Loops nest, conds pick their branch, calls run inline.
With rows (a work-group per member), each work-group computes its own rows of the batched values,
kept in a global scratch buffer the work-groups share."""
from __future__ import annotations

import hashlib

import numpy as np

from ... import primitives as P
from ...core import Literal
from ...primitives import control, random_bits
from ...primitives import scatter as S
from ...transforms.optimize import shape_size
from .fusion import CTYPE, ExprWriter, compute_type, contiguous_strides, fusable, reduce_combine, reduce_init
from .loops import KernelParams, describe_loop
from .lowerings import QUIET_LOOP_HINTS, kernel_source

VIEWS = (P.reshape_p, P.squeeze_p, P.expand_dims_p)  # the operand's elements in the same order
REDUCTIONS = (P.reduce_sum_p, P.reduce_prod_p, P.reduce_max_p, P.reduce_min_p)
INDEXED = (P.broadcast_in_dim_p, P.transpose_p, P.rev_p, P.slice_p, P.pad_p, P.concatenate_p, P.iota_p,
            P.take_p, P.dot_general_p, P.cumsum_p, P.cumprod_p, P.scatter_add_p, S.scatter_p,
            P.argmax_p, P.argmin_p) + REDUCTIONS + VIEWS


def aligned(e) -> bool:
    """An elementwise equation reading every array operand at its output's element index."""
    shape = e.out_vars[0].aval.shape
    return fusable(e) and all(tuple(a.aval.shape) in ((), shape) for a in e.inputs)


LOOPS = (control.scan_p, control.while_p)


def branches(e) -> list:
    """The sub-programs run in place of equation ``e``: a cond's branches, a call's body."""
    if e.primitive is control.cond_p:
        return list(e.params["branches"])
    return [e.params[e.primitive.inline_body]] if e.primitive.inline_body else []


def program_outputs(closed) -> list:
    """The program's outputs that its equations make, each once (the rest are its inputs or literals)."""
    made = {v for e in closed.jaxpr.eqns for v in e.out_vars}
    return list(dict.fromkeys(a for a in closed.jaxpr.outs if type(a) is not Literal and a in made))


class GroupWriter(KernelParams):
    """The OpenCL C of one work-group loop (see the module's docstring).  Scalars (shape ()) are
    private C variables named in ``names``; arrays have a storage ``slot``: the C expression of
    their first element's pointer, read as ``slot[index]``."""

    def __init__(self, group: int, scratch: bool = False, spread: tuple | None = None):
        self.group, self.use_scratch = group, scratch
        # a work-group per row: (rows, the batched values, the guarded predicate, work-groups)
        self.rows, self.batched, self.guard, groups = spread if spread is not None else (None, {}, None, 1)
        self.per_group = -(-self.rows // groups) if spread is not None else 0
        self.names: dict = {}   # scalar var -> C expression
        self.slots: dict = {}   # array var -> C pointer expression
        self.owner: dict = {}   # array var -> the storage it lives in (views share it), for barriers
        self.in_place: dict = {}  # a carry's new value -> the carry, when it is written in its storage
        super().__init__()
        self.carries_at = 0
        self.decls: list = []    # local arrays
        self.scratch: list = []  # (dtype, elements) of the global scratch buffers
        self.scratch_at: dict = {}
        self.local_bytes = 0
        self.dirty: set = set()  # storage written since the last barrier
        self.scattered: set = set()  # ... not element e by work-item e mod G (rows of ys, scalars)
        self.count = 0
        self.lines: list = []
        self.helpers: set = set()  # functions the kernel calls (threefry's), put before it

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

    def allocate(self, n: int, dtype, rows: bool = False) -> str:
        """A new slot of ``n`` elements: a local array, or a region of its dtype's scratch buffer
        (``rows``: a batched value, whose rows the work-groups share)."""
        dtype = np.dtype(dtype)
        if not (self.use_scratch or rows):
            self.local_bytes += n * dtype.itemsize
            name = f"v{len(self.decls)}"
            self.decls.append(f"__local {CTYPE[dtype]} {name}[{max(n, 1)}];")  # (C has no empty arrays)
            return name
        if dtype not in self.scratch_at:
            self.scratch_at[dtype] = len(self.scratch)
            self.scratch.append([dtype, 0])
        k = self.scratch_at[dtype]
        self.scratch[k][1] += n
        return f"(g{k} + {self.scratch[k][1] - n})"

    def storage(self, var) -> str:
        """A new slot holding array ``var``."""
        slot = self.allocate(shape_size(var.aval.shape), var.aval.dtype, self.is_rows(var))
        self.slots[var] = self.owner[var] = slot
        return slot

    def read(self, a, index: str = "e") -> str:
        """Operand ``a`` at flat ``index`` as a private value (a scalar's or literal's value)."""
        if a in self.names:
            return self.names[a]
        if type(a) is Literal:
            return ExprWriter(False, {}, {}, 1, segment=1).atom(a, compute_type(CTYPE[np.dtype(a.aval.dtype)]), "")
        return self.read_at(self.slots[a], a, index)

    def store(self, var, index: str, value: str) -> str:
        return self.write_at(self.slots[var], var, index, value)

    def read_at(self, ptr: str, var, index: str) -> str:
        """Element ``index`` of ``ptr`` holding values of ``var``'s dtype, as a private value
        (bools stored as uchar 0 / 1, computed as int, as ExprWriter's)."""
        raw = f"{ptr}[{index}]"
        return f"((int){raw})" if var.aval.dtype == np.dtype(bool) else raw

    def write_at(self, ptr: str, var, index: str, value: str) -> str:
        """C storing private ``value`` (of ``var``'s dtype) at element ``index`` of ``ptr``."""
        value = f"(uchar)({value} != 0)" if var.aval.dtype == np.dtype(bool) else value
        return f"{ptr}[{index}] = {value};"

    def sync(self, reads, aligned: bool = False) -> None:
        """A barrier before reading ``reads`` if another work-item may have written one since the
        last: any written array read at other elements, one written out of the element order read
        at its own (``aligned``)."""
        owners = {self.owner.get(a) for a in reads if type(a) is not Literal} - {None}
        if owners & (self.scattered if aligned else self.dirty):
            if self.group > 1:
                self.lines.append("barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);")
            self.dirty.clear()
            self.scattered.clear()

    def nested(self, shape: tuple, body: list, axis: int | None) -> None:
        """``body`` for every element ``e`` of an array of ``shape`` on one work-item: a loop per
        axis (counters ``q0``, ``q1``, ... as ``coords`` names them; the rows ``lo`` .. ``hi`` - 1
        along a batched ``axis``), ``e`` the flat index."""
        heads = _axis_loops(shape, axis) or ["{"]  # (one element: a block of its own, for its own e)
        flat = _flat([f"q{k}" for k in range(len(shape))], shape)
        lines = _nest(heads, [f"const long e = {flat};", *body])
        if heads != ["{"]:  # each element's work is its own (a work-group splits these loops over its
            #                 work-items): the innermost loop vectorizes though its reads and writes share
            #                 a scratch buffer
            lines.insert(len(heads) - 1, "    " * (len(heads) - 1) + "#pragma clang loop vectorize(assume_safety)")
            self.helpers.add(QUIET_LOOP_HINTS)
        self.lines += lines

    def coords(self, index: str, shape: tuple) -> list:
        """C expressions of the coordinates of flat ``index`` in ``shape``: on one work-item, of
        the element ``e`` of a loop over an array, the loop's own counters (``for_each`` nests a
        loop per axis: no division per element, and an innermost loop the compiler vectorizes)."""
        if self.group == 1 and index == "e":
            return ["0" if n == 1 else f"q{k}" for k, n in enumerate(shape)]
        return _coords(index, shape)

    def is_rows(self, var) -> bool:
        """Is ``var`` a batched value (a work-group computes its own rows of it)?"""
        return self.rows is not None and type(var) is not Literal and var in self.batched

    def rows_axis(self, var) -> int | None:
        """The axis of batched ``var``'s rows (None: not batched)."""
        return self.batched[var] if self.is_rows(var) else None

    def for_each(self, n: int, body: list, var=None, force: bool = False) -> None:
        """``body`` for this work-item's elements e of an array of ``n``: of the work-group's own
        rows only where ``var`` is batched (or, ``force``, a loop output split by rows at axis 0)."""
        g = self.group
        axis = self.batched.get(var, 0 if force else None) if self.rows is not None and var is not None \
            and type(var) is not Literal else None
        if g == 1 and var is not None and type(var) is not Literal and shape_size(var.aval.shape) == n:
            self.nested(tuple(var.aval.shape), body, axis)
            return
        if axis is not None:
            shape = tuple(var.aval.shape)
            inner, outer = shape_size(shape[axis + 1:]), shape_size(shape[:axis])
            if outer > 1:  # rows along an inner axis: t_ counts this work-group's elements
                span = f"(hi - lo) * {inner}"
                self.lines += [f"for (long t_ = lid; t_ < {outer} * {span}; t_ += items) {{",
                               f"    const long e = (t_ / ({span})) * {self.rows * inner} + lo * {inner} + t_ % ({span});"]
                self.lines += ["    " + line for line in body] + ["}"]
                return
        start, stop = (f"lo * {inner}", f"hi * {inner}") if axis is not None else ("0", str(n))
        head = f"for (long e = {start} + lid; e < {stop}; e += items) {{" if g > 1 else \
            f"for (long e = {start}; e < {stop}; e++) {{"
        self.lines += [head] + ["    " + line for line in body] + ["}"]

    # ------------------------------------------------------------------ equations

    def emit_all(self, eqns: list, keep: set) -> None:
        """Emit ``eqns`` in order: runs of aligned elementwise equations over one shape as one
        loop each, every other array equation as its own loop, scalars inline.  ``keep``: the
        values read after these equations (loop outputs)."""
        runs, current = [], None
        for e in eqns:
            out = e.out_vars[0]
            if out.aval.shape != () and aligned(e):
                if current is None or current[0].out_vars[0].aval.shape != out.aval.shape \
                        or self.batched.get(current[0].out_vars[0]) != self.batched.get(out):
                    current = []
                    runs.append(current)
                current.append(e)
            elif out.aval.shape == () and fusable(e) and all(a.aval.shape == () for a in e.inputs):
                # a scalar reads no array: it goes before the open run (which may read it)
                runs.insert(len(runs) - 1 if current is not None else len(runs), [e])
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
            if e.out_vars[0].aval.shape != () and aligned(e):
                self.emit_run(run, needed)
            else:
                self.emit_one(e)

    def emit_run(self, run: list, needed: set) -> None:
        self.sync([a for e in run for a in e.inputs], aligned=True)
        if self.rows is not None:  # a batched run reads the others at its rows, an unbatched one all of them
            rows = self.is_rows(run[0].out_vars[0])
            self.sync([a for e in run for a in e.inputs if self.is_rows(a) != rows])
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
                if out in self.in_place:  # (this element of the carry was read above: it is the run's)
                    self.slots[out] = self.owner[out] = self.slots[self.in_place[out]]
                else:
                    self.storage(out)
                stores.append(self.store(out, "e", w.names[out]))
                self.dirty.add(self.owner[out])
        self.for_each(shape_size(run[0].out_vars[0].aval.shape), w.lines + stores, run[0].out_vars[0])

    def emit_one(self, e) -> None:
        if e.primitive in LOOPS:
            self.emit_loop(e)
            return
        if branches(e):
            self.emit_branches(e)
            return
        if e.primitive is random_bits.threefry2x32_p:
            self.emit_threefry(e)
            return
        out = e.out_vars[0]
        if e.primitive in VIEWS and e.inputs[0].aval.shape != () and out.aval.shape != ():
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
        if e.primitive is P.dot_general_p and self.group == 1 and out.aval.dtype.kind in "fiu":
            if _by_terms(e):
                self.emit_dot_by_terms(e)
                return
            blocked = self.dot_block(e)
            if blocked is not None:
                self.emit_dot_blocked(e, *blocked)
                return
        outer, self.lines = self.lines, []
        value = self.element(e, "e")
        inner, self.lines = self.lines, outer
        self.storage(out)
        self.for_each(shape_size(out.aval.shape), inner + [self.store(out, "e", value)], out)
        self.dirty.add(self.owner[out])

    def element(self, e, index: str) -> str:
        """C lines (appended to ``self.lines``) and the expression of ``e``'s output at flat ``index``."""
        prim, p, out = e.primitive, e.params, e.out_vars[0]
        shape = tuple(out.aval.shape)
        c = self.coords(index, shape)
        x = e.inputs[0] if e.inputs else None
        if prim in VIEWS:
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
        if prim in REDUCTIONS or prim in (P.argmax_p, P.argmin_p):
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
        self.lines.append(f"{ct} {acc} = {reduce_init(prim, 'uchar' if x.aval.dtype == np.dtype(bool) else ct)};")
        self.loop_over([shape[d] for d in axes],
                       lambda rc: self.lines.append(reduce_combine(prim, ct, acc, self.read(x, coords(rc)), False)))
        return acc

    def dot(self, e, c: list) -> str:
        ct = self.ctype(e.out_vars[0].aval.dtype)
        acc = f"a{self.count}"
        self.count += 1
        self.lines.append(f"{ct} {acc} = 0;")
        self.loop_over(contraction(e), lambda kc: self.lines.append(f"{acc} += {self.product_term(e, c, kc)};"))
        return acc

    def dot_block(self, e) -> tuple | None:
        """(axis, outputs) of ``emit_dot_blocked`` for the product ``e`` on one work-item: its
        innermost output axis that is not the batched one and that ``_DOT_BLOCKS`` divides, and
        that number; None for a product of one term per output or without such an axis."""
        if shape_size(contraction(e)) < 2:
            return None
        out = e.out_vars[0]
        rows_axis = self.rows_axis(out)
        for k in reversed(range(len(out.aval.shape))):
            n = out.aval.shape[k]
            block = next((b for b in _DOT_BLOCKS if n % b == 0), None)
            if k != rows_axis and n > 1 and block is not None:
                return k, block
        return None

    def emit_dot_blocked(self, e, axis: int, block: int) -> None:
        """On one work-item, ``block`` consecutive outputs of the product ``e`` along ``axis`` at
        once, each in its own private accumulator adding its terms in the contraction's
        row-major order (``dot``'s sums): ``block`` independent chains of adds where one output's
        was a chain the processor waits on at every add.  The other axes loop outside, a batched
        one over the work-group's rows."""
        out = e.out_vars[0]
        shape = tuple(out.aval.shape)
        rows_axis = self.rows_axis(out)
        self.storage(out)
        ct = self.ctype(out.aval.dtype)
        heads = _axis_loops(shape, rows_axis, skip=axis)
        heads.append(f"for (long q{axis} = 0; q{axis} < {shape[axis]}; q{axis} += {block}) {{")
        coords = [[(f"(q{k} + {b})" if k == axis else "0" if n == 1 else f"q{k}") for k, n in enumerate(shape)]
                  for b in range(block)]
        acc = f"a{self.count}"
        self.count += 1
        outer, self.lines = self.lines, [f"{ct} {acc}_{b} = 0;" for b in range(block)]
        self.loop_over(contraction(e), lambda kc: self.lines.extend(f"{acc}_{b} += {self.product_term(e, c, kc)};"
                                                                     for b, c in enumerate(coords)))
        body = self.lines + [self.store(out, _flat(c, shape), f"{acc}_{b}") for b, c in enumerate(coords)]
        self.lines = outer + _nest(heads, body)
        self.dirty.add(self.owner[out])

    def product_term(self, e, c: list, kc: list) -> str:
        """The term of ``dot_general`` ``e`` for its output at coordinates ``c`` and its
        contraction at coordinates ``kc``: the product of the two operands' elements there."""
        x, y = e.inputs
        lc, rc, lb, rb, lf, rf = P.dot_dims(len(x.aval.shape), len(y.aval.shape), e.params["dimension_numbers"])
        nb = len(lb)
        xi, yi = [None] * len(x.aval.shape), [None] * len(y.aval.shape)
        for k, (dl, dr) in enumerate(zip(lb, rb)):
            xi[dl], yi[dr] = c[k], c[k]
        for k, d in enumerate(lf):
            xi[d] = c[nb + k]
        for k, d in enumerate(rf):
            yi[d] = c[nb + len(lf) + k]
        for k, (dl, dr) in enumerate(zip(lc, rc)):
            xi[dl], yi[dr] = kc[k], kc[k]
        return f"{self.read(x, _flat(xi, x.aval.shape))} * {self.read(y, _flat(yi, y.aval.shape))}"

    def emit_dot_by_terms(self, e) -> None:
        """On one work-item, a product ``_by_terms`` takes: the contraction's loop outside, the
        outputs' loop inside, each output adding its terms in the contraction's row-major order as
        ``dot`` does (the same sums), in an innermost loop over the outputs that the compiler
        vectorizes instead of one dependent chain of adds per output."""
        out = e.out_vars[0]
        shape = tuple(out.aval.shape)
        n = shape_size(shape)
        self.storage(out)
        self.for_each(n, [self.store(out, "e", "0")], out)
        c = self.coords("e", shape)
        self.loop_over(contraction(e), lambda kc: self.for_each(
            n, [self.store(out, "e", f"{self.read(out)} + {self.product_term(e, c, kc)}")], out))
        self.dirty.add(self.owner[out])

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
        axis = e.params["axis"]
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
        fold = f"{acc} *= {u};" if op == "mul" else \
            reduce_combine(P.reduce_min_p if op == "min" else P.reduce_max_p, ct, acc, u, False)
        self.lines.append(f"for (long k_ = 0; k_ < {k}; k_++) if ({self.read(idx, 'k_')} == {index}) {{ {fold} }}")
        return acc

    def emit_branches(self, e) -> None:
        """A cond: the branch its (uniform) index picks, clamped as numpy's backend does, each
        branch's values written in its own block; a call: its body inline."""
        if e.primitive is control.cond_p:
            index, *ops = e.inputs
        else:
            index, ops = None, list(e.inputs)
        subs = branches(e)
        for v in e.out_vars:  # the outputs, written by whichever branch runs
            if v.aval.shape == ():
                self.names[v] = f"r{self.count}"
                self.count += 1
                self.lines.append(f"{self.ctype(v.aval.dtype)} {self.names[v]};")
            else:
                self.storage(v)
        pick = None if index is None else \
            self.fresh(np.int64, f"clamp((long)({self.read(index)}), 0L, {len(subs) - 1}L)")
        entry = set(self.dirty), set(self.scattered)
        for k, b in enumerate(subs):
            self.dirty, self.scattered = set(entry[0]), set(entry[1])
            test = "" if len(subs) == 1 else "else " if k == len(subs) - 1 else \
                f"{'if' if k == 0 else 'else if'} ({pick} == {k}) "
            outer, self.lines = self.lines, []
            for v, a in zip(b.jaxpr.in_vars, ops):
                self.alias(v, a)
            for v, c in zip(b.jaxpr.const_vars, b.consts):
                self.bind_input(v, np.asarray(c))
            self.emit_all(b.jaxpr.eqns, {a for a in b.jaxpr.outs if type(a) is not Literal})
            self.sync([o for v, o in zip(e.out_vars, b.jaxpr.outs) if v.aval.shape != ()], aligned=True)
            for v, o in zip(e.out_vars, b.jaxpr.outs):
                if v.aval.shape == ():
                    self.lines.append(f"{self.names[v]} = {self.read(o)};")
                else:
                    self.for_each(shape_size(v.aval.shape), [self.store(v, "e", self.read(o))])
            body, self.lines = self.lines, outer
            self.lines += [f"{test}{{"] + ["    " + line for line in body] + ["}"]
        self.after_block(entry[0])

    def after_block(self, entry: set) -> None:
        """After a loop or a branch: anything written in it may be read (a work-group syncs
        before any read)."""
        self.dirty = entry | set(self.owner.values()) - {None}
        self.scattered = set(self.dirty)

    def emit_threefry(self, e) -> None:
        """``threefry2x32`` (``ft.random``'s hash) of operands broadcast to its outputs' shape,
        by threefry.cl's function."""
        self.helpers.add(_threefry_function())
        shape = tuple(e.out_vars[0].aval.shape)
        if shape == ():
            y = f"u{self.count}"
            self.count += 1
            self.lines.append(f"const uint2 {y} = ft_threefry2x32({', '.join(self.read(a) for a in e.inputs)});")
            for v, part in zip(e.out_vars, ("x", "y")):
                self.names[v] = f"{y}.{part}"
            return
        self.sync(e.inputs)
        c = self.coords("e", shape)
        args = ", ".join(self.read(a, _broadcast_index(c, shape, tuple(a.aval.shape))) for a in e.inputs)
        for v in e.out_vars:
            self.storage(v)
            self.dirty.add(self.owner[v])
        self.for_each(shape_size(shape), [f"const uint2 y_ = ft_threefry2x32({args});",
                                          self.store(e.out_vars[0], "e", "y_.x"), self.store(e.out_vars[1], "e", "y_.y")],
                      e.out_vars[0])

    # ------------------------------------------------------------------ loops and kernels

    def bind_input(self, var, source) -> None:
        """Bind ``var`` to a new parameter read from ``source`` (an equation input's position, or
        an array uploaded once): a scalar loaded once, an array read in place (never written)."""
        ptr = self.param(var.aval.dtype, source)
        if var.aval.shape == ():
            self.names[var] = self.fresh(var.aval.dtype, self.read_at(ptr, var, "0"))
        else:
            self.slots[var], self.owner[var] = ptr, None

    def alias(self, var, a) -> None:
        """Bind ``var`` to operand ``a``'s value (a literal, a scalar, an array's storage)."""
        if type(a) is Literal or a in self.names:
            self.names[var] = self.read(a)
        else:
            self.slots[var], self.owner[var] = self.slots[a], self.owner[a]

    def emit_loop(self, eqn, outs: list | None = None) -> None:
        """Emit the loop ``eqn`` (scan or while) over its bound operands.  Nested (``outs`` None):
        its outputs bound to the final carries' storage and new ys arrays.  The kernel's own loop
        (``outs``: the output parameters, carries then ys): ys rows written to their parameters,
        the steps those of the launch (``s0`` .. ``s1``), the final carries left in storage."""
        loop = describe_loop(eqn)
        if outs is not None and self.guard is not None:  # rows: each work-group tests its own rows
            loop.cond, loop.pred = loop.cond[:-1], self.guard
        operand = lambda o: Literal(np.asarray(o)) if isinstance(o, np.ndarray) and o.shape == () else \
            o if isinstance(o, np.ndarray) else eqn.inputs[o]
        for outer, inner in loop.consts:
            a = operand(outer)
            for v in inner:
                if isinstance(a, np.ndarray):
                    self.bind_input(v, a)
                else:
                    self.alias(v, a)
        carry_slots = set()
        self.sync(eqn.inputs)  # (once before the loop: nothing the loop reads from outside changes in it)
        for outer, inner, _ in loop.carries:
            v, a = inner[0], eqn.inputs[outer]
            if v.aval.shape == ():
                name = f"c{self.count}"
                self.count += 1
                self.lines.append(f"{self.ctype(v.aval.dtype)} {name} = {self.read(a)};")
                self.names.update((u, name) for u in inner)
                continue
            slot = self.storage(v)
            carry_slots.add(slot)
            for u in inner:
                self.slots[u], self.owner[u] = slot, slot
            self.for_each(shape_size(v.aval.shape), [self.store(v, "e", self.read(a))], v)
        i = f"i{self.count}"
        self.count += 1
        ys = outs[len(loop.carries):] if outs is not None else [
            self.allocate(loop.length * shape_size(v.aval.shape), v.aval.dtype) for v in loop.ys]
        for outer, v in loop.xs:  # row i of each xs, read in place
            n, a = shape_size(v.aval.shape), eqn.inputs[outer]
            if v.aval.shape == ():
                self.names[v] = f"x{self.count}"
                self.count += 1
            else:
                self.slots[v], self.owner[v] = f"({self.slots[a]} + {i} * {n})", self.owner[a]
        keep = {a for a in [new for _, _, new in loop.carries] + loop.ys + [loop.pred]
                if a is not None and type(a) is not Literal}
        # a while tests its predicate at the top of each iteration (``break``) on one work-item; a
        # work-group tests it before the loop and again at the end of each iteration, as the loop's
        # condition: PoCL's compiler cannot split a loop that leaves between barriers into regions
        at_end = loop.pred is not None and self.group > 1
        go = f"go{self.count}"
        self.count += 1
        if at_end:
            self.emit_all(loop.cond, keep)
            self.lines.append(f"int {go} = {self.predicate(loop.pred)};")
        entry = set(self.dirty)
        if loop.length is None:
            self.lines.append(f"while ({go}) {{" if at_end else "for (;;) {")
        elif outs is not None:
            step = f"{loop.length - 1} - s" if loop.reverse else "s"
            self.lines += ["for (long s = s0; s < s1; s++) {", f"    const long {i} = {step};"]
        else:
            step = f"{loop.length - 1} - s_" if loop.reverse else "s_"
            self.lines += [f"for (long s_ = 0; s_ < {loop.length}; s_++) {{", f"    const long {i} = {step};"]
        outer_lines, self.lines = self.lines, []
        self.dirty |= carry_slots
        for outer, v in loop.xs:
            if v.aval.shape == ():
                self.lines.append(f"const {self.ctype(v.aval.dtype)} {self.names[v]} = {self.read(eqn.inputs[outer], i)};")
        if loop.pred is not None and not at_end:
            self.emit_all(loop.cond, keep)
            self.lines.append(f"if (!({self.predicate(loop.pred)})) break;")
        self.in_place.update(self.updated_in_place(loop))
        self.emit_all(loop.eqns, keep)
        for y, v in zip(ys, loop.ys):  # row i of each ys
            n = shape_size(v.aval.shape)
            if v.aval.shape == ():
                self.lines.append(f"if (lid == 0) {self.write_at(y, v, i, self.read(v))}")
            else:
                self.for_each(n, [self.write_at(y, v, f"{i} * {n} + e", self.read(v))], v, force=True)
        self.update_carries(loop, carry_slots)
        if at_end:
            self.emit_all(loop.cond, keep)
            self.lines.append(f"{go} = {self.predicate(loop.pred)};")
        body, self.lines = self.lines, outer_lines
        self.lines += ["    " + line for line in body] + ["}"]
        self.after_block(entry)
        if outs is None:
            for v, (_, inner, _) in zip(eqn.out_vars, loop.carries):
                self.alias(v, inner[0])
            for v, y in zip(eqn.out_vars[len(loop.carries):], ys):
                self.slots[v] = self.owner[v] = y

    def updated_in_place(self, loop) -> dict:
        """{new value: carry} for the array carries whose new value a run of elementwise equations
        can write into the carry's own storage, on one work-item: a run reads its operands at the
        element it writes, and no equation after the one making the new value reads the old one
        (nor is it a ys value or another carry's new value).  No copy of the carry per iteration."""
        if self.group > 1:
            return {}
        last_read = {a: k for k, e in enumerate(loop.eqns) for a in e.inputs if type(a) is not Literal}
        made = {e.out_vars[0]: k for k, e in enumerate(loop.eqns) if len(e.out_vars) == 1 and aligned(e)}
        news = [new for _, _, new in loop.carries]
        found = {}
        for _, inner, new in loop.carries:
            v = inner[0]
            if (v.aval.shape != () and new in made and new not in found and new.aval.shape == v.aval.shape
                    and all(last_read.get(u, -1) <= made[new] for u in inner)
                    and not any(u in loop.ys or u in news for u in inner)
                    and self.batched.get(new) == self.batched.get(v)):
                found[new] = v
        return found

    def loop_source(self, eqn) -> tuple[str, str]:
        """(the source, the name) of the kernel running the loop ``eqn``: its inputs by position
        (a carry's literal initial value uploaded: a long scan's next launch reads the carries
        from buffers), carries then ys as outputs, then scratch buffers and a scan's step bounds."""
        loop = describe_loop(eqn)
        carries = {outer for outer, _, _ in loop.carries}
        self.carries_at = sum(type(a) is not Literal for k, a in enumerate(eqn.inputs) if k < min(carries, default=0))
        for k, a in enumerate(eqn.inputs):
            if k in carries and type(a) is Literal:
                carry = next(inner[0] for outer, inner, _ in loop.carries if outer == k)
                self.bind_input(a, np.asarray(a.val, carry.aval.dtype))
            elif type(a) is not Literal:
                self.bind_input(a, k)
        outs = [self.param(v.aval.dtype) for v in eqn.out_vars]
        self.emit_loop(eqn, outs)
        self.write_outputs([inner[0] for _, inner, _ in loop.carries], outs)
        return self.kernel("loop", eqn.primitive.name, ["const long s0", "const long s1"] if loop.length else [])

    def program_source(self, closed, inputs: list) -> tuple[str, str]:
        """(the source, the name) of the kernel running the program ``closed``, whose ``inputs``
        (its in-vars then const-vars) are the step's, and whose outputs ``program_outputs`` are."""
        for k, v in enumerate(inputs):
            self.bind_input(v, k)
        self.emit_all(closed.jaxpr.eqns, set(program_outputs(closed)))
        outs = program_outputs(closed)
        self.write_outputs(outs, [self.param(v.aval.dtype) for v in outs])
        return self.kernel("program", "program", [])

    def write_outputs(self, values: list, ptrs: list) -> None:
        """Store each of ``values`` to its output parameter (a scalar from work-item 0)."""
        self.sync([v for v in values if v.aval.shape != ()], aligned=True)
        for v, ptr in zip(values, ptrs):
            if v.aval.shape == ():
                self.lines.append(f"if (lid == 0) {self.write_at(ptr, v, '0', self.read(v))}")
            else:
                self.for_each(shape_size(v.aval.shape), [self.write_at(ptr, v, "e", self.read(v))], v, force=True)

    def kernel(self, kind: str, what: str, bounds: list) -> tuple[str, str]:
        params = self.params + [f"__global {CTYPE[d]}* restrict g{k}" for k, (d, _) in enumerate(self.scratch)]
        lines = lambda ls: "\n    ".join(ls)
        text = "".join(sorted(self.helpers)) + f"""
__kernel void @({', '.join(params + bounds)}) {{
    const long lid = {"get_local_id(0), items = get_local_size(0)" if self.group > 1 else "0"};{self.rows_header()}
    {lines(self.decls + self.lines)}
}}"""
        name = f"group_{what}_{hashlib.sha256(text.encode()).hexdigest()[:12]}"
        return "\n" + text.replace("__kernel void @(", f"__kernel void {name}("), name

    def predicate(self, pred) -> str:
        """A while's predicate: its value, or for a batched (guarded) one whether any of this
        work-group's rows holds it (a row whose predicate is false keeps its carry: it may stop)."""
        if not self.is_rows(pred):
            return self.read(pred)
        self.sync([pred])
        name = f"any{self.count}"
        self.count += 1
        self.lines += [f"int {name} = 0;", f"for (long r_ = lo; r_ < hi; r_++) {name} |= {self.read(pred, 'r_')};"]
        return name

    def rows_header(self) -> str:
        """A work-group per row: the rows ``lo`` .. ``hi`` - 1 that this one computes."""
        if self.rows is None:
            return ""
        return (f"\n    const long lo = get_group_id(0) * {self.per_group}, "
                f"hi = min(lo + {self.per_group}, {self.rows}L);")

    def update_carries(self, loop, carry_slots: set) -> None:
        """The carries' new values into their storage.  Every work-item has finished reading this
        iteration's values first (a barrier); a new value that is itself a carry's storage (a body
        swapping carries) is copied out before any carry is overwritten."""
        if self.group > 1:
            self.lines.append("barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);")
            self.dirty.clear()
            self.scattered.clear()
        staged, news = {}, []
        for k, (_, inner, new) in enumerate(loop.carries):
            v = inner[0]
            if v.aval.shape == ():
                news.append(self.fresh(v.aval.dtype, self.read(new)))
            elif type(new) is not Literal and self.owner.get(new) in carry_slots and self.owner.get(new) != self.owner[v]:
                n = shape_size(v.aval.shape)
                staged[k] = self.allocate(n, v.aval.dtype, self.is_rows(v))
                self.for_each(n, [f"{staged[k]}[e] = {self.read(new)};"], v)
        scalars = iter(news)
        for k, (_, inner, new) in enumerate(loop.carries):
            v = inner[0]
            if v.aval.shape == ():
                self.lines.append(f"{self.names[v]} = {next(scalars)};")
            elif k in staged:
                self.for_each(shape_size(v.aval.shape), [self.store(v, "e", f"{staged[k]}[e]")], v)
            elif type(new) is Literal or self.owner.get(new) != self.owner[v]:
                self.for_each(shape_size(v.aval.shape), [self.store(v, "e", self.read(new))], v)
        self.dirty |= carry_slots


_DOT_BLOCKS = (8, 4, 2)  # outputs a work-item sums at once in ``emit_dot_blocked`` (the first dividing the axis)


def _axis_loops(shape: tuple, rows_axis: int | None, skip: int | None = None) -> list:
    """The heads of one loop per axis of ``shape`` but those of extent 1 (and ``skip``), counter
    ``q<axis>``, outermost first; along ``rows_axis`` over the work-group's rows ``lo`` .. ``hi`` - 1
    (an empty axis keeps its loop: its counter is named, the body never runs)."""
    return [f"for (long q{k} = {'lo' if k == rows_axis else 0}; q{k} < {'hi' if k == rows_axis else n}; q{k}++) {{"
            for k, n in enumerate(shape) if n != 1 and k != skip]


def _nest(heads: list, body: list) -> list:
    """The lines of the loops ``heads`` (outermost first) around ``body``, indented, each closed."""
    depth = len(heads)
    return (["    " * d + h for d, h in enumerate(heads)] + ["    " * depth + line for line in body]
            + ["    " * d + "}" for d in reversed(range(depth))])


def contraction(e) -> list:
    """The extents of the product ``e``'s contracting dimensions (its terms per output, as a shape)."""
    x = e.inputs[0]
    return [x.aval.shape[d] for d in e.params["dimension_numbers"][0][0]]


def _by_terms(e) -> bool:
    """Does the product ``e`` run faster by terms (``GroupWriter.emit_dot_by_terms``) on one
    work-item: it has more than one term per output, and its operands' elements along the
    output's innermost axis lie next to each other (that axis is the last of each operand it
    indexes), so the loop over it vectorizes.  Else each output sums in a private accumulator."""
    x, y = e.inputs
    if shape_size(contraction(e)) < 2:
        return False
    shape = e.out_vars[0].aval.shape
    inner = max((k for k, n in enumerate(shape) if n > 1), default=None)
    if inner is None:
        return False
    _, _, lb, rb, lf, rf = P.dot_dims(len(x.aval.shape), len(y.aval.shape), e.params["dimension_numbers"])
    if inner < len(lb):
        dims = [(x, lb[inner]), (y, rb[inner])]
    elif inner < len(lb) + len(lf):
        dims = [(x, lf[inner - len(lb)])]
    else:
        dims = [(y, rf[inner - len(lb) - len(lf)])]
    return all(all(n == 1 for n in a.aval.shape[d + 1:]) for a, d in dims)


def _threefry_function() -> str:
    """threefry.cl's ``ft_threefry2x32`` function (guarded: a program defines it once)."""
    text = kernel_source("threefry.cl")
    start = text.index("#ifndef FT_THREEFRY2X32")
    end = text.index("#endif", start) + len("#endif")
    return text[start:end] + "\n"


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
