"""Exceptions that name the user's function and line, not the library's internals."""
from __future__ import annotations

import os
import sys

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))


def user_frame_description() -> str:
    """'in function `f` at file.py:12' for the innermost frame outside functrace."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not os.path.abspath(filename).startswith(_PKG_DIR) and not filename.startswith("<frozen"):
            return f"in function `{frame.f_code.co_name}` at {filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "(location unknown)"


def _describe_tracer(tracer) -> str:
    """A tracer's shape and dtype for messages, e.g. ``f32[3]``."""
    aval = getattr(tracer, "aval", None)
    return aval.str_short() if aval is not None else "value"


class FunctraceError(Exception):
    """Base class of functrace's own errors."""


_CONCRETIZATION_ADVICE = {
    "staged": "The value is only known when the compiled function runs (e.g. under ft.jit or "
              "ft.make_jaxpr), so Python control flow cannot depend on it. Use ft.lax.cond / "
              "ft.lax.while_loop for control flow, fnp.where for elementwise selection, or mark the "
              "argument static with static_argnums.",
    "batched": "Under ft.vmap the value holds one entry per batch member, so Python control flow "
               "(if, while, bool(), int()) cannot depend on it. Use fnp.where(cond, x, y) for "
               "elementwise selection, or ft.lax.cond / ft.lax.while_loop, which run per member.",
    "derivative": "The value carries a derivative (it depends on an input of ft.grad / ft.jvp / "
                  "ft.vjp) and a Python number cannot: the derivative through it would be silently "
                  "lost. Keep it an array (compute on it with functrace.numpy), or, if no derivative "
                  "should flow through it, convert ft.stop_gradient(x) instead.",
}


class ConcretizationError(FunctraceError, TypeError):
    """A traced value was needed as a concrete Python value (bool, int, float, numpy array).

    ``reason`` says why it has none: "staged" (only known when a compiled program runs),
    "batched" (one value per vmap batch member) or "derivative" (a number would drop it)."""

    def __init__(self, tracer, what: str, reason: str = "staged"):
        self.tracer = tracer
        self.reason = reason
        subject = "Traced value" if reason == "derivative" else "Abstract tracer value"
        super().__init__(
            f"{subject} {_describe_tracer(tracer)} used where a concrete value is needed ({what}) "
            f"{user_frame_description()}.\n{_CONCRETIZATION_ADVICE[reason]}")


class TracerArrayConversionError(FunctraceError, TypeError):
    """A traced value was turned into a numpy array, which would silently leave the trace."""

    def __init__(self, tracer):
        self.tracer = tracer
        super().__init__(
            f"A traced value {_describe_tracer(tracer)} was converted to a numpy array {user_frame_description()} "
            "(np.asarray, a numpy function, or a Python list of traced values in an operation). "
            "Under a transformation that would drop it from the trace: gradients through it would "
            "be zero and jit could not compile it. Use functrace.numpy on traced values "
            "(fnp.asarray, fnp.stack, fnp.sin, ...).")


class NotInFunctrace(FunctraceError, AttributeError, NotImplementedError):
    """A numpy function functrace.numpy does not implement: an AttributeError (``hasattr`` is
    False) that is also a NotImplementedError."""


class UnexpectedTracerError(FunctraceError):
    """A tracer escaped the transformation that created it."""


class ShapeError(FunctraceError, ValueError):
    """Incompatible shapes in an operation, reported with both shapes."""


class DtypeError(FunctraceError, TypeError):
    """A dtype the operation or transformation cannot handle."""


def function_name(f) -> str:
    """The name of the user's function ``f``, for messages."""
    return getattr(f, "__qualname__", None) or getattr(f, "__name__", None) or repr(f)


def check_callable(fun, transform: str) -> None:
    """Transformations take functions: say so at once, not at the first call."""
    if not callable(fun):
        raise TypeError(f"{transform} expects a function, got {type(fun).__name__} {fun!r:.60} "
                        f"{user_frame_description()}")


def argnum_tuple(argnums, transform: str) -> tuple:
    """``argnums`` (an int or a sequence of ints) as a tuple, checked."""
    items = argnums if isinstance(argnums, (tuple, list)) else (argnums,)
    if not items or not all(isinstance(a, int) and not isinstance(a, bool) for a in items):
        raise TypeError(f"{transform}: argnums must be an int or a non-empty sequence of ints, got "
                        f"{argnums!r} {user_frame_description()}")
    return tuple(items)
