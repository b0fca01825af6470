"""The core: abstract values, the IR, primitives, tracers and the trace stack.

Design (autodidax-style, kept small):

* ``ShapedArray`` is the abstract value (shape, dtype, weak_type) every tracer has.
* The IR is a ``Jaxpr``: typed ``Var`` inputs, constants, a list of ``JaxprEqn``
  (``outvars = primitive[params](invars)``) and outputs.  ``eval_jaxpr`` replays it
  through ``bind``, so replaying under any transformation transforms the IR.
* A ``Primitive`` is declared once (see ``primitives/``) and carries its shape rule,
  numpy implementation, derivative rules and batching rule.
* Transformations are ``Trace`` subclasses.  Each active transformation owns a
  ``MainTrace`` on its thread's trace stack with a unique *level*; ``bind`` routes an
  operation to the highest-level trace among its arguments, so tracers of nested
  transformations never mix ("perturbation confusion" cannot happen).  The trace stack and
  the phase tag are per thread: threads trace and differentiate independently.
"""
from __future__ import annotations

import itertools
import threading
from typing import Callable, Sequence

import numpy as np

from .config import config as _config
from .eager import as_eager
from .errors import (
    ConcretizationError,
    FunctraceError,
    TracerArrayConversionError,
    UnexpectedTracerError,
    check_nans,
    user_frame_description,
)
from .reports import html_table

# --------------------------------------------------------------------------- avals


class HasShape:
    """``ndim`` and ``size`` of anything with a ``shape`` tuple (abstract values, shape structs,
    device arrays)."""

    __slots__ = ()

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


class ShapedArray(HasShape):
    """Abstract value: what a tracer knows about an array without its contents."""

    __slots__ = ("shape", "dtype", "weak_type")

    def __init__(self, shape: tuple, dtype: np.dtype, weak_type: bool = False):
        self.shape = shape
        self.dtype = dtype
        self.weak_type = weak_type

    def str_short(self) -> str:
        return f"{_DTYPE_SHORT.get(self.dtype, self.dtype.name)}[{','.join(map(str, self.shape))}]"

    def __eq__(self, other) -> bool:
        return (isinstance(other, ShapedArray) and self.shape == other.shape
                and self.dtype == other.dtype and self.weak_type == other.weak_type)

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype, self.weak_type))

    def __repr__(self) -> str:
        return f"ShapedArray({self.str_short()}{', weak' if self.weak_type else ''})"


_DTYPE_SHORT = {np.dtype(k): v for k, v in [
    ("float64", "f64"), ("float32", "f32"), ("float16", "f16"), ("int64", "i64"),
    ("int32", "i32"), ("int8", "i8"), ("uint8", "u8"), ("bool", "bool"),
    ("complex128", "c128"), ("complex64", "c64")]}

_PY_SCALAR_DTYPE = {bool: np.dtype(bool), int: np.dtype(np.int64), float: np.dtype(np.float64),
                    complex: np.dtype(np.complex128)}
PY_SCALAR_TYPES = tuple(_PY_SCALAR_DTYPE)  # weakly typed when traced


def scalars_to_arrays(args) -> list:
    """Python scalars as 0-d arrays (numpy implementations and compiled programs take arrays)."""
    return [np.asarray(a) if type(a) in _PY_SCALAR_DTYPE else a for a in args]


def get_aval(x) -> ShapedArray:
    """Abstract value of a tracer, numpy array, numpy scalar or Python scalar."""
    if isinstance(x, Tracer):
        return x.aval
    t = type(x)
    if t in _PY_SCALAR_DTYPE:
        return ShapedArray((), _PY_SCALAR_DTYPE[t], True)
    if isinstance(x, (np.ndarray, np.generic)):
        return ShapedArray(x.shape, x.dtype, False)
    if hasattr(x, "__array__") and hasattr(x, "dtype") and hasattr(x, "shape"):
        return ShapedArray(tuple(x.shape), np.dtype(x.dtype), False)
    raise TypeError(f"{type(x).__name__} is not a valid array type for functrace "
                    f"(got {x!r:.80}); pass numpy arrays, Python scalars or pytrees of them")


def is_float_dtype(dtype: np.dtype) -> bool:
    return dtype.kind in "fc"


# --------------------------------------------------------------------------- IR


class Var:
    """An IR variable: an abstract value with an identity.  Names are given at print time."""

    __slots__ = ("aval",)

    def __init__(self, aval: ShapedArray):
        self.aval = aval


class Literal:
    """A scalar constant written inline in the IR."""

    __slots__ = ("val", "aval")

    def __init__(self, val):
        self.val = val
        self.aval = get_aval(val)


class JaxprEqn:
    """``out_vars = primitive[params](inputs)``; ``phase`` is "forward" or "backward" (reverse mode)."""

    __slots__ = ("primitive", "inputs", "params", "out_vars", "phase")

    def __init__(self, primitive: "Primitive", inputs: list, params: dict, out_vars: list,
                 phase: str = "forward"):
        self.primitive = primitive
        self.inputs = inputs
        self.params = params
        self.out_vars = out_vars
        self.phase = phase


class _TraceState(threading.local):
    """The tracing state of one thread: its stack of active transformations and phase tags."""

    def __init__(self):
        self.stack: list[MainTrace] = []
        self.phase: list[str] = ["forward"]


_state = _TraceState()


class phase:
    """Context manager tagging the equations staged inside it (the backward pass uses it)."""

    def __init__(self, name: str):
        self.name = name

    def __enter__(self):
        _state.phase.append(self.name)

    def __exit__(self, *exc):
        _state.phase.pop()
        return False


def trace_stack() -> list:
    """This thread's active transformations (``MainTrace``s), outermost first (read-only: staging
    looks up the innermost staging trace, named axes their binding vmap)."""
    return _state.stack


def current_phase() -> str:
    """The phase tag (``"forward"`` / ``"backward"``) of equations staged now in this thread."""
    return _state.phase[-1]


class Jaxpr:
    """A closed-over-nothing program: ``in_vars`` + ``const_vars`` -> ``outs``."""

    def __init__(self, const_vars: list, in_vars: list, eqns: list, outs: list):
        self.const_vars = const_vars
        self.in_vars = in_vars
        self.eqns = eqns
        self.outs = outs

    def __str__(self) -> str:
        return pp_jaxpr(self)

    __repr__ = __str__


class ClosedJaxpr:
    """A ``Jaxpr`` together with the values of its constants (what ``make_jaxpr`` returns)."""

    def __init__(self, jaxpr: Jaxpr, consts: list, in_tree=None, out_tree=None):
        self.jaxpr = jaxpr
        self.consts = consts
        self.in_tree = in_tree
        self.out_tree = out_tree

    @property
    def eqns(self) -> list:
        return self.jaxpr.eqns

    @property
    def in_avals(self) -> list:
        return [v.aval for v in self.jaxpr.in_vars]

    @property
    def out_avals(self) -> list:
        return [v.aval for v in self.jaxpr.outs]

    def __call__(self, *args):
        return eval_jaxpr(self.jaxpr, self.consts, *args)

    def __str__(self) -> str:
        return pp_jaxpr(self.jaxpr, self.consts)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        """The program, and a table of its constants: name, shape and dtype, and their values in short."""
        import html

        text = f"<pre>{html.escape(str(self))}</pre>"
        if not self.consts:
            return text
        rows = [(name, v.aval.str_short(), "(a traced value)" if isinstance(c, Tracer) else np.array2string(
                    np.asarray(c), threshold=8, edgeitems=2, max_line_width=80))
                for name, v, c in zip(_names(), self.jaxpr.const_vars, self.consts)]
        return f"<div>{text}{html_table(f'Constants ({len(rows)})', ['name', 'shape', 'value'], rows)}</div>"


def eval_jaxpr(jaxpr: Jaxpr, consts: Sequence, *args) -> list:
    """Run a jaxpr by binding each equation; under a transformation this transforms it."""
    env: dict = {}
    for v, x in zip(jaxpr.const_vars, consts):
        env[v] = x
    for v, x in zip(jaxpr.in_vars, args):
        env[v] = x
    for eqn in jaxpr.eqns:
        ins = [a.val if type(a) is Literal else env[a] for a in eqn.inputs]
        out = eqn.primitive.bind(*ins, **eqn.params)
        if eqn.primitive.multiple_results:
            for v, x in zip(eqn.out_vars, out):
                env[v] = x
        else:
            env[eqn.out_vars[0]] = out
    return [a.val if type(a) is Literal else env[a] for a in jaxpr.outs]


# --------------------------------------------------------------------------- printing


def _names():
    letters = "abcdefghijklmnopqrstuvwxyz"
    for n in itertools.count(1):
        for combo in itertools.product(letters, repeat=n):
            yield "".join(combo)


def _fmt_param(v) -> str:
    if isinstance(v, np.dtype):
        return v.name
    if isinstance(v, type) and issubclass(v, np.generic):
        return np.dtype(v).name
    if isinstance(v, Jaxpr):
        return "{ jaxpr }"
    if isinstance(v, ClosedJaxpr):
        return "{ jaxpr }"
    if callable(v):
        return getattr(v, "__name__", type(v).__name__)
    return repr(v)


def _fmt_literal(val) -> str:
    v = np.asarray(val)
    if v.dtype == bool:
        return str(bool(v))
    return f"{v.item()!r}:{_DTYPE_SHORT.get(v.dtype, v.dtype.name)}"


def _is_subprogram(v) -> bool:
    if isinstance(v, tuple) and v:
        return all(isinstance(s, (Jaxpr, ClosedJaxpr)) for s in v)
    return isinstance(v, (Jaxpr, ClosedJaxpr))


def pp_jaxpr(jaxpr: Jaxpr, consts: Sequence | None = None, indent: int = 0) -> str:
    """Readable text form, in the style of JAX's jaxprs."""
    names: dict = {}
    gen = _names()

    def name(a) -> str:
        if type(a) is Literal:
            return _fmt_literal(a.val)
        if a not in names:
            names[a] = next(gen)
        return names[a]

    def decl(v) -> str:
        return f"{name(v)}:{v.aval.str_short()}"

    pad = " " * indent
    lines = [f"{pad}{{ lambda {' '.join(map(decl, jaxpr.const_vars))}"
             f"{'; ' if jaxpr.const_vars else ''}{' '.join(map(decl, jaxpr.in_vars))}. let"]
    for eqn in jaxpr.eqns:
        params = ", ".join(f"{k}={_fmt_param(v)}" for k, v in eqn.params.items() if not _is_subprogram(v))
        lhs = " ".join(map(decl, eqn.out_vars))
        rhs = f"{eqn.primitive.name}{'[' + params + ']' if params else ''} {' '.join(map(name, eqn.inputs))}"
        lines.append(f"{pad}    {lhs + ' = ' if lhs else ''}{rhs.rstrip()}")  # (no outputs: an effect)
        for k, v in eqn.params.items():
            subs = v if isinstance(v, tuple) and v and all(isinstance(s, (Jaxpr, ClosedJaxpr)) for s in v) else (v,)
            for j, sub in enumerate(subs):
                if isinstance(sub, (Jaxpr, ClosedJaxpr)):
                    lines.append(f"{pad}      {k}{f'[{j}]' if len(subs) > 1 else ''}=")
                    lines.append(pp_jaxpr(sub.jaxpr if isinstance(sub, ClosedJaxpr) else sub, None, indent + 8))
    outs = " ".join(map(name, jaxpr.outs))
    lines.append(f"{pad}  in ({outs}) }}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- primitives


def _eager_result(out):
    """An eager primitive's output as an ``EagerArray``: a Python scalar an implementation passed
    through (a branch returning 1.0) is an array too."""
    return as_eager(np.asarray(out) if type(out) in PY_SCALAR_TYPES else out)


class Primitive:
    """One operation of the IR.  Rules are attached where it is declared (``functrace/primitives/``).

    * ``abstract_eval(*avals, **params) -> aval`` (shape/dtype rule)
    * ``impl(*arrays, **params) -> array`` (numpy reference implementation)
    * ``jvp`` / ``vjp``: per-argument derivative rules (see ``transforms/autodiff.py``)
    * ``batch(vals, dims, **params) -> (val, dim)`` (see ``transforms/batching.py``)

    OpenCL lowerings are registered apart, keyed by the primitive (``backends/opencl/lowerings.py``).

    ``effectful``: the primitive does something besides computing its outputs (a debug print, a
    callback, an MPI collective).  Its equations are never removed by dead-code elimination,
    merged by CSE or constant-folded, keep their program order relative to each other, and run
    as host steps on OpenCL.
    """

    effectful = False

    def __init__(self, name: str, multiple_results: bool = False):
        self.name = name
        self.multiple_results = multiple_results
        self.abstract_eval: Callable | None = None
        self.impl: Callable | None = None
        self.jvp: Callable | None = None
        self.vjp: Callable | None = None
        self.batch: Callable | None = None
        # whole-primitive rules, for primitives that hold sub-programs (control flow, custom rules):
        # jvp_rule(primals, tangents, **params) -> (outs, tangents_out)  (None tangent = zero)
        # vjp_rule(primals, needs_ct, **params) -> (outs, backward), backward(cts_out) -> cts_in
        self.jvp_rule: Callable | None = None
        self.vjp_rule: Callable | None = None
        self.elementwise = False  # numpy-broadcasting elementwise op (fusable, simplifiable)
        # False: its outputs never carry a derivative (comparisons, logic, indices, piecewise
        # constants, stop_gradient); derivative rules are then neither needed nor looked up
        self.differentiable = True
        # a call whose result is its body's (custom rules, checkpoint): the name of the param
        # holding that ClosedJaxpr, so a backend may inline it (``optimize.inline_calls``)
        self.inline_body: str | None = None
        # binding it once on the operands of two consecutive equations with equal params gives both
        # equations' results (``psum``): the ``merge_psums`` pass joins such equations
        self.merges_consecutive = False
        # a switch over sub-programs (``cond``): the param holding its branches, the first operand
        # choosing one (clamped); constant folding inlines the branch a known index takes
        self.branches_param: str | None = None

    def __repr__(self) -> str:
        return self.name

    def _raise_shape_rule_error(self, arrays: list, params: dict) -> None:
        """After numpy rejected an eager call: raise what the shape rule says of it (a
        ``ShapeError`` naming the user's function, as under ``jit``), if it says anything."""
        if self.abstract_eval is None:
            return
        try:
            self.abstract_eval(*map(get_aval, arrays), **params)
        except FunctraceError as e:
            raise e from None

    def bind(self, *args, **params):
        """Apply the primitive: eagerly on arrays, or through the innermost active transformation."""
        top = None
        for x in args:
            if isinstance(x, Tracer):
                t = x._trace
                if top is None or t.level > top.level:
                    top = t
        if top is None:
            arrays = scalars_to_arrays(args)
            try:
                out = self.impl(*arrays, **params)
            except ValueError:
                self._raise_shape_rule_error(arrays, params)  # the error jit would give, if the rule has one
                raise
            if _config.debug_nans:
                for o in (out if self.multiple_results else (out,)):
                    check_nans(self.name, o)
            # eager results carry JAX's ``.at`` (core/eager.py says why a numpy subclass)
            return [_eager_result(o) for o in out] if self.multiple_results else _eager_result(out)
        if not top.main.alive:
            raise leaked_tracer_error(top.main, f"'{self.name}'")
        return top.process_primitive(
            self, [x if isinstance(x, Tracer) and x._trace is top else top.full_raise(x, self) for x in args], params)


# --------------------------------------------------------------------------- traces


class MainTrace:
    """One active transformation on the trace stack; ``trace`` is its (single) Trace object;
    ``fun_name`` names the function it transforms (for errors about its tracers)."""

    __slots__ = ("level", "trace_type", "global_data", "alive", "trace", "fun_name")

    def __init__(self, level: int, trace_type: type, global_data=None, fun_name: str | None = None):
        self.level = level
        self.trace_type = trace_type
        self.global_data = global_data
        self.alive = True
        self.trace = trace_type(self)
        self.fun_name = fun_name


def leaked_tracer_error(main: MainTrace, used_in: str) -> UnexpectedTracerError:
    """The error for a tracer of the finished transformation ``main`` used again."""
    origin = f"`{main.fun_name}`" if main.fun_name else "a function"
    return UnexpectedTracerError(
        f"A leaked tracer was used in {used_in} {user_frame_description()}: it was created while "
        f"{main.trace_type.transform} traced {origin}, which has finished. A leaked tracer is a value "
        "computed inside a transformed function that escaped it (stored in a global, a list, an "
        "object attribute or a closure) and was used after the transformation returned: outside it "
        f"the value does not exist. Return the value from {origin} as an output instead, and pass it "
        "back in as an argument where it is needed.")


class new_main:
    """Context manager pushing a new transformation level onto this thread's trace stack."""

    def __init__(self, trace_type: type, global_data=None, fun_name: str | None = None):
        self.stack = _state.stack
        self.main = MainTrace(len(self.stack), trace_type, global_data, fun_name)

    def __enter__(self) -> MainTrace:
        self.stack.append(self.main)
        return self.main

    def __exit__(self, *exc):
        self.stack.pop()
        self.main.alive = False
        return False


class Trace:
    """A view of a transformation level; subclasses implement ``pure``/``process_primitive``."""

    __slots__ = ("main", "level")
    transform = "a transformation"  # for messages: which API made this trace

    def __init__(self, main: MainTrace):
        self.main = main
        self.level = main.level

    def full_raise(self, val, primitive: Primitive | None = None):
        """Wrap ``val`` as a tracer of this trace (arrays and lower-level tracers are lifted);
        ``primitive``, the operation it is an operand of, is named in errors."""
        if isinstance(val, Tracer):
            if val._trace is self:
                return val
            if not val._trace.main.alive:
                raise leaked_tracer_error(val._trace.main, f"'{primitive.name}'" if primitive else "an operation")
            if val._trace.level < self.level:
                return self.pure(val)
            raise UnexpectedTracerError(
                f"A tracer of {val._trace.transform} (level {val._trace.level}) reached a "
                f"{self.transform} trace of the same or a lower level {user_frame_description()}: it "
                "belongs to a transformation that is not enclosing this one (e.g. of another thread).")
        return self.pure(val)

    def pure(self, val):
        raise NotImplementedError

    def process_primitive(self, primitive: Primitive, tracers: list, params: dict):
        raise NotImplementedError


class Tracer:
    """Base class of all tracers; supports numpy-style operators via ``functrace.numpy``."""

    __slots__ = ("_trace",)
    __array_priority__ = 1000

    @property
    def aval(self) -> ShapedArray:
        raise NotImplementedError

    def concrete_value(self, numeric: bool = False):
        """The concrete numpy value, when this trace knows it; else raise ConcretizationError.

        ``numeric``: the value is wanted as a number (float(), .item(), ...) rather than for
        control flow, so a value that carries a derivative raises too (a number would drop it)."""
        raise ConcretizationError(self, "")

    # shape attributes
    @property
    def shape(self) -> tuple:
        return self.aval.shape

    @property
    def dtype(self) -> np.dtype:
        return self.aval.dtype

    @property
    def ndim(self) -> int:
        return len(self.aval.shape)

    @property
    def size(self) -> int:
        return self.aval.size

    def __len__(self) -> int:
        if not self.aval.shape:
            raise TypeError("len() of unsized object (a scalar tracer)")
        return self.aval.shape[0]

    def __iter__(self):
        if not self.aval.shape:
            raise TypeError("iteration over a 0-d tracer")
        return (self[i] for i in range(self.aval.shape[0]))

    # Conversion to Python values needs the concrete value. bool() and int() (and indexing) serve
    # Python control flow and are piecewise constant, so a derivative through them is zero;
    # float(), complex(), .item() and .tolist() would silently drop a derivative, so they refuse one.
    def __bool__(self):
        return bool(self._concrete("bool()"))

    def __int__(self):
        return int(self._concrete("int()"))

    def __float__(self):
        return float(self._concrete("float()", numeric=True))

    def __complex__(self):
        return complex(self._concrete("complex()", numeric=True))

    def __index__(self):
        if self.aval.dtype.kind not in "iub":
            raise TypeError(f"only integer tracers can be used as an index, got {self.aval.str_short()}")
        return int(self._concrete("index"))

    def __array__(self, dtype=None, copy=None):
        raise TracerArrayConversionError(self)  # as in JAX: numpy would silently leave the trace

    def _concrete(self, what: str, numeric: bool = False):
        if not self._trace.main.alive:
            raise leaked_tracer_error(self._trace.main, what)
        try:
            return self.concrete_value(numeric)
        except ConcretizationError as e:
            raise ConcretizationError(self, what, e.reason) from None

    def item(self):
        return self._concrete(".item()", numeric=True).item()

    def tolist(self):
        return np.asarray(self._concrete(".tolist()", numeric=True)).tolist()

    def __hash__(self):
        raise TypeError("functrace tracers are unhashable")

    def __repr__(self) -> str:
        return f"{type(self).__name__}<{self.aval.str_short()}>"
