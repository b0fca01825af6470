"""What the fuzzer runs: a :class:`Program` (Python source over ``functrace.numpy``, kept
statement by statement, so the statements any of its values depends on are a program too, which
is how a failure is shrunk) and its input sets, drawn from ``(seed, index)`` alone so that both
can be regenerated anywhere.

A program's ``extremes`` flag draws its inputs over the whole range of its dtype (subnormals,
values near overflow, huge trigonometric arguments, signed zeros, infinities and NaN) instead
of around 1; integer and bool programs get values over their dtype's whole range there too.
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

import numpy as np

import functrace as ft
import functrace.numpy as fnp


@dataclass
class InputSpec:
    """One argument: ``kind`` "float" (a float program's dtype), "int" (an integer or bool
    program's dtype), "labels" (int32 in [0, high)), "index" (int64 in [0, high)) or "unique"
    (distinct int64 in [0, high): where a repeated index would make the result depend on the
    order of updates); ``batched``: it gets the leading axis under ``vmap``."""
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
    ``avals``, ``batch``, the size of the leading axis its ``vmap`` runs over, and ``extremes``:
    its inputs span the dtype's whole range (:func:`make_inputs`)."""
    seed: int
    index: int
    dtype: np.dtype
    inputs: list
    stmts: list
    outputs: list
    batch: int = 2
    avals: dict = field(default_factory=dict)  # var -> (shape, dtype)
    extremes: bool = False

    def restricted(self, outputs: list) -> "Program":
        """The program computing only ``outputs`` (the statements they depend on)."""
        need, stmts = set(outputs), []
        for s in reversed(self.stmts):
            if need & set(s.outs):
                stmts.append(s)
                need |= set(s.deps)
        inputs = [i for i in self.inputs if i.name in need]
        return Program(self.seed, self.index, self.dtype, inputs, stmts[::-1], list(outputs), self.batch, self.avals,
                       self.extremes)

    @property
    def float_dtype(self) -> np.dtype:
        """The dtype the reference rounds floats to: the program's, or float64 (numpy's float
        for integers) in an integer or bool program."""
        return self.dtype if self.dtype.kind == "f" else np.dtype(np.float64)

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
        return ", ".join(f"{i.name}: {self.dtype.name if i.kind == 'int' else i.kind}{list(i.shape)}" +
                         (f"<{i.high}" if i.high else "") +
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
    mix = _extreme_mix(rng) if prog.extremes else None  # drawn last: the other programs' inputs stay as they were
    if mix is not None:
        special = mix[1] > 0

    def draw(spec: InputSpec, shape: tuple, slot: int) -> np.ndarray:
        r = np.random.default_rng([prog.seed, prog.index, k, int(spec.name[1:]), slot])
        if spec.kind == "unique":
            return r.permutation(max(spec.high, 1))[:shape[0]].astype(np.int64)
        if spec.kind == "int":
            return _integers(r, prog.dtype, shape, prog.extremes)
        if spec.kind != "float":
            return r.integers(0, max(spec.high, 1), shape).astype(np.int32 if spec.kind == "labels" else np.int64)
        if mix is not None:
            return _extreme_floats(r, prog.dtype, shape, mix)
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


# magnitude ranges of extreme float inputs, as (low, high) exponents of 10 (None: the dtype's own
# limits): "tiny" is the subnormal range, "huge" the decade below overflow, "trig" arguments whose
# sine needs a careful range reduction
_MAGNITUDES = {"unit": None, "wide": ("subnormal", "max"), "tiny": ("subnormal", "tiny"), "small": (-20, -5),
               "large": (5, 300), "huge": ("max-1", "max"), "trig": (3, 9)}
_SPECIALS = (np.nan, np.inf, -np.inf, 0.0, -0.0)


def _extreme_mix(rng) -> tuple:
    """The magnitude ranges an input set mixes (one to three of ``_MAGNITUDES``) and the share
    of its elements that are NaN, infinities or signed zeros."""
    names = sorted(_MAGNITUDES)
    mix = tuple(names[int(i)] for i in rng.choice(len(names), int(rng.integers(1, 4)), replace=False))
    return mix, float(rng.choice([0.0, 0.0, 0.02, 0.2]))


def _extreme_floats(r, dtype: np.dtype, shape: tuple, mix: tuple) -> np.ndarray:
    """Floats of ``dtype`` whose magnitudes each come from one of ``mix``'s ranges, both signs,
    with its share of specials."""
    ranges, share = mix
    info = np.finfo(dtype)
    limit = {"subnormal": np.log10(float(info.smallest_subnormal)), "tiny": np.log10(float(info.tiny)),
             "max": np.log10(float(info.max)), "max-1": np.log10(float(info.max)) - 1}
    which = r.integers(0, len(ranges), shape)
    x = r.standard_normal(shape)
    for j, name in enumerate(ranges):
        if _MAGNITUDES[name] is None:
            continue
        lo, hi = (limit.get(b, b) for b in _MAGNITUDES[name])
        hi = min(hi, limit["max"])
        x = np.where(which == j, np.sign(x) * 10.0 ** r.uniform(min(lo, hi), hi, shape), x)
    x = np.asarray(np.clip(x, -float(info.max), float(info.max)), dtype)
    if share and x.size:
        flat = x.reshape(-1)
        at = r.random(flat.size) < share
        flat[at] = r.choice(np.array(_SPECIALS, dtype), int(at.sum()))
    return x


def _integers(r, dtype: np.dtype, shape: tuple, extremes: bool) -> np.ndarray:
    """Integers (or bools) of ``dtype``: small ones, or with ``extremes`` a mix of small ones,
    the dtype's whole range and its edges (min, max, 0, -1)."""
    if dtype == bool:  # (an array also where shape is (): numpy's bool scalar ** 2 is int64, its array's int8)
        return np.asarray(r.random(shape) < (float(r.choice([0.5, 0.05, 0.95, 0.0, 1.0])) if extremes else 0.5))
    info = np.iinfo(dtype)
    small = r.integers(max(info.min, -9), 10, shape)
    if not extremes:
        return small.astype(dtype)
    whole = r.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    edges = r.choice(np.array(sorted({info.min, info.min + 1, 0, 1, info.max - 1, info.max} |
                                     ({-1} if info.min else set())), dtype), shape)
    which = r.integers(0, 3, shape)
    return np.where(which == 0, small.astype(dtype), np.where(which == 1, whole, edges))
