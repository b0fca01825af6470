"""The reference backend: the optimized IR replayed with each primitive's numpy implementation.

Compilation resolves every variable to a slot in a flat list and precomputes which slots
die after each step, so a call is one tight loop and intermediates are freed at their
last use.
"""
from __future__ import annotations

import functools

import numpy as np

from ..config import check_nans, config
from ..core import ClosedJaxpr, Literal
from ..eager import as_eager
from ..optimize import analyze


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
        for i, eqn in enumerate(jaxpr.eqns):
            ins = [slot(a) for a in eqn.inputs]
            outs = [slot(v) for v in eqn.out_vars]
            impl = eqn.primitive.impl
            if impl is None:
                raise NotImplementedError(f"primitive '{eqn.primitive.name}' has no numpy implementation")
            frees = tuple(slots[a] for a in set(eqn.inputs)
                          if type(a) is not Literal and analysis.last_use.get(a) == i
                          and a not in jaxpr.const_vars and a not in jaxpr.in_vars)
            steps.append((impl, eqn.params, tuple(ins), outs[0] if not eqn.primitive.multiple_results else tuple(outs),
                          eqn.primitive.multiple_results, frees))
        self.steps = steps
        self.out_slots = [slot(a) for a in jaxpr.outs]
        # outputs that are constants of the program: returned by value (a copy per call), else a
        # caller changing one would change every later call's result (and the constant itself)
        self._const_outs = [k for k, s in enumerate(self.out_slots) if isinstance(template[s], np.ndarray)]
        self.template = template
        self.num_steps = len(steps)
        self._run = self._generate(slots, jaxpr)

    def _generate(self, slots: dict, jaxpr):
        """Python source for the whole program: one local variable per value, one call per
        equation, ``del`` at last uses.  Compiled once; a call then costs a plain function call
        per equation (no interpreter loop, no environment list)."""
        names = {}
        for i, val in enumerate(self.template):
            names[i] = f"c{i}" if val is not None else f"v{i}"
        namespace = {f"c{i}": v for i, v in enumerate(self.template) if v is not None}
        lines = [f"def run({', '.join(names[s] for s in self.in_slots)}):"]
        for k, (impl, params, ins, out, multiple, frees) in enumerate(self.steps):
            fn = f"f{k}"
            namespace[fn] = functools.partial(impl, **params) if params else impl
            call = f"{fn}({', '.join(names[i] for i in ins)})"
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
        results = self._run_checking_nans(args) if config.debug_nans else self._run(*args)
        for k in self._const_outs:
            results[k] = np.array(results[k])
        return [as_eager(r) for r in _owned(results, args)]  # eager arrays: JAX's .at (eager.py)

    def _run_checking_nans(self, args):
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


def _owned(results: list, inputs) -> list:
    """Results, copied where they share memory with an input (numpy's reshape, slicing or
    identity return views): a caller's later change to its input must not change a result, and
    a pooled input buffer may be overwritten.  A result that owns its memory (no ``base``) and
    is not an input shares nothing: the common case, cheap.  A view is matched by the array
    owning its memory (numpy points every view's ``base`` at that owner) against the inputs'
    owners: one pass over the inputs, not a memory-bounds check per input (~8 us for 22)."""
    owners = None
    owned = []
    for r in results:
        if isinstance(r, np.ndarray) and (r.base is not None or any(r is x for x in inputs)):
            owner = r if r.base is None else r.base
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
