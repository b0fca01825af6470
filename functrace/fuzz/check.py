"""Checking one program: run it by ``jit`` on OpenCL, ``jit`` on the numpy backend and eagerly
(its value, ``value_and_grad`` of a weighted sum of its outputs, ``vmap`` over a leading axis),
and by the other libraries of :mod:`.oracles` where asked, and compare each result with the
reference's bounds; a result element is wrong when it lies outside three times its bound, or
when its NaN / infinity differs where the bound says it is certain.  Reverse-mode gradients are
also checked against forward mode in the reference.
"""
from __future__ import annotations

import re
import traceback
from dataclasses import dataclass
from typing import Callable

import numpy as np

import functrace as ft

from ..transforms.staging import make_jaxpr
from .bounds import Bound, BoundInterpreter, summation_ulps
from .oracles import ORACLES, Unsupported
from .programs import InputSet, Program

IMPLS = ("eager", "numpy", "opencl")
KINDS = ("value", "grad", "vmap")


@dataclass
class Failure:
    """One disagreement: ``what`` is "values", "nan", "shape", "dtype" or "exception"; ``impl``
    one of ``IMPLS``, ``ORACLES`` or "jvp" (the reverse-mode rules against forward mode)."""
    program: Program
    kind: str
    impl: str
    input_set: int
    what: str
    detail: str
    minimal: Program | None = None

    @property
    def signature(self) -> str:
        prog = self.minimal or self.program
        ops = _ops_of(prog.stmts[-1].code) if prog.stmts else "identity"
        detail = self.detail.splitlines()[0][:90] if self.what == "exception" else ""
        return f"{self.kind}/{self.impl}/{self.what} [{prog.dtype.name}] {ops}" + (f": {detail}" if detail else "")


def _ops_of(code: str) -> str:
    last = code.splitlines()[-1].split("=", 1)[-1]
    names = re.findall(r"(?:fnp|ft\.nn|ft\.lax)\.(\w+)", last)
    if "@" in last:
        names.append("matmul")
    if "[" in last and not names:
        names.append("index")
    return ",".join(dict.fromkeys(names)) or last.strip()[:40]


def kind_function(prog: Program, ns: dict, kind: str) -> Callable | None:
    """What ``kind`` runs of the program namespace ``ns``: ``f``, ``value_and_grad`` of ``loss``, or
    ``vmap`` of ``f`` (None: nothing to differentiate or to batch)."""
    if kind == "value":
        return ns["f"]
    if kind == "vmap":
        if not any(s.batched for s in prog.inputs):
            return None
        return ft.vmap(ns["f"], in_axes=tuple(0 if s.batched else None for s in prog.inputs))
    if "loss" not in ns:
        return None
    return ft.value_and_grad(ns["loss"], argnums=tuple(prog.float_inputs))


def kind_args(kind: str, inputs: InputSet) -> list:
    """The arguments ``kind_function(..., kind)`` takes."""
    return {"value": inputs.args, "grad": inputs.args + inputs.weights, "vmap": inputs.batched}[kind]


def _to_reference(x) -> np.ndarray:
    x = np.asarray(x)
    return x.astype(np.float64) if x.dtype.kind == "f" else x


def reference(prog: Program, ns: dict, kind: str, inputs: InputSet, interp: BoundInterpreter) -> list:
    """Bounds of the leaves of ``kind``'s result: the IR traced at float64 and interpreted;
    ``vmap`` slice by slice through the unbatched program (so batching rules are checked too)."""
    if kind == "vmap":
        value = make_jaxpr(ns["f"])(*[_to_reference(a) for a in inputs.args])
        slices = [interp.run(value, [interp.exact(_to_reference(a[b] if s.batched else a))
                                     for s, a in zip(prog.inputs, inputs.batched)])
                  for b in range(prog.batch)]
        return [Bound(np.stack([s[j].v for s in slices]),
                      np.stack([np.broadcast_to(s[j].e, np.shape(s[j].v)) for s in slices]))
                for j in range(len(slices[0]))]
    fn = kind_function(prog, ns, kind)
    args = [_to_reference(a) for a in kind_args(kind, inputs)]
    closed = make_jaxpr(fn)(*args)
    return interp.run(closed, [interp.exact(a) for a in args])


def compare(got, want: Bound, aval) -> tuple[str, str] | None:
    """(what, detail) when ``got`` is outside ``want``'s bound, or has another shape or dtype."""
    got = np.asarray(got)
    if got.shape != tuple(aval.shape):
        return "shape", f"shape {got.shape}, expected {tuple(aval.shape)}"
    if got.dtype != aval.dtype:
        return "dtype", f"dtype {got.dtype}, expected {aval.dtype}"
    e = np.broadcast_to(want.e, got.shape)
    checked = np.isfinite(e)
    if got.dtype.kind != "f":  # exact, except by as much as the bound says (a count of comparisons
        # that rounding could flip is uncertain by the number of them)
        bad = checked & (got != want.v) & ~(np.abs(got.astype(np.float64) - np.asarray(want.v, np.float64)) <= e)
        if bad.any():
            i = tuple(int(j) for j in np.argwhere(bad)[0])
            return "values", f"{int(bad.sum())} of {got.size} elements differ, first at {i}: got {got[i]!r} want {want.v[i]!r}"
        return None
    g, w = got.astype(np.float64), np.asarray(want.v).astype(np.float64)
    nan = checked & (np.isnan(g) != np.isnan(w))
    with np.errstate(all="ignore"):
        off = checked & ~np.isnan(w) & ~((g == w) | (np.abs(g - w) <= 3 * e))
    if not (nan.any() or off.any()):
        return None
    what = "nan" if nan.any() and not (off & ~nan).any() else "values"
    bad = nan | off
    with np.errstate(all="ignore"):
        err = np.where(bad, np.abs(g - w) / np.maximum(e, 1e-300), 0)
    i = tuple(int(j) for j in np.unravel_index(int(np.nanargmax(np.where(np.isnan(err), np.inf, err))), got.shape)) \
        if got.ndim else ()
    return what, (f"{int(bad.sum())} of {got.size} elements outside the bound ({int(nan.sum())} NaN "
                  f"mismatches); worst at {i}: got {g[i]!r} want {w[i]!r} bound {float(e[i]):.3g}")


def _call(impl: str, fn: Callable, args: list, inputs: InputSet, jitted: dict, key):
    """``fn`` run by ``impl`` (compiled once per ``key``), with device arguments where ``inputs`` says
    so; another library's ``fn`` (:func:`.oracles.oracle_function`) is already what it runs."""
    if impl == "eager" or impl in ORACLES:
        return fn(*args)
    j = jitted.get(key)
    if j is None:
        j = jitted[key] = ft.jit(fn, backend=impl)
    if impl == "opencl" and inputs.on_device:
        args = [ft.device_put(a) for a in args]
    return j(*args)


def check_impl(prog: Program, fn: Callable, args: list, inputs: InputSet, jitted: dict, kind: str, impl: str,
               avals: list, want: list) -> tuple[str, str] | None:
    """(what, detail) when ``impl``'s result of ``fn`` (its ``kind`` of ``prog``) is not within
    ``want``'s bounds or raises (what "unsupported": another library lacks a function the
    program uses); ``jitted`` keeps the compiled functions between input sets."""
    try:
        got = ft.tree_util.tree_leaves(_call(impl, fn, args, inputs, jitted, (kind, impl)))
        got = [np.asarray(g) for g in got]
    except Unsupported as e:
        return "unsupported", str(e)
    except Exception as e:
        return "exception", "".join(traceback.format_exception_only(type(e), e)).strip()
    if len(got) != len(avals):
        return "shape", f"{len(got)} outputs, expected {len(avals)}"
    for j, (g, w, a) in enumerate(zip(got, want, avals)):
        found = compare(g, w, a)
        if found is not None:
            return found[0], f"output {j}: {found[1]}"
    return None


def directional_check(prog: Program, ns: dict, inputs: InputSet, grad: list, interp: BoundInterpreter):
    """Reverse mode against forward mode, in the reference: ``grad(loss) . t`` against
    ``jvp(loss)(t)`` for a random ``t`` (their rules are written separately; every
    implementation runs the same reverse-mode IR, so only this catches a wrong rule)."""
    fl = prog.float_inputs
    args = [_to_reference(a) for a in inputs.args]
    ws = [_to_reference(w) for w in inputs.weights]
    rng = np.random.default_rng([prog.seed, prog.index, 20_000])
    ts = [rng.standard_normal(args[i].shape).astype(prog.dtype).astype(np.float64) for i in fl]

    def directional(*a):
        xs, w, t = list(a[:len(args)]), a[len(args):len(args) + len(ws)], a[len(args) + len(ws):]

        def loss(*p):
            full = list(xs)
            for i, v in zip(fl, p):
                full[i] = v
            return ns["loss"](*full, *w)
        return ft.jvp(loss, tuple(xs[i] for i in fl), tuple(t))[1]

    try:
        closed = make_jaxpr(directional)(*args, *ws, *ts)
    except Exception as e:
        return "exception", "jvp: " + "".join(traceback.format_exception_only(type(e), e)).strip()
    with np.errstate(all="ignore"):
        j = interp.run(closed, [interp.exact(a) for a in args + ws + ts])[0]
        terms = [t * np.asarray(g.v, np.float64) for t, g in zip(ts, grad[1:])]
        d = sum(float(np.sum(x)) for x in terms)
        e = sum(float(np.sum(np.abs(t) * g.e)) for t, g in zip(ts, grad[1:])) + \
            summation_ulps(sum(t.size for t in ts)) * interp.u * sum(float(np.sum(np.abs(x))) for x in terms)
        jv, je = float(j.v), float(j.e)
        if not (np.isfinite(d) and np.isfinite(e) and np.isfinite(jv) and np.isfinite(je)):
            return None
        if abs(d - jv) <= 3 * (e + je):
            return None
    return "values", (f"grad . t = {d!r} (bound {e:.3g}) but jvp gives {jv!r} (bound {je:.3g}): the reverse-mode "
                      "and forward-mode rules disagree")

