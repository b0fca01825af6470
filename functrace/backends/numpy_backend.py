"""The reference backend: the optimized IR replayed with each primitive's numpy implementation.

Compilation resolves every variable to a slot in a flat list and precomputes which slots
die after each step, so a call is one tight loop and intermediates are freed at their
last use.

Products run on the host BLAS at the process's own thread count, which functrace never changes:
OpenBLAS rounds differently at different counts (e.g. 1 and 2 threads with
``OPENBLAS_CORETYPE=Haswell``), and the same inputs must give the same bits on every call and from
every thread.  A user who wants fewer BLAS threads sets them (``OPENBLAS_NUM_THREADS``,
threadpoolctl) for the whole process.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from .. import primitives as P
from ..core import ClosedJaxpr, Literal
from ..core.config import config
from ..core.eager import as_eager
from ..core.errors import check_nans
from ..transforms.optimize import analyze


class NumpyExecutable:
    """A compiled program: ``exe(*flat_args) -> list of outputs``."""

    backend = "numpy"

    def __init__(self, closed: ClosedJaxpr):
        jaxpr = closed.jaxpr
        self.closed = closed
        analysis = analyze(closed)
        slots: dict = {}
        template: list = []

        def slot(a) -> int:
            if type(a) is Literal:
                template.append(a.val)
                return len(template) - 1
            if a not in slots:
                slots[a] = len(template)
                template.append(None)
            return slots[a]

        for v, c in zip(jaxpr.const_vars, closed.consts):
            template[slot(v)] = c
        self.in_slots = [slot(v) for v in jaxpr.in_vars]
        steps = []
        fresh = _freshness(jaxpr)
        donated = donations(jaxpr, analysis, fresh)
        in_place = in_place_operands(jaxpr, analysis, fresh)
        for i, eqn in enumerate(jaxpr.eqns):
            ins = [slot(a) for a in eqn.inputs]
            outs = [slot(v) for v in eqn.out_vars]
            impl = eqn.primitive.impl
            if impl is None:
                raise NotImplementedError(f"primitive '{eqn.primitive.name}' has no numpy implementation")
            frees = tuple(slots[a] for a in set(eqn.inputs)
                          if type(a) is not Literal and analysis.last_use.get(a) == i
                          and a not in jaxpr.const_vars and a not in jaxpr.in_vars)
            params = dict(eqn.params, donated=in_place[i]) if i in in_place else eqn.params
            steps.append((impl, params, tuple(ins), outs[0] if not eqn.primitive.multiple_results else tuple(outs),
                          eqn.primitive.multiple_results, frees))
        self.steps = steps
        # step -> the slot of the dying operand its ufunc writes its result over (see donations)
        self._donated = {i: slots[jaxpr.eqns[i].inputs[pos]] for i, pos in donated.items()}
        self.out_slots = [slot(a) for a in jaxpr.outs]
        # outputs that are constants of the program or its arguments: returned by value (a copy per
        # call), else a caller changing one would change every later call's result (the constant
        # itself), or changing an argument would change a result
        arguments = set(jaxpr.in_vars)
        self._copied_outs = [k for k, (s, a) in enumerate(zip(self.out_slots, jaxpr.outs))
                             if isinstance(template[s], np.ndarray) or a in arguments]
        self.template = template
        self.num_steps = len(steps)
        self._run = self._generate(slots, jaxpr, _paired_matrix_vector_products(jaxpr))

    def _generate(self, slots: dict, jaxpr, pairs: dict):
        """Python source for the whole program: one local variable per value, one call per
        equation, ``del`` at last uses.  Compiled once; a call then costs a plain function call
        per equation (no interpreter loop, no environment list).  ``pairs``: products of one
        matrix with two vectors, computed together at the first one (the second only frees)."""
        names = {}
        for i, val in enumerate(self.template):
            names[i] = f"c{i}" if val is not None else f"v{i}"
        namespace = {f"c{i}": v for i, v in enumerate(self.template) if v is not None}
        lines = [f"def run({', '.join(names[s] for s in self.in_slots)}):"]
        second = {j for j, _ in pairs.values()}
        for k, (impl, params, ins, out, multiple, frees) in enumerate(self.steps):
            fn = f"f{k}"
            if k in pairs:
                j, (matrix, contracted) = pairs[k]
                namespace[fn] = functools.partial(_two_matrix_vector_products, contracted=contracted)
                vectors = [ins[1 - matrix], self.steps[j][2][1 - matrix]]
                call = f"{fn}({names[ins[matrix]]}, {', '.join(names[i] for i in vectors)})"
                lines.append(f"    {names[out]}, {names[self.steps[j][3]]} = {call}")
            elif k not in second:
                args = [names[i] for i in ins] + ([f"out={names[self._donated[k]]}"] if k in self._donated else [])
                namespace[fn] = functools.partial(impl, **params) if params else impl
                call = f"{fn}({', '.join(args)})"
                target = ", ".join(names[o] for o in out) + ("," if len(out) == 1 else "") if multiple else names[out]
                lines.append(f"    {target} = {call}" if target else f"    {call}")  # (no outputs: an effect)
            dead = [names[f] for f in frees]
            if dead:
                lines.append(f"    del {', '.join(dead)}")
        lines.append(f"    return [{', '.join(names[s] for s in self.out_slots)}]")
        exec(compile("\n".join(lines), "<functrace numpy program>", "exec"), namespace)
        return namespace.pop("run")  # (kept in its own globals, it would be a reference cycle)

    num_kernel_launches = 0

    def __call__(self, *args):
        return [as_eager(r) for r in self.run_arrays(*args)]  # eager arrays: JAX's .at (eager.py)

    def run_arrays(self, *args) -> list:
        """The results as plain ndarrays, none sharing an argument's memory (see ``_owned``)."""
        results = (self._run_checking_nans if config.debug_nans else self._run)(*args)
        for k in self._copied_outs:
            results[k] = np.array(results[k])
        return _owned(results, args)

    def _run_checking_nans(self, *args):
        """The slow path of ``debug_nans``: check every step's outputs."""
        env = list(self.template)
        for s, a in zip(self.in_slots, args):
            env[s] = a
        for (impl, params, ins, out, multiple, _), eqn in zip(self.steps, self.closed.jaxpr.eqns):
            result = impl(*[env[i] for i in ins], **params)
            for r in (result if multiple else (result,)):
                check_nans(eqn.primitive.name, r)
            if multiple:
                for s, r in zip(out, result):
                    env[s] = r
            else:
                env[out] = result
        return [env[s] for s in self.out_slots]

    def as_text(self) -> str:
        return str(self.closed)

    def report(self) -> str:
        return (f"numpy backend: {self.num_steps} equations, each run by its numpy implementation\n"
                f"peak live intermediate bytes: {analyze(self.closed).peak_bytes}")


# Two products of one matrix with two vectors (A @ x and A @ v: the primal and tangent of a
# forward-mode derivative, a Hessian-vector product) as one product with the two vectors as rows:
# one pass over the matrix instead of two.  Measured (one thread, float64): a win from 192x192
# (11 vs 8 us) to 512x512 (86 vs 52 us) where the matrix stays in the L2 cache; beyond it BLAS
# packs the matrix for its 2-column product (768: 317 vs 351 us; float32 1024: 284 vs 624 us),
# below, the call overheads dominate (128: 5.7 vs 6.1 us).  Hence the window on the matrix bytes.
PAIRED_MATVEC_BYTES = (192 << 10, 2 << 20)


def _paired_matrix_vector_products(jaxpr) -> dict:
    """{first equation: (second equation, (matrix operand position, its contracted axis))} for
    dot_generals of the same 2-D matrix (in ``PAIRED_MATVEC_BYTES``) with a 1-D vector each,
    equal dimension numbers, where the second's vector exists before the first runs."""
    defined = {v: -1 for v in list(jaxpr.in_vars) + list(jaxpr.const_vars)}
    waiting: dict = {}  # (matrix, position, dimension numbers, vector aval) -> first equation
    pairs: dict = {}
    for i, eqn in enumerate(jaxpr.eqns):
        key = _matvec_key(eqn)
        if key is not None:
            first = waiting.pop(key, None)
            vector = eqn.inputs[1 - key[1]]
            if first is not None and defined.get(vector, i) < first:
                pairs[first] = (i, (key[1], key[2][0][key[1]][0]))
            else:
                waiting[key] = i
        for v in eqn.out_vars:
            defined[v] = i
    return pairs


def _matvec_key(eqn):
    """What identifies ``eqn`` as a product of a matrix (a variable) with a vector, or None."""
    if eqn.primitive is not P.dot_general_p or eqn.params["dimension_numbers"][1] != ((), ()):
        return None
    dn = eqn.params["dimension_numbers"]
    for matrix in (0, 1):
        m, vec = eqn.inputs[matrix], eqn.inputs[1 - matrix]
        if (type(m) is not Literal and len(m.aval.shape) == 2 and len(vec.aval.shape) == 1
                and PAIRED_MATVEC_BYTES[0] <= m.aval.size * m.aval.dtype.itemsize <= PAIRED_MATVEC_BYTES[1]):
            return (m, matrix, dn, vec.aval.shape, vec.aval.dtype)
    return None


def _two_matrix_vector_products(m, a, b, *, contracted: int):
    """The products of matrix ``m`` (contracted over axis ``contracted``) with vectors a and b."""
    rows = np.dot(np.stack((a, b)), m.T if contracted == 1 else m)
    return rows[0], rows[1]


# primitives whose numpy implementation returns a new array (never a view of an operand, nor the
# operand itself): a value read only by these has no alias when its last reader runs
FRESH_RESULTS = frozenset({P.dot_general_p, P.reduce_sum_p, P.reduce_max_p, P.reduce_min_p})


def _is_ufunc_step(eqn) -> bool:
    """An elementwise equation run by a bare numpy ufunc (which takes ``out=``), on arrays."""
    return (getattr(eqn.primitive, "elementwise", False) and isinstance(eqn.primitive.impl, np.ufunc)
            and not eqn.params and len(eqn.out_vars) == 1 and len(eqn.out_vars[0].aval.shape) > 0)


def donations(jaxpr, analysis, fresh: "_Freshness") -> dict:
    """{equation index: operand position} of elementwise equations that may write their result
    over a dying operand instead of a new array: the operand is an intermediate made by a ufunc
    step or a product (a new array of its own), every reader of it makes new arrays (no view of
    it is alive), this equation is its last use, and it has the result's shape and dtype, a float
    or complex one that every operand has (the ufunc makes that dtype: no other cast).  A new
    array per elementwise step cost the MLP step (784-512-512-10, batch 128) its allocation and
    the first touch of cold memory: ~6 us per 128x512 float32 add (20 -> 13 us), on every bias
    add, tanh and tanh derivative."""
    made_fresh, other_readers, outs = fresh
    donated = {}
    for i, eqn in enumerate(jaxpr.eqns):
        if not _is_ufunc_step(eqn):
            continue
        out = eqn.out_vars[0].aval
        if np.dtype(out.dtype).kind not in "fc" or any(np.dtype(a.aval.dtype) != np.dtype(out.dtype)
                                                       for a in eqn.inputs):
            continue  # (a ufunc on integers may not keep their dtype: true_divide makes floats)
        for pos, a in enumerate(eqn.inputs):
            if (type(a) is not Literal and a in made_fresh and not other_readers[a] and a not in outs
                    and analysis.last_use.get(a) == i and tuple(a.aval.shape) == tuple(out.shape)):
                donated[i] = pos
                break
    return donated


class _Freshness(NamedTuple):
    """Which values of a program an equation may write over (``donations``, ``in_place_operands``)."""
    made_fresh: set  # values made as new arrays of their own by a ufunc step or a product
    other_readers: dict  # value -> indices of the equations reading it that may keep a view or return it
    outs: set  # the program's outputs


def _freshness(jaxpr) -> _Freshness:
    made_fresh = set()
    other_readers: dict = {}
    for i, eqn in enumerate(jaxpr.eqns):
        fresh = _is_ufunc_step(eqn) or eqn.primitive in FRESH_RESULTS
        for a in eqn.inputs:
            if type(a) is not Literal:
                other_readers.setdefault(a, [])
                if not fresh:
                    other_readers[a].append(i)
        if fresh and len(eqn.out_vars) == 1 and len(eqn.out_vars[0].aval.shape) > 0:
            made_fresh.add(eqn.out_vars[0])
    return _Freshness(made_fresh, other_readers, {a for a in jaxpr.outs if type(a) is not Literal})


def in_place_operands(jaxpr, analysis, fresh: _Freshness) -> dict:
    """{equation index: operand positions} of collectives that may reduce those operands in place
    (``reduces_in_place`` primitives, e.g. psum): operands made as new arrays by a ufunc step or a
    product, read once by this equation, their last use, by no other equation that could keep a
    view, not outputs.  A data-parallel step's gradients reach ``pmean`` this way: the 2-process MLP
    step (benchmarks/bench_distributed.py, numpy backend) spent 0.53-0.65 ms per step in Allreduce
    in place against 0.73-0.91 ms out of place, 4.74-4.78 vs 5.00 ms a step."""
    made_fresh, other_readers, outs = fresh
    found = {}
    for i, eqn in enumerate(jaxpr.eqns):
        if not getattr(eqn.primitive, "reduces_in_place", False):
            continue
        positions = tuple(pos for pos, a in enumerate(eqn.inputs)
                          if type(a) is not Literal and a in made_fresh and other_readers[a] == [i]
                          and eqn.inputs.count(a) == 1 and a not in outs and analysis.last_use.get(a) == i)
        if positions:
            found[i] = positions
    return found


def _owned(results: list, inputs) -> list:
    """Results, copied where they view an argument's memory (numpy's reshape and slicing return
    views): a caller's later change to its argument must not change a result, and a pooled
    argument buffer may be overwritten.  (Arguments returned as they are were copied already.)
    A result owning its memory shares nothing: the common case, one check.  A view is matched by
    the array owning its memory (numpy points every view's ``base`` at that owner) against the
    arguments' owners: one pass over the arguments, not a bounds check per argument."""
    owners = None
    owned = []
    for r in results:
        if isinstance(r, np.ndarray) and r.base is not None:
            owner = r.base
            if owners is None:
                owners = {id(x if x.base is None else x.base) for x in inputs if isinstance(x, np.ndarray)}
            if isinstance(owner, np.ndarray) and owner.base is None:
                shares = id(owner) in owners
            else:  # memory owned by something else (a buffer, an mmap): check the bounds
                shares = any(np.may_share_memory(r, x) for x in inputs if isinstance(x, np.ndarray))
            if shares:
                r = np.array(r)
        owned.append(r)
    return owned