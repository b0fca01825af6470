"""The fuzzing loop: :class:`Fuzzer` runs the programs of one seed in one mode, collects their
failures, shrinks each to the smallest prefix of its program that still fails the same way, and
reports it as source with the command that reproduces it.
"""
from __future__ import annotations

import textwrap
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..core.config import config
from ..transforms.staging import make_jaxpr
from .bounds import BoundInterpreter
from .check import IMPLS, KINDS, Failure, check_impl, directional_check, kind_args, kind_function, reference
from .generator import generate
from .programs import Program, make_inputs


@dataclass
class Stats:
    """What a run tried and found; ``summary()`` groups the failures by kind, backend, dtype and
    last operation."""
    programs: int = 0
    comparisons: int = 0
    skipped: int = 0  # kinds the reference could not trace (no float output to differentiate, ...)
    failures: list = field(default_factory=list)
    rejected: dict = field(default_factory=dict)  # reference errors by message: programs the generator should not make

    @property
    def mismatches(self) -> list:
        return [f for f in self.failures if f.what != "exception"]

    @property
    def errors(self) -> list:
        return [f for f in self.failures if f.what == "exception"]

    def summary(self) -> str:
        lines = [f"programs tried: {self.programs}", f"comparisons: {self.comparisons}",
                 f"mismatches: {len(self.mismatches)}", f"errors: {len(self.errors)}"]
        if self.skipped:
            lines.append(f"comparisons skipped (nothing to differentiate or to batch): {self.skipped}")
        by_class: dict = {}
        for f in self.failures:
            by_class.setdefault(f.signature, []).append(f)
        for sig, fs in sorted(by_class.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"  {len(fs):4d} x {sig}   e.g. --program {fs[0].program.index}")
        for msg, n in sorted(self.rejected.items(), key=lambda kv: -kv[1]):
            lines.append(f"  reference failed {n} x: {msg}")
        return "\n".join(lines)


class Fuzzer:
    """Runs programs of one seed in one mode and collects their failures."""

    def __init__(self, seed: int = 0, mode: str = "default", sets: int = 2, kinds=KINDS, impls=IMPLS,
                 minimize: bool = True, log: Callable = print):
        if mode not in ("default", "kernels"):
            raise ValueError(f"fuzz: mode must be 'default' or 'kernels', got {mode!r}")
        self.seed, self.mode, self.sets, self.kinds, self.impls = seed, mode, sets, tuple(kinds), tuple(impls)
        self.minimize = minimize
        self.log = log
        self.stats = Stats()

    def run(self, indices, deadline: float | None = None) -> Stats:
        names = ("opencl_small_program_elements", "opencl_host_step_elements", "opencl_binary_cache")
        saved = {n: getattr(config, n) for n in names}
        # each program runs in this process only: saving its binary would cost more than the program
        # (docs/fuzzer.md); tests/test_opencl_cache.py checks that path
        config.update("opencl_binary_cache", False)
        if self.mode == "kernels":
            for n in names[:2]:
                config.update(n, 0)
        try:
            with np.errstate(all="ignore"):
                for i in indices:
                    if deadline is not None and time.monotonic() > deadline:
                        break
                    self.run_program(i)
        finally:
            for n, v in saved.items():
                config.update(n, v)
        return self.stats

    def run_program(self, index: int) -> list:
        prog = generate(self.seed, index)
        self.stats.programs += 1
        failures = self.check(prog, range(self.sets))
        for f in failures:
            if self.minimize:
                f.minimal = self.minimized(f)
            self.stats.failures.append(f)
            self.log(self.report(f))
        return failures

    def check(self, prog: Program, sets, only: tuple | None = None) -> list:
        """Failures of ``prog`` over input ``sets`` (``only``: one (kind, impl) pair)."""
        ns = prog.namespace()
        interp = BoundInterpreter(prog.dtype)
        jitted: dict = {}
        failures = []
        for k in sets:
            inputs = make_inputs(prog, k)
            for kind in (self.kinds if only is None else (only[0],)):
                fn = kind_function(prog, ns, kind)
                if fn is None:
                    self.stats.skipped += 1
                    continue
                args = kind_args(kind, inputs)
                try:
                    avals = make_jaxpr(fn)(*args).out_avals
                    want = reference(prog, ns, kind, inputs, interp)
                except Exception as e:  # the program is not one functrace supports: the generator's fault
                    msg = f"{kind}: {type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}"
                    self.stats.rejected[msg] = self.stats.rejected.get(msg, 0) + 1
                    continue
                for impl in (self.impls if only is None else (only[1],)):
                    self.stats.comparisons += 1
                    if impl == "jvp":
                        found = directional_check(prog, ns, inputs, want, interp)
                    else:
                        found = check_impl(prog, fn, args, inputs, jitted, kind, impl, avals, want)
                    if found is not None:
                        failures.append(Failure(prog, kind, impl, k, *found))
                if kind == "grad" and only is None:
                    self.stats.comparisons += 1
                    found = directional_check(prog, ns, inputs, want, interp)
                    if found is not None:
                        failures.append(Failure(prog, kind, "jvp", k, *found))
        return failures

    def minimized(self, failure: Failure) -> Program | None:
        """The first value of the program (in order) whose own program fails the same way."""
        prog = failure.program
        for s in prog.stmts:
            for out in s.outs:
                if out in prog.outputs and len(prog.outputs) == 1:
                    return None  # the program itself is the smallest
                small = prog.restricted([out])
                if failure.kind == "grad" and not small.float_outputs:
                    continue
                try:
                    found = self.check(small, [failure.input_set], (failure.kind, failure.impl))
                except Exception:
                    continue
                if found and found[0].what == failure.what:
                    return small
        return None

    def report(self, f: Failure) -> str:
        prog = f.minimal or f.program
        inputs = make_inputs(f.program, f.input_set)
        how = "device_put" if inputs.on_device else "host arrays"
        head = (f"=== {'ERROR' if f.what == 'exception' else 'MISMATCH'}: program {f.program.index} (seed {self.seed}, "
                f"mode {self.mode}, {prog.dtype.name}), {f.kind} via {f.impl}, input set {f.input_set} "
                f"({how}{', with NaN/inf' if inputs.special else ''})")
        lines = [head, textwrap.indent(f.detail, "  "),
                 f"  reproduce: python -m functrace.fuzz --seed {self.seed} --mode {self.mode} --program {f.program.index}",
                 f"  inputs: {prog.describe_inputs()}" + (f"; vmap batch {prog.batch}" if f.kind == "vmap" else "")]
        if f.minimal is not None:
            lines.append("  smallest failing part of the program:")
        lines.append(textwrap.indent(prog.source(), "    "))
        return "\n".join(lines)
