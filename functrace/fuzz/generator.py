"""The random program generator: a program grows statement by statement from templates over
``functrace.numpy``, ``ft.nn`` and ``ft.lax``; each proposed statement is traced with the ones
before it and kept only if it traces within the program's dtype and size limits.  A program
depends on ``(seed, index)`` and the generator's options alone, so ``--program I`` regenerates it
exactly.

Options (each off by default, so a seed's programs without them are what they always were):
``extremes`` adds functions whose edge cases need care (cumulative products, ``x.at[i]``
updates, sinh / cosh / arcsinh / arccosh / hypot / logaddexp / logaddexp2 / softplus, trigonometry
applied to the inputs themselves) and marks the program for inputs over its dtype's whole range;
``dtypes="all"`` draws integer and bool programs too (int8 ... uint64, bool), built from
arithmetic, comparisons, every reduction (sum, prod, max, min, argmax, argmin, any, all, cumsum,
cumprod), ``x.at[i]`` updates and the structural ops.
"""
from __future__ import annotations

import itertools
import math
import textwrap
from typing import Callable

import numpy as np

import functrace as ft
import functrace.numpy as fnp

from ..transforms.staging import make_jaxpr
from .programs import InputSpec, Program, Stmt

_SIZE_CLASSES = (("empty", "one", "odd", "1k", "large"), (0.08, 0.08, 0.3, 0.32, 0.22))
_MAX_ELEMENTS = 600_000
_MAX_MACS = 40_000_000
_CONSTS = ("0.5", "2.0", "-1.5", "3.0", "0.1", "-0.25", "1e-3", "7.0")

_UNARY = ("fnp.sin({a})", "fnp.cos({a})", "fnp.tanh({a})", "fnp.exp({a})", "fnp.expm1({a})", "fnp.arctan({a})",
          "fnp.log(fnp.abs({a}) + 0.5)", "fnp.log1p(fnp.abs({a}))", "fnp.sqrt(fnp.abs({a}) + 0.25)",
          "fnp.sigmoid({a})", "fnp.abs({a})", "-{a}", "fnp.square({a})", "fnp.sign({a})", "fnp.floor({a})",
          "fnp.ceil({a})", "fnp.rint({a})", "fnp.arcsinh({a})", "{a} ** 2", "{a} ** 3", "ft.nn.relu({a})",
          "ft.nn.gelu({a})", "ft.nn.silu({a})", "ft.nn.erf({a})", "fnp.sinh({a})", "fnp.cosh({a})",
          "fnp.tan({a})", "fnp.log({a})", "fnp.sqrt({a})", "1.0 / {a}", "fnp.reciprocal({a} + 2.0)",
          "fnp.arcsin(fnp.tanh({a}))", "fnp.clip({a}, -0.5, 0.75)", "fnp.maximum({a}, 0.0)", "{a} * {c}",
          "{a} + {c}", "{c} - {a}", "{a} / {c}", "fnp.power(fnp.abs({a}) + 0.5, {c})", "fnp.exp2({a})",
          "fnp.log2(fnp.abs({a}) + 1.0)", "fnp.logaddexp({a}, 0.0)", "{a} ** -1", "fnp.exp(-{a} * {a})")
_BINARY = ("{a} + {b}", "{a} - {b}", "{a} * {b}", "{a} / {b}", "{a} / (fnp.abs({b}) + 0.5)",
           "fnp.maximum({a}, {b})", "fnp.minimum({a}, {b})", "fnp.arctan2({a}, {b})", "fnp.hypot({a}, {b})",
           "fnp.logaddexp({a}, {b})", "fnp.power(fnp.abs({a}) + 0.5, {b})",
           "fnp.remainder({a}, fnp.abs({b}) + 0.5)", "fnp.where({a} > {b}, {a}, {b} * 0.5)",
           "{a} * {b} + {a}", "ft.nn.swiglu({a}, {b})", "{a} ** 2 - {b}", "fnp.tanh({a}) * {b}")
# extremes: functions written from others in functrace, whose overflow and cancellation the
# reference only sees through numpy itself (the ``numpy-lib`` check)
_EXTREME_UNARY = ("fnp.arccosh({a})", "ft.nn.softplus({a})", "fnp.logaddexp2({a}, {c})", "fnp.hypot({a}, {c})",
                  "fnp.cumprod({a}[..., :16], axis=-1)")  # (short axes: the reference multiplies step by step)
_EXTREME_BINARY = ("fnp.logaddexp2({a}, {b})", "fnp.hypot({b}, {a})", "fnp.logaddexp({b}, {a})")
# applied to inputs only: exact arguments, so sin(1e8) must be right (a computed one carries an
# error of radians) and an overflow inside the function is told from one of its argument
_ON_INPUTS_UNARY = ("fnp.sin({a})", "fnp.cos({a})", "fnp.tan({a})", "fnp.sinh({a})", "fnp.cosh({a})",
                    "fnp.tanh({a})", "fnp.arcsinh({a})", "fnp.arccosh({a})", "fnp.exp({a})", "fnp.expm1({a})",
                    "fnp.log({a})", "fnp.log1p({a})", "fnp.sqrt({a})", "ft.nn.softplus({a})", "fnp.square({a})",
                    "1.0 / {a}", "fnp.arctan({a})", "ft.nn.sigmoid({a})", "fnp.exp2({a})", "fnp.log2({a})")
_ON_INPUTS_BINARY = ("fnp.hypot({a}, {b})", "fnp.logaddexp({a}, {b})", "fnp.logaddexp2({a}, {b})",
                     "fnp.arctan2({a}, {b})", "{a} * {b}", "{a} / {b}", "{a} + {b}", "{a} - {b}",
                     "fnp.maximum({a}, {b})", "fnp.minimum({a}, {b})", "fnp.power({a}, {b})")
# integer and bool programs (a bool program's - and ** 2 are refused or promoted as numpy does)
_INT_CONSTS = ("1", "2", "3", "7")
_INT_UNARY = ("-{a}", "fnp.abs({a})", "{a} ** 2", "fnp.square({a})", "{a} * {c}", "{a} + {c}", "{c} - {a}",
              "{a} // {c}", "{a} % {c}", "~{a}", "fnp.sign({a})", "fnp.maximum({a}, {c})", "{a} >> 1", "{a} << 2",
              "fnp.where({a} > {c}, {a}, {c})")
_INT_BINARY = ("{a} + {b}", "{a} - {b}", "{a} * {b}", "fnp.maximum({a}, {b})", "fnp.minimum({a}, {b})", "{a} & {b}",
               "{a} | {b}", "{a} ^ {b}", "fnp.where({a} > {b}, {a}, {b})", "{a} * {b} + {a}")
_ALL_DTYPES = (("float32", 0.15), ("float64", 0.15), ("bool", 0.1), ("int8", 0.075), ("int16", 0.075),
               ("int32", 0.075), ("int64", 0.075), ("uint8", 0.075), ("uint16", 0.075), ("uint32", 0.075),
               ("uint64", 0.075))
_SCATTERS = ("set", "add", "mul", "min", "max")
_COMPARE = ("{a} > {b}", "{a} <= {b}", "{a} == {b}", "{a} > {c}", "{a} < {c}", "fnp.isnan({a})",
            "fnp.isfinite({a})", "fnp.abs({a}) >= 1.0")


class _Generator:
    """Builds one random program statement by statement; each proposed statement is traced
    (abstractly) with the ones before it, and kept only if it traces and keeps the program's
    dtype and size limits."""

    def __init__(self, seed: int, index: int, extremes: bool = False, dtypes: str = "float"):
        if dtypes not in ("float", "all"):
            raise ValueError(f"fuzz: dtypes must be 'float' or 'all', got {dtypes!r}")
        self.rng = np.random.default_rng([seed, index])
        self.seed, self.index, self.extremes = seed, index, extremes
        if dtypes == "float":
            self.dtype = np.dtype(np.float32 if self.rng.random() < 0.6 else np.float64)
        else:
            names, weights = zip(*_ALL_DTYPES)
            self.dtype = np.dtype(names[int(self.rng.choice(len(names), p=weights))])
        self.floating = self.dtype.kind == "f"
        # the program's values: floats of its dtype, or integers and bools (sums and counts
        # widen them) in an integer or bool program
        self.value_kind, self.value_kinds = ("float", "f") if self.floating else ("int", "biu")
        new = extremes or dtypes == "all"
        if not self.floating:
            self.unary, self.binary, self.consts = _INT_UNARY, _INT_BINARY, _INT_CONSTS
            self.reductions = ("sum", "sum", "prod", "max", "min", "argmax", "argmin", "any", "all")
            self.families = self._INT_FAMILIES
        else:
            self.unary = _UNARY + (_EXTREME_UNARY if extremes else ())
            self.binary = _BINARY + (_EXTREME_BINARY if extremes else ())
            self.consts = _CONSTS
            self.reductions = ("sum", "sum", "mean", "max", "min", "prod", "var", "std", "logsumexp", "argmax",
                               "argmin") + (("any", "all") if new else ())
            self.families = self._FAMILIES + (self._NEW_FAMILIES if new else ()) + \
                ((self._EXTREME_FAMILIES) if extremes else ())
        self.inputs: list = []
        self.stmts: list = []
        self.avals: dict = {}  # name -> (shape, dtype)
        self.created: list = []  # vars made by statements, in order
        self.counter = itertools.count()

    # ---- randomness
    def choice(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def const(self) -> str:
        return self.choice(self.consts)

    # ---- shapes
    def main_shape(self) -> tuple:
        """The first input's shape, of a size class: empty, one element, odd, ~1K, >= 131072."""
        rng = self.rng
        cls = _SIZE_CLASSES[0][int(rng.choice(len(_SIZE_CLASSES[0]), p=_SIZE_CLASSES[1]))]
        if cls == "empty":
            dims = [int(d) for d in rng.integers(1, 6, int(rng.integers(1, 4)))]
            dims[int(rng.integers(len(dims)))] = 0
            return tuple(dims)
        if cls == "one":
            return (1,) * int(rng.integers(0, 4))
        if cls == "odd":
            return tuple(int(d) for d in rng.choice([1, 3, 5, 7, 9, 11, 13, 15], int(rng.integers(1, 4))))
        target = int(rng.integers(700, 1600)) if cls == "1k" else int(self.choice(
            [131072, 131073, 200000, int(rng.integers(131072, 280000))]))
        rank = int(rng.integers(1, 4))
        dims = []
        for _ in range(rank - 1):
            d = int(self.choice([2, 3, 4, 5, 7, 8, 16, 31, 32, 64, 127, 257, 512]))
            if target // d >= 1:
                dims.append(d)
                target //= d
        dims.append(max(target, 1))
        order = rng.permutation(len(dims))
        return tuple(dims[i] for i in order)

    def compatible_shape(self, shape: tuple) -> tuple:
        """A shape that broadcasts against ``shape`` to ``shape``."""
        r = self.rng.random()
        if r < 0.4 or not shape:
            return shape
        if r < 0.7:
            return shape[int(self.rng.integers(0, len(shape) + 1)):]
        return tuple(1 if self.chance(0.5) else n for n in shape)

    # ---- variables
    def new_input(self, shape: tuple, kind: str | None = None, high: int = 0) -> str:
        """A new argument of ``shape``: a value of the program's dtype, or indices (``kind``
        "labels", "index", "unique") below ``high``."""
        kind = kind or self.value_kind
        name = f"x{len(self.inputs)}"
        batched = len(self.inputs) == 0 or self.chance(0.7)
        self.inputs.append(InputSpec(name, tuple(int(n) for n in shape), kind, high, batched))
        dtype = self.dtype if kind == self.value_kind else np.dtype(np.int32 if kind == "labels" else np.int64)
        self.avals[name] = (tuple(shape), dtype)
        return name

    def vars_of(self, kind: str | None = None, pred: Callable = lambda s: True) -> list:
        """Values of dtype kind ``kind`` (default: the program's values), inputs first."""
        kinds = kind or self.value_kinds
        names = [i.name for i in self.inputs if i.kind == self.value_kind] + self.created if kind is None \
            else self.created
        return [n for n in names if np.dtype(self.avals[n][1]).kind in kinds and pred(self.avals[n][0])]

    def pick(self, kind: str | None = None, pred: Callable = lambda s: True):
        names = self.vars_of(kind, pred)
        if not names:
            return None
        if self.chance(0.6):
            return names[-1]  # chains: the newest value
        return self.choice(names)

    def shape(self, name: str) -> tuple:
        return self.avals[name][0]

    def fresh(self) -> str:
        return f"v{next(self.counter)}"

    # ---- statements
    def emit(self, code: str, outs: list, deps: list) -> bool:
        """Keep the statement if the program still traces, in its dtype, within the size limits."""
        stmt = Stmt(outs, code, [d for d in deps if d in self.avals])
        stmts = self.stmts + [stmt]
        args = [i.name for i in self.inputs]
        body = "\n".join(s.code for s in stmts)
        src = f"def probe({', '.join(args)}):\n{textwrap.indent(body, '    ')}\n    return ({', '.join(outs)},)\n"
        ns = {"np": np, "ft": ft, "fnp": fnp}
        try:
            exec(compile(src, "<probe>", "exec"), ns)
            zeros = [np.broadcast_to(np.zeros((), self.avals[a][1]), self.avals[a][0]) for a in args]
            with np.errstate(all="ignore"):
                closed = make_jaxpr(ns["probe"])(*zeros)
        except Exception:  # an invalid proposal (shapes, axes, ...): propose another
            return False
        out_avals = closed.out_avals
        for a in out_avals:
            if a.dtype.kind == "f" and a.dtype != self.dtype or a.dtype.kind == "c":
                return False  # (an integer program has no float dtype: it stays exact)
            if a.size > _MAX_ELEMENTS:
                return False
        for o, a in zip(outs, out_avals):
            self.avals[o] = (tuple(a.shape), a.dtype)
        self.stmts.append(stmt)
        self.created.extend(outs)
        return True

    def assign(self, template: str, **names) -> bool:
        out = self.fresh()
        return self.emit(f"{out} = {template.format(**names)}", [out], list(names.values()))

    # ---- op families
    def op_unary(self) -> bool:
        a = self.pick()
        return a is not None and self.assign(self.choice(self.unary).replace("{c}", self.const()), a=a)

    def operand_like(self, shape: tuple) -> str:
        """A value broadcastable against ``shape``: an existing one or a new input."""
        want = self.compatible_shape(shape)
        found = self.vars_of(pred=lambda s: s == want)
        if found and self.chance(0.6):
            return self.choice(found)
        return self.new_input(want)

    def op_binary(self) -> bool:
        a = self.pick()
        if a is None:
            return False
        b = self.operand_like(self.shape(a))
        if self.chance(0.3):
            a, b = b, a
        return self.assign(self.choice(self.binary), a=a, b=b)

    def op_compare(self) -> bool:
        a = self.pick()
        if a is None:
            return False
        b = self.operand_like(self.shape(a))
        p = self.fresh()
        if not self.emit(f"{p} = {self.choice(_COMPARE).format(a=a, b=b, c=self.const())}", [p], [a, b]):
            return False
        q = self.pick("b")
        use = self.choice(["fnp.where({p}, {a}, {b})", "fnp.where({p}, {a}, {c})", "{p} * {a}",
                           "fnp.where(fnp.logical_and({p}, {q}), {b}, {a})", "fnp.where({p} | ~{q}, {a}, -{a})",
                           "fnp.any({p}, axis={ax})", "fnp.all({p})", "fnp.sum({p}, axis={ax})"])
        ax = self.axis_spec(self.shape(p), single=True)
        return self.assign(use.replace("{c}", self.const()).replace("{ax}", ax), p=p, q=q or p, a=a, b=b)

    def axis_spec(self, shape: tuple, single: bool = False) -> str:
        nd = len(shape)
        if nd == 0:
            return "None"
        r = self.rng.random()
        if single or r < 0.5:
            ax = int(self.rng.integers(nd))
            return str(ax - nd if self.chance(0.3) else ax)
        if r < 0.7:
            return "None"
        axes = [int(x) for x in self.rng.permutation(nd)[:int(self.rng.integers(1, nd + 1))]]
        return "(" + ", ".join(map(str, axes)) + ",)"

    def op_reduce(self) -> bool:
        a = self.pick()
        if a is None:
            return False
        shape = self.shape(a)
        kind = self.choice(self.reductions)
        keep = self.chance(0.35)
        if kind in ("argmax", "argmin"):
            ax = self.axis_spec(shape, single=True)
            if not shape or shape[int(ax)] == 0:
                return False
            return self.assign(f"fnp.{kind}({{a}}, axis={ax})", a=a)
        ax = self.axis_spec(shape)
        axes = _axes_of(ax, len(shape))
        reduced = math.prod(shape[d] for d in axes)
        if kind in ("max", "min") and reduced == 0:
            return False
        if kind == "prod":
            rest = math.prod(shape) // max(reduced, 1)
            if reduced > 64 or rest * reduced * reduced > 4_000_000:
                return False
        if kind == "logsumexp":
            return self.assign(f"ft.nn.logsumexp({{a}}, axis={ax}, keepdims={keep})", a=a)
        return self.assign(f"fnp.{kind}({{a}}, axis={ax}, keepdims={keep})", a=a)

    def op_matmul(self) -> bool:
        a = self.pick(pred=lambda s: len(s) >= 1 and s[-1] <= 4096)
        if a is None:
            return False
        shape = self.shape(a)
        k = shape[-1]
        n = int(self.choice([1, 3, 8, 17, 32, 64]))
        size = math.prod(shape)
        if size * n > _MAX_MACS or size // max(k, 1) * n > _MAX_ELEMENTS:
            return False
        r = self.rng.random()
        if r < 0.35:
            return self.assign("{a} @ {w}", a=a, w=self.weight((k, n)))
        if r < 0.5:
            letters = "abc"[:len(shape) - 1]
            return self.assign(f"fnp.einsum('{letters}k,nk->{letters}n', {{a}}, {{w}})", a=a, w=self.weight((n, k)))
        if r < 0.6 and len(shape) == 2:
            return self.assign("{w} @ {a}", a=a, w=self.weight((n, shape[0])))
        if r < 0.7 and len(shape) == 3:
            return self.assign("{a} @ {w}", a=a, w=self.weight((shape[0], k, n)))
        if r < 0.8:
            return self.assign("fnp.dot({a}, {w})", a=a, w=self.weight((k,)))
        if r < 0.9 and len(shape) == 2:
            b = self.operand_like(shape) if self.chance(0.5) else a
            return self.assign("fnp.einsum('ij,ij->i', {a}, {b})", a=a, b=b) if self.shape(b) == shape else False
        if len(shape) == 1 and k <= 700:
            b = self.pick(pred=lambda s: len(s) == 1 and s[0] <= 700) or a
            return self.assign("fnp.outer({a}, {b})", a=a, b=b)
        return self.assign("fnp.tensordot({a}, {w}, axes=1)", a=a, w=self.weight((k, n)))

    def weight(self, shape: tuple) -> str:
        found = self.vars_of(pred=lambda s: s == shape)
        return self.choice(found) if found and self.chance(0.3) else self.new_input(shape)

    def op_reshape(self) -> bool:
        a = self.pick()
        if a is None:
            return False
        shape = self.shape(a)
        size = math.prod(shape)
        r = self.rng.random()
        if r < 0.2:
            return self.assign("fnp.ravel({a})", a=a)
        new = _factor(self.rng, size)
        if r < 0.4 and new:
            i = int(self.rng.integers(len(new)))
            spec = tuple(-1 if j == i else d for j, d in enumerate(new)) if size else new
            return self.assign(f"{{a}}.reshape({spec})", a=a)
        return self.assign(f"fnp.reshape({{a}}, {new})", a=a)

    def op_transpose(self) -> bool:
        a = self.pick(pred=lambda s: len(s) >= 2)
        if a is None:
            return False
        nd = len(self.shape(a))
        r = self.rng.random()
        if r < 0.3:
            return self.assign("{a}.T", a=a)
        i, j = (int(x) for x in self.rng.integers(0, nd, 2))
        if r < 0.5:
            return self.assign(f"fnp.swapaxes({{a}}, {i}, {j})", a=a)
        if r < 0.6:
            return self.assign(f"fnp.moveaxis({{a}}, {i}, {j})", a=a)
        perm = tuple(int(x) for x in self.rng.permutation(nd))
        return self.assign(f"fnp.transpose({{a}}, {perm})", a=a)

    def op_flip(self) -> bool:
        a = self.pick(pred=lambda s: len(s) >= 1)
        if a is None:
            return False
        r = self.rng.random()
        if r < 0.3:
            return self.assign("{a}[::-1]", a=a)
        if r < 0.5:
            return self.assign("{a}[..., ::-1]", a=a)
        return self.assign(f"fnp.flip({{a}}, axis={self.axis_spec(self.shape(a))})", a=a)

    def op_slice(self) -> bool:
        a = self.pick(pred=lambda s: len(s) >= 1)
        if a is None:
            return False
        parts = []
        for n in self.shape(a):
            r = self.rng.random()
            if r < 0.35:
                parts.append(":")
            elif r < 0.45 and n > 0:
                parts.append(str(int(self.rng.integers(-n, n))))
            else:
                step = int(self.choice([1, 2, 3, 5, -1, -2, -3]))
                lo, hi = (int(x) for x in self.rng.integers(-n - 1, n + 2, 2)) if n else (0, 0)
                lo_s = "" if self.chance(0.3) else str(lo)
                hi_s = "" if self.chance(0.3) else str(hi)
                parts.append(f"{lo_s}:{hi_s}:{step}")
        if self.chance(0.15):
            parts.insert(int(self.rng.integers(len(parts) + 1)), "None")
        return self.assign(f"{{a}}[{', '.join(parts)}]", a=a)

    def op_concat(self) -> bool:
        a = self.pick(pred=lambda s: len(s) >= 1)
        if a is None:
            return False
        shape = self.shape(a)
        nd = len(shape)
        ax = int(self.rng.integers(nd))
        r = self.rng.random()
        if r < 0.25:
            same = self.vars_of(pred=lambda s: s == shape)
            b = self.choice(same)
            return self.assign(f"fnp.stack([{{a}}, {{b}}], axis={int(self.rng.integers(-nd - 1, nd + 1))})", a=a, b=b)
        if r < 0.4:
            reps = tuple(int(x) for x in self.rng.integers(1, 4, int(self.rng.integers(1, nd + 2))))
            return self.assign(f"fnp.tile({{a}}, {reps})", a=a)
        if r < 0.5:
            return self.assign(f"fnp.repeat({{a}}, {int(self.rng.integers(1, 4))}, axis={ax})", a=a)
        other = tuple(int(self.rng.integers(0, 9)) if d == ax else n for d, n in enumerate(shape))
        found = self.vars_of(pred=lambda s: len(s) == nd and all(m == n for d, (m, n) in enumerate(zip(s, shape))
                                                                  if d != ax))
        b = self.choice(found) if found and self.chance(0.5) else self.new_input(other)
        return self.assign(f"fnp.concatenate([{{a}}, {{b}}], axis={ax})", a=a, b=b)

    def op_pad(self) -> bool:
        a = self.pick(pred=lambda s: len(s) >= 1)
        if a is None:
            return False
        widths = tuple((int(self.rng.integers(0, 4)), int(self.rng.integers(0, 4))) for _ in self.shape(a))
        return self.assign(f"fnp.pad({{a}}, {widths}, constant_values={self.const()})", a=a)

    def op_cumsum(self) -> bool:
        a = self.pick(pred=lambda s: len(s) >= 1)
        if a is None:
            return False
        nd = len(self.shape(a))
        if self.chance(0.3):
            return self.assign(f"fnp.flip(fnp.cumsum(fnp.flip({{a}}, {nd - 1}), axis=-1), {nd - 1})", a=a)
        return self.assign(f"fnp.cumsum({{a}}, axis={int(self.rng.integers(-nd, nd))})", a=a)

    def op_softmax(self) -> bool:
        a = self.pick(pred=lambda s: len(s) >= 1)
        if a is None:
            return False
        nd = len(self.shape(a))
        ax = -1 if self.chance(0.6) else int(self.rng.integers(-nd, nd))
        fn = self.choice(["ft.nn.softmax", "ft.nn.log_softmax"])
        return self.assign(f"{fn}({{a}}, axis={ax})", a=a)

    def op_scan(self) -> bool:
        xs = self.pick(pred=lambda s: len(s) >= 1 and s[0] <= 24 and math.prod(s) <= 200_000)
        if xs is None:
            a = self.pick(pred=lambda s: len(s) >= 2 and s[0] > 24)
            if a is None or not self.assign(f"{{a}}[:{int(self.rng.integers(0, 25))}]", a=a):
                return False
            xs = self.created[-1]
        row = self.shape(xs)[1:]
        init = self.vars_of(pred=lambda s: s == row)
        init = self.choice(init) if init and self.chance(0.5) else self.new_input(row)
        k = next(self.counter)
        h = self.choice(["fnp.tanh(c * 0.5 + x)", "c * 0.9 + fnp.sin(x)", "c + x", "fnp.maximum(c, x)",
                         "c * x", "x", "c - fnp.mean(x)", "fnp.sqrt(fnp.abs(c) + 1.0) * x"])
        new_c = self.choice(["h", "x", "c + h", "h * 0.5"])
        y = self.choice(["h", "c", "h * 2.0", "fnp.sum(h)", "c * x"])
        carry, ys = self.fresh(), self.fresh()
        reverse = self.chance(0.3)
        code = (f"def body{k}(c, x):\n    h = {h}\n    return {new_c}, {y}\n"
                f"{carry}, {ys} = ft.lax.scan(body{k}, {init}, {xs}{', reverse=True' if reverse else ''})")
        return self.emit(code, [carry, ys], [init, xs])

    def op_cond(self) -> bool:
        a = self.pick()
        if a is None:
            return False
        r = self.rng.random()
        one, two = (self.choice(self.unary).replace("{c}", self.const()).format(a="t") for _ in range(2))
        if r < 0.7:
            pred = self.choice(["fnp.sum({a}) > 0.0", "fnp.mean({a}) > {c}", "fnp.max({a}) < 1.0"])
            if "max" in pred and 0 in self.shape(a):
                return False
            return self.assign(f"ft.lax.cond({pred.replace('{c}', self.const())}, lambda t: {one}, "
                               f"lambda t: {two}, {{a}})", a=a)
        n = int(self.rng.integers(0, 4))
        return self.assign(f"ft.lax.fori_loop(0, {n}, lambda i, t: {one}, {{a}})", a=a)

    def op_nn(self) -> bool:
        r = self.rng.random()
        if r < 0.3:
            a = self.pick(pred=lambda s: len(s) >= 1)
            if a is None:
                return False
            w = self.weight(self.shape(a)[-1:])
            if self.chance(0.7):
                return self.assign("ft.nn.rms_norm({a}, {w})", a=a, w=w)
            return self.assign("ft.nn.layer_norm({a}, {w}, {b})", a=a, w=w, b=self.weight(self.shape(a)[-1:]))
        if r < 0.65:
            return self.attention()
        a = self.pick(pred=lambda s: len(s) >= 1 and s[-1] >= 1)
        if a is None:
            return False
        red = self.choice(["mean", "sum", "none"])
        if self.chance(0.6):
            labels = self.new_input(self.shape(a)[:-1], "labels", self.shape(a)[-1])
            return self.assign(f"ft.nn.cross_entropy({{a}}, {{y}}, reduction='{red}')", a=a, y=labels)
        b = self.operand_like(self.shape(a))
        if self.shape(b) != self.shape(a):
            return False
        return self.assign(f"ft.nn.cross_entropy({{a}}, ft.nn.softmax({{b}}), reduction='{red}')", a=a, b=b)

    def attention(self) -> bool:
        T, S = (int(self.choice([1, 3, 8, 17, 32])) for _ in range(2))
        N, H = int(self.choice([1, 2, 4])), int(self.choice([1, 4, 8, 16, 32]))
        lead = (int(self.choice([2, 3])),) if self.chance(0.3) else ()
        qshape = lead + (T, N, H)
        src = self.vars_of(pred=lambda s: math.prod(s) == math.prod(qshape) and len(s) >= 1)
        if src and self.chance(0.6):
            if not self.assign(f"fnp.reshape({{a}}, {qshape})", a=self.choice(src)):
                return False
            q = self.created[-1]
        else:
            q = self.new_input(qshape)
        k = self.new_input(lead + (S, N, H)) if not (S == T and self.chance(0.3)) else q
        v = self.new_input(lead + (S, N, H))
        causal = self.chance(0.4)
        return self.assign(f"ft.nn.attention({{q}}, {{k}}, {{v}}, causal={causal})", q=q, k=k, v=v)

    def op_gather(self) -> bool:
        a = self.pick(pred=lambda s: len(s) >= 1 and s[0] >= 1)
        if a is None:
            return False
        shape = self.shape(a)
        m = int(self.choice([1, 5, 33, 200]))
        r = self.rng.random()
        if r < 0.4:
            return self.assign("{a}[{i}]", a=a, i=self.new_input((m,), "index", shape[0]))
        if r < 0.7:
            ax = int(self.rng.integers(len(shape)))
            if shape[ax] == 0:
                return False
            return self.assign(f"fnp.take({{a}}, {{i}}, axis={ax})", a=a, i=self.new_input((m,), "index", shape[ax]))
        ax = int(self.rng.integers(len(shape)))
        if shape[ax] == 0:
            return False
        ishape = tuple(m if d == ax else n for d, n in enumerate(shape))
        return self.assign(f"fnp.take_along_axis({{a}}, {{i}}, axis={ax})", a=a,
                           i=self.new_input(ishape, "index", shape[ax]))

    def op_broadcast(self) -> bool:
        a = self.pick()
        if a is None:
            return False
        shape = self.shape(a)
        r = self.rng.random()
        if r < 0.4:
            lead = (int(self.choice([1, 2, 3, 7])),)
            return self.assign(f"fnp.broadcast_to({{a}}, {lead + shape})", a=a)
        if r < 0.7:
            return self.assign(f"fnp.expand_dims({{a}}, {int(self.rng.integers(-len(shape) - 1, len(shape) + 1))})",
                               a=a)
        b = self.pick(pred=lambda s: len(s) == 1 and s[0] <= 600)
        if b is None or len(shape) != 1 or shape[0] > 600:
            return False
        return self.assign("{a}[:, None] * {b}[None, :]", a=a, b=b)

    def op_cumprod(self) -> bool:
        """A cumulative product along an axis of at most 64 (the reference multiplies step by
        step, in numpy's order, as the dtype's range decides: zeros after an overflow are NaN)."""
        a = self.pick(pred=lambda s: any(1 <= n <= 64 for n in s))
        if a is None:
            return False
        shape = self.shape(a)
        ax = self.choice([d for d, n in enumerate(shape) if 1 <= n <= 64])
        if self.chance(0.3):
            return self.assign(f"fnp.flip(fnp.cumprod(fnp.flip({{a}}, {ax}), axis={ax}), {ax})", a=a)
        return self.assign(f"fnp.cumprod({{a}}, axis={ax - len(shape) if self.chance(0.3) else ax})", a=a)

    def op_scatter(self) -> bool:
        """``x.at[i].set / add / mul / min / max(u)`` along the first axis; a ``set`` gets
        distinct indices (which of repeated ones wins is numpy's rule, not JAX's)."""
        a = self.pick(pred=lambda s: len(s) >= 1 and s[0] >= 1)
        if a is None:
            return False
        shape = self.shape(a)
        op = self.choice(_SCATTERS)
        m = int(self.choice([1, 3, 8, 33]))
        if op == "set":
            idx = self.new_input((min(m, shape[0]),), "unique", shape[0])
        else:
            idx = self.new_input((m,), "index", shape[0])
        if self.chance(0.3):
            return self.assign(f"fnp.asarray({{a}}).at[{{i}}].{op}({self.const()})", a=a, i=idx)
        u = self.operand_like(self.shape(idx) + shape[1:])
        return self.assign(f"fnp.asarray({{a}}).at[{{i}}].{op}({{u}})", a=a, i=idx, u=u)

    def op_on_inputs(self) -> bool:
        """A function whose edge cases need care, of inputs themselves (exact values over the
        dtype's whole range in extremes mode)."""
        names = [i.name for i in self.inputs if i.kind == "float"]
        a = self.choice(names)
        if self.chance(0.6):
            return self.assign(self.choice(_ON_INPUTS_UNARY), a=a)
        b = self.choice([n for n in names if self.shape(n) == self.shape(a)]) if self.chance(0.4) \
            else self.new_input(self.compatible_shape(self.shape(a)))
        return self.assign(self.choice(_ON_INPUTS_BINARY), a=a, b=b)

    # the op families and how often each is proposed (relative weights)
    _FAMILIES = ((op_unary, 18), (op_binary, 18), (op_compare, 7), (op_reduce, 14), (op_matmul, 6),
                 (op_reshape, 5), (op_transpose, 5), (op_flip, 4), (op_slice, 7), (op_concat, 4), (op_pad, 3),
                 (op_cumsum, 3), (op_softmax, 4), (op_scan, 3), (op_cond, 3), (op_nn, 5), (op_gather, 3),
                 (op_broadcast, 4))
    # added to float programs by either option, and by extremes
    _NEW_FAMILIES = ((op_cumprod, 4), (op_scatter, 5))
    _EXTREME_FAMILIES = ((op_on_inputs, 12),)
    # integer and bool programs
    _INT_FAMILIES = ((op_unary, 16), (op_binary, 16), (op_compare, 7), (op_reduce, 16), (op_cumsum, 4),
                     (op_cumprod, 4), (op_scatter, 8), (op_reshape, 4), (op_transpose, 4), (op_flip, 3),
                     (op_slice, 5), (op_concat, 3), (op_pad, 3), (op_gather, 3), (op_broadcast, 3))

    def generate(self) -> Program:
        self.new_input(self.main_shape())
        n_ops = int(self.rng.integers(2, 11))
        families = [op for op, _ in self.families]
        weights = np.array([w for _, w in self.families], float)
        tries = 0
        while len(self.stmts) < n_ops and tries < 60:
            tries += 1
            families[int(self.rng.choice(len(families), p=weights / weights.sum()))](self)
        outs = [n for n in self.created if n in self.avals][-1:] or [self.inputs[0].name]
        extra = [n for n in self.created if n not in outs]
        if extra and self.chance(0.4):
            outs.append(self.choice(extra))
        if not self.created:  # nothing traced: the identity
            self.assign("{a} * 1.0" if self.floating else "{a} * 1", a=self.inputs[0].name)
            outs = [self.created[-1]]
        batch = int(self.choice([1, 2, 3]))
        return Program(self.seed, self.index, self.dtype, list(self.inputs), list(self.stmts), outs, batch,
                       dict(self.avals), self.extremes).restricted(outs)


def _axes_of(spec: str, nd: int) -> tuple:
    if spec == "None":
        return tuple(range(nd))
    val = eval(spec)  # an int or a tuple of ints written by axis_spec
    return tuple(sorted({a % nd for a in ((val,) if isinstance(val, int) else val)})) if nd else ()


def _factor(rng, size: int) -> tuple:
    """A random shape of ``size`` elements (rank 1 to 4)."""
    if size == 0:
        return tuple(int(x) for x in rng.permutation([0] + [int(d) for d in rng.integers(1, 5, int(rng.integers(0, 3)))]))
    dims, rest = [], size
    for _ in range(int(rng.integers(0, 3))):
        divs = [d for d in (2, 3, 4, 5, 7, 8, 16, 32) if rest % d == 0]
        if not divs:
            break
        d = int(divs[int(rng.integers(len(divs)))])
        dims.append(d)
        rest //= d
    dims.append(rest)
    if rng.random() < 0.2:
        dims.insert(int(rng.integers(len(dims) + 1)), 1)
    return tuple(int(dims[i]) for i in rng.permutation(len(dims)))


def generate(seed: int, index: int, extremes: bool = False, dtypes: str = "float") -> Program:
    """Program ``index`` of ``seed`` with the given options (the same on every machine and run)."""
    return _Generator(seed, index, extremes, dtypes).generate()

