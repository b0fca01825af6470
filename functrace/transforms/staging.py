"""Staging: tracing a Python function into a ``Jaxpr`` (``make_jaxpr``)."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .. import tree_util
from ..core import (
    ClosedJaxpr,
    Jaxpr,
    JaxprEqn,
    Literal,
    ShapedArray,
    Trace,
    Tracer,
    Var,
    current_phase,
    get_aval,
    new_main,
    trace_stack,
)
from ..core.errors import ConcretizationError, api_boundary
from ..dtypes import float0
from .optimize import dce


class StagingTracer(Tracer):
    """A value known only by its abstract value; it stands for an IR variable (or literal)."""

    __slots__ = ("ir_var",)

    def __init__(self, trace: Trace, var):
        self._trace = trace
        self.ir_var = var

    @property
    def aval(self) -> ShapedArray:
        return self.ir_var.aval

    def concrete_value(self, numeric: bool = False):
        if type(self.ir_var) is Literal:
            return self.ir_var.val
        raise ConcretizationError(self, "")


class JaxprBuilder:
    """Collects the equations and constants of one staged function."""

    def __init__(self):
        self.eqns: list[JaxprEqn] = []
        self.const_vars: list[Var] = []
        self.const_vals: list = []
        self.const_by_id: dict[int, tuple] = {}  # id(value) -> (value, its tracer)
        self.memo: dict = {}

    def build(self, in_vars: list, outs: list) -> ClosedJaxpr:
        jaxpr = Jaxpr(self.const_vars, in_vars, self.eqns, outs)
        return ClosedJaxpr(jaxpr, self.const_vals)


class StagingTrace(Trace):
    __slots__ = ()
    transform = "ft.jit / ft.make_jaxpr (staging)"

    def pure(self, val) -> StagingTracer:
        builder: JaxprBuilder = self.main.global_data
        seen = builder.const_by_id.get(id(val))
        if seen is not None:
            return seen[1]
        aval = get_aval(val)
        if aval.shape == () and not isinstance(val, Tracer):
            t = StagingTracer(self, Literal(val))
        else:
            var = Var(aval)
            builder.const_vars.append(var)
            # as in JAX, a captured array's value is the one it had when traced: a later in-place
            # change by the caller must not reach the compiled program (so a writable one is copied)
            builder.const_vals.append(val.copy() if isinstance(val, np.ndarray) and val.flags.writeable
                                      else val)
            t = StagingTracer(self, var)
            builder.const_by_id[id(val)] = (val, t)  # (val kept alive: its id stays its own)
        return t

    def process_primitive(self, primitive, tracers, params):
        in_vars = [t.ir_var for t in tracers]
        builder: JaxprBuilder = self.main.global_data
        memo = builder.memo
        # Trace-time CSE: primitives are pure, so the same op on the same variables is
        # recorded once (derivative rules often recompute e.g. cos(x) of the forward pass).
        # (effectful primitives are never shared: each call has its effect)
        key = None if primitive.effectful else (primitive, *in_vars, *params.items()) if params else (primitive, *in_vars)
        try:
            known = None if key is None else memo.get(key)
        except TypeError:  # unhashable params (sub-jaxprs): never shared
            key = known = None
        if known is not None:
            return known
        out_aval = primitive.abstract_eval(*[v.aval for v in in_vars], **params)
        if primitive.multiple_results:
            outs = [Var(a) for a in out_aval]
            builder.eqns.append(JaxprEqn(primitive, in_vars, params, outs, current_phase()))
            result = [StagingTracer(self, v) for v in outs]
        else:
            out = Var(out_aval)
            builder.eqns.append(JaxprEqn(primitive, in_vars, params, [out], current_phase()))
            result = StagingTracer(self, out)
        if key is not None:
            memo[key] = result
        return result


def innermost_staging_trace() -> "StagingTrace | None":
    """The trace of the innermost ``jit`` / ``make_jaxpr`` being traced in this thread, if any: an
    effect on values known at trace time belongs in the staged program, to happen when it runs."""
    for main in reversed(trace_stack()):
        if main.trace_type is StagingTrace:
            return main.trace
    return None


def check_output(x, fun_name: str | None, transform: str | None = None) -> None:
    """A transformed function's output leaf must be an array (or a Python scalar): say so, naming
    the function (and the transformation), rather than fail later as if an input were wrong."""
    if not isinstance(x, Tracer):
        if getattr(x, "dtype", None) == float0:
            raise NotImplementedError(
                f"{transform + ': ' if transform else ''}`{fun_name or 'a traced function'}` returns a float0 "
                "gradient (of an integer or boolean input, grad(..., allow_int=True)): functrace returns those "
                "outside jit only; under jit return the floating-point gradients alone")
        try:
            aval = get_aval(x)
        except TypeError:
            aval = None
        if aval is None or aval.dtype.kind not in "biufc":
            raise TypeError(f"{transform + ': ' if transform else ''}the output of `{fun_name or 'a traced function'}` "
                            "is not an array: it "
                            f"returned {type(x).__name__} {x!r:.60} (as a pytree leaf). Transformed functions "
                            "return arrays, Python scalars, or pytrees (tuples, lists, dicts) of them; "
                            "return other values from outside the transformed function.")


def trace_to_jaxpr(fun: Callable, in_avals: Sequence[ShapedArray], fun_name: str | None = None) -> ClosedJaxpr:
    """Stage ``fun`` (taking and returning flat lists of arrays) into a ClosedJaxpr; ``fun_name``
    names the user's function in errors about its tracers."""
    builder = JaxprBuilder()
    with new_main(StagingTrace, builder, fun_name) as main:
        trace = main.trace
        in_vars = [Var(a) for a in in_avals]
        outs = fun(*[StagingTracer(trace, v) for v in in_vars])
        for o in outs:
            check_output(o, fun_name)
        out_atoms = [trace.full_raise(o).ir_var for o in outs]
    # Constants that are lower-level tracers would escape; they are real inputs of the caller.
    return builder.build(in_vars, out_atoms)



@api_boundary
def make_jaxpr(fun: Callable, static_argnums: int | Sequence[int] = ()) -> Callable[..., ClosedJaxpr]:
    """``make_jaxpr(f)(*args)`` returns the IR of ``f`` specialised to the args' shapes and dtypes."""
    static = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)

    def staged(*args, **kwargs) -> ClosedJaxpr:
        dyn = [a for i, a in enumerate(args) if i not in static]
        leaves, in_tree = tree_util.tree_flatten(dyn)
        out_tree_box = []

        def flat_fun(*flat):
            it = iter(tree_util.tree_unflatten(in_tree, flat))
            full = [a if i in static else next(it) for i, a in enumerate(args)]
            out = fun(*full, **kwargs)
            out_leaves, out_tree = tree_util.tree_flatten(out)
            out_tree_box.append(out_tree)
            return out_leaves

        closed = trace_to_jaxpr(flat_fun, [get_aval(x) for x in leaves], getattr(fun, "__qualname__", None))
        closed = dce(closed)
        closed.in_tree, closed.out_tree = in_tree, out_tree_box[0]
        return closed

    return api_boundary(staged, wraps=fun)
