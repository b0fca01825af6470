"""The fuzzing loop: :class:`Fuzzer` runs the programs of one seed in one mode (with the
generator's options and the other libraries to compare), collects their failures, shrinks each to
the smallest prefix of its program that still fails the same way, and reports it as source with
the command that reproduces it.
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
from .oracles import ORACLE_KINDS, jax_incomparable, load_jax, oracle_function
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
    unsupported: dict = field(default_factory=dict)  # another library lacks a function: by message
    refused: dict = field(default_factory=dict)  # JAX raised, or promoted unlike numpy: by message
    notes: list = field(default_factory=list)  # comparisons asked for and not made (jax absent)

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
        lines += self.notes
        by_class: dict = {}
        for f in self.failures:
            by_class.setdefault(f.signature, []).append(f)
        for sig, fs in sorted(by_class.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"  {len(fs):4d} x {sig}   e.g. --program {fs[0].program.index}")
        for label, counts in (("reference failed", self.rejected), ("skipped, no counterpart", self.unsupported),
                              ("jax raised or chose another dtype", self.refused)):
            for msg, n in sorted(counts.items(), key=lambda kv: -kv[1]):
                lines.append(f"  {label} {n} x: {msg}")
        return "\n".join(lines)


class Fuzzer:
    """Runs programs of one seed in one mode and collects their failures.  ``extremes`` and
    ``dtypes`` are the generator's options (:mod:`.generator`); ``against`` names other libraries
    whose results are checked too: "numpy" (numpy itself; always with ``extremes``, whose IEEE
    edge cases only a library computing each function whole shows) and "jax" (when importable;
    else a note in the summary says it was not compared)."""

    def __init__(self, seed: int = 0, mode: str = "default", sets: int = 2, kinds=KINDS, impls=IMPLS,
                 minimize: bool = True, log: Callable = print, extremes: bool = False, dtypes: str = "float",
                 against=()):
        if mode not in ("default", "kernels"):
            raise ValueError(f"fuzz: mode must be 'default' or 'kernels', got {mode!r}")
        if set(against) - {"numpy", "jax"}:
            raise ValueError(f"fuzz: against takes 'numpy' and 'jax', got {against!r}")
        self.seed, self.mode, self.sets, self.kinds, self.impls = seed, mode, sets, tuple(kinds), tuple(impls)
        self.extremes, self.dtypes, self.against = extremes, dtypes, tuple(against)
        self.minimize = minimize
        self.log = log
        self.stats = Stats()
        self.oracles = ("numpy-lib",) if extremes or "numpy" in against else ()
        self.jax = None
        if "jax" in against:
            loaded = load_jax()
            if isinstance(loaded, str):
                self.stats.notes.append(f"jax comparison skipped: {loaded}")
            else:
                self.jax, self.oracles = loaded, self.oracles + ("jax",)

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
        prog = generate(self.seed, index, self.extremes, self.dtypes)
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
        interp = BoundInterpreter(prog.float_dtype)
        jitted: dict = {}
        failures = []
        oracle_fns: dict = {}  # (oracle, kind) -> what it runs, built at the first input set
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
                impls = self.impls + tuple(o for o in self.oracles if kind in ORACLE_KINDS[o])
                for impl in (impls if only is None else (only[1],)):
                    run = fn
                    if impl in self.oracles:
                        if (impl, kind) not in oracle_fns:
                            oracle_fns[impl, kind] = oracle_function(impl, prog, kind, self.jax)
                        run = oracle_fns[impl, kind]
                        if run is None:
                            continue
                        if impl == "jax":
                            unlike = jax_incomparable(kind, args)
                            if unlike:
                                self._count(self.stats.unsupported, f"jax: {unlike}")
                                continue
                    self.stats.comparisons += 1
                    if impl == "jvp":
                        found = directional_check(prog, ns, inputs, want, interp)
                    else:
                        found = check_impl(prog, run, args, inputs, jitted, kind, impl, avals, want)
                    if found is not None and not self._not_a_failure(impl, *found):
                        failures.append(Failure(prog, kind, impl, k, *found))
                if kind == "grad" and only is None:
                    self.stats.comparisons += 1
                    found = directional_check(prog, ns, inputs, want, interp)
                    if found is not None:
                        failures.append(Failure(prog, kind, "jvp", k, *found))
        return failures

    def _not_a_failure(self, impl: str, what: str, detail: str) -> bool:
        """Another library without the program's function, JAX raising on a program that
        functrace runs, or JAX's dtype where its promotion differs from numpy's (which functrace
        follows) is counted rather than reported (it says nothing of functrace)."""
        if what == "unsupported":
            self._count(self.stats.unsupported, detail)
        elif impl == "jax" and what in ("exception", "dtype"):
            self._count(self.stats.refused, detail)
        else:
            return False
        return True

    @staticmethod
    def _count(counts: dict, detail: str):
        msg = detail.splitlines()[0][:120]
        counts[msg] = counts.get(msg, 0) + 1

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
                f"mode {self.mode}{self.options()}, {prog.dtype.name}), {f.kind} via {f.impl}, input set "
                f"{f.input_set} ({how}{', with NaN/inf' if inputs.special else ''})")
        lines = [head, textwrap.indent(f.detail, "  "),
                 f"  reproduce: python -m functrace.fuzz --seed {self.seed} --mode {self.mode}{self.options()} "
                 f"--program {f.program.index}",
                 f"  inputs: {prog.describe_inputs()}" + (f"; vmap batch {prog.batch}" if f.kind == "vmap" else "")]
        if f.minimal is not None:
            lines.append("  smallest failing part of the program:")
        lines.append(textwrap.indent(prog.source(), "    "))
        return "\n".join(lines)

    def options(self) -> str:
        """The command-line options, past ``--mode``, that make this fuzzer's programs."""
        return ((" --extremes" if self.extremes else "") + (" --dtypes all" if self.dtypes == "all" else "") +
                "".join(f" --against {a}" for a in self.against))
