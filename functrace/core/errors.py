"""Exceptions that name the user's function and line, not the library's internals."""
from __future__ import annotations

import functools
import os
import sys
import types
from typing import Callable, TypeVar

import numpy as np

from .config import config

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # functrace/ (this is functrace/core/)


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


# --------------------------------------------------------------------------- traceback filtering
# An error raised through a public entry point (ft.grad, ft.jit, ft.vmap, ...) is shown as JAX
# shows it: functrace's own frames are removed from its traceback, so the last frame shown is the
# user's line (the failing operation in their function, or their call of the transformation).
# Only the outermost entry point filters (a nested call finds an enclosing entry point's frame
# on the stack), and only when an exception passes: on success an entry point costs a ``try``.
# The entry point re-raises with a bare ``raise``, which keeps the traceback ``with_traceback``
# set and adds no frame of its own, as from Python 3.11 (on 3.10 tracebacks stay whole).
# Type, message, ``__cause__`` and ``__context__`` stay; the chained exceptions lose
# functrace's frames too.

_F = TypeVar("_F", bound=Callable)
_BOUNDARY_CODES: set = set()  # the code objects of entry points' frames
_RERAISE_KEEPS_TRACEBACK = sys.version_info >= (3, 11)
_internal_files: dict = {}


def _is_internal(frame) -> bool:
    """Whether ``frame`` runs functrace's code (a module of the package, or a program it generated)."""
    filename = frame.f_code.co_filename
    internal = _internal_files.get(filename)
    if internal is None:
        internal = filename.startswith("<functrace") or os.path.abspath(filename).startswith(_PKG_DIR + os.sep)
        _internal_files[filename] = internal
    return internal


def _without_library_frames(tb):
    """The traceback ``tb`` without functrace's frames (None when only those)."""
    kept = []
    while tb is not None:
        if not _is_internal(tb.tb_frame):
            kept.append(tb)
        tb = tb.tb_next
    filtered = None
    for t in reversed(kept):
        filtered = types.TracebackType(filtered, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return filtered


def hide_library_frames(e: BaseException) -> None:
    """Drop functrace's frames from ``e``'s traceback (and its chain's) at the outermost entry point."""
    mode = config.traceback_filtering
    tb = e.__traceback__
    if mode == "off" or tb is None or (mode != "tracebackhide" and not _RERAISE_KEEPS_TRACEBACK):
        return
    frame = tb.tb_frame.f_back  # (tb starts at the entry point's own frame)
    while frame is not None:
        if frame.f_code in _BOUNDARY_CODES:
            return  # an enclosing entry point filters the whole traceback
        frame = frame.f_back
    seen: set = set()
    exc = e
    while exc is not None and id(exc) not in seen:  # the exception, then what it chains to
        seen.add(id(exc))
        if mode == "tracebackhide":  # pytest and IPython skip frames with this local
            t = exc.__traceback__
            while t is not None:
                if _is_internal(t.tb_frame):
                    try:
                        t.tb_frame.f_locals["__tracebackhide__"] = True
                    except Exception:  # a frame that takes no new local: shown
                        pass
                t = t.tb_next
        else:  # (an exception with no frame left shows its type and message alone)
            exc.with_traceback(_without_library_frames(exc.__traceback__))
        exc = exc.__cause__ if exc.__cause__ is not None else (
            None if exc.__suppress_context__ else exc.__context__)


def traceback_boundary(fun: _F) -> _F:
    """Register ``fun``, whose body does ``except Exception as e: hide_library_frames(e); raise``."""
    _BOUNDARY_CODES.add(fun.__code__)
    return fun


def api_boundary(fun: _F, wraps: Callable | None = None) -> _F:
    """``fun`` as an entry point whose errors show the user's frames only, named as ``wraps`` (or ``fun``)."""

    @functools.wraps(fun if wraps is None else wraps, updated=())
    def api_call(*args, **kwargs):
        try:
            return fun(*args, **kwargs)
        except Exception as e:
            hide_library_frames(e)
            raise

    _BOUNDARY_CODES.add(api_call.__code__)
    return api_call


def check_nans(primitive_name: str, value) -> None:
    """With ``debug_nans`` on: raise FloatingPointError when an operation produced a NaN."""
    arr = np.asarray(value)
    if arr.dtype.kind in "fc" and np.isnan(arr).any():
        raise FloatingPointError(f"NaN produced by primitive '{primitive_name}' {user_frame_description()} "
                                 "(ft.config.debug_nans is on)")
