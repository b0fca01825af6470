"""Runtime debugging: ``ft.debug.print`` and ``ft.debug.callback``, as ``jax.debug``'s.

Both bind ``debug_callback``, an *effectful* primitive (``Primitive.effectful``): it has no
outputs, and optimization passes keep it, in program order, though nothing reads its result.
It runs wherever the values are: eagerly at once, inside ``jit`` when the compiled program runs
(a host step on OpenCL, after the kernels making its operands).  As in JAX, differentiation
prints the primal values only (the primitive is not differentiable: its tangents and
cotangents are nothing), and under ``vmap`` the callback runs once per batch element, in order.
(The primitive and its rules: ``primitives/callbacks.py``.)
"""
from __future__ import annotations

import builtins
from typing import Any, Callable

import numpy as np

from .core import PY_SCALAR_TYPES, Tracer
from .core.errors import check_callable, user_frame_description
from .primitives.callbacks import debug_callback_p
from .transforms.staging import innermost_staging_trace
from .tree_util import tree_flatten, tree_unflatten

__all__ = ["print", "callback"]


def _is_value(x) -> bool:
    return isinstance(x, (Tracer, np.ndarray, np.generic, *PY_SCALAR_TYPES)) or (
        hasattr(x, "__array__") and hasattr(x, "shape") and hasattr(x, "dtype"))


def callback(fn: Callable, *args, ordered: bool = False, **kwargs) -> None:
    """Call ``fn(*args, **kwargs)`` with the runtime values (numpy arrays) of the array leaves of
    ``args`` and ``kwargs``, eagerly or from inside any transformation; returns None.
    (``ordered`` is JAX's option: here calls always happen in program order.)"""
    check_callable(fn, "debug.callback")
    leaves, tree = tree_flatten((args, kwargs))
    dynamic = [i for i, x in enumerate(leaves) if _is_value(x)]

    def call(*values):
        full = list(leaves)
        for i, v in zip(dynamic, values):
            full[i] = v
        a, k = tree_unflatten(tree, full)
        fn(*a, **k)

    call.__name__ = getattr(fn, "__name__", "callback")
    values = [leaves[i] for i in dynamic]
    staging = None if any(isinstance(x, Tracer) for x in values) else innermost_staging_trace()
    if staging is None:
        debug_callback_p.bind(*values, callback=call)
    else:  # values known when traced: the staged program calls back when it runs, every time
        staging.process_primitive(debug_callback_p, [staging.full_raise(x) for x in values], {"callback": call})


def print(fmt: str, *args, ordered: bool = False, **kwargs) -> None:  # noqa: A001 (jax.debug.print's name)
    """Print ``fmt.format(*args, **kwargs)`` with the runtime values of the arguments (``{}`` and
    ``{name}`` fields, as ``str.format``), eagerly or from inside jit, grad, vmap, ...

    Under ``vmap`` it prints once per batch element; under differentiation, the primal values.
    (``ordered`` is JAX's option: here prints always happen in program order.)"""
    if not isinstance(fmt, str):
        raise TypeError(f"ft.debug.print: the first argument is the format string, got {type(fmt).__name__} "
                        f"{user_frame_description()}")
    _check_format(fmt, args, kwargs)

    def show(*values: Any, **named: Any) -> None:
        builtins.print(fmt.format(*values, **named))

    show.__name__ = "print"
    callback(show, *args, **kwargs)


def _check_format(fmt: str, args: tuple, kwargs: dict) -> None:
    """Format once with stand-ins (zeros of each traced value's shape and dtype), so that a field
    or spec the arguments cannot fill fails here, naming the caller, not when the program runs."""
    leaves, tree = tree_flatten((args, kwargs))
    stand_ins = [np.broadcast_to(np.zeros((), x.dtype), x.shape) if isinstance(x, Tracer) else x for x in leaves]
    a, k = tree_unflatten(tree, stand_ins)
    try:
        fmt.format(*a, **k)
    except (IndexError, KeyError, ValueError, TypeError, AttributeError) as e:
        raise ValueError(f"ft.debug.print: the format string {fmt!r} does not fit its arguments "
                         f"({type(e).__name__}: {e}) {user_frame_description()}") from None
