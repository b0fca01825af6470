"""Sub-programs of higher-order primitives (control flow, custom derivative rules, checkpoints:
``primitives/control.py``, ``primitives/custom_calls.py``): a Python function staged into a closed
jaxpr, its captured values hoisted into inputs, and the sub-program run; with the small list
helpers their rules share."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..backends.numpy_backend import NumpyExecutable
from ..core import ClosedJaxpr, Jaxpr, Tracer, eval_jaxpr, get_aval
from ..primitives import basic as P
from .optimize import dce
from .staging import trace_to_jaxpr


def run_subprogram(closed: ClosedJaxpr, args: Sequence) -> list:
    """Evaluate a sub-program (compiled once for the numpy backend when all inputs are arrays)."""
    if any(isinstance(a, Tracer) for a in args):
        return eval_jaxpr(closed.jaxpr, closed.consts, *args)
    exe = getattr(closed, "_numpy_exe", None)
    if exe is None:
        exe = closed._numpy_exe = NumpyExecutable(closed)
    return exe(*args)


def stage_subprogram(fun: Callable, in_avals: Sequence, fun_name: str | None = None) -> ClosedJaxpr:
    """Trace ``fun`` (flat lists in and out) into a sub-program, without dead equations.

    Sub-programs built by derivative and batching rules often contain work nothing reads (e.g. the forward
    half of ``vjp_of_closed`` where the backward pass does not need it); the jit optimizer
    does not look inside sub-programs, so dead code is dropped here, where they are made.
    ``fun_name``: the user's function, for errors."""
    return dce(trace_to_jaxpr(fun, in_avals, fun_name))


def hoist_consts(closed: ClosedJaxpr) -> tuple[ClosedJaxpr, list]:
    """Turn a traced function's captured values into leading inputs: returns (the program
    taking [*captured, *inputs], the captured values)."""
    j = closed.jaxpr
    return ClosedJaxpr(Jaxpr([], j.const_vars + j.in_vars, j.eqns, j.outs), []), list(closed.consts)


def avals_of(xs) -> list:
    """The abstract values of ``xs``."""
    return [get_aval(x) for x in xs]


def as_operand(x):
    """``x`` as a tracer or a numpy array (Python scalars and lists become arrays)."""
    return x if isinstance(x, Tracer) or isinstance(x, np.ndarray) else np.asarray(x)


def zeros_for_none(ts, xs):
    """Tangents or cotangents with ``None`` (a symbolic zero) made explicit zeros like ``xs``."""
    return [P.zeros_like(x) if t is None else t for t, x in zip(ts, xs)]


def split3(xs, a, b):
    """``xs`` cut into its first ``a``, next ``b`` and remaining items."""
    return list(xs[:a]), list(xs[a:a + b]), list(xs[a + b:])
