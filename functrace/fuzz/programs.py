"""What the fuzzer runs: a :class:`Program` (Python source over ``functrace.numpy``, kept
statement by statement, so the statements any of its values depends on are a program too, which
is how a failure is shrunk) and its input sets, drawn from ``(seed, index)`` alone so that both
can be regenerated anywhere.
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

import numpy as np

import functrace as ft
import functrace.numpy as fnp


@dataclass
class InputSpec:
    """One argument: ``kind`` "float" (the program's dtype), "labels" (int32 in [0, high)) or
    "index" (int64 in [0, high)); ``batched``: it gets the leading axis under ``vmap``."""
    name: str
    shape: tuple
    kind: str = "float"
    high: int = 0
    batched: bool = True


@dataclass
class Stmt:
    """Lines of the program's body defining ``outs`` from ``deps``."""
    outs: list
    code: str
    deps: list


@dataclass
class Program:
    """A generated program: its inputs, statements and outputs, each value's ``(shape, dtype)`` in
    ``avals``, and ``batch``, the size of the leading axis its ``vmap`` runs over."""
    seed: int
    index: int
    dtype: np.dtype
    inputs: list
    stmts: list
    outputs: list
    batch: int = 2
    avals: dict = field(default_factory=dict)  # var -> (shape, dtype)

    def restricted(self, outputs: list) -> "Program":
        """The program computing only ``outputs`` (the statements they depend on)."""
        need, stmts = set(outputs), []
        for s in reversed(self.stmts):
            if need & set(s.outs):
                stmts.append(s)
                need |= set(s.deps)
        inputs = [i for i in self.inputs if i.name in need]
        return Program(self.seed, self.index, self.dtype, inputs, stmts[::-1], list(outputs), self.batch, self.avals)

    @property
    def float_outputs(self) -> list:
        return [o for o in self.outputs if np.dtype(self.avals[o][1]).kind == "f"]

    @property
    def float_inputs(self) -> list:
        return [i for i, s in enumerate(self.inputs) if s.kind == "float"]

    def source(self) -> str:
        """The program as a standalone Python function ``f`` (and ``loss``, the scalar whose
        ``value_and_grad`` is compared)."""
        args = ", ".join(i.name for i in self.inputs)
        body = "\n".join(s.code for s in self.stmts) or "pass"
        outs = ", ".join(self.outputs)
        src = f"def f({args}):\n{textwrap.indent(body, '    ')}\n    return ({outs},)\n"
        fo = self.float_outputs
        if fo and self.float_inputs:
            ws = [f"w{k}" for k in range(len(fo))]
            terms = " + ".join(f"fnp.sum(outs[{self.outputs.index(o)}] * {w})" for o, w in zip(fo, ws))
            src += f"\n\ndef loss({args}, {', '.join(ws)}):\n    outs = f({args})\n    return {terms}\n"
        return src

    def describe_inputs(self) -> str:
        return ", ".join(f"{i.name}: {i.kind}{list(i.shape)}" + (f"<{i.high}" if i.high else "") +
                         ("" if i.batched else " (not batched)") for i in self.inputs)

    def namespace(self) -> dict:
        ns = {"np": np, "ft": ft, "fnp": fnp}
        exec(compile(self.source(), f"<fuzz program {self.seed}:{self.index}>", "exec"), ns)
        return ns


@dataclass
class InputSet:
    """Arguments of one run: ``args`` for ``f``, ``weights`` for ``loss``, ``batched`` for ``vmap``
    (a leading axis of ``program.batch`` on the batched inputs); ``on_device``: OpenCL gets
    them through ``ft.device_put``."""
    args: list
    weights: list
    batched: list
    on_device: bool
    special: bool


def make_inputs(prog: Program, k: int) -> InputSet:
    """Input set ``k`` of ``prog``: each array drawn from its own seed (by name), so a program
    restricted to fewer inputs gets the same values."""
    rng = np.random.default_rng([prog.seed, prog.index, k])
    scale = float(rng.choice([1.0, 1.0, 3.0, 0.2]))
    special = bool(rng.random() < 0.12)
    on_device = bool(rng.random() < 0.5)

    def draw(spec: InputSpec, shape: tuple, slot: int) -> np.ndarray:
        r = np.random.default_rng([prog.seed, prog.index, k, int(spec.name[1:]), slot])
        if spec.kind != "float":
            return r.integers(0, max(spec.high, 1), shape).astype(np.int32 if spec.kind == "labels" else np.int64)
        x = (r.standard_normal(shape) * scale).astype(prog.dtype)
        if special and x.size:
            flat = x.reshape(-1)
            at = r.integers(0, flat.size, min(flat.size, 1 + flat.size // 2000))
            flat[at] = r.choice(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], prog.dtype), at.size)
        return x

    args = [draw(s, s.shape, 0) for s in prog.inputs]
    batched = [np.stack([draw(s, s.shape, 1 + b) for b in range(prog.batch)]) if s.batched else a
               for s, a in zip(prog.inputs, args)]
    weights = [np.random.default_rng([prog.seed, prog.index, k, 10_000 + j]).standard_normal(
        prog.avals[o][0]).astype(prog.dtype) for j, o in enumerate(prog.float_outputs)]
    return InputSet(args, weights, batched, on_device, special)

